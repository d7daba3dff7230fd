"""The five criteria: each realistic broken run fails exactly the criterion it breaks; the
criteria a missing premise makes moot are not_applicable, all others pass."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from harness.judge import criteria, five_criteria
from harness.vocab import events as ev
from harness.judge.criteria import CHECK_IDS, FAIL, NOT_APPLICABLE, PASS, UNKNOWN, analyze, evaluate
from harness.judge.sentences import render
from harness.read.history import read_history
from harness.report.verify import verify_run, verify_timeline
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

NA = NOT_APPLICABLE
SINGLE_LOG = dict(per_cycle_logs=False, run_json=False, launch_json=False)
EVIDENCE_LINE = re.compile(r"^[^\s:]+:\d+: ")

# (name, scenario, statuses that differ from pass, a phrase the failing detail must hold)
CASES = [
    ("good kill, NVRx 0.7.0", Scenario(), {}, None),
    ("good kill, NVRx 0.4.1", Scenario(nvrx="0.4.1"), {}, None),
    ("good hang, NVRx 0.7.0", Scenario(fault="hang"), {}, None),
    ("good hang, NVRx 0.4.1", Scenario(fault="hang", nvrx="0.4.1"), {}, None),
    ("user sbatch, one log, NVRx 0.4.1", Scenario(nvrx="0.4.1", **SINGLE_LOG), {}, None),
    ("user sbatch, one log, NVRx 0.7.0 hang", Scenario(fault="hang", **SINGLE_LOG), {}, None),
    ("16 ranks, padded prefixes", Scenario(world=16, fault_rank=5), {}, None),
    ("Megatron <= 0.18 save lines", Scenario(old_save_format=True), {}, None),
    ("in-flight save left uncommitted, later overwritten", Scenario(uncommitted=(5,)), {}, None),
    ("fault none", Scenario(fault="none"),
     {"pre_fault_checkpoint": NA, "replacement_cycle": NA, "optimizer_reload": NA, "optimizer_state": NA}, None),
    ("restart started from random", Scenario(restart_from_random=True),
     {"optimizer_reload": FAIL, "optimizer_state": NA}, "started from random instead of loading checkpoint 10"),
    ("restart with --no-load-optim", Scenario(no_load_optim=True),
     {"optimizer_reload": FAIL}, "--no-load-optim"),
    ("Adam step reset at the restore, every log line present", Scenario(optimizer_steps="reset"),
     {"optimizer_state": FAIL}, "holds Adam's step counter 5 in optimizer.distributed.dp_group_idx_0.optimizer "
                                "(param_groups[*].step), but an optimizer that continued from checkpoint 10 has taken "
                                "15 steps at iteration 15: it counts only the 5 steps since the restore"),
    ("Adam step counter shared by 16 parameters after the restore", Scenario(optimizer_steps="ahead"),
     {"optimizer_state": FAIL}, "holds Adam's step counter 80"),
    ("no step counter recorded (a distributed optimizer record without its step object)",
     Scenario(optimizer_steps="absent"), {"optimizer_state": NA}, "records no Adam step counter"),
    ("plain optimizer: common_step continued in Megatron's common state",
     Scenario(distributed_optimizer=False, optimizer_record="plain"), {"optimizer_state": PASS},
     "holds Adam's step counter 15 in common_state/shard_0_1 (optimizer.optimizer.state.common_step), one step per "
     "iteration continued from checkpoint 10"),
    ("plain optimizer: common_step reset at the restore",
     Scenario(distributed_optimizer=False, optimizer_record="plain", optimizer_steps="reset"),
     {"optimizer_state": FAIL}, "holds Adam's step counter 5 in common_state/shard_0_1 "
                                "(optimizer.optimizer.state.common_step), but an optimizer that continued"),
    ("plain optimizer saved at step 0 or by a Megatron without common_step: no counter",
     Scenario(distributed_optimizer=False, optimizer_record="plain", optimizer_steps="absent"),
     {"optimizer_state": NA}, "neither a common_step nor a param group step in its common state"),
    ("chained optimizer (two plain optimizers): both steps continued",
     Scenario(distributed_optimizer=False, optimizer_record="chained"), {"optimizer_state": PASS},
     "holds Adam's step counter 15 in common_state/shard_0_1 (optimizer[0].optimizer.state.common_step, "
     "optimizer[1].optimizer.state.common_step)"),
    ("chained optimizer: steps reset at the restore",
     Scenario(distributed_optimizer=False, optimizer_record="chained", optimizer_steps="reset"),
     {"optimizer_state": FAIL}, "it counts only the 5 steps since the restore"),
    ("restart loaded an older checkpoint", Scenario(load_iteration=5),
     {"optimizer_reload": FAIL}, "loaded checkpoint 5, an older one than 10"),
    ("checkpoint saved without optimizer state", Scenario(optimizer_in_checkpoints=False),
     {"optimizer_reload": FAIL, "optimizer_state": FAIL}, "holds no optimizer tensors"),
    ("restarts exhausted, NVRx 0.7.0", Scenario(restarts_exhausted=True),
     {"replacement_cycle": FAIL, "optimizer_reload": NA, "later_checkpoint": NA, "clean_finish": FAIL,
      "optimizer_state": NA}, "started no replacement workers"),
    ("restarts exhausted, NVRx 0.4.1", Scenario(restarts_exhausted=True, nvrx="0.4.1"),
     {"replacement_cycle": FAIL, "optimizer_reload": NA, "later_checkpoint": NA, "clean_finish": FAIL,
      "optimizer_state": NA}, "restarts were exhausted"),
    ("second injection and second failed cycle", Scenario(second_failure_at=17, second_injection=True),
     {"clean_finish": FAIL}, "the fault was injected 2 times; 2 cycles failed (0, 1)"),
    ("in-restore: two planned injections, two markers, two failed cycles",
     Scenario(second_failure_at=17, second_injection=True, second_marker=True, moment="in-restore"), {}, None),
    ("in-restore planned, second failure without its marker",
     Scenario(second_failure_at=17, moment="in-restore"), {"clean_finish": FAIL}, "2 cycles failed (0, 1)"),
    ("second failed cycle without injection, NVRx 0.4.1", Scenario(second_failure_at=17, nvrx="0.4.1"),
     {"clean_finish": FAIL}, "2 cycles failed (0, 1)"),
    ("no checkpoint after the restore", Scenario(saves_after_restore=False),
     {"later_checkpoint": FAIL, "optimizer_state": NA}, "no checkpoint beyond 10 was committed"),
    ("stopped at an earlier iteration with exit 0", Scenario(stop_at=20),
     {"later_checkpoint": FAIL}, "training stopped at iteration 20 of 30"),
    ("exit 0 without [after training is done]", Scenario(training_done=False),
     {"clean_finish": FAIL}, "never printed '[after training is done]'"),
    ("hang whose only timeout precedes the injection, NVRx 0.7.0",
     Scenario(fault="hang", timeout_ranks=(0,), timeout_after_ms=-3000),
     {"replacement_cycle": FAIL}, "stamped before the injection"),
    ("hang whose only timeout precedes the injection, NVRx 0.4.1",
     Scenario(fault="hang", nvrx="0.4.1", timeout_ranks=(0,), timeout_after_ms=-3000),
     {"replacement_cycle": FAIL}, "stamped before the injection"),
    ("hang without any timeout message", Scenario(fault="hang", timeout_ranks=()),
     {"replacement_cycle": FAIL}, "no section or out-of-section timeout message"),
    ("fault requested but never fired", Scenario(marker=False),
     {"pre_fault_checkpoint": FAIL, "replacement_cycle": NA, "optimizer_reload": NA, "optimizer_state": NA},
     "never injected"),
    ("checkpoint K without metadata.json", Scenario(uncommitted=(10,)),
     {"pre_fault_checkpoint": FAIL}, "iter_0000010 has no metadata.json"),
]


@pytest.mark.parametrize("scenario, broken, phrase", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_run_fails_exactly_the_criterion_it_breaks(tmp_path, scenario, broken, phrase):
    built = rundirs.build(tmp_path / "run", scenario)
    verdict = verify_run(built.run_dir)
    statuses = {c.id: c.status for c in verdict.criteria}
    assert list(statuses) == list(CHECK_IDS)
    # a run.json without a contract (a user's own script) plans no launcher to compare with
    planned = scenario.run_json and scenario.contract
    expected = {**dict.fromkeys(CHECK_IDS, PASS), criteria.LAUNCHER_IDENTITY: PASS if planned else NA, **broken}
    assert statuses == expected, [c.detail for c in verdict.criteria]
    assert verdict.qualified is (FAIL not in broken.values())
    for c in verdict.criteria:
        assert c.detail.endswith(".") and "\n" not in c.detail
        assert all(EVIDENCE_LINE.match(line) for line in c.evidence), c.evidence
        if c.status in (PASS, FAIL):
            assert c.evidence, f"{c.id} {c.status} without evidence"
    failed = [c for c in verdict.criteria if c.status == FAIL]
    if phrase is not None:  # the failed criterion's sentence, else the one the case is about
        shown = failed or [c for c in verdict.criteria if c.id in broken]
        assert phrase in shown[0].detail, shown[0].detail


def test_never_fired_with_the_real_nemesis_exit_status(tmp_path):
    """The nemesis exits 3 when its fault never happened: the launcher restarts until it gives up."""
    built = rundirs.build(tmp_path / "run", Scenario(marker=False, never_fired_exit3=True))
    verdict = verify_run(built.run_dir)
    first = verdict.criterion("pre_fault_checkpoint")
    assert first.status == FAIL and "no checkpoint newer than the startup baseline" in first.detail
    assert verdict.criterion("clean_finish").status == FAIL
    assert not verdict.qualified


def test_fault_override_and_marker_mismatch(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario())
    tl = read_history(built.run_dir)
    as_none = verify_timeline(tl, "none")
    assert as_none.fault == "none" and as_none.fault_how == "--fault"
    assert "an injection marker exists although the fault is none" in as_none.criterion("clean_finish").detail
    as_hang = verify_timeline(tl, "hang")
    assert as_hang.criterion("pre_fault_checkpoint").status == FAIL
    assert "verify with --fault kill" in as_hang.criterion("pre_fault_checkpoint").detail


def test_fault_resolution_order(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(fault="hang", run_json=False, checkpoints=False))
    tl = read_history(built.run_dir)
    assert criteria.resolve_fault(tl, None) == ("hang", "the injection marker (no run.json)")
    assert criteria.resolve_fault(tl, "kill") == ("kill", "--fault")
    no_marker = dataclasses.replace(tl, injections=())
    assert criteria.resolve_fault(no_marker, None) == ("hang", "the nemesis's injection line (no run.json, no marker)")
    bare = dataclasses.replace(no_marker, starts=())
    assert criteria.resolve_fault(bare, None) == ("none", "default: no run.json fault and no injection marker")
    with pytest.raises(ValueError, match="pass --fault none|kill|hang"):
        criteria.resolve_fault(tl, "crash")


def _add_launcher_event(tl: ev.Timeline, event: ev.Event) -> ev.Timeline:
    return dataclasses.replace(tl, events=tl.events + (event,))


def test_no_progress_stop_and_early_stop_fail_clean_finish(tmp_path):
    tl = read_history(rundirs.build(tmp_path / "run", Scenario()).run_dir)
    src = ev.Src("logs/launcher.log", 99, "... Progress tracker detected no progress across restarts ...")
    stopped = _add_launcher_event(tl, ev.NoProgressStop(src=src, message="no progress"))
    result = verify_timeline(stopped).criterion("clean_finish")
    assert result.status == FAIL and "lack of progress" in result.detail and str(src) in result.evidence
    early = dataclasses.replace(tl, launch=dataclasses.replace(tl.launch, stopped_early="criterion failed: replacement_cycle"))
    assert "stopped the launch early" in verify_timeline(early).criterion("clean_finish").detail


def test_exit_zero_alone_never_passes_clean_finish(tmp_path):
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(training_done=False)).run_dir)
    assert tl.launch.exit_code == 0 and tl.of(ev.LauncherSucceeded)
    assert verify_timeline(tl).criterion("clean_finish").status == FAIL


def test_missing_logs_leave_criteria_unknown_not_passed(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(checkpoints=False))
    tl = read_history(built.run_dir)
    no_app = dataclasses.replace(tl, starts=(), events=tuple(e for e in tl.events if not isinstance(e, ev.AppEvent)))
    verdict = verify_timeline(no_app)
    assert verdict.criterion("pre_fault_checkpoint").status == UNKNOWN
    assert not verdict.qualified
    no_launcher = dataclasses.replace(tl, sources=tuple(s for s in tl.sources if "launcher" not in s.roles),
                                      events=tuple(e for e in tl.events if not isinstance(e, ev.LauncherEvent)))
    by_cycle_infos = verify_timeline(no_launcher).criterion("replacement_cycle")
    assert by_cycle_infos.status == PASS and "cycle_infos/cycle_info..0.1:1:" in " ".join(by_cycle_infos.evidence)
    assert verify_timeline(no_launcher, "hang").criterion("replacement_cycle").status == UNKNOWN  # no timeouts to see
    nothing = dataclasses.replace(no_launcher, cycle_infos=())
    assert verify_timeline(nothing).criterion("replacement_cycle").status == UNKNOWN


def test_a_crashing_checker_is_unknown_and_disqualifies(tmp_path):
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(checkpoints=False)).run_dir)
    a = analyze(tl)

    def boom(_j):
        raise KeyError("iteration")

    result = render(criteria.check_safe("later_checkpoint", boom, criteria.Judging(tl, a, a.closing)))
    assert (result.status, result.detail) == (UNKNOWN, "The checker failed: KeyError: 'iteration'")
    results = (*evaluate(tl, a)[:3], result, *evaluate(tl, a)[4:])
    assert not criteria.qualified(results)
    assert criteria.qualified(evaluate(tl, a))


def test_expected_k_follows_every_commit_line_of_the_failed_cycle(tmp_path):
    """The nemesis read 5 from the tracker and stamped its marker, but Megatron's commit line of
    10 comes in the failed cycle, before the restart (the save's commit ended between the
    marker and the fault, as in CI's campaign where the marker came 8 ms before the commit):
    the tracker named 10 at the restart, so the replacement had to load 10. The order of the
    lines decides, so a log whose clock offset is only assumed is judged the same way."""
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(checkpoints=False)).run_dir)
    tl = dataclasses.replace(tl, injections=(dataclasses.replace(tl.injections[0], iteration=5),))
    assumed = dataclasses.replace(tl, offset_how="assumed: the verifying machine's local offset")
    for timeline in (tl, assumed):
        a = analyze(timeline)
        assert a.closing.expected_k == 10 and any("expecting 10" in n for n in a.notes), a.notes
        result = criteria.check("optimizer_reload", timeline, a)
        assert result.status == PASS, result.detail


def test_a_load_older_than_a_commit_line_of_the_failed_cycle_fails(tmp_path):
    """The marker names 5 and the failed cycle committed 10 before the restart: a replacement
    that loads 5 ignored the tracker's 10."""
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(checkpoints=False, load_iteration=5)).run_dir)
    tl = dataclasses.replace(tl, injections=(dataclasses.replace(tl.injections[0], iteration=5),))
    result = criteria.check("optimizer_reload", tl, analyze(tl))
    assert result.status == FAIL and "an older one than 10" in result.detail, result.detail


