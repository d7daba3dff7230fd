"""The exit statuses of every `nvrx-qual` command, and the guard that keeps a crash from
ever looking like a verdict.

    0  QUALIFIED       every criterion held (plan / sbatch: the plan was written)
    1  NOT_QUALIFIED   a criterion failed or could not be decided (diagnose: a root cause found)
    2  REFUSED         input refused or unreadable: a bad value, a path that is not a readable
                       run directory, an output file that already exists, a disk that refused a
                       write; the message names the value and the fix
    3  INTERNAL_ERROR  a bug of the suite: one line on stderr, the traceback in a log file
                       (or on stderr under --debug); never confused with a verdict
    128+N              the run was stopped by signal N (SIGINT 130, SIGTERM 143, SIGHUP 129)
                       after its processes were stopped and launch.json written, as a shell does

CI can therefore tell a broken recovery (1) from bad input (2) from a broken tool (3).
"""

from __future__ import annotations

import enum
import os
import signal
import sys
import tempfile
import traceback
from typing import Callable, TextIO


class ExitStatus(enum.IntEnum):
    QUALIFIED = 0
    NOT_QUALIFIED = 1
    REFUSED = 2
    INTERNAL_ERROR = 3

    @classmethod
    def of_verdict(cls, qualified: bool) -> "ExitStatus":
        return cls.QUALIFIED if qualified else cls.NOT_QUALIFIED


def signalled(signum: int) -> int:
    """The status of a command stopped by signal `signum`, as a shell reports it."""
    return 128 + int(signum)


def write_traceback(exc: BaseException, prog: str) -> str | None:
    """The traceback of `exc` into a new log file (unpredictable name, created exclusively,
    never through a link); its path, or None when no file could be created."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        fd, path = tempfile.mkstemp(prefix=f"{prog}-traceback-", suffix=".log")
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{prog} {' '.join(sys.argv[1:])}\n{text}")
    except OSError:
        return None
    return path


def report_internal_error(exc: BaseException, prog: str, *, debug: bool, err: TextIO | None = None) -> int:
    """One line on stderr (the traceback in a log file, or on stderr under --debug); returns 3."""
    err = err or sys.stderr
    what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=err)
        print(f"{prog}: internal error: {what}", file=err)
    else:
        path = write_traceback(exc, prog)
        where = f"traceback in {path}" if path else "no traceback file could be written"
        print(f"{prog}: internal error (a bug of nvrx-qual, not a verdict): {what}; {where}; rerun with --debug to "
              "see it here", file=err)
    return ExitStatus.INTERNAL_ERROR


def guarded(command: Callable[[], int], prog: str, *, debug: bool, err: TextIO | None = None) -> int:
    """Run one command: its own status, 2 for an OSError the environment raised (a disk that
    refused a write, a path that vanished), 3 for any other exception (a bug)."""
    err = err or sys.stderr
    try:
        return int(command())
    except KeyboardInterrupt as exc:  # Ctrl-C, or harness.launch.Interrupted after SIGTERM / SIGHUP
        signum = getattr(exc, "signum", signal.SIGINT)
        result = getattr(exc, "result", None)
        what = f"; launch.json: {result.ended_by}, {result.leftover_processes_killed} leftover processes killed" \
            if result is not None else ""
        print(f"{prog}: stopped by {signal.Signals(signum).name}; every process of the launch was stopped{what}",
              file=err)
        return signalled(signum)
    except OSError as exc:  # the machine refused (disk full, permissions, a name too long)
        if debug:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=err)
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"{prog}: error: {exc.strerror or exc}{where}: free space, fix permissions or choose another path, "
              "then run again", file=err)
        return ExitStatus.REFUSED
    except Exception as exc:  # noqa: BLE001 - crash guard: a bug becomes exit 3 with its traceback filed, never a verdict
        return report_internal_error(exc, prog, debug=debug, err=err)
