"""The first run of a configuration runs its uninterrupted twin beside the fault run
(harness.launch.runner.Twin), not before it, and is judged exactly as if the twin had run
first: once both launches have ended, against the twin when the twin qualified.

Nothing is launched here: harness.launch.job.launch is stood in for by a function that leaves in
each run directory what a real run leaves (recovery_tests.rundirs: logs, cycle infos, markers,
real DCP checkpoints) and waits at a barrier until the other launch has started, so a runner
that launched them one after the other fails (the barrier breaks). The real processes (a
Ctrl-C stopping both launches, an internal error cancelling the twin) are in
test_overlap_processes.py."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.launch import baseline as baselinemod
from harness.launch import contract as contractmod
from harness.launch import job as launch
from harness import workloads
from harness.launch import runner
from harness.machine import ports
from harness.machine.nvrx import NvrxTarget, installed_version
from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.read import evidence
from harness.report.verify import judge_run
from recovery_tests import rundirs

BARRIER_S = 10.0  # how long one stand-in launch waits for the other to start: far beyond a thread's start
COPIED = ("logs", "cycle_infos", "checkpoints", "fault_injected.json", "launch.json")


def make_plan(work: Path, run_id: str = "first-1") -> planmod.Plan:
    """A reference kill at the workload's defaults (its automatic baseline among them)."""
    rdzv, log_port = ports.free_ports(2)
    spec = specmod.from_sources({"workload": "reference", "fault": "kill", "work_dir": work, "run_id": run_id,
                                 "rdzv_endpoint": f"127.0.0.1:{rdzv}", "log_server_port": log_port}, {}, (),
                                detected={})
    return planmod.build(spec, NvrxTarget(installed_version()))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """A kill run, its uninterrupted twin, and a twin that did not qualify, built once."""
    root = tmp_path_factory.mktemp("built")
    return {"kill": rundirs.build(root / "kill", rundirs.Scenario()).run_dir,
            "none": rundirs.build(root / "none", rundirs.Scenario(fault="none")).run_dir,
            "broken": rundirs.build(root / "broken", rundirs.Scenario(fault="none", never_fired_exit3=True)).run_dir}


class StandInLaunches:
    """Stands in for harness.launch.job.launch. Each launch records the contract's baseline as
    its run.json holds it when the launch starts, waits (`together`) until the other launch has
    started too, then leaves the built run of its kind (`sources`: fault -> built run directory)
    in its run directory. `then_raise`: the fault run's launch raises it after that. A fault run
    whose twin launches once its workers have started (baseline.twin_start) leaves its run and
    ticks its watcher first, then waits for the twin. `events`: "launched RUN_ID" and "left
    RUN_ID" (its run directory written), in order."""

    def __init__(self, sources: dict[str, Path], *, together: bool = True, then_raise: BaseException | None = None):
        self.sources = sources
        self.barrier = threading.Barrier(2, timeout=BARRIER_S) if together else None
        self.then_raise = then_raise
        self.contract_at_launch: dict[str, dict] = {}
        self.cancels: dict[str, object] = {}
        self.stop_reasons: dict[str, str | None] = {}
        self.nice: dict[str, int] = {}  # the nice value each launch was given, by run ID
        self.step_deadline: dict[str, float] = {}  # each launch's step deadline, by run ID
        self.events: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, plan, *, watch=None, cancel=None, nice=0, **_kw) -> launch.LaunchResult:
        self.nice[plan.spec.run_id] = nice
        self.step_deadline[plan.spec.run_id] = dict(plan.spec.section_timeouts)["step"]
        root = plan.layout.root
        with self.lock:
            self.contract_at_launch[plan.spec.run_id] = contract_baseline(root)
            self.cancels[plan.spec.run_id] = cancel
            self.events.append(f"launched {plan.spec.run_id}")
        twin_waits = plan.spec.fault != "none" and baselinemod.twin_start(plan) == baselinemod.AFTER_START
        if self.barrier is not None and not twin_waits:
            self.barrier.wait()  # BrokenBarrierError: the other launch did not start meanwhile
        source = self.sources[plan.spec.fault]
        for name in COPIED:
            if (source / name).is_dir():
                shutil.copytree(source / name, root / name, dirs_exist_ok=True)
            elif (source / name).exists():
                shutil.copy(source / name, root / name)
        _imported_as_planned(root)
        with self.lock:
            self.events.append(f"left {plan.spec.run_id}")
        if watch is not None:
            self.stop_reasons[plan.spec.run_id] = watch()  # what job.launch would stop the job for
        if self.barrier is not None and twin_waits:
            self.barrier.wait()  # the tick above told the twin the workers started: both in flight now
        if self.then_raise is not None and plan.spec.fault != "none":
            raise self.then_raise
        return launch.LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, "0.7.0", 0)


