"""The recovery criteria (the walkthrough's five, then the further checks): pure functions of
the run's evidence (Jepsen-style checkers).

Each checker takes the Timeline and the `Analysis` derived from it once (which fault, which
cycle failed, which start replaced it, which checkpoint K it had to load) and returns a
`CriterionResult`: pass / fail / not_applicable / unknown, one sentence a person can act on,
and the evidence lines (`file:line: text`). `check_safe` turns a checker's exception into
`unknown`; the run is qualified only when every criterion is pass or not_applicable.

A failure is `final` when no later line of the run can undo it (the nemesis said the fault
will never fire; the replacement ran with --no-load-optim, started from random or loaded an
older checkpoint; a second failure; the launcher gave up or stopped the loop). The watcher
stops a live job on a final failure: the criteria decide, the watcher only asks.

A criterion whose premise another criterion owns is `not_applicable` when that premise is
missing (no injection: nothing to replace; no replacement: nothing reloaded), so a broken
run fails the criterion that names its cause instead of every criterion downstream.
Nothing here reads files.
"""

from __future__ import annotations

import dataclasses
import math
import signal
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Callable, Mapping, Sequence

from harness import events as ev
from harness.events import AppStart, Src, Timeline, iso_utc
from harness.layout import MARKER_NAME, TRACKER_NAME, parse_tracker
from harness.faults import DEFAULT_FAULT_AT, FAULT_KINDS, FAULT_MOMENTS, FAULTS, FLIP_DISTCP, IN_PROCESS
from harness.verdict import CriterionResult, Status, qualified

# The vocabulary is harness.verdict's; these names stay for the checkers and their tests.
PASS, FAIL, NOT_APPLICABLE, UNKNOWN = Status.PASS, Status.FAIL, Status.NOT_APPLICABLE, Status.UNKNOWN
STATUSES = tuple(Status)
CRITERIA_IDS = ("pre_fault_checkpoint", "replacement_cycle", "optimizer_reload", "later_checkpoint", "clean_finish")
# Appended after the five (docs/contracts.md: further checks append their ids): the restored
# optimizer's own record on disk, read offline, beyond the log lines optimizer_reload reads.
OPTIMIZER_STATE = "optimizer_state"
# The checks every run gets.
CHECK_IDS = (*CRITERIA_IDS, OPTIMIZER_STATE)
# Then, only for a plan that makes a restart loop: the loop stopped by NVRx's no-progress rule.
LOOP_STOPPED = "loop_stopped"
NO_RESTART_EXIT_CODE = 93  # NVRx 0.7.0's --ft-no-restart-exit-code, as the plan passes it
NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES = 3
# A signal's kind when only the nemesis's line tells: the first kind that sends it (SIGKILL: kill).
_SIGNAL_KIND: dict[str, str] = {}
for _kind in FAULT_KINDS.values():
    if _kind.signal is not None and _kind.injects != IN_PROCESS:  # an in-process kind's line names the kind
        _SIGNAL_KIND.setdefault(_kind.signal, _kind.name)
MAX_EVIDENCE = 12


def _result(cid: str, status: str, detail: str, evidence: Sequence[object] = (), *, final: bool = False) -> CriterionResult:
    lines: list[str] = []
    for item in evidence:
        if item is None:
            continue
        text = str(item.src if isinstance(item, ev.Event) else item)
        if text not in lines:
            lines.append(text)
    if len(lines) > MAX_EVIDENCE:
        lines = lines[: MAX_EVIDENCE - 1] + [f"... {len(lines) - MAX_EVIDENCE + 1} more"]
    return CriterionResult(cid, status, detail, tuple(lines), final=final and status == FAIL)


# ---------------------------------------------------------------- the analysis shared by checkers


@dataclass(frozen=True)
class Analysis:
    """Facts every checker needs, derived once from the Timeline (pure)."""

    fault: str
    fault_how: str
    injection: ev.Injection | None
    injection_count: int
    injection_evidence: tuple[ev.Event, ...]
    never_fired: tuple[ev.NemesisNeverFired, ...]
    failed_cycle: int | None
    fault_start: AppStart | None
    post_starts: tuple[AppStart, ...]
    failures: dict[int, tuple[ev.LauncherEvent, ...]]  # launcher cycle -> failure records
    workers_started: dict[int, ev.LauncherEvent]  # launcher cycle -> workers-started record
    replacement_cycle: int | None  # first launcher cycle after the failed one whose workers started
    expected_k: int | None  # the latest checkpoint committed at fault time
    expected_k_evidence: tuple[ev.Event, ...]
    notes: tuple[str, ...] = field(default=())
    fault_at: str = DEFAULT_FAULT_AT  # the plan's moment (run.json, else the markers)
    planned_faults: int = 1  # faults the plan holds (in-restore: 2), each with its own marker
    injections: tuple[ev.Injection, ...] = ()  # every marker, in fault order; `injection` is the last one

    @property
    def first_injection(self) -> ev.Injection | None:
        return self.injections[0] if self.injections else self.injection

    @property
    def poisoned(self) -> bool:
        """The plan poisons its checkpoint: recovery is impossible, the launcher must stop the loop."""
        kind = FAULT_KINDS.get(self.fault)
        return kind is not None and kind.poisons_checkpoint

    @property
    def replacement(self) -> AppStart | None:
        return self.post_starts[0] if self.post_starts else None

    @property
    def is_fault_run(self) -> bool:
        return self.fault != "none"

    @property
    def restarted(self) -> bool:
        """Any evidence that workers started again after the failed cycle."""
        return self.replacement is not None or self.replacement_cycle is not None


def resolve_fault(timeline: Timeline, override: str | None) -> tuple[str, str]:
    """(fault, how it was decided): --fault, else run.json, else the marker, else none."""
    if override is not None:
        if override not in FAULTS:
            raise ValueError(f"fault {override!r} is not one of {', '.join(FAULTS)}: pass --fault {'|'.join(FAULTS)}")
        return override, "--fault"
    if timeline.run.requested_fault in FAULTS:
        return timeline.run.requested_fault, "run.json spec.fault"
    for inj in timeline.injections:
        if inj.fault in FAULT_KINDS:
            return inj.fault, "the injection marker (no run.json)"
    for start in timeline.starts:
        for e in start.of(ev.NemesisInjected):
            named = e.signal if e.signal in FAULT_KINDS else _SIGNAL_KIND.get(e.signal, "kill")
            return named, "the nemesis's injection line (no run.json, no marker)"
    return "none", "default: no run.json fault and no injection marker"


def analyze(timeline: Timeline, fault: str | None = None) -> Analysis:
    fault_name, how = resolve_fault(timeline, fault)
    notes: list[str] = []
    nemesis_lines = [e for s in timeline.starts for e in s.of(ev.NemesisInjected)]
    never = tuple(e for s in timeline.starts for e in s.of(ev.NemesisNeverFired))
    injections = tuple(sorted(timeline.injections, key=lambda i: i.fault_index))
    fault_at = timeline.run.fault_at or (injections[-1].fault_at if injections else None) or DEFAULT_FAULT_AT
    planned = FAULT_MOMENTS[fault_at].faults if fault_at in FAULT_MOMENTS else 1
    # The recovery judged is the one from the plan's last fault (in-restore: the second).
    injection = injections[-1] if injections else None
    count = max(len(timeline.injections), len(nemesis_lines))
    evidence: tuple[ev.Event, ...] = (*timeline.injections, *nemesis_lines)

    failed_cycle: int | None = None
    if injection is not None:
        failed_cycle = injection.cycle
        if failed_cycle is None:
            failed_cycle = next((s.cycle for s in timeline.starts if s.of(ev.NemesisInjected)), 0)
            notes.append(f"the marker records no cycle; took cycle {failed_cycle} as the injected one")

    failures: dict[int, list[ev.LauncherEvent]] = {}
    started: dict[int, ev.LauncherEvent] = {}
    joined: dict[int, ev.LauncherEvent] = {}
    for e in timeline.launcher_events():
        if isinstance(e, ev.ProfilingEvent):
            if e.name == "failure_detected" and e.subject_cycle is not None:
                failures.setdefault(e.subject_cycle, []).append(e)
            elif e.name == "worker_start_completed" and e.cycle is not None:
                started.setdefault(e.cycle, e)
        elif isinstance(e, (ev.WorkerFailed, ev.WorkerGroupFailed, ev.RestartsExhausted)) and e.cycle is not None:
            failures.setdefault(e.cycle, []).append(e)
        elif isinstance(e, ev.RendezvousJoined):
            cycle = e.round if e.round is not None else e.cycle
            if cycle is not None:
                joined.setdefault(cycle, e)
    for cycle, e in joined.items():  # 0.4.1: joining round N is the start of cycle N's workers
        started.setdefault(cycle, e)

    post: tuple[AppStart, ...] = ()
    fault_start = None
    replacement_cycle = None
    if failed_cycle is not None:
        same = [s for s in timeline.starts if s.cycle == failed_cycle]
        fault_start = same[-1] if same else None
        post = tuple(sorted((s for s in timeline.starts if s.cycle is not None and s.cycle > failed_cycle),
                            key=lambda s: (s.cycle, s.index)))
        later = sorted(c for c in started if c > failed_cycle)
        replacement_cycle = later[0] if later else None

    expected_k, k_evidence = _expected_k(timeline, injection, failed_cycle, nemesis_lines, notes)
    return Analysis(
        fault=fault_name, fault_how=how, injection=injection, injection_count=count, injection_evidence=evidence,
        never_fired=never, failed_cycle=failed_cycle, fault_start=fault_start, post_starts=post,
        failures={c: tuple(v) for c, v in sorted(failures.items())}, workers_started=dict(sorted(started.items())),
        replacement_cycle=replacement_cycle, expected_k=expected_k, expected_k_evidence=k_evidence, notes=tuple(notes),
        fault_at=fault_at, planned_faults=planned, injections=injections,
    )


def _expected_k(timeline: Timeline, injection: ev.Injection | None, failed_cycle: int | None,
                nemesis_lines: list[ev.NemesisInjected], notes: list[str]) -> tuple[int | None, tuple[ev.Event, ...]]:
    """The latest checkpoint committed at fault time: the marker's iteration (the tracker the
    nemesis read), raised only by a save line that the log stamps before the injection (only
    trusted when the UTC offset of the stamps is known)."""
    if injection is None:
        return None, ()
    # in-save: `iteration` was in flight; the committed checkpoint is the one to reload.
    k = injection.committed_iteration if injection.fault_at == "in-save" else injection.iteration
    evidence: list[ev.Event] = [injection]
    if k is None and nemesis_lines:
        k = nemesis_lines[0].iteration
        evidence = [nemesis_lines[0]]
    injected_at = timeline.utc(injection)
    if k is None or injected_at is None or timeline.offset_how.startswith("assumed") or failed_cycle is None:
        return k, tuple(evidence)
    for start in timeline.starts:
        if start.cycle is None or start.cycle > failed_cycle:
            continue
        for save in start.of(ev.SaveCommitted):
            t = timeline.utc(save)
            if save.iteration > k and t is not None and t < injected_at:
                notes.append(f"checkpoint {save.iteration} was committed at {iso_utc(t)}, before the injection at "
                             f"{iso_utc(injected_at)}, although the marker names {k}: expecting {save.iteration}")
                k = save.iteration
                evidence.append(save)
    return k, tuple(evidence)


