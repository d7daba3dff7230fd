"""What every checker is given and how it answers (harness.judge.criteria's ground floor).

The check ids and statuses, the `Analysis` derived once from the Timeline (which fault, which
cycle failed, which start replaced it, which checkpoint K it had to load: harness.judge.episodes),
`Judging` (the one signature of every checker) and `answer`, the result a checker returns: its
status, its reason key and the facts it compared (phrases among them, harness.vocab.verdict.Phrase),
its evidence lines (`file:line: text`) and whether the failure is final. A checker renders
nothing: harness.judge.sentences.render turns its reason and facts into the sentence where the
result is shown. Nothing here reads files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from harness.vocab import events as ev
from harness.judge.episodes import Episode, episodes, launcher_cycles
from harness.vocab.events import Timeline
from harness.vocab.faults import (CAMPAIGN, DEFAULT_FAULT_AT, DEFAULT_KIND, FAULT_KINDS, FAULT_MOMENTS, FAULTS, FLIP_DISTCP, IN_PROCESS,
                                  FaultKind, PlannedFault, single_schedule)
from harness.vocab.verdict import CriterionResult, Phrase, Status

# The vocabulary is harness.vocab.verdict's; these names stay for the checkers and their tests.
PASS, FAIL, NOT_APPLICABLE, UNKNOWN = Status.PASS, Status.FAIL, Status.NOT_APPLICABLE, Status.UNKNOWN
STATUSES = tuple(Status)
CRITERIA_IDS = ("pre_fault_checkpoint", "replacement_cycle", "optimizer_reload", "later_checkpoint", "clean_finish")
# Appended after the five (docs/contracts.md: further checks append their ids): the restored
# optimizer's own record on disk, read offline, beyond the log lines optimizer_reload reads.
OPTIMIZER_STATE = "optimizer_state"
# Appended last: the launcher the workers imported against the one run.json's contract planned.
LAUNCHER_IDENTITY = "launcher_identity"
# The checks every run gets.
CHECK_IDS = (*CRITERIA_IDS, OPTIMIZER_STATE, LAUNCHER_IDENTITY)
# Then, only for a plan that makes a restart loop: the loop stopped by NVRx's no-progress rule.
LOOP_STOPPED = "loop_stopped"
DISK_FULL_HANDLED = "disk_full_handled"
# With a baseline run: the losses after the restore, and the end state, against the baseline's.
LOSS_CONTINUITY = "loss_continuity"
STATE_EQUIVALENCE = "state_equivalence"
NO_RESTART_EXIT_CODE = 93  # NVRx 0.7.0's --ft-no-restart-exit-code, as the plan passes it
NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES = 3
# The watcher's stop reason for a run that made no progress for longer than NVRx needs to notice
# anything, with nothing detected (harness.launch.watch.stall_budget), names the hang with this phrase;
# launch.json keeps only the reason's text, so the checks recognise the stop by it.
UNDETECTED_HANG = "a hang the stack did not detect"


def undetected_hang(tl: Timeline) -> str | None:
    """launch.json's stop reason when the harness stopped the job as a hang the stack did not
    detect, else None."""
    why = tl.launch.stopped_early if tl.launch is not None else None
    return why if why and UNDETECTED_HANG in why else None


def before_the_stop(tl: Timeline, events: Sequence[ev.Event]) -> list[ev.Event]:
    """The events the launcher logged before the harness stopped the job: what it logs after
    (torch elastic's failure and SignalException on SIGTERM) is its answer to the stop, not a
    detection of its own. All of them when launch.json records no stop time."""
    stop = tl.launch.stopped_at if tl.launch is not None else None
    return [e for e in events if stop is None or (t := tl.utc(e)) is None or t < stop]


# A signal's kind when only the nemesis's line tells: the first kind that sends it (SIGKILL: kill).
_SIGNAL_KIND: dict[str, str] = {}
for _kind in FAULT_KINDS.values():
    if _kind.signal is not None and _kind.injects != IN_PROCESS:  # an in-process kind's line names the kind
        _SIGNAL_KIND.setdefault(_kind.signal, _kind.name)
MAX_EVIDENCE = 12  # evidence lines of one result


def evidence_lines(evidence: Sequence[object]) -> tuple[str, ...]:
    """The evidence as `file:line: text` lines, each once, at most MAX_EVIDENCE."""
    lines: list[str] = []
    for item in evidence:
        if item is None:
            continue
        text = str(item.src if isinstance(item, ev.Event) else item)
        if text not in lines:
            lines.append(text)
    if len(lines) > MAX_EVIDENCE:
        lines = lines[: MAX_EVIDENCE - 1] + [f"... {len(lines) - MAX_EVIDENCE + 1} more"]
    return tuple(lines)


def answer(cid: str, status: Status, reason: str, values: Mapping[str, object], evidence: Sequence[object] = (), *,
           final: bool = False) -> CriterionResult:
    """A checker's answer: its status, the reason key of its sentence, the facts it compared
    (phrases not rendered yet), its evidence and whether a failure is final. The sentence is
    harness.judge.sentences.render's, where the result is shown."""
    return CriterionResult(cid, status, "", evidence_lines(evidence), final=final and status == FAIL,
                           values=dict(values), reason=reason)


# ---------------------------------------------------------------- the analysis shared by checkers


@dataclass(frozen=True)
class Analysis:
    """Facts every checker needs, derived once from the Timeline (pure): what is true of the
    whole run, and its recovery episodes (harness.judge.episodes: one per injection)."""

    fault: str
    fault_how: str
    injection_count: int
    injection_evidence: tuple[ev.Event, ...]
    never_fired: tuple[ev.NemesisNeverFired, ...]
    failures: Mapping[int, tuple[ev.LauncherEvent, ...]]  # launcher cycle -> failure records
    workers_started: Mapping[int, ev.LauncherEvent]  # launcher cycle -> workers-started record
    notes: tuple[str, ...] = field(default=())
    fault_at: str = DEFAULT_FAULT_AT  # the plan's moment (run.json, else the markers)
    planned_faults: int = 1  # faults the plan holds (in-restore: 2, a campaign: --faults), each with its own marker
    episodes: tuple[Episode, ...] = ()  # one per injection, in marker order
    schedule: tuple[PlannedFault, ...] = ()  # every planned fault (run.json's spec.schedule, else the plan's one fault)

    def kind_name(self, ep: Episode | None) -> str:
        """The kind of an episode's fault: what the schedule planned for its marker (a campaign
        plans one per fault), else the run's fault."""
        index = ep.marker.fault_index if ep is not None else 0
        if 0 < index <= len(self.schedule):
            return self.schedule[index - 1].kind
        return self.fault

    def kind(self, ep: Episode | None) -> FaultKind | None:
        return FAULT_KINDS.get(self.kind_name(ep))

    @property
    def opening(self) -> Episode | None:
        """The run's first episode (what the first fault interrupted)."""
        return self.episodes[0] if self.episodes else None

    @property
    def closing(self) -> Episode | None:
        """The episode the run's recovery ends with (no later fault cut it)."""
        return self.episodes[-1] if self.episodes else None

    @property
    def markers(self) -> tuple[ev.Injection, ...]:
        return tuple(e.marker for e in self.episodes)

    @property
    def subjects(self) -> tuple[Episode | None, ...]:
        """What the checks are judged for, one by one: the episodes, or for a run without any,
        None (the run's planned fault stands for the episode that never began)."""
        return self.episodes or (None,)

    def poisons(self, ep: Episode | None) -> bool:
        """The episode's own fault poisons its checkpoint (its kind damages the checkpoint every
        replacement would load): no recovery from it is possible, the launcher must stop the
        loop. Asked per episode: a campaign's kinds differ from one fault to the next."""
        kind = self.kind(ep)
        return kind is not None and kind.poisons_checkpoint

    @property
    def is_fault_run(self) -> bool:
        return self.fault != "none"


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
            named = e.signal if e.signal in FAULT_KINDS else _SIGNAL_KIND.get(e.signal, DEFAULT_KIND)
            return named, "the nemesis's injection line (no run.json, no marker)"
    return "none", "default: no run.json fault and no injection marker"


def analyze(timeline: Timeline, fault: str | None = None) -> Analysis:
    fault_name, how = resolve_fault(timeline, fault)
    nemesis_lines = [e for s in timeline.starts for e in s.of(ev.NemesisInjected)]
    never = tuple(e for s in timeline.starts for e in s.of(ev.NemesisNeverFired))
    cycles = launcher_cycles(timeline)
    found, notes = episodes(timeline, cycles)
    moments = [e.marker.fault_at for e in found]
    fault_at = timeline.run.fault_at or (moments[-1] if moments else None) or DEFAULT_FAULT_AT
    planned = FAULT_MOMENTS[fault_at].faults if fault_at in FAULT_MOMENTS else 1
    schedule = timeline.run.schedule or single_schedule(fault_name, timeline.run.fault_rank or 0, fault_at)
    if fault is not None and fault in FAULT_KINDS:  # --fault judges every planned fault as that kind
        schedule = tuple(dataclasses.replace(f, kind=fault) for f in schedule)
    if fault_name == CAMPAIGN:  # its moments are per fault (the schedule), its length the plan's
        fault_at, planned = CAMPAIGN, len(schedule) or max(1, len(found))
    count = max(len(timeline.injections), len(nemesis_lines))
    evidence: tuple[ev.Event, ...] = (*timeline.injections, *nemesis_lines)
    return Analysis(
        fault=fault_name, fault_how=how, injection_count=count, injection_evidence=evidence, never_fired=never,
        failures=cycles.failures, workers_started=cycles.workers_started, notes=notes, fault_at=fault_at,
        planned_faults=planned, episodes=found, schedule=schedule,
    )

@dataclass(frozen=True)
class LossComparison:
    """The lm loss of every iteration of this run and of an uninterrupted baseline run of the
    same configuration (harness.read.history.RunRead.losses of each)."""

    run: Mapping[int, ev.LossLine]
    baseline: Mapping[int, ev.LossLine]
    baseline_dir: str  # as given; its last part prefixes the baseline's evidence lines


@dataclass(frozen=True)
class Judging:
    """What a checker is given (the one signature of every check): the Timeline, the Analysis,
    the episode judged (None for a check of the whole run, or for a run without any episode)
    and the baseline inputs of the checks that compare with one."""

    tl: Timeline
    a: Analysis
    ep: Episode | None = None
    losses: LossComparison | None = None
    state: ev.StateComparison | None = None
    baseline_problem: str | None = None  # the baseline meant for the comparisons is unusable
    baseline_skipped: str | None = None  # the comparisons were not made, by request (verify --baseline none)


# ---------------------------------------------------------------- answers several checkers share

def na_no_fault(cid: str, a: Analysis) -> CriterionResult | None:
    if not a.is_fault_run:
        return answer(cid, NOT_APPLICABLE, "no_fault", {"fault_how": a.fault_how})
    return None


def na_poisoned(cid: str, a: Analysis, ep: Episode | None) -> CriterionResult:
    """Not applicable: the episode's fault poisoned its checkpoint on purpose (loop_stopped judges it)."""
    inj = ep.marker if ep is not None else None
    what = (Phrase("*", "what_checkpoint", {"iteration": inj.iteration}) if inj is not None and inj.iteration is not None
            else Phrase("*", "what_latest"))
    kind = a.kind(ep)
    corrupted = kind is not None and kind.damage == FLIP_DISTCP  # a fallback to an earlier checkpoint is a recovery too
    return answer(cid, NOT_APPLICABLE, "corrupted" if corrupted else "poisoned",
                  {"fault": a.kind_name(ep), "what": what, "damaged": damage_done(kind)}, [inj])


def damage_done(kind: FaultKind | None) -> Phrase:
    """What the kind did to the checkpoint, in the words of the sentences that name it."""
    return Phrase("*", "damaged_flip" if kind is not None and kind.damage == FLIP_DISTCP else "damaged_truncate")
