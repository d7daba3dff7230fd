"""`python -m harness.launch.watchdog TAG [TEMP_DIR] [--unmount DIR]`: the launch's guard against the harness's own death.

harness.launch.job starts it in a session of its own, with a pipe on its stdin, before the
launcher. The harness writes `done` when it has swept the launch itself; if stdin reaches
EOF without it, the harness died (SIGKILL, an interpreter crash, an OOM kill) and this
process kills every process carrying the launch's tag (NVRX_QUAL_LAUNCH=TAG in its
environment: the launcher, torch elastic's workers in their sessions of their own, their
checkpoint writers), releases the disk-full run's tmpfs on DIR (harness.machine.tmpfs.release: its
checkpoints copied onto the disk, then unmounted), removes the launch's temporary directory
TEMP_DIR, then exits. It
ignores SIGINT and SIGHUP so that a terminal closing on the harness does not take the guard
with it.
"""

from __future__ import annotations

import signal
import sys


def main(argv: list[str]) -> int:
    unmount = None
    if len(argv) >= 2 and argv[-2] == "--unmount":
        argv, unmount = argv[:-2], argv[-1]
    if len(argv) not in (1, 2) or not all(argv) or unmount == "":
        print("usage: python -m harness.launch.watchdog TAG [TEMP_DIR] [--unmount DIR]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # blocks until the harness closes the pipe, or dies
    if said.strip() == b"done":
        return 0
    from pathlib import Path

    from harness.launch.job import kill_tagged, remove_temp_dir  # only now: the common path stays cheap

    try:
        kill_tagged(argv[0])  # survivors of SIGKILL raise: their temporary directory is kept
    finally:
        if unmount is not None:  # never leave the mount behind, even with survivors (lazily then)
            from harness.machine.tmpfs import release

            release(Path(unmount))
    if len(argv) == 2:
        remove_temp_dir(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
