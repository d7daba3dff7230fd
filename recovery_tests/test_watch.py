"""harness.launch.watch on run directories that grow while the watcher runs.

A scenario's complete run directory is built by recovery_tests.rundirs into `source/`;
a background thread then replays it into `live/` write by write, in the order the real run
would have made the writes (launcher log, per-cycle logs, marker, cycle infos interleaved
by the time the builder gave each line), while the main thread calls a `Watcher` on `live/`.

Lock-step replays (the writer waits for one watcher poll after every write, long lines
arriving in two halves) make "the stop reason comes as soon as the deciding line is on
disk" an exact, repeatable assertion; free-running replays (no hand-shake) check that
a concurrently growing directory never yields a premature or spurious stop.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from unittest import mock

import pytest

from harness.judge import criteria
from harness.launch import watch
from harness.judge.criteria import analyze
from harness.vocab.events import iso_utc
from harness.read.history import HistoryReader
from harness.plan.spec import RunSpec
from harness.launch.watch import Watcher, all_evidence_in, certain_failure
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

# Short runs keep the replays small; checkpoints are left out because the watcher never
# inspects them (and writing real DCP files would import torch).
BASE = dict(train_iters=20, checkpoints=False)
HANDSHAKE_TIMEOUT_S = 20.0  # generous: the machine is shared; only a real stall reaches it
SPLIT_AT = 60  # lines longer than this reach the disk in two writes


# ---------------------------------------------------------------- replay plan


@dataclass(frozen=True)
class Write:
    """One write of the replay: append `data` to `rel`, or (data None) copy `rel` from the
    source run atomically (JSON records, cycle infos)."""

    order: tuple[int, int, int]  # (ms, builder sequence, part): the time the run made it
    rel: str
    data: bytes | None = None


def _build_with_timing(source: Path, scenario: Scenario):
    """Build the run dir and keep the builder's per-line times (rundirs keeps them only
    inside its private _Run object, handed to _finish)."""
    runs = []
    original = rundirs._finish

    def finish(run, **kwargs):
        runs.append(run)
        return original(run, **kwargs)

    with mock.patch.object(rundirs, "_finish", finish):
        built = rundirs.build(source, scenario)
    return built, runs[0]


def _line_writes(path: Path, rel: str, timed: list[tuple[int, int]], split: bool) -> list[Write]:
    """Pair each line of a built file with its time; the killed rank's cut-off last line
    (no newline, not in the builder's list) follows the file's last timed line."""
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) in (len(timed), len(timed) + 1), f"{rel}: {len(lines)} lines, {len(timed)} times"
    timed = timed + [timed[-1]] * (len(lines) - len(timed))
    writes = []
    for (ms, seq), line in zip(timed, lines):
        cut = len(line) // 2 if split and len(line) > SPLIT_AT else len(line)
        writes.append(Write((ms, seq, 0), rel, line[:cut]))
        if cut < len(line):
            writes.append(Write((ms, seq, 1), rel, line[cut:]))
    return writes


def _iso_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def plan_replay(root: Path, scenario: Scenario, *, split: bool = True) -> tuple[Path, list[Write]]:
    """The source run dir and every write that reproduces it, in the run's own order."""
    source = root / "source"
    built, run = _build_with_timing(source, scenario)
    writes = [Write((-1, 0, 0), "run.json")]  # written before the launch
    for cycle, entries in run.app.items():
        timed = [(ms, seq) for ms, seq, _, _ in sorted(entries, key=lambda x: (x[0], x[1]))]
        rel = f"logs/train_cycle_cycle{cycle}.log"
        writes += _line_writes(source / rel, rel, timed, split)
    timed = [(ms, seq) for ms, seq, _ in sorted(run.launcher)]
    writes += _line_writes(source / "logs/launcher.log", "logs/launcher.log", timed, split)
    if (source / "fault_injected.json").exists():
        writes.append(Write((int(round(built.times["injected_at"] * 1000)), 0, 0), "fault_injected.json"))
    for info in sorted((source / "cycle_infos").glob("cycle_info..0.*")):
        start = _iso_ms(json.loads(info.read_text())["cycle_start_time"])
        writes.append(Write((start, 0, 0), f"cycle_infos/{info.name}"))
    writes.sort(key=lambda w: w.order)
    writes.append(Write((1 << 62, 0, 0), "launch.json"))  # the harness writes it after the launcher ended
    return source, writes


def apply(write: Write, source: Path, live: Path) -> None:
    target = live / write.rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if write.data is not None:
        with open(target, "ab") as f:  # one write per call, as a process flushing its line
            f.write(write.data)
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source / write.rel, tmp)
    os.replace(tmp, target)
    if write.rel.startswith("cycle_infos/"):  # NVRx points `current` at the newest cycle
        current = target.with_name("cycle_info..current")
        current.unlink(missing_ok=True)
        current.symlink_to(target.name)


