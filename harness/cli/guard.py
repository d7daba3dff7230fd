"""The guard around every command: a crash never looks like a verdict.

Its own status, 2 for an OSError the environment raised (a disk that refused a write, a path
that vanished), 3 for any other exception (a bug: one line on stderr, the traceback in a log
file or, under --debug, on stderr), 128+N after signal N.
"""

from __future__ import annotations

import signal
import sys
import traceback
from typing import Callable, TextIO

from harness.vocab.exitcodes import ExitStatus, signalled, write_traceback


def refused(exc: Exception, err: TextIO | None = None) -> int:
    """Every line of a refusal (SpecError, NvrxError: one problem a line) on stderr; exit status 2."""
    for line in str(exc).splitlines():
        print(f"nvrx-qual: error: {line}", file=err or sys.stderr)
    return ExitStatus.REFUSED


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
    except KeyboardInterrupt as exc:  # Ctrl-C, or harness.launch.job.Interrupted after SIGTERM / SIGHUP
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
