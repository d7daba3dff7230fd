"""The fault matrix on the CPU reference workload: faults at the moments real jobs die, and
the restart loop NVRx must stop. Every cell is one real launch (shared by its tests through the
scenario fixtures) on the newest NVRx found, with its expected outcome declared here and judged
by the same criteria as `nvrx-qual verify`. Each criterion of each cell is its own test id; a
cell whose correct result is "not qualified" carries `expected-negative` in its id.

How each cell is shown to fail when the behaviour it guards breaks:
- in-save: `test_loading_the_partial_directory_fails_optimizer_reload` replays the real run with
  the replacement pointed at the partial `iter_*` directory, and
  `test_in_save_fault_that_came_after_the_commit_fails` with the save it hit already committed;
- in-restore: `test_in_restore_without_the_first_failure_recorded_fails` replays the run without
  fault 1's failure (one restart for its two faults is refused before launch: spec's
  _check_max_restarts, recovery_tests/test_error_names.py; the verdict of a run directory whose
  budget ran out: test_campaign.py's test_a_restart_budget_that_runs_out_is_a_named_not_qualified);
- last-iteration: `test_last_iteration_replacement_that_trains_again_fails` replays the run with
  a replacement that started over;
- restart loop: the `loop-runs-on` cell raises the no-progress limit so the loop runs until
  --max-restarts, and loop_stopped must fail.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field

import pytest

from pytest_nvrx_qual.runs import Scenario, explain
from fixtures.launching import launches
from harness.report import verify
from harness.judge.criteria import CHECK_IDS, FAIL, LAUNCHER_IDENTITY, LOOP_STOPPED, LOSS_CONTINUITY, NOT_APPLICABLE
from harness.judge.criteria import OPTIMIZER_STATE, PASS, STATE_EQUIVALENCE

pytestmark = pytest.mark.e2e

NA = NOT_APPLICABLE
# Every recovery is judged against the shared uninterrupted baseline of its configuration
# (--baseline auto, the reference workload's default); a restart-loop plan gets none.
ALL_PASS = {**{c: PASS for c in CHECK_IDS}, LOSS_CONTINUITY: PASS, STATE_EQUIVALENCE: PASS}
EXPECTED_NEGATIVE = "expected-negative"


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: the fault, its moment, the knobs, and the verdict it must get."""

    name: str
    fault: str
    fault_at: str
    expected: dict[str, str]  # criterion id -> status
    knobs: tuple[tuple[str, object], ...] = ()
    details: dict[str, str] = field(default_factory=dict)  # criterion id -> text its detail must hold

    @property
    def expect_qualified(self) -> bool:
        return all(s in (PASS, NA) for s in self.expected.values())

    @property
    def id(self) -> str:
        return self.name if self.expect_qualified else f"{self.name}[{EXPECTED_NEGATIVE}]"


# No replacement loaded a checkpoint: nothing restored to check, nothing committed after it.
LOOP_NA = {"optimizer_reload": NA, "later_checkpoint": NA, "clean_finish": NA, OPTIMIZER_STATE: NA}
MATRIX = (
    Cell("kill-rank0-in-save", "kill", "in-save", ALL_PASS, knobs=(("fault_rank", 0),),
         details={"pre_fault_checkpoint": "the save of iteration 10 was in flight"}),
    Cell("term-rank0-after-commit", "term", "after-commit", ALL_PASS, knobs=(("fault_rank", 0),)),
    Cell("kill-in-restore", "kill", "in-restore", ALL_PASS,
         details={"replacement_cycle": "failures of all 2 injected faults", "clean_finish": "exactly 2 injections"}),
    # nothing is committed after the restore of the final checkpoint: optimizer_state has no record to
    # read, loss_continuity no loss to compare; the end state is the final checkpoint, equal to the baseline's
    Cell("kill-last-iteration", "kill", "last-iteration", {**ALL_PASS, OPTIMIZER_STATE: NA, LOSS_CONTINUITY: NA},
         details={"later_checkpoint": "Nothing was left to train"}),
    Cell("poison-loop-stopped", "poison", "after-commit",
         {"pre_fault_checkpoint": PASS, "replacement_cycle": PASS, **LOOP_NA, LOOP_STOPPED: PASS,
          LAUNCHER_IDENTITY: PASS},
         knobs=(("max_no_progress_cycles", 2), ("max_restarts", 5)),
         details={LOOP_STOPPED: "with exit 93: the corrupt file is"}),
    Cell("poison-loop-runs-on", "poison", "after-commit",
         {"pre_fault_checkpoint": PASS, "replacement_cycle": PASS, **LOOP_NA, LOOP_STOPPED: FAIL,
          LAUNCHER_IDENTITY: PASS},
         knobs=(("max_no_progress_cycles", 10), ("max_restarts", 2)),
         details={LOOP_STOPPED: "looped until --max-restarts ran out"}),
)
CELLS = {c.name: c for c in MATRIX}