# ---------------------------------------------------------------- replayers


class Replayer(threading.Thread):
    """Writes the plan into `live/`. In lock-step it waits, after every write, until the
    watcher has polled once; free-running it only paces itself like a slow run."""

    def __init__(self, source: Path, live: Path, writes: list[Write], *, lockstep: bool, pace_s: float = 0.0):
        super().__init__(name="replay", daemon=True)
        self.source, self.live, self.writes = source, live, writes
        self.lockstep, self.pace_s = lockstep, pace_s
        self.written = threading.Semaphore(0)
        self.polled = threading.Semaphore(0)
        self.stop = threading.Event()
        self.done = 0  # writes on disk
        # writes begun: counted before the bytes land, so that a count read after a poll is never
        # lower than the writes that poll could have seen (`done` lags its write by a thread switch)
        self.begun = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for write in self.writes:
                if self.stop.is_set():
                    return
                self.begun += 1
                apply(write, self.source, self.live)
                self.done += 1
                if self.lockstep:
                    self.written.release()
                    if not self.polled.acquire(timeout=HANDSHAKE_TIMEOUT_S):
                        return
                elif self.pace_s:
                    self.stop.wait(self.pace_s)  # a run writes over time, not all at once
        except BaseException as exc:  # surfaced by the main thread
            self.error = exc
        finally:
            self.written.release()  # a main thread waiting on a failed replay wakes up

    def halt(self) -> None:
        self.stop.set()
        self.polled.release()
        self.join(timeout=HANDSHAKE_TIMEOUT_S)
        assert not self.is_alive(), "the replay thread did not stop"


@dataclass(frozen=True)
class Decision:
    """The first stop reason and the write after which the watcher gave it."""

    reason: str
    index: int  # index into the plan of the last write on disk when it was given
    write: Write


def watch_lockstep(watcher: Watcher, source: Path, live: Path, writes: list[Write]) -> Decision | None:
    replayer = Replayer(source, live, writes, lockstep=True)
    replayer.start()
    try:
        for index, write in enumerate(writes):
            assert replayer.written.acquire(timeout=HANDSHAKE_TIMEOUT_S), f"replay stalled at write {index}"
            if replayer.error is not None:
                raise replayer.error
            assert replayer.done == index + 1
            reason = watcher()
            if reason is not None:
                return Decision(reason, index, write)
            replayer.polled.release()
        return None
    finally:
        replayer.halt()


def new_live(root: Path) -> Path:
    """The run directory as harness.launch.job leaves it before the first watcher tick: the
    logs directory with its (still empty) console capture."""
    live = root / "live"
    (live / "logs").mkdir(parents=True)
    (live / "logs/console.log").touch()
    return live


def spec_for(root: Path, scenario: Scenario) -> RunSpec:
    return RunSpec(workload="megatron", work_dir=root, run_id="live", fault=scenario.fault,
                   train_iters=scenario.train_iters, save_interval=scenario.save_interval)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def line_landed_at(writes: list[Write], rel: str, needle: str) -> int:
    """Index of the write that completes (newline included) the first line of `rel`
    containing `needle`."""
    pending = b""
    for index, write in enumerate(writes):
        if write.rel != rel or write.data is None:
            continue
        pending += write.data
        if pending.endswith(b"\n"):
            if needle.encode() in pending:
                return index
            pending = b""
    raise AssertionError(f"no line of {rel} contains {needle!r}")


def said(out: io.StringIO) -> list[str]:
    """The watcher's progress lines without their elapsed-time prefix."""
    return [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]


def scenario(**kwargs) -> Scenario:
    return Scenario(**{**BASE, **kwargs})


# ---------------------------------------------------------------- doomed runs stop early

DOOMED = {
    # name: (scenario, reason fragment, (file, text of the line that decides))
    "started-from-random": (scenario(restart_from_random=True), "(cycle 1) started from random",
                            ("logs/train_cycle_cycle1.log", "could not find the metadata file")),
    "older-checkpoint": (scenario(load_iteration=5), "loaded checkpoint 5, an older one than 10",
                         ("logs/train_cycle_cycle1.log", "successfully loaded checkpoint")),
    # run.json's command line holds --no-load-optim: decided once the replacement starts (its first line, the
    # nemesis's launcher identity before the entrypoint)
    "no-load-optim": (scenario(no_load_optim=True), "ran with --no-load-optim",
                      ("logs/train_cycle_cycle1.log", "launcher identity")),
    "second-failure": (scenario(second_failure_at=17), "2 cycles failed (0, 1)",
                       ("logs/launcher.log", "(exitcode: 1)")),
    "second-injection": (scenario(second_failure_at=17, second_injection=True), "the fault was injected 2 times",
                         ("logs/train_cycle_cycle1.log", "injecting SIGKILL after checkpoint iteration 15")),
    "fault-never-fired": (scenario(marker=False, never_fired_exit3=True), "but never injected",
                          ("logs/train_cycle_cycle0.log", "nemesis: requested fault kill on rank 1 never happened")),
    "launcher-gave-up": (scenario(restarts_exhausted=True), "The launcher gave up after the fault",
                         ("logs/launcher.log", "Agent's exit code = 1")),
    "launcher-gave-up-0.4.1": (scenario(restarts_exhausted=True, nvrx="0.4.1"), "The launcher gave up after the fault",
                               ("logs/launcher.log", "Agent's exit code = 1")),
    "optimizer-not-reloaded": (scenario(silent_optimizer_skip=True), "optimizer_reload cannot pass: ",
                               ("logs/train_cycle_cycle1.log", "iteration       11/")),
    "hang-older-checkpoint-0.4.1": (scenario(fault="hang", nvrx="0.4.1", load_iteration=5), "an older one than 10",
                                    ("logs/train_cycle_cycle1.log", "successfully loaded checkpoint")),
}


