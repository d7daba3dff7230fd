"""The further checks, appended after the five (docs/contracts.md): optimizer_state,
loop_stopped, disk_full_handled, loss_continuity, state_equivalence and launcher_identity, one
checker each (registered in harness.judge.criteria).

Pure functions of a `Judging` (harness.judge.analysis) that return their facts: a reason key and
the values they compared, phrases (harness.vocab.verdict.Phrase) where a sentence nests another;
the sentences are harness.judge.sentences', rendered where a result is shown. Nothing here reads
files or renders.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import Mapping

from harness import workloads
from harness.vocab import events as ev
from harness.vocab import tiers
from harness.judge.analysis import (DISK_FULL_HANDLED, FAIL, LAUNCHER_IDENTITY, LOOP_STOPPED, LOSS_CONTINUITY,
                                    NO_RESTART_EXIT_CODE, NOT_APPLICABLE, NVRX_DEFAULT_MAX_NO_PROGRESS_CYCLES,
                                    OPTIMIZER_STATE, PASS, STATE_EQUIVALENCE, UNKNOWN, Judging, LossComparison, answer,
                                    damage_done, na_no_fault, undetected_hang)
from harness.vocab.events import Src, Timeline
from harness.vocab.verdict import CriterionResult, Joined, Phrase, Status


def check_optimizer_state(j: Judging) -> CriterionResult:
    """The restored optimizer really continued: Adam's step counter in the first checkpoint
    committed after the restore of K equals that checkpoint's iteration (one optimizer step
    per iteration), and every optimizer slot holds exp_avg and exp_avg_sq. Read from the
    checkpoint's own optimizer record (history), which no log line can stand in for."""
    cid = OPTIMIZER_STATE
    tl, a, ep = j.tl, j.a, j.ep
    if (na := na_no_fault(cid, a)) is not None:
        return na
    r = ep.replacement if ep is not None else None
    loaded = r.first(ev.CheckpointLoaded) if r is not None else None
    if ep is None or r is None or loaded is None:
        return answer(cid, NOT_APPLICABLE, "nothing_restored", {})
    k = loaded.iteration
    facts: dict[str, object] = {"restored": k}
    commits = sorted((e for s in ep.continuation for e in s.of(ev.SaveCommitted) if e.iteration > k),
                     key=lambda e: e.iteration)
    if not commits:
        return answer(cid, NOT_APPLICABLE, "nothing_committed", facts, [loaded])
    first = commits[0]
    n = first.iteration
    facts["first"] = n
    if tl.checkpoints is None or not tl.checkpoints.exists:
        return answer(cid, NOT_APPLICABLE, "no_checkpoint_dir", facts, [loaded, first])
    ck = tl.checkpoints.get(n)
    if ck is None and (kept := tiers.first_kept(tl, commits)) is not None:  # a non-persistent one Megatron pruned
        first, n, ck = kept.line, kept.iteration, kept.disk
        facts["first"] = n
    if ck is None:
        return answer(cid, UNKNOWN, "first_missing", facts, [loaded, first])
    rec = ck.optimizer_record
    facts["rel"] = ck.rel
    evidence: list[object] = [loaded, first, ck.record_src()]
    if rec is None or rec.steps is None:
        facts["why"] = (rec.note if rec is not None else None) or ck.inspect_note or Phrase(cid, "not_read", {})
        return answer(cid, UNKNOWN, "unreadable", facts, evidence)
    before = tl.checkpoints.get(k) if tl.checkpoints is not None else None
    if before is not None and before.optimizer_record is not None and before.optimizer_record.steps:
        evidence.append(before.record_src())
    facts.update(slots=rec.moment_slots, slots_text=_slots(rec.moment_slots))
    if rec.moment_slots == 0:
        return answer(cid, FAIL, "no_moments", facts, evidence)
    if rec.missing_count:
        shown = ", ".join(rec.missing_moments) + (" ..." if rec.missing_count > len(rec.missing_moments) else "")
        return answer(cid, FAIL, "missing_moments", {**facts, "missing": rec.missing_count, "shown": shown}, evidence)
    if not rec.steps:
        where = (Phrase(cid, "step_not_in_common", {"common": rec.common_read})
                 if rec.common_read else Phrase(cid, "step_nowhere", {}))
        return answer(cid, NOT_APPLICABLE, "no_step_counter", {**facts, "where": where}, evidence)
    skipped = [it for s in tl.starts for it in s.bad_iterations if (it.skipped or 0) > 0]
    if skipped:
        return answer(cid, UNKNOWN, "skipped_step", {**facts, "skipped": skipped[0].iteration}, [*evidence, skipped[0]])
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
        return answer(cid, FAIL, "wrong_step", {**facts, "why": Phrase(cid, why, facts)}, evidence)
    return answer(cid, PASS, "continued", {**facts, "first_g": f"{n:g}"}, evidence)


