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

from harness.vocab import events as ev
from harness.vocab import tiers
from harness import workloads
from harness.judge.episodes import Episode, committed_before, episodes, launcher_cycles
from harness.vocab.events import Src, Timeline, iso_utc
from harness.vocab.layout import MARKER_NAME, TRACKER_NAME, parse_tracker
from harness.vocab.faults import (CAMPAIGN, DEFAULT_FAULT_AT, FAULT_KINDS, FAULT_MOMENTS, FAULTS, FLIP_DISTCP, IN_PROCESS,
                            FaultKind, PlannedFault, single_schedule)
from harness.judge.sentences import sentence
from harness.vocab.verdict import CriterionResult, Status, merge, qualified

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
MAX_EVIDENCE = 12


def _result(cid: str, status: str, detail: str, evidence: Sequence[object] = (), *, final: bool = False,
            values: Mapping[str, object] | None = None) -> CriterionResult:
    lines: list[str] = []
    for item in evidence:
        if item is None:
            continue
        text = str(item.src if isinstance(item, ev.Event) else item)
        if text not in lines:
            lines.append(text)
    if len(lines) > MAX_EVIDENCE:
        lines = lines[: MAX_EVIDENCE - 1] + [f"... {len(lines) - MAX_EVIDENCE + 1} more"]
    return CriterionResult(cid, status, detail, tuple(lines), final=final and status == FAIL, values=dict(values or {}))


def _found(cid: str, status: str, reason: str, values: Mapping[str, object], evidence: Sequence[object] = (), *,
           final: bool = False) -> CriterionResult:
    """A checker's facts (status, reason, the values it compared, evidence, final) as its
    result, the sentence rendered from them by harness.judge.sentences."""
    return _result(cid, status, sentence(cid, reason, values), evidence, final=final, values=values)


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
    def poisoned(self) -> bool:
        """The plan poisons its checkpoint: recovery is impossible, the launcher must stop the loop."""
        kind = FAULT_KINDS.get(self.fault)
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
            named = e.signal if e.signal in FAULT_KINDS else _SIGNAL_KIND.get(e.signal, "kill")
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


# ---------------------------------------------------------------- the checkers


def _na_no_fault(cid: str, a: Analysis) -> CriterionResult | None:
    if not a.is_fault_run:
        return _found(cid, NOT_APPLICABLE, "no_fault", {"fault_how": a.fault_how})
    return None


def _na_poisoned(cid: str, a: Analysis) -> CriterionResult:
    inj = a.opening.marker if a.opening is not None else None
    what = f"checkpoint {inj.iteration}" if inj is not None and inj.iteration is not None else "the latest checkpoint"
    corrupted = _damaged(a) != "truncated"  # corrupt: a fallback to an earlier checkpoint is a recovery too
    return _found(cid, NOT_APPLICABLE, "corrupted" if corrupted else "poisoned",
                  {"fault": a.fault, "what": what, "damaged": _damaged(a)}, [inj])


def _damaged(a: Analysis) -> str:
    kind = FAULT_KINDS.get(a.fault)
    return "corrupted (4 KiB inverted, size unchanged)" if kind is not None and kind.damage == FLIP_DISTCP else "truncated"


def check_pre_fault_checkpoint(j: Judging) -> CriterionResult:
    """A checkpoint was committed before the episode's fault: the marker, Megatron's save line,
    metadata.json and the tracker agree on K."""
    cid = "pre_fault_checkpoint"
    tl, a, ep = j.tl, j.a, j.ep
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    facts: dict[str, object] = {"fault": a.fault, "fault_how": a.fault_how}

    def found(status: Status, reason: str, evidence: Sequence[object], **values: object) -> CriterionResult:
        facts.update(values)
        return _found(cid, status, reason, facts, evidence, final=bool(facts.pop("final", False)))

    if ep is None:
        absent = [Src(MARKER_NAME, 0, "missing: no fault was injected"),
                  Src("run.json", 0, f"spec.fault = {a.fault}") if a.fault_how.startswith("run.json") else None]
        # final: the nemesis itself said it will not fire
        return found(FAIL, "never_injected", [*absent, *a.never_fired], final=bool(a.never_fired),
                     nemesis=(sentence(cid, "nemesis_said", {"reason": a.never_fired[0].reason})
                              if a.never_fired else ""))
    inj = ep.marker
    facts.update(episode=ep.number, marker=inj.src.path, marked_fault=inj.fault, rank=inj.rank, fault=a.kind_name(ep))
    if inj.fault not in (a.kind_name(ep), "unknown"):
        return found(FAIL, "other_fault", [inj])
    if inj.problem:
        return found(FAIL, "impossible_marker", [inj], problem=inj.problem)
    outside = _outside_the_run(tl, inj)
    if outside:
        return found(FAIL, "outside_the_run", [inj, tl.launch.src] if tl.launch is not None else [inj],
                     when=sentence(cid, *outside))
    in_save = inj.fault_at == "in-save"
    k = committed_before(inj)
    if in_save and (k is None or inj.iteration is None):
        return found(FAIL, "in_save_incomplete", [inj])
    if k is None:
        return found(FAIL, "no_iteration", [inj])
    facts["committed"] = k
    if k <= 0 or (inj.baseline_iteration is not None and k <= inj.baseline_iteration):
        return found(FAIL, "not_beyond_baseline", [inj], baseline=inj.baseline_iteration or 0)
    evidence: list[object] = [inj]
    caveats: list[str] = []
    ck = tl.checkpoints
    upto = inj.cycle if inj.cycle is not None else ep.cycle
    facts["upto"] = upto
    tier = tiers.tier_of_iteration(tl, k, upto)  # harness.vocab.tiers: which of Megatron's checkpoint tiers K is
    facts["ckpt"] = tiers.naming(tl, tier)
    pruned = tiers.pruned(tl, k) if tier == tiers.NON_PERSISTENT and ck is not None and ck.exists \
        and tiers.on_disk(ck, k, tier) is None else None
    if pruned is not None:
        caveats.append(sentence(cid, "caveat_pruned", {"committed": k, "later": pruned.iteration}))
        evidence.append(pruned.line)
    elif ck is not None and ck.exists:
        facts.update(dir=str(ck.path), iter_dir=f"iter_{k:07d}", tracker=TRACKER_NAME)
        disk = tiers.on_disk(ck, k, tier)
        if disk is None:
            return found(FAIL, "not_on_disk", [inj, f"{ck.path}:0: no iter_{k:07d}"])
        evidence.append(disk.commit_src())
        if not disk.committed:
            return found(FAIL, "not_committed", evidence, rel=disk.rel)
        text, tracker_src = tiers.tracker_of(ck, tier)
        facts["dir"] = tracker_src.path.rsplit("/", 1)[0]
        tracked = parse_tracker(text) if text is not None else None
        evidence.append(tracker_src)
        if text is None:
            return found(FAIL, "no_tracker", evidence)
        if tracked is None:
            return found(FAIL, "tracker_not_a_number", evidence, held=repr(text[:20]))
        if tracked < k:
            return found(FAIL, "tracker_behind", evidence, tracked=tracked)
    elif ck is not None and ck.how.startswith("not followed"):
        caveats.append(sentence(cid, "caveat_link", {"dir": str(ck.path)}))
    else:
        caveats.append(sentence(cid, "caveat_no_dir", {}))
    if not tl.starts:
        return found(UNKNOWN, "no_log", evidence)
    saves = [e for s in tl.starts if s.cycle is not None and s.cycle <= upto
             for e in s.of(ev.SaveCommitted) if e.iteration == k]
    if not saves:
        return found(FAIL, "no_save_line", evidence)
    evidence.append(saves[-1])
    if in_save:
        n, injected_at = inj.iteration, tl.utc(inj)
        facts["in_flight"] = n
        early = [e for s in tl.starts if s.cycle is not None and s.cycle <= upto for e in s.of(ev.SaveCommitted)
                 if e.iteration == n and (t := tl.utc(e)) is not None and injected_at is not None and t <= injected_at]
        if early:
            return found(FAIL, "in_save_after_the_save", [*evidence, early[0]])
        caveats.append(sentence(cid, "caveat_in_flight", facts))
    if ep.expected_k is not None and ep.expected_k != k:
        caveats.append(sentence(cid, "caveat_also_committed", {"also": ep.expected_k}))
    agree = "agree_all" if ck is not None and ck.exists and pruned is None else "agree_log"
    return found(PASS, "committed", evidence, when=iso_utc(tl.utc(inj)), agree=sentence(cid, agree, {}),
                 caveats=sentence(cid, "caveats", {"caveats": "; ".join(caveats)}) if caveats else "")


CLOCK_SLACK_S = 60.0  # clocks of one cluster agree far better; more is a marker of another run or a broken clock


def _outside_the_run(tl: Timeline, inj: ev.Injection) -> tuple[str, dict[str, object]] | None:
    """Where the marker's time falls outside the launch (launch.json's start..end): the reason
    and its facts (render.sentences), or None."""
    t = tl.utc(inj)
    launch = tl.launch
    if t is None or launch is None:
        return None
    if launch.started_at is not None and t < launch.started_at - CLOCK_SLACK_S:
        return "before_launch", {"at": iso_utc(t), "gap": f"{launch.started_at - t:.0f}",
                                 "launch": iso_utc(launch.started_at)}
    if launch.ended_at is not None and t > launch.ended_at + CLOCK_SLACK_S:
        return "after_launch", {"at": iso_utc(t), "gap": f"{t - launch.ended_at:.0f}", "launch": iso_utc(launch.ended_at)}
    return None