@pytest.mark.parametrize("name", sorted(DOOMED))
def test_doomed_run_stops_as_soon_as_the_deciding_line_lands(name, tmp_path):
    s, fragment, (rel, needle) = DOOMED[name]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    out = io.StringIO()
    watcher = Watcher(spec_for(tmp_path, s), live, out=out, clock=FakeClock())

    decision = watch_lockstep(watcher, source, live, writes)

    assert decision is not None, f"{name}: the watcher never gave a stop reason"
    assert fragment in decision.reason
    # Not one write later (nor earlier: half a line, or no line, decides nothing).
    assert decision.index == line_landed_at(writes, rel, needle), (decision.index, decision.write)
    assert decision.index < len(writes) - 1, "decided only once the whole run was on disk"
    assert not (live / "launch.json").exists()
    assert watcher.stop_reason == decision.reason
    assert said(out)[-1] == f"stopping the job: {decision.reason}"


def test_a_worker_dying_in_a_run_without_fault_stops_it(tmp_path):
    # A kill run minus the nemesis's marker and line: a rank died on its own.
    s = scenario(fault="kill")
    source, writes = plan_replay(tmp_path, s, split=False)
    writes = [w for w in writes if w.rel != "fault_injected.json" and b"[nemesis]" not in (w.data or b"")]
    live = new_live(tmp_path)
    spec = RunSpec(workload="megatron", work_dir=tmp_path, run_id="live", fault="none", train_iters=s.train_iters)
    decision = watch_lockstep(Watcher(spec, live, out=None, clock=FakeClock()), source, live, writes)
    assert decision is not None
    assert decision.reason.startswith("clean_finish cannot pass: ") and "1 cycles failed (0)" in decision.reason
    assert decision.index == line_landed_at(writes, "logs/launcher.log", "failed (exitcode: -9)")


@pytest.mark.parametrize("name", ["older-checkpoint", "second-failure", "launcher-gave-up"])
def test_doomed_run_without_fail_fast_is_not_stopped(name, tmp_path):
    s = DOOMED[name][0]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, fail_fast=False, clock=FakeClock())
    assert watch_lockstep(watcher, source, live, writes) is None
    assert watcher.stop_reason is None


# ---------------------------------------------------------------- good runs run to the end

GOOD = {
    "kill-0.7.0": scenario(),
    "kill-0.4.1": scenario(nvrx="0.4.1"),
    "hang-0.7.0": scenario(fault="hang"),
    "hang-0.4.1": scenario(fault="hang", nvrx="0.4.1"),
    "no-fault": scenario(fault="none"),
    # no distributed optimizer: Megatron's scheduler lines are the evidence, no optimizer line
    "plain-optimizer": scenario(distributed_optimizer=False),
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_run_is_never_stopped(name, tmp_path):
    s = GOOD[name]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, clock=FakeClock())
    assert watch_lockstep(watcher, source, live, writes) is None
    assert watcher.stop_reason is None
    assert all_evidence_in(HistoryReader(live, inspect_checkpoints=False).poll())
    for log in source.glob("logs/*.log"):  # the replay wrote the whole run, byte for byte
        assert (live / "logs" / log.name).read_bytes() == log.read_bytes()


def test_good_run_progress_lines_in_order(tmp_path):
    s = GOOD["kill-0.7.0"]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    out = io.StringIO()
    assert watch_lockstep(Watcher(spec_for(tmp_path, s), live, out=out, clock=FakeClock()), source, live, writes) is None
    assert said(out) == [
        "cycle 0: workers started (launcher record)",
        "checkpoint 5 committed (iteration 5/20)",
        "checkpoint 10 committed (iteration 10/20)",
        "fault injected: SIGKILL on rank 1 after checkpoint 10",
        "the launcher detected the failure of cycle 0",
        "cycle 1: workers started (launcher record)",
        "replacement workers (cycle 1) loaded checkpoint 10 with optimizer state",
        "checkpoint 15 committed (iteration 15/20)",
        "checkpoint 20 committed (iteration 20/20)",
        "training done at iteration 20/20",
        "the launcher reported success; waiting for it to exit",
    ]