def _imported_as_planned(root: Path) -> None:
    """The built logs' launcher identity lines name the NVRx the plan's contract names (as a real
    launch's workers do): the built install's directory, digest and file count replaced."""
    planned = json.loads((root / "run.json").read_text())["contract"]["launcher"]
    version = "0.7.0"
    for log in (root / "logs").glob("train_cycle*.log"):
        text = log.read_text()
        text = text.replace(f"nvidia_resiliency_ext {version} sha256 {rundirs.nvrx_sha(version)}",
                            f"nvidia_resiliency_ext {planned['version']} sha256 {planned['sha256']}")
        text = text.replace(f"files {rundirs.NVRX_FILES} at {rundirs.NVRX_DIR}", f"files {planned['files']} at "
                                                                               f"{planned['path']}")
        log.write_text(text)


def judged(verdict) -> dict:
    """What a verdict says, less where and when it was written."""
    base = verdict.baseline
    return {"qualified": verdict.qualified, "criteria": [(c.id, str(c.status), c.detail) for c in verdict.criteria],
            "baseline": (Path(base.run_dir).name, base.how, base.config_hash, base.matches_run, base.problem)
            if base is not None else None,
            "metrics": dataclasses.asdict(verdict.metrics), "notes": verdict.notes}


def contract_baseline(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())["contract"]["baseline"]


def test_the_twin_runs_beside_the_fault_run_and_the_verdict_is_the_sequential_ones(tmp_path, monkeypatch, built):
    """Both launches are in flight at once (the stand-in's barrier), and the fault run's verdict
    equals, criterion by criterion, the one the sequential runner gives the same run directories:
    its twin run first, then the fault run judged against it (`ran`, the digest taken before)."""
    stand_in = StandInLaunches({"kill": built["kill"], "none": built["none"]})
    monkeypatch.setattr(launch, "launch", stand_in)
    plan = make_plan(tmp_path / "work")
    outcome = runner.execute_with_baseline(plan, out=io.StringIO())
    twin_dir = tmp_path / "work" / "runs" / "first-1-baseline"
    assert sorted(stand_in.contract_at_launch) == ["first-1", "first-1-baseline"]
    used = outcome.baseline_used
    assert (used.how, used.path, used.problem) == ("ran", twin_dir, None)
    assert used.twin is not None and used.twin.verdict.qualified

    # The sequential runner on the same run directories: the twin has ended, the fault run's
    # contract records it with its digest before the launch, the launch leaves the same run.
    sequential = StandInLaunches({"kill": built["kill"]}, together=False)
    monkeypatch.setattr(launch, "launch", sequential)
    again = make_plan(tmp_path / "work", "first-2")
    before = runner.execute_preflighted(again, baseline=runner.BaselineUsed(twin_dir, "ran", used.config_hash))
    assert judged(outcome.verdict) == judged(before.verdict)
    statuses = {c.id: str(c.status) for c in outcome.verdict.criteria}
    assert (statuses["loss_continuity"], statuses["state_equivalence"]) == ("pass", "pass"), outcome.verdict.criteria
    assert contract_baseline(outcome.run_dir) == contract_baseline(again.layout.root)
    # and a later `verify RUN` finds and checks the recorded twin alike
    assert judged(judge_run(outcome.run_dir)[0]) == judged(outcome.verdict)


