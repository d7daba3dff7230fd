"""`nvrx-qual run --repeat N` (harness.launch.repeat): the loop with a fake launch that builds a
synthetic run directory (recovery_tests/rundirs.py) and verifies it, the refusals before
anything is created, and one real end-to-end repeat."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fixtures.launching import launches

from harness import cli
from harness.machine import ports
from harness.launch import repeat, runner
from harness.cli import repeat as cmd_repeat
from harness.cli import run as cmd_run
from harness.judge.criteria import CHECK_IDS, LOSS_CONTINUITY, STATE_EQUIVALENCE
from harness.launch.job import LaunchResult
from harness.plan.spec import SpecError
from harness.report.verify import verify_run
from recovery_tests import rundirs

LABEL = "reference workload, fault kill, NVRx "


@dataclass
class FakeLaunch:
    """Stands in for launch + verify: run i (1-based) builds a run directory that fails
    optimizer_reload when i is in `failing`; `interrupt_at` / `refuse_at` raise instead."""

    failing: frozenset[int] = frozenset()
    interrupt_at: int | None = None
    refuse_at: int | None = None
    plans: list = field(default_factory=list)
    port_calls_before: list[int] = field(default_factory=list)  # port allocations made before each launch

    def __call__(self, plan, *, deadline_s, out, **_ignored) -> runner.Outcome:
        self.plans.append(plan)
        self.port_calls_before.append(PORTS.calls)
        i = len(self.plans)
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        if i == self.refuse_at:
            raise SpecError(["the plan is for NVRx 9.9.9 but 0.4.1 is installed: point --nvrx-path at it"])
        root = plan.layout.root
        rundirs.build(root, rundirs.Scenario(fault=plan.spec.fault, no_load_optim=i in self.failing))
        if i == 1:
            (root / "timeline.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        result = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, plan.nvrx.version, 0)
        return runner.Outcome(plan, result, verify_run(root), None)


class _PortCounter:
    """Counts the allocations, to see when each run got its own; the ports are real picks, since
    the preflight checks that the rendezvous port is free (made-up ports 40000+ lay in the OS's
    ephemeral range, and in CI one was taken by a live socket: the repeat was refused, exit 2)."""

    def __init__(self, pick=ports.free_ports) -> None:
        self.calls = 0
        self._pick = pick

    def __call__(self, count: int, host: str = "") -> list[int]:
        self.calls += 1
        return self._pick(count, host)


PORTS = _PortCounter()


@pytest.fixture(autouse=True)
def counted_ports(request, monkeypatch):
    if request.node.get_closest_marker("e2e"):  # real launches bind real ports
        return
    monkeypatch.setattr(PORTS, "calls", 0)
    monkeypatch.setattr(ports, "free_ports", PORTS)


def flags(work: Path, **more) -> dict:
    return {"workload": "reference", "fault": "kill", "work_dir": work, "run_id": "rep", **more}


def repeat_run(work: Path, count: int, fake: FakeLaunch, env: dict | None = None, **more) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cmd_repeat.run_repeats(flags(work, **more), (), env or {}, count, execute=fake, progress=False, out=out,
                                err=err)
    return status, out.getvalue(), err.getvalue()


def test_derived_run_ids_are_zero_padded_to_the_width_of_n():
    assert repeat.derived_run_ids("base", 3) == ("base-r1", "base-r2", "base-r3")
    ten = repeat.derived_run_ids("base", 10)
    assert ten[0] == "base-r01" and ten[-1] == "base-r10" and list(ten) == sorted(ten) and len(set(ten)) == 10


def test_run_2_of_3_fails_and_the_summary_names_it(tmp_path):
    fake = FakeLaunch(failing=frozenset({2}))
    status, out, err = repeat_run(tmp_path, 3, fake)
    assert status == 1, err
    # all three launched, each with its own fresh run ID and directory
    assert [p.spec.run_id for p in fake.plans] == ["rep-r1", "rep-r2", "rep-r3"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["rep-r1", "rep-r2", "rep-r3"]
    # ports: chosen for each run after the run before it ended (first validation allocates too)
    endpoints = [p.spec.rdzv_endpoint for p in fake.plans]
    assert len(set(endpoints)) == 3
    assert fake.port_calls_before == [2, 3, 4]
    # each run's own summary as today, then the statistics
    assert out.count("QUALIFIED: reference workload, fault kill") == 3 and out.count("NOT QUALIFIED") == 1
    assert "\nnvrx-qual: run rep-r2 (2 of 3): reference workload, kill on rank 1" in out
    assert "repeats: " + LABEL in out and "2 of 3 runs qualified" in out
    assert "  optimizer_reload      2/3" in out and "  clean_finish          3/3" in out
    assert "    rep-r2: optimizer_reload fail: " in out
    summary_dir = tmp_path / "repeats" / "rep"
    doc = json.loads((summary_dir / "summary.json").read_text())
    [scenario] = doc["scenarios"]
    assert (scenario["run_count"], scenario["qualified_runs"], scenario["all_qualified"]) == (3, 2, False)
    assert scenario["label"].startswith(LABEL)
    assert [(f["run_id"], f["criterion"]) for f in scenario["failures"]] == [("rep-r2", "optimizer_reload")]
    assert scenario["failures"][0]["run_dir"] == str(tmp_path / "runs" / "rep-r2")
    rates = {c["id"]: c["pass_rate"] for c in scenario["criteria"]}
    assert rates["optimizer_reload"] == pytest.approx(2 / 3) and rates["later_checkpoint"] == 1.0
    assert scenario["metrics"]["failure_to_first_step_s"] == {"n": 3, "missing": 0, "p50": 5.12, "p95": 5.12,
                                                              "max": 5.12}
    md = (summary_dir / "summary.md").read_text()
    assert md.startswith("# 3 repeats of rep\n")
    assert "- `rep-r2`: `optimizer_reload` fail: " in md
    assert "[timeline.png](../../runs/rep-r1/timeline.png)" in md  # relative to the summary
    assert f"summary: {summary_dir / 'summary.md'} and {summary_dir / 'summary.json'}" in out


def test_all_qualified_exits_0(tmp_path):
    status, out, _ = repeat_run(tmp_path, 2, FakeLaunch())
    doc = json.loads((tmp_path / "repeats" / "rep" / "summary.json").read_text())
    assert status == 0 and doc["all_qualified"] and doc["run_count"] == 2
    assert all(c["pass_rate"] == 1.0 for c in doc["scenarios"][0]["criteria"])
    assert "failing runs" not in out


def _nothing_created(work: Path, fake: FakeLaunch, existing: set[str] = frozenset()) -> None:
    assert fake.plans == []
    runs = work / "runs"
    assert (set(p.name for p in runs.iterdir()) if runs.exists() else set()) == set(existing)


def test_existing_run_directory_is_refused_before_anything(tmp_path):
    (tmp_path / "runs" / "rep-r2").mkdir(parents=True)
    fake = FakeLaunch()
    status, _, err = repeat_run(tmp_path, 3, fake)
    assert status == 2
    assert f"run directory {tmp_path / 'runs' / 'rep-r2'} already exists: choose a new base run ID" in err
    _nothing_created(tmp_path, fake, {"rep-r2"})
    assert not (tmp_path / "repeats").exists()


def test_existing_summary_directory_is_refused_before_anything(tmp_path):
    (tmp_path / "repeats" / "rep").mkdir(parents=True)
    fake = FakeLaunch()
    status, _, err = repeat_run(tmp_path, 2, fake)
    assert status == 2 and f"repeat summary directory {tmp_path / 'repeats' / 'rep'} already exists" in err
    _nothing_created(tmp_path, fake)
    assert list((tmp_path / "repeats" / "rep").iterdir()) == []


@pytest.mark.parametrize("source", ["flag", "env"])
def test_a_given_checkpoint_dir_is_refused_with_repeats(tmp_path, source):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fake = FakeLaunch()
    if source == "flag":
        status, _, err = repeat_run(tmp_path, 2, fake, checkpoint_dir=ckpt)
    else:
        status, _, err = repeat_run(tmp_path, 2, fake, env={"NVRX_CHECKPOINT_DIR": str(ckpt)})
    assert status == 2
    named = "--checkpoint-dir" if source == "flag" else "NVRX_CHECKPOINT_DIR"  # as the user gave it
    assert f"{named}={ckpt} with --repeat 2: the runs would share one checkpoint directory" in err
    assert f"leave {named} out" in err
    _nothing_created(tmp_path, fake)
    assert list(ckpt.iterdir()) == []


@pytest.mark.parametrize("count", [0, -3])
def test_fewer_than_one_repeat_is_refused(tmp_path, count):
    fake = FakeLaunch()
    status, _, err = repeat_run(tmp_path, count, fake)
    assert status == 2 and f"--repeat {count} must be 1 or more" in err
    _nothing_created(tmp_path, fake)


def test_an_invalid_base_run_id_is_refused(tmp_path):
    fake = FakeLaunch()
    status, _, err = repeat_run(tmp_path, 2, fake, run_id="-oops")
    assert status == 2 and "--run-id=-oops must match" in err
    _nothing_created(tmp_path, fake)


def test_ctrl_c_stops_between_runs_and_summarizes_what_finished(tmp_path):
    fake = FakeLaunch(interrupt_at=2)
    status, out, err = repeat_run(tmp_path, 3, fake)
    assert status == 130 and "interrupted (Ctrl-C) after 1 of 3 runs" in err
    assert len(fake.plans) == 2  # run 3 never started
    doc = json.loads((tmp_path / "repeats" / "rep" / "summary.json").read_text())
    assert doc["run_count"] == 1 and "interrupted (Ctrl-C) after 1 of 3 runs" in doc["notes"][0]
    assert "1 of 1 runs qualified (3 planned)" in out


def test_a_run_the_machine_refuses_ends_the_repeat_with_2(tmp_path):
    fake = FakeLaunch(refuse_at=2)
    status, _, err = repeat_run(tmp_path, 3, fake)
    assert status == 2 and "nvrx-qual: error: the plan is for NVRx 9.9.9" in err
    assert len(fake.plans) == 2
    doc = json.loads((tmp_path / "repeats" / "rep" / "summary.json").read_text())
    assert doc["run_count"] == 1 and "run 2 of 3 (rep-r2) was refused" in doc["notes"][0]


def test_dry_run_prints_every_plan_and_creates_nothing(tmp_path):
    fake = FakeLaunch()
    status, out, _ = repeat_run(tmp_path, 3, fake, env={"NVRX_DRY_RUN": "1"})
    assert status == 0
    for i in (1, 2, 3):
        assert f"# run {i} of 3: rep-r{i} (run directory {tmp_path / 'runs' / f'rep-r{i}'})" in out
    assert out.count("nvidia_resiliency_ext.fault_tolerance.launcher") >= 3
    assert "# dry run: nothing launched, nothing created" in out
    _nothing_created(tmp_path, fake)
    assert not (tmp_path / "repeats").exists()


@pytest.mark.usefixtures("clean_spec_env")
def test_cli_repeat_goes_through_the_same_launch_as_run(tmp_path, monkeypatch, capsys):
    fake = FakeLaunch(failing=frozenset({1}))
    monkeypatch.setattr(runner, "execute_with_baseline", fake)  # what `nvrx-qual run` launches through
    status = cli.main(["run", "--workload", "reference", "--work-dir", str(tmp_path), "--run-id", "cli",
                       "--repeat", "2", "--quiet", "--baseline", "none"])
    out = capsys.readouterr().out
    assert status == 1 and [p.spec.run_id for p in fake.plans] == ["cli-r1", "cli-r2"]
    assert "    cli-r1: optimizer_reload fail: " in out
    assert (tmp_path / "repeats" / "cli" / "summary.md").is_file()


@pytest.mark.usefixtures("clean_spec_env")
def test_cli_repeat_1_is_a_plain_run(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(cmd_run, "one_run", lambda plan, **kw: seen.append(plan.spec.run_id) or 0)
    status = cli.main(["run", "--workload", "reference", "--work-dir", str(tmp_path), "--run-id", "plain",
                       "--repeat", "1"])
    assert status == 0 and seen == ["plain"] and not (tmp_path / "repeats").exists()


def _default_baseline(one_launcher):
    from pytest_nvrx_qual.runs import Scenario

    return Scenario("none", one_launcher)  # the reference workload's defaults, as `nvrx-qual run` plans them


@pytest.mark.e2e
@pytest.mark.launch
@launches(lambda one_launcher: _default_baseline(one_launcher))
@pytest.mark.usefixtures("clean_spec_env")
def test_two_real_repeats_qualify(one_launcher, scenarios, fresh_run, capsys):
    """The real launcher twice: fresh run IDs, both qualified, every criterion held in both,
    each judged against the uninterrupted run of its configuration that the session's work
    directory holds already (--baseline auto reuses it: no twin of its own)."""
    baseline = scenarios.outcome(_default_baseline(one_launcher))
    assert baseline.verdict.qualified, baseline.run_dir
    work, run_id = fresh_run  # the session's work directory, where the scenarios' runs are
    where = ["--nvrx-path", str(one_launcher.path)] if one_launcher.path else []
    with scenarios.launch_slot():
        status = cli.main(["run", "--workload", "reference", "--fault", "kill", "--repeat", "2", "--work-dir",
                           str(work), *where, "--run-id", run_id, "--quiet"])
    out = capsys.readouterr().out
    assert status == 0, out
    run_dirs = sorted(p for p in (work / "runs").iterdir() if p.name.startswith(f"{run_id}-"))
    # both repeats reused the session's uninterrupted run (--baseline auto): no twin launched
    assert [d.name for d in run_dirs] == [f"{run_id}-r1", f"{run_id}-r2"]
    for d in run_dirs:
        doc = json.loads((d / "verdict.json").read_text())
        assert doc["qualified"] is True, d
        used = Path(doc["baseline"]["run_dir"])
        assert doc["baseline"]["how"] == "reused" and used.parent == work / "runs", doc["baseline"]
        assert json.loads((used / "verdict.json").read_text())["fault"] == "none", used
    doc = json.loads((work / "repeats" / run_id / "summary.json").read_text())
    [scenario] = doc["scenarios"]
    assert (scenario["run_count"], scenario["qualified_runs"]) == (2, 2)
    assert [r["run_id"] for r in scenario["runs"]] == [f"{run_id}-r1", f"{run_id}-r2"]
    assert {c["id"]: c["pass_rate"] for c in scenario["criteria"]} == \
        {cid: 1.0 for cid in (*CHECK_IDS, LOSS_CONTINUITY, STATE_EQUIVALENCE)}
    headline = scenario["metrics"]["failure_to_first_step_s"]
    assert headline["n"] == 2 and headline["p50"] <= headline["p95"] <= headline["max"]