def step_by_step(watcher: Watcher, source: Path, live: Path, writes: list[Write], out: io.StringIO) -> list[list[str]]:
    """The progress lines each write brought, one poll after every write (single thread)."""
    seen: list[list[str]] = []
    for write in writes:
        apply(write, source, live)
        before = len(said(out))
        assert watcher() is None
        seen.append(said(out)[before:])
    return seen


@pytest.mark.parametrize("nvrx, needle", [("0.7.0", "Cycle: 1 Event: worker_start_completed"),
                                          ("0.4.1", "has joined round 1")])
def test_workers_started_is_the_launchers_record(tmp_path, nvrx, needle):
    """One definition of the moment: the progress line comes with the launcher's record of
    the start, the same record the report's "workers started" is timed by."""
    s = scenario(nvrx=nvrx)
    source, writes = plan_replay(tmp_path, s, split=False)
    live = new_live(tmp_path)
    out = io.StringIO()
    seen = step_by_step(Watcher(spec_for(tmp_path, s), live, out=out, clock=FakeClock()), source, live, writes, out)
    printed_at = next(i for i, lines in enumerate(seen) if "cycle 1: workers started (launcher record)" in lines)
    assert printed_at == line_landed_at(writes, "logs/launcher.log", needle)


def test_marker_before_the_save_line_still_prints_in_event_order(tmp_path):
    """The nemesis fires as soon as the tracker names K, often before Megatron's save line
    for K reaches the log: the commit is still told before the injection, and once."""
    s = GOOD["kill-0.7.0"]
    source, writes = plan_replay(tmp_path, s, split=False)
    marker = next(w for w in writes if w.rel == "fault_injected.json")
    writes.remove(marker)
    saved = line_landed_at(writes, "logs/train_cycle_cycle0.log", "successfully saved checkpoint from iteration      10")
    writes.insert(saved, marker)
    live = new_live(tmp_path)
    out = io.StringIO()
    step_by_step(Watcher(spec_for(tmp_path, s), live, out=out, clock=FakeClock()), source, live, writes, out)
    lines = said(out)
    committed = [i for i, line in enumerate(lines) if line.startswith("checkpoint 10 committed")]
    assert len(committed) == 1, lines
    assert committed[0] < lines.index("fault injected: SIGKILL on rank 1 after checkpoint 10"), lines


def test_good_run_stopped_only_after_the_exit_grace_once_all_evidence_is_in(tmp_path):
    s = GOOD["kill-0.7.0"]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    clock = FakeClock()
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, clock=clock)
    assert watch_lockstep(watcher, source, live, writes[:-1]) is None  # everything but launch.json
    evidence_in = clock.now
    clock.now = evidence_in + watch.EXIT_GRACE_S
    assert watcher() is None
    clock.now = evidence_in + watch.EXIT_GRACE_S + 0.5
    reason = watcher()
    assert reason is not None and reason.startswith("all evidence is in")
    assert f"{watch.EXIT_GRACE_S:.0f} s after success" in reason


def test_all_evidence_in_needs_training_done_and_launcher_success(tmp_path):
    s = GOOD["kill-0.4.1"]
    source, writes = plan_replay(tmp_path, s, split=False)
    live = new_live(tmp_path)
    done = line_landed_at(writes, "logs/train_cycle_cycle1.log", "[after training is done]")
    success = line_landed_at(writes, "logs/launcher.log", "Agent .run() is OK")
    reader = HistoryReader(live, inspect_checkpoints=False)
    seen = []
    for write in writes:
        apply(write, source, live)
        seen.append(all_evidence_in(reader.poll()))
    first = seen.index(True)
    assert first == max(done, success)
    assert all(seen[first:])


def test_no_iteration_within_the_setup_deadline_stops_the_job(tmp_path):
    live = new_live(tmp_path)
    s = scenario()
    spec = spec_for(tmp_path, s)
    clock = FakeClock()
    watcher = Watcher(spec, live, out=None, clock=clock)
    budget = dict(spec.section_timeouts)["setup"] + spec.out_of_section_timeout
    clock.now += budget
    assert watcher() is None
    clock.now += 0.5
    reason = watcher()
    assert reason is not None and "no training iteration within the setup deadline" in reason


# ---------------------------------------------------------------- free-running replays