def test_a_load_newer_than_every_commit_line_fails(tmp_path):
    """Checkpoint 15 was never committed before the restart (no commit line in the failed
    cycle, no marker naming it): loading it is loading a partial or foreign checkpoint."""
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(checkpoints=False, load_iteration=15)).run_dir)
    a = analyze(tl)
    assert a.closing.expected_k == 10
    result = criteria.check("optimizer_reload", tl, a)
    assert result.status == FAIL and "a newer one than 10" in result.detail, result.detail


@pytest.mark.parametrize("timeout, injected, names", [
    (dict(rank=1, local_rank=None, node="vm"), dict(rank=1, local_rank=1, host="vm"), True),  # 0.4.1: global rank
    (dict(rank=None, local_rank=1, node="n2"), dict(rank=9, local_rank=1, host="n2.cluster"), True),  # 0.7.0: local + node
    (dict(rank=None, local_rank=1, node="n1"), dict(rank=9, local_rank=1, host="n2"), False),  # same local rank, other node
    (dict(rank=None, local_rank=0, node="vm"), dict(rank=1, local_rank=1, host="vm"), False),
    (dict(rank=None, local_rank=None, node="vm"), dict(rank=1, local_rank=1, host="vm"), False),
])
def test_which_timeout_names_the_injected_rank(timeout, injected, names):
    src = ev.Src("logs/launcher.log", 1, "x")
    t = ev.RankTimeout(src=src, kind="section", section="step", elapsed=14.0, timeout=10.0, **timeout)
    inj = ev.Injection(src=src, fault="hang", signal="SIGSTOP", cycle=0, iteration=10, baseline_iteration=0, pid=1,
                       **injected)
    assert five_criteria._names_injected_rank(t, inj) is names


