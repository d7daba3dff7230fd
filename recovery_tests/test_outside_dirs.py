"""Directories a received run directory's records name are read only inside it (issue 32, item 3).

run.json's checkpoint_dir and workload arguments and Megatron's arguments tables (--save,
--load, --non-persistent-global-ckpt-dir) may name any path, absolute or relative. `verify`
used to list and read the non-persistent tier wherever it pointed (a relative one from the
reader's own working directory), and the persistent one outside the run directory when
nothing said the directory was a copy. Now every such directory is read only inside the run
directory, or inside one the user names (`--read-dir`), each one not read is noted, and a
relative path is taken from the launch's recorded working directory, never the reader's; a
`logs` that is a link is not followed, and said so.

What is read is watched, not inferred: `verify` runs in a child Python with an audit hook
(sys.addaudithook) that records every file opened and every folder listed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

ROOT = Path(__file__).resolve().parent.parent

# verify in a child whose every open, listdir and scandir under WATCHED is recorded to LOG (a
# bare name opened relative to a directory descriptor, as the checkpoint readers do inside a
# checkpoint folder they opened, names no place by itself: the folder's own listing is seen)
WATCHING = r"""
import atexit, json, os, sys
watched, log = os.path.realpath(sys.argv.pop(1)), sys.argv.pop(1)
seen = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if event == "open" and os.sep not in path:
            return
        if os.path.realpath(os.path.join(os.getcwd(), path)).startswith(watched + os.sep):
            seen.append(f"{event} {path}")
def dump():
    with open(log, "w") as f:
        json.dump(seen, f)
atexit.register(dump)
sys.addaudithook(hook)
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


def verify_watching(run_dir: Path, watched: Path, log: Path, *more: str,
                    cwd: Path | None = None) -> tuple[int, dict, list[str]]:
    """(exit status, the verdict JSON, what was opened or listed under `watched`)."""
    proc = subprocess.run([sys.executable, "-c", WATCHING, str(watched), str(log), "verify", "--no-write",
                           "--json", "-", *more, str(run_dir)], capture_output=True, text=True, timeout=300,
                          cwd=cwd or run_dir, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout), json.loads(log.read_text())


@pytest.fixture(scope="module")
def tiered(tmp_path_factory) -> Path:
    """A run with both persistent and non-persistent global checkpoints (its own directory,
    --non-persistent-global-ckpt-dir), work_dir recorded."""
    run_dir = rundirs.build(tmp_path_factory.mktemp("tiered") / "runs" / "tiered",
                            Scenario(save_interval=5, non_persistent_interval=3, fault_at=6, np_dir="np_ckpts")).run_dir
    record = json.loads((run_dir / "run.json").read_text())
    record["spec"]["work_dir"] = str(run_dir.parent.parent)
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    return run_dir