def watch_free_running(watcher: Watcher, source: Path, live: Path, writes: list[Write],
                       pace_s: float) -> list[tuple[str, int]]:
    """Poll while the replay writes on its own; (reason, writes begun by the end of that poll:
    never fewer than the writes the poll could read, so `> index of the deciding write` holds
    whenever the watcher stopped on a line it really read)."""
    replayer = Replayer(source, live, writes, lockstep=False, pace_s=pace_s)
    reasons = []
    replayer.start()
    deadline = time.monotonic() + 60
    try:
        while replayer.is_alive():
            assert time.monotonic() < deadline, "the free-running replay did not finish"
            reason = watcher()
            if reason is not None:
                reasons.append((reason, replayer.begun))
        if replayer.error is not None:
            raise replayer.error
        reason = watcher()  # everything is on disk now
        if reason is not None:
            reasons.append((reason, replayer.begun))
    finally:
        replayer.halt()
    return reasons


def test_good_run_growing_concurrently_is_never_stopped(tmp_path):
    s = GOOD["kill-0.7.0"]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    out = io.StringIO()
    watcher = Watcher(spec_for(tmp_path, s), live, out=out, clock=FakeClock())
    assert watch_free_running(watcher, source, live, writes, pace_s=0.0005) == []
    assert said(out)[-2:] == ["training done at iteration 20/20", "the launcher reported success; waiting for it to exit"]


def test_doomed_run_growing_concurrently_is_not_stopped_before_the_deciding_line(tmp_path):
    s, fragment, (rel, needle) = DOOMED["older-checkpoint"]
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, clock=FakeClock())
    reasons = watch_free_running(watcher, source, live, writes, pace_s=0.0005)
    assert reasons, "no stop reason"
    first_reason, on_disk = reasons[0]
    assert fragment in first_reason
    assert on_disk > line_landed_at(writes, rel, needle)


# ---------------------------------------------------------------- facts and waits


def _fact_lines(run_dir: Path, fault: str, train_iters: int | None = None) -> list[str]:
    """The facts of the whole run, each once (as a watcher tells them)."""
    tl = HistoryReader(run_dir, inspect_checkpoints=False).poll(final=True)
    told = {}
    for f in watch.facts(tl, analyze(tl, fault), train_iters):
        told.setdefault(f.key, f.text)
    return list(told.values())


def test_facts_one_poll_finds_together_are_every_fact_once_in_order(tmp_path):
    """A poll that finds the whole run at once (the harness's tick was late, a slow machine)
    tells what a poll after every write tells: every commit, the injection, the detection, the
    restart, the load and the end, each once, in the order they happened."""
    s = GOOD["kill-0.7.0"]
    source, writes = plan_replay(tmp_path, s, split=False)
    live = new_live(tmp_path)
    out = io.StringIO()
    step_by_step(Watcher(spec_for(tmp_path, s), live, out=out, clock=FakeClock()), source, live, writes, out)
    at_once = io.StringIO()
    assert Watcher(spec_for(tmp_path, s), source, out=at_once, clock=FakeClock())() is None
    assert said(out) == _fact_lines(source, s.fault, s.train_iters)
    assert said(at_once) == said(out), (said(at_once), said(out))


def test_every_commit_of_every_start_is_a_fact(tmp_path):
    built = rundirs.build(tmp_path / "run", scenario(train_iters=40))
    lines = _fact_lines(built.run_dir, "kill", 40)
    assert [line.split()[1] for line in lines if line.startswith("checkpoint ")] == [
        str(i) for i in range(5, 45, 5)], lines
    assert "checkpoint 5 committed (iteration 5/40)" in lines  # the checkpoint's own iteration, of the plan's


@pytest.mark.parametrize("kwargs, restored", [
    (dict(restart_from_random=True), "started from random"),
    (dict(no_load_optim=True), "loaded checkpoint 10 without optimizer state"),
    (dict(), "loaded checkpoint 10 with optimizer state"),
    # Megatron's plain optimizer prints scheduler lines only
    (dict(distributed_optimizer=False), "loaded checkpoint 10 with optimizer state"),
])
def test_facts_name_how_the_replacement_restored(kwargs, restored, tmp_path):
    s = scenario(**kwargs)
    run_dir = rundirs.build(tmp_path / "run", s).run_dir
    lines = _fact_lines(run_dir, s.fault)
    assert f"replacement workers (cycle 1) {restored}" in lines, lines
    assert "the launcher detected the failure of cycle 0" in lines
    assert "fault injected: SIGKILL on rank 1 after checkpoint 10" in lines
    tl = HistoryReader(run_dir, inspect_checkpoints=False).poll()
    assert (certain_failure(tl, analyze(tl, s.fault)) is None) == (" with optimizer" in restored)


