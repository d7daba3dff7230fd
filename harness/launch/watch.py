"""Watch a live run: progress for the person waiting, and an early stop once the verdict
is certain, so that a doomed job does not hold GPUs until its timeouts expire.

`certain_failure` asks the criteria (a pure function of the Timeline, re-read incrementally
from the run directory every tick) for a final failure; `Watcher` adds the clock and the
progress lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from harness.vocab import events as ev
from harness.machine import nvrx
from harness.judge.criteria import UNDETECTED_HANG, Analysis, analyze, judge
from harness.judge.sentences import render
from harness.judge.episodes import committed_before
from harness.read.history import HistoryReader, RunDirError
from harness.vocab.faults import DEFAULT_FAULT_AT, FAULT_KINDS, hits_a_save
from harness.plan.spec import RunSpec

# After the launcher reported success, how long it may take to exit on its own (NVRx 0.7.0
# waits a few seconds for other agents and its log server) before the harness stops it.
EXIT_GRACE_S = 60.0


def certain_failure(tl: ev.Timeline, a: Analysis) -> str | None:
    """Why this run can no longer qualify, or None while it still can: the first failure a
    criterion marks final (no later line can undo it). The criteria decide; the watcher asks,
    and renders the sentence of that one result only."""
    for result in judge(tl, a).results:
        if result.final:
            return f"{result.id} cannot pass: {render(result).detail}"
    return None


def stall_budget(spec: RunSpec) -> tuple[float, str]:
    """How long a run may show no progress before it is a hang the stack did not detect, and
    how that is made up: the longest deadline a rank monitor can be waiting on (any section's,
    setup included since a replacement's load runs in it, or the out-of-section one), one check
    interval for the monitor to notice it expired, and one restart for the launcher to act on it
    (nvrx.RESTART_ALLOWANCE_S). An injected hang waiting for its rank monitor, a replacement in
    its setup, a save in its checkpointing section all end within it, or NVRx would have acted."""
    deadlines = [*dict(spec.section_timeouts).items(), ("out-of-section", spec.out_of_section_timeout)]
    which, longest = max(deadlines, key=lambda d: d[1])
    check = nvrx.check_interval(spec.workload_check_interval)
    how = (f"the longest rank monitor deadline ({which} {longest:g} s) + a {check:g} s check interval + "
           f"{nvrx.RESTART_ALLOWANCE_S:g} s for a restart")
    return longest + check + nvrx.RESTART_ALLOWANCE_S, how


def all_evidence_in(tl: ev.Timeline) -> bool:
    """Training reported done and the launcher reported success: nothing more will come."""
    done = bool(tl.starts) and tl.starts[-1].first(ev.TrainingDone) is not None
    return done and any(isinstance(e, ev.LauncherSucceeded) for e in tl.launcher_events())


HEARTBEAT_S = 5.0  # while the run waits, a line at least this often: what it waits for, how long so far

# The launcher's records that a cycle failed (harness.judge.episodes.launcher_cycles reads the same ones).
_FAILURE_RECORDS = (ev.WorkerFailed, ev.WorkerGroupFailed, ev.RestartsExhausted)
_GAVE_UP = (ev.RestartsExhausted, ev.NoProgressStop)


@dataclass(frozen=True)
class Fact:
    """One progress line and what makes it the same fact on every poll (`key`): the watcher
    tells each key once."""

    key: tuple[object, ...]
    text: str


def _failed_cycle(e: ev.Event) -> int | None:
    """The cycle whose failure `e` records, or None when it records none."""
    if isinstance(e, ev.ProfilingEvent):
        return e.subject_cycle if e.name == "failure_detected" else None
    return e.cycle if isinstance(e, _FAILURE_RECORDS) else None


def _started_cycle(tl: ev.Timeline, a: Analysis, e: ev.Event) -> int | None:
    """The cycle whose workers' start `e` is the launcher's record of (the one a.workers_started
    keeps: NVRx >= 0.6 `worker_start_completed`, 0.4.1 the rendezvous join), else None."""
    if isinstance(e, ev.ProfilingEvent) and e.name == "worker_start_completed":
        cycle = e.cycle
    elif isinstance(e, ev.RendezvousJoined) and tl.launcher_dialect == "0.4.1":
        cycle = e.round if e.round is not None else e.cycle
    else:
        return None
    return cycle if cycle is not None and a.workers_started.get(cycle) is e else None


def _planned(a: Analysis) -> int:
    """How many faults the run holds: the plan's (a campaign's --faults, in-restore's two), or
    the markers found when there are more."""
    return max(a.planned_faults, len(a.episodes))


def _fault_of(a: Analysis, ep) -> str:  # noqa: ANN001 - an Episode
    """`fault 2 of 3: segfault` for a run of several faults; "" for one."""
    return f"fault {ep.number} of {_planned(a)}: {a.kind_name(ep)}" if _planned(a) > 1 else ""


def _restored(start: ev.AppStart) -> str | None:
    """How a start restored: 'loaded checkpoint K with[out] optimizer state', 'started from random', or None."""
    if start.first(ev.StartedFromRandom) is not None:
        return "started from random"
    loaded = start.first(ev.CheckpointLoaded)
    if loaded is None:
        return None
    # Megatron's plain optimizer prints no optimizer line; its scheduler lines are the evidence
    distributed = start.flag("use_distributed_optimizer")
    scheduler = start.first(ev.SchedulerValueLoaded) is not None
    if start.first(ev.OptimizerLoaded) is None and scheduler and distributed is None:
        return f"loaded checkpoint {loaded.iteration}, its optimizer state not shown"
    reloaded = start.first(ev.OptimizerLoaded) is not None or (
        distributed is not None and distributed[0] is False and scheduler)
    return f"loaded checkpoint {loaded.iteration} {'with' if reloaded else 'without'} optimizer state"


def facts(tl: ev.Timeline, a: Analysis, train_iters: int | None = None) -> list[Fact]:
    """Every progress fact the Timeline holds, in its order (tl.events: UTC time, then source
    order): each cycle's start and failure as the launcher recorded them, each committed
    checkpoint, each injection, the first rank monitor timeout of each cycle, each start's
    restore and end of training, and the launcher's success. A watcher tells each key once, so
    a fact that several polls see is one line, and facts one poll finds together come in the
    order they happened. The marker implies its checkpoint was committed (the nemesis fires
    once the tracker names it, often before Megatron's save line reaches the log): that
    commit is told before the injection, and the save line, when it comes, is the same fact."""
    owner: dict[int, ev.AppStart] = {}
    start_key: dict[int, tuple[str, int]] = {}
    ordinal: dict[str, int] = {}
    for s in tl.starts:
        n = ordinal[s.source] = ordinal.get(s.source, -1) + 1
        start_key[id(s)] = (s.source, n)
        for e in s.events:
            owner[id(e)] = s
    by_marker = {id(ep.marker): ep for ep in a.episodes}
    by_cycle = {ep.cycle: ep for ep in a.episodes}
    total = train_iters or tl.run.train_iters

    def of_total(i: int) -> str:
        return f"{i}/{total}" if total else f"{i}"

    def committed(cycle: int | None, iteration: int) -> Fact:
        return Fact(("committed", cycle, iteration), f"checkpoint {iteration} committed (iteration {of_total(iteration)})")

    out: list[Fact] = []
    for e in tl.events:
        if (c := _started_cycle(tl, a, e)) is not None:
            out.append(Fact(("started", c), f"cycle {c}: workers started (launcher record)"))
        elif isinstance(e, ev.SaveCommitted):
            s = owner.get(id(e))
            out.append(committed(s.cycle if s is not None else None, e.iteration))
        elif isinstance(e, ev.Injection) and (ep := by_marker.get(id(e))) is not None:
            k = committed_before(e)
            if k is not None:
                out.append(committed(e.cycle, k))
            when = (f"during the save of checkpoint {e.iteration}" if hits_a_save(e.fault_at)
                    else f"after checkpoint {e.iteration}" + ("" if e.fault_at == DEFAULT_FAULT_AT else f" ({e.fault_at})"))
            what = e.signal or e.fault
            kind = a.kind_name(ep)
            if a.fault == "campaign" and kind != what:
                what = f"{kind} ({what})" if e.signal else kind
            out.append(Fact(("injected", e.fault_index), f"fault injected: {what} on rank {e.rank} {when}"
                            + (f", fault {ep.number} of {_planned(a)}" if _planned(a) > 1 else "")))
        elif isinstance(e, ev.RankTimeout):
            section = f"section '{e.section}'" if e.kind == "section" and e.section else e.kind.replace("_", "-")
            rank = e.rank if e.rank is not None else e.local_rank
            took = (f" ({e.elapsed:g} s, timeout {e.timeout:g} s)" if e.elapsed is not None and e.timeout is not None
                    else "")
            out.append(Fact(("timeout", e.cycle), f"the rank monitor's {section} timeout fired for "
                            f"{'a rank' if rank is None else f'rank {rank}'}{took}"))
        elif (c := _failed_cycle(e)) is not None:
            ep = by_cycle.get(c)
            which = f" ({_fault_of(a, ep)})" if ep is not None and _planned(a) > 1 else ""
            out.append(Fact(("detected", c), f"the launcher detected the failure of cycle {c}{which}"))
            if isinstance(e, _GAVE_UP):
                out.append(Fact(("gave_up",), "the launcher gave up: it will start no more workers"))
        elif isinstance(e, (ev.CheckpointLoaded, ev.StartedFromRandom)) and (s := owner.get(id(e))) is not None:
            restored = _restored(s)
            if restored is None:
                continue
            ep = next((x for x in a.episodes if any(r is s for r in x.continuation[:1])), None)
            replacement = ep is not None or any(s.cycle is not None and c < s.cycle for c in a.failures)
            if not replacement and restored == "started from random":
                continue  # a job's first start: nothing to load yet
            who = f"replacement workers (cycle {s.cycle})" if replacement else f"workers (cycle {s.cycle})"
            which = f" (after {_fault_of(a, ep)})" if ep is not None and _planned(a) > 1 else ""
            out.append(Fact(("restored", start_key[id(s)]), f"{who} {restored}{which}"))
        elif isinstance(e, ev.TrainingDone) and (s := owner.get(id(e))) is not None:
            it = s.last_iteration
            at = f" at iteration {it.iteration}/{it.train_iters}" if it is not None else ""
            out.append(Fact(("done", start_key[id(s)]), f"training done{at}"))
        elif isinstance(e, ev.LauncherSucceeded):
            out.append(Fact(("succeeded",), "the launcher reported success; waiting for it to exit"))
        elif isinstance(e, _GAVE_UP):
            out.append(Fact(("gave_up",), "the launcher gave up: it will start no more workers"))
    return out


@dataclass(frozen=True)
class Wait:
    """What the run waits for now; `key` names the wait (its heartbeat counts the seconds from
    when it began); `opening`: said at once when the wait begins."""

    key: tuple[object, ...]
    text: str  # completes "waiting for ..."
    opening: str | None = None
    heartbeat: str | None = None  # the heartbeat's own line instead of "waiting for <text>, N s so far"

    def line(self, seconds: float) -> str:
        return self.heartbeat or f"waiting for {self.text}, {seconds:.0f} s so far"


START = Wait(("start",), "the launcher to record the workers' start")


def hang_wait(spec: RunSpec) -> str:
    """What a hang waits for: the first rank monitor timeout that can fire (a peer blocked in a
    step, or the hung rank out of its sections), plus one check interval."""
    sections = dict(spec.section_timeouts)
    step, outside = sections.get("step"), spec.out_of_section_timeout
    check = spec.workload_check_interval
    which, seconds = min((("step", step), ("out-of-section", outside)), key=lambda w: (w[1] is None, w[1] or 0))
    extra = f" + a {check:g} s check interval" if check else ""
    return f"the rank monitor's {which} timeout ({seconds:g} s{extra})"


def waiting_for(tl: ev.Timeline, a: Analysis, spec: RunSpec) -> Wait:
    """What the run waits for, from the Timeline so far: the newest fault's detection, a failed
    cycle's restart and a replacement's load while they are to come, else the launcher's start
    of the workers, their first iteration, the next checkpoint, the launcher's success or its exit."""
    launcher = list(tl.launcher_events())
    if any(isinstance(e, ev.LauncherSucceeded) for e in launcher):
        return Wait(("exit",), "the launcher to exit")
    if any(isinstance(e, _GAVE_UP) for e in launcher):
        return Wait(("exit",), "the launcher to exit (it gave up)")
    ep = a.closing
    if ep is not None and not ep.failures:
        kind = a.kind(ep)
        if kind is not None and kind.monitor_detects:
            wait = hang_wait(spec)
            return Wait(("detect", ep.number), wait, opening=f"{wait} to notice the hung rank {ep.marker.rank}")
        return Wait(("detect", ep.number), f"the launcher to detect the failure of cycle {ep.cycle}")
    failed = max(a.failures, default=None)
    started = max(a.workers_started, default=None)
    inprocess = ep is not None and ep.replacement_cycle is None and ep.replacement is not None  # harness.vocab.tiers
    if failed is not None and (started is None or started <= failed) and not inprocess:
        return Wait(("restart", failed), f"the launcher to start replacement workers after the failure of cycle {failed}")
    if started is None:
        return START
    replacing = failed is not None and failed < started  # the newest workers replace failed ones
    k = ep.expected_k if ep is not None and ep.expected_k is not None and ep.cycle < started else None
    load = Wait(("restore", started), f"the replacement workers (cycle {started}) to load "
                                     + (f"checkpoint {k}" if k is not None else "a checkpoint"))
    last = tl.starts[-1] if tl.starts else None
    if last is None or last.cycle is None or last.cycle < started:
        return load if replacing else Wait(("setup", started), f"the first iteration of cycle {started} (the workers' "
                                                                "setup)")
    if last.first(ev.TrainingDone) is not None:
        return Wait(("success",), "the launcher to report success")
    it = last.last_iteration
    if it is None:
        return load if replacing and _restored(last) is None else Wait(
            ("setup", last.cycle), f"the first iteration of cycle {last.cycle} (the workers' setup)")
    saves = last.of(ev.SaveCommitted)
    return Wait(("train", last.cycle, saves[-1].iteration if saves else None), "the next checkpoint",
                heartbeat=f"training at iteration {it.iteration}/{it.train_iters}; waiting for the next checkpoint")


class Watcher:
    """Called by harness.launch.job every tick: prints progress, returns a reason to stop or None.

    Its lines are the run's facts (`facts`), each told once in the order the reader's Timeline
    gives them, and while nothing new comes a heartbeat at least every HEARTBEAT_S saying what
    the run waits for (`waiting_for`) and for how long; an injected hang that only a rank
    monitor can notice is named at once."""

    def __init__(self, spec: RunSpec, run_dir: Path, *, out: TextIO | None = None,
                 fail_fast: bool = True, clock: Callable[[], float] = time.monotonic,
                 reader: HistoryReader | None = None, shown_from: float | None = None):
        self._spec = spec
        # no torch import in the watcher; the runner passes its reader to read the run once
        self.reader = reader if reader is not None else HistoryReader(run_dir, inspect_checkpoints=False)
        self._out = out
        self._fail_fast = fail_fast
        self._clock = clock
        self._start = clock()
        self._shown_from = self._start if shown_from is None else shown_from  # the stamps' zero (say)
        self._said_at = self._start  # the last line said (the heartbeat counts from it)
        self._told: set[tuple[object, ...]] = set()  # the keys of the facts told
        self._wait: tuple[object, ...] = START.key  # the wait in progress, and since when: the launch's
        self._wait_since = self._start
        self._evidence_in_at: float | None = None
        self._moved: tuple[object, ...] | None = None  # the run's progress at its last change
        self._moved_at = self._start  # and when the watcher saw it change
        self.stop_reason: str | None = None

    def say(self, text: str) -> None:
        """One progress line, stamped with the seconds since the watcher was made."""
        self._said_at = self._clock()
        if self._out is not None:
            print(f"  [{self._said_at - self._shown_from:7.1f}s] {text}", file=self._out, flush=True)

    @property
    def workers_started(self) -> bool:
        """A fact told: the launcher recorded the start of the run's workers (harness.launch.runner
        launches a twin then, harness.launch.baseline.twin_start)."""
        return any(key[0] == "started" for key in self._told)

    @property
    def compute_over(self) -> bool:
        """A fact told: the job's workers are done computing (training done, the launcher
        reported success or gave up): what is left of the launch is its shutdown, which waits."""
        return any(key[0] in ("done", "succeeded", "gave_up") for key in self._told)

    def hang_wait(self) -> str:
        return hang_wait(self._spec)

    def _tell(self, tl: ev.Timeline, a: Analysis) -> None:
        """The facts not told yet, in order, then the heartbeat of the wait that follows them."""
        for fact in facts(tl, a, self._spec.train_iters):
            if fact.key not in self._told:
                self._told.add(fact.key)
                self.say(fact.text)
        self._heartbeat(waiting_for(tl, a, self._spec))

    def _heartbeat(self, wait: Wait) -> None:
        now = self._clock()
        if wait.key != self._wait:
            self._wait, self._wait_since = wait.key, now
            if wait.opening is not None:
                self.say(f"waiting for {wait.opening}")
            return
        if now - self._said_at >= HEARTBEAT_S:
            self.say(wait.line(now - self._wait_since))

    def _stalled(self, tl: ev.Timeline, a: Analysis) -> str | None:
        """A hang the stack did not detect: nothing moved (no progress fact, iteration, failure
        the launcher recorded, nor a new byte in any log) for longer than stall_budget, and the
        launcher has not reported success (then the exit grace decides)."""
        moved = (len(self._told), len(a.failures), sum(s.bytes_read for s in tl.sources))
        now = self._clock()
        if moved != self._moved:
            self._moved, self._moved_at = moved, now
            return None
        budget, how = stall_budget(self._spec)
        stalled = now - self._moved_at
        if ("succeeded",) in self._told or stalled <= budget:
            return None
        return (f"no progress for {stalled:.0f} s and the launcher detected nothing: {UNDETECTED_HANG} (no new log "
                f"line, iteration, checkpoint, failure or restart in that time, longer than {budget:g} s: {how})")

    def __call__(self) -> str | None:
        try:
            tl = self.reader.poll()
        except RunDirError:  # nothing written yet: no log, no checkpoint, no marker
            tl = None
        if tl is None:
            self._heartbeat(START)
            return None
        a = analyze(tl, self._spec.fault)
        self._tell(tl, a)
        elapsed = self._clock() - self._start
        reason = None
        if self._fail_fast:
            reason = certain_failure(tl, a)
            setup = dict(self._spec.section_timeouts).get("setup", 0.0)
            # the job never trained at all (no start logged an iteration): a replacement start that
            # has not trained yet is the setup deadline's to judge, however long the run has been going
            trained = any(s.last_iteration is not None for s in tl.starts)
            if (reason is None and not trained and elapsed > setup + self._spec.out_of_section_timeout
                    and not any(a.poisons(e) for e in a.subjects)):
                reason = f"no training iteration within the setup deadline ({setup:.0f} s + out of section)"
        if reason is None:  # an undetected hang is no verdict's to wait for, fail-fast or not
            reason = self._stalled(tl, a)
        if reason is None and all_evidence_in(tl):
            self._evidence_in_at = self._evidence_in_at or self._clock()
            if self._clock() - self._evidence_in_at > EXIT_GRACE_S:
                reason = f"all evidence is in, but the launcher had not exited {EXIT_GRACE_S:.0f} s after success"
        if reason:
            self.stop_reason = reason
            self.say(f"stopping the job: {reason}")
        return reason
