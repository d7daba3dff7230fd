"""The walkthrough's five recovery criteria, one checker each (registered in harness.judge.criteria).

pre_fault_checkpoint, replacement_cycle, optimizer_reload, later_checkpoint, clean_finish: pure
functions of a `Judging` (harness.judge.analysis) that return their facts, a reason key and the
values they compared, phrases (harness.vocab.verdict.Phrase) where a sentence nests another; the
sentences are harness.judge.sentences', rendered where a result is shown. Nothing here reads
files or renders.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Sequence

from harness.vocab import events as ev
from harness.vocab import tiers
from harness.judge.analysis import (FAIL, NOT_APPLICABLE, PASS, UNKNOWN, Analysis, Judging, answer, before_the_stop,
                                    na_no_fault, na_poisoned, undetected_hang)
from harness.judge.episodes import Episode, committed_before
from harness.vocab.events import Src, Timeline, iso_utc
from harness.vocab.layout import MARKER_NAME, TRACKER_NAME, parse_tracker
from harness.vocab.faults import PlannedFault, hits_a_save
from harness.vocab.verdict import CriterionResult, Joined, Phrase, Status


def check_pre_fault_checkpoint(j: Judging) -> CriterionResult:
    """A checkpoint was committed before the episode's fault: the marker, Megatron's save line,
    metadata.json and the tracker agree on K."""
    cid = "pre_fault_checkpoint"
    tl, a, ep = j.tl, j.a, j.ep
    if (na := na_no_fault(cid, a)) is not None:
        return na
    facts: dict[str, object] = {"fault": a.fault, "fault_how": a.fault_how}

    def found(status: Status, reason: str, evidence: Sequence[object], **values: object) -> CriterionResult:
        facts.update(values)
        return answer(cid, status, reason, facts, evidence, final=bool(facts.pop("final", False)))

    if ep is None:
        absent = [Src(MARKER_NAME, 0, "missing: no fault was injected"),
                  Src("run.json", 0, f"spec.fault = {a.fault}") if a.fault_how.startswith("run.json") else None]
        # final: the nemesis itself said it will not fire
        return found(FAIL, "never_injected", [*absent, *a.never_fired], final=bool(a.never_fired),
                     nemesis=(Phrase(cid, "nemesis_said", {"reason": a.never_fired[0].reason})
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
                     when=Phrase(cid, *outside))
    in_save = hits_a_save(inj.fault_at)
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
        caveats.append(Phrase(cid, "caveat_pruned", {"committed": k, "later": pruned.iteration}))
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
        caveats.append(Phrase(cid, "caveat_link", {"dir": str(ck.path)}))
    else:
        caveats.append(Phrase(cid, "caveat_no_dir", {}))
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
        caveats.append(Phrase(cid, "caveat_in_flight", facts))
    if ep.expected_k is not None and ep.expected_k != k:
        caveats.append(Phrase(cid, "caveat_also_committed", {"also": ep.expected_k}))
    agree = "agree_all" if ck is not None and ck.exists and pruned is None else "agree_log"
    return found(PASS, "committed", evidence, when=iso_utc(tl.utc(inj)), agree=Phrase(cid, agree, {}),
                 caveats=Phrase(cid, "caveats", {"caveats": Joined(tuple(caveats), "; ")}) if caveats else "")


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


def _before_the_injection(tl: Timeline, ep: Episode, fails: Sequence[ev.LauncherEvent]) -> Phrase | None:
    """A recovery step stamped before the episode's injection: what and when, or None."""
    injected = tl.utc(ep.marker)
    if injected is None or tl.offset_how.startswith("assumed"):
        return None
    first = ep.replacement.first_iteration if ep.replacement is not None else None
    for step, e in (("early_failure", min(fails, key=lambda f: tl.utc(f) or float("inf"), default=None)),
                    ("early_first_iteration", first)):
        t = tl.utc(e)
        if t is not None and t < injected - 1.0:
            return Phrase("replacement_cycle", "stamped_early", {
                "what": Phrase("replacement_cycle", step, {}), "at": iso_utc(t), "gap": f"{injected - t:.1f}",
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

    def phrase(self) -> Phrase:
        """The change in words (harness.judge.sentences), from its facts."""
        dp = {side: Phrase("*", "dp", {"dp": d}) if d is not None else ""
              for side, d in (("dp_before", self.dp_before), ("dp_after", self.dp_after))}
        return Phrase("*", "world_change", {"before": self.before, "after": self.after, "failed": self.failed,
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
    if (na := na_no_fault(cid, a)) is not None:
        return na
    if ep is None:
        return answer(cid, NOT_APPLICABLE, "no_injection", {})
    inj, c = ep.marker, ep.cycle
    facts: dict[str, object] = {"fault": a.kind_name(ep), "failed_cycle": c, "episode": ep.number, "rank": inj.rank}

    def found(status: Status, reason: str, evidence: Sequence[object], **values: object) -> CriterionResult:
        facts.update(values)
        return answer(cid, status, reason, facts, evidence)

    if not tl.has_role("launcher"):
        later = [ci for ci in tl.cycle_infos if ci.cycle > c]
        if later and (kind := a.kind(ep)) is not None and kind.dies_at_once:
            return found(PASS, "cycle_records_only", [inj, *[ci for ci in tl.cycle_infos if ci.cycle == c], later[0]],
                         next_cycle=later[0].cycle)
        kind = a.kind(ep)
        return found(UNKNOWN, "no_launcher_log", [inj],
                     timeouts=Phrase(cid, "and_timeouts", {}) if kind is not None and kind.monitor_detects else "")
    fails = ep.failures
    if not ep.last and inj.cycle is not None and not fails:  # a later fault follows: this one must have been noticed
        return found(FAIL, "earlier_fault_unnoticed", [inj], marker_cycle=inj.cycle, index=inj.fault_index,
                     planned=a.planned_faults, fault_at=inj.fault_at)
    ip = tiers.inprocess(ep.fault_start)  # harness.vocab.tiers: NVRx's in-process Wrapper in the failed cycle
    died = tiers.fault_process_died(tl, c, inj.pid) if ip is not None else None
    if ip is not None and ip.restarted and ep.replacement_cycle is None and died is None:
        caught = next((e for e in ip.caught if e.wrapped_rank == inj.rank), ip.caught[0] if ip.caught else None)
        return found(PASS, "in_process", [inj, *([caught] if caught else []), *ip.restarted[:2]],
                     restarts=ip.restarts, pid=inj.pid, caught=Phrase(cid, "inprocess_caught", {
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
        new = Phrase(cid, "new_cycle", {"cycle": ep.replacement_cycle})
    elif ep.replacement is not None:
        evidence.append(ep.replacement.events[0] if ep.replacement.events else None)
        new = Phrase(cid, "new_cycle_log_only", {"cycle": ep.replacement.cycle})
    else:
        group = next((e for e in fails if isinstance(e, ev.WorkerGroupFailed)), None)
        ends = [e for e in tl.launcher_events() if isinstance(e, (ev.LauncherFailed, ev.RestartsExhausted, ev.NoProgressStop))]
        evidence.extend(ends[:2])
        budget = tl.run.max_restarts
        if budget is not None and len(a.episodes) > budget:
            why = Phrase(cid, "budget_spent", {"budget": budget, "faults": len(a.episodes), "fault_at": a.fault_at})
        elif group is None or group.attempts_left == 0:
            why = Phrase(cid, "exhausted", {})
        else:
            why = Phrase(cid, "restart_never_began", {"left": group.attempts_left, "max": group.max_restarts})
        return found(FAIL, "no_replacement", evidence, why=why)
    facts["replacement"] = new
    how: list[object] = []  # how the launcher noticed it: the phrases said one after the other
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
            state = Phrase(cid, "state_stopped" if kind.signal == "SIGSTOP" else "state_hung", {})
            how.append(Phrase(cid, "how_named", {**facts, "kind": named[0].kind.replace('_', '-'), "state": state}))
        elif inj.signal not in (None, kind.signal):
            problems.append({**facts, "reason": "not_sigstop", "signal": inj.signal,
                             "expected": kind.signal or kind.name})
            evidence.extend(after[:3])
        else:
            first = after[0]
            ranks = sorted({t.rank if t.rank is not None else t.local_rank for t in after}, key=lambda r: (r is None, r))
            evidence.append(first)
            stamped = tl.utc(first)
            delay = Phrase(cid, "delay", {"delay": f"{stamped - injected_at:.1f}"}) if stamped and injected_at else ""
            how.append(Phrase(cid, "how_peer", {**facts, "kind": first.kind.replace('_', '-'), "delay": delay,
                                                "who": ", ".join(map(str, ranks)), "pid": inj.pid,
                                                "got": kind.signal or kind.name}))
    if kind is not None and kind.exit_codes:
        exit_problem, exit_how, exit_evidence = _fault_rank_exit(kind, inj, fails)
        evidence.extend(exit_evidence)
        if exit_problem is not None:
            problems.append(exit_problem)
        if exit_how:
            how.append(exit_how)
    if ip is not None and ep.replacement_cycle is not None:  # the in-process layer did not recover it: say so
        said = ip.gave_up[0] if ip.gave_up else (ip.caught[0] if ip.caught else None)
        if said is not None:
            evidence.append(said)
            how.append(Phrase(cid, "inprocess_then_launcher", {"name": said.name, "text": said.text,
                                                               "who": said.wrapped_rank, "pid": inj.pid}))
    facts["how"] = Joined(tuple(how)) if how else ""
    nodes = ""
    change = world_change(ep)
    if change is not None:
        evidence.extend(change.evidence)
        if not change.allowed(tl):
            if tl.run.min_nnodes is not None:
                allowed = Phrase(cid, "allowed_min", {"min": tl.run.min_nnodes, "max": tl.run.nnodes})
            elif tl.run.has_run_json:
                allowed = Phrase(cid, "allowed_fixed", {})
            else:
                allowed = Phrase(cid, "allowed_unknown", {})
            problems.append({"reason": "world_changed", "way": "shrank" if change.shrank else "grew",
                             "change": change.phrase(), "allowed": allowed})
    if (lost := a.kind(ep)) is not None and lost.loses_node:
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
        shrink = Phrase(cid, "shrank_allowed", {"min": tl.run.min_nnodes, "max": tl.run.nnodes,
                                                "change": change.phrase()})
    return found(PASS, "restarted", evidence, nodes=nodes, shrink=shrink)


def replacement_cycles_all_passed(j: Judging, passed: Sequence[tuple[Episode, CriterionResult]]) -> CriterionResult:
    """Every episode's launcher noticed its fault and restarted: one sentence for the run, each
    fault told with its own kind, moment, failed cycle, how it was noticed and its restart."""
    last = passed[-1][1]
    earlier = [str(x.src) for e, _ in passed[:-1] for x in (e.marker, *e.failures[:1])]
    evidence = [last.evidence[0], *earlier, *last.evidence[1:]] if last.evidence else earlier
    each = Joined(tuple(Phrase("replacement_cycle", "each_restarted", {
        **r.values, "number": e.number, "kind": j.a.kind_name(e), "fault_at": e.marker.fault_at,
        "how": r.values.get("how", "")}) for e, r in passed), "; ")
    return answer("replacement_cycle", PASS, "all_restarted", {"faults": len(passed), "each": each}, evidence)


def _exit_meaning(code: int) -> Phrase:
    if code < 0:
        try:
            return Phrase("*", "killed_by", {"signal": signal.Signals(-code).name})
        except ValueError:
            return Phrase("*", "killed_by_number", {"number": -code})
    return Phrase("*", "exit_status", {"code": code})


def _fault_rank_exit(kind, inj: ev.Injection,
                     fails: Sequence[ev.Event]) -> tuple[dict[str, object] | None, Phrase | None, list]:
    """A kind that fixes how its rank dies (FaultKind.exit_codes): the launcher's `failed (exitcode`
    line of that very worker (the marker's pid) must show it; another code means the rank died of
    something else (for `gil`: not of the rank monitor's SIGKILL). No line for it (a peer's failure
    was recorded first) decides nothing. (the problem's facts or None, the `how` fragment, evidence)"""
    mine = [e for e in fails if isinstance(e, ev.WorkerFailed) and inj.pid is not None and e.pid == inj.pid]
    if not mine:
        return None, None, []
    code = mine[0].exitcode
    facts = {"rank": inj.rank, "pid": inj.pid, "code": code, "meaning": _exit_meaning(code), "kind": kind.name,
             "wanted": Joined(tuple(Phrase("*", "code_meaning", {"code": c, "meaning": _exit_meaning(c)})
                                    for c in kind.exit_codes), " or ")}
    if code not in kind.exit_codes:
        return {"reason": "died_otherwise", **facts}, None, [mine[0]]
    return None, Phrase("replacement_cycle", "how_exit_code", facts), [mine[0]]


def _node_replacement(tl: Timeline, inj: ev.Injection, failed: int, replacement: int,
                      fails: Sequence[ev.Event], change: WorldChange | None = None) -> tuple[str, Phrase, list]:
    """For a lost node: (status, what it says, cycle records). The lost node is the marker's host; the
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

    def decided(status: str, reason: str, **values: object) -> tuple[str, Phrase, list]:
        return status, Phrase("replacement_cycle", reason, {**facts, **values}), infos

    if before is None or after is None or not lost:
        if not lost:
            return decided(UNKNOWN, "node_no_host")
        return decided(UNKNOWN, "node_no_record", cycle=failed if before is None else replacement)
    was, now = expand_hostlist(before.active_nodes or ""), expand_hostlist(after.active_nodes or "")
    if not was or not now:
        return decided(UNKNOWN, "node_not_host_lists", was=repr(before.active_nodes), now=repr(after.active_nodes))
    if lost in now:
        return decided(FAIL, "node_still_active", active=after.active_nodes)
    promoted = [n for n in now if n not in was]
    if lost not in was:
        return decided(FAIL, "node_not_active", active=before.active_nodes)
    facts.update(was=", ".join(was), now=", ".join(now), promoted=", ".join(promoted))
    if (len(now) < len(was) and not promoted and change is not None and change.allowed(tl)
            and tl.run.min_nnodes is not None and len(now) >= tl.run.min_nnodes):
        return decided(PASS, "node_lost_shrank", n_now=len(now), n_was=len(was), min=tl.run.min_nnodes,
                    max=tl.run.nnodes, change=change.phrase())
    if len(now) < len(was) or not promoted:
        shrank = Phrase("replacement_cycle", "node_job_shrank", {"change": change.phrase()}) \
            if change is not None and change.shrank else ""
        return decided(FAIL, "node_not_replaced", shrank=shrank)
    return decided(PASS, "node_replaced")


def _node_replacement_by_joins(tl: Timeline, inj: ev.Injection, failed: int, replacement: int,
                               fails: Sequence[ev.Event]) -> tuple[str, Phrase, list] | None:
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
        return FAIL, Phrase("replacement_cycle", "node_joined_again", facts), evidence
    if len(now) < len(was) or not promoted:
        return FAIL, Phrase("replacement_cycle", "node_joins_fewer", facts), evidence
    return PASS, Phrase("replacement_cycle", "node_replaced_by_joins", facts), evidence


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
    if (na := na_no_fault(cid, a)) is not None:
        return na
    if ep is None:
        return answer(cid, NOT_APPLICABLE, "no_injection", {})
    if a.poisons(ep):
        return na_poisoned(cid, a, ep)
    r = ep.replacement
    if ep.replacement_cycle is None and (ip := tiers.inprocess(ep.fault_start)) is not None \
            and ip.restarted:  # harness.vocab.tiers: NVRx's Wrapper restarted inside the same processes
        return _inprocess_reload(cid, ep, ip)
    if r is None:
        if ep.replacement_cycle is not None:
            return answer(cid, UNKNOWN, "no_replacement_log", {"cycle": ep.replacement_cycle}, [ep.restart])
        return answer(cid, NOT_APPLICABLE, "no_replacement", {})
    k = ep.expected_k
    trained = r.first_iteration is not None
    facts: dict[str, object] = {"expected": k, "episode": ep.number, "cycle": r.cycle}

    def found(status: Status, reason: str, evidence: Sequence[object], final: bool = False,
              **values: object) -> CriterionResult:
        facts.update(values)
        return answer(cid, status, reason, facts, evidence, final=final or trained)

    change = world_change(ep)
    facts["who"] = Phrase(cid, "who", facts)
    if change is not None:  # a restore onto another world: every verdict below names it
        facts["who"] = Phrase(cid, "who_changed", {**facts, "way": "shrank" if change.shrank else "grew",
                                                   "change": change.phrase()})
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
    partial = next((i for i in a.markers if hits_a_save(i.fault_at) and i.iteration == loaded.iteration), None)
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
        hint = Phrase(cid, "hint_ckpt_step" if pinned else "hint_tracker", {"step": step})
        return found(FAIL, "other_checkpoint", [*evidence, *ep.expected_k_evidence[:2]] + (
                     [args.src_of("ckpt_step")] if pinned and args else []),
                     final=loaded.iteration < k,  # nothing newer than K was committed to load
                     which=Phrase(cid, "older" if loaded.iteration < k else "newer"), hint=hint)
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
        disk_note = Phrase(cid, "disk_keys" if ck.optimizer_keys is not None else "disk_keys_unlisted", facts)
    else:
        disk_note = Phrase(cid, "disk_absent", facts)
    lines = Phrase(cid, "loaded_both" if opt and sched else "loaded_optimizer" if opt else "loaded_scheduler", {})
    resharded = ""
    if change is not None:
        evidence.extend(change.evidence)
        resharded = Phrase(cid, "resharded", {"before": change.before, "after": change.after})
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
        why = Phrase("optimizer_reload", "local_failed" if failed is not None else "local_never_validated",
                     {"loaded": it, "last_valid": failed.last_valid if failed is not None and failed.last_valid
                        is not None else -1})
        held = [f"rank {o}: {', '.join(map(str, h))}" for (i, o), h in sorted(saves.holders.items()) if i == it]
        return FAIL, "local_unvalidated", [*([failed] if failed is not None else [])], {
            "why": why, "held": Phrase("optimizer_reload", "local_held", {"held": "; ".join(held)}) if held else ""}
    newest_it = max(k, newest_local if newest_local is not None else k)
    if it < newest_it:
        tier = tiers.LOCAL if newest_it == newest_local else tiers.tier_of_iteration(tl, newest_it, ep.cycle)
        newest = tiers.describe(tier, newest_it, tiers.on_disk(tl.checkpoints, newest_it, tier))
        return FAIL, "older_tier", [saves.validated.get(newest_it)], {
            "restored": tiers.describe(tiers.LOCAL, it), "newest": newest, "said": ""}
    found = tiers.copies(r, it)
    missing = [e for e in r.of(ev.LocalCopyMissing) if e.iteration == it]
    which = (Phrase("optimizer_reload", "local_copies", {"copies": tiers.describe_copies(found)}) if found
             else Phrase("optimizer_reload", "local_copies_unlogged", {}))
    return PASS, "local_reloaded", [saves.validated[it], *[e for _o, _r, e in found][:4], *missing[:2]], {
        "validated": it, "which": which,
        "missing": Phrase("optimizer_reload", "local_missing", {"n": len(missing)}) if missing else ""}


def _inprocess_reload(cid: str, ep: Episode, ip: "tiers.Inprocess") -> CriterionResult:
    """optimizer_reload for a recovery NVRx's in-process Wrapper made inside the failed
    cycle's processes (harness.vocab.tiers): Megatron's reload after the restart must be K, not a
    start over (Megatron-LM #2774), within --inprocess-max-iterations (Megatron-Bridge #5755)."""
    k = ep.expected_k
    facts: dict[str, object] = {"expected": k, "episode": ep.number, "cycle": ep.cycle,
                                "restarts": ip.restarts, "limit": ip.max_iterations}
    facts["who"] = Phrase(cid, "who_inprocess", facts)
    first = ip.restarted[0]
    if ip.max_iterations is not None and ip.restarts > ip.max_iterations:
        return answer(cid, FAIL, "inprocess_over_limit", facts, [*ip.restarted[-2:]], final=True)
    if ip.from_random is not None:
        return answer(cid, FAIL, "inprocess_from_start", {**facts, "loaded": 0}, [first, ip.from_random], final=True)
    if ip.reload is None:
        return answer(cid, FAIL, "inprocess_no_reload", facts, [first, *ip.gave_up[:1]])
    facts["loaded"] = ip.reload.iteration
    evidence = [first, ip.reload_began, ip.reload]
    if ip.reload.iteration <= 0:
        return answer(cid, FAIL, "inprocess_from_start", facts, evidence, final=True)
    if k is not None and ip.reload.iteration != k:
        which = Phrase(cid, "older" if ip.reload.iteration < k else "newer")
        return answer(cid, FAIL, "inprocess_other", {**facts, "which": which}, evidence, final=ip.reload.iteration < k)
    return answer(cid, PASS, "inprocess_reloaded", facts, evidence)


def check_later_checkpoint(j: Judging) -> CriterionResult:
    """Training after the episode's restore (the whole run, without a fault) committed its work
    to the final iteration with no skipped step."""
    cid = "later_checkpoint"
    tl, a, ep = j.tl, j.a, j.ep
    recovering = a.is_fault_run and ep is not None
    if recovering and not ep.restarted:
        return answer(cid, NOT_APPLICABLE, "no_replacement", {})
    if recovering and a.poisons(ep):
        return na_poisoned(cid, a, ep)
    k = (ep.expected_k or 0) if recovering else 0
    t_final = tl.run.train_iters
    if recovering and t_final is not None and k >= t_final:
        return _nothing_left_to_train(tl, ep, k, t_final)
    scope = list(ep.continuation) if recovering else list(tl.starts)
    facts: dict[str, object] = {"restored": k, "where": Phrase(cid, "after_restore" if recovering else "in_run",
                                                                   {"restored": k})}
    if not scope:
        return answer(cid, UNKNOWN, "no_log", facts)
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
        return answer(cid, FAIL, "did_not_commit", facts, evidence)
    facts["steps"] = Phrase(cid, "steps" if final is not None else "steps_unknown", facts)
    facts["later_text"] = later.iteration if later is not None else "?"
    return answer(cid, PASS, "committed", facts, evidence)


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
            return answer(cid, FAIL, "final_never_committed", {**facts, "rel": d.rel}, evidence)
    beyond = [s.last_iteration for s in ep.continuation if s.last_iteration is not None and s.last_iteration.iteration > t]
    if beyond:
        return answer(cid, FAIL, "trained_beyond_final", {**facts, "iteration": beyond[0].iteration},
                      [*evidence, beyond[0]])
    trained = [s.first_iteration for s in ep.continuation if s.first_iteration is not None]
    if trained and trained[0].iteration <= k:
        return answer(cid, FAIL, "trained_again", {**facts, "iteration": trained[0].iteration}, [*evidence, trained[0]])
    return answer(cid, PASS, "nothing_left", facts, evidence)


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
    if a.is_fault_run and closing is not None and a.poisons(closing):  # the loop ends the job: loop_stopped's
        return na_poisoned(cid, a, closing)
    if a.is_fault_run and closing is not None and not closing.restarted:
        gave_up = [e for e in tl.launcher_events() if isinstance(e, (ev.LauncherFailed, ev.RestartsExhausted))]
        launch = tl.launch
        ran_out = _restarts_ran_out(tl, a, closing)
        why = Joined((": ", Phrase(cid, str(ran_out[0]["reason"]), ran_out[0]))) if ran_out is not None else ""
        if not why and any(isinstance(e, ev.RestartsExhausted) for e in gave_up):
            why = Joined((": ", Phrase(cid, "none_left")))
        hung = undetected_hang(tl)
        if hung is not None and not before_the_stop(tl, [*gave_up, *closing.failures]):  # stopped, not given up
            return answer(cid, FAIL, "hung_undetected", {"why": hung}, [launch.src if launch is not None else None])
        if gave_up or (launch is not None and launch.exit_code not in (None, 0)):
            shown = [*gave_up[:2], launch.src if launch is not None and launch.exit_code not in (None, 0) else None,
                     *(ran_out[1] if ran_out is not None else ())]
            return answer(cid, FAIL, "gave_up", {"why": why}, shown, final=bool(gave_up))
        if ran_out is not None:
            return answer(cid, FAIL, "gave_up", {"why": why}, ran_out[1])
        return answer(cid, NOT_APPLICABLE, "never_restarted", {})
    problems: list[dict[str, object]] = []  # each: its reason, its values, and whether no later line can undo it
    evidence: list[object] = []
    launcher = list(tl.launcher_events())
    success = [e for e in launcher if isinstance(e, ev.LauncherSucceeded) or (isinstance(e, ev.LauncherExit) and e.code == 0)]
    failed = [e for e in launcher if isinstance(e, ev.LauncherFailed) or (isinstance(e, ev.LauncherExit) and e.code != 0)]
    launch = tl.launch
    lost_node_status = (any((k := a.kind(e)) is not None and k.loses_node for e in a.episodes) and closing is not None and launch is not None
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
        plan = Phrase(cid, "plan_holds", {"fault_at": a.fault_at, "planned": a.planned_faults}) \
            if a.planned_faults > 1 else ""
        problems.append({"reason": "injected_too_often", "count": a.injection_count, "plan": plan, "final": True})
        evidence.extend(a.injection_evidence[:4])
    allowed = min(a.injection_count, a.planned_faults) if a.is_fault_run else 0
    if len(a.failures) > allowed:
        injected = {e.marker.cycle for e in a.episodes} | {closing.cycle if closing is not None else None}
        extra = [c for c in a.failures if c not in injected]
        only = Phrase(cid, "only_one" if allowed <= 1 else "only_some", {"allowed": allowed})
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
        where = Phrase(cid, "in_last_start" if last is not None else "no_app_log",
                       {"source": last.source if last is not None else None})
        problems.append({"reason": "not_done", "where": where})
    else:
        evidence.append(done)
    if problems:
        # what decided it first (the watcher's stop reason): the problems no later line can undo
        ordered = [p for p in problems if p.get("final")] + [p for p in problems if not p.get("final")]
        return answer(cid, FAIL, "not_clean", {"problems": ordered}, evidence,
                      final=any(p.get("final") for p in problems))
    if a.is_fault_run and closing is not None and a.planned_faults > 1:
        shape = "shape_planned"
    elif a.is_fault_run and closing is not None:
        shape = "shape_one"
    elif a.is_fault_run:
        shape = "shape_none_injected"
    else:
        shape = "shape_baseline"
    return answer(cid, PASS, "clean", {"shape": Phrase(cid, shape, {"planned": a.planned_faults,
                                                                    "fault_at": a.fault_at})}, evidence)


def never_fired(a: Analysis) -> list[tuple[int, PlannedFault]]:
    """The planned faults (index, fault) of a run in which some fault fired whose own marker is
    missing: the schedule promised them (run.json's contract), no evidence says they happened.
    A run in which none fired is pre_fault_checkpoint's (never_injected); the faults planned
    after one that poisoned its checkpoint are not owed (the loop it starts ends the job)."""
    if not a.is_fault_run or not a.episodes:
        return []
    fired = {e.marker.fault_index for e in a.episodes}
    poisoning = [e.marker.fault_index for e in a.episodes if a.poisons(e)]
    owed = min(poisoning) if poisoning else len(a.schedule)
    return [(i, f) for i, f in enumerate(a.schedule, start=1) if i not in fired and i <= owed]


def _planned_list(faults: Sequence[tuple[int, PlannedFault]]) -> Phrase | Joined:
    """'fault 2 (kill on rank 0, after-commit) and fault 3 (...)', said from the schedule's facts."""
    items = [Phrase("clean_finish", "planned_fault", {"index": i, "kind": f.kind, "rank": f.rank, "moment": f.moment})
             for i, f in faults]
    if len(items) == 1:
        return items[0]
    return Joined((Joined(tuple(items[:-1]), ", "), Phrase("clean_finish", "and_last", {"last": items[-1]})))