def test_an_injected_hang_says_what_it_waits_for_and_how_long(tmp_path):
    """While the stopped rank goes unnoticed the console is not silent: it names the rank
    monitor timeout it waits for at once, then every HEARTBEAT_S counts the seconds, until the
    launcher's records of the timeout and the failure come."""
    s = GOOD["hang-0.7.0"]
    source, live, writes, at = _replay_until_marker(tmp_path, s)
    spec = dataclasses.replace(spec_for(tmp_path, s), section_timeouts=(("setup", 60.0), ("step", 10.0),
                                                                        ("checkpointing", 10.0)),
                               out_of_section_timeout=12.0, workload_check_interval=1.0)
    out, clock = io.StringIO(), FakeClock()
    watcher = Watcher(spec, live, out=out, clock=clock)
    assert watcher() is None
    before = len(said(out))
    for _ in range(11):
        clock.now += 1.0
        assert watcher() is None
    wait = "the rank monitor's step timeout (10 s + a 1 s check interval)"
    assert said(out)[before - 1:] == [f"waiting for {wait} to notice the hung rank 1", f"waiting for {wait}, 5 s so far",
                                      f"waiting for {wait}, 10 s so far"]
    detected = line_landed_at(writes, "logs/launcher.log", "failure_detected")
    for write in writes[at + 1:detected + 1]:
        apply(write, source, live)
    clock.now += 1.0
    assert watcher() is None
    assert said(out)[-1] == "the launcher detected the failure of cycle 0", said(out)
    assert any(line.startswith("the rank monitor's section 'step' timeout fired for rank") for line in said(out))


def test_a_kill_waits_for_the_launcher_not_for_a_rank_monitor(tmp_path):
    s = GOOD["kill-0.7.0"]
    source, live, writes, at = _replay_until_marker(tmp_path, s)
    out, clock = io.StringIO(), FakeClock()
    watcher = Watcher(spec_for(tmp_path, s), live, out=out, clock=clock)
    assert watcher() is None
    assert said(out)[-1] == "fault injected: SIGKILL on rank 1 after checkpoint 10"
    clock.now += watch.HEARTBEAT_S
    assert watcher() is None
    assert said(out)[-1] == "waiting for the launcher to detect the failure of cycle 0, 5 s so far"


def test_a_failure_nobody_injected_is_told_and_waited_on(tmp_path):
    """A worker that dies on its own (a kill run without the nemesis's marker and line, judged
    as a run without fault): its cycle's failure is a fact, and the heartbeat says the run
    waits for the launcher to start replacement workers, then for their load."""
    s = scenario(fault="kill")
    source, writes = plan_replay(tmp_path, s, split=False)
    writes = [w for w in writes if w.rel != "fault_injected.json" and b"[nemesis]" not in (w.data or b"")]
    live = new_live(tmp_path)
    spec = RunSpec(workload="megatron", work_dir=tmp_path, run_id="live", fault="none", train_iters=s.train_iters)
    out, clock = io.StringIO(), FakeClock()
    watcher = Watcher(spec, live, out=out, clock=clock, fail_fast=False)
    failed = line_landed_at(writes, "logs/launcher.log", "failed (exitcode: -9)")
    started = line_landed_at(writes, "logs/launcher.log", "Cycle: 1 Event: worker_start_completed")
    for write in writes[:failed + 1]:
        apply(write, source, live)
    watcher()
    assert "the launcher detected the failure of cycle 0" in said(out)
    clock.now += watch.HEARTBEAT_S
    watcher()
    assert said(out)[-1] == "waiting for the launcher to start replacement workers after the failure of cycle 0, 5 s so far"
    for write in writes[failed + 1:started + 1]:
        apply(write, source, live)
    watcher()
    clock.now += watch.HEARTBEAT_S
    watcher()
    assert said(out)[-1] == "waiting for the replacement workers (cycle 1) to load a checkpoint, 5 s so far", said(out)


def test_the_heartbeat_keeps_quiet_while_facts_come(tmp_path):
    """A heartbeat only fills silence: a line said less than HEARTBEAT_S ago needs none."""
    s = GOOD["kill-0.7.0"]
    source, live, writes, at = _replay_until_marker(tmp_path, s)
    out, clock = io.StringIO(), FakeClock()
    watcher = Watcher(spec_for(tmp_path, s), live, out=out, clock=clock)
    watcher()
    told = len(said(out))
    clock.now += watch.HEARTBEAT_S - 0.1
    watcher()
    assert len(said(out)) == told


def test_a_replacement_not_training_yet_is_no_stop_however_long_the_run_has_gone(tmp_path):
    """A long run (a campaign) restarts after the setup budget has passed since the launch: its
    newest start has no iteration yet, and the job did train before; only the setup deadline of
    the launcher may judge that start, not the watcher's never-trained rule."""
    s = scenario()
    source, writes = plan_replay(tmp_path, s)
    live = new_live(tmp_path)
    spec = spec_for(tmp_path, s)
    clock = FakeClock()
    watcher = Watcher(spec, live, out=None, clock=clock)
    replacement = next(i for i, w in enumerate(writes)  # the replacement's load done, no iteration in it yet
                       if w.rel == "logs/train_cycle_cycle1.log" and b"[after model, optimizer" in (w.data or b""))
    for write in writes[:replacement + 1]:
        apply(write, source, live)
    clock.now += dict(spec.section_timeouts)["setup"] + spec.out_of_section_timeout + 1
    reason = watcher()
    assert reason is None or "no training iteration" not in reason, reason