# ---------------------------------------------------------------- the checkers


def _na_no_fault(cid: str, a: Analysis) -> CriterionResult | None:
    if not a.is_fault_run:
        return _result(cid, NOT_APPLICABLE, f"Fault none ({a.fault_how}): no injection was requested, so there is no "
                                             "fault to recover from.")
    return None


def _na_poisoned(cid: str, a: Analysis) -> CriterionResult:
    inj = a.first_injection
    what = f"checkpoint {inj.iteration}" if inj is not None and inj.iteration is not None else "the latest checkpoint"
    return _result(cid, NOT_APPLICABLE, f"The {a.fault} fault {_damaged(a)} a file of {what} on purpose, so no "
                                         f"replacement may load it; {LOOP_STOPPED} judges whether the launcher stopped "
                                         "the restart loop (or the stack fell back to an earlier checkpoint).", [inj])


def _damaged(a: Analysis) -> str:
    kind = FAULT_KINDS.get(a.fault)
    return "corrupted (4 KiB inverted, size unchanged)" if kind is not None and kind.damage == FLIP_DISTCP else "truncated"


def check_pre_fault_checkpoint(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "pre_fault_checkpoint"
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    inj = a.first_injection
    if inj is None:
        reason = f" The nemesis said: {a.never_fired[0].reason}." if a.never_fired else ""
        absent = [Src(MARKER_NAME, 0, "missing: no fault was injected"),
                  Src("run.json", 0, f"spec.fault = {a.fault}") if a.fault_how.startswith("run.json") else None]
        return _result(cid, FAIL, f"The {a.fault} fault was requested ({a.fault_how}) but never injected: there is no "
                                  f"fault_injected.json.{reason} Give the run enough iterations to commit a checkpoint "
                                  "beyond the nemesis's startup baseline (train_iters well above save_interval) and check "
                                  "the [nemesis] lines of the fault rank.", [*absent, *a.never_fired],
                       final=bool(a.never_fired))  # the nemesis itself said it will not fire
    if inj.fault not in (a.fault, "unknown"):
        return _result(cid, FAIL, f"The marker records a {inj.fault} fault but this run asked for {a.fault} "
                                  f"({a.fault_how}): verify with --fault {inj.fault} if that was intended.", [inj])
    if inj.problem:
        return _result(cid, FAIL, f"fault_injected.json cannot be true: {inj.problem}; the marker is damaged or not "
                                  "this run's: rerun with a new run id.", [inj])
    outside = _outside_the_run(tl, inj)
    if outside:
        return _result(cid, FAIL, f"fault_injected.json says the fault was injected at {outside}: the marker is not "
                                  "this run's (copied from another run?) or a clock is wrong; rerun with a new run id.",
                       [inj, tl.launch.src] if tl.launch is not None else [inj])
    in_save = inj.fault_at == "in-save"
    k = inj.committed_iteration if in_save else inj.iteration
    if in_save and (k is None or inj.iteration is None):
        return _result(cid, FAIL, "The in-save marker does not record both the committed checkpoint "
                                  "(committed_iteration) and the save in flight (iteration): it is damaged; rerun with a "
                                  "new run id.", [inj])
    if k is None:
        return _result(cid, FAIL, "fault_injected.json records no checkpoint iteration, so nothing proves a checkpoint "
                                  "was committed before the injection: the marker is damaged; rerun with a new run id.",
                       [inj])
    if k <= 0 or (inj.baseline_iteration is not None and k <= inj.baseline_iteration):
        return _result(cid, FAIL, f"The fault fired at checkpoint iteration {k}, not beyond the startup baseline "
                                  f"{inj.baseline_iteration or 0}: no checkpoint of this run preceded it; rerun with a "
                                  "new run id and a clean checkpoint directory.", [inj])
    evidence: list[object] = [inj]
    caveats: list[str] = []
    ck = tl.checkpoints
    if ck is not None and ck.exists:
        disk = ck.get(k)
        if disk is None:
            return _result(cid, FAIL, f"The marker says checkpoint {k} was committed before the fault, but "
                                      f"{ck.path} has no iter_{k:07d}: the checkpoint directory is not the one the "
                                      "run saved to, or it was deleted.", [inj, f"{ck.path}:0: no iter_{k:07d}"])
        evidence.append(disk.commit_src())
        if not disk.committed:
            return _result(cid, FAIL, f"The fault fired after the tracker named iteration {k}, but {disk.rel} has no "
                                      "metadata.json: that save was never committed (its async finalization did not "
                                      "complete), so the run had no complete checkpoint to recover from.", evidence)
        tracked = parse_tracker(ck.tracker) if ck.tracker is not None else None
        evidence.append(ck.tracker_src())
        if ck.tracker is None:
            return _result(cid, FAIL, f"{ck.path} has no readable {TRACKER_NAME} (absent, a link or not a regular "
                                      f"file), although Megatron writes it after every committed save and the fault "
                                      f"fired on its value {k}: this is not the checkpoint directory the run saved to, "
                                      "or the tracker was removed; copy the checkpoint directory whole.", evidence)
        if tracked is None:
            return _result(cid, FAIL, f"{ck.path}/{TRACKER_NAME} holds {ck.tracker[:20]!r}, not an iteration number, "
                                      f"although the fault fired on its value {k}: the tracker was damaged or written by "
                                      "something else after the run.", evidence)
        if tracked < k:
            return _result(cid, FAIL, f"{ck.path}/{TRACKER_NAME} names iteration {tracked}, below checkpoint {k} that "
                                      "the marker says was committed before the fault: Megatron's tracker only moves "
                                      "forward, so it was rewritten, or this is not the run's checkpoint directory.",
                           evidence)
    elif ck is not None and ck.how.startswith("not followed"):
        caveats.append(f"{ck.path} is a symbolic link, not followed, so neither metadata.json nor the tracker was "
                       "checked")
    else:
        caveats.append("the checkpoint directory is not in the run directory, so metadata.json and the tracker were "
                       "not checked")
    if not tl.starts:
        return _result(cid, UNKNOWN, f"The marker names checkpoint {k}, but there is no application log to correlate it "
                                     "with Megatron's save lines: copy logs/ with the run directory.", evidence)
    upto = inj.cycle if inj.cycle is not None else (a.failed_cycle if a.failed_cycle is not None else 0)
    saves = [e for s in tl.starts if s.cycle is not None and s.cycle <= upto
             for e in s.of(ev.SaveCommitted) if e.iteration == k]
    if not saves:
        return _result(cid, FAIL, f"The marker names checkpoint {k}, but Megatron's log of cycles 0..{upto} has no "
                                  f"'successfully saved checkpoint from iteration {k}' line: the marker and the training "
                                  "log disagree (wrong --save directory or a tracker written by something else).",
                       evidence)
    evidence.append(saves[-1])
    if in_save:
        n, injected_at = inj.iteration, tl.utc(inj)
        early = [e for s in tl.starts if s.cycle is not None and s.cycle <= upto for e in s.of(ev.SaveCommitted)
                 if e.iteration == n and (t := tl.utc(e)) is not None and injected_at is not None and t <= injected_at]
        if early:
            return _result(cid, FAIL, f"The in-save fault was meant to land while checkpoint {n} was being saved, but "
                                      f"Megatron's log says checkpoint {n} was committed before the injection: the "
                                      "fault hit after the save, not in it; lengthen the save (--save-delay-ms) or "
                                      "poll faster.", [*evidence, early[0]])
        caveats.append(f"the save of iteration {n} was in flight, uncommitted, when the fault hit")
    if a.expected_k is not None and a.expected_k != k:
        caveats.append(f"checkpoint {a.expected_k} was also committed before the injection")
    when = iso_utc(tl.utc(inj))
    extra = f" ({'; '.join(caveats)})" if caveats else ""
    agree = "the marker, Megatron's save line, metadata.json and the tracker agree" if ck is not None and ck.exists \
        else "the marker and Megatron's save line agree"
    return _result(cid, PASS, f"Checkpoint {k} was committed before the {a.fault} injection on rank {inj.rank} at "
                              f"{when}: {agree}{extra}.", evidence)


CLOCK_SLACK_S = 60.0  # clocks of one cluster agree far better; more is a marker of another run or a broken clock


def _outside_the_run(tl: Timeline, inj: ev.Injection) -> str | None:
    """Where the marker's time falls outside the launch (launch.json's start..end), or None."""
    t = tl.utc(inj)
    launch = tl.launch
    if t is None or launch is None:
        return None
    if launch.started_at is not None and t < launch.started_at - CLOCK_SLACK_S:
        return f"{iso_utc(t)}, {launch.started_at - t:.0f} s before the launch started ({iso_utc(launch.started_at)})"
    if launch.ended_at is not None and t > launch.ended_at + CLOCK_SLACK_S:
        return f"{iso_utc(t)}, {t - launch.ended_at:.0f} s after the launch ended ({iso_utc(launch.ended_at)})"
    return None


def _before_the_injection(tl: Timeline, a: Analysis, fails: Sequence[ev.LauncherEvent]) -> str | None:
    """A recovery step stamped before the injection: what and when, or None."""
    injected = tl.utc(a.injection)
    if injected is None or tl.offset_how.startswith("assumed"):
        return None
    first = a.replacement.first_iteration if a.replacement is not None else None
    for what, e in (("the failure of the injected cycle", min(fails, key=lambda f: tl.utc(f) or float("inf"),
                                                              default=None)),
                    ("the replacement's first iteration", first)):
        t = tl.utc(e)
        if t is not None and t < injected - 1.0:
            return f"{what} is stamped {iso_utc(t)}, {injected - t:.1f} s before the injection at {iso_utc(injected)}"
    return None


def _names_injected_rank(t: ev.RankTimeout, inj: ev.Injection) -> bool:
    if t.rank is not None:
        return t.rank == inj.rank
    if t.local_rank is not None:
        local = inj.local_rank if inj.local_rank is not None else inj.rank
        return t.local_rank == local and _same_host(t.node, inj.host)
    return False


def _same_host(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return True
    return a.split(".")[0].lower() == b.split(".")[0].lower()


@dataclass(frozen=True)
class WorldChange:
    """The replacement runs another world than the failed cycle: Megatron's own arguments table
    of each cycle (world_size, data_parallel_size) says so."""

    before: int
    after: int
    dp_before: int | None
    dp_after: int | None
    failed: int
    replacement: int
    evidence: tuple[object, ...]

    @property
    def shrank(self) -> bool:
        return self.after < self.before

    def text(self) -> str:
        dp = lambda d: f" (DP {d})" if d is not None else ""  # noqa: E731
        return (f"world size {self.before}{dp(self.dp_before)} in cycle {self.failed}, {self.after}"
                f"{dp(self.dp_after)} in cycle {self.replacement} (Megatron's arguments)")

    def allowed(self, tl: Timeline) -> bool:
        """The plan let the job shrink this far: --nnodes MIN:MAX, MIN nodes' worth of ranks or more."""
        low, nodes = tl.run.min_nnodes, tl.run.nnodes
        if not self.shrank or low is None or not nodes or self.before % nodes:
            return False
        return self.after >= low * (self.before // nodes)


def world_change(a: Analysis) -> WorldChange | None:
    before = a.fault_start.arguments if a.fault_start is not None else None
    r = a.replacement
    after = r.arguments if r is not None else None
    if before is None or after is None or a.fault_start is None or r is None:
        return None
    wb, wa = before.integer("world_size"), after.integer("world_size")
    if wb is None or wa is None or wb == wa or wb < 1 or wa < 1:
        return None
    return WorldChange(wb, wa, before.integer("data_parallel_size"), after.integer("data_parallel_size"),
                       a.fault_start.cycle if a.fault_start.cycle is not None else 0,
                       r.cycle if r.cycle is not None else 0,
                       (before.src_of("world_size"), after.src_of("world_size")))


def check_replacement_cycle(tl: Timeline, a: Analysis) -> CriterionResult:
    """The launcher noticed the failed cycle and started replacement workers.

    For a hang it must also have been a rank monitor that detected it: a section or
    out-of-section timeout of the failed cycle, stamped after the injection. Which rank's
    monitor fires first is not part of the criterion. Each monitor watches only its own
    rank; the stopped rank's peers block in the next collective and their step deadline runs
    too, so with unequal deadlines (the walkthrough's step 120 s against out-of-section 180 s
    and checkpointing 600 s) a peer's timeout fires first whenever the stop lands outside a
    step, and the launcher then stops the whole group before the stopped rank's own monitor
    says anything; even with equal deadlines two independent monitors fire some milliseconds
    apart in either order. A verdict that depended on that order would fail correct
    recoveries, and verify must judge runs from users' own sbatch scripts, whatever their
    deadlines. So the stopped rank is proven by the injection marker (written by the nemesis
    inside that rank's process: rank, pid, SIGSTOP, time), and a timeout that names it is
    reported as the stronger evidence when there is one; a peer's timeout is accepted only
    when it comes after the injection (one stamped before it means something else hung).
    """
    cid = "replacement_cycle"
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    inj = a.injection
    if inj is None:
        return _result(cid, NOT_APPLICABLE, "No injection happened (see pre_fault_checkpoint), so there is no failed "
                                             "cycle to look for.")
    c = a.failed_cycle if a.failed_cycle is not None else 0
    if not tl.has_role("launcher"):
        later = [ci for ci in tl.cycle_infos if ci.cycle > c]
        if later and a.fault == "kill":
            return _result(cid, PASS, f"NVRx's cycle records show cycle {c} ended and cycle {later[0].cycle} started after "
                                      "the injection (the launcher log itself is not in the run directory).",
                           [inj, *[ci for ci in tl.cycle_infos if ci.cycle == c], later[0]])
        return _result(cid, UNKNOWN, "The run directory has no launcher log (logs/launcher.log or logs/console.log): "
                                     "the failed cycle" + (" and the rank timeouts" if FAULT_KINDS.get(a.fault) is not None and FAULT_KINDS[a.fault].monitor_detects else "") +
                                     " cannot be seen; copy the launcher log with the run.", [inj])
    for earlier in a.injections[:-1]:  # a multi-fault plan: every fault's cycle failed, and was restarted
        ec = earlier.cycle
        if ec is not None and not a.failures.get(ec):
            return _result(cid, FAIL, f"The launcher log records no failure of cycle {ec} after fault {earlier.fault_index} "
                                      f"of {a.planned_faults} ({earlier.fault_at}): the launcher did not notice it.",
                           [earlier])
    fails = a.failures.get(c, ())
    if not fails:
        return _result(cid, FAIL, f"The launcher log records no failure of cycle {c} after the {a.fault} injection "
                                  "(no 'failed (exitcode', 'Worker group UNHEALTHY/FAILED' or failure_detected line): "
                                  "the launcher did not notice the fault; check that the workers ran under ft_launcher "
                                  "with rank monitors.", [inj])
    evidence: list[object] = [inj, *fails[:3]]
    problems: list[str] = []
    if a.replacement_cycle is not None:
        evidence.append(a.workers_started[a.replacement_cycle])
        new = f"cycle {a.replacement_cycle}"
    elif a.replacement is not None:
        evidence.append(a.replacement.events[0] if a.replacement.events else None)
        new = f"cycle {a.replacement.cycle} (seen in its application log; the launcher log has no start record)"
    else:
        group = next((e for e in fails if isinstance(e, ev.WorkerGroupFailed)), None)
        ends = [e for e in tl.launcher_events() if isinstance(e, (ev.LauncherFailed, ev.RestartsExhausted, ev.NoProgressStop))]
        evidence.extend(ends[:2])
        why = ("restarts were exhausted (raise --max-restarts; it defaults to 0)" if group is None or group.attempts_left == 0
               else f"it announced a restart ({group.attempts_left}/{group.max_restarts} attempts left) that never began")
        budget = tl.run.max_restarts
        if budget is not None and len(a.injections) > budget:
            why = (f"the restart budget ran out: --max-restarts {budget} allows {budget} restart(s) and this plan "
                   f"injected {len(a.injections)} faults ({a.fault_at}), each costing one; raise --max-restarts to "
                   f"{len(a.injections)} or more")
        return _result(cid, FAIL, f"The launcher recorded the failure of cycle {c} but started no replacement workers: "
                                  f"{why}.", evidence)
    how = ""
    kind = FAULT_KINDS.get(a.fault)
    if kind is not None and kind.monitor_detects:
        timeouts = [e for e in tl.launcher_events() if isinstance(e, ev.RankTimeout) and (e.cycle in (c, None))]
        injected_at = tl.utc(inj)
        before = [t for t in timeouts if injected_at is not None and (tl.utc(t) or injected_at) < injected_at]
        after = [t for t in timeouts if t not in before]
        named = [t for t in after if _names_injected_rank(t, inj)]
        if not timeouts:
            problems.append(f"no section or out-of-section timeout message exists for cycle {c}: the hang of rank "
                            f"{inj.rank} was not detected by a rank monitor (check --ft-rank-section-timeouts and "
                            "that the workload opens its 'step' section)")
        elif not after:
            problems.append(f"every timeout message of cycle {c} is stamped before the injection at "
                            f"{iso_utc(injected_at)}: a rank hung before the fault, so the stop of rank {inj.rank} is "
                            "not what the launcher detected; look at the earlier timeout's rank")
            evidence.extend(before[:3])
        elif named:
            evidence.append(named[0])
            how = f" after a {named[0].kind.replace('_', '-')} timeout naming the stopped rank {inj.rank}"
        elif inj.signal not in (None, kind.signal):
            problems.append(f"the marker records {inj.signal}, not {kind.signal or kind.name}, so nothing proves rank "
                            f"{inj.rank} was stopped, and no timeout message names it")
            evidence.extend(after[:3])
        else:
            first = after[0]
            ranks = sorted({t.rank if t.rank is not None else t.local_rank for t in after}, key=lambda r: (r is None, r))
            who = ", ".join(map(str, ranks))
            evidence.append(first)
            stamped = tl.utc(first)
            delay = f" {stamped - injected_at:.1f} s after the stop" if stamped and injected_at else ""
            how = (f" after a {first.kind.replace('_', '-')} timeout of rank(s) {who}{delay} (blocked waiting for the "
                   f"stopped rank {inj.rank}, whose own monitor had not fired when the launcher stopped the group; "
                   f"the marker proves rank {inj.rank}, pid {inj.pid}, got {kind.signal or kind.name})")
    if kind is not None and kind.exit_codes:
        exit_problem, exit_how, exit_evidence = _fault_rank_exit(kind, inj, fails)
        evidence.extend(exit_evidence)
        if exit_problem:
            problems.append(exit_problem)
        how += exit_how
    nodes = ""
    change = world_change(a)
    if change is not None:
        evidence.extend(change.evidence)
        if not change.allowed(tl):
            way = "shrank" if change.shrank else "grew"
            if tl.run.min_nnodes is not None:
                allowed = f"--nnodes {tl.run.min_nnodes}:{tl.run.nnodes} allows no fewer than {tl.run.min_nnodes} node(s)"
            elif tl.run.has_run_json:
                allowed = "the plan asked for a fixed number of nodes (no --nnodes MIN:MAX)"
            else:
                allowed = "no run.json says the plan allowed it (--nnodes MIN:MAX)"
            problems.append(f"the job {way}: {change.text()}, and {allowed}; a replacement must run the world "
                            "the checkpoint was trained on, or the plan must allow the change")
    if a.fault == "node":
        r = a.replacement_cycle if a.replacement_cycle is not None else a.replacement.cycle
        status, nodes, infos = _node_replacement(tl, inj, c, r, fails, change)
        evidence.extend(infos)
        if status == FAIL:
            problems.append(nodes)
        elif status == UNKNOWN:
            return _result(cid, UNKNOWN, f"The launcher restarted the workers in {new} after the loss of a node, but "
                                         f"{nodes}.", evidence)
    if problems:
        return _result(cid, FAIL, "The launcher restarted the workers, but " + "; ".join(problems) + ".", evidence)
    early = _before_the_injection(tl, a, fails)
    if early:
        return _result(cid, UNKNOWN, f"The launcher restarted the workers, but {early}: a recovery cannot precede its "
                                     f"fault, so the clocks or the UTC offset ({tl.utc_offset_s:+d} s, {tl.offset_how}) "
                                     "do not match, or the marker is not this run's.", evidence)
    if len(a.injections) > 1:
        cycles = ", ".join(str(i.cycle) for i in a.injections)
        evidence[1:1] = [e for i in a.injections[:-1] for e in (i, *a.failures.get(i.cycle, ())[:1])]
        return _result(cid, PASS, f"The launcher recorded the failures of all {len(a.injections)} injected faults "
                                  f"(cycles {cycles}){how} and, after the last, started replacement workers in {new}.",
                       evidence)
    shrink = ""
    if change is not None and not nodes:
        shrink = f"; the job shrank, as its --nnodes {tl.run.min_nnodes}:{tl.run.nnodes} allows: {change.text()}"
    return _result(cid, PASS, f"The launcher recorded the failure of cycle {c}{how} and started replacement workers "
                              f"in {new}{nodes}{shrink}.", evidence)


def _exit_meaning(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _fault_rank_exit(kind, inj: ev.Injection, fails: Sequence[ev.Event]) -> tuple[str | None, str, list]:
    """A kind that fixes how its rank dies (FaultKind.exit_codes): the launcher's `failed (exitcode`
    line of that very worker (the marker's pid) must show it; another code means the rank died of
    something else (for `gil`: not of the rank monitor's SIGKILL). No line for it (a peer's failure
    was recorded first) decides nothing."""
    mine = [e for e in fails if isinstance(e, ev.WorkerFailed) and inj.pid is not None and e.pid == inj.pid]
    if not mine:
        return None, "", []
    code = mine[0].exitcode
    wanted = " or ".join(f"{c} ({_exit_meaning(c)})" for c in kind.exit_codes)
    if code not in kind.exit_codes:
        return (f"the fault rank {inj.rank}'s worker (pid {inj.pid}) ended with exitcode {code} ({_exit_meaning(code)}), "
                f"not {wanted} as the {kind.name} fault ends it: it died of something else"), "", [mine[0]]
    return None, f" (rank {inj.rank}'s worker ended with exitcode {code}, {_exit_meaning(code)}, as {kind.name} does)", [mine[0]]


def _node_replacement(tl: Timeline, inj: ev.Injection, failed: int, replacement: int,
                      fails: Sequence[ev.Event], change: "WorldChange | None" = None) -> tuple[str, str, list]:
    """For a lost node: (status, text, cycle records). The lost node is the marker's host; the
    cycle records (NVRx >= 0.6) name the nodes each cycle ran on."""
    from harness.slurm import expand_hostlist

    def record(cycle: int) -> ev.CycleInfo | None:
        found = [ci for ci in tl.cycle_infos if ci.cycle == cycle]
        return found[-1] if found else None

    before, after = record(failed), record(replacement)
    infos = [x for x in (before, after) if x is not None]
    lost = inj.host
    was = expand_hostlist(before.active_nodes or "") if before is not None else None
    if lost and (not was or lost not in was or len(set(was)) < len(was)) and inj.launcher_pid is not None:
        # The cycle records cannot tell the nodes apart (several launchers on one host): NVRx's
        # own node ids (<host>_<launcher pid>_<n>) on the rendezvous lines can.
        by_joins = _node_replacement_by_joins(tl, inj, failed, replacement, fails)
        if by_joins is not None:
            return by_joins
    if before is None or after is None or not lost:
        missing = "the injection marker names no host" if not lost else (
            f"no cycle record (cycle_infos/, NVRx >= 0.6) names the nodes of cycle "
            f"{failed if before is None else replacement}")
        return UNKNOWN, f"{missing}, so the lost and the replacing node cannot be named", infos
    was, now = expand_hostlist(before.active_nodes or ""), expand_hostlist(after.active_nodes or "")
    if not was or not now:
        return UNKNOWN, (f"the cycle records' active nodes ({before.active_nodes!r}, {after.active_nodes!r}) are not "
                         "host lists, so the replacing node cannot be named"), infos
    if lost in now:
        return FAIL, (f"the lost node {lost} is still active in cycle {replacement} ({after.active_nodes}): the node "
                      "was not lost"), infos
    promoted = [n for n in now if n not in was]
    if lost not in was:
        return FAIL, (f"the lost node {lost} is not among the nodes of cycle {failed} ({before.active_nodes}): the "
                      "fault did not hit an active node"), infos
    if (len(now) < len(was) and not promoted and change is not None and change.allowed(tl)
            and tl.run.min_nnodes is not None and len(now) >= tl.run.min_nnodes):
        return PASS, (f"; node {lost} (rank {inj.rank}) was lost and the job shrank: cycle {replacement} runs on "
                      f"{', '.join(now)} alone, {len(now)} of {len(was)} node(s), as --nnodes {tl.run.min_nnodes}:"
                      f"{tl.run.nnodes} allows; {change.text()}"), infos
    if len(now) < len(was) or not promoted:
        shrank = f" (the job shrank: {change.text()})" if change is not None and change.shrank else ""
        return FAIL, (f"cycle {replacement} runs on {', '.join(now)}, fewer nodes than cycle {failed} "
                      f"({', '.join(was)}): no standby node replaced {lost}{shrank}"), infos
    return PASS, (f"; node {lost} (rank {inj.rank}) was lost and cycle {replacement} runs on {', '.join(now)}: "
                  f"standby {', '.join(promoted)} took its place"), infos


def _node_replacement_by_joins(tl: Timeline, inj: ev.Injection, failed: int, replacement: int,
                               fails: Sequence[ev.Event]) -> tuple[str, str, list] | None:
    """The same decision from the launcher log: the nodes that joined the rendezvous before the
    failure of cycle `failed` and after it, the lost one being the marker's launcher."""
    failures = {id(e) for e in fails}
    before: list[ev.RendezvousJoined] = []
    after: list[ev.RendezvousJoined] = []
    seen_failure = False
    for e in tl.launcher_events():
        if id(e) in failures:
            seen_failure = True
        elif isinstance(e, ev.RendezvousJoined) and e.node:
            (after if seen_failure else before).append(e)
    was = list(dict.fromkeys(j.node for j in before))
    now = list(dict.fromkeys(j.node for j in after))
    lost = [n for n in was if _node_pid(n) == inj.launcher_pid]
    if not was or not now or len(lost) != 1:
        return None
    lost_id, evidence = lost[0], [*before[:1], *after[:2]]
    if lost_id in now:
        return FAIL, (f"the lost node {lost_id} joined the rendezvous again after the failure of cycle {failed}: the "
                      "node was not lost"), evidence
    promoted = [n for n in now if n not in was]
    if len(now) < len(was) or not promoted:
        return FAIL, (f"only {', '.join(now)} joined the rendezvous after the failure of cycle {failed}, fewer nodes "
                      f"than before ({', '.join(was)}): no standby node replaced {lost_id}"), evidence
    return PASS, (f"; node {lost_id} (rank {inj.rank}'s launcher) was lost and cycle {replacement} runs on "
                  f"{', '.join(now)}: standby {', '.join(promoted)} took its place"), evidence


def _node_pid(node_id: str) -> int | None:
    """NVRx's node id `<host>_<launcher pid>_<local id>` -> the launcher pid."""
    parts = node_id.rsplit("_", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def check_optimizer_reload(tl: Timeline, a: Analysis) -> CriterionResult:
    result = _optimizer_reload(tl, a)
    r = a.replacement
    if result.status == FAIL and not result.final and r is not None and r.first_iteration is not None:
        # Once the replacement trains, its load block is complete (a rank's stdout and stderr
        # reach the per-cycle log through separate pipes, so not before): nothing can undo it.
        result = dataclasses.replace(result, final=True)
    return result


def _optimizer_reload(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "optimizer_reload"
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    if a.injection is None:
        return _result(cid, NOT_APPLICABLE, "No injection happened (see pre_fault_checkpoint), so no replacement had "
                                             "to reload anything.")
    if a.poisoned:
        return _na_poisoned(cid, a)
    r = a.replacement
    if r is None:
        if a.replacement_cycle is not None:
            return _result(cid, UNKNOWN, f"The launcher started cycle {a.replacement_cycle}, but there is no application "
                                         f"log of that cycle (logs/*_cycle{a.replacement_cycle}.log missing or empty): "
                                         "the reload cannot be checked.", [a.workers_started[a.replacement_cycle]])
        return _result(cid, NOT_APPLICABLE, "No replacement workers started (see replacement_cycle), so nothing was "
                                             "reloaded.")
    k = a.expected_k
    change = world_change(a)
    who = f"The replacement workers (cycle {r.cycle})"
    if change is not None:  # a restore onto another world: every verdict below names it
        who = (f"The replacement workers (cycle {r.cycle}, after the job {'shrank' if change.shrank else 'grew'}: "
               f"{change.text()})")
    # Decided by the configuration alone, so it holds even for a run stopped before its load ended.
    args = r.arguments
    shown = [r.first(ev.LoadStarted), r.first(ev.CheckpointLoaded)]
    for flag, option in (("no_load_optim", "--no-load-optim"), ("finetune", "--finetune")):
        if args is not None and args.flag(flag):
            return _result(cid, FAIL, f"{who} ran with {option}: Megatron skips the optimizer state when loading "
                                      f"checkpoint {k}; remove {option} from the workload arguments.",
                           [*shown, args.src_of(flag)], final=True)
        if option in tl.run.argv or option in tl.run.extra_args:
            return _result(cid, FAIL, f"{who} ran with {option} on the run's command line, so Megatron skips the "
                                      f"optimizer state when loading checkpoint {k}; remove {option}.",
                           [*shown, "run.json:0: " + option + " in the launcher command"], final=True)
    random = r.first(ev.StartedFromRandom)
    if random is not None:
        return _result(cid, FAIL, f"{who} started from random instead of loading checkpoint {k}: Megatron found no "
                                  "latest_checkpointed_iteration.txt under --load; make --load equal --save on storage "
                                  "every node sees.", [random, *a.expected_k_evidence[:1]], final=True)
    loaded = r.first(ev.CheckpointLoaded)
    began = r.first(ev.LoadStarted)
    if loaded is None:
        if began is None:
            return _result(cid, FAIL, f"{who} printed no checkpoint load at all (no 'loading distributed checkpoint' "
                                      f"line in {r.source}): check --load and --ckpt-format.", [r.events[0] if r.events else None])
        return _result(cid, FAIL, f"{who} began loading checkpoint {began.iteration} but never printed 'successfully "
                                  "loaded checkpoint': the load failed; see the traceback in that log.", [began])
    evidence: list[object] = [began, loaded]
    if k is None:
        return _result(cid, UNKNOWN, f"{who} loaded checkpoint {loaded.iteration}, but the marker records no "
                                     "iteration to compare it with.", evidence)
    partial = next((i for i in a.injections if i.fault_at == "in-save" and i.iteration == loaded.iteration), None)
    if loaded.iteration != k and partial is not None:
        rel = f"iter_{loaded.iteration:07d}"
        d = tl.checkpoints.get(loaded.iteration) if tl.checkpoints is not None else None
        where = d.rel if d is not None else rel
        return _result(cid, FAIL, f"{who} loaded {where}, the partial directory whose async save was in flight when "
                                  f"the fault hit (never committed: no metadata.json, tracker at {k}), instead of "
                                  f"checkpoint {k}, the latest committed: the loader counted an unpublished iter_* "
                                  "directory as a checkpoint.", [*evidence, partial, *a.expected_k_evidence[:1]])
    if loaded.iteration != k:
        args = r.arguments
        step = args.get("ckpt_step") if args else None
        hint = (f" --ckpt-step {step} pins the load" if step not in (None, "None")
                else " the tracker was stale or pointed elsewhere")
        which = "an older" if loaded.iteration < k else "a newer"
        return _result(cid, FAIL, f"{who} loaded checkpoint {loaded.iteration}, {which} one than {k}, the latest "
                                  f"committed at fault time:{hint}.",
                       [*evidence, *a.expected_k_evidence[:2]] + ([args.src_of("ckpt_step")] if step not in (None, "None") and args else []),
                       final=loaded.iteration < k)  # nothing newer than K was committed to load
    if loaded.iteration <= 0:
        return _result(cid, FAIL, f"{who} loaded iteration 0: that is a fresh start, not a recovery.", evidence)
    args = r.arguments
    block = r.load_block()
    opt = [e for e in block if isinstance(e, ev.OptimizerLoaded)]
    sched = [e for e in block if isinstance(e, ev.SchedulerValueLoaded)]
    plain = args is not None and args.flag("use_distributed_optimizer") is False
    if not opt and not (plain and sched):
        return _result(cid, FAIL, f"{who} loaded checkpoint {k} without its optimizer state: the load block has no "
                                  "'Loading distributed optimizer sharded state' line (--no-load-optim, --finetune, "
                                  "a release checkpoint or no_save_optim in the saved arguments).", evidence)
    # Megatron loads the scheduler under the same condition as the optimizer; without the
    # distributed optimizer its scheduler lines are the log's evidence of that load.
    evidence[1:1] = [*opt[:1], *sched[:1], *([args.src_of("use_distributed_optimizer")] if not opt and args else [])]
    disk_note = ""
    ck = tl.checkpoints.get(k) if tl.checkpoints is not None else None
    if ck is not None:
        if not ck.has_dcp_metadata:
            return _result(cid, FAIL, f"{who} loaded checkpoint {k}, but {ck.rel} has no DCP .metadata: the checkpoint "
                                      "on disk is not the one loaded, or it was damaged afterwards.", [*evidence, ck.keys_src()])
        evidence.append(ck.keys_src())
        if ck.optimizer_keys == 0:
            return _result(cid, FAIL, f"{who} printed an optimizer load, but {ck.rel} holds no optimizer tensors (no "
                                      "'optimizer.' key with exp_avg): it was saved without optimizer state "
                                      "(--no-save-optim).", evidence)
        disk_note = (f"; {ck.optimizer_keys} optimizer keys in {ck.rel}" if ck.optimizer_keys is not None
                     else f"; optimizer keys not listed ({ck.inspect_note})")
    else:
        disk_note = "; checkpoint directory not available, optimizer keys not listed"
    lines = "optimizer and scheduler" if opt and sched else ("optimizer" if opt else "scheduler (plain optimizer)")
    resharded = ""
    if change is not None:
        evidence.extend(change.evidence)
        resharded = (f"; resharded: the checkpoint saved by {change.before} ranks was loaded by {change.after}, with "
                     "its optimizer state (optimizer_state and loss_continuity judge what that state holds)")
    return _result(cid, PASS, f"{who} loaded checkpoint {k}, the latest committed at fault time, with optimizer state "
                              f"({lines} lines in the load block{disk_note}){resharded}.", evidence)


def check_later_checkpoint(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "later_checkpoint"
    recovering = a.is_fault_run and a.injection is not None
    if recovering and not a.restarted:
        return _result(cid, NOT_APPLICABLE, "No replacement workers started (see replacement_cycle), so no training "
                                             "followed the fault.")
    if recovering and a.poisoned:
        return _na_poisoned(cid, a)
    k = (a.expected_k or 0) if recovering else 0
    t_final = tl.run.train_iters
    if recovering and t_final is not None and k >= t_final:
        return _nothing_left_to_train(tl, a, k, t_final)
    scope = list(a.post_starts) if recovering else list(tl.starts)
    where = f"after the restore of checkpoint {k}" if recovering else "in this run"
    if not scope:
        return _result(cid, UNKNOWN, f"There is no application log {where}: training progress cannot be checked; "
                                     "copy logs/ with the run directory.")
    problems: list[str] = []
    evidence: list[object] = []
    lasts = [s.last_iteration for s in scope if s.last_iteration is not None]
    top = max(lasts, key=lambda it: it.iteration, default=None)
    final = next((s.last_iteration for s in reversed(scope) if s.last_iteration is not None), None)
    if top is None or top.iteration <= k:
        problems.append(f"no iteration line beyond {k} {where}")
    else:
        first = next((s.first_iteration for s in scope if s.first_iteration is not None), None)
        evidence.append(first)
    skipped = [it for s in scope for it in s.bad_iterations if (it.skipped or 0) > 0 and it.iteration > k]
    if skipped:
        problems.append(f"iteration {skipped[0].iteration} skipped its optimizer step "
                        f"(number of skipped iterations: {skipped[0].skipped})")
        evidence.extend(skipped[:3])
    saves = [e for s in scope for e in s.of(ev.SaveCommitted) if e.iteration > k]
    ck = tl.checkpoints if tl.checkpoints is not None and tl.checkpoints.exists else None
    later: ev.SaveCommitted | None = None
    if not saves:
        problems.append(f"no checkpoint beyond {k} was committed (no 'successfully saved checkpoint' line)")
    else:
        # a directory pruned since (not on disk) does not contradict the log; one without metadata.json does
        committed = [s for s in saves if ck is None or (d := ck.get(s.iteration)) is None or d.committed]
        if not committed:
            d = ck.get(saves[-1].iteration) if ck is not None else None
            problems.append(f"checkpoint {saves[-1].iteration} was logged as saved but "
                            f"{d.rel if d else f'iter_{saves[-1].iteration:07d}'} has no metadata.json")
            evidence.append(saves[-1])
            if d is not None:
                evidence.append(d.commit_src())
        else:
            later = committed[-1]
            evidence.append(later)
            if ck is not None and (d := ck.get(later.iteration)) is not None:
                evidence.append(d.commit_src())
    t = tl.run.train_iters
    t_src = tl.run.train_iters_src
    if t is None and final is not None:
        t, t_src = final.train_iters, str(final.src)
    if final is not None and t is not None:
        evidence.append(final)
        if final.iteration != t:
            problems.append(f"training stopped at iteration {final.iteration} of {t}")
            if t_src:
                evidence.append(t_src)
    si = tl.run.save_interval
    if t is not None and si and t % si == 0 and final is not None and final.iteration == t:
        on_disk = ck.get(t) if ck is not None else None
        logged = any(s.iteration == t for s in saves)
        if not (on_disk.committed if on_disk is not None else logged):  # the disk, when it has the dir, decides
            problems.append(f"the final checkpoint {t} (a multiple of save_interval {si}) was not committed")
            if on_disk is not None:
                evidence.append(on_disk.commit_src())
    if problems:
        return _result(cid, FAIL, f"Training did not commit its work {where}: " + "; ".join(problems) + ".", evidence)
    steps = f"iterations {k + 1}..{final.iteration}" if final is not None else "iterations"
    return _result(cid, PASS, f"Training committed {steps} {where} with no skipped step, checkpoint "
                              f"{later.iteration if later else '?'} was committed, and the final iteration {t} was reached.",
                   evidence)


def _nothing_left_to_train(tl: Timeline, a: Analysis, k: int, t: int) -> CriterionResult:
    """The fault hit after the final checkpoint (last-iteration): there is nothing to train, and
    that is no failure. What must hold: checkpoint T committed, no training line beyond T; the
    reload of T is optimizer_reload's, the clean exit clean_finish's."""
    cid = "later_checkpoint"
    evidence: list[object] = [a.injection, tl.run.train_iters_src]
    ck = tl.checkpoints if tl.checkpoints is not None and tl.checkpoints.exists else None
    d = ck.get(k) if ck is not None else None
    if d is not None:
        evidence.append(d.commit_src())
        if not d.committed:
            return _result(cid, FAIL, f"The fault hit after iteration {k}, the final one, but {d.rel} has no "
                                      "metadata.json: the final checkpoint was never committed.", evidence)
    beyond = [s.last_iteration for s in a.post_starts if s.last_iteration is not None and s.last_iteration.iteration > t]
    if beyond:
        return _result(cid, FAIL, f"The replacement trained beyond the final iteration {t} (iteration "
                                  f"{beyond[0].iteration}): --train-iters changed between cycles.", [*evidence, beyond[0]])
    trained = [s.first_iteration for s in a.post_starts if s.first_iteration is not None]
    if trained and trained[0].iteration <= k:
        return _result(cid, FAIL, f"Checkpoint {k} is the final iteration, yet the replacement trained iteration "
                                  f"{trained[0].iteration} again: it did not resume at {k}.", [*evidence, trained[0]])
    return _result(cid, PASS, f"Nothing was left to train: checkpoint {k} is the final iteration {t}, committed before "
                              "the fault, and the replacement trained no iteration again (its reload is "
                              "optimizer_reload's, its exit clean_finish's).", evidence)


def _restarts_ran_out(tl: Timeline, a: Analysis) -> tuple[str, list[object]] | None:
    """For a fault run that never restarted and whose launcher's own give-up line is not in the
    logs (NVRx 0.7.0's log server loses the last lines; no launch.json): (why its restarts ran
    out, evidence), when the launcher recorded the failed cycle and either run.json's restart
    budget is spent or it announced no restart ('N/M attempts left; will restart worker group',
    which torch elastic prints only while attempts are left). None: nothing says so (no record
    of the failure, the harness stopped the launch, or a restart was announced)."""
    c = a.failed_cycle if a.failed_cycle is not None else 0
    fails = a.failures.get(c, ())
    if not fails or (tl.launch is not None and tl.launch.stopped_early):
        return None
    shown: list[object] = [a.injection, *fails[:2]]
    budget = tl.run.max_restarts
    if budget is not None and len(a.failures) > budget:
        return (f"its restarts ran out (--max-restarts {budget} allows {budget} restart(s) and {len(a.failures)} "
                f"cycle(s) failed; raise --max-restarts)", shown)
    if not any(isinstance(e, ev.WorkerGroupFailed) and (e.attempts_left or 0) > 0 for e in fails):
        return (f"its restarts ran out (it recorded the failure of cycle {c}, announced no restart and started no "
                "later cycle; raise --max-restarts, which defaults to 0)", shown)
    return None


def check_clean_finish(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "clean_finish"
    if a.is_fault_run and a.injection is not None and a.poisoned:
        return _na_poisoned(cid, a)
    if a.is_fault_run and a.injection is not None and not a.restarted:
        gave_up = [e for e in tl.launcher_events() if isinstance(e, (ev.LauncherFailed, ev.RestartsExhausted))]
        launch = tl.launch
        ran_out = _restarts_ran_out(tl, a)
        why = f": {ran_out[0]}" if ran_out is not None else ""
        if not why and any(isinstance(e, ev.RestartsExhausted) for e in gave_up):
            why = ": its restarts ran out (it said no restart attempts were left; raise --max-restarts)"
        if gave_up or (launch is not None and launch.exit_code not in (None, 0)):
            shown = [*gave_up[:2], launch.src if launch is not None and launch.exit_code not in (None, 0) else None,
                     *(ran_out[1] if ran_out is not None else ())]
            return _result(cid, FAIL, f"The launcher gave up after the fault without starting replacement workers{why} "
                                      "(see replacement_cycle), so the job ended in failure, not cleanly.", shown,
                           final=bool(gave_up))
        if ran_out is not None:
            return _result(cid, FAIL, f"The launcher gave up after the fault without starting replacement workers{why} "
                                      "(see replacement_cycle), so the job ended in failure, not cleanly.", ran_out[1])
        return _result(cid, NOT_APPLICABLE, "The job never restarted after the fault (see replacement_cycle), so it "
                                             "could not finish cleanly.")
    problems: list[str] = []
    evidence: list[object] = []
    final: list[str] = []  # the problems no later line can undo (named first)
    launcher = list(tl.launcher_events())
    success = [e for e in launcher if isinstance(e, ev.LauncherSucceeded) or (isinstance(e, ev.LauncherExit) and e.code == 0)]
    failed = [e for e in launcher if isinstance(e, ev.LauncherFailed) or (isinstance(e, ev.LauncherExit) and e.code != 0)]
    launch = tl.launch
    lost_node_status = (a.fault == "node" and a.injection is not None and launch is not None
                        and launch.exit_code in (128 + 9, -9) and bool(success) and not failed)
    if launch is not None and launch.exit_code not in (None, 0) and not lost_node_status:
        problems.append(f"the launcher exited with status {launch.exit_code}")
        evidence.append(launch.src)
    # With a lost node, srun's status is its SIGKILLed task's (137) while every launcher that
    # survived reported success: that status is the fault itself, not the end of the run.
    if failed:
        problems.append("the launcher reported a failure")
        evidence.extend(failed[:2])
        final.append(problems[-1])
    if not success and not (launch is not None and launch.exit_code == 0):
        problems.append("no launcher success was recorded ('Agent .run() is OK', exit code 0 or launch.json)")
    elif not failed:
        evidence.extend(success[-1:])
        if launch is not None and launch.exit_code == 0:
            evidence.append(launch.src)
    if launch is not None and launch.stopped_early:
        problems.append(f"the harness stopped the launch early ({launch.stopped_early})")
        evidence.append(launch.src)
    if not a.is_fault_run and a.injection_count:
        problems.append("an injection marker exists although the fault is none")
        evidence.extend(a.injection_evidence[:2])
    if a.injection_count > a.planned_faults:
        problems.append(f"the fault was injected {a.injection_count} times" +
                        (f" (the {a.fault_at} plan holds {a.planned_faults})" if a.planned_faults > 1 else ""))
        evidence.extend(a.injection_evidence[:4])
        final.append(problems[-1])
    allowed = min(a.injection_count, a.planned_faults) if a.is_fault_run else 0
    if len(a.failures) > allowed:
        cycles = ", ".join(str(c) for c in a.failures)
        injected = {i.cycle for i in a.injections} | {a.failed_cycle}
        extra = [c for c in a.failures if c not in injected]
        only = "only the injected one may" if allowed <= 1 else f"only the {allowed} injected ones may"
        problems.append(f"{len(a.failures)} cycles failed ({cycles}); {only}")
        for c in extra[:3]:
            evidence.append(a.failures[c][0])
        # every planned fault is in (or there is none): no later injection can account for it
        if not a.is_fault_run or len(a.injections) >= a.planned_faults:
            final.append(problems[-1])
    if not a.is_fault_run:
        restarts = sorted({c for c in a.workers_started if c > 0} | {s.cycle for s in tl.starts if s.cycle})
        if restarts:
            problems.append(f"the workers restarted (cycle {restarts[0]}) although no fault was injected")
    stops = [e for e in launcher if isinstance(e, ev.NoProgressStop)]
    if stops:
        problems.append("NVRx stopped the job for lack of progress across restarts")
        evidence.append(stops[0])
        final.append(problems[-1])
    last = max(tl.starts, key=lambda s: (s.cycle if s.cycle is not None else -1, s.index), default=None)
    done = last.first(ev.TrainingDone) if last is not None else None
    if done is None:
        problems.append("Megatron never printed '[after training is done]'" +
                        (f" in its last start ({last.source})" if last is not None else " (no application log)"))
    else:
        evidence.append(done)
    if problems:
        problems = final + [p for p in problems if p not in final]  # what decided it first (the watcher's stop reason)
        return _result(cid, FAIL, "The run did not finish cleanly: " + "; ".join(problems) + ".", evidence,
                       final=bool(final))
    if a.is_fault_run and a.injection is not None and a.planned_faults > 1:
        shape = f"with exactly {a.planned_faults} injections ({a.fault_at}) and as many failed cycles"
    elif a.is_fault_run and a.injection is not None:
        shape = "with exactly one injection and one failed cycle"
    elif a.is_fault_run:
        shape = "without any failed cycle (and without the fault, see pre_fault_checkpoint)"
    else:
        shape = "in a single cycle without any fault"
    return _result(cid, PASS, f"The launcher reported success {shape}, no no-progress stop, and Megatron reached "
                              "'[after training is done]'.", evidence)


def check_optimizer_state(tl: Timeline, a: Analysis) -> CriterionResult:
    """The restored optimizer really continued: Adam's step counter in the first checkpoint
    committed after the restore of K equals that checkpoint's iteration (one optimizer step
    per iteration), and every optimizer slot holds exp_avg and exp_avg_sq. Read from the
    checkpoint's own optimizer record (history), which no log line can stand in for."""
    cid = OPTIMIZER_STATE
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    r = a.replacement
    loaded = r.first(ev.CheckpointLoaded) if r is not None else None
    if a.injection is None or r is None or loaded is None:
        return _result(cid, NOT_APPLICABLE, "No checkpoint was restored after the fault (see optimizer_reload), so "
                                             "there is no restored optimizer state to check.")
    k = loaded.iteration
    commits = sorted((e for s in a.post_starts for e in s.of(ev.SaveCommitted) if e.iteration > k),
                     key=lambda e: e.iteration)
    if not commits:
        return _result(cid, NOT_APPLICABLE, f"No checkpoint was committed after the restore of checkpoint {k} (see "
                                             "later_checkpoint), so the restored optimizer never reached the disk.",
                       [loaded])
    first = commits[0]
    n = first.iteration
    if tl.checkpoints is None or not tl.checkpoints.exists:
        return _result(cid, NOT_APPLICABLE, f"The checkpoint directory is not with this run directory, so the "
                                             f"optimizer's own record in checkpoint {n} (the first committed after the "
                                             f"restore of checkpoint {k}) cannot be read: copy checkpoints/ with the "
                                             "run to check it.", [loaded, first])
    ck = tl.checkpoints.get(n)
    if ck is None:
        return _result(cid, UNKNOWN, f"Checkpoint {n}, the first committed after the restore of checkpoint {k}, is "
                                     "not in the checkpoint directory: copy checkpoints/ with the run directory to "
                                     "check the optimizer's own record.", [loaded, first])
    rec = ck.optimizer_record
    evidence: list[object] = [loaded, first, ck.record_src()]
    if rec is None or rec.steps is None:
        why = (rec.note if rec is not None else None) or ck.inspect_note or "it was not read"
        return _result(cid, UNKNOWN, f"The optimizer record of {ck.rel} (the first checkpoint committed after the "
                                     f"restore of checkpoint {k}) could not be read: {why}.", evidence)
    before = tl.checkpoints.get(k) if tl.checkpoints is not None else None
    if before is not None and before.optimizer_record is not None and before.optimizer_record.steps:
        evidence.append(before.record_src())
    if rec.moment_slots == 0:
        return _result(cid, FAIL, f"{ck.rel}, the first checkpoint committed after the restore of checkpoint {k}, holds "
                                  "no optimizer moments at all (no optimizer key with exp_avg or exp_avg_sq): the "
                                  "training after the restore saved without optimizer state.", evidence)
    if rec.missing_count:
        shown = ", ".join(rec.missing_moments) + (" ..." if rec.missing_count > len(rec.missing_moments) else "")
        return _result(cid, FAIL, f"{ck.rel}, the first checkpoint committed after the restore of checkpoint {k}, "
                                  f"lacks exp_avg or exp_avg_sq for {rec.missing_count} of {rec.moment_slots} optimizer "
                                  f"slots ({shown}): Adam's moments were not carried through the restore.", evidence)
    if not rec.steps:
        moments = f"exp_avg and exp_avg_sq are present in all {_slots(rec.moment_slots)} of {ck.rel}, but "
        where = (f"neither a common_step nor a param group step in its common state ({rec.common_read})"
                 if rec.common_read else "no optimizer object and no common state holding one")
        return _result(cid, NOT_APPLICABLE, moments + f"this checkpoint records no Adam step counter ({where}): the "
                                                      "continuation is judged by loss_continuity against a baseline.",
                       evidence)
    skipped = [it for s in tl.starts for it in s.bad_iterations if (it.skipped or 0) > 0]
    if skipped:
        return _result(cid, UNKNOWN, f"Iteration {skipped[0].iteration} skipped its optimizer step, so the step count "
                                     f"expected in {ck.rel} is not its iteration {n}; see later_checkpoint.",
                       [*evidence, skipped[0]])
    wrong = sorted({s for s in rec.steps if s != n})
    if wrong:
        got = ", ".join(f"{s:g}" for s in wrong)
        if wrong == [float(n - k)]:
            why = f"it counts only the {n - k} steps since the restore: the step was reset to 0 when checkpoint {k} was loaded"
        elif all(s > n for s in wrong):
            why = "it ran ahead of one step per iteration since the restore"
        else:
            why = f"it did not continue from the {k} steps of checkpoint {k}"
        return _result(cid, FAIL, f"{ck.rel}, the first checkpoint committed after the restore of checkpoint {k}, holds "
                                  f"Adam's step counter {got} in {rec.key} ({rec.step_field}), but an optimizer that "
                                  f"continued from checkpoint {k} has taken {n} steps at iteration {n}: {why}, so Adam's "
                                  "bias correction after the restore differs from an uninterrupted run's.", evidence)
    return _result(cid, PASS, f"{ck.rel}, the first checkpoint committed after the restore of checkpoint {k}, holds "
                              f"Adam's step counter {n:g} in {rec.key} ({rec.step_field}), one step per iteration "
                              f"continued from checkpoint {k}, and exp_avg and exp_avg_sq in all "
                              f"{_slots(rec.moment_slots)}.", evidence)


def _slots(n: int) -> str:
    return f"{n} optimizer state slot{'' if n == 1 else 's'} (buckets or parameters)"


def check_loop_stopped(tl: Timeline, a: Analysis) -> CriterionResult:
    """A fault that returns in every cycle (a poisoned checkpoint) must be stopped by NVRx's
    no-progress rule: exit 93 within --ft-max-no-progress-cycles failed cycles, the cause named."""
    cid = LOOP_STOPPED
    inj = a.first_injection
    if not a.poisoned:
        return _result(cid, NOT_APPLICABLE, f"The {a.fault} fault ({a.fault_at}) plans no restart loop.")
    if inj is None:
        return _result(cid, NOT_APPLICABLE, "No injection happened (see pre_fault_checkpoint): no checkpoint was "
                                             "poisoned, so no restart loop could start.")
    limit = tl.run.max_no_progress_cycles or NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES
    limit_how = ("--max-no-progress-cycles" if tl.run.max_no_progress_cycles else "NVRx's default")
    c = inj.cycle if inj.cycle is not None else 0
    failed_after = sorted(cy for cy in a.failures if cy > c)
    stops = [e for e in tl.launcher_events() if isinstance(e, ev.NoProgressStop)]
    gave_up = [e for e in tl.launcher_events() if isinstance(e, (ev.RestartsExhausted, ev.LauncherFailed))]
    launch = tl.launch
    code = launch.exit_code if launch is not None else None
    k = inj.iteration
    evidence: list[object] = [inj, *stops[:1], launch.src if launch is not None else None]
    problems: list[str] = []
    # A fallback: every replacement that loaded anything loaded a checkpoint committed before the damaged one.
    loads = [(s, s.first(ev.CheckpointLoaded)) for s in a.post_starts]
    earlier = [(s, e) for s, e in loads if e is not None and k is not None and e.iteration < k]
    if earlier and all(e is None or (k is not None and e.iteration < k) for _, e in loads):
        s, e = earlier[0]
        return _result(cid, PASS, f"The stack fell back to checkpoint {e.iteration}, committed before the damaged "
                                  f"checkpoint {k}: replacement cycle {s.cycle} loaded it instead of the {_damaged(a)} "
                                  "one, so no restart loop was needed.", [inj, e])
    trained = [s for s in a.post_starts if s.first(ev.CheckpointLoaded) is not None or s.first_iteration is not None]
    if trained:
        problems.append(f"replacement cycle {trained[0].cycle} loaded or trained from the damaged checkpoint {k}: the "
                        f"{_damaged(a)} file went unnoticed")
        evidence.append((trained[0].first(ev.CheckpointLoaded) or trained[0].first_iteration))
    if trained and not stops and code == 0:
        pass  # no loop to stop: the damaged checkpoint was loaded and training finished (said above)
    elif not stops and code != NO_RESTART_EXIT_CODE:
        if launch is not None and launch.stopped_early:
            problems.append(f"NVRx never stopped the loop: the harness did ({launch.stopped_early})")
        elif gave_up or code not in (None, 0):
            problems.append(f"the launcher looped until --max-restarts ran out ({len(failed_after)} failed replacement "
                            f"cycles) and exited {code if code is not None else 'with a failure'}, instead of stopping "
                            f"for lack of progress with exit {NO_RESTART_EXIT_CODE}")
            evidence.extend(gave_up[:1])
        else:
            problems.append("no no-progress stop was recorded and the launcher's exit status is unknown")
    elif code is not None and code != NO_RESTART_EXIT_CODE:
        problems.append(f"the launcher logged a no-progress stop but exited {code}, not {NO_RESTART_EXIT_CODE}")
    if len(failed_after) > limit:
        problems.append(f"{len(failed_after)} replacement cycles failed before the stop, more than the limit of {limit} "
                        f"({limit_how})")
    # The repeating error: every failed replacement began loading the poisoned checkpoint and never finished.
    failing = [s for s in a.post_starts if s.cycle in failed_after]
    repeated = [s for s in failing if s.first(ev.LoadStarted) is not None and s.first(ev.CheckpointLoaded) is None]
    cause = []
    if inj.poisoned:
        shown = inj.poisoned
        try:  # relative to the run directory when inside it, as all evidence is
            shown = str(PurePath(inj.poisoned).relative_to(tl.run_dir))
        except ValueError:
            pass
        cause.append(f"the corrupt file is {shown} ({_damaged(a)} by the fault)")
    if failing and len(repeated) == len(failing):
        cause.append(f"each of the {len(failing)} failed replacement cycle(s) began loading checkpoint "
                     f"{repeated[0].first(ev.LoadStarted).iteration} and never finished it")
        evidence.extend(s.first(ev.LoadStarted) for s in repeated[:3])
    if not cause:
        problems.append("nothing names the cause of the loop (no poisoned file in the marker, no repeated failed load)")
    if problems:
        lead = ("The damaged checkpoint was not refused: " if trained else
                "The restart loop was not stopped as it must be: ")
        return _result(cid, FAIL, lead + "; ".join(problems) + ".", evidence)
    how = f"exit {code}" if code is not None else "a no-progress stop (exit status not recorded)"
    return _result(cid, PASS, f"NVRx's no-progress rule stopped the restart loop after {len(failed_after)} failed "
                              f"replacement cycle(s) (limit {limit}, {limit_how}) with {how}: " + "; ".join(cause) + ".",
                   evidence)


CHECKERS: tuple[tuple[str, Callable[[Timeline, Analysis], CriterionResult]], ...] = (
    ("pre_fault_checkpoint", check_pre_fault_checkpoint),
    ("replacement_cycle", check_replacement_cycle),
    ("optimizer_reload", check_optimizer_reload),
    ("later_checkpoint", check_later_checkpoint),
    ("clean_finish", check_clean_finish),
    (OPTIMIZER_STATE, check_optimizer_state),
)


# ---------------------------------------------------------------- loss continuity (with a baseline)

LOSS_CONTINUITY = "loss_continuity"


@dataclass(frozen=True)
class LossComparison:
    """The lm loss of every iteration of this run and of an uninterrupted baseline run of the
    same configuration (harness.history.RunRead.losses of each)."""

    run: Mapping[int, ev.LossLine]
    baseline: Mapping[int, ev.LossLine]
    baseline_dir: str  # as given; its last part prefixes the baseline's evidence lines


def check_loss_continuity(tl: Timeline, a: Analysis, losses: LossComparison | None) -> CriterionResult:
    """Loss continuity, the check after the five when a baseline is given: the losses after
    the restored checkpoint equal the baseline's (see compare_losses)."""
    loaded = a.replacement.first(ev.CheckpointLoaded) if a.replacement is not None else None
    return compare_losses(losses, a.fault, loaded.iteration if loaded is not None else None, tl.run.train_iters)


def compare_losses(losses: LossComparison | None, fault: str, restored: int | None,
                   train_iters: int | None) -> CriterionResult:
    """Under deterministic settings (the CPU workloads are bitwise deterministic) a run that
    recovered from checkpoint K must print, for every iteration after K, exactly the `lm loss`
    of an uninterrupted run of the same configuration (docs/megatron.md, "Optimizer state
    really reloaded", evidence 3). A restored model with a fresh optimizer matches at K+1 at
    best and drifts from K+2 on, so this catches what the log lines alone might not.

    Megatron (0.19 `training_log`) prints the first iteration of every start without resetting
    its loss accumulators, so with --log-interval 1 the next line reports the mean of the
    start's first two iterations. After a restore of K that is iteration K+2: its printed loss
    is then the mean of this run's K+1 and the baseline's K+2 (to the printed precision), and
    is accepted as continuous. The uninterrupted baseline averages only its iterations 1 and 2."""
    cid = LOSS_CONTINUITY
    if fault == "none":
        return CriterionResult(cid, NOT_APPLICABLE, "Fault none: there is no restore to compare.")
    if losses is None:
        return CriterionResult(cid, NOT_APPLICABLE,
                               "No baseline run given (verify --baseline RUN_DIR of an uninterrupted run).")
    if restored is None:
        return CriterionResult(cid, NOT_APPLICABLE,
                               "No checkpoint was restored (see optimizer_reload), so there is nothing to compare.")
    ours, theirs, baseline_dir = losses.run, losses.baseline, losses.baseline_dir
    base = PurePath(baseline_dir).name
    last = train_iters or max(ours, default=restored)
    wanted = range(restored + 1, last + 1)
    if train_iters is not None and restored >= train_iters:
        return CriterionResult(cid, NOT_APPLICABLE,
                               f"Checkpoint {restored} was the final one: nothing was trained after the restore, so "
                               "there is no loss to compare (state_equivalence compares the end state).")
    missing = [i for i in wanted if i not in ours or i not in theirs]
    if missing or not wanted:
        side = "this run" if any(i not in ours for i in missing) else f"the baseline {baseline_dir}"
        return CriterionResult(cid, FAIL if missing else UNKNOWN,
                               f"Iterations {restored + 1}..{last} must be logged by both runs; {side} lacks "
                               f"iteration {missing[0] if missing else '?'} (log every iteration: --log-interval 1).")
    averaged = None
    for i in wanted:
        if ours[i].loss != theirs[i].loss and i == restored + 2 and _mean_of(ours[i].loss, ours[i - 1].loss, theirs[i].loss):
            averaged = i  # Megatron's second line of a start: the mean of the start's first two iterations
            continue
        if ours[i].loss != theirs[i].loss:
            mean = ""
            if i == restored + 2 and _finite(ours[i - 1].loss, theirs[i].loss):
                mean = (f" (or {(float(ours[i - 1].loss) + float(theirs[i].loss)) / 2:.6E}, the mean of this run's "
                        f"{i - 1} and the baseline's {i}, as Megatron prints the second iteration of a start)")
            return CriterionResult(
                cid, FAIL,
                f"lm loss at iteration {i} is {ours[i].loss} after the restore of checkpoint {restored} but "
                f"{theirs[i].loss} in the uninterrupted baseline{mean}: the restored training state differs "
                "(optimizer state, data position or RNG).",
                (str(ours[i].src), f"{base}/{theirs[i].src}"))
    first, end = wanted[0], wanted[-1]
    note = (f" (iteration {averaged}'s line is Megatron's mean of the restart's first two iterations, and equals the "
            f"mean of this run's {averaged - 1} and the baseline's {averaged})") if averaged is not None else ""
    return CriterionResult(
        cid, PASS,
        f"lm loss of iterations {first}..{end} after the restore of checkpoint {restored} equals the uninterrupted "
        f"baseline's, all {len(wanted)} of them{note}.",
        (str(ours[first].src), f"{base}/{theirs[first].src}", str(ours[end].src)))


def _mean_of(printed: str, first: str, second: str) -> bool:
    """printed == (first + second) / 2 to the precision Megatron prints (%E: 7 significant digits)."""
    try:
        values = [float(printed), float(first), float(second)]
    except ValueError:
        return False
    if not all(math.isfinite(v) for v in values):
        return False
    return math.isclose(values[0], (values[1] + values[2]) / 2, rel_tol=2e-6)


def _finite(*printed: str) -> bool:
    try:
        return all(math.isfinite(float(p)) for p in printed)
    except ValueError:
        return False


# ---------------------------------------------------------------- end-state equivalence (with a baseline)

STATE_EQUIVALENCE = "state_equivalence"
DROPOUT_ARGS = ("hidden_dropout", "attention_dropout")


def determinism(tl: Timeline) -> tuple[bool, str, tuple[Src, ...]]:
    """(is this run's training bitwise deterministic, why, the evidence). The reference workload
    is (deterministic algorithms, one thread, data a pure function of the sample index); Megatron
    on CPU is when every start's arguments table has hidden_dropout and attention_dropout 0 (the
    plan's default, which arguments after -- may change); Megatron on GPUs is not (its
    reductions are not ordered)."""
    workload = tl.run.workload
    if workload == "reference":
        return True, "the reference workload is bitwise deterministic", ()
    if workload == "megatron-cpu":
        tables = [s.arguments for s in tl.starts if s.arguments is not None]
        seen = [(name, t.get(name), t.src_of(name)) for t in tables for name in DROPOUT_ARGS]
        srcs = tuple(src for _, _, src in seen if src is not None)
        if tables and all(_is_zero(value) for _, value, _ in seen):
            return True, "Megatron on CPU with hidden_dropout and attention_dropout 0 is bitwise deterministic", srcs[:2]
        nonzero = next(((n, v) for n, v, _ in seen if not _is_zero(v)), None)
        why = (f"{nonzero[0]} is {nonzero[1]}" if nonzero is not None and nonzero[1] is not None
               else "its arguments tables do not show the dropout")
        return False, f"Megatron on CPU with dropout is not bitwise deterministic ({why})", srcs[:2]
    shown = workload or "unrecorded (no run.json)"
    return False, f"the {shown} workload is not bitwise deterministic (GPU reductions, dropout)", ()


def _is_zero(value: str | None) -> bool:
    try:
        return value is not None and float(value) == 0.0
    except ValueError:
        return False


def check_state_equivalence(tl: Timeline, a: Analysis, state: ev.StateComparison | None) -> CriterionResult:
    """The end state itself: every model and optimizer tensor of the run's final committed
    checkpoint against the baseline's checkpoint of the same iteration (harness.end_state),
    bitwise where the training is deterministic, else within the tolerance of each tensor
    class. A restore that lost Adam's step, the data position or the RNG state ends elsewhere."""
    cid = STATE_EQUIVALENCE
    if not a.is_fault_run:
        return _result(cid, NOT_APPLICABLE, "Fault none: there is no restore whose end state could differ.")
    if state is None:
        return _result(cid, NOT_APPLICABLE, "No baseline run given (--baseline auto or RUN_DIR of an uninterrupted "
                                             "run of the same configuration), so there is no end state to compare with.")
    if a.poisoned:
        return _result(cid, NOT_APPLICABLE, f"The {a.fault} fault plans a restart loop, not a recovery: there is no "
                                             "recovered end state.")
    loaded = a.replacement.first(ev.CheckpointLoaded) if a.replacement is not None else None
    if loaded is None:
        return _result(cid, NOT_APPLICABLE, "No checkpoint was restored after the fault (see optimizer_reload), so "
                                             "there is no recovered end state to compare.")
    if state.iteration is None or state.checkpoint is None:
        return _result(cid, NOT_APPLICABLE, "This run committed no checkpoint (see later_checkpoint), so its end state "
                                             "is not on disk.", [loaded])
    mine = Src(f"{state.checkpoint}/.metadata", 0, f"final checkpoint, iteration {state.iteration}")
    theirs = (Src(f"{state.baseline_checkpoint}/.metadata", 0, "the baseline's checkpoint of the same iteration")
              if state.baseline_checkpoint else None)
    if state.note is not None:
        return _result(cid, UNKNOWN, f"The end states could not be compared: {state.note}.", [mine, theirs])
    exact, why, det_srcs = determinism(tl)
    tol = {c: (rtol, atol) for c, rtol, atol in state.tolerances}
    evidence: list[object] = [mine, theirs, *det_srcs]
    if state.missing_count:
        return _result(cid, FAIL, f"{state.checkpoint} and the baseline's {state.baseline_checkpoint} do not hold the "
                                  f"same tensors ({state.missing_count} differ, e.g. {state.missing[0]}): the restored "
                                  "run ended with another model or optimizer layout.",
                       [*evidence, *(Src(f"{state.checkpoint}/.metadata", 0, m) for m in state.missing[:4])])
    if state.compared_count == 0:
        return _result(cid, UNKNOWN, f"{state.checkpoint} holds no tensor that could be compared with the baseline's.",
                       evidence)
    classes = ", ".join(f"{n} {c}" for c, n in state.compared)
    skipped = ""
    if state.not_compared_count:
        shown = ", ".join(state.not_compared[:3]) + (" ..." if state.not_compared_count > 3 else "")
        skipped = (f"; {state.not_compared_count} pickled object(s) not compared ({shown}): the RNG state and a "
                   "step counter kept there show only through the tensors they shape")
    offending = [d for d in state.differing if exact or not d.within_tolerance]
    failing = state.differing_count if exact else state.outside_tolerance_count
    if failing:
        first = offending[0] if offending else None
        if first is not None:
            rtol, atol = tol.get(first.tensor_class, (0.0, 0.0))
            bound = "bitwise equality" if exact else f"the {first.tensor_class} tolerance rtol={rtol:g}, atol={atol:g}"
            evidence.append(Src(f"{state.checkpoint}/{first.key}", 0,
                                f"{first.numel} {first.dtype} values, max |run - baseline| = {first.max_abs_diff:.6g} "
                                f"({first.tensor_class})"))
            worst = "; ".join(f"{c} {v:.3g}" for c, v in state.max_abs_diff)
            return _result(cid, FAIL, f"{failing} of {state.compared_count} tensors of {state.checkpoint} differ from the "
                                      f"uninterrupted baseline's ({state.baseline_checkpoint}) beyond {bound} ({why}); "
                                      f"the first is {first.key} ({first.tensor_class}, max abs difference "
                                      f"{first.max_abs_diff:.6g}; largest per class: {worst}): the restored training "
                                      "state differs (optimizer state, data position or RNG).", evidence)
    if exact:
        return _result(cid, PASS, f"All {state.compared_count} tensors of {state.checkpoint} ({classes}) equal the "
                                  f"uninterrupted baseline's {state.baseline_checkpoint} bitwise ({why}){skipped}.",
                       evidence)
    tolerances = "; ".join(f"{c} rtol={tol[c][0]:g} atol={tol[c][1]:g}" for c, _ in state.compared if c in tol)
    close = (f", {state.differing_count} of them not bitwise (largest difference per class: "
             + "; ".join(f"{c} {v:.3g}" for c, v in state.max_abs_diff) + ")") if state.differing_count else ""
    return _result(cid, PASS, f"All {state.compared_count} tensors of {state.checkpoint} ({classes}) are within the "
                              f"tolerance of their class of the uninterrupted baseline's {state.baseline_checkpoint}"
                              f"{close} ({why}; tolerances: {tolerances}){skipped}.", evidence)


def check_safe(cid: str, checker: Callable[[Timeline, Analysis], CriterionResult], tl: Timeline, a: Analysis) -> CriterionResult:
    """Jepsen's check-safe: a checker that crashes yields `unknown` with the error, not a crash."""
    try:
        return checker(tl, a)
    except Exception as exc:  # noqa: BLE001 - the verdict must survive any one checker
        return CriterionResult(cid, UNKNOWN, f"The checker failed: {type(exc).__name__}: {exc}", ())


def evaluate(tl: Timeline, a: Analysis, losses: LossComparison | None = None,
             state: ev.StateComparison | None = None, baseline_problem: str | None = None) -> tuple[CriterionResult, ...]:
    """The five fixed criteria and optimizer_state, then loop_stopped for a plan that makes a
    restart loop, then loss_continuity and state_equivalence when a baseline run is given (its
    losses, and the comparison of the two final checkpoints), or both unknown when the baseline
    meant for them is unusable (`baseline_problem`: the automatic twin did not qualify)."""
    results = tuple(check_safe(cid, fn, tl, a) for cid, fn in CHECKERS)
    if a.is_fault_run and a.poisoned:
        results = (*results, check_safe(LOOP_STOPPED, check_loop_stopped, tl, a))
    if baseline_problem is not None and a.is_fault_run:
        return (*results, *(CriterionResult(cid, UNKNOWN, f"No usable baseline: {baseline_problem}.", ())
                            for cid in (LOSS_CONTINUITY, STATE_EQUIVALENCE)))
    if losses is not None:
        results = (*results, check_safe(LOSS_CONTINUITY, lambda t, an: check_loss_continuity(t, an, losses), tl, a))
        results = (*results, check_safe(STATE_EQUIVALENCE, lambda t, an: check_state_equivalence(t, an, state), tl, a))
    return results


BASELINE_NOTE = "fault none: an uninterrupted baseline run; no recovery was exercised"


def headline(is_qualified: bool, fault: str) -> str:
    """The verdict in words. A run without a fault qualifies only as a baseline: it proves
    the job runs and finishes, not that it recovers."""
    if not is_qualified:
        return "NOT QUALIFIED"
    return f"BASELINE QUALIFIED ({BASELINE_NOTE})" if fault == "none" else "QUALIFIED"
