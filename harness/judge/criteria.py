"""The recovery criteria (the walkthrough's five, then the further checks): pure functions of
the run's evidence (Jepsen-style checkers), registered here in the verdict's order.

Each checker (harness.judge.five_criteria, harness.judge.further_checks) takes a `Judging`: the
Timeline and the `Analysis` derived from it once (harness.judge.analysis: which fault, which cycle
failed, which start replaced it, which checkpoint K it had to load) and the episode judged, and
returns a `CriterionResult`: pass / fail / not_applicable / unknown, the reason key and facts of
its one sentence a person can act on (rendered where the result is shown, by
harness.judge.sentences.render), and the evidence lines (`file:line: text`). `check_safe` turns a
checker's exception into `unknown`; the run is qualified only when every criterion is pass or
not_applicable.

A failure is `final` when no later line of the run can undo it (the nemesis said the fault
will never fire; the replacement ran with --no-load-optim, started from random or loaded an
older checkpoint; a second failure; the launcher gave up or stopped the loop). The watcher
stops a live job on a final failure: the criteria decide, the watcher only asks.

A criterion whose premise another criterion owns is `not_applicable` when that premise is
missing (no injection: nothing to replace; no replacement: nothing reloaded), so a broken
run fails the criterion that names its cause instead of every criterion downstream.
Nothing here reads files or renders.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

from harness.vocab import events as ev
from harness.judge.analysis import (CHECK_IDS, CRITERIA_IDS, DISK_FULL_HANDLED, FAIL, LAUNCHER_IDENTITY, LOOP_STOPPED,
                                    LOSS_CONTINUITY, MAX_EVIDENCE, NO_RESTART_EXIT_CODE, NOT_APPLICABLE,
                                    NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES, OPTIMIZER_STATE, PASS, STATE_EQUIVALENCE,
                                    STATUSES, UNDETECTED_HANG, UNKNOWN, Analysis, Judging, LossComparison, analyze,
                                    answer, before_the_stop, resolve_fault, undetected_hang)
from harness.judge.episodes import Episode, committed_before
from harness.judge.five_criteria import (check_clean_finish, check_later_checkpoint, check_optimizer_reload,
                                         check_pre_fault_checkpoint, check_replacement_cycle, never_fired,
                                         replacement_cycles_all_passed, world_change)
from harness.judge.further_checks import (check_disk_full_handled, check_launcher_identity, check_loop_stopped,
                                          check_loss_continuity, check_optimizer_state, check_state_equivalence,
                                          compare_losses, determinism)
from harness.judge.sentences import render
from harness.vocab.events import Timeline
from harness.vocab.faults import FAULTS
from harness.vocab.verdict import CriterionResult, Phrase, merge, qualified

__all__ = ["BASELINE_NOTE", "CHECKS", "CHECK_IDS", "CRITERIA_IDS", "DISK_FULL_HANDLED", "FAIL", "FAULTS",
           "LAUNCHER_IDENTITY", "LOOP_STOPPED", "LOSS_CONTINUITY", "MAX_EVIDENCE", "NOT_APPLICABLE",
           "NO_RESTART_EXIT_CODE", "NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES", "OPTIMIZER_STATE", "PASS",
           "STATE_EQUIVALENCE", "STATUSES", "UNDETECTED_HANG", "UNKNOWN", "Analysis", "Check", "CriterionResult",
           "EpisodeJudgement", "Judgement", "Judging", "LossComparison", "analyze", "before_the_stop", "check",
           "check_safe", "compare_losses", "determinism", "evaluate", "headline", "judge", "merge_results",
           "never_fired", "qualified", "resolve_fault", "undetected_hang", "world_change"]


def _always(_j: Judging) -> bool:
    return True


def _never(_a: Analysis, _ep: Episode) -> Phrase | None:
    return None


@dataclass(frozen=True)
class Check:
    """One registry entry. `scope`: "episode" (judged once per episode, the results merged into
    one) or "run". `applies`: whether the check concerns an episode, asked of each (its
    Judging's `ep`; None for a run without any episode): each episode's own kind decides, so a
    campaign of several kinds is judged episode by episode. An episode check skips the episodes
    it does not concern; a run check is judged once, given the first episode it concerns
    (loop_stopped: the one whose fault poisoned its checkpoint), and the run gets neither when
    no episode concerns it. `superseded`: why an
    episode does not judge it (a later episode does); its result is shown in the episode's
    section and left out of the merge. `primary`: whose sentence stands for several episodes
    of the same status ("first" or "last"); `all_passed`: the sentence when several passed."""

    id: str
    judge: Callable[[Judging], CriterionResult]
    scope: str = "episode"
    applies: Callable[[Judging], bool] = _always
    superseded: Callable[[Analysis, Episode], Phrase | None] = _never
    primary: str = "last"
    all_passed: Callable[[Judging, Sequence[tuple[Episode, CriterionResult]]], CriterionResult] | None = None


def _load_cut(_a: Analysis, ep: Episode) -> Phrase | None:
    if ep.cut_before_load:
        return Phrase("*", "superseded_load_cut", {"next": ep.number + 1, "next_cycle": ep.next_cycle})
    return None


def _not_last(_a: Analysis, ep: Episode) -> Phrase | None:
    if not ep.last:
        return Phrase("*", "superseded_not_last", {"next": ep.number + 1, "next_cycle": ep.next_cycle})
    return None


def _nothing_new_committed(a: Analysis, ep: Episode) -> Phrase | None:
    """The fault hit before anything beyond the previous episode's checkpoint was committed
    (in-restore's second fault hits the restore of that very checkpoint): what was committed
    before it is the previous episode's, judged there."""
    previous = a.episodes[ep.number - 2] if ep.number > 1 else None
    if previous is None:
        return None
    named = committed_before(ep.marker)
    if previous.cut_before_load or (named is not None and previous.expected_k is not None
                                    and named <= previous.expected_k):
        return Phrase("*", "superseded_nothing_new", {"previous": previous.number, "k": previous.expected_k})
    return None


def _poison_loop(j: Judging) -> bool:
    """The episode's fault poisons its checkpoint: a restart loop the launcher must stop."""
    return j.a.is_fault_run and j.a.poisons(j.ep)


def _fills_filesystem(j: Judging) -> bool:
    """The episode's fault fills the checkpoint filesystem."""
    kind = j.a.kind(j.ep)
    return j.a.is_fault_run and kind is not None and kind.fills_filesystem


def _with_baseline(j: Judging) -> bool:
    return ((j.baseline_problem is not None or j.baseline_skipped is not None) and j.a.is_fault_run) \
        or j.losses is not None


# The order is the verdict's: the five, optimizer_state, then the checks only some runs get.
CHECKS: tuple[Check, ...] = (
    Check("pre_fault_checkpoint", check_pre_fault_checkpoint, superseded=_nothing_new_committed, primary="first"),
    Check("replacement_cycle", check_replacement_cycle, all_passed=replacement_cycles_all_passed),
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
        return answer(cid, UNKNOWN, "crashed", {"error": f"{type(exc).__name__}: {exc}"})


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
    which = Phrase("*", "of_episode", {"number": ep.number, "of": len(j.a.episodes), "kind": j.a.kind_name(ep),
                                       "rank": ep.marker.rank, "fault_at": ep.marker.fault_at})
    return dataclasses.replace(result, lead=which)


def judge(tl: Timeline, a: Analysis, losses: LossComparison | None = None,
          state: ev.StateComparison | None = None, baseline_problem: str | None = None,
          baseline_skipped: str | None = None) -> Judgement:
    """Every check of the registry, in its order, for what it concerns (Check.applies, asked
    of each episode): an episode check once per episode it concerns (or once with no episode,
    for a run without any), merged; a run check once, given the first episode it concerns.
    `baseline_problem`: the baseline meant for loss_continuity and state_equivalence is unusable
    (both unknown); `baseline_skipped`: they were skipped by request (both not applicable, saying so)."""
    base = Judging(tl, a, None, losses, state, baseline_problem, baseline_skipped)
    merged: list[CriterionResult] = []
    per: dict[int, list[CriterionResult]] = {e.number: [] for e in a.episodes}
    skipped: dict[int, list[str]] = {e.number: [] for e in a.episodes}
    for check in CHECKS:
        concerned = [ep for ep in a.subjects if check.applies(dataclasses.replace(base, ep=ep))]
        if not concerned:
            continue
        if check.scope == "run" or not a.episodes:
            merged.append(check_safe(check.id, check.judge, dataclasses.replace(base, ep=concerned[0])))
            continue
        judged: list[tuple[Episode, CriterionResult]] = []
        for ep in concerned:
            why = check.superseded(a, ep)
            if why is not None:
                per[ep.number].append(answer(check.id, NOT_APPLICABLE, "superseded", {"why": why}))
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
    meant for them is unusable (`baseline_problem`: the automatic twin did not qualify). Rendered
    (harness.judge.sentences.render), as a reader that shows them wants them (tests, tools)."""
    return tuple(render(r) for r in judge(tl, a, losses, state, baseline_problem).results)


def check(cid: str, tl: Timeline, a: Analysis, losses: LossComparison | None = None,
          state: ev.StateComparison | None = None) -> CriterionResult:
    """One check's result for the run, judged over its episodes, merged and rendered (tests, tools)."""
    return render(next(r for r in judge(tl, a, losses, state).results if r.id == cid))


BASELINE_NOTE = "fault none: an uninterrupted baseline run; no recovery was exercised"


def headline(is_qualified: bool, fault: str) -> str:
    """The verdict in words. A run without a fault qualifies only as a baseline: it proves
    the job runs and finishes, not that it recovers."""
    if not is_qualified:
        return "NOT QUALIFIED"
    return f"BASELINE QUALIFIED ({BASELINE_NOTE})" if fault == "none" else "QUALIFIED"
