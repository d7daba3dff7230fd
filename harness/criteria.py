"""The five recovery criteria: pure functions of a Timeline (Jepsen-style checkers).

Each checker takes the Timeline and the `Analysis` derived from it once (which fault, which
cycle failed, which start replaced it, which checkpoint K it had to load) and returns a
`CriterionResult`: pass / fail / not_applicable / unknown, one sentence a person can act on,
and the evidence lines (`file:line: text`). `check_safe` turns a checker's exception into
`unknown`; the run is qualified only when every criterion is pass or not_applicable.

A criterion whose premise another criterion owns is `not_applicable` when that premise is
missing (no injection: nothing to replace; no replacement: nothing reloaded), so a broken
run fails the criterion that names its cause instead of every criterion downstream.
Nothing here reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from harness import events as ev
from harness.events import AppStart, Src, Timeline, iso_utc
from harness.layout import MARKER_NAME

PASS, FAIL, NOT_APPLICABLE, UNKNOWN = "pass", "fail", "not_applicable", "unknown"
STATUSES = (PASS, FAIL, NOT_APPLICABLE, UNKNOWN)
FAULTS = ("none", "kill", "hang")
CRITERIA_IDS = ("pre_fault_checkpoint", "replacement_cycle", "optimizer_reload", "later_checkpoint", "clean_finish")
MAX_EVIDENCE = 12


@dataclass(frozen=True)
class CriterionResult:
    id: str
    status: str
    detail: str
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"id": self.id, "status": self.status, "detail": self.detail, "evidence": list(self.evidence)}


def _result(cid: str, status: str, detail: str, evidence: Sequence[object] = ()) -> CriterionResult:
    lines: list[str] = []
    for item in evidence:
        if item is None:
            continue
        text = str(item.src if isinstance(item, ev.Event) else item)
        if text not in lines:
            lines.append(text)
    if len(lines) > MAX_EVIDENCE:
        lines = lines[: MAX_EVIDENCE - 1] + [f"... {len(lines) - MAX_EVIDENCE + 1} more"]
    return CriterionResult(cid, status, detail, tuple(lines))


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
            raise ValueError(f"fault {override!r} is not one of {', '.join(FAULTS)}: pass --fault none|kill|hang")
        return override, "--fault"
    if timeline.run.requested_fault in FAULTS:
        return timeline.run.requested_fault, "run.json spec.fault"
    for inj in timeline.injections:
        if inj.fault in ("kill", "hang"):
            return inj.fault, "the injection marker (no run.json)"
    for start in timeline.starts:
        for e in start.of(ev.NemesisInjected):
            return ("hang" if e.signal == "SIGSTOP" else "kill"), "the nemesis's injection line (no run.json, no marker)"
    return "none", "default: no run.json fault and no injection marker"


def analyze(timeline: Timeline, fault: str | None = None) -> Analysis:
    fault_name, how = resolve_fault(timeline, fault)
    notes: list[str] = []
    nemesis_lines = [e for s in timeline.starts for e in s.of(ev.NemesisInjected)]
    never = tuple(e for s in timeline.starts for e in s.of(ev.NemesisNeverFired))
    injection = timeline.injections[0] if timeline.injections else None
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
    )


def _expected_k(timeline: Timeline, injection: ev.Injection | None, failed_cycle: int | None,
                nemesis_lines: list[ev.NemesisInjected], notes: list[str]) -> tuple[int | None, tuple[ev.Event, ...]]:
    """The latest checkpoint committed at fault time: the marker's iteration (the tracker the
    nemesis read), raised only by a save line that the log stamps before the injection (only
    trusted when the UTC offset of the stamps is known)."""
    if injection is None:
        return None, ()
    k = injection.iteration
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


def check_pre_fault_checkpoint(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "pre_fault_checkpoint"
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    inj = a.injection
    if inj is None:
        reason = f" The nemesis said: {a.never_fired[0].reason}." if a.never_fired else ""
        absent = [Src(MARKER_NAME, 0, "missing: no fault was injected"),
                  Src("run.json", 0, f"spec.fault = {a.fault}") if a.fault_how.startswith("run.json") else None]
        return _result(cid, FAIL, f"The {a.fault} fault was requested ({a.fault_how}) but never injected: there is no "
                                  f"fault_injected.json.{reason} Give the run enough iterations to commit a checkpoint "
                                  "beyond the nemesis's startup baseline (train_iters well above save_interval) and check "
                                  "the [nemesis] lines of the fault rank.", [*absent, *a.never_fired])
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
    k = inj.iteration
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
    else:
        caveats.append("the checkpoint directory is not in the run directory, so metadata.json was not checked")
    if not tl.starts:
        return _result(cid, UNKNOWN, f"The marker names checkpoint {k}, but there is no application log to correlate it "
                                     "with Megatron's save lines: copy logs/ with the run directory.", evidence)
    upto = a.failed_cycle if a.failed_cycle is not None else 0
    saves = [e for s in tl.starts if s.cycle is not None and s.cycle <= upto
             for e in s.of(ev.SaveCommitted) if e.iteration == k]
    if not saves:
        return _result(cid, FAIL, f"The marker names checkpoint {k}, but Megatron's log of cycles 0..{upto} has no "
                                  f"'successfully saved checkpoint from iteration {k}' line: the marker and the training "
                                  "log disagree (wrong --save directory or a tracker written by something else).",
                       evidence)
    evidence.append(saves[-1])
    if a.expected_k is not None and a.expected_k != k:
        caveats.append(f"checkpoint {a.expected_k} was also committed before the injection")
    when = iso_utc(tl.utc(inj))
    extra = f" ({'; '.join(caveats)})" if caveats else ""
    return _result(cid, PASS, f"Checkpoint {k} was committed before the {a.fault} injection on rank {inj.rank} at "
                              f"{when}: the marker, Megatron's save line and metadata.json agree{extra}.", evidence)


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


def check_replacement_cycle(tl: Timeline, a: Analysis) -> CriterionResult:
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
                                     "the failed cycle" + (" and the rank timeouts" if a.fault == "hang" else "") +
                                     " cannot be seen; copy the launcher log with the run.", [inj])
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
        return _result(cid, FAIL, f"The launcher recorded the failure of cycle {c} but started no replacement workers: "
                                  f"{why}.", evidence)
    if a.fault == "hang":
        timeouts = [e for e in tl.launcher_events() if isinstance(e, ev.RankTimeout) and (e.cycle in (c, None))]
        named = [t for t in timeouts if _names_injected_rank(t, inj)]
        if not timeouts:
            problems.append(f"no section or out-of-section timeout message exists for cycle {c}: the hang of rank "
                            f"{inj.rank} was not detected by its rank monitor (check --ft-rank-section-timeouts and "
                            "that the workload opens its 'step' section)")
        elif not named:
            ranks = sorted({t.rank if t.rank is not None else t.local_rank for t in timeouts}, key=lambda r: (r is None, r))
            problems.append(f"the timeout messages name rank(s) {', '.join(map(str, ranks))}, not the stopped rank "
                            f"{inj.rank}: the monitor of the hung rank did not report it (the others only timed out "
                            "waiting for it in a collective)")
            evidence.extend(timeouts[:3])
        else:
            evidence.append(named[0])
    if problems:
        return _result(cid, FAIL, "The launcher restarted the workers, but " + "; ".join(problems) + ".", evidence)
    early = _before_the_injection(tl, a, fails)
    if early:
        return _result(cid, UNKNOWN, f"The launcher restarted the workers, but {early}: a recovery cannot precede its "
                                     f"fault, so the clocks or the UTC offset ({tl.utc_offset_s:+d} s, {tl.offset_how}) "
                                     "do not match, or the marker is not this run's.", evidence)
    how = f" after a {named[0].kind.replace('_', '-')} timeout naming rank {inj.rank}" if a.fault == "hang" else ""
    return _result(cid, PASS, f"The launcher recorded the failure of cycle {c}{how} and started replacement workers "
                              f"in {new}.", evidence)


def check_optimizer_reload(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "optimizer_reload"
    if (na := _na_no_fault(cid, a)) is not None:
        return na
    if a.injection is None:
        return _result(cid, NOT_APPLICABLE, "No injection happened (see pre_fault_checkpoint), so no replacement had "
                                             "to reload anything.")
    r = a.replacement
    if r is None:
        if a.replacement_cycle is not None:
            return _result(cid, UNKNOWN, f"The launcher started cycle {a.replacement_cycle}, but there is no application "
                                         f"log of that cycle (logs/*_cycle{a.replacement_cycle}.log missing or empty): "
                                         "the reload cannot be checked.", [a.workers_started[a.replacement_cycle]])
        return _result(cid, NOT_APPLICABLE, "No replacement workers started (see replacement_cycle), so nothing was "
                                             "reloaded.")
    k = a.expected_k
    who = f"The replacement workers (cycle {r.cycle})"
    # Decided by the configuration alone, so it holds even for a run stopped before its load ended.
    args = r.arguments
    shown = [r.first(ev.LoadStarted), r.first(ev.CheckpointLoaded)]
    for flag, option in (("no_load_optim", "--no-load-optim"), ("finetune", "--finetune")):
        if args is not None and args.flag(flag):
            return _result(cid, FAIL, f"{who} ran with {option}: Megatron skips the optimizer state when loading "
                                      f"checkpoint {k}; remove {option} from the workload arguments.",
                           [*shown, args.src_of(flag)])
        if option in tl.run.argv or option in tl.run.extra_args:
            return _result(cid, FAIL, f"{who} ran with {option} on the run's command line, so Megatron skips the "
                                      f"optimizer state when loading checkpoint {k}; remove {option}.",
                           [*shown, "run.json:0: " + option + " in the launcher command"])
    random = r.first(ev.StartedFromRandom)
    if random is not None:
        return _result(cid, FAIL, f"{who} started from random instead of loading checkpoint {k}: Megatron found no "
                                  "latest_checkpointed_iteration.txt under --load; make --load equal --save on storage "
                                  "every node sees.", [random, *a.expected_k_evidence[:1]])
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
    if loaded.iteration != k:
        args = r.arguments
        step = args.get("ckpt_step") if args else None
        hint = (f" --ckpt-step {step} pins the load" if step not in (None, "None")
                else " the tracker was stale or pointed elsewhere")
        which = "an older" if loaded.iteration < k else "a newer"
        return _result(cid, FAIL, f"{who} loaded checkpoint {loaded.iteration}, {which} one than {k}, the latest "
                                  f"committed at fault time:{hint}.",
                       [*evidence, *a.expected_k_evidence[:2]] + ([args.src_of("ckpt_step")] if step not in (None, "None") and args else []))
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
    return _result(cid, PASS, f"{who} loaded checkpoint {k}, the latest committed at fault time, with optimizer state "
                              f"({lines} lines in the load block{disk_note}).", evidence)


def check_later_checkpoint(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "later_checkpoint"
    recovering = a.is_fault_run and a.injection is not None
    if recovering and not a.restarted:
        return _result(cid, NOT_APPLICABLE, "No replacement workers started (see replacement_cycle), so no training "
                                             "followed the fault.")
    k = (a.expected_k or 0) if recovering else 0
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


def check_clean_finish(tl: Timeline, a: Analysis) -> CriterionResult:
    cid = "clean_finish"
    if a.is_fault_run and a.injection is not None and not a.restarted:
        return _result(cid, NOT_APPLICABLE, "The job never restarted after the fault (see replacement_cycle), so it "
                                             "could not finish cleanly.")
    problems: list[str] = []
    evidence: list[object] = []
    launcher = list(tl.launcher_events())
    success = [e for e in launcher if isinstance(e, ev.LauncherSucceeded) or (isinstance(e, ev.LauncherExit) and e.code == 0)]
    failed = [e for e in launcher if isinstance(e, ev.LauncherFailed) or (isinstance(e, ev.LauncherExit) and e.code != 0)]
    launch = tl.launch
    if launch is not None and launch.exit_code not in (None, 0):
        problems.append(f"the launcher exited with status {launch.exit_code}")
        evidence.append(launch.src)
    if failed:
        problems.append("the launcher reported a failure")
        evidence.extend(failed[:2])
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
    if a.injection_count > 1:
        problems.append(f"the fault was injected {a.injection_count} times")
        evidence.extend(a.injection_evidence[:4])
    allowed = min(a.injection_count, 1) if a.is_fault_run else 0
    if len(a.failures) > allowed:
        cycles = ", ".join(str(c) for c in a.failures)
        extra = [c for c in a.failures if c != a.failed_cycle]
        problems.append(f"{len(a.failures)} cycles failed ({cycles}); only the injected one may")
        for c in extra[:3]:
            evidence.append(a.failures[c][0])
    if not a.is_fault_run:
        restarts = sorted({c for c in a.workers_started if c > 0} | {s.cycle for s in tl.starts if s.cycle})
        if restarts:
            problems.append(f"the workers restarted (cycle {restarts[0]}) although no fault was injected")
    stops = [e for e in launcher if isinstance(e, ev.NoProgressStop)]
    if stops:
        problems.append("NVRx stopped the job for lack of progress across restarts")
        evidence.append(stops[0])
    last = max(tl.starts, key=lambda s: (s.cycle if s.cycle is not None else -1, s.index), default=None)
    done = last.first(ev.TrainingDone) if last is not None else None
    if done is None:
        problems.append("Megatron never printed '[after training is done]'" +
                        (f" in its last start ({last.source})" if last is not None else " (no application log)"))
    else:
        evidence.append(done)
    if problems:
        return _result(cid, FAIL, "The run did not finish cleanly: " + "; ".join(problems) + ".", evidence)
    if a.is_fault_run and a.injection is not None:
        shape = "with exactly one injection and one failed cycle"
    elif a.is_fault_run:
        shape = "without any failed cycle (and without the fault, see pre_fault_checkpoint)"
    else:
        shape = "in a single cycle without any fault"
    return _result(cid, PASS, f"The launcher reported success {shape}, no no-progress stop, and Megatron reached "
                              "'[after training is done]'.", evidence)


CHECKERS: tuple[tuple[str, Callable[[Timeline, Analysis], CriterionResult]], ...] = (
    ("pre_fault_checkpoint", check_pre_fault_checkpoint),
    ("replacement_cycle", check_replacement_cycle),
    ("optimizer_reload", check_optimizer_reload),
    ("later_checkpoint", check_later_checkpoint),
    ("clean_finish", check_clean_finish),
)


def check_safe(cid: str, checker: Callable[[Timeline, Analysis], CriterionResult], tl: Timeline, a: Analysis) -> CriterionResult:
    """Jepsen's check-safe: a checker that crashes yields `unknown` with the error, not a crash."""
    try:
        return checker(tl, a)
    except Exception as exc:  # noqa: BLE001 - the verdict must survive any one checker
        return CriterionResult(cid, UNKNOWN, f"The checker failed: {type(exc).__name__}: {exc}", ())


def evaluate(tl: Timeline, a: Analysis) -> tuple[CriterionResult, ...]:
    return tuple(check_safe(cid, fn, tl, a) for cid, fn in CHECKERS)


def qualified(results: Sequence[CriterionResult]) -> bool:
    return bool(results) and all(r.status in (PASS, NOT_APPLICABLE) for r in results)