def test_plain_optimizer_reload_is_evidenced_by_its_scheduler_lines(tmp_path):
    """Without --use-distributed-optimizer there is no "Loading distributed optimizer" line;
    the scheduler, loaded under the same condition, is the log's evidence."""
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(checkpoints=False)).run_dir)
    r = tl.starts[1]
    events = tuple(e for e in r.events if not isinstance(e, ev.OptimizerLoaded))
    args = r.arguments
    plain_args = dataclasses.replace(args, args=tuple(
        dataclasses.replace(a, value="False") if a.name == "use_distributed_optimizer" else a for a in args.args))
    no_line = dataclasses.replace(r, events=events)
    tl_no_line = dataclasses.replace(tl, starts=(tl.starts[0], no_line))
    assert criteria.check("optimizer_reload", tl_no_line, analyze(tl_no_line)).status == FAIL
    plain = dataclasses.replace(r, events=tuple(plain_args if e is args else e for e in events))
    tl_plain = dataclasses.replace(tl, starts=(tl.starts[0], plain))
    result = criteria.check("optimizer_reload", tl_plain, analyze(tl_plain))
    assert result.status == PASS and "scheduler (plain optimizer)" in result.detail


def test_pruned_later_checkpoint_dirs_do_not_contradict_the_log(tmp_path):
    import shutil

    built = rundirs.build(tmp_path / "run", Scenario())
    for it in (15, 20, 25):
        shutil.rmtree(built.run_dir / "checkpoints" / f"iter_{it:07d}")
    assert verify_run(built.run_dir).criterion("later_checkpoint").status == PASS
    (built.run_dir / "checkpoints" / "iter_0000030" / "metadata.json").unlink()  # there, but never committed
    result = verify_run(built.run_dir).criterion("later_checkpoint")
    assert result.status == FAIL and "the final checkpoint 30" in result.detail