def test_the_contract_names_the_twin_before_the_launch_and_its_digest_once_it_ended(tmp_path, monkeypatch, built):
    stand_in = StandInLaunches({"kill": built["kill"], "none": built["none"]})
    monkeypatch.setattr(launch, "launch", stand_in)
    plan = make_plan(tmp_path / "work")
    outcome = runner.execute_with_baseline(plan, out=None)
    twin_dir = outcome.baseline_used.path
    at_launch = stand_in.contract_at_launch["first-1"]
    assert at_launch == {"how": "ran", "run_id": "first-1-baseline", "config_hash": baselinemod.config_hash(plan.spec),
                         "checkpoints": None, "why": None, "problem": contractmod.beside_problem("first-1-baseline")}
    settled = contract_baseline(outcome.run_dir)
    assert settled["checkpoints"] == evidence.digest(twin_dir / "checkpoints").to_json()
    assert (settled["run_id"], settled["config_hash"], settled["problem"]) == (
        "first-1-baseline", baselinemod.config_hash(plan.spec), None)
    # `verify RUN` later checks the twin against that digest: pruned since, both checks unknown
    final = sorted((twin_dir / "checkpoints").glob("iter_*"))[-1]
    shutil.rmtree(final)
    later = {c.id: c for c in judge_run(outcome.run_dir)[0].criteria}
    assert (str(later["loss_continuity"].status), str(later["state_equivalence"].status)) == ("unknown", "unknown")
    assert "first-1-baseline" in later["state_equivalence"].detail


def test_a_twin_that_did_not_qualify_makes_both_checks_unknown(tmp_path, monkeypatch, built):
    monkeypatch.setattr(launch, "launch", StandInLaunches({"kill": built["kill"], "none": built["broken"]}))
    out = io.StringIO()
    outcome = runner.execute_with_baseline(make_plan(tmp_path / "work"), out=out)
    statuses = {c.id: c for c in outcome.verdict.criteria}
    for check in ("loss_continuity", "state_equivalence"):
        assert str(statuses[check].status) == "unknown", statuses[check]
        assert "first-1-baseline did not qualify" in statuses[check].detail
    assert "did not qualify" in contract_baseline(outcome.run_dir)["problem"]
    assert re.search(r"^baseline: the uninterrupted twin first-1-baseline did not qualify \(.*\): loss_continuity "
                     r"and state_equivalence cannot be judged$", out.getvalue(), re.M), out.getvalue()
    later = {c.id: c for c in judge_run(outcome.run_dir)[0].criteria}
    assert str(later["state_equivalence"].status) == "unknown"


def test_a_run_stopped_before_its_twin_ended_keeps_both_checks_unknown(tmp_path, monkeypatch, built):
    """The fault run's launch was interrupted: run.json keeps what it said while the twin ran, so
    a later `verify` judges the baseline checks unknown, naming the twin and the fix."""
    stand_in = StandInLaunches({"kill": built["kill"], "none": built["none"]},
                               then_raise=RuntimeError("the harness broke during the fault run"))
    monkeypatch.setattr(launch, "launch", stand_in)
    plan = make_plan(tmp_path / "work")
    with pytest.raises(RuntimeError, match="the harness broke"):
        runner.execute_with_baseline(plan, out=None)
    assert contract_baseline(plan.layout.root)["problem"] == contractmod.beside_problem("first-1-baseline")
    later = {c.id: c for c in judge_run(plan.layout.root)[0].criteria}
    for check in ("loss_continuity", "state_equivalence"):
        assert str(later[check].status) == "unknown" and "its end was never recorded here" in later[check].detail


def test_the_twin_is_cancelled_when_the_fault_run_ends_by_an_error(tmp_path, monkeypatch, built):
    """Any exit path of the fault run stops the twin: its launch is asked to stop (`cancel`)."""
    reasons: list[str | None] = []

    class Watching(StandInLaunches):
        def __call__(self, plan, **kw):
            if plan.spec.fault == "none":  # the twin: runs until it is cancelled
                self.barrier.wait()
                cancel = kw["cancel"]
                while (why := cancel()) is None:
                    threading.Event().wait(0.01)  # polled like job.launch's tick
                reasons.append(why)
                raise launch.Interrupted(2, None)  # what a stopped launch does not do; never reached by the verdict
            return super().__call__(plan, **kw)

    monkeypatch.setattr(launch, "launch", Watching({"kill": built["kill"]}, then_raise=RuntimeError("broken")))
    with pytest.raises(RuntimeError, match="broken"):
        runner.execute_with_baseline(make_plan(tmp_path / "work"), out=None)
    assert reasons == ["cancelled: the fault run first-1 it was launched beside ended by RuntimeError"]