# ---------------------------------------------------------------- a hang the stack did not detect


def _replay_until(tmp_path: Path, s: Scenario, last: int) -> tuple[Path, Path, list[Write]]:
    """The run's writes up to and including index `last` on disk (one thread, no watcher)."""
    source, writes = plan_replay(tmp_path, s, split=False)
    live = new_live(tmp_path)
    for write in writes[:last + 1]:
        apply(write, source, live)
    return source, live, writes


def _marker_at(writes: list[Write]) -> int:
    return next(i for i, w in enumerate(writes) if w.rel == "fault_injected.json")


def _replay_until_marker(tmp_path: Path, s: Scenario) -> tuple[Path, Path, list[Write], int]:
    """The run's writes up to and including its marker on disk, and the marker's index."""
    source, writes = plan_replay(tmp_path, s, split=False)
    live = new_live(tmp_path)
    at = _marker_at(writes)
    for write in writes[:at + 1]:
        apply(write, source, live)
    return source, live, writes, at


def test_stall_budget_is_the_longest_deadline_a_check_interval_and_a_restart(tmp_path):
    from harness.machine import nvrx
    spec = spec_for(tmp_path, scenario())  # the walkthrough: setup 900 s is the longest, NVRx's own check interval
    budget, how = watch.stall_budget(spec)
    assert budget == 900 + nvrx.DEFAULT_CHECK_INTERVAL_S + nvrx.RESTART_ALLOWANCE_S
    assert how.startswith("the longest rank monitor deadline (setup 900 s)")
    cpu = dataclasses.replace(spec, section_timeouts=(("setup", 90.0), ("step", 15.0), ("checkpointing", 15.0)),
                              out_of_section_timeout=200.0, workload_check_interval=1.0)
    assert watch.stall_budget(cpu)[0] == 200 + 1 + nvrx.RESTART_ALLOWANCE_S


def test_a_run_that_goes_silent_after_the_fault_with_nothing_detected_is_stopped(tmp_path):
    """The megatron-cpu disk-full finding: the ranks raised after the fault and then hung in
    teardown, alive, so neither torch elastic nor the rank monitors noticed anything. Nothing
    more reaches the logs; once the stall budget has passed the watcher stops the job, naming
    the hang (not before: NVRx could still have acted until then)."""
    s = scenario()
    source, live, writes = _replay_until(tmp_path, s, _marker_at(plan_replay(tmp_path / "plan", s)[1]))
    clock = FakeClock()
    out = io.StringIO()
    watcher = Watcher(spec_for(tmp_path, s), live, out=out, clock=clock)
    assert watcher() is None  # the last progress: the injection
    budget, _ = watch.stall_budget(watcher._spec)
    clock.now += budget
    assert watcher() is None
    clock.now += 0.5
    reason = watcher()
    assert reason is not None and reason.startswith(f"no progress for {budget + 0.5:.0f} s and the launcher detected "
                                                    f"nothing: {criteria.UNDETECTED_HANG}"), reason
    assert watcher.stop_reason == reason and said(out)[-1] == f"stopping the job: {reason}"


def test_the_stall_rule_stops_a_run_without_fail_fast_too(tmp_path):
    """Without fail-fast a doomed run is left to finish so that every check sees its end; a run
    that went silent has no end to see, and waiting for the deadline only costs time (the
    megatron-cpu scenarios that run without fail-fast sat until theirs)."""
    s = scenario()
    source, live, writes = _replay_until(tmp_path, s, _marker_at(plan_replay(tmp_path / "plan", s)[1]))
    clock = FakeClock()
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, fail_fast=False, clock=clock)
    assert watcher() is None
    budget = watch.stall_budget(watcher._spec)[0]
    clock.now += budget
    assert watcher() is None
    clock.now += 0.5
    reason = watcher()
    assert reason is not None and criteria.UNDETECTED_HANG in reason, reason


def test_any_new_log_byte_restarts_the_stall_clock(tmp_path):
    s = scenario()
    source, live, writes, at = _replay_until_marker(tmp_path, s)
    clock = FakeClock()
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, clock=clock)
    budget, _ = watch.stall_budget(watcher._spec)
    assert watcher() is None
    clock.now += budget - 1
    apply(writes[at + 1], source, live)  # one more line (the launcher's, the worker's: anything)
    assert watcher() is None
    clock.now += budget - 1
    assert watcher() is None  # 2 * budget - 2 s since the injection, but only budget - 1 s since that line