@pytest.mark.parametrize("nvrx", ["0.7.0", "0.4.1"])
def test_launcher_that_gave_up_fails_clean_finish(tmp_path, nvrx):
    """No replacement and a launcher that gave up: the job ended in failure, so clean_finish
    fails (it is not merely 'not applicable') and says why."""
    built = rundirs.build(tmp_path / "run", Scenario(restarts_exhausted=True, nvrx=nvrx))
    result = verify_run(built.run_dir).criterion("clean_finish")
    assert result.status == FAIL and "gave up" in result.detail, result
    assert result.evidence


# ---------------------------------------------------------------- hang: whichever monitor fires first

HANG_ORDERS = {
    # ranks whose monitors time out, in the order they fire (rank 1 is the stopped one)
    "stopped rank first": ((1, 0), "naming the stopped rank 1"),
    "peer first": ((0, 1), "naming the stopped rank 1"),
    "peer only (group stopped before the stopped rank's monitor fired)": ((0,), "timeout of rank(s) 0"),
}


@pytest.mark.parametrize("nvrx", ["0.7.0", "0.4.1"])
@pytest.mark.parametrize("order", sorted(HANG_ORDERS))
def test_a_hang_qualifies_whichever_monitor_fires_first(tmp_path, order, nvrx):
    """Replayed run dirs for each order of timeouts: the verdict is the same, and it names
    the stopped rank from the marker when its own monitor never reported."""
    ranks, phrase = HANG_ORDERS[order]
    built = rundirs.build(tmp_path / "run", Scenario(fault="hang", nvrx=nvrx, timeout_ranks=ranks))
    verdict = verify_run(built.run_dir)
    c = verdict.criterion("replacement_cycle")
    assert (c.status, verdict.qualified) == (PASS, True), c.detail
    assert phrase in c.detail and "stopped rank 1" in c.detail, c.detail
    assert any("fault_injected.json" in e for e in c.evidence), c.evidence