def _before_the_injection(tl: Timeline, ep: Episode, fails: Sequence[ev.LauncherEvent]) -> str | None:
    """A recovery step stamped before the episode's injection: what and when (rendered), or None."""
    injected = tl.utc(ep.marker)
    if injected is None or tl.offset_how.startswith("assumed"):
        return None
    first = ep.replacement.first_iteration if ep.replacement is not None else None
    for step, e in (("early_failure", min(fails, key=lambda f: tl.utc(f) or float("inf"), default=None)),
                    ("early_first_iteration", first)):
        t = tl.utc(e)
        if t is not None and t < injected - 1.0:
            return sentence("replacement_cycle", "stamped_early", {
                "what": sentence("replacement_cycle", step, {}), "at": iso_utc(t), "gap": f"{injected - t:.1f}",
                "injected": iso_utc(injected)})
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
        """The change, rendered from its facts (render.sentences)."""
        dp = {side: sentence("*", "dp", {"dp": d}) if d is not None else ""
              for side, d in (("dp_before", self.dp_before), ("dp_after", self.dp_after))}
        return sentence("*", "world_change", {"before": self.before, "after": self.after, "failed": self.failed,
                                              "replacement": self.replacement, **dp})

    def allowed(self, tl: Timeline) -> bool:
        """The plan let the job shrink this far: --nnodes MIN:MAX, MIN nodes' worth of ranks or more."""
        low, nodes = tl.run.min_nnodes, tl.run.nnodes
        if not self.shrank or low is None or not nodes or self.before % nodes:
            return False
        return self.after >= low * (self.before // nodes)


def world_change(ep: Episode) -> WorldChange | None:
    before = ep.fault_start.arguments if ep.fault_start is not None else None
    r = ep.replacement
    after = r.arguments if r is not None else None
    if before is None or after is None or ep.fault_start is None or r is None:
        return None
    wb, wa = before.integer("world_size"), after.integer("world_size")
    if wb is None or wa is None or wb == wa or wb < 1 or wa < 1:
        return None
    return WorldChange(wb, wa, before.integer("data_parallel_size"), after.integer("data_parallel_size"),
                       ep.fault_start.cycle if ep.fault_start.cycle is not None else 0,
                       r.cycle if r.cycle is not None else 0,
                       (before.src_of("world_size"), after.src_of("world_size")))


def check_replacement_cycle(j: Judging) -> CriterionResult:
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
    tl, a, ep = j.tl, j.a, j.ep
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    if ep is None:
        return _found(cid, NOT_APPLICABLE, "no_injection", {})
    inj, c = ep.marker, ep.cycle
    facts: dict[str, object] = {"fault": a.kind_name(ep), "failed_cycle": c, "episode": ep.number, "rank": inj.rank}

    def found(status: Status, reason: str, evidence: Sequence[object], **values: object) -> CriterionResult:
        facts.update(values)
        return _found(cid, status, reason, facts, evidence)

    if not tl.has_role("launcher"):
        later = [ci for ci in tl.cycle_infos if ci.cycle > c]
        if later and a.kind_name(ep) == "kill":
            return found(PASS, "cycle_records_only", [inj, *[ci for ci in tl.cycle_infos if ci.cycle == c], later[0]],
                         next_cycle=later[0].cycle)
        kind = a.kind(ep)
        return found(UNKNOWN, "no_launcher_log", [inj],
                     timeouts=sentence(cid, "and_timeouts", {}) if kind is not None and kind.monitor_detects else "")
    fails = ep.failures
    if not ep.last and inj.cycle is not None and not fails:  # a later fault follows: this one must have been noticed
        return found(FAIL, "earlier_fault_unnoticed", [inj], marker_cycle=inj.cycle, index=inj.fault_index,
                     planned=a.planned_faults, fault_at=inj.fault_at)
    ip = tiers.inprocess(ep.fault_start)  # harness.vocab.tiers: NVRx's in-process Wrapper in the failed cycle
    died = tiers.fault_process_died(tl, c, inj.pid) if ip is not None else None
    if ip is not None and ip.restarted and ep.replacement_cycle is None and died is None:
        caught = next((e for e in ip.caught if e.wrapped_rank == inj.rank), ip.caught[0] if ip.caught else None)
        return found(PASS, "in_process", [inj, *([caught] if caught else []), *ip.restarted[:2]],
                     restarts=ip.restarts, pid=inj.pid, caught=sentence(cid, "inprocess_caught", {
                         "text": caught.text, "who": caught.wrapped_rank}) if caught is not None else "")
    if (hung := undetected_hang(tl)) is not None and not before_the_stop(tl, fails):
        # the workers stayed alive, stuck, and nothing noticed until the harness stopped them
        return found(FAIL, "hung_undetected", [inj, tl.launch.src if tl.launch is not None else None], why=hung)
    if not fails:
        return found(FAIL, "unnoticed", [inj])
    evidence: list[object] = [inj, *fails[:3]]
    problems: list[dict[str, object]] = []
    if ep.replacement_cycle is not None:
        evidence.append(ep.restart)
        new = sentence(cid, "new_cycle", {"cycle": ep.replacement_cycle})
    elif ep.replacement is not None:
        evidence.append(ep.replacement.events[0] if ep.replacement.events else None)
        new = sentence(cid, "new_cycle_log_only", {"cycle": ep.replacement.cycle})
    else:
        group = next((e for e in fails if isinstance(e, ev.WorkerGroupFailed)), None)
        ends = [e for e in tl.launcher_events() if isinstance(e, (ev.LauncherFailed, ev.RestartsExhausted, ev.NoProgressStop))]
        evidence.extend(ends[:2])
        budget = tl.run.max_restarts
        if budget is not None and len(a.episodes) > budget:
            why = sentence(cid, "budget_spent", {"budget": budget, "faults": len(a.episodes), "fault_at": a.fault_at})
        elif group is None or group.attempts_left == 0:
            why = sentence(cid, "exhausted", {})
        else:
            why = sentence(cid, "restart_never_began", {"left": group.attempts_left, "max": group.max_restarts})
        return found(FAIL, "no_replacement", evidence, why=why)
    facts["replacement"] = new
    how = ""
    kind = a.kind(ep)
    if kind is not None and kind.monitor_detects:
        timeouts = [e for e in tl.launcher_events() if isinstance(e, ev.RankTimeout) and (e.cycle in (c, None))]
        injected_at = tl.utc(inj)
        before = [t for t in timeouts if injected_at is not None and (tl.utc(t) or injected_at) < injected_at]
        after = [t for t in timeouts if t not in before]
        named = [t for t in after if _names_injected_rank(t, inj)]
        if not timeouts:
            problems.append({**facts, "reason": "no_timeout"})
        elif not after:
            problems.append({**facts, "reason": "timeouts_before", "injected_at": iso_utc(injected_at)})
            evidence.extend(before[:3])
        elif named:
            evidence.append(named[0])
            state = sentence(cid, "state_stopped" if kind.signal == "SIGSTOP" else "state_hung", {})
            how = sentence(cid, "how_named", {**facts, "kind": named[0].kind.replace('_', '-'), "state": state})
        elif inj.signal not in (None, kind.signal):
            problems.append({**facts, "reason": "not_sigstop", "signal": inj.signal,
                             "expected": kind.signal or kind.name})
            evidence.extend(after[:3])
        else:
            first = after[0]
            ranks = sorted({t.rank if t.rank is not None else t.local_rank for t in after}, key=lambda r: (r is None, r))
            evidence.append(first)
            stamped = tl.utc(first)
            delay = sentence(cid, "delay", {"delay": f"{stamped - injected_at:.1f}"}) if stamped and injected_at else ""
            how = sentence(cid, "how_peer", {**facts, "kind": first.kind.replace('_', '-'), "delay": delay,
                                             "who": ", ".join(map(str, ranks)), "pid": inj.pid,
                                             "got": kind.signal or kind.name})
    if kind is not None and kind.exit_codes:
        exit_problem, exit_how, exit_evidence = _fault_rank_exit(kind, inj, fails)
        evidence.extend(exit_evidence)
        if exit_problem is not None:
            problems.append(exit_problem)
        how += exit_how
    if ip is not None and ep.replacement_cycle is not None:  # the in-process layer did not recover it: say so
        said = ip.gave_up[0] if ip.gave_up else (ip.caught[0] if ip.caught else None)
        if said is not None:
            evidence.append(said)
            how += sentence(cid, "inprocess_then_launcher", {"name": said.name, "text": said.text,
                                                              "who": said.wrapped_rank, "pid": inj.pid})
    facts["how"] = how
    nodes = ""
    change = world_change(ep)
    if change is not None:
        evidence.extend(change.evidence)
        if not change.allowed(tl):
            if tl.run.min_nnodes is not None:
                allowed = sentence(cid, "allowed_min", {"min": tl.run.min_nnodes, "max": tl.run.nnodes})
            elif tl.run.has_run_json:
                allowed = sentence(cid, "allowed_fixed", {})
            else:
                allowed = sentence(cid, "allowed_unknown", {})
            problems.append({"reason": "world_changed", "way": "shrank" if change.shrank else "grew",
                             "change": change.text(), "allowed": allowed})
    if a.kind_name(ep) == "node":
        r = ep.replacement_cycle if ep.replacement_cycle is not None else ep.replacement.cycle
        status, nodes, infos = _node_replacement(tl, inj, c, r, fails, change)
        evidence.extend(infos)
        if status == FAIL:
            problems.append({"reason": "node_text", "text": nodes})
        elif status == UNKNOWN:
            return found(UNKNOWN, "node_unknown", evidence, nodes=nodes)
    if problems:
        return found(FAIL, "restarted_but", evidence, problems=problems)
    early = _before_the_injection(tl, ep, fails)
    if early:
        return found(UNKNOWN, "before_the_fault", evidence, early=early, offset=f"{tl.utc_offset_s:+d}",
                     offset_how=tl.offset_how)
    shrink = ""
    if change is not None and not nodes:
        shrink = sentence(cid, "shrank_allowed", {"min": tl.run.min_nnodes, "max": tl.run.nnodes,
                                                  "change": change.text()})
    return found(PASS, "restarted", evidence, nodes=nodes, shrink=shrink)


def _replacement_cycles_all_passed(j: Judging, passed: Sequence[tuple[Episode, CriterionResult]]) -> CriterionResult:
    """Every episode's launcher noticed its fault and restarted: one sentence for the run, each
    fault told with its own kind, moment, failed cycle, how it was noticed and its restart."""
    last = passed[-1][1]
    earlier = [str(x.src) for e, _ in passed[:-1] for x in (e.marker, *e.failures[:1])]
    evidence = [last.evidence[0], *earlier, *last.evidence[1:]] if last.evidence else earlier
    each = "; ".join(sentence("replacement_cycle", "each_restarted", {
        **r.values, "number": e.number, "kind": j.a.kind_name(e), "fault_at": e.marker.fault_at,
        "how": r.values.get("how", "")}) for e, r in passed)
    return _found("replacement_cycle", PASS, "all_restarted", {"faults": len(passed), "each": each}, evidence)


def _exit_meaning(code: int) -> str:
    if code < 0:
        try:
            return sentence("*", "killed_by", {"signal": signal.Signals(-code).name})
        except ValueError:
            return sentence("*", "killed_by_number", {"number": -code})
    return sentence("*", "exit_status", {"code": code})


def _fault_rank_exit(kind, inj: ev.Injection, fails: Sequence[ev.Event]) -> tuple[dict[str, object] | None, str, list]:
    """A kind that fixes how its rank dies (FaultKind.exit_codes): the launcher's `failed (exitcode`
    line of that very worker (the marker's pid) must show it; another code means the rank died of
    something else (for `gil`: not of the rank monitor's SIGKILL). No line for it (a peer's failure
    was recorded first) decides nothing. (the problem's facts or None, the `how` fragment, evidence)"""
    mine = [e for e in fails if isinstance(e, ev.WorkerFailed) and inj.pid is not None and e.pid == inj.pid]
    if not mine:
        return None, "", []
    code = mine[0].exitcode
    facts = {"rank": inj.rank, "pid": inj.pid, "code": code, "meaning": _exit_meaning(code), "kind": kind.name,
             "wanted": " or ".join(sentence("*", "code_meaning", {"code": c, "meaning": _exit_meaning(c)})
                                   for c in kind.exit_codes)}
    if code not in kind.exit_codes:
        return {"reason": "died_otherwise", **facts}, "", [mine[0]]
    return None, sentence("replacement_cycle", "how_exit_code", facts), [mine[0]]


def _node_replacement(tl: Timeline, inj: ev.Injection, failed: int, replacement: int,
                      fails: Sequence[ev.Event], change: WorldChange | None = None) -> tuple[str, str, list]:
    """For a lost node: (status, text, cycle records). The lost node is the marker's host; the
    cycle records (NVRx >= 0.6) name the nodes each cycle ran on."""
    from harness.machine.slurm import expand_hostlist

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
    facts: dict[str, object] = {"lost": lost, "rank": inj.rank, "failed": failed, "replacement": replacement}

    def said(status: str, reason: str, **values: object) -> tuple[str, str, list]:
        return status, sentence("replacement_cycle", reason, {**facts, **values}), infos

    if before is None or after is None or not lost:
        if not lost:
            return said(UNKNOWN, "node_no_host")
        return said(UNKNOWN, "node_no_record", cycle=failed if before is None else replacement)
    was, now = expand_hostlist(before.active_nodes or ""), expand_hostlist(after.active_nodes or "")
    if not was or not now:
        return said(UNKNOWN, "node_not_host_lists", was=repr(before.active_nodes), now=repr(after.active_nodes))
    if lost in now:
        return said(FAIL, "node_still_active", active=after.active_nodes)
    promoted = [n for n in now if n not in was]
    if lost not in was:
        return said(FAIL, "node_not_active", active=before.active_nodes)
    facts.update(was=", ".join(was), now=", ".join(now), promoted=", ".join(promoted))
    if (len(now) < len(was) and not promoted and change is not None and change.allowed(tl)
            and tl.run.min_nnodes is not None and len(now) >= tl.run.min_nnodes):
        return said(PASS, "node_lost_shrank", n_now=len(now), n_was=len(was), min=tl.run.min_nnodes,
                    max=tl.run.nnodes, change=change.text())
    if len(now) < len(was) or not promoted:
        shrank = sentence("replacement_cycle", "node_job_shrank", {"change": change.text()}) \
            if change is not None and change.shrank else ""
        return said(FAIL, "node_not_replaced", shrank=shrank)
    return said(PASS, "node_replaced")


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
    promoted = [n for n in now if n not in was]
    facts = {"lost": lost_id, "rank": inj.rank, "failed": failed, "replacement": replacement, "was": ", ".join(was),
             "now": ", ".join(now), "promoted": ", ".join(promoted)}
    if lost_id in now:
        return FAIL, sentence("replacement_cycle", "node_joined_again", facts), evidence
    if len(now) < len(was) or not promoted:
        return FAIL, sentence("replacement_cycle", "node_joins_fewer", facts), evidence
    return PASS, sentence("replacement_cycle", "node_replaced_by_joins", facts), evidence


def _node_pid(node_id: str) -> int | None:
    """NVRx's node id `<host>_<launcher pid>_<local id>` -> the launcher pid."""
    parts = node_id.rsplit("_", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def check_optimizer_reload(j: Judging) -> CriterionResult:
    """The replacement of the episode loaded K, the latest committed at fault time, with its
    optimizer state. A failure is final once the replacement trains: its load block is then
    complete (a rank's stdout and stderr reach the per-cycle log through separate pipes, so
    not before), and nothing can undo it."""
    cid = "optimizer_reload"
    tl, a, ep = j.tl, j.a, j.ep
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    if ep is None:
        return _found(cid, NOT_APPLICABLE, "no_injection", {})
    if a.poisoned:
        return _na_poisoned(cid, a)
    r = ep.replacement
    if ep.replacement_cycle is None and (ip := tiers.inprocess(ep.fault_start)) is not None \
            and ip.restarted:  # harness.vocab.tiers: NVRx's Wrapper restarted inside the same processes
        return _inprocess_reload(cid, ep, ip)
    if r is None:
        if ep.replacement_cycle is not None:
            return _found(cid, UNKNOWN, "no_replacement_log", {"cycle": ep.replacement_cycle}, [ep.restart])
        return _found(cid, NOT_APPLICABLE, "no_replacement", {})
    k = ep.expected_k
    trained = r.first_iteration is not None
    facts: dict[str, object] = {"expected": k, "episode": ep.number, "cycle": r.cycle}

    def found(status: Status, reason: str, evidence: Sequence[object], final: bool = False,
              **values: object) -> CriterionResult:
        facts.update(values)
        return _found(cid, status, reason, facts, evidence, final=final or trained)

    change = world_change(ep)
    facts["who"] = sentence(cid, "who", facts)
    if change is not None:  # a restore onto another world: every verdict below names it
        facts["who"] = sentence(cid, "who_changed", {**facts, "way": "shrank" if change.shrank else "grew",
                                                     "change": change.text()})
    # Decided by the configuration alone, so it holds even for a run stopped before its load ended.
    args = r.arguments
    shown = [r.first(ev.LoadStarted), r.first(ev.CheckpointLoaded)]
    for flag, option in (("no_load_optim", "--no-load-optim"), ("finetune", "--finetune")):
        if args is not None and args.flag(flag):
            return found(FAIL, "skip_flag", [*shown, args.src_of(flag)], final=True, option=option)
        if option in tl.run.argv or option in tl.run.extra_args:
            return found(FAIL, "skip_flag_command_line", [*shown, "run.json:0: " + option + " in the launcher command"],
                         final=True, option=option)
    random = r.first(ev.StartedFromRandom)
    if random is not None:
        return found(FAIL, "from_random", [random, *ep.expected_k_evidence[:1]], final=True)
    loaded = r.first(ev.CheckpointLoaded)
    began = r.first(ev.LoadStarted)
    if loaded is None:
        if began is None:
            return found(FAIL, "no_load", [r.events[0] if r.events else None], source=r.source)
        return found(FAIL, "load_unfinished", [began], began=began.iteration)
    evidence: list[object] = [began, loaded]
    facts["loaded"] = loaded.iteration
    if k is None:
        return found(UNKNOWN, "nothing_to_compare", evidence)
    partial = next((i for i in a.markers if i.fault_at == "in-save" and i.iteration == loaded.iteration), None)
    if loaded.iteration != k and partial is not None:
        rel = f"iter_{loaded.iteration:07d}"
        d = tl.checkpoints.get(loaded.iteration) if tl.checkpoints is not None else None
        return found(FAIL, "loaded_partial", [*evidence, partial, *ep.expected_k_evidence[:1]],
                     where=d.rel if d is not None else rel)
    if tiers.has_local(tl) and (local := _local_reload(tl, ep, r, k, loaded)) is not None:  # harness.vocab.tiers
        status, reason, extra, values = local
        return found(status, reason, [*evidence, *extra], final=status == FAIL, **values)
    if loaded.iteration < k and (older := tiers.older_tier(tl, ep.cycle, r, k)) is not None:
        return found(FAIL, "older_tier", [*evidence, *older.evidence, *ep.expected_k_evidence[:2]], final=True,
                     restored=older.restored, newest=older.newest, said=older.said)
    if loaded.iteration != k:
        args = r.arguments
        step = args.get("ckpt_step") if args else None
        pinned = step not in (None, "None")
        hint = sentence(cid, "hint_ckpt_step" if pinned else "hint_tracker", {"step": step})
        return found(FAIL, "other_checkpoint", [*evidence, *ep.expected_k_evidence[:2]] + (
                     [args.src_of("ckpt_step")] if pinned and args else []),
                     final=loaded.iteration < k,  # nothing newer than K was committed to load
                     which="an older" if loaded.iteration < k else "a newer", hint=hint)
    if loaded.iteration <= 0:
        return found(FAIL, "fresh_start", evidence)
    block = r.load_block()
    opt = [e for e in block if isinstance(e, ev.OptimizerLoaded)]
    sched = [e for e in block if isinstance(e, ev.SchedulerValueLoaded)]
    # whether the optimizer is the distributed one: Megatron's arguments table, else megatron-core's
    # own optimizer configuration line (Megatron-Bridge prints no arguments table)
    distributed = r.flag("use_distributed_optimizer")
    plain = distributed is not None and distributed[0] is False
    if not opt and sched and distributed is None:  # the plain optimizer's evidence is missing, not contrary
        return found(UNKNOWN, "optimizer_setting_unseen", [*evidence, sched[0]])
    if not opt and not (plain and sched):
        return found(FAIL, "without_optimizer", evidence)
    # Megatron loads the scheduler under the same condition as the optimizer; without the
    # distributed optimizer its scheduler lines are the log's evidence of that load.
    evidence[1:1] = [*opt[:1], *sched[:1], *([distributed[1]] if not opt and distributed is not None else [])]
    ck = tl.checkpoints.get(k) if tl.checkpoints is not None else None
    if ck is not None:
        facts["rel"] = ck.rel
        if not ck.has_dcp_metadata:
            return found(FAIL, "no_dcp_metadata", [*evidence, ck.keys_src()])
        evidence.append(ck.keys_src())
        if ck.optimizer_keys == 0:
            return found(FAIL, "no_optimizer_tensors", evidence)
        facts.update(keys=ck.optimizer_keys, note=ck.inspect_note)
        disk_note = sentence(cid, "disk_keys" if ck.optimizer_keys is not None else "disk_keys_unlisted", facts)
    else:
        disk_note = sentence(cid, "disk_absent", facts)
    lines = sentence(cid, "loaded_both" if opt and sched else "loaded_optimizer" if opt else "loaded_scheduler", {})
    resharded = ""
    if change is not None:
        evidence.extend(change.evidence)
        resharded = sentence(cid, "resharded", {"before": change.before, "after": change.after})
    got = tiers.loaded(r)
    return found(PASS, "reloaded", evidence, lines=lines, disk_note=disk_note, resharded=resharded,
                 ckpt=tiers.naming(tl, got.tier if got is not None else tiers.PERSISTENT))


def _local_reload(tl: ev.Timeline, ep: Episode, r: ev.AppStart, k: int,
                  loaded: ev.CheckpointLoaded) -> tuple[Status, str, list[object], dict[str, object]] | None:
    """optimizer_reload's rows for Megatron's local checkpoints (harness.vocab.tiers): which local
    checkpoint was loaded, whether NVRx validated its save, and whose copy each rank read.
    None: the run's local tier has nothing to say about this load (the persistent rows judge it)."""
    got = tiers.loaded(r)
    saves = tiers.local_saves(tl, ep.cycle)
    newest_local = saves.newest
    if got is None or got.tier != tiers.LOCAL:
        if newest_local is None or newest_local <= k or loaded.iteration >= newest_local:
            return None
        newest = tiers.describe(tiers.LOCAL, newest_local)
        restored = tiers.describe(got.tier if got is not None else tiers.PERSISTENT, loaded.iteration,
                                  tiers.on_disk(tl.checkpoints, loaded.iteration))
        return FAIL, "older_tier", [saves.validated[newest_local]], {"restored": restored, "newest": newest, "said": ""}
    it = loaded.iteration
    if it not in saves.validated:
        failed = saves.failed.get(it)
        why = sentence("optimizer_reload", "local_failed" if failed is not None else "local_never_validated",
                       {"loaded": it, "last_valid": failed.last_valid if failed is not None and failed.last_valid
                        is not None else -1})
        held = [f"rank {o}: {', '.join(map(str, h))}" for (i, o), h in sorted(saves.holders.items()) if i == it]
        return FAIL, "local_unvalidated", [*([failed] if failed is not None else [])], {
            "why": why, "held": f" (copies written: {'; '.join(held)})" if held else ""}
    newest_it = max(k, newest_local if newest_local is not None else k)
    if it < newest_it:
        tier = tiers.LOCAL if newest_it == newest_local else tiers.tier_of_iteration(tl, newest_it, ep.cycle)
        newest = tiers.describe(tier, newest_it, tiers.on_disk(tl.checkpoints, newest_it, tier))
        return FAIL, "older_tier", [saves.validated.get(newest_it)], {
            "restored": tiers.describe(tiers.LOCAL, it), "newest": newest, "said": ""}
    found = tiers.copies(r, it)
    missing = [e for e in r.of(ev.LocalCopyMissing) if e.iteration == it]
    which = (sentence("optimizer_reload", "local_copies", {"copies": tiers.describe_copies(found)}) if found
             else sentence("optimizer_reload", "local_copies_unlogged", {}))
    return PASS, "local_reloaded", [saves.validated[it], *[e for _o, _r, e in found][:4], *missing[:2]], {
        "validated": it, "which": which,
        "missing": sentence("optimizer_reload", "local_missing", {"n": len(missing)}) if missing else ""}


def _inprocess_reload(cid: str, ep: Episode, ip: "tiers.Inprocess") -> CriterionResult:
    """optimizer_reload for a recovery NVRx's in-process Wrapper made inside the failed
    cycle's processes (harness.vocab.tiers): Megatron's reload after the restart must be K, not a
    start over (Megatron-LM #2774), within --inprocess-max-iterations (Megatron-Bridge #5755)."""
    k = ep.expected_k
    facts: dict[str, object] = {"expected": k, "episode": ep.number, "cycle": ep.cycle,
                                "restarts": ip.restarts, "limit": ip.max_iterations}
    facts["who"] = sentence(cid, "who_inprocess", facts)
    first = ip.restarted[0]
    if ip.max_iterations is not None and ip.restarts > ip.max_iterations:
        return _found(cid, FAIL, "inprocess_over_limit", facts, [*ip.restarted[-2:]], final=True)
    if ip.from_random is not None:
        return _found(cid, FAIL, "inprocess_from_start", {**facts, "loaded": 0}, [first, ip.from_random], final=True)
    if ip.reload is None:
        return _found(cid, FAIL, "inprocess_no_reload", facts, [first, *ip.gave_up[:1]])
    facts["loaded"] = ip.reload.iteration
    evidence = [first, ip.reload_began, ip.reload]
    if ip.reload.iteration <= 0:
        return _found(cid, FAIL, "inprocess_from_start", facts, evidence, final=True)
    if k is not None and ip.reload.iteration != k:
        return _found(cid, FAIL, "inprocess_other", {**facts, "which": "an older" if ip.reload.iteration < k
                                                      else "a newer"}, evidence, final=ip.reload.iteration < k)
    return _found(cid, PASS, "inprocess_reloaded", facts, evidence)


def check_later_checkpoint(j: Judging) -> CriterionResult:
    """Training after the episode's restore (the whole run, without a fault) committed its work
    to the final iteration with no skipped step."""
    cid = "later_checkpoint"
    tl, a, ep = j.tl, j.a, j.ep
    recovering = a.is_fault_run and ep is not None
    if recovering and not ep.restarted:
        return _found(cid, NOT_APPLICABLE, "no_replacement", {})
    if recovering and a.poisoned:
        return _na_poisoned(cid, a)
    k = (ep.expected_k or 0) if recovering else 0
    t_final = tl.run.train_iters
    if recovering and t_final is not None and k >= t_final:
        return _nothing_left_to_train(tl, ep, k, t_final)
    scope = list(ep.continuation) if recovering else list(tl.starts)
    facts: dict[str, object] = {"restored": k, "where": sentence(cid, "after_restore" if recovering else "in_run",
                                                                   {"restored": k})}
    if not scope:
        return _found(cid, UNKNOWN, "no_log", facts)
    problems: list[dict[str, object]] = []
    evidence: list[object] = []
    lasts = [s.last_iteration for s in scope if s.last_iteration is not None]
    top = max(lasts, key=lambda it: it.iteration, default=None)
    final = next((s.last_iteration for s in reversed(scope) if s.last_iteration is not None), None)
    if top is None or top.iteration <= k:
        problems.append({"reason": "no_iteration_beyond"})
    else:
        first = next((s.first_iteration for s in scope if s.first_iteration is not None), None)
        evidence.append(first)
    skipped = [it for s in scope for it in s.bad_iterations if (it.skipped or 0) > 0 and it.iteration > k]
    if skipped:
        problems.append({"reason": "skipped_step", "iteration": skipped[0].iteration, "skipped": skipped[0].skipped})
        evidence.extend(skipped[:3])
    saves = [e for s in scope for e in s.of(ev.SaveCommitted) if e.iteration > k]
    ck = tl.checkpoints if tl.checkpoints is not None and tl.checkpoints.exists else None
    later: ev.SaveCommitted | None = None
    if not saves:
        problems.append({"reason": "no_later_save"})
    else:
        # a directory pruned since (not on disk) does not contradict the log; one without metadata.json does
        committed = [s for s in saves if ck is None or (d := ck.get(s.iteration)) is None or d.committed]
        if not committed:
            d = ck.get(saves[-1].iteration) if ck is not None else None
            problems.append({"reason": "logged_not_committed", "iteration": saves[-1].iteration,
                             "rel": d.rel if d else f"iter_{saves[-1].iteration:07d}"})
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
            problems.append({"reason": "stopped_early", "iteration": final.iteration, "train_iters": t})
            if t_src:
                evidence.append(t_src)
    si = tl.run.save_interval
    if t is not None and si and t % si == 0 and final is not None and final.iteration == t:
        on_disk = ck.get(t) if ck is not None else None
        logged = any(s.iteration == t for s in saves)
        if not (on_disk.committed if on_disk is not None else logged):  # the disk, when it has the dir, decides
            problems.append({"reason": "final_not_committed", "train_iters": t, "save_interval": si})
            if on_disk is not None:
                evidence.append(on_disk.commit_src())
    facts.update(problems=[{"restored": k, "where": facts["where"], **p} for p in problems], train_iters=t,
                 last=final.iteration if final is not None else None,
                 later=later.iteration if later is not None else None)
    if problems:
        return _found(cid, FAIL, "did_not_commit", facts, evidence)
    facts["steps"] = sentence(cid, "steps" if final is not None else "steps_unknown", facts)
    facts["later_text"] = later.iteration if later is not None else "?"
    return _found(cid, PASS, "committed", facts, evidence)


def _nothing_left_to_train(tl: Timeline, ep: Episode, k: int, t: int) -> CriterionResult:
    """The fault hit after the final checkpoint (last-iteration): there is nothing to train, and
    that is no failure. What must hold: checkpoint T committed, no training line beyond T; the
    reload of T is optimizer_reload's, the clean exit clean_finish's."""
    cid = "later_checkpoint"
    facts: dict[str, object] = {"restored": k, "train_iters": t}
    evidence: list[object] = [ep.marker, tl.run.train_iters_src]
    ck = tl.checkpoints if tl.checkpoints is not None and tl.checkpoints.exists else None
    d = ck.get(k) if ck is not None else None
    if d is not None:
        evidence.append(d.commit_src())
        if not d.committed:
            return _found(cid, FAIL, "final_never_committed", {**facts, "rel": d.rel}, evidence)
    beyond = [s.last_iteration for s in ep.continuation if s.last_iteration is not None and s.last_iteration.iteration > t]
    if beyond:
        return _found(cid, FAIL, "trained_beyond_final", {**facts, "iteration": beyond[0].iteration},
                      [*evidence, beyond[0]])
    trained = [s.first_iteration for s in ep.continuation if s.first_iteration is not None]
    if trained and trained[0].iteration <= k:
        return _found(cid, FAIL, "trained_again", {**facts, "iteration": trained[0].iteration}, [*evidence, trained[0]])
    return _found(cid, PASS, "nothing_left", facts, evidence)


def _restarts_ran_out(tl: Timeline, a: Analysis, ep: Episode) -> tuple[dict[str, object], list[object]] | None:
    """For a fault run that never restarted and whose launcher's own give-up line is not in the
    logs (NVRx 0.7.0's log server loses the last lines; no launch.json): (the facts of why its
    restarts ran out, evidence), when the launcher recorded the failed cycle and either
    run.json's restart budget is spent or it announced no restart ('N/M attempts left; will
    restart worker group', which torch elastic prints only while attempts are left). None:
    nothing says so (no record of the failure, the harness stopped the launch, or a restart
    was announced)."""
    fails = ep.failures
    if not fails or (tl.launch is not None and tl.launch.stopped_early):
        return None
    shown: list[object] = [ep.marker, *fails[:2]]
    budget = tl.run.max_restarts
    if budget is not None and len(a.failures) > budget:
        return {"reason": "budget_spent", "budget": budget, "failed": len(a.failures)}, shown
    if not any(isinstance(e, ev.WorkerGroupFailed) and (e.attempts_left or 0) > 0 for e in fails):
        return {"reason": "no_restart_announced", "cycle": ep.cycle}, shown
    return None


def check_clean_finish(j: Judging) -> CriterionResult:
    """The whole run: the launcher succeeded, as many failed cycles as episodes, Megatron done."""
    cid = "clean_finish"
    tl, a, closing = j.tl, j.a, j.a.closing
    if a.is_fault_run and closing is not None and a.poisoned:
        return _na_poisoned(cid, a)
    if a.is_fault_run and closing is not None and not closing.restarted:
        gave_up = [e for e in tl.launcher_events() if isinstance(e, (ev.LauncherFailed, ev.RestartsExhausted))]
        launch = tl.launch
        ran_out = _restarts_ran_out(tl, a, closing)
        why = ": " + sentence(cid, str(ran_out[0]["reason"]), ran_out[0]) if ran_out is not None else ""
        if not why and any(isinstance(e, ev.RestartsExhausted) for e in gave_up):
            why = ": " + sentence(cid, "none_left", {})
        hung = undetected_hang(tl)
        if hung is not None and not before_the_stop(tl, [*gave_up, *closing.failures]):  # stopped, not given up
            return _found(cid, FAIL, "hung_undetected", {"why": hung}, [launch.src if launch is not None else None])
        if gave_up or (launch is not None and launch.exit_code not in (None, 0)):
            shown = [*gave_up[:2], launch.src if launch is not None and launch.exit_code not in (None, 0) else None,
                     *(ran_out[1] if ran_out is not None else ())]
            return _found(cid, FAIL, "gave_up", {"why": why}, shown, final=bool(gave_up))
        if ran_out is not None:
            return _found(cid, FAIL, "gave_up", {"why": why}, ran_out[1])
        return _found(cid, NOT_APPLICABLE, "never_restarted", {})
    problems: list[dict[str, object]] = []  # each: its reason, its values, and whether no later line can undo it
    evidence: list[object] = []
    launcher = list(tl.launcher_events())
    success = [e for e in launcher if isinstance(e, ev.LauncherSucceeded) or (isinstance(e, ev.LauncherExit) and e.code == 0)]
    failed = [e for e in launcher if isinstance(e, ev.LauncherFailed) or (isinstance(e, ev.LauncherExit) and e.code != 0)]
    launch = tl.launch
    lost_node_status = (any(a.kind_name(e) == "node" for e in a.episodes) and closing is not None and launch is not None
                        and launch.exit_code in (128 + 9, -9) and bool(success) and not failed)
    if launch is not None and launch.exit_code not in (None, 0) and not lost_node_status:
        problems.append({"reason": "exit_status", "status": launch.exit_code})
        evidence.append(launch.src)
    # With a lost node, srun's status is its SIGKILLed task's (137) while every launcher that
    # survived reported success: that status is the fault itself, not the end of the run.
    if failed:
        problems.append({"reason": "launcher_failed", "final": True})
        evidence.extend(failed[:2])
    if not success and not (launch is not None and launch.exit_code == 0):
        problems.append({"reason": "no_success"})
    elif not failed:
        evidence.extend(success[-1:])
        if launch is not None and launch.exit_code == 0:
            evidence.append(launch.src)
    if launch is not None and launch.stopped_early:
        problems.append({"reason": "stopped_early", "why": launch.stopped_early})
        evidence.append(launch.src)
    if not a.is_fault_run and a.injection_count:
        problems.append({"reason": "marker_without_fault"})
        evidence.extend(a.injection_evidence[:2])
    missing = never_fired(a)
    if missing:
        problems.append({"reason": "never_fired", "count": len(missing), "planned": len(a.schedule),
                         "faults": _planned_list(missing), "fault_at": a.fault_at})
        evidence.extend([*a.never_fired[:2], Src("run.json", 0, "contract.faults: " + ", ".join(
            f"{i}: {f.text()}" for i, f in missing[:4]))])
    if a.injection_count > a.planned_faults:
        plan = sentence(cid, "plan_holds", {"fault_at": a.fault_at, "planned": a.planned_faults}) \
            if a.planned_faults > 1 else ""
        problems.append({"reason": "injected_too_often", "count": a.injection_count, "plan": plan, "final": True})
        evidence.extend(a.injection_evidence[:4])
    allowed = min(a.injection_count, a.planned_faults) if a.is_fault_run else 0
    if len(a.failures) > allowed:
        injected = {e.marker.cycle for e in a.episodes} | {closing.cycle if closing is not None else None}
        extra = [c for c in a.failures if c not in injected]
        only = sentence(cid, "only_one" if allowed <= 1 else "only_some", {"allowed": allowed})
        # every planned fault is in (or there is none): no later injection can account for it
        problems.append({"reason": "too_many_failed_cycles", "failed": len(a.failures), "only": only,
                         "cycles": ", ".join(str(c) for c in a.failures),
                         "final": not a.is_fault_run or len(a.episodes) >= a.planned_faults})
        for c in extra[:3]:
            evidence.append(a.failures[c][0])
    if not a.is_fault_run:
        restarts = sorted({c for c in a.workers_started if c > 0} | {s.cycle for s in tl.starts if s.cycle})
        if restarts:
            problems.append({"reason": "restarted_without_fault", "cycle": restarts[0]})
    stops = [e for e in launcher if isinstance(e, ev.NoProgressStop)]
    if stops:
        problems.append({"reason": "no_progress_stop", "final": True})
        evidence.append(stops[0])
    last = max(tl.starts, key=lambda s: (s.cycle if s.cycle is not None else -1, s.index), default=None)
    done = last.first(ev.TrainingDone) if last is not None else None
    if done is None:
        where = sentence(cid, "in_last_start" if last is not None else "no_app_log",
                         {"source": last.source if last is not None else None})
        problems.append({"reason": "not_done", "where": where})
    else:
        evidence.append(done)
    if problems:
        # what decided it first (the watcher's stop reason): the problems no later line can undo
        ordered = [p for p in problems if p.get("final")] + [p for p in problems if not p.get("final")]
        return _found(cid, FAIL, "not_clean", {"problems": ordered}, evidence,
                      final=any(p.get("final") for p in problems))
    if a.is_fault_run and closing is not None and a.planned_faults > 1:
        shape = "shape_planned"
    elif a.is_fault_run and closing is not None:
        shape = "shape_one"
    elif a.is_fault_run:
        shape = "shape_none_injected"
    else:
        shape = "shape_baseline"
    return _found(cid, PASS, "clean", {"shape": sentence(cid, shape, {"planned": a.planned_faults,
                                                                      "fault_at": a.fault_at})}, evidence)


def never_fired(a: Analysis) -> list[tuple[int, PlannedFault]]:
    """The planned faults (index, fault) of a run in which some fault fired whose own marker is
    missing: the schedule promised them (run.json's contract), no evidence says they happened.
    A run in which none fired is pre_fault_checkpoint's (never_injected); a restart-loop plan
    has one fault."""
    if not a.is_fault_run or not a.episodes or a.poisoned:
        return []
    fired = {e.marker.fault_index for e in a.episodes}
    return [(i, f) for i, f in enumerate(a.schedule, start=1) if i not in fired]


def _planned_list(faults: Sequence[tuple[int, PlannedFault]]) -> str:
    """'fault 2 (kill on rank 0, after-commit) and fault 3 (...)', rendered from the schedule's facts."""
    items = [sentence("clean_finish", "planned_fault", {"index": i, "kind": f.kind, "rank": f.rank, "moment": f.moment})
             for i, f in faults]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + sentence("clean_finish", "and_last",
                                                                             {"last": items[-1]})


def check_optimizer_state(j: Judging) -> CriterionResult:
    """The restored optimizer really continued: Adam's step counter in the first checkpoint
    committed after the restore of K equals that checkpoint's iteration (one optimizer step
    per iteration), and every optimizer slot holds exp_avg and exp_avg_sq. Read from the
    checkpoint's own optimizer record (history), which no log line can stand in for."""
    cid = OPTIMIZER_STATE
    tl, a, ep = j.tl, j.a, j.ep
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    r = ep.replacement if ep is not None else None
    loaded = r.first(ev.CheckpointLoaded) if r is not None else None
    if ep is None or r is None or loaded is None:
        return _found(cid, NOT_APPLICABLE, "nothing_restored", {})
    k = loaded.iteration
    facts: dict[str, object] = {"restored": k}
    commits = sorted((e for s in ep.continuation for e in s.of(ev.SaveCommitted) if e.iteration > k),
                     key=lambda e: e.iteration)
    if not commits:
        return _found(cid, NOT_APPLICABLE, "nothing_committed", facts, [loaded])
    first = commits[0]
    n = first.iteration
    facts["first"] = n
    if tl.checkpoints is None or not tl.checkpoints.exists:
        return _found(cid, NOT_APPLICABLE, "no_checkpoint_dir", facts, [loaded, first])
    ck = tl.checkpoints.get(n)
    if ck is None and (kept := tiers.first_kept(tl, commits)) is not None:  # a non-persistent one Megatron pruned
        first, n, ck = kept.line, kept.iteration, kept.disk
        facts["first"] = n
    if ck is None:
        return _found(cid, UNKNOWN, "first_missing", facts, [loaded, first])
    rec = ck.optimizer_record
    facts["rel"] = ck.rel
    evidence: list[object] = [loaded, first, ck.record_src()]
    if rec is None or rec.steps is None:
        facts["why"] = (rec.note if rec is not None else None) or ck.inspect_note or sentence(cid, "not_read", {})
        return _found(cid, UNKNOWN, "unreadable", facts, evidence)
    before = tl.checkpoints.get(k) if tl.checkpoints is not None else None
    if before is not None and before.optimizer_record is not None and before.optimizer_record.steps:
        evidence.append(before.record_src())
    facts.update(slots=rec.moment_slots, slots_text=_slots(rec.moment_slots))
    if rec.moment_slots == 0:
        return _found(cid, FAIL, "no_moments", facts, evidence)
    if rec.missing_count:
        shown = ", ".join(rec.missing_moments) + (" ..." if rec.missing_count > len(rec.missing_moments) else "")
        return _found(cid, FAIL, "missing_moments", {**facts, "missing": rec.missing_count, "shown": shown}, evidence)
    if not rec.steps:
        where = (sentence(cid, "step_not_in_common", {"common": rec.common_read})
                 if rec.common_read else sentence(cid, "step_nowhere", {}))
        return _found(cid, NOT_APPLICABLE, "no_step_counter", {**facts, "where": where}, evidence)
    skipped = [it for s in tl.starts for it in s.bad_iterations if (it.skipped or 0) > 0]
    if skipped:
        return _found(cid, UNKNOWN, "skipped_step", {**facts, "skipped": skipped[0].iteration}, [*evidence, skipped[0]])
    facts.update(key=rec.key, field=rec.step_field)
    wrong = sorted({s for s in rec.steps if s != n})
    if wrong:
        if wrong == [float(n - k)]:
            why = "reset"
        elif all(s > n for s in wrong):
            why = "ahead"
        else:
            why = "not_continued"
        facts.update(got=", ".join(f"{s:g}" for s in wrong), since=n - k)
        return _found(cid, FAIL, "wrong_step", {**facts, "why": sentence(cid, why, facts)}, evidence)
    return _found(cid, PASS, "continued", {**facts, "first_g": f"{n:g}"}, evidence)


def _slots(n: int) -> str:
    return sentence("optimizer_state", "slots", {"n": n, "s": "" if n == 1 else "s"})


def check_loop_stopped(j: Judging) -> CriterionResult:
    """A fault that returns in every cycle (a poisoned checkpoint) must be stopped by NVRx's
    no-progress rule: exit 93 within --ft-max-no-progress-cycles failed cycles, the cause named.
    Judges the run: the loop follows the first episode's poisoned checkpoint."""
    cid = LOOP_STOPPED
    tl, a = j.tl, j.a
    inj = a.opening.marker if a.opening is not None else None
    if not a.poisoned:
        return _found(cid, NOT_APPLICABLE, "no_loop_planned", {"fault": a.fault, "fault_at": a.fault_at})
    if inj is None:
        return _found(cid, NOT_APPLICABLE, "no_injection", {})
    limit = tl.run.max_no_progress_cycles or NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES
    limit_how = ("--max-no-progress-cycles" if tl.run.max_no_progress_cycles else "NVRx's default")
    c = inj.cycle if inj.cycle is not None else 0
    failed_after = sorted(cy for cy in a.failures if cy > c)
    stops = [e for e in tl.launcher_events() if isinstance(e, ev.NoProgressStop)]
    gave_up = [e for e in tl.launcher_events() if isinstance(e, (ev.RestartsExhausted, ev.LauncherFailed))]
    launch = tl.launch
    code = launch.exit_code if launch is not None else None
    k = inj.iteration
    facts: dict[str, object] = {"poisoned_checkpoint": k, "failed": len(failed_after), "limit": limit,
                                "limit_how": limit_how, "code": code, "no_restart_code": NO_RESTART_EXIT_CODE}
    evidence: list[object] = [inj, *stops[:1], launch.src if launch is not None else None]
    problems: list[dict[str, object]] = []
    after_last = a.closing.continuation if a.closing is not None else ()
    # A fallback: every replacement that loaded anything loaded a checkpoint committed before the damaged one.
    loads = [(s, s.first(ev.CheckpointLoaded)) for s in after_last]
    earlier = [(s, e) for s, e in loads if e is not None and k is not None and e.iteration < k]
    if earlier and all(e is None or (k is not None and e.iteration < k) for _, e in loads):
        s, e = earlier[0]
        return _found(cid, PASS, "fell_back", {**facts, "loaded": e.iteration, "cycle": s.cycle,
                                               "damaged": _damaged(a)}, [inj, e])
    trained = [s for s in after_last if s.first(ev.CheckpointLoaded) is not None or s.first_iteration is not None]
    if trained:
        problems.append({"reason": "went_unnoticed", "cycle": trained[0].cycle, "poisoned_checkpoint": k,
                         "damaged": _damaged(a)})
        evidence.append((trained[0].first(ev.CheckpointLoaded) or trained[0].first_iteration))
    if trained and not stops and code == 0:
        pass  # no loop to stop: the damaged checkpoint was loaded and training finished (said above)
    elif not stops and code != NO_RESTART_EXIT_CODE:
        if launch is not None and launch.stopped_early:
            problems.append({"reason": "harness_stopped", "why": launch.stopped_early})
        elif gave_up or code not in (None, 0):
            problems.append({**facts, "reason": "looped_until_exhausted",
                             "exited": code if code is not None else sentence(cid, "with_a_failure", {})})
            evidence.extend(gave_up[:1])
        else:
            problems.append({"reason": "no_stop_unknown_exit"})
    elif code is not None and code != NO_RESTART_EXIT_CODE:
        problems.append({**facts, "reason": "stop_wrong_exit"})
    if len(failed_after) > limit:
        problems.append({**facts, "reason": "over_the_limit"})
    # The repeating error: every failed replacement began loading the poisoned checkpoint and never finished.
    failing = [s for s in after_last if s.cycle in failed_after]
    repeated = [s for s in failing if s.first(ev.LoadStarted) is not None and s.first(ev.CheckpointLoaded) is None]
    cause: list[dict[str, object]] = []
    if inj.poisoned:
        shown = inj.poisoned
        try:  # relative to the run directory when inside it, as all evidence is
            shown = str(PurePath(inj.poisoned).relative_to(tl.run_dir))
        except ValueError:
            pass
        cause.append({"reason": "corrupt_file", "file": shown, "damaged": _damaged(a)})
    if failing and len(repeated) == len(failing):
        cause.append({"reason": "repeated_load", "failing": len(failing),
                      "loading": repeated[0].first(ev.LoadStarted).iteration})
        evidence.extend(s.first(ev.LoadStarted) for s in repeated[:3])
    if not cause:
        problems.append({"reason": "no_cause"})
    if problems:
        return _found(cid, FAIL, "not_refused" if trained else "not_stopped", {**facts, "problems": problems},
                      evidence)
    facts["how"] = sentence(cid, "how_exit" if code is not None else "how_unknown", facts)
    return _found(cid, PASS, "stopped", {**facts, "problems": cause}, evidence)


def check_disk_full_handled(j: Judging) -> CriterionResult:
    """disk-full: the save in flight (the marker's `iteration` N) met a full filesystem. It must
    never count: not committed in the fault's cycle, the tracker never handed to a replacement
    naming it, never loaded before a later save of N committed it whole. Passes saying which
    correct ending happened: a replacement resumed from an earlier checkpoint ("recovered"), or
    no replacement loaded anything and the stack stopped naming ENOSPC ("stopped")."""
    cid = DISK_FULL_HANDLED
    a = j.a
    ep = a.opening
    inj = ep.marker if ep is not None else None
    if ep is None or inj is None or inj.iteration is None:
        return _found(cid, NOT_APPLICABLE, "no_injection", {})
    n, k = inj.iteration, inj.committed_iteration
    facts: dict[str, object] = {"in_flight": n, "committed": k if k is not None else "?"}
    full = [e for s in j.tl.starts for e in s.of(ev.NoSpaceLeft)]
    evidence: list[object] = [inj, *full[:2]]
    problems: list[dict[str, object]] = []
    fault_saves = ep.fault_start.of(ev.SaveCommitted) if ep.fault_start is not None else []
    filled_at = j.tl.utc(inj)
    committed = [e for e in fault_saves if e.iteration == n]
    # committed before the fill (by the clocks), or without any write meeting ENOSPC: no save met the full
    # disk in flight (pre_fault_checkpoint says the in-save fault came after the save)
    early = [e for e in committed if (t := j.tl.utc(e)) is not None and filled_at is not None and t <= filled_at]
    if early or (committed and not full):
        return _found(cid, NOT_APPLICABLE, "fill_too_late", facts, [inj, (early or committed)[0]])
    if committed:
        problems.append({"reason": "committed_partial", "in_flight": n, "cycle": ep.cycle})
        evidence.append(committed[0])
    whole = False  # a later cycle committed N again, whole: loading it from then on is right
    recovered: tuple[ev.AppStart, ev.CheckpointLoaded] | None = None
    for start in ep.continuation:
        named = start.first(ev.LoadStarted)
        loaded = start.first(ev.CheckpointLoaded)
        if not whole and loaded is not None and loaded.iteration >= n:
            problems.append({"reason": "loaded_partial", "cycle": start.cycle, "loaded": loaded.iteration,
                             "in_flight": n})
            evidence.append(loaded)
        elif not whole and named is not None and named.iteration >= n:
            problems.append({"reason": "tracker_advanced", "cycle": start.cycle, "named": named.iteration,
                             "in_flight": n})
            evidence.append(named)
        elif recovered is None and loaded is not None:
            recovered = (start, loaded)
        whole = whole or any(e.iteration == n for e in start.of(ev.SaveCommitted))
    if problems:
        return _found(cid, FAIL, "partial_used", {**facts, "problems": problems}, evidence)
    if recovered is not None:
        start, loaded = recovered
        return _found(cid, PASS, "recovered", {**facts, "cycle": start.cycle, "loaded": loaded.iteration,
                                              "error": "ENOSPC was logged" if full else "no ENOSPC line was logged"},
                      [*evidence, loaded])
    if full and not any(s.first(ev.CheckpointLoaded) for s in ep.continuation):
        # nothing partial was used; whether the stack then stopped or hung (the harness stopped
        # it, replacement_cycle and clean_finish fail) is said, not judged, here
        hung = undetected_hang(j.tl) is not None
        return _found(cid, PASS, "hung_after_error" if hung else "stopped", {**facts, "line": full[0].src}, evidence)
    return _found(cid, FAIL, "silent", facts, evidence)


# ---------------------------------------------------------------- loss continuity (with a baseline)

LOSS_CONTINUITY = "loss_continuity"


@dataclass(frozen=True)
class LossComparison:
    """The lm loss of every iteration of this run and of an uninterrupted baseline run of the
    same configuration (harness.read.history.RunRead.losses of each)."""

    run: Mapping[int, ev.LossLine]
    baseline: Mapping[int, ev.LossLine]
    baseline_dir: str  # as given; its last part prefixes the baseline's evidence lines


def check_loss_continuity(j: Judging) -> CriterionResult:
    """Loss continuity, the check after the five when a baseline is given: the losses after
    the episode's restored checkpoint equal the baseline's (see compare_losses)."""
    if j.baseline_problem is not None and j.a.is_fault_run:
        return _no_usable_baseline(LOSS_CONTINUITY, j.baseline_problem)
    if j.baseline_skipped is not None and j.a.is_fault_run:
        return _found(LOSS_CONTINUITY, NOT_APPLICABLE, "baseline_skipped", {"why": j.baseline_skipped})
    loaded = j.ep.loaded if j.ep is not None else None
    return compare_losses(j.losses, j.a.fault, loaded.iteration if loaded is not None else None, j.tl.run.train_iters)


def _no_usable_baseline(cid: str, problem: str) -> CriterionResult:
    return _found(cid, UNKNOWN, "no_usable_baseline", {"problem": problem})


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

    def found(status: Status, reason: str, values: Mapping[str, object], evidence: tuple[str, ...] = ()):
        return CriterionResult(cid, status, sentence(cid, reason, values), evidence, values=dict(values))

    if fault == "none":
        return found(NOT_APPLICABLE, "no_fault", {})
    if losses is None:
        return found(NOT_APPLICABLE, "no_baseline", {})
    if restored is None:
        return found(NOT_APPLICABLE, "nothing_restored", {})
    ours, theirs, baseline_dir = losses.run, losses.baseline, losses.baseline_dir
    base = PurePath(baseline_dir).name
    last = train_iters or max(ours, default=restored)
    wanted = range(restored + 1, last + 1)
    facts: dict[str, object] = {"restored": restored, "from": restored + 1, "last": last}
    if train_iters is not None and restored >= train_iters:
        return found(NOT_APPLICABLE, "final_restored", facts)
    missing = [i for i in wanted if i not in ours or i not in theirs]
    if missing or not wanted:
        side = sentence(cid, "side_ours", {}) if any(i not in ours for i in missing) else \
            sentence(cid, "side_baseline", {"baseline": baseline_dir})
        return found(FAIL if missing else UNKNOWN, "not_logged",
                     {**facts, "side": side, "missing": missing[0] if missing else "?"})
    averaged = None
    for i in wanted:
        if ours[i].loss != theirs[i].loss and i == restored + 2 and _mean_of(ours[i].loss, ours[i - 1].loss, theirs[i].loss):
            averaged = i  # Megatron's second line of a start: the mean of the start's first two iterations
            continue
        if ours[i].loss != theirs[i].loss:
            mean = ""
            if i == restored + 2 and _finite(ours[i - 1].loss, theirs[i].loss):
                mean = sentence(cid, "mean_hint", {"mean": f"{(float(ours[i - 1].loss) + float(theirs[i].loss)) / 2:.6E}",
                                                   "before": i - 1, "iteration": i})
            return found(FAIL, "differs", {**facts, "iteration": i, "ours": ours[i].loss, "theirs": theirs[i].loss,
                                           "mean": mean}, (str(ours[i].src), f"{base}/{theirs[i].src}"))
    first, end = wanted[0], wanted[-1]
    note = sentence(cid, "averaged_note", {"averaged": averaged, "before": averaged - 1}) if averaged is not None else ""
    return found(PASS, "equal", {**facts, "first": first, "end": end, "count": len(wanted), "note": note},
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
def determinism(tl: Timeline) -> tuple[bool, str, tuple[Src, ...]]:
    """(is this run's training bitwise deterministic, why, the evidence), as its workload
    (harness.workloads) says: the reference workload is; Megatron on CPU is when its arguments
    tables say dropout 0; Megatron on GPUs is not (its reductions are not ordered); a workload
    this suite does not know is not."""
    workload = workloads.find(tl.run.workload)
    if workload is None:
        shown = tl.run.workload or sentence(STATE_EQUIVALENCE, "workload_unrecorded", {})
        return False, sentence(STATE_EQUIVALENCE, "not_deterministic", {"workload": shown}), ()
    said = workload.determinism(tl)
    facts = {k: sentence(STATE_EQUIVALENCE, *v) if isinstance(v, tuple) else v for k, v in said.facts.items()}
    return said.exact, sentence(STATE_EQUIVALENCE, said.reason, facts), tuple(said.evidence)


def check_state_equivalence(j: Judging) -> CriterionResult:
    """The end state itself: every model and optimizer tensor of the run's final committed
    checkpoint against the baseline's checkpoint of the same iteration (harness.read.end_state),
    bitwise where the training is deterministic, else within the tolerance of each tensor
    class. A restore that lost Adam's step, the data position or the RNG state ends elsewhere."""
    cid = STATE_EQUIVALENCE
    tl, a, state = j.tl, j.a, j.state
    if j.baseline_problem is not None and a.is_fault_run:
        return _no_usable_baseline(cid, j.baseline_problem)
    if j.baseline_skipped is not None and a.is_fault_run:
        return _found(cid, NOT_APPLICABLE, "baseline_skipped", {"why": j.baseline_skipped})
    if not a.is_fault_run:
        return _found(cid, NOT_APPLICABLE, "no_fault", {})
    if state is None:
        return _found(cid, NOT_APPLICABLE, "no_baseline", {})
    if a.poisoned:
        return _found(cid, NOT_APPLICABLE, "poisoned", {"fault": a.fault})
    loaded = a.closing.loaded if a.closing is not None else None  # the end state follows the last restore
    if loaded is None:
        return _found(cid, NOT_APPLICABLE, "nothing_restored", {})
    if state.iteration is None or state.checkpoint is None:
        return _found(cid, NOT_APPLICABLE, "nothing_committed", {}, [loaded])
    mine = Src(f"{state.checkpoint}/.metadata", 0, f"final checkpoint, iteration {state.iteration}")
    theirs = (Src(f"{state.baseline_checkpoint}/.metadata", 0, "the baseline's checkpoint of the same iteration")
              if state.baseline_checkpoint else None)
    facts: dict[str, object] = {"checkpoint": state.checkpoint, "baseline_checkpoint": state.baseline_checkpoint,
                                "iteration": state.iteration, "compared": state.compared_count}
    if state.note is not None:
        return _found(cid, UNKNOWN, "not_compared", {**facts, "note": state.note}, [mine, theirs])
    exact, why, det_srcs = determinism(tl)
    facts.update(exact=exact, why=why)
    tol = {c: (rtol, atol) for c, rtol, atol in state.tolerances}
    evidence: list[object] = [mine, theirs, *det_srcs]
    if state.missing_count:
        return _found(cid, FAIL, "other_layout", {**facts, "missing": state.missing_count, "example": state.missing[0]},
                      [*evidence, *(Src(f"{state.checkpoint}/.metadata", 0, m) for m in state.missing[:4])])
    if state.compared_count == 0:
        return _found(cid, UNKNOWN, "nothing_comparable", facts, evidence)
    facts["classes"] = ", ".join(f"{n} {c}" for c, n in state.compared)
    facts["skipped"] = ""
    if state.not_compared_count:
        facts["skipped"] = sentence(cid, "skipped", {"count": state.not_compared_count, "shown": ", ".join(
            state.not_compared[:3]) + (" ..." if state.not_compared_count > 3 else "")})
    offending = [d for d in state.differing if exact or not d.within_tolerance]
    failing = state.differing_count if exact else state.outside_tolerance_count
    if failing:
        first = offending[0] if offending else None
        if first is not None:
            rtol, atol = tol.get(first.tensor_class, (0.0, 0.0))
            bound = sentence(cid, "bitwise" if exact else "tolerance", {"cls": first.tensor_class, "rtol": f"{rtol:g}",
                                                                         "atol": f"{atol:g}"})
            evidence.append(Src(f"{state.checkpoint}/{first.key}", 0,
                                f"{first.numel} {first.dtype} values, max |run - baseline| = {first.max_abs_diff:.6g} "
                                f"({first.tensor_class})"))
            return _found(cid, FAIL, "differs", {
                **facts, "failing": failing, "bound": bound, "key": first.key, "cls": first.tensor_class,
                "diff": f"{first.max_abs_diff:.6g}", "worst": "; ".join(f"{c} {v:.3g}" for c, v in state.max_abs_diff)},
                evidence)
    if exact:
        return _found(cid, PASS, "bitwise_equal", facts, evidence)
    facts["tolerances"] = "; ".join(f"{c} rtol={tol[c][0]:g} atol={tol[c][1]:g}" for c, _ in state.compared if c in tol)
    facts["close"] = sentence(cid, "not_bitwise", {"count": state.differing_count, "largest": "; ".join(
        f"{c} {v:.3g}" for c, v in state.max_abs_diff)}) if state.differing_count else ""
    return _found(cid, PASS, "within_tolerance", facts, evidence)


# ---------------------------------------------------------------- the launcher the workers imported


def check_launcher_identity(j: Judging) -> CriterionResult:
    """The workers ran under the launcher the run promised: every node's first worker states
    the NVRx its own sys.path finds (the nemesis's `launcher identity` line, harness.nemesis.identity),
    and each must be run.json's contract.launcher: the same version and, where both sides know
    it, the same digest of its files. Another NVRx (a --nvrx-path that pointed at nothing, a
    node's own PYTHONPATH, a container's install) fails, for good; a run whose workers said
    nothing is unknown; a run.json without a planned launcher (before contracts, or a user's
    own script) leaves nothing to compare."""
    cid = LAUNCHER_IDENTITY
    tl = j.tl
    contract = tl.run.contract
    planned = contract.launcher if contract is not None else None
    if planned is None:
        return _found(cid, NOT_APPLICABLE, "no_plan", {"has_run_json": tl.run.has_run_json})
    facts: dict[str, object] = {
        "planned": planned.version,
        "where": sentence(cid, "where", {"path": planned.path}) if planned.path else "",
        "sha": sentence(cid, "sha", {"sha": planned.sha256[:12], "files": planned.files}) if planned.sha256 else ""}
    plan_src = Src("run.json", 0, f"contract.launcher: NVRx {planned.version}"
                                  + (f" at {planned.path}" if planned.path else "")
                                  + (f", sha256 {planned.sha256[:12]}" if planned.sha256 else ""))
    said = [(s.cycle, e) for s in tl.starts for e in s.of(ev.LauncherImported)]
    if not said:
        return _found(cid, UNKNOWN, "none_said", facts, [plan_src])
    other, unknown, version_only, elsewhere = [], [], [], []
    for cycle, e in said:
        if e.found is None:
            unknown.append((cycle, e))
        elif e.found is False or e.version != planned.version or (
                planned.sha256 and e.sha256 and e.sha256 != planned.sha256):
            other.append((cycle, e))
        elif not (planned.sha256 and e.sha256):
            version_only.append((cycle, e))
        elif planned.path and e.path and e.path != planned.path:
            elsewhere.append((cycle, e))
    facts.update(count=len(said), ranks=", ".join(sorted({str(e.worker_rank) for _c, e in said})),
                 cycles=", ".join(str(c) for c in sorted({c for c, _e in said if c is not None})) or "?")
    if other:
        cycle, e = other[0]
        got = (sentence(cid, "got_missing", {"why": e.why or "?"}) if e.found is False else
               sentence(cid, "got_found", {"version": e.version or "?", "path": e.path or "?",
                                           "sha": (e.sha256 or "?")[:12]}))
        return _found(cid, FAIL, "other", {**facts, "others": len(other), "rank": e.worker_rank,
                                           "cycle": cycle if cycle is not None else "?", "got": got},
                      [plan_src, *(e for _c, e in other[:4])], final=True)
    if len(unknown) == len(said):
        return _found(cid, UNKNOWN, "unknown_all", {**facts, "why": unknown[0][1].why or "?"},
                      [plan_src, unknown[0][1]])
    caveats = []
    if unknown:
        caveats.append(sentence(cid, "caveat_unknown", {"n": len(unknown)}))
    if version_only:
        caveats.append(sentence(cid, "caveat_version_only", {"n": len(version_only)}))
    if elsewhere:
        caveats.append(sentence(cid, "caveat_elsewhere", {"n": len(elsewhere), "path": elsewhere[0][1].path}))
    return _found(cid, PASS, "same", {**facts, "caveats": "".join(f"; {c}" for c in caveats)},
                  [plan_src, *(e for _c, e in said[:3])])


# ---------------------------------------------------------------- the registry and the merge


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


def _always(_j: Judging) -> bool:
    return True


def _never(_a: Analysis, _ep: Episode) -> str | None:
    return None


@dataclass(frozen=True)
class Check:
    """One registry entry. `scope`: "episode" (judged once per episode, the results merged into
    one) or "run". `applies`: whether the run gets this check at all. `superseded`: why an
    episode does not judge it (a later episode does); its result is shown in the episode's
    section and left out of the merge. `primary`: whose sentence stands for several episodes
    of the same status ("first" or "last"); `all_passed`: the sentence when several passed."""

    id: str
    judge: Callable[[Judging], CriterionResult]
    scope: str = "episode"
    applies: Callable[[Judging], bool] = _always
    superseded: Callable[[Analysis, Episode], str | None] = _never
    primary: str = "last"
    all_passed: Callable[[Judging, Sequence[tuple[Episode, CriterionResult]]], CriterionResult] | None = None


def _load_cut(_a: Analysis, ep: Episode) -> str | None:
    if ep.cut_before_load:
        return sentence("*", "superseded_load_cut", {"next": ep.number + 1, "next_cycle": ep.next_cycle})
    return None


def _not_last(_a: Analysis, ep: Episode) -> str | None:
    if not ep.last:
        return sentence("*", "superseded_not_last", {"next": ep.number + 1, "next_cycle": ep.next_cycle})
    return None


def _nothing_new_committed(a: Analysis, ep: Episode) -> str | None:
    """The fault hit before anything beyond the previous episode's checkpoint was committed
    (in-restore's second fault hits the restore of that very checkpoint): what was committed
    before it is the previous episode's, judged there."""
    previous = a.episodes[ep.number - 2] if ep.number > 1 else None
    if previous is None:
        return None
    named = committed_before(ep.marker)
    if previous.cut_before_load or (named is not None and previous.expected_k is not None
                                    and named <= previous.expected_k):
        return sentence("*", "superseded_nothing_new", {"previous": previous.number, "k": previous.expected_k})
    return None


def _poison_loop(j: Judging) -> bool:
    return j.a.is_fault_run and j.a.poisoned


def _fills_filesystem(j: Judging) -> bool:
    kind = FAULT_KINDS.get(j.a.fault)
    return j.a.is_fault_run and kind is not None and kind.fills_filesystem


def _with_baseline(j: Judging) -> bool:
    return ((j.baseline_problem is not None or j.baseline_skipped is not None) and j.a.is_fault_run) \
        or j.losses is not None


# The order is the verdict's: the five, optimizer_state, then the checks only some runs get.
CHECKS: tuple[Check, ...] = (
    Check("pre_fault_checkpoint", check_pre_fault_checkpoint, superseded=_nothing_new_committed, primary="first"),
    Check("replacement_cycle", check_replacement_cycle, all_passed=_replacement_cycles_all_passed),
    Check("optimizer_reload", check_optimizer_reload, superseded=_load_cut),
    Check("later_checkpoint", check_later_checkpoint, superseded=_not_last),
    Check("clean_finish", check_clean_finish, scope="run"),
    Check(OPTIMIZER_STATE, check_optimizer_state, superseded=_load_cut),
    Check(LOOP_STOPPED, check_loop_stopped, scope="run", applies=_poison_loop),
    Check(DISK_FULL_HANDLED, check_disk_full_handled, scope="run", applies=_fills_filesystem),
    Check(LOSS_CONTINUITY, check_loss_continuity, applies=_with_baseline, superseded=_not_last),
    Check(STATE_EQUIVALENCE, check_state_equivalence, scope="run", applies=_with_baseline),
    Check(LAUNCHER_IDENTITY, check_launcher_identity, scope="run"),
)


@dataclass(frozen=True)
class EpisodeJudgement:
    """One episode's own results (the episode-scoped checks), superseded ones included."""

    episode: Episode
    results: tuple[CriterionResult, ...]
    superseded: tuple[str, ...] = ()  # the ids whose result stayed out of the run's merge


@dataclass(frozen=True)
class Judgement:
    results: tuple[CriterionResult, ...]  # the verdict's criteria, merged, in the registry's order
    episodes: tuple[EpisodeJudgement, ...] = ()


def check_safe(cid: str, checker: Callable[[Judging], CriterionResult], j: Judging) -> CriterionResult:
    """Jepsen's check-safe: a checker that crashes yields `unknown` with the error, not a crash."""
    try:
        return checker(j)
    except Exception as exc:  # noqa: BLE001 - the verdict must survive any one checker
        return _found(cid, UNKNOWN, "crashed", {"error": f"{type(exc).__name__}: {exc}"})


def merge_results(check: Check, j: Judging, judged: Sequence[tuple[Episode, CriterionResult]]) -> CriterionResult:
    """The run's result of an episode check from its episodes' (superseded ones left out): the
    worst status (harness.vocab.verdict.merge); one episode's sentence when one decides it (the
    first failing or unknown one; for a tie of passes or not-applicables the check's primary
    episode), led by the fault it is about when the run has several, or the check's own
    sentence when several passed."""
    if len(judged) == 1 and len(j.a.episodes) < 2:
        return judged[0][1]
    status = merge(r.status for _, r in judged)
    if status == PASS and check.all_passed is not None and len(judged) > 1:
        return check.all_passed(j, judged)
    same = [(e, r) for e, r in judged if r.status == status]
    ep, result = same[-1] if status in (PASS, NOT_APPLICABLE) and check.primary == "last" else same[0]
    which = sentence("*", "of_episode", {"number": ep.number, "of": len(j.a.episodes), "kind": j.a.kind_name(ep),
                                         "rank": ep.marker.rank, "fault_at": ep.marker.fault_at})
    return dataclasses.replace(result, detail=which + result.detail)


def judge(tl: Timeline, a: Analysis, losses: LossComparison | None = None,
          state: ev.StateComparison | None = None, baseline_problem: str | None = None,
          baseline_skipped: str | None = None) -> Judgement:
    """Every check of the registry that applies, in its order: an episode check once per
    episode (or once with no episode, for a run without any), merged; a run check once.
    `baseline_problem`: the baseline meant for loss_continuity and state_equivalence is unusable
    (both unknown); `baseline_skipped`: they were skipped by request (both not applicable, saying so)."""
    base = Judging(tl, a, None, losses, state, baseline_problem, baseline_skipped)
    merged: list[CriterionResult] = []
    per: dict[int, list[CriterionResult]] = {e.number: [] for e in a.episodes}
    skipped: dict[int, list[str]] = {e.number: [] for e in a.episodes}
    for check in CHECKS:
        if not check.applies(base):
            continue
        if check.scope == "run" or not a.episodes:
            merged.append(check_safe(check.id, check.judge, base))
            continue
        judged: list[tuple[Episode, CriterionResult]] = []
        for ep in a.episodes:
            why = check.superseded(a, ep)
            if why is not None:
                per[ep.number].append(_found(check.id, NOT_APPLICABLE, "superseded", {"why": why}))
                skipped[ep.number].append(check.id)
                continue
            result = check_safe(check.id, check.judge, dataclasses.replace(base, ep=ep))
            per[ep.number].append(result)
            judged.append((ep, result))
        merged.append(merge_results(check, base, judged))
    return Judgement(tuple(merged), tuple(EpisodeJudgement(e, tuple(per[e.number]), tuple(skipped[e.number]))
                                          for e in a.episodes))


def evaluate(tl: Timeline, a: Analysis, losses: LossComparison | None = None,
             state: ev.StateComparison | None = None, baseline_problem: str | None = None) -> tuple[CriterionResult, ...]:
    """The five fixed criteria and optimizer_state, then loop_stopped for a plan that makes a
    restart loop, then loss_continuity and state_equivalence when a baseline run is given (its
    losses, and the comparison of the two final checkpoints), or both unknown when the baseline
    meant for them is unusable (`baseline_problem`: the automatic twin did not qualify)."""
    return judge(tl, a, losses, state, baseline_problem).results


def check(cid: str, tl: Timeline, a: Analysis, losses: LossComparison | None = None,
          state: ev.StateComparison | None = None) -> CriterionResult:
    """One check's result for the run, judged over its episodes and merged (tests, tools)."""
    return next(r for r in judge(tl, a, losses, state).results if r.id == cid)


BASELINE_NOTE = "fault none: an uninterrupted baseline run; no recovery was exercised"


def headline(is_qualified: bool, fault: str) -> str:
    """The verdict in words. A run without a fault qualifies only as a baseline: it proves
    the job runs and finishes, not that it recovers."""
    if not is_qualified:
        return "NOT QUALIFIED"
    return f"BASELINE QUALIFIED ({BASELINE_NOTE})" if fault == "none" else "QUALIFIED"