def _slots(n: int) -> Phrase:
    return Phrase("optimizer_state", "slots", {"n": n, "s": "" if n == 1 else "s"})


def check_loop_stopped(j: Judging) -> CriterionResult:
    """A fault that returns in every cycle (a poisoned checkpoint) must be stopped by NVRx's
    no-progress rule: exit 93 within --ft-max-no-progress-cycles failed cycles, the cause named.
    Judges the run as of the episode whose fault poisoned its checkpoint (the registry gives the
    first such episode: the loop follows it and ends the job)."""
    cid = LOOP_STOPPED
    tl, a, ep = j.tl, j.a, j.ep
    inj = ep.marker if ep is not None else None
    if not a.poisons(ep):
        return answer(cid, NOT_APPLICABLE, "no_loop_planned", {"fault": a.kind_name(ep), "fault_at": a.fault_at})
    if inj is None:
        return answer(cid, NOT_APPLICABLE, "no_injection", {})
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
    after_last = ep.continuation if ep is not None else ()
    # A fallback: every replacement that loaded anything loaded a checkpoint committed before the damaged one.
    loads = [(s, s.first(ev.CheckpointLoaded)) for s in after_last]
    earlier = [(s, e) for s, e in loads if e is not None and k is not None and e.iteration < k]
    if earlier and all(e is None or (k is not None and e.iteration < k) for _, e in loads):
        s, e = earlier[0]
        return answer(cid, PASS, "fell_back", {**facts, "loaded": e.iteration, "cycle": s.cycle,
                                               "damaged": damage_done(a.kind(ep))}, [inj, e])
    trained = [s for s in after_last if s.first(ev.CheckpointLoaded) is not None or s.first_iteration is not None]
    if trained:
        problems.append({"reason": "went_unnoticed", "cycle": trained[0].cycle, "poisoned_checkpoint": k,
                         "damaged": damage_done(a.kind(ep))})
        evidence.append((trained[0].first(ev.CheckpointLoaded) or trained[0].first_iteration))
    if trained and not stops and code == 0:
        pass  # no loop to stop: the damaged checkpoint was loaded and training finished (said above)
    elif not stops and code != NO_RESTART_EXIT_CODE:
        if launch is not None and launch.stopped_early:
            problems.append({"reason": "harness_stopped", "why": launch.stopped_early})
        elif gave_up or code not in (None, 0):
            problems.append({**facts, "reason": "looped_until_exhausted",
                             "exited": code if code is not None else Phrase(cid, "with_a_failure", {})})
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
        cause.append({"reason": "corrupt_file", "file": shown, "damaged": damage_done(a.kind(ep))})
    if failing and len(repeated) == len(failing):
        cause.append({"reason": "repeated_load", "failing": len(failing),
                      "loading": repeated[0].first(ev.LoadStarted).iteration})
        evidence.extend(s.first(ev.LoadStarted) for s in repeated[:3])
    if not cause:
        problems.append({"reason": "no_cause"})
    if problems:
        return answer(cid, FAIL, "not_refused" if trained else "not_stopped", {**facts, "problems": problems},
                      evidence)
    facts["how"] = Phrase(cid, "how_exit" if code is not None else "how_unknown", facts)
    return answer(cid, PASS, "stopped", {**facts, "problems": cause}, evidence)


def check_disk_full_handled(j: Judging) -> CriterionResult:
    """disk-full: the save in flight (the marker's `iteration` N) met a full filesystem. It must
    never count: not committed in the fault's cycle, the tracker never handed to a replacement
    naming it, never loaded before a later save of N committed it whole. Passes saying which
    correct ending happened: a replacement resumed from an earlier checkpoint ("recovered"), or
    no replacement loaded anything and the stack stopped naming ENOSPC ("stopped")."""
    cid = DISK_FULL_HANDLED
    ep = j.ep  # the episode whose fault filled the filesystem (the registry gives the first)
    inj = ep.marker if ep is not None else None
    if ep is None or inj is None or inj.iteration is None:
        return answer(cid, NOT_APPLICABLE, "no_injection", {})
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
        return answer(cid, NOT_APPLICABLE, "fill_too_late", facts, [inj, (early or committed)[0]])
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
        return answer(cid, FAIL, "partial_used", {**facts, "problems": problems}, evidence)
    if recovered is not None:
        start, loaded = recovered
        return answer(cid, PASS, "recovered", {**facts, "cycle": start.cycle, "loaded": loaded.iteration,
                                              "error": Phrase(cid, "enospc_logged" if full else "enospc_unlogged")},
                      [*evidence, loaded])
    if full and not any(s.first(ev.CheckpointLoaded) for s in ep.continuation):
        # nothing partial was used; whether the stack then stopped or hung (the harness stopped
        # it, replacement_cycle and clean_finish fail) is said, not judged, here
        hung = undetected_hang(j.tl) is not None
        return answer(cid, PASS, "hung_after_error" if hung else "stopped", {**facts, "line": full[0].src}, evidence)
    return answer(cid, FAIL, "silent", facts, evidence)