def test_a_peer_timeout_without_a_sigstop_marker_proves_nothing(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(fault="hang", timeout_ranks=(0,)))
    marker = built.run_dir / "fault_injected.json"
    record = json.loads(marker.read_text())
    marker.write_text(json.dumps({**record, "signal": "SIGTERM"}))
    c = verify_run(built.run_dir).criterion("replacement_cycle")
    assert c.status == FAIL and "not SIGSTOP" in c.detail, c.detail


def test_a_save_finished_without_its_commit_line_before_the_restart_is_the_one_to_load(tmp_path):
    """CI's run K: the commit of 4 came after the save of 8 had begun (Megatron finalizes an async
    save at a later step), the kill after 4 landed while 8 was finished, and the killed rank's
    commit line of 8 never reached the log. The replacement loaded 8, complete on disk: the
    tracker named it at the restart, so loading it is right; the same load of an unfinished
    checkpoint (no metadata.json) still fails."""
    built = rundirs.build(tmp_path / "run", Scenario(finished_unlogged=15, load_iteration=15))
    tl = read_history(built.run_dir)
    a = analyze(tl)
    assert a.closing.expected_k == 15 and any("no commit line of it was logged" in n for n in a.notes), a.notes
    assert criteria.check("optimizer_reload", tl, a).status == PASS
    assert criteria.qualified(evaluate(tl, a)), [(r.id, r.status, r.detail) for r in evaluate(tl, a) if r.status != PASS]

    cut = read_history(rundirs.build(tmp_path / "cut", Scenario(finished_unlogged=15, load_iteration=15,
                                                                  uncommitted=(15,))).run_dir)
    result = criteria.check("optimizer_reload", cut, analyze(cut))
    assert result.status == FAIL and "a newer one than 10" in result.detail, result.detail