def test_the_lines_of_both_runs_say_whose_they_are(tmp_path, monkeypatch, built):
    monkeypatch.setattr(launch, "launch", StandInLaunches({"kill": built["kill"], "none": built["none"]}))
    out = io.StringIO()
    runner.execute_with_baseline(make_plan(tmp_path / "work"), out=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("baseline: running the uninterrupted twin first-1-baseline (config hash ")
    assert "beside the fault run" in lines[0]
    progress = [line for line in lines if not line.startswith("baseline: ")]
    assert progress and all(re.match(r"^(twin|kill)  \[\s*[\d.]+s\] ", line) for line in progress), lines
    assert any(line.startswith("twin  [") for line in progress) and any(line.startswith("kill  [") for line in progress)
    assert any(re.fullmatch(r"baseline: first-1-baseline BASELINE QUALIFIED in \d+ s, beside the fault run", line)
               for line in lines), lines


def test_labelled_lines_stay_whole_when_threads_write_in_pieces():
    out, lock = io.StringIO(), threading.Lock()
    streams = [runner.LabelledLines(out, label, lock) for label in ("twin  ", "kill  ")]

    def write(stream, n):
        for i in range(300):
            for piece in (f"  [{i:4d}s] ", "line ", f"{n}-{i}", "\n"):  # as print() writes: text, then the end
                stream.write(piece)

    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 600
    assert all(re.fullmatch(r"(twin|kill)    \[\s*\d+s\] line [01]-\d+", line) for line in lines), lines[:5]
    assert all(line.startswith("twin") == line.endswith(tuple(f"0-{i}" for i in range(300))) for line in lines)


def test_a_reused_baseline_launches_nothing_beside(tmp_path, monkeypatch, built):
    """The second run of a configuration reuses the twin the first ran beside it: one launch, its
    lines unlabelled, as before."""
    monkeypatch.setattr(launch, "launch", StandInLaunches({"kill": built["kill"], "none": built["none"]}))
    runner.execute_with_baseline(make_plan(tmp_path / "work"), out=None)
    alone = StandInLaunches({"kill": built["kill"]}, together=False)
    monkeypatch.setattr(launch, "launch", alone)
    out = io.StringIO()
    outcome = runner.execute_with_baseline(make_plan(tmp_path / "work", "first-2"), out=out)
    assert sorted(alone.contract_at_launch) == ["first-2"]
    assert (outcome.baseline_used.how, outcome.baseline_used.path.name) == ("reused", "first-1-baseline")
    assert out.getvalue().splitlines()[0].startswith("baseline: reusing first-1-baseline (config hash ")
    assert all(line.startswith(("baseline: ", "  [")) for line in out.getvalue().splitlines())


def test_the_twin_runs_beside_only_where_it_can_share_the_machine():
    """CPU ranks launched here share the machine; GPU ranks (a GPU's memory is not shared) and a
    launch through srun (it waits for the allocation's resources) get their twin first."""
    def plan(workload: str, srun=None):
        return SimpleNamespace(spec=SimpleNamespace(workload_type=workloads.get(workload)), srun=srun)

    assert baselinemod.twin_beside(plan("reference")) and baselinemod.twin_beside(plan("megatron-cpu"))
    assert not baselinemod.twin_beside(plan("megatron"))
    assert not baselinemod.twin_beside(plan("reference", srun=("srun",)))


def test_the_twin_starts_with_the_fault_run_or_once_its_workers_have_started_by_the_workloads_row():
    """Workload.steps_wait: the reference's steps are paced (its ranks mostly wait once started),
    Megatron's on CPU compute through the run."""
    def plan(workload: str):
        return SimpleNamespace(spec=SimpleNamespace(workload_type=workloads.get(workload)), srun=None)

    assert baselinemod.twin_start(plan("reference")) == baselinemod.AFTER_START
    assert baselinemod.twin_start(plan("megatron-cpu")) == baselinemod.AT_ONCE
    assert baselinemod.twin_start(plan("megatron-bridge")) == baselinemod.AT_ONCE


def test_a_twin_whose_ranks_wait_launches_once_the_fault_runs_workers_have_started(tmp_path, monkeypatch, built):
    """The reference's twin launches on the fault run's first tick that finds the launcher's
    record of its workers' start, not before: the two start-ups do not compete for the CPUs.
    Its progress lines count from the fault run's start, so the columns agree."""
    stand_in = StandInLaunches({"kill": built["kill"], "none": built["none"]})
    monkeypatch.setattr(launch, "launch", stand_in)
    out = io.StringIO()
    outcome = runner.execute_with_baseline(make_plan(tmp_path / "work"), out=out)
    assert stand_in.events[:3] == ["launched first-1", "left first-1", "launched first-1-baseline"], stand_in.events
    assert outcome.baseline_used.problem is None and outcome.verdict.qualified
    lines = out.getvalue().splitlines()
    assert "beside the fault run, once the fault run's workers have started: fault none" in lines[0], lines[0]
    started = next(i for i, line in enumerate(lines) if re.match(r"kill  \[.*\] cycle 0: workers started", line))
    launched = next(i for i, line in enumerate(lines) if re.match(r"twin  \[.*\] launching ft_launcher", line))
    assert started < launched, lines


def test_a_twin_whose_ranks_compute_launches_with_the_fault_run(tmp_path, monkeypatch, built):
    """A workload whose ranks compute through the run (steps_wait False): the twin launches at
    once, before the fault run has written anything (the stand-in's fault run waits for it first:
    a twin that waited for the fault run's workers would break the barrier)."""
    monkeypatch.setattr(workloads.get("reference"), "steps_wait", False)
    stand_in = StandInLaunches({"kill": built["kill"], "none": built["none"]})
    monkeypatch.setattr(launch, "launch", stand_in)
    out = io.StringIO()
    outcome = runner.execute_with_baseline(make_plan(tmp_path / "work"), out=out)
    assert stand_in.events.index("launched first-1-baseline") < stand_in.events.index("left first-1"), stand_in.events
    assert outcome.verdict.qualified
    assert (f"beside the fault run, at a lower CPU priority (nice {baselinemod.TWIN_NICE}): fault none, 30 iterations"
            in out.getvalue().splitlines()[0])
    # the twin yields the CPUs to the run under test (harness.launch.baseline.twin_nice), the run keeps its own
    assert stand_in.nice == {"first-1": 0, "first-1-baseline": baselinemod.TWIN_NICE}
    # with patient deadlines: a twin slowed by the priority is not taken for a hung one (baseline.patient)
    assert stand_in.step_deadline["first-1-baseline"] == 120.0 > stand_in.step_deadline["first-1"]


def test_where_it_cannot_the_twin_runs_first_and_the_contract_records_it_before_the_launch(
        tmp_path, monkeypatch, built):
    monkeypatch.setattr(baselinemod, "twin_beside", lambda _plan: False)
    order: list[str] = []

    class Ordered(StandInLaunches):
        def __call__(self, plan, **kw):
            order.append(f"start {plan.spec.run_id}")
            result = super().__call__(plan, **kw)
            order.append(f"end {plan.spec.run_id}")
            return result

    stand_in = Ordered({"kill": built["kill"], "none": built["none"]}, together=False)
    monkeypatch.setattr(launch, "launch", stand_in)
    out = io.StringIO()
    outcome = runner.execute_with_baseline(make_plan(tmp_path / "work"), out=out)
    assert order == ["start first-1-baseline", "end first-1-baseline", "start first-1", "end first-1"]
    at_launch = stand_in.contract_at_launch["first-1"]
    assert at_launch["problem"] is None
    assert at_launch["checkpoints"] == contract_baseline(outcome.run_dir)["checkpoints"]
    assert at_launch["checkpoints"] == evidence.digest(outcome.baseline_used.path / "checkpoints").to_json()
    lines = out.getvalue().splitlines()
    assert "before the fault run: fault none, 30 iterations" in lines[0]
    assert any(re.fullmatch(r"baseline: first-1-baseline BASELINE QUALIFIED in \d+ s; now the fault run", line)
               for line in lines), lines
    assert all(line.startswith(("baseline: ", "  [")) for line in lines), lines


def test_the_watcher_still_stops_a_doomed_fault_run_beside_its_twin(tmp_path, monkeypatch, built):
    """The fault run's launch keeps its watcher: a restore without the optimizer is a certain
    failure it would stop the job for; the twin beside it is not stopped and still serves."""
    doomed = rundirs.build(tmp_path / "doomed", rundirs.Scenario(no_load_optim=True)).run_dir
    stand_in = StandInLaunches({"kill": doomed, "none": built["none"]})
    monkeypatch.setattr(launch, "launch", stand_in)
    outcome = runner.execute_with_baseline(make_plan(tmp_path / "work"), out=None)
    assert (stand_in.stop_reasons["first-1"] or "").startswith("optimizer_reload cannot pass"), stand_in.stop_reasons
    assert stand_in.stop_reasons["first-1-baseline"] is None
    assert outcome.baseline_used.problem is None and not outcome.verdict.qualified