# ---------------------------------------------------------------- loss continuity (with a baseline)

def check_loss_continuity(j: Judging) -> CriterionResult:
    """Loss continuity, the check after the five when a baseline is given: the losses after
    the episode's restored checkpoint equal the baseline's (see compare_losses)."""
    if j.baseline_problem is not None and j.a.is_fault_run:
        return _no_usable_baseline(LOSS_CONTINUITY, j.baseline_problem)
    if j.baseline_skipped is not None and j.a.is_fault_run:
        return answer(LOSS_CONTINUITY, NOT_APPLICABLE, "baseline_skipped", {"why": j.baseline_skipped})
    loaded = j.ep.loaded if j.ep is not None else None
    return compare_losses(j.losses, j.a.fault, loaded.iteration if loaded is not None else None, j.tl.run.train_iters)


def _no_usable_baseline(cid: str, problem: str) -> CriterionResult:
    return answer(cid, UNKNOWN, "no_usable_baseline", {"problem": problem})


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
        return CriterionResult(cid, status, "", evidence, values=dict(values), reason=reason)

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
        side = Phrase(cid, "side_ours", {}) if any(i not in ours for i in missing) else \
            Phrase(cid, "side_baseline", {"baseline": baseline_dir})
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
                mean = Phrase(cid, "mean_hint", {"mean": f"{(float(ours[i - 1].loss) + float(theirs[i].loss)) / 2:.6E}",
                                                 "before": i - 1, "iteration": i})
            return found(FAIL, "differs", {**facts, "iteration": i, "ours": ours[i].loss, "theirs": theirs[i].loss,
                                           "mean": mean}, (str(ours[i].src), f"{base}/{theirs[i].src}"))
    first, end = wanted[0], wanted[-1]
    note = Phrase(cid, "averaged_note", {"averaged": averaged, "before": averaged - 1}) if averaged is not None else ""
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