def moved_out(tiered: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the run whose checkpoints (both tiers) lie outside it, in `outside/`, where
    run.json (checkpoint_dir, --non-persistent-global-ckpt-dir) and every arguments table
    (save, load, non_persistent_global_ckpt_dir) say they are: (run directory, outside)."""
    run_dir = Path(shutil.copytree(tiered, tmp_path / "work" / "runs" / "tiered", symlinks=True))
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(str(run_dir / "checkpoints"), str(outside / "ckpt"))
    shutil.move(str(run_dir / "np_ckpts"), str(outside / "np"))
    names = {str(tiered / "checkpoints"): str(outside / "ckpt"), str(tiered / "np_ckpts"): str(outside / "np")}
    record = json.loads((run_dir / "run.json").read_text())
    record["spec"]["work_dir"] = str(run_dir.parent.parent)
    record["spec"]["checkpoint_dir"] = names[str(tiered / "checkpoints")]
    record["spec"]["extra_args"] = ["--non-persistent-global-ckpt-dir", names[str(tiered / "np_ckpts")]]
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    for log in (run_dir / "logs").iterdir():
        text = log.read_bytes()
        for old, new in names.items():
            text = text.replace(old.encode(), new.encode())
        log.write_bytes(text)
    assert b"ckpt_dir ......" in b"".join(p.read_bytes() for p in (run_dir / "logs").iterdir())
    return run_dir, outside


def test_no_directory_a_received_run_names_outside_it_is_read_and_each_is_noted(tiered, tmp_path):
    run_dir, outside = moved_out(tiered, tmp_path)
    _status, verdict, seen = verify_watching(run_dir, outside, tmp_path / "seen.json")
    assert seen == [], f"read outside the run directory: {seen[:5]}"
    notes = verdict["notes"]
    for what, path in (("checkpoint directory", outside / "ckpt"),
                       ("non-persistent global checkpoint directory", outside / "np")):
        assert any(f"the {what} {path} (" in n and "lies outside the run directory and was not read" in n
                   and f"--read-dir {path}" in n for n in notes), (what, notes)


def test_a_directory_the_user_names_is_read_there(tiered, tmp_path):
    """The control: with --read-dir the same directories are read, and the run qualifies on them."""
    run_dir, outside = moved_out(tiered, tmp_path)
    status, verdict, seen = verify_watching(run_dir, outside, tmp_path / "seen.json", "--read-dir", str(outside))
    assert status == 0, [(c["id"], c["detail"]) for c in verdict["criteria"] if c["status"] != "pass"]
    assert any(s.endswith("ckpt/latest_checkpointed_iteration.txt") for s in seen), seen
    assert any(s.endswith("np/latest_checkpointed_iteration.txt") for s in seen), seen
    assert not any("was not read" in n for n in verdict["notes"]), verdict["notes"]


def test_a_relative_directory_is_never_taken_from_the_readers_working_directory(tiered, tmp_path):
    """--non-persistent-global-ckpt-dir np (relative) in the arguments tables, and the reader
    runs where a folder np/ holds a tracker and checkpoints: that folder is not the run's."""
    run_dir = Path(shutil.copytree(tiered, tmp_path / "work" / "runs" / "tiered", symlinks=True))
    for log in (run_dir / "logs").iterdir():
        log.write_bytes(log.read_bytes().replace(str(tiered / "np_ckpts").encode(), b"np"))
    here = tmp_path / "elsewhere"
    shutil.copytree(tiered / "np_ckpts", here / "np")
    record = json.loads((run_dir / "run.json").read_text())
    record["commands"][0]["cwd"] = "/opt/megatron-lm"  # the launch ran from Megatron's checkout
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    _status, verdict, seen = verify_watching(run_dir, here, tmp_path / "seen.json", cwd=here)
    assert seen == [], f"read from the reader's working directory: {seen[:5]}"
    assert any("the non-persistent global checkpoint directory /opt/megatron-lm/np (" in n
               and "lies outside the run directory" in n for n in verdict["notes"]), verdict["notes"]


def test_a_relative_directory_of_a_launch_in_the_run_directory_is_read_there(tiered, tmp_path):
    run_dir = Path(shutil.copytree(tiered, tmp_path / "work" / "runs" / "tiered", symlinks=True))
    for log in (run_dir / "logs").iterdir():
        log.write_bytes(log.read_bytes().replace(str(tiered / "np_ckpts").encode(), b"np_ckpts"))
    record = json.loads((run_dir / "run.json").read_text())
    record["commands"][0]["cwd"] = str(tiered)  # where the run was written: the copy is where it is now
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    status, verdict, _seen = verify_watching(run_dir, tmp_path / "nothing", tmp_path / "seen.json", cwd=tmp_path)
    assert status == 0 and not any("was not read" in n for n in verdict["notes"]), verdict["notes"]


def test_a_logs_folder_that_is_a_link_is_not_read_and_said_so(tiered, tmp_path):
    run_dir = Path(shutil.copytree(tiered, tmp_path / "work" / "runs" / "tiered", symlinks=True))
    outside = tmp_path / "outside-logs"
    shutil.move(str(run_dir / "logs"), str(outside))
    (run_dir / "logs").symlink_to(outside)
    _status, verdict, seen = verify_watching(run_dir, outside, tmp_path / "seen.json")
    assert seen == [], seen[:5]
    assert any("logs is a symlink, not a folder" in n and "not read" in n for n in verdict["notes"]), verdict["notes"]


@pytest.mark.parametrize("value", ["/tmp/a\x00b", "/" + "n" * 300])
def test_an_arguments_table_path_no_os_can_take_is_not_read_and_noted(tiered, tmp_path, value):
    """A log line is data: an arguments table whose --save holds a NUL byte or an overlong
    name makes a note, never a crash or a refusal."""
    run_dir = Path(shutil.copytree(tiered, tmp_path / "work" / "runs" / "tiered", symlinks=True))
    shutil.rmtree(run_dir / "checkpoints")
    for log in (run_dir / "logs").iterdir():
        log.write_bytes(log.read_bytes().replace(str(tiered / "checkpoints").encode(), value.encode()))
    record = json.loads((run_dir / "run.json").read_text())
    del record["spec"]["checkpoint_dir"]
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    _status, verdict, _seen = verify_watching(run_dir, tmp_path / "nothing", tmp_path / "seen.json")
    assert any("(the arguments table's save) holds" in n and "not read" in n for n in verdict["notes"]), \
        verdict["notes"]


def test_the_runner_reads_the_checkpoint_directory_its_own_plan_names(tmp_path, monkeypatch):
    """NVRX_CHECKPOINT_DIR outside the run directory is the user's own choice: the runner's
    verdict reads it there (the plan's own directories are its read_dirs)."""
    from harness.launch import job as launch, runner
    from harness.machine import ports
    from harness.plan import commands as planmod
    from harness.machine.nvrx import NvrxTarget, installed_version
    from harness.plan.spec import RunSpec

    built = rundirs.build(tmp_path / "made", Scenario())
    mine = tmp_path / "my-checkpoints"
    mine.mkdir()

    def fake_launch(plan, *, watch, **kwargs):
        shutil.copytree(built.run_dir / "logs", plan.layout.root / "logs", dirs_exist_ok=True)
        for log in (plan.layout.root / "logs").iterdir():  # Megatron's --save/--load: NVRX_CHECKPOINT_DIR
            log.write_bytes(log.read_bytes().replace(str(built.run_dir / "checkpoints").encode(), str(mine).encode()))
        shutil.copytree(built.run_dir / "checkpoints", mine, dirs_exist_ok=True)
        for name in ("fault_injected.json", "launch.json"):
            shutil.copy(built.run_dir / name, plan.layout.root / name)
        watch()
        return launch.LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, "0.7.0", 0)

    monkeypatch.setattr(launch, "launch", fake_launch)
    spec = RunSpec(workload="reference", work_dir=tmp_path / "work", run_id="mine-1", checkpoint_dir=mine,
                   rdzv_endpoint=f"127.0.0.1:{ports.free_port()}", log_server_port=50071)
    plan = planmod.build(spec, NvrxTarget(installed_version()))
    assert mine in plan.own_dirs and not str(mine).startswith(str(plan.layout.root))
    outcome = runner.execute(plan, out=None)
    pre = outcome.verdict.criterion("pre_fault_checkpoint")
    assert any(e.startswith(f"{mine}/latest_checkpointed_iteration.txt") for e in pre.evidence), pre.evidence
    assert not any("was not read" in n for n in outcome.verdict.notes), outcome.verdict.notes