def test_no_stop_while_an_injected_hang_waits_for_the_rank_monitor(tmp_path):
    """A SIGSTOPped rank: the logs go quiet until a rank monitor's timeout fires (the longest a
    stop can wait for: the longest running deadline plus a check interval), then the launcher
    restarts. The watcher waits through all of it and the run ends unstopped."""
    s = GOOD["hang-0.7.0"]
    source, live, writes, at = _replay_until_marker(tmp_path, s)
    spec = spec_for(tmp_path, s)
    clock = FakeClock()
    out = io.StringIO()
    watcher = Watcher(spec, live, out=out, clock=clock)
    assert watcher() is None
    sections = dict(spec.section_timeouts)
    monitor = max(sections["step"], sections["checkpointing"], spec.out_of_section_timeout) + \
        watch.nvrx.check_interval(spec.workload_check_interval)
    for _ in range(int(monitor)):  # a poll a second through the whole detection window, no new byte
        clock.now += 1.0
        assert watcher() is None
    assert any(line.startswith("waiting for the rank monitor's") for line in said(out))
    for write in writes[at + 1:]:  # the timeout, the restart, the replacement's training
        apply(write, source, live)
        clock.now += 1.0
        assert watcher() is None
    assert watcher.stop_reason is None


def test_no_stop_while_a_replacement_sits_in_its_setup(tmp_path):
    """A replacement whose setup (its load) takes up to the setup section's deadline writes
    nothing meanwhile: the watcher must leave it to that deadline."""
    s = scenario()
    source, writes = plan_replay(tmp_path, s, split=False)
    started = line_landed_at(writes, "logs/launcher.log", "Cycle: 1 Event: worker_start_completed")
    live = new_live(tmp_path)
    for write in writes[:started + 1]:
        apply(write, source, live)
    spec = spec_for(tmp_path, s)
    clock = FakeClock()
    watcher = Watcher(spec, live, out=None, clock=clock)
    assert watcher() is None
    setup = dict(spec.section_timeouts)["setup"] + watch.nvrx.check_interval(spec.workload_check_interval)
    clock.now += setup
    assert watcher() is None
    for write in writes[started + 1:]:  # the replacement loads and trains to the end
        apply(write, source, live)
        assert watcher() is None
    assert watcher.stop_reason is None


def _hung_then_stopped(tmp_path: Path, stop_after_failure: bool):
    """A kill run cut after the injection, stalled until the watcher stops it, then the
    launcher's failure lines (its answer to SIGTERM) appended, and launch.json with the stop
    time: before those lines, or (stop_after_failure) after them."""
    s = scenario()
    source, live, writes, at = _replay_until_marker(tmp_path, s)
    clock = FakeClock()
    watcher = Watcher(spec_for(tmp_path, s), live, out=None, clock=clock)
    watcher()
    clock.now += watch.stall_budget(watcher._spec)[0] + 1
    reason = watcher()
    assert reason is not None
    full = HistoryReader(source, inspect_checkpoints=False).poll(final=True)
    injected = full.utc(full.injections[0])
    failed = min(full.utc(e) for e in full.launcher_events()
                 if type(e).__name__ == "WorkerFailed" and full.utc(e) is not None and full.utc(e) > injected)
    stop = failed + 1 if stop_after_failure else (injected + failed) / 2
    failing = line_landed_at(writes, "logs/launcher.log", "failed (exitcode")
    for write in writes[at + 1:failing + 3]:
        if write.rel == "logs/launcher.log":
            apply(write, source, live)
    launch = {"launcher_exit_code": -15, "started_at": "2020-01-01T00:00:00Z", "ended_at": "2035-01-01T00:00:00Z",
              "stopped_early": reason, "nvrx_version": "0.7.0", "ended_by": "watch",
              "stopped_at": iso_utc(stop)}
    (live / "launch.json").write_text(json.dumps(launch))
    tl = HistoryReader(live, inspect_checkpoints=False).poll(final=True)
    assert any(type(e).__name__ == "WorkerFailed" for e in tl.launcher_events())
    return {r.id: r for r in criteria.evaluate(tl, analyze(tl, s.fault))}


def test_a_hang_stop_reason_reaches_the_verdict(tmp_path):
    """launch.json's stop reason names the hang: replacement_cycle and clean_finish fail saying
    the stack hung undetected (not that the launcher gave up), though the launcher logged a
    failure once the harness had stopped it (that is its answer to SIGTERM, not a detection)."""
    results = _hung_then_stopped(tmp_path, stop_after_failure=False)
    for cid in ("replacement_cycle", "clean_finish"):
        r = results[cid]
        assert r.status == criteria.FAIL and criteria.UNDETECTED_HANG in r.detail, (cid, r.detail)
    assert "hung, undetected by the launcher" in results["clean_finish"].detail
    assert "gave up" not in results["clean_finish"].detail


def test_a_failure_the_launcher_logged_before_the_stop_is_its_own_detection(tmp_path):
    results = _hung_then_stopped(tmp_path, stop_after_failure=True)
    assert "hung undetected" not in results["replacement_cycle"].detail, results["replacement_cycle"].detail