def determinism(tl: Timeline) -> tuple[bool, Phrase, tuple[Src, ...]]:
    """(is this run's training bitwise deterministic, why, the evidence), as its workload
    (harness.workloads) says: the reference workload is; Megatron on CPU is when its arguments
    tables say dropout 0; Megatron on GPUs is not (its reductions are not ordered); a workload
    this suite does not know is not."""
    workload = workloads.find(tl.run.workload)
    if workload is None:
        shown = tl.run.workload or Phrase(STATE_EQUIVALENCE, "workload_unrecorded", {})
        return False, Phrase(STATE_EQUIVALENCE, "not_deterministic", {"workload": shown}), ()
    said = workload.determinism(tl)
    facts = {k: Phrase(STATE_EQUIVALENCE, *v) if isinstance(v, tuple) else v for k, v in said.facts.items()}
    return said.exact, Phrase(STATE_EQUIVALENCE, said.reason, facts), tuple(said.evidence)


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
        return answer(cid, NOT_APPLICABLE, "baseline_skipped", {"why": j.baseline_skipped})
    if not a.is_fault_run:
        return answer(cid, NOT_APPLICABLE, "no_fault", {})
    if state is None:
        return answer(cid, NOT_APPLICABLE, "no_baseline", {})
    poisoned = [e for e in a.subjects if a.poisons(e)]
    if poisoned:  # the loop its fault starts ends the job: no recovered end state
        return answer(cid, NOT_APPLICABLE, "poisoned", {"fault": a.kind_name(poisoned[0])})
    loaded = a.closing.loaded if a.closing is not None else None  # the end state follows the last restore
    if loaded is None:
        return answer(cid, NOT_APPLICABLE, "nothing_restored", {})
    if state.iteration is None or state.checkpoint is None:
        return answer(cid, NOT_APPLICABLE, "nothing_committed", {}, [loaded])
    mine = Src(f"{state.checkpoint}/.metadata", 0, f"final checkpoint, iteration {state.iteration}")
    theirs = (Src(f"{state.baseline_checkpoint}/.metadata", 0, "the baseline's checkpoint of the same iteration")
              if state.baseline_checkpoint else None)
    facts: dict[str, object] = {"checkpoint": state.checkpoint, "baseline_checkpoint": state.baseline_checkpoint,
                                "iteration": state.iteration, "compared": state.compared_count}
    if state.note is not None:
        return answer(cid, UNKNOWN, "not_compared", {**facts, "note": state.note}, [mine, theirs])
    exact, why, det_srcs = determinism(tl)
    facts.update(exact=exact, why=why)
    tol = {c: (rtol, atol) for c, rtol, atol in state.tolerances}
    evidence: list[object] = [mine, theirs, *det_srcs]
    if state.missing_count:
        return answer(cid, FAIL, "other_layout", {**facts, "missing": state.missing_count, "example": state.missing[0]},
                      [*evidence, *(Src(f"{state.checkpoint}/.metadata", 0, m) for m in state.missing[:4])])
    if state.compared_count == 0:
        return answer(cid, UNKNOWN, "nothing_comparable", facts, evidence)
    facts["classes"] = ", ".join(f"{n} {c}" for c, n in state.compared)
    facts["skipped"] = ""
    if state.not_compared_count:
        facts["skipped"] = Phrase(cid, "skipped", {"count": state.not_compared_count, "shown": ", ".join(
            state.not_compared[:3]) + (" ..." if state.not_compared_count > 3 else "")})
    offending = [d for d in state.differing if exact or not d.within_tolerance]
    failing = state.differing_count if exact else state.outside_tolerance_count
    if failing:
        first = offending[0] if offending else None
        if first is not None:
            rtol, atol = tol.get(first.tensor_class, (0.0, 0.0))
            bound = Phrase(cid, "bitwise" if exact else "tolerance", {"cls": first.tensor_class, "rtol": f"{rtol:g}",
                                                                         "atol": f"{atol:g}"})
            evidence.append(Src(f"{state.checkpoint}/{first.key}", 0,
                                f"{first.numel} {first.dtype} values, max |run - baseline| = {first.max_abs_diff:.6g} "
                                f"({first.tensor_class})"))
            return answer(cid, FAIL, "differs", {
                **facts, "failing": failing, "bound": bound, "key": first.key, "cls": first.tensor_class,
                "diff": f"{first.max_abs_diff:.6g}", "worst": "; ".join(f"{c} {v:.3g}" for c, v in state.max_abs_diff)},
                evidence)
    if exact:
        return answer(cid, PASS, "bitwise_equal", facts, evidence)
    facts["tolerances"] = "; ".join(f"{c} rtol={tol[c][0]:g} atol={tol[c][1]:g}" for c, _ in state.compared if c in tol)
    facts["close"] = Phrase(cid, "not_bitwise", {"count": state.differing_count, "largest": "; ".join(
        f"{c} {v:.3g}" for c, v in state.max_abs_diff)}) if state.differing_count else ""
    return answer(cid, PASS, "within_tolerance", facts, evidence)


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
        return answer(cid, NOT_APPLICABLE, "no_plan", {"has_run_json": tl.run.has_run_json})
    facts: dict[str, object] = {
        "planned": planned.version,
        "where": Phrase(cid, "where", {"path": planned.path}) if planned.path else "",
        "sha": Phrase(cid, "sha", {"sha": planned.sha256[:12], "files": planned.files}) if planned.sha256 else ""}
    plan_src = Src("run.json", 0, f"contract.launcher: NVRx {planned.version}"
                                  + (f" at {planned.path}" if planned.path else "")
                                  + (f", sha256 {planned.sha256[:12]}" if planned.sha256 else ""))
    said = [(s.cycle, e) for s in tl.starts for e in s.of(ev.LauncherImported)]
    if not said:
        return answer(cid, UNKNOWN, "none_said", facts, [plan_src])
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
        got = (Phrase(cid, "got_missing", {"why": e.why or "?"}) if e.found is False else
               Phrase(cid, "got_found", {"version": e.version or "?", "path": e.path or "?",
                                         "sha": (e.sha256 or "?")[:12]}))
        return answer(cid, FAIL, "other", {**facts, "others": len(other), "rank": e.worker_rank,
                                           "cycle": cycle if cycle is not None else "?", "got": got},
                      [plan_src, *(e for _c, e in other[:4])], final=True)
    if len(unknown) == len(said):
        return answer(cid, UNKNOWN, "unknown_all", {**facts, "why": unknown[0][1].why or "?"},
                      [plan_src, unknown[0][1]])
    caveats = []
    if unknown:
        caveats.append(Phrase(cid, "caveat_unknown", {"n": len(unknown)}))
    if version_only:
        caveats.append(Phrase(cid, "caveat_version_only", {"n": len(version_only)}))
    if elsewhere:
        caveats.append(Phrase(cid, "caveat_elsewhere", {"n": len(elsewhere), "path": elsewhere[0][1].path}))
    return answer(cid, PASS, "same", {**facts, "caveats": Phrase(cid, "caveats", {"caveats": Joined(tuple(caveats), "; ")})
                                      if caveats else ""},
                  [plan_src, *(e for _c, e in said[:3])])

