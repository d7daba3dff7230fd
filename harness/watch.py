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

from harness import events as ev
from harness import nvrx
from harness.criteria import UNDETECTED_HANG, Analysis, analyze, evaluate
from harness.episodes import committed_before
from harness.history import HistoryReader, RunDirError
from harness.faults import FAULT_KINDS
from harness.spec import RunSpec

# After the launcher reported success, how long it may take to exit on its own (NVRx 0.7.0
# waits a few seconds for other agents and its log server) before the harness stops it.
EXIT_GRACE_S = 60.0
HANG_NOTE_S = 5.0  # during an injected hang, a line every this many seconds: what it waits for, how long so far


def certain_failure(tl: ev.Timeline, a: Analysis) -> str | None:
    """Why this run can no longer qualify, or None while it still can: the first failure a
    criterion marks final (no later line can undo it). The criteria decide; the watcher asks."""
    for result in evaluate(tl, a):
        if result.final:
            return f"{result.id} cannot pass: {result.detail}"
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


# Recovery order of the progress facts: lines that one poll finds together are printed in
# this order, whatever order the files revealed them in.
(_STARTED, _COMMITTED, _INJECTED, _DETECTED, _RESTARTED, _RESTORED, _COMMITTED_AFTER, _DONE,
 _LAUNCHER_OK) = range(9)


@dataclass(frozen=True)
class Progress:
    """The few facts a person waiting for the verdict wants to see change.

    "Workers started" is the launcher's record of a worker-group start (NVRx >= 0.6
    `worker_start_completed`, 0.4.1 `joined round N`), the same moment the report's latency
    split calls "workers started", not the first line of the workers' own log."""

    workers_started: tuple[int, ...]  # cycles whose start the launcher recorded
    iteration: int | None
    train_iters: int | None
    committed: int | None
    injected: str | None
    injected_after: int | None  # the checkpoint the fault followed (the marker's iteration)
    fault_cycles: tuple[int, ...]  # the cycles the episodes' faults hit
    failure_detected: bool
    restored: str | None
    done: bool
    launcher_succeeded: bool = False

    @classmethod
    def of(cls, tl: ev.Timeline, a: Analysis) -> "Progress":
        last = tl.starts[-1] if tl.starts else None
        it = last.last_iteration if last else None
        saves = [e.iteration for e in tl.of(ev.SaveCommitted)]
        injected = after = None
        if a.closing is not None:  # the latest episode: each fault is told when it comes (in-restore has two)
            i = a.closing.marker
            # in-save: the marker's iteration is the save in flight; the committed one is recorded beside it
            after = committed_before(i)
            when = (f"during the save of checkpoint {i.iteration}" if i.fault_at == "in-save"
                    else f"after checkpoint {i.iteration}" + ("" if i.fault_at == "after-commit" else f" ({i.fault_at})"))
            injected = (f"{i.signal or i.fault} on rank {i.rank} {when}"
                        + (f", fault {i.fault_index} of {a.planned_faults}" if a.planned_faults > 1 else ""))
        if after is not None:
            # The marker is written once the tracker names `after`: that checkpoint is
            # committed even when Megatron's save line has not reached the log yet.
            saves.append(after)
        restored = None
        r = a.closing.replacement if a.closing is not None else None
        if r is not None:
            loaded = r.first(ev.CheckpointLoaded)
            if r.first(ev.StartedFromRandom) is not None:
                restored = "started from random"
            elif loaded is not None:
                # Megatron's plain optimizer prints no optimizer line; its scheduler lines are the evidence
                args = r.arguments
                plain = args is not None and args.flag("use_distributed_optimizer") is False
                reloaded = r.first(ev.OptimizerLoaded) is not None or (
                    plain and r.first(ev.SchedulerValueLoaded) is not None)
                optim = "with" if reloaded else "without"
                restored = f"loaded checkpoint {loaded.iteration} {optim} optimizer state"
        # NVRx >= 0.6 logs the rendezvous join before `worker_start_completed`, the record the
        # latency split is timed by: wait for that one (0.4.1 has only the join).
        started = tuple(c for c, e in sorted(a.workers_started.items())
                        if tl.launcher_dialect == "0.4.1" or not isinstance(e, ev.RendezvousJoined))
        return cls(workers_started=started, iteration=it.iteration if it else None,
                   train_iters=it.train_iters if it else None, committed=max(saves) if saves else None,
                   injected=injected, injected_after=after, fault_cycles=tuple(e.cycle for e in a.episodes),
                   failure_detected=bool(a.failures), restored=restored,
                   done=last is not None and last.first(ev.TrainingDone) is not None,
                   launcher_succeeded=any(isinstance(e, ev.LauncherSucceeded) for e in tl.launcher_events()))

    def changes(self, before: "Progress | None") -> list[str]:
        """The facts that are new since `before`, in recovery order."""
        b = before or Progress((), None, None, None, None, None, (), False, None, False)
        out: list[tuple[int, str]] = []
        for c in self.workers_started:
            if c not in b.workers_started:
                replacement = any(c > f for f in self.fault_cycles)
                out.append((_RESTARTED if replacement else _STARTED, f"cycle {c}: workers started (launcher record)"))
        if self.committed is not None and self.committed != b.committed:
            after = self.injected_after is not None and self.committed > self.injected_after
            shown = f" (iteration {self.iteration}/{self.train_iters})" if self.iteration is not None else ""
            out.append((_COMMITTED_AFTER if after else _COMMITTED, f"checkpoint {self.committed} committed{shown}"))
        if self.injected and self.injected != b.injected:
            out.append((_INJECTED, f"fault injected: {self.injected}"))
        if self.failure_detected and not b.failure_detected:
            out.append((_DETECTED, "the launcher detected the failure"))
        if self.restored and self.restored != b.restored:
            out.append((_RESTORED, f"replacement workers {self.restored}"))
        if self.done and not b.done:
            out.append((_DONE, f"training done at iteration {self.iteration}/{self.train_iters}"))
        if self.launcher_succeeded and not b.launcher_succeeded:
            out.append((_LAUNCHER_OK, "the launcher reported success; waiting for it to exit"))
        return [text for _, text in sorted(out, key=lambda item: item[0])]


