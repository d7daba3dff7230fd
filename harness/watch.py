"""Watch a live run: progress for the person waiting, and an early stop once the verdict
is certain, so that a doomed job does not hold GPUs until its timeouts expire.

`certain_failure` is a pure function of the Timeline (re-read incrementally from the run
directory every tick); `Watcher` adds the clock and the printing.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from harness import events as ev
from harness.criteria import FAIL, Analysis, analyze, check_optimizer_reload
from harness.history import HistoryReader, RunDirError
from harness.spec import RunSpec

# After the launcher reported success, how long it may take to exit on its own (NVRx 0.7.0
# waits a few seconds for other agents and its log server) before the harness stops it.
EXIT_GRACE_S = 60.0


def certain_failure(tl: ev.Timeline, a: Analysis) -> str | None:
    """Why this run can no longer qualify, or None while it still can. Only facts that no
    later line can undo count: a start from random, an older or optimizer-less load, a
    second failure, a fault that never happened, a launcher that gave up."""
    for never in a.never_fired:
        return f"the requested fault never happened ({never.src.path}: {never.reason})"
    if a.poisoned:
        return None  # the loop is the scenario: only the launcher may end it (exit 93), or the deadline
    if a.injection_count > a.planned_faults:
        return (f"{a.injection_count} injections were recorded; the plan ({a.fault_at}) holds {a.planned_faults}, each "
                "injected exactly once")
    if a.fault == "none" and a.failures:
        cycle = next(iter(a.failures))
        return f"a worker failed in cycle {cycle} of a run without an injected fault"
    if a.failed_cycle is not None and len(a.injections) >= a.planned_faults:
        later = [c for c in a.failures if c > a.failed_cycle]
        if later:
            return (f"a second failure in cycle {later[0]}, after the injected one in cycle {a.failed_cycle}: "
                    "clean_finish cannot pass")
    replacement = a.replacement
    if replacement is not None:
        args = replacement.arguments
        for flag in ("no_load_optim", "finetune"):
            if args is not None and args.flag(flag):
                return f"the replacement workers run with {flag} = True: their optimizer state is not reloaded"
        if replacement.first(ev.StartedFromRandom) is not None:
            return (f"the replacement workers (cycle {replacement.cycle}) started from random instead of "
                    "reloading a checkpoint")
        loaded = replacement.first(ev.CheckpointLoaded)
        if loaded is not None and a.expected_k is not None and loaded.iteration < a.expected_k:
            return (f"the replacement workers loaded iteration {loaded.iteration}, older than the checkpoint "
                    f"{a.expected_k} committed at fault time")
        # Once the replacement trains, its load block is complete (a rank's stdout and stderr
        # reach the per-cycle log through separate pipes, so not before): judge it with the
        # criterion itself, which knows the plain optimizer's scheduler-only evidence too.
        if replacement.first_iteration is not None:
            reload = check_optimizer_reload(tl, a)
            if reload.status == FAIL:
                return f"optimizer_reload cannot pass: {reload.detail}"
    for e in tl.launcher_events():
        if isinstance(e, ev.NoProgressStop):
            return f"the launcher stopped the job for lack of progress ({e.src})"
        if isinstance(e, (ev.RestartsExhausted, ev.LauncherFailed)):
            return f"the launcher gave up ({e.src})"
    return None


def all_evidence_in(tl: ev.Timeline) -> bool:
    """Training reported done and the launcher reported success: nothing more will come."""
    done = bool(tl.starts) and tl.starts[-1].first(ev.TrainingDone) is not None
    return done and any(isinstance(e, ev.LauncherSucceeded) for e in tl.launcher_events())


@dataclass(frozen=True)
class Progress:
    """The few facts a person waiting for the verdict wants to see change."""

    cycle: int | None
    iteration: int | None
    train_iters: int | None
    committed: int | None
    injected: str | None
    failure_detected: bool
    restored: str | None
    done: bool

    @classmethod
    def of(cls, tl: ev.Timeline, a: Analysis) -> "Progress":
        last = tl.starts[-1] if tl.starts else None
        it = last.last_iteration if last else None
        saves = [e.iteration for e in tl.of(ev.SaveCommitted)]
        injected = None
        if a.injections:  # the latest fault of the plan: each one is told when it comes (in-restore has two)
            i = a.injections[-1]
            injected = (f"{i.signal or i.fault} on rank {i.rank} after checkpoint {i.iteration}"
                        + ("" if i.fault_at == "after-commit" else f" ({i.fault_at})")
                        + (f", fault {i.fault_index} of {a.planned_faults}" if a.planned_faults > 1 else ""))
        elif a.injection is not None:
            inj = a.injection
            injected = f"{inj.signal or inj.fault} on rank {inj.rank} after checkpoint {inj.iteration}"
        restored = None
        if a.replacement is not None:
            loaded = a.replacement.first(ev.CheckpointLoaded)
            if a.replacement.first(ev.StartedFromRandom) is not None:
                restored = "started from random"
            elif loaded is not None:
                optim = "with" if a.replacement.first(ev.OptimizerLoaded) is not None else "without"
                restored = f"loaded checkpoint {loaded.iteration} {optim} optimizer state"
        return cls(cycle=last.cycle if last else None, iteration=it.iteration if it else None,
                   train_iters=it.train_iters if it else None, committed=max(saves) if saves else None,
                   injected=injected, failure_detected=bool(a.failures), restored=restored,
                   done=last is not None and last.first(ev.TrainingDone) is not None)

    def changes(self, before: "Progress | None") -> list[str]:
        b = before or Progress(None, None, None, None, None, False, None, False)
        out = []
        if self.cycle is not None and self.cycle != b.cycle:
            out.append(f"cycle {self.cycle}: workers started")
        if self.committed is not None and self.committed != b.committed:
            out.append(f"checkpoint {self.committed} committed (iteration {self.iteration}/{self.train_iters})")
        if self.injected and self.injected != b.injected:
            out.append(f"fault injected: {self.injected}")
        if self.failure_detected and not b.failure_detected:
            out.append("the launcher detected the failure")
        if self.restored and self.restored != b.restored:
            out.append(f"replacement workers {self.restored}")
        if self.done and not b.done:
            out.append(f"training done at iteration {self.iteration}/{self.train_iters}")
        return out


class Watcher:
    """Called by harness.launch every tick: prints progress, returns a reason to stop or None."""

    def __init__(self, spec: RunSpec, run_dir: Path, *, out: TextIO | None = sys.stdout,
                 fail_fast: bool = True, clock: Callable[[], float] = time.monotonic):
        self._spec = spec
        self._reader = HistoryReader(run_dir, inspect_checkpoints=False)  # no torch import in the watcher
        self._out = out
        self._fail_fast = fail_fast
        self._clock = clock
        self._start = clock()
        self._progress: Progress | None = None
        self._evidence_in_at: float | None = None
        self.stop_reason: str | None = None

    def _say(self, text: str) -> None:
        if self._out is not None:
            print(f"  [{self._clock() - self._start:7.1f}s] {text}", file=self._out, flush=True)

    def __call__(self) -> str | None:
        try:
            tl = self._reader.poll()
        except RunDirError:  # nothing written yet: no log, no checkpoint, no marker
            return None
        a = analyze(tl, self._spec.fault)
        progress = Progress.of(tl, a)
        for line in progress.changes(self._progress):
            self._say(line)
        self._progress = progress
        elapsed = self._clock() - self._start
        reason = None
        if self._fail_fast:
            reason = certain_failure(tl, a)
            setup = dict(self._spec.section_timeouts).get("setup", 0.0)
            if (reason is None and progress.iteration is None and elapsed > setup + self._spec.out_of_section_timeout
                    and not a.poisoned):
                reason = f"no training iteration within the setup deadline ({setup:.0f} s + out of section)"
        if reason is None and all_evidence_in(tl):
            self._evidence_in_at = self._evidence_in_at or self._clock()
            if self._clock() - self._evidence_in_at > EXIT_GRACE_S:
                reason = f"all evidence is in, but the launcher had not exited {EXIT_GRACE_S:.0f} s after success"
        if reason:
            self.stop_reason = reason
            self._say(f"stopping the job: {reason}")
        return reason
