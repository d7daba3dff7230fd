"""Megatron's checkpoint tiers (harness.vocab.tiers, docs/tiers.md) on built run directories: a fault
after a non-persistent global checkpoint newer than the last persistent one, its restore from
that tier, the reverse order, and a restore that loads an older tier than the newest committed
(the loader bug class of Megatron-Bridge PR #5090), which must fail naming both checkpoints."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.vocab import events as ev
from harness.nemesis import injector as nemesis
from harness.vocab import tiers
from harness.judge.criteria import CHECK_IDS, FAIL, PASS
from harness.read.history import read_history
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

# save_interval 5, non-persistent every 3: p5, np6, np9, p10, np12, ... K=6 is non-persistent,
# newer than persistent 5.
NP_NEWER = Scenario(save_interval=5, non_persistent_interval=3, fault_at=6)
# K=10 is persistent, newer than non-persistent 9.
P_NEWER = Scenario(save_interval=5, non_persistent_interval=3, fault_at=10)


def _statuses(run_dir: Path) -> dict[str, str]:
    verdict = verify_run(run_dir)
    return {c.id: c for c in verdict.criteria}


def test_a_fault_after_a_newer_non_persistent_checkpoint_restored_from_it_qualifies(tmp_path):
    built = rundirs.build(tmp_path / "run", NP_NEWER)
    tl = read_history(built.run_dir)
    replacement = [s for s in tl.starts if s.cycle == 1][0]
    got = tiers.loaded(replacement)
    assert (got.tier, got.iteration) == (tiers.NON_PERSISTENT, 6)
    assert tiers.tier_of_iteration(tl, 6) == tiers.NON_PERSISTENT and tiers.tier_of_iteration(tl, 5) == tiers.PERSISTENT
    assert tl.checkpoints.non_persistent_tracker is not None
    results = _statuses(built.run_dir)
    assert {cid: c.status for cid, c in results.items() if cid in CHECK_IDS} == dict.fromkeys(CHECK_IDS, PASS), \
        [c.detail for c in results.values()]
    assert "Non-persistent checkpoint 6" in results["pre_fault_checkpoint"].detail
    assert any("non_persistent/latest_checkpointed_iteration.txt" in e for e in results["pre_fault_checkpoint"].evidence)
    assert "loaded non-persistent checkpoint 6" in results["optimizer_reload"].detail


def test_the_reverse_order_restores_the_persistent_checkpoint_and_qualifies(tmp_path):
    built = rundirs.build(tmp_path / "run", P_NEWER)
    results = _statuses(built.run_dir)
    assert {cid: c.status for cid, c in results.items() if cid in CHECK_IDS} == dict.fromkeys(CHECK_IDS, PASS), \
        [c.detail for c in results.values()]
    assert "loaded persistent checkpoint 10" in results["optimizer_reload"].detail


def test_a_restore_of_an_older_tier_than_the_newest_committed_fails_naming_both(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(save_interval=5, non_persistent_interval=3, fault_at=6,
                                                     load_iteration=5, load_tier="persistent"))
    results = _statuses(built.run_dir)
    reload = results["optimizer_reload"]
    assert reload.status == FAIL and reload.final, reload.detail
    assert "restored persistent checkpoint 5 (checkpoints/iter_0000005)" in reload.detail, reload.detail
    assert "older than non-persistent checkpoint 6 (checkpoints/non_persistent/iter_0000006)" in reload.detail
    assert "non-persistent checkpoints are older than persistent checkpoint" in reload.detail
    assert any("non-persistent checkpoints are older" in e for e in reload.evidence), reload.evidence
    assert verify_run(built.run_dir).qualified is False


def test_the_non_persistent_trackers_missing_line_is_not_a_start_from_random(tmp_path):
    """Megatron reads the non-persistent tracker first and warns when it is absent ("will not
    load any non-persistent checkpoint"), then loads the persistent one: no start from random."""
    built = rundirs.build(tmp_path / "run", Scenario(save_interval=5, non_persistent_interval=7, fault_at=5))
    tl = read_history(built.run_dir)
    replacement = [s for s in tl.starts if s.cycle == 1][0]
    assert replacement.first(ev.StartedFromRandom) is None
    assert verify_run(built.run_dir).qualified


def test_a_non_persistent_checkpoint_megatron_pruned_since_is_no_failure(tmp_path):
    """cleanup_old_non_persistent_checkpoint keeps one before each save: K (non-persistent)
    is gone once two later non-persistent saves happened."""
    built = rundirs.build(tmp_path / "run", Scenario(save_interval=5, non_persistent_interval=3, fault_at=6,
                                                     train_iters=20))
    import shutil
    shutil.rmtree(built.run_dir / "checkpoints" / "non_persistent" / "iter_0000006")
    results = _statuses(built.run_dir)
    pre = results["pre_fault_checkpoint"]
    assert pre.status == PASS, pre.detail
    assert "Megatron removes older non-persistent checkpoints itself" in pre.detail


# ---------------------------------------------------------------- the nemesis's tiers


def _cmd(*extra: str) -> list[str]:
    return ["--fault", "kill", "--run-dir", "RUN", "--", "train.py", "--save", "x", *extra]


@pytest.mark.parametrize(("fault_after", "extra", "watched"), [
    ("any", (), [tiers.PERSISTENT]),
    ("any", ("--non-persistent-ckpt-type", "global"), [tiers.PERSISTENT, tiers.NON_PERSISTENT]),
    ("persistent", ("--non-persistent-ckpt-type", "global"), [tiers.PERSISTENT]),
    ("non-persistent", ("--non-persistent-ckpt-type=global",), [tiers.NON_PERSISTENT]),
])
def test_the_nemesis_watches_the_trackers_of_the_chosen_tier(tmp_path, fault_after, extra, watched):
    argv = [a.replace("RUN", str(tmp_path)) for a in _cmd(*extra)]
    config, _ = nemesis.parse_command_line(["--fault-after", fault_after, *argv], {"RANK": "1", "WORLD_SIZE": "2"})
    assert [t for t, _d in config.watch_dirs] == watched
    if tiers.NON_PERSISTENT in watched:
        assert dict(config.watch_dirs)[tiers.NON_PERSISTENT] == tmp_path / "checkpoints" / "non_persistent"


def test_the_nemesis_refuses_non_persistent_without_that_tier(tmp_path):
    argv = [a.replace("RUN", str(tmp_path)) for a in _cmd()]
    with pytest.raises(nemesis.NemesisError, match="--non-persistent-ckpt-type global"):
        nemesis.parse_command_line(["--fault-after", "non-persistent", *argv], {"RANK": "1", "WORLD_SIZE": "2"})


def test_the_first_tracker_past_the_baseline_fires_whichever_tier_it_is(tmp_path):
    persistent, np_dir = tmp_path / "p", tmp_path / "p" / "non_persistent"
    np_dir.mkdir(parents=True)
    (persistent / "latest_checkpointed_iteration.txt").write_text("4")
    (np_dir / "latest_checkpointed_iteration.txt").write_text("6")
    trackers = [persistent / "latest_checkpointed_iteration.txt", np_dir / "latest_checkpointed_iteration.txt"]
    assert nemesis.watch_trackers(trackers, 4, 0.01, threading.Event()) == (6, trackers[1])
    assert nemesis.watch_trackers(trackers, 2, 0.01, threading.Event()) == (4, trackers[0])


def test_spec_refuses_fault_after_non_persistent_without_the_tier():
    problem = tiers.fault_after_problem("non-persistent", ("--non-persistent-ckpt-type", "local"))
    assert problem is not None and "'local'" in problem
    assert tiers.fault_after_problem("non-persistent", ("--non-persistent-ckpt-type", "global")) is None
    assert tiers.fault_after_problem("any", ()) is None


def test_megatron_cpu_refuses_what_cpu_cannot_run_with_megatrons_own_error():
    from harness.workloads import megatron_cpu

    problems = megatron_cpu.extra_arg_problems(("--non-persistent-ckpt-type=local", "--inprocess-restart"))
    assert any("Cowardly refusing to serialize non-leaf tensor" in p and "GPU" in p for p in problems), problems
    assert any("CUDA is not initialized" in p for p in problems), problems
    assert megatron_cpu.extra_arg_problems(("--non-persistent-ckpt-type", "global")) == []


# ---------------------------------------------------------------- a custom --non-persistent-global-ckpt-dir


def test_a_custom_non_persistent_directory_is_read_from_the_arguments_table(tmp_path):
    """With `--non-persistent-global-ckpt-dir` Megatron saves, tracks and loads the tier there,
    not under <save>/non_persistent: history must look there too, or K is "not on disk"."""
    built = rundirs.build(tmp_path / "run", Scenario(save_interval=5, non_persistent_interval=3, fault_at=6,
                                                     np_dir="np_ckpts"))
    tl = read_history(built.run_dir)
    assert tl.checkpoints.non_persistent_path == "np_ckpts"
    assert tl.checkpoints.non_persistent_tracker is not None
    assert tiers.tier_of_iteration(tl, 6) == tiers.NON_PERSISTENT
    assert tiers.on_disk(tl.checkpoints, 6, tiers.NON_PERSISTENT).rel == "np_ckpts/iter_0000006"
    results = _statuses(built.run_dir)
    assert {cid: c.status for cid, c in results.items() if cid in CHECK_IDS} == dict.fromkeys(CHECK_IDS, PASS), \
        [c.detail for c in results.values()]
    assert any("np_ckpts/latest_checkpointed_iteration.txt" in e for e in results["pre_fault_checkpoint"].evidence)


def test_an_older_tier_restore_names_the_custom_directory(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(save_interval=5, non_persistent_interval=3, fault_at=6,
                                                     load_iteration=5, load_tier="persistent", np_dir="np_ckpts"))
    reload = _statuses(built.run_dir)["optimizer_reload"]
    assert reload.status == FAIL and reload.final, reload.detail
    assert "older than non-persistent checkpoint 6 (np_ckpts/iter_0000006)" in reload.detail, reload.detail


def test_a_missing_tracker_in_the_custom_directory_is_not_a_start_from_random(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(save_interval=5, non_persistent_interval=7, fault_at=5,
                                                     np_dir="np_ckpts"))
    tl = read_history(built.run_dir)
    replacement = [s for s in tl.starts if s.cycle == 1][0]
    assert replacement.first(ev.StartedFromRandom) is None
    assert verify_run(built.run_dir).qualified


def test_run_json_workload_arguments_name_the_custom_directory_when_no_table_does():
    assert tiers.custom_non_persistent_dir(("--non-persistent-global-ckpt-dir", "/x/np")) == "/x/np"
    assert tiers.custom_non_persistent_dir(("--non-persistent-global-ckpt-dir=None",)) is None
    assert tiers.non_persistent_dir(("--non-persistent-ckpt-type", "global", "--non-persistent-global-ckpt-dir=/y"),
                                    Path("/s")) == Path("/y")
