"""Received and reused run directories (issue 24, class 8): a symlinked checkpoints/ is not
followed; a copy whose run.json records no work_dir is judged against its own checkpoints,
with a note; `plan` / `run` refuse a run directory that an earlier run left logs and
checkpoints in; pre_fault_checkpoint reads Megatron's tracker; a launcher whose restarts ran
out fails clean_finish even when its last lines are lost."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.plan import commands as planmod
from harness.plan import resolve
from harness.judge.criteria import FAIL, PASS
from harness.launch.prepare import prepare, release
from harness.plan.spec import SpecError
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

TRACKER = "latest_checkpointed_iteration.txt"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rundirs.build(tmp_path_factory.mktemp("received") / "good", Scenario()).run_dir


@pytest.fixture
def good(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "runs" / "good", symlinks=True))


def test_the_good_run_qualifies_with_the_tracker_as_evidence(good):
    verdict = verify_run(good, picture=False)
    assert verdict.qualified
    pre = verdict.criterion("pre_fault_checkpoint")
    assert any(f"checkpoints/{TRACKER}:0: 30" == e for e in pre.evidence), pre.evidence
    assert "the tracker agree" in pre.detail


# ---------------------------------------------------------------- (a) a symlinked checkpoints/


def test_a_symlinked_checkpoints_directory_is_not_followed(good, tmp_path):
    outside = tmp_path / "somewhere-else"
    shutil.move(str(good / "checkpoints"), str(outside))
    (good / "checkpoints").symlink_to(outside)
    verdict = verify_run(good, picture=False)
    lines = [e for c in verdict.criteria for e in c.evidence]
    assert not any("iter_0000010/metadata.json" in e or TRACKER in e for e in lines), lines
    assert any("checkpoints is a symbolic link" in n and "never followed" in n for n in verdict.notes), verdict.notes
    assert "symbolic link, not followed" in verdict.criterion("pre_fault_checkpoint").detail


# ---------------------------------------------------------------- (b) a copy without work_dir


def test_a_copy_without_work_dir_is_judged_against_its_own_checkpoints(good, tmp_path):
    spec = json.loads((good / "run.json").read_text())["spec"]
    assert "work_dir" not in spec and spec["checkpoint_dir"].endswith("/good/checkpoints")
    copy = Path(shutil.copytree(good, tmp_path / "copied" / "good", symlinks=True))
    (copy / "checkpoints" / "iter_0000010" / "metadata.json").unlink()  # the copy's own checkpoint 10 is incomplete
    assert verify_run(good, picture=False).qualified  # the original is still there, intact
    verdict = verify_run(copy, picture=False)
    pre = verdict.criterion("pre_fault_checkpoint")
    assert pre.status == FAIL and "checkpoints/iter_0000010 has no metadata.json" in pre.detail
    # the recorded directory (the original's checkpoints) lies outside the copy: never read, and said so
    assert any(f"checkpoint directory {spec['checkpoint_dir']} (run.json spec.checkpoint_dir) lies outside the run "
               "directory and was not read" in n and "--read-dir" in n for n in verdict.notes), verdict.notes


# ---------------------------------------------------------------- (c) an earlier run's leftovers


def plan_argv(work: Path, *more: str) -> list[str]:
    return ["plan", "--workload", "reference", "--work-dir", str(work), "--run-id", "mine", *more]


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("left", ["checkpoints", "logs"])
def test_plan_refuses_a_run_directory_with_an_earlier_runs_logs_or_checkpoints(tmp_path, capsys, left):
    root = tmp_path / "work" / "runs" / "mine"
    if left == "checkpoints":
        (root / "checkpoints" / "iter_0000005").mkdir(parents=True)
        (root / "checkpoints" / TRACKER).write_text("5")
    else:
        (root / "logs").mkdir(parents=True)
        (root / "logs" / "train_cycle_cycle0.log").write_text("0: training ...\n")
    before = snapshot(root)
    assert cli.main(plan_argv(tmp_path / "work")) == 2
    err = capsys.readouterr().err
    assert f"run directory {root} already holds {left}/" in err and "use a new --run-id" in err
    assert "--checkpoint-dir=<the copy>" in err and f"mv {root} {root}.old" in err
    assert snapshot(root) == before and not (root / "run.json").exists()
    # the claim's own check, under the lock, says the same (a race cannot slip past validate)
    flags = {"workload": "reference", "work_dir": tmp_path / "other", "run_id": "mine", "fault": "none"}
    spec, target, _ = resolve.resolve_spec(flags, (), {})
    plan = planmod.build(spec, target)
    shutil.copytree(root, plan.layout.root)
    with pytest.raises(SpecError, match="already holds"):
        prepare(plan, dry_run=False)
    release(plan.layout)


def test_a_dry_run_directory_is_still_reused_by_the_real_plan(tmp_path, capsys):
    assert cli.main(plan_argv(tmp_path / "work", "--dry-run", "1")) == 0
    assert cli.main(plan_argv(tmp_path / "work")) == 0  # its empty directories are no leftovers
    capsys.readouterr()


# ---------------------------------------------------------------- (d) the tracker


@pytest.mark.parametrize("tracker, said", [
    ("5", f"{TRACKER} names iteration 5, below checkpoint 10"),
    ("release", "holds 'release', not an iteration number"),
    (None, f"has no readable {TRACKER}"),
])
def test_pre_fault_checkpoint_consults_the_tracker(good, tracker, said):
    path = good / "checkpoints" / TRACKER
    path.unlink()
    if tracker is not None:
        path.write_text(tracker)
    pre = verify_run(good, picture=False).criterion("pre_fault_checkpoint")
    assert pre.status == FAIL and said in pre.detail, pre
    assert any(e.startswith(f"checkpoints/{TRACKER}:0: ") for e in pre.evidence), pre.evidence


def test_a_tracker_that_is_a_link_is_not_read(good, tmp_path):
    (tmp_path / "elsewhere.txt").write_text("30")
    path = good / "checkpoints" / TRACKER
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.txt")
    pre = verify_run(good, picture=False).criterion("pre_fault_checkpoint")
    assert pre.status == FAIL and f"has no readable {TRACKER}" in pre.detail


# ---------------------------------------------------------------- (e) restarts exhausted


@pytest.mark.parametrize("nvrx", ["0.7.0", "0.4.1"])
@pytest.mark.parametrize("budget", [None, 0])
def test_restarts_exhausted_fail_clean_finish_even_without_the_give_up_line(tmp_path, nvrx, budget):
    """NVRx 0.7.0's log server loses the launcher's last lines, and a user's own run has no
    launch.json: the failed cycle with no restart announced (or run.json's spent budget) still
    says the restarts ran out."""
    run = rundirs.build(tmp_path / "run", Scenario(restarts_exhausted=True, give_up_logged=False, launch_json=False,
                                                   nvrx=nvrx)).run_dir
    if budget is not None:
        record = json.loads((run / "run.json").read_text())
        record["spec"]["max_restarts"] = budget
        (run / "run.json").write_text(json.dumps(record))
    verdict = verify_run(run, picture=False)
    assert verdict.criterion("replacement_cycle").status == FAIL
    result = verdict.criterion("clean_finish")
    assert result.status == FAIL and "restarts ran out" in result.detail, result
    if budget is not None:
        assert "--max-restarts 0 allows 0 restart(s) and 1 cycle(s) failed" in result.detail
    assert result.evidence and not result.final  # a live run's next line may still be the restart


def test_the_give_up_line_says_the_restarts_ran_out_too(tmp_path):
    run = rundirs.build(tmp_path / "run", Scenario(restarts_exhausted=True)).run_dir
    result = verify_run(run, picture=False).criterion("clean_finish")
    assert result.status == FAIL and "gave up" in result.detail and "restarts ran out" in result.detail
    assert result.final


def test_a_run_that_restarted_is_not_called_exhausted(good):
    assert verify_run(good, picture=False).criterion("clean_finish").status == PASS