def scenario_of(cell: Cell, target) -> Scenario:
    return Scenario(cell.fault, target, name=f"matrix-{cell.name}-nvrx{target.version}",
                    knobs=(("fault_at", cell.fault_at), *cell.knobs),
                    fail_fast=cell.fault != "poison", expect_qualified=cell.expect_qualified)



@pytest.mark.parametrize(("cell", "check"), [(c, k) for c in MATRIX for k in c.expected],
                         ids=[f"{c.id}-{k}" for c in MATRIX for k in c.expected])
@launches(lambda cell, newest_launcher: scenario_of(cell, newest_launcher))
def test_matrix_criterion(cell, check, newest_launcher, scenarios):
    outcome = scenarios.outcome(scenario_of(cell, newest_launcher))
    c = outcome.verdict.criterion(check)
    assert c.status == cell.expected[check], explain(outcome, check)
    if check in cell.details:
        assert cell.details[check] in c.detail, explain(outcome, check)


@pytest.mark.parametrize("cell", MATRIX, ids=[c.id for c in MATRIX])
@launches(lambda cell, newest_launcher: scenario_of(cell, newest_launcher))
def test_matrix_verdict_is_the_expected_one(cell, newest_launcher, scenarios):
    """The whole verdict: exactly the declared criteria, qualified as declared, the markers as planned."""
    outcome = scenarios.outcome(scenario_of(cell, newest_launcher))
    # the verdict's own order is the registry's (test_criteria); here: exactly the declared ones
    assert sorted(c.id for c in outcome.verdict.criteria) == sorted(cell.expected), outcome.run_dir
    assert outcome.verdict.qualified == cell.expect_qualified, outcome.run_dir
    planned = 2 if cell.fault_at == "in-restore" else 1
    names = ["fault_injected.json", "fault_injected.2.json"][:planned]
    assert sorted(p.name for p in outcome.run_dir.glob("fault_injected*.json")) == sorted(names), outcome.run_dir
    records = [json.loads((outcome.run_dir / name).read_text()) for name in names]
    assert [r["fault_at"] for r in records] == (["after-commit", "in-restore"] if planned == 2 else [cell.fault_at])
    if cell.fault_at == "in-save":
        (record,) = records
        assert record["iteration"] > record["committed_iteration"] > 0, record
    if cell.fault == "poison":
        assert outcome.launch.launcher_exit_code == (93 if cell.expect_qualified else 1), outcome.run_dir


@launches(lambda newest_launcher: scenario_of(CELLS["kill-rank0-in-save"], newest_launcher))
def test_loading_the_partial_directory_fails_optimizer_reload(newest_launcher, scenarios, tmp_path):
    """Replay of the real in-save run with the replacement pointed at the partial directory (the
    loader bug of Megatron-Bridge PR #5964): optimizer_reload must fail and name that directory."""
    outcome = scenarios.outcome(scenario_of(CELLS["kill-rank0-in-save"], newest_launcher))
    marker = json.loads((outcome.run_dir / "fault_injected.json").read_text())
    partial, committed = marker["iteration"], marker["committed_iteration"]
    replay = tmp_path / "replay"
    shutil.copytree(outcome.run_dir, replay, symlinks=True)
    log = replay / "logs" / f"train_cycle_cycle{marker['cycle'] + 1}.log"
    text = log.read_text()
    pointed = re.sub(rf"(loading distributed checkpoint from .* at iteration |successfully loaded checkpoint from .* "
                     rf"at iteration ){committed}\b", rf"\g<1>{partial}", text)
    assert pointed != text, log
    log.write_text(pointed)
    verdict = verify.verify_run(replay, picture=False)
    reload = verdict.criterion("optimizer_reload")
    assert reload.status == FAIL, reload
    assert f"iter_{partial:07d}" in reload.detail and "partial directory" in reload.detail, reload.detail
    assert not verdict.qualified