class Watcher:
    """Called by harness.launch every tick: prints progress, returns a reason to stop or None."""

    def __init__(self, spec: RunSpec, run_dir: Path, *, out: TextIO | None = None,
                 fail_fast: bool = True, clock: Callable[[], float] = time.monotonic,
                 reader: HistoryReader | None = None):
        self._spec = spec
        # no torch import in the watcher; the runner passes its reader to read the run once
        self.reader = reader if reader is not None else HistoryReader(run_dir, inspect_checkpoints=False)
        self._out = out
        self._fail_fast = fail_fast
        self._clock = clock
        self._start = clock()
        self._progress: Progress | None = None
        self._evidence_in_at: float | None = None
        self._hang_seen_at: float | None = None  # when the watcher first saw the injected hang
        self._hang_said_at: float | None = None
        self._moved: tuple[object, ...] | None = None  # the run's progress at its last change
        self._moved_at = self._start  # and when the watcher saw it change
        self.stop_reason: str | None = None

    def say(self, text: str) -> None:
        """One progress line, stamped with the seconds since the watcher was made."""
        if self._out is not None:
            print(f"  [{self._clock() - self._start:7.1f}s] {text}", file=self._out, flush=True)

    def hang_wait(self) -> str:
        """What a hang waits for: the first rank monitor timeout that can fire (a peer blocked in a
        step, or the stopped rank out of its sections), plus one check interval."""
        sections = dict(self._spec.section_timeouts)
        step, outside = sections.get("step"), self._spec.out_of_section_timeout
        check = self._spec.workload_check_interval
        which, seconds = min((("step", step), ("out-of-section", outside)), key=lambda w: (w[1] is None, w[1] or 0))
        extra = f" + a {check:g} s check interval" if check else ""
        return f"the rank monitor's {which} timeout ({seconds:g} s{extra})"

    def _say_hang_wait(self, progress: "Progress", a: "Analysis | None" = None) -> None:
        """During an injected hang, every HANG_NOTE_S: what the run waits for, and how long so far."""
        # the newest fault's kind (a campaign's differ per fault)
        kind = a.kind(a.closing) if a is not None and a.closing is not None else FAULT_KINDS.get(self._spec.fault)
        if kind is None or not kind.monitor_detects or not progress.injected or progress.failure_detected:
            return
        now = self._clock()
        if self._hang_seen_at is None:
            self._hang_seen_at = self._hang_said_at = now
            self.say(f"waiting for {self.hang_wait()} to notice the stopped rank")
            return
        if now - (self._hang_said_at or now) >= HANG_NOTE_S:
            self._hang_said_at = now
            self.say(f"waiting for {self.hang_wait()}, {now - self._hang_seen_at:.0f} s so far")

    def _stalled(self, tl: ev.Timeline, a: Analysis, progress: Progress) -> str | None:
        """A hang the stack did not detect: nothing moved (no progress fact, iteration, failure
        the launcher recorded, nor a new byte in any log) for longer than stall_budget, and the
        launcher has not reported success (then the exit grace decides)."""
        moved = (progress, len(a.failures), sum(s.bytes_read for s in tl.sources))
        now = self._clock()
        if moved != self._moved:
            self._moved, self._moved_at = moved, now
            return None
        budget, how = stall_budget(self._spec)
        stalled = now - self._moved_at
        if progress.launcher_succeeded or stalled <= budget:
            return None
        return (f"no progress for {stalled:.0f} s and the launcher detected nothing: {UNDETECTED_HANG} (no new log "
                f"line, iteration, checkpoint, failure or restart in that time, longer than {budget:g} s: {how})")

    def __call__(self) -> str | None:
        try:
            tl = self.reader.poll()
        except RunDirError:  # nothing written yet: no log, no checkpoint, no marker
            return None
        a = analyze(tl, self._spec.fault)
        progress = Progress.of(tl, a)
        for line in progress.changes(self._progress):
            self.say(line)
        self._progress = progress
        self._say_hang_wait(progress, a)
        elapsed = self._clock() - self._start
        reason = None
        if self._fail_fast:
            reason = certain_failure(tl, a)
            setup = dict(self._spec.section_timeouts).get("setup", 0.0)
            # the job never trained at all (no start logged an iteration): a replacement start that
            # has not trained yet is the setup deadline's to judge, however long the run has been going
            trained = any(s.last_iteration is not None for s in tl.starts)
            if (reason is None and not trained and elapsed > setup + self._spec.out_of_section_timeout
                    and not a.poisoned):
                reason = f"no training iteration within the setup deadline ({setup:.0f} s + out of section)"
        if reason is None:  # an undetected hang is no verdict's to wait for, fail-fast or not
            reason = self._stalled(tl, a, progress)
        if reason is None and all_evidence_in(tl):
            self._evidence_in_at = self._evidence_in_at or self._clock()
            if self._clock() - self._evidence_in_at > EXIT_GRACE_S:
                reason = f"all evidence is in, but the launcher had not exited {EXIT_GRACE_S:.0f} s after success"
        if reason:
            self.stop_reason = reason
            self.say(f"stopping the job: {reason}")
        return reason
