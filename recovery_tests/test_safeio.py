"""Every file the suite writes is created exclusively or replaced atomically without ever
following a link; every file it reads from a run directory is a regular file of bounded size
(a FIFO never blocks it, a link never leads it out). Run directories here are hostile: the
kind of tarball someone else could hand over."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

from fixtures.processes import run_in_session
from harness.safe import atomic, safeio
from harness.cli import main

from . import rundirs

SECRET = "root:$6$not-for-any-report$"


# ---------------------------------------------------------------- the module


def test_reads_refuse_a_fifo_a_symlink_a_directory_and_an_oversized_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    (tmp_path / "big").write_bytes(b"x" * 101)
    for path, why in ((fifo, "a FIFO"), (tmp_path / "link", "a symlink"), (tmp_path, "a directory")):
        with pytest.raises(OSError, match=why):
            safeio.read_bytes(path)
    with pytest.raises(OSError) as info:
        safeio.read_bytes(tmp_path / "big", limit=100)
    assert info.value.errno == errno.EFBIG
    assert safeio.read_bytes(tmp_path / "big", limit=101) == b"x" * 101


def test_create_new_never_overwrites_a_file_or_follows_a_link(tmp_path):
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("secret", "link", "dangling"):
        with pytest.raises(FileExistsError):
            safeio.create_new(tmp_path / name, "overwritten")
    assert (tmp_path / "secret").read_text() == SECRET and not (tmp_path / "nowhere").exists()


def test_replace_refuses_a_symlink_target_and_uses_unpredictable_temporary_names(tmp_path, monkeypatch):
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "verdict.json").symlink_to(tmp_path / "secret")
    with pytest.raises(OSError, match="symlink"):
        atomic.write_text(tmp_path / "verdict.json", "{}")
    assert (tmp_path / "secret").read_text() == SECRET and (tmp_path / "verdict.json").is_symlink()
    # a link planted at every name a pid-based temporary could take is never written through
    for guess in (f".report.md.{os.getpid()}.tmp.md", f".report.md.{os.getpid()}.tmp"):
        (tmp_path / guess).symlink_to(tmp_path / "secret")
    names = set()
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b, **kw: (names.add(Path(a).name), real_replace(a, b, **kw)))
    atomic.write_text(tmp_path / "report.md", "one")
    atomic.write_text(tmp_path / "report.md", "two")
    assert (tmp_path / "report.md").read_text() == "two" and len(names) == 2
    assert (tmp_path / "secret").read_text() == SECRET


def test_make_dirs_refuses_a_link_below_the_users_path(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "work" / "runs").mkdir(parents=True)
    (tmp_path / "work" / "runs" / "r1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symlink"):
        safeio.make_dirs(tmp_path / "work" / "runs" / "r1" / "logs", below=tmp_path / "work")
    assert list((tmp_path / "elsewhere").iterdir()) == []


# ---------------------------------------------------------------- a hostile run directory


def hostile_run(tmp_path: Path) -> tuple[Path, Path]:
    """A good run whose verdict.json, report.md and timeline.png are links to a file outside
    it, and one of whose logs is a link to a secret."""
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (tmp_path / "secret").write_text(SECRET)
    for name in ("verdict.json", "report.md", "timeline.png"):
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to(outside)
    (run_dir / "logs" / "train_cycle_cycle7.log").symlink_to(tmp_path / "secret")
    return run_dir, outside


def test_verify_never_writes_through_links_in_a_received_run_dir(tmp_path):
    run_dir, outside = hostile_run(tmp_path)
    done = run_in_session([sys.executable, "-m", "harness", "verify", str(run_dir)], timeout_s=180)
    assert done.returncode in (0, 1), done.stderr
    assert "could not write the verdict" in done.stderr and "symlink" in done.stderr
    assert outside.read_text() == "precious"
    for name in ("verdict.json", "report.md", "timeline.png"):
        assert (run_dir / name).is_symlink()
    assert SECRET not in done.stdout + done.stderr


def test_verify_json_never_overwrites_an_existing_file(tmp_path, capsys):
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    marker = run_dir / "fault_injected.json"
    before = marker.read_bytes()
    assert main(["verify", str(run_dir), "--json", str(marker), "--no-write"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert marker.read_bytes() == before
    mine = tmp_path / "verdict-copy.json"
    assert main(["verify", str(run_dir), "--json", str(mine), "--no-write", "--quiet"]) == 0
    assert json.loads(mine.read_text())["qualified"] is True


FIFO_TARGETS = ("fault_injected.json", "run.json", "launch.json", "logs/launcher.log",
                "checkpoints/latest_checkpointed_iteration.txt", "cycle_infos/cycle_info.job.0.1")


@pytest.mark.parametrize("command", ["verify", "report", "diagnose"])
def test_no_command_blocks_on_fifos_in_a_run_dir(tmp_path, command):
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    for rel in FIFO_TARGETS:
        path = run_dir / rel
        path.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
    (run_dir / "verdict.json").unlink(missing_ok=True)
    argv = [sys.executable, "-m", "harness", command, str(run_dir)] + (["--no-write"] if command == "verify" else [])
    done = run_in_session(argv, timeout_s=120)  # a blocked open would end in TimeoutExpired
    assert done.returncode in (0, 1, 2), done.stderr
    assert "Traceback" not in done.stderr


def test_plan_does_not_block_on_a_fifo_tracker_or_run_json(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.mkfifo(ckpt / "latest_checkpointed_iteration.txt")
    run_root = tmp_path / "work" / "runs" / "fifo-run"
    run_root.mkdir(parents=True)
    os.mkfifo(run_root / "run.json")
    argv = [sys.executable, "-m", "harness", "plan", "--workload", "reference", "--work-dir", str(tmp_path / "work"),
            "--run-id", "fifo-run", "--checkpoint-dir", str(ckpt)]
    done = run_in_session(argv, timeout_s=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FIFO" in done.stderr and "Traceback" not in done.stderr


class _Payload:
    """A pickle that runs a shell command when loaded, as a hostile `.metadata` would."""

    def __init__(self, flag: Path):
        self.flag = flag

    def __reduce__(self):
        return (os.system, (f"touch {self.flag}",))


def test_a_checkpoints_metadata_is_never_unpickled_blindly(tmp_path):
    """torch's FileSystemReader.read_metadata is a plain pickle.load: verifying a received run
    directory must not run code planted in a checkpoint's .metadata."""
    import pickle

    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    flag = tmp_path / "code-ran"
    for metadata in (run_dir / "checkpoints").glob("iter_*/.metadata"):
        metadata.write_bytes(pickle.dumps(_Payload(flag)))
    done = run_in_session([sys.executable, "-m", "harness", "verify", str(run_dir), "--no-write"], timeout_s=180)
    assert done.returncode in (0, 1), done.stderr
    assert not flag.exists(), "verify executed code from a checkpoint's .metadata"
    assert "refused posix.system" in done.stdout or "refused os.system" in done.stdout or done.returncode == 1
