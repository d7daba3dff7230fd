"""Plans that cannot deliver what they promise are refused before anything starts (issue 31
item 3): `nvrx-qual run` exits 2 with one sentence per problem naming the flag (or the
environment variable the value came from) and the fix, and launches nothing: no run
directory with launch.json, no uninterrupted twin. Through the real command line, in a
subprocess, with a fresh work directory each time."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from fixtures.processes import run_in_session
from pytest_nvrx_qual.runs import SPEC_ENV_NAMES
from harness.machine import discovery
from harness.plan.resolve import resolve_spec
from harness.plan.spec import SpecError

ROOT = Path(__file__).resolve().parent.parent


def refused_run(tmp_path: Path, *argv: str, env: dict[str, str] | None = None, workload: str = "reference") -> str:
    """`nvrx-qual run --workload WORKLOAD ARGV` in a fresh work directory (WORKLOAD '': the
    default one): exit 2, nothing launched and nothing created there. Returns stderr."""
    work = tmp_path / "work"
    clean = {k: v for k, v in os.environ.items() if k not in SPEC_ENV_NAMES}
    clean.update(env or {})
    clean["PYTHONPATH"] = str(ROOT)
    started = time.monotonic()
    # A plan that is not refused launches a twin and a fault run (about 70 s): the timeout stops it.
    chosen = ["--workload", workload] if workload else []
    done = run_in_session([sys.executable, "-m", "harness", "run", *chosen, "--work-dir", str(work), *argv],
                          timeout_s=240, cwd=tmp_path, env=clean)
    took = time.monotonic() - started
    launched = sorted(str(p.relative_to(work)) for p in work.rglob("launch.json")) if work.exists() else []
    twins = sorted(p.name for p in (work / "runs").glob("*-baseline*")) if (work / "runs").exists() else []
    assert not launched and not twins, (launched, twins, done.stdout[-2000:])
    assert done.returncode == 2, (done.returncode, took, done.stderr[-2000:])
    assert not (work / "runs").exists() or not any((work / "runs").iterdir()), list((work / "runs").iterdir())
    print(f"refused in {took:.1f} s: {done.stderr.strip()}")  # the figure for the record (no timed assert)
    return done.stderr


def test_a_launcher_path_that_is_not_there_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing-dir"
    err = refused_run(tmp_path, "--nvrx-path", str(missing))
    assert f"--nvrx-path={missing} is not a directory" in err, err
    assert "--nvrx-path=''" in err  # the fix: or the one pip installed


def test_a_launcher_path_that_holds_no_nvrx_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "no-nvrx"
    empty.mkdir()
    err = refused_run(tmp_path, "--nvrx-path", str(empty))
    assert f"--nvrx-path={empty} holds no NVRx install" in err, err


def test_a_launcher_path_from_the_environment_is_named_by_its_variable(tmp_path: Path) -> None:
    missing = tmp_path / "missing-dir"
    err = refused_run(tmp_path, env={"NVRX_QUAL_NVRX_PATH": str(missing)})
    assert f"NVRX_QUAL_NVRX_PATH={missing} is not a directory" in err and "--nvrx-path" not in err, err


def test_a_save_interval_that_leaves_no_checkpoint_before_the_fault_is_refused(tmp_path: Path) -> None:
    err = refused_run(tmp_path, "--save-interval", "50", "--train-iters", "30")
    assert "--save-interval=50" in err and "--train-iters=30" in err, err
    assert "SAVE_INTERVAL" not in err and "TRAIN_ITERS" not in err, err


@pytest.mark.parametrize("argv, said", [
    (("--nvrx-path", "{tmp}/missing-dir"), "--nvrx-path={tmp}/missing-dir is not a directory"),
    (("--save-interval", "50", "--train-iters", "30"), "with --save-interval=50 and --train-iters=30"),
], ids=["nvrx-path", "save-interval"])
def test_the_issues_commands_with_the_default_workload_are_refused(tmp_path: Path, argv, said) -> None:
    """The GPU workload (the default, refused here for its missing checkout too) is refused as
    quickly: the workers' interpreter is not asked about the GPU stack for a refused plan."""
    err = refused_run(tmp_path, *(a.format(tmp=tmp_path) for a in argv), workload="")
    assert said.format(tmp=tmp_path) in err, err


