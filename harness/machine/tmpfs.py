"""The size-limited filesystem of a `disk-full` run: a tmpfs mounted on the run's own
checkpoints/ for the launch, and released (its contents copied back onto the disk, then
unmounted) on every exit path of the launch.

- `problems()`: what keeps this machine from mounting one (not root, no `mount`, a trial
  mount refused), each with its fix; preflight reports them before anything is launched;
- `mount(directory)`: mounts a tmpfs of SIZE_BYTES on `directory`, which must be an empty
  directory of the run (never anything the user owns: validation refuses NVRX_CHECKPOINT_DIR
  for this kind);
- `release(directory)`: copies what the run wrote there (the filler left out: only zeros the
  nemesis wrote) into a staging directory beside it, unmounts (lazily when busy), and moves
  the copy onto the disk directory underneath, so `nvrx-qual verify` reads the same
  checkpoints later. harness.launch.job calls it in its `finally`; the watchdog calls it when the
  harness itself died.

Only a tmpfs is mounted (its pages are memory, freed by the unmount); SIZE_BYTES holds the
checkpoints a short CPU run keeps (each about 2 MiB on both CPU workloads: 30 iterations saved
every 5 keep 7 of them, about 15 MiB).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness.nemesis.inject import FILLER_NAME, TMPFS, filesystem_type

SIZE_BYTES = 64 << 20
STAGING_PREFIX = ".checkpoints-tmpfs-copy."
_FIX = "run nvrx-qual as root on a machine that allows tmpfs mounts (not an unprivileged container), or pick another --fault"


class TmpfsError(OSError):
    """A mount or release failed (the message names the directory and the command's words)."""


def _run(argv: list[str]) -> str | None:
    """None when the command succeeded, else its error words."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, start_new_session=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


def problems() -> list[str]:
    """Why a tmpfs cannot be mounted here (empty: it can), found by a trial mount."""
    if os.geteuid() != 0:
        return [f"--fault disk-full mounts a size-limited tmpfs on the run's checkpoints/ and needs root (euid "
                f"{os.geteuid()}): {_FIX}"]
    missing = [tool for tool in ("mount", "umount") if shutil.which(tool) is None]
    if missing:
        return [f"--fault disk-full needs {' and '.join(missing)} on PATH: install util-linux, or pick another --fault"]
    trial = tempfile.mkdtemp(prefix="nvrx-qual-tmpfs-trial-")
    try:
        why = _run(["mount", "-t", TMPFS, "-o", "size=1m,mode=0700", TMPFS, trial])
        if why is not None:
            return [f"--fault disk-full: a trial tmpfs mount was refused ({why}): {_FIX}"]
        left = _run(["umount", trial])
        if left is not None:
            _run(["umount", "-l", trial])
        return []
    finally:
        try:
            os.rmdir(trial)
        except OSError:
            pass


def mount(directory: Path, size_bytes: int = SIZE_BYTES) -> None:
    """Mount a tmpfs of `size_bytes` on the empty directory `directory` (the run's checkpoints/)."""
    if os.path.islink(directory) or not directory.is_dir():
        raise TmpfsError(f"{directory} is not a directory of the run: nothing was mounted")
    if any(os.scandir(directory)):
        raise TmpfsError(f"{directory} is not empty: disk-full mounts only on a fresh run's checkpoints/")
    if filesystem_type(directory) is not None:
        raise TmpfsError(f"{directory} is a mount point already: nothing was mounted")
    why = _run(["mount", "-t", TMPFS, "-o", f"size={size_bytes},mode=0755", TMPFS, str(directory)])
    if why is not None:
        raise TmpfsError(f"mounting a tmpfs on {directory} failed ({why}): {_FIX}")


def mounted(directory: Path) -> bool:
    return filesystem_type(directory) == TMPFS


def release(directory: Path) -> str | None:
    """Copy the tmpfs's contents (not the filler) onto the disk under it and unmount; None when
    done, else what went wrong (the unmount is attempted whatever the copy did)."""
    if not mounted(directory):
        return None
    problems: list[str] = []
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=directory.parent))
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name == FILLER_NAME:
                    continue
                target = staging / entry.name
                if entry.is_dir(follow_symlinks=False):
                    shutil.copytree(entry.path, target, symlinks=True)
                elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                    shutil.copy2(entry.path, target, follow_symlinks=False)
    except OSError as exc:
        problems.append(f"copying {directory} out failed: {exc}")
    why = _run(["umount", str(directory)])
    if why is not None:
        lazy = _run(["umount", "-l", str(directory)])  # a process of the launch still holds a file open
        if lazy is not None:
            problems.append(f"umount {directory} failed ({why}; lazily: {lazy})")
            return "; ".join(problems)
    try:
        for entry in os.scandir(staging):
            os.rename(entry.path, directory / entry.name)
        os.rmdir(staging)
    except OSError as exc:
        problems.append(f"moving the copy {staging} into {directory} failed: {exc}")
    return "; ".join(problems) or None
