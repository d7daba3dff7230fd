"""The exit statuses of every `nvrx-qual` command.

    0  QUALIFIED       every criterion held (plan / sbatch: the plan was written)
    1  NOT_QUALIFIED   a criterion failed or could not be decided (diagnose: a root cause found)
    2  REFUSED         input refused or unreadable: a bad value, a path that is not a readable
                       run directory, an output file that already exists, a disk that refused a
                       write; the message names the value and the fix
    3  INTERNAL_ERROR  a bug of the suite: one line on stderr, the traceback in a log file
                       (or on stderr under --debug); never confused with a verdict
    128+N              the run was stopped by signal N (SIGINT 130, SIGTERM 143, SIGHUP 129)
                       after its processes were stopped and launch.json written, as a shell does

CI can therefore tell a broken recovery (1) from bad input (2) from a broken tool (3). This is
the only definition of these numbers; the command layer (harness.cli) turns them into the
process's exit status, and harness.cli.guard keeps a crash from looking like a verdict.
"""

from __future__ import annotations

import enum
import os
import sys
import tempfile
import traceback


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