def test_a_refusal_does_not_wait_for_the_gpu_stacks_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asking the workers' interpreter whether Transformer Engine and apex import takes seconds
    (it imports torch); a plan refused anyway is refused without asking."""
    def no_probe(python):
        raise AssertionError(f"the GPU stack was probed ({python}) for a plan refused anyway")

    monkeypatch.setattr(discovery, "worker_imports", no_probe)
    monkeypatch.setattr(discovery, "nvidia_smi_gpus", lambda: ())
    with pytest.raises(SpecError, match=re.escape("--train-iters=-5 must be a positive integer")):
        resolve_spec({"workload": "megatron", "work_dir": tmp_path / "w", "train_iters": "-5"}, (), {})
    (tmp_path / "pretrain_gpt.py").write_text("")
    with pytest.raises(AssertionError, match="the GPU stack was probed"):  # and a plan that passes asks
        resolve_spec({"workload": "megatron", "work_dir": tmp_path / "w", "megatron_path": tmp_path}, (), {})


def test_more_faults_than_restarts_is_refused(tmp_path: Path) -> None:
    err = refused_run(tmp_path, "--faults", "3", "--seed", "5", "--max-restarts", "1")
    assert "--max-restarts=1 allows 1 restart and this plan injects 3 faults" in err, err


@pytest.mark.parametrize(("argv", "env", "named", "not_named"), [
    (("--train-iters", "-5"), {}, "--train-iters=-5 must be a positive integer", "TRAIN_ITERS"),
    ((), {"TRAIN_ITERS": "-5"}, "TRAIN_ITERS=-5 must be a positive integer", "--train-iters"),
    (("--fault-rank", "7"), {}, "--fault-rank=7 is outside the active world of 2 rank(s)", "NVRX_FAULT_RANK"),
    ((), {"NVRX_FAULT_RANK": "7"}, "NVRX_FAULT_RANK=7 is outside the active world of 2 rank(s)", "--fault-rank"),
    (("--nnodes", "2"), {}, "--nnodes=2 needs --rdzv-endpoint", "RDZV_ENDPOINT"),
    ((), {"NNODES": "2"}, "NNODES=2 needs --rdzv-endpoint", "--nnodes"),
], ids=["train-iters-flag", "train-iters-env", "fault-rank-flag", "fault-rank-env", "nnodes-flag", "nnodes-env"])
def test_an_error_names_what_the_user_typed(tmp_path: Path, argv, env, named, not_named) -> None:
    err = refused_run(tmp_path, *argv, env=env)
    assert named in err, err
    assert not_named not in err, err


def test_the_suites_own_scenarios_are_refused_the_same_way(tmp_path: Path) -> None:
    """A save interval longer than the training was once an e2e scenario of its own (a launch
    whose fault never fired: the nemesis's report at exit, the watcher's early stop and the
    "never injected" verdict, each still tested on its own: test_nemesis's final-checkpoint
    case, test_watch's fault-never-fired, test_criteria's never-fired run directory). The
    fixtures' typed values are refused before launch like the command line's, naming the flag."""
    flags = {"workload": "reference", "fault": "kill", "work_dir": tmp_path / "work", "run_id": "never-fires",
             "save_interval": 40}
    with pytest.raises(SpecError) as err:
        resolve_spec(flags, (), {})
    assert err.value.problems == [
        "the kill fault at after-commit cannot happen: with --save-interval=40 and --train-iters=30 the first "
        "checkpoint after the start that it waits for is the final one (iteration 30): a fault there leaves nothing "
        "to recover and no checkpoint after it; set --train-iters=41 or more, or a smaller --save-interval"]
    assert not (tmp_path / "work").exists()
