"""Nothing the user owns is touched: a checkpoint directory holding iterations newer than its
tracker is refused before launch (the run would save over them and delete their files), and
one run ID is one run: of several `plan` / `run` started at the same instant with the same ID,
exactly one claims the run directory."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from fixtures.processes import run_in_session
from harness import cli
from harness.plan import resolve
from harness.plan import commands as planmod
from harness.launch.prepare import CLAIM_NAME, prepare, release
from harness.plan.spec import SpecError


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def user_checkpoints(tmp_path: Path, tracker: str | None, iterations: tuple[int, ...]) -> Path:
    ckpt = tmp_path / "my-checkpoints"
    ckpt.mkdir()
    if tracker is not None:
        (ckpt / "latest_checkpointed_iteration.txt").write_text(tracker)
    for it in iterations:
        d = ckpt / f"iter_{it:07d}"
        d.mkdir()
        (d / "__0_0.distcp").write_bytes(f"weights of {it}".encode())
        (d / "metadata.json").write_text("{}")
    return ckpt


def plan_argv(tmp_path: Path, *more: str) -> list[str]:
    return ["plan", "--workload", "reference", "--work-dir", str(tmp_path / "work"), "--run-id", "mine", *more]


@pytest.mark.parametrize("tracker,newer", [("10", ["iter_0000015", "iter_0000020"]),
                                           (None, ["iter_0000005", "iter_0000010", "iter_0000015", "iter_0000020"])])
def test_a_checkpoint_dir_with_iterations_newer_than_its_tracker_is_refused(tmp_path, capsys, tracker, newer):
    ckpt = user_checkpoints(tmp_path, tracker, (5, 10, 15, 20))
    before = snapshot(ckpt)
    assert cli.main(plan_argv(tmp_path, "--checkpoint-dir", str(ckpt), "--train-iters", "100")) == 2
    err = capsys.readouterr().err
    assert f"holds {', '.join(newer)}, " in err and ("newer than its tracker's iteration 10" if tracker else
                                                      "but no tracker") in err
    assert "move them out" in err and f"mv {ckpt}/{newer[0]}" in err
    assert snapshot(ckpt) == before and not (tmp_path / "work" / "runs" / "mine").exists()


def test_a_checkpoint_dir_whose_tracker_names_the_newest_is_accepted(tmp_path, capsys):
    ckpt = user_checkpoints(tmp_path, "20", (5, 10, 15, 20))
    assert cli.main(plan_argv(tmp_path, "--checkpoint-dir", str(ckpt), "--train-iters", "100")) == 0
    assert "resuming: checkpoint iteration 20" in capsys.readouterr().out


def test_nvrx_qual_run_refuses_them_before_anything_starts(tmp_path):
    ckpt = user_checkpoints(tmp_path, "10", (10, 15))
    before = snapshot(ckpt)
    argv = [sys.executable, "-m", "harness", "run", "--workload", "reference", "--work-dir", str(tmp_path / "work"),
            "--run-id", "mine", "--checkpoint-dir", str(ckpt), "--train-iters", "100"]
    done = run_in_session(argv, timeout_s=120)
    assert done.returncode == 2, done.stderr
    assert "iter_0000015, newer than its tracker's iteration 10" in done.stderr
    assert snapshot(ckpt) == before and not (tmp_path / "work" / "runs").exists()


# ---------------------------------------------------------------- one run ID, one run


def _contender(work: str, dry_run: bool, start, hold, results) -> None:
    from harness.launch import prepare as prepare_module

    flags = {"workload": "reference", "work_dir": work, "run_id": "same-id", "fault": "none"}
    spec, target, _ = resolve.resolve_spec(flags, (), {})
    plan = planmod.build(spec, target)
    make_dir = prepare_module._make_dir

    def slow_disk(*args):  # widens the window between "is it new?" and writing, as a slow filesystem does
        time.sleep(0.2)
        return make_dir(*args)

    prepare_module._make_dir = slow_disk  # this child process only
    start.wait()
    try:
        prepare(plan, dry_run=dry_run)
    except SpecError as exc:
        results.put(("refused", str(exc)))
        hold.wait()
        return
    results.put(("won", os.getpid()))
    hold.wait()  # keep the claim while the others try, as a launching run does
    release(plan.layout)


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "plan"])
def test_simultaneous_runs_with_one_run_id_exactly_one_wins(tmp_path, dry_run):
    ctx = multiprocessing.get_context("fork")
    n = 6
    start, hold, results = ctx.Barrier(n), ctx.Barrier(n + 1), ctx.Queue()
    procs = [ctx.Process(target=_contender, args=(str(tmp_path / "work"), dry_run, start, hold, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=120) for _ in range(n)]
        hold.wait(timeout=60)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    won = [g for g in got if g[0] == "won"]
    assert len(won) == 1, got
    refusals = [g[1] for g in got if g[0] == "refused"]
    assert all("same-id" in r and "use a new --run-id" in r for r in refusals), refusals
    root = tmp_path / "work" / "runs" / "same-id"
    assert (root / "run.json").is_file() and not (root / CLAIM_NAME).exists()  # the claim goes with its holder


def test_a_later_run_with_a_launched_run_id_is_refused(tmp_path, capsys):
    flags = {"workload": "reference", "work_dir": tmp_path / "work", "run_id": "once", "fault": "none"}
    spec, target, _ = resolve.resolve_spec(flags, (), {})
    plan = planmod.build(spec, target)
    prepare(plan, dry_run=False)
    release(plan.layout)
    with pytest.raises(SpecError, match="already holds run.json of a planned run"):
        prepare(plan, dry_run=False)


def test_a_run_directory_holding_a_later_faults_marker_is_refused(tmp_path):
    """Every planned fault's marker counts, not only the first (in-restore's second claims fault_injected.2.json)."""
    flags = {"workload": "reference", "work_dir": tmp_path / "work", "run_id": "second", "fault": "none"}
    spec, target, _ = resolve.resolve_spec(flags, (), {})
    plan = planmod.build(spec, target)
    plan.layout.root.mkdir(parents=True)
    (plan.layout.root / "fault_injected.2.json").write_text("{}")
    with pytest.raises(SpecError, match=r"already holds an injection marker \(fault_injected.2.json\)"):
        prepare(plan, dry_run=False)
    assert (plan.layout.root / "fault_injected.2.json").read_text() == "{}"


@pytest.mark.parametrize("what", ["file", "long"])
def test_a_work_dir_that_is_a_file_or_an_over_long_run_id_is_refused_not_a_crash(tmp_path, capsys, what):
    if what == "file":
        (tmp_path / "work").write_text("not a directory")
        argv = plan_argv(tmp_path)
    else:
        argv = ["plan", "--workload", "reference", "--work-dir", str(tmp_path / "work"), "--run-id", "r" * 300]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("--work-dir=" in err or "--run-id=" in err), err
    assert "NVRX_WORK_DIR" not in err and "NVRX_RUN_ID" not in err, err  # the flags were typed


# ---------------------------------------------------------------- dry runs do not pile up


def _plan(capsys, work: Path, *args: str) -> tuple[int, str]:
    status = cli.main(["plan", "--workload", "reference", "--work-dir", str(work), *args])
    return status, capsys.readouterr().out


def test_dry_runs_without_a_run_id_do_not_leave_a_directory_per_call(tmp_path, capsys, monkeypatch):
    """`plan` (and `run --dry-run`) without --run-id: one directory per scenario, replaced by the
    next dry run of it and said so; a given run ID is kept as it is."""
    monkeypatch.delenv("NVRX_RUN_ID", raising=False)
    monkeypatch.delenv("NVRX_DRY_RUN", raising=False)
    work = tmp_path / "work"
    for _ in range(3):
        status, out = _plan(capsys, work)
        assert status == 0
    assert cli.main(["run", "--dry-run", "--workload", "reference", "--work-dir", str(work)]) == 0
    assert "the next dry run of this scenario without --run-id replaces it" in capsys.readouterr().out
    assert _plan(capsys, work, "--fault", "hang", "--fault-at", "in-save")[0] == 0
    assert _plan(capsys, work, "--run-id", "mine")[0] == 0
    monkeypatch.setenv("NVRX_RUN_ID", "from-env")
    assert _plan(capsys, work)[0] == 0
    assert sorted(p.name for p in (work / "runs").iterdir()) == [
        "from-env", "mine", "reference-hang-in-save-dry-run", "reference-kill-dry-run"]


def test_a_dry_run_never_replaces_a_launched_runs_directory(tmp_path, capsys, monkeypatch):
    """The dry-run directory name taken by a real run (--run-id reference-kill-dry-run): the dry
    run is refused and the run's files are left as they were."""
    monkeypatch.delenv("NVRX_RUN_ID", raising=False)
    work = tmp_path / "work"
    flags = {"workload": "reference", "work_dir": work, "run_id": "reference-kill-dry-run"}
    spec, target, _ = resolve.resolve_spec(flags, (), {})
    plan = planmod.build(spec, target)
    prepare(plan, dry_run=False)
    release(plan.layout)
    before = snapshot(plan.layout.root)
    status = cli.main(["plan", "--workload", "reference", "--work-dir", str(work)])
    assert status == 2 and "already holds run.json of a planned run" in capsys.readouterr().err
    assert snapshot(plan.layout.root) == before