@launches(lambda newest_launcher: scenario_of(CELLS["kill-last-iteration"], newest_launcher))
def test_last_iteration_replacement_that_trains_again_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real last-iteration run whose replacement started over instead of resuming at
    the final iteration: the verdict must not accept 'nothing left to train' then."""
    outcome = scenarios.outcome(scenario_of(CELLS["kill-last-iteration"], newest_launcher))
    replay = tmp_path / "replay"
    shutil.copytree(outcome.run_dir, replay, symlinks=True)
    marker = json.loads((replay / "fault_injected.json").read_text())
    log = replay / "logs" / f"train_cycle_cycle{marker['cycle'] + 1}.log"
    cycle0 = (replay / "logs" / f"train_cycle_cycle{marker['cycle']}.log").read_text().splitlines()
    first = next(line for line in cycle0 if re.search(r"\] iteration +1/", line))
    lines = log.read_text().splitlines()
    done = next(i for i, line in enumerate(lines) if "[after training is done]" in line)
    log.write_text("\n".join([*lines[:done], first, *lines[done:]]) + "\n")
    later = verify.verify_run(replay, picture=False).criterion("later_checkpoint")
    assert later.status == FAIL and "did not resume" in later.detail, later


@launches(lambda newest_launcher: scenario_of(CELLS["kill-in-restore"], newest_launcher))
def test_multi_fault_run_shows_every_fault_and_cycle(newest_launcher, scenarios):
    """report.md and timeline.png of the in-restore run: both faults, all three cycles, and a
    latency split per recovery."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    outcome = scenarios.outcome(scenario_of(CELLS["kill-in-restore"], newest_launcher))
    shown = outcome.verdict.picture
    assert [f.label for f in shown.faults] == ["fault 1 of 2 (after-commit)", "fault 2 of 2 (in-restore)"], shown.faults
    assert sorted((m.kind, m.cycle) for m in shown.cycle_marks) == [
        ("failed", 0), ("failed", 1), ("started", 0), ("started", 1), ("started", 2)], shown.cycle_marks
    assert [c.cycle for c in shown.curves][0] == 0 and [c.cycle for c in shown.curves][-1] == 2, shown.curves
    report = (outcome.run_dir / "report.md").read_text()
    assert "fault 1 of 2" in report and "fault 2 of 2" in report, outcome.run_dir
    recoveries = outcome.verdict.metrics.recoveries
    assert [r.fault_at for r in recoveries] == ["after-commit", "in-restore"], recoveries
    assert all(r.detection_s is not None and r.restart_s is not None for r in recoveries), recoveries


@launches(lambda newest_launcher: scenario_of(CELLS["kill-rank0-in-save"], newest_launcher))
def test_in_save_fault_that_came_after_the_commit_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real in-save run in which the save it hit had already been committed: the
    fault did not land in the save, and pre_fault_checkpoint must say so."""
    outcome = scenarios.outcome(scenario_of(CELLS["kill-rank0-in-save"], newest_launcher))
    replay = tmp_path / "replay"
    shutil.copytree(outcome.run_dir, replay, symlinks=True)
    marker = json.loads((replay / "fault_injected.json").read_text())
    log = replay / "logs" / f"train_cycle_cycle{marker['cycle']}.log"
    lines = log.read_text().splitlines()
    saved = next(i for i, line in enumerate(lines)
                 if re.search(rf"successfully saved checkpoint from iteration +{marker['committed_iteration']} ", line))
    lines.insert(saved + 1, re.sub(r"iteration +\d+ ", f"iteration {marker['iteration']:7d} ", lines[saved]))
    log.write_text("\n".join(lines) + "\n")
    pre = verify.verify_run(replay, picture=False).criterion("pre_fault_checkpoint")
    assert pre.status == FAIL and "fault hit after the save, not in it" in pre.detail, pre


@launches(lambda newest_launcher: scenario_of(CELLS["kill-in-restore"], newest_launcher))
def test_in_restore_without_the_first_failure_recorded_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real in-restore run whose launcher log lost the first fault's failure: both
    failures must be recorded, so replacement_cycle fails naming fault 1."""
    outcome = scenarios.outcome(scenario_of(CELLS["kill-in-restore"], newest_launcher))
    replay = tmp_path / "replay"
    shutil.copytree(outcome.run_dir, replay, symlinks=True)
    log = replay / "logs" / "launcher.log"
    lines = log.read_text().splitlines()
    # The records of cycle 0's failure: NVRx numbers failure_detected with the next cycle, and
    # the first worker failure and UNHEALTHY line come before the second fault's.
    first_unhealthy = next(i for i, line in enumerate(lines) if "UNHEALTHY" in line)
    dropped = {i for i, line in enumerate(lines[:first_unhealthy + 1])
               if "failed (exitcode" in line or "UNHEALTHY" in line} | {
        i for i, line in enumerate(lines) if "Cycle: 1 Event: failure_detected" in line}
    log.write_text("\n".join(line for i, line in enumerate(lines) if i not in dropped) + "\n")
    cycle = verify.verify_run(replay, picture=False).criterion("replacement_cycle")
    assert cycle.status == FAIL and "no failure of cycle 0 after fault 1 of 2" in cycle.detail, cycle
