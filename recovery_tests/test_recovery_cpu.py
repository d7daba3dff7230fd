"""The CPU tier: real ft_launcher (every installed NVRx generation), real kills and hangs,
real async checkpoints reloaded with optimizer state, judged by the same verdict code as
`nvrx-qual verify`. Each criterion of each fault is its own test id, so a failure names
the criterion, the fault and the launcher version."""

from __future__ import annotations

import pytest

from fixtures.runs import Scenario, explain, launches
from harness.judge.criteria import CHECK_IDS, FAIL, NOT_APPLICABLE, OPTIMIZER_STATE, PASS
from harness.judge.criteria import LAUNCHER_IDENTITY, LOSS_CONTINUITY, STATE_EQUIVALENCE

pytestmark = pytest.mark.e2e

FAULTS = ("kill", "hang", "none")
CHECKS = (*CHECK_IDS, LOSS_CONTINUITY, STATE_EQUIVALENCE)
BASELINE_CHECKS = (LOSS_CONTINUITY, STATE_EQUIVALENCE)  # a run without a fault has no baseline of its own
FAULT_SPECIFIC = {"pre_fault_checkpoint", "replacement_cycle", "optimizer_reload", OPTIMIZER_STATE, *BASELINE_CHECKS}


def scenario(fault: str, nvrx_target, **kw) -> Scenario:
    baseline = None if fault == "none" else Scenario("none", nvrx_target)
    return Scenario(fault, nvrx_target, baseline=baseline, **kw)



LAUNCHES = launches(lambda fault, nvrx_target: scenario(fault, nvrx_target))


@pytest.mark.parametrize(("fault", "check"), [(f, c) for f in FAULTS for c in CHECKS
                                               if not (f == "none" and c in BASELINE_CHECKS)])
@LAUNCHES
def test_reference_recovers(fault, check, nvrx_target, scenarios):
    outcome = scenarios.outcome(scenario(fault, nvrx_target))
    expected = NOT_APPLICABLE if fault == "none" and check in FAULT_SPECIFIC else PASS
    assert outcome.verdict.criterion(check).status == expected, explain(outcome, check)


@pytest.mark.parametrize("fault", FAULTS)
@LAUNCHES
def test_reference_run_qualifies_with_latency_split(fault, nvrx_target, scenarios, record_property):
    outcome = scenarios.outcome(scenario(fault, nvrx_target))
    m = outcome.verdict.metrics
    for key, value in m.to_json().items():
        if isinstance(value, (int, float)) or value is None:
            record_property(key, value)
    assert outcome.verdict.qualified, outcome.run_dir
    assert outcome.launch.launcher_exit_code == 0 and outcome.launch.stopped_early is None
    if fault == "none":
        assert m.failure_to_first_step_s is None
        return
    # Every phase was measured from real timestamps, and they add up to the headline.
    parts = (m.detection_s, m.restart_s, m.restore_s, m.first_step_s)
    assert None not in parts and m.failure_to_first_step_s is not None, m
    assert abs(sum(parts) - m.failure_to_first_step_s) < 0.01
    assert m.lost_iterations is not None and m.lost_iterations >= 0


@pytest.mark.parametrize("fault", FAULTS)
@LAUNCHES
def test_reference_run_draws_its_timeline(fault, nvrx_target, scenarios):
    """The picture of a real run: one curve per cycle, and for a fault every recovery moment."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    outcome = scenarios.outcome(scenario(fault, nvrx_target))
    shown = outcome.verdict.picture
    assert (outcome.run_dir / "timeline.png").stat().st_size > 20_000, outcome.run_dir
    assert "](timeline.png)" in (outcome.run_dir / "report.md").read_text()
    assert [c.cycle for c in shown.curves] == ([0] if fault == "none" else [0, 1])
    expected = () if fault == "none" else ("injected", "detected", "started", "loaded", "first_step")
    assert tuple(m.key for m in shown.moments) == expected
    assert shown.checkpoints_committed >= 2


# The negative scenario breaks the workload's restore, which no launcher touches, and the verdict
# judges it the same way under every launcher: one launch, under the newest launcher
# (docs/testing.md, the launch budget).
def no_load_optim(target) -> Scenario:
    return scenario("kill", target, name=f"no-load-optim-{target.version}", workload_args=("--no-load-optim",),
                    fail_fast=False, expect_qualified=False)


@launches(lambda one_launcher: no_load_optim(one_launcher))
def test_no_load_optim_is_caught(one_launcher, scenarios):
    """The restored workers skip the optimizer state: optimizer_reload, loss continuity and the
    end state fail while the launcher-side criteria still pass. No early stop, to show the whole run."""
    outcome = scenarios.outcome(no_load_optim(one_launcher))
    statuses = {c.id: c.status for c in outcome.verdict.criteria}
    assert statuses == {"pre_fault_checkpoint": PASS, "replacement_cycle": PASS, "optimizer_reload": FAIL,
                        "later_checkpoint": PASS, "clean_finish": PASS, OPTIMIZER_STATE: FAIL,
                        LOSS_CONTINUITY: FAIL, STATE_EQUIVALENCE: FAIL, LAUNCHER_IDENTITY: PASS}, outcome.run_dir
    assert "--no-load-optim" in outcome.verdict.criterion("optimizer_reload").detail
    assert not outcome.verdict.qualified


