"""A stand-in for ft_launcher in harness.launch.job tests: prints lines, leaves orphans behind
the way torch elastic's workers would (own sessions, the launcher's stdout inherited),
runs "forever" (MAX_LIFE_S) or exits with a chosen status.

    fake_launcher.py [--line out:TEXT|err:TEXT]... [--record PATH] [--orphans] [--temp]
                     [--forever] [--ignore-term] [--burst N] [--exit N]

--line prints TEXT to stdout or stderr, in the order given, flushed one by one (so that
the merged pipe keeps that order). --record writes {"pid", "tag", "env", "orphans"} as JSON
once everything is started (a stopped orphan is stopped by then). --temp leaves in the
temporary directory what NVRx and Python's multiprocessing leave there (a listening
`_ft_launcher<pid>.socket`, a `pymp-*` directory, an error file) and records that directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

TAG = "NVRX_QUAL_LAUNCH"
# A harness bug must fail a test, not hang it or leak processes for long: every process here
# ends on its own after this many seconds (far beyond any test's need).
MAX_LIFE_S = 30
# The sleeper says it has printed on a pipe of its own (argv[1]) once its line is in the inherited
# stdout: the launcher exits only after that, so the line is in the harness's pipe by then.
SLEEPER = ("import os, sys, time\nprint('orphan sleeping', flush=True)\nos.write(int(sys.argv[1]), b'1')\n"
           f"time.sleep({MAX_LIFE_S})\n")
STOPPER = f"import os, signal, time\nos.kill(os.getpid(), signal.SIGSTOP)\ntime.sleep({MAX_LIFE_S})\n"


def start_orphans() -> list[int]:
    """Two grandchildren of the harness in sessions of their own, one of them stopped:
    a group kill of the launcher's session reaches neither."""
    printed, told = os.pipe()
    sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER, str(told)], start_new_session=True,
                               pass_fds=(told,))
    os.close(told)
    stopper = subprocess.Popen([sys.executable, "-c", STOPPER], start_new_session=True)
    os.waitpid(stopper.pid, os.WUNTRACED)  # returns once it is stopped
    os.read(printed, 1)  # returns once the sleeper's line is in stdout (or it died: EOF)
    os.close(printed)
    return [sleeper.pid, stopper.pid]


def leave_temp_files() -> socket.socket:
    """What NVRx's launcher and multiprocessing put in the temporary directory, never removed."""
    base = tempfile.gettempdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"{base}/_ft_launcher{os.getpid()}_to_rmon.socket")  # fails when the path is too long
    server.listen(1)
    os.makedirs(tempfile.mkdtemp(prefix="pymp-") + "/listener-x")
    errors = tempfile.mkdtemp(prefix="torchelastic_errors_fake_")
    with open(os.path.join(errors, "error.json"), "w") as f:
        f.write("{}")
    return server


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--line", action="append", default=[], help="out:TEXT or err:TEXT, printed in order")
    parser.add_argument("--record")
    parser.add_argument("--orphans", action="store_true")
    parser.add_argument("--temp", action="store_true")
    parser.add_argument("--forever", action="store_true", help=f"run until killed (at most {MAX_LIFE_S} s)")
    parser.add_argument("--burst", type=int, default=0, help="print this many 100-byte lines just before exiting")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--exit", type=int, default=0)
    args = parser.parse_args(argv)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in args.line:
        stream, _, text = line.partition(":")
        print(text, file=sys.stderr if stream == "err" else sys.stdout, flush=True)
    pids = start_orphans() if args.orphans else []
    kept = leave_temp_files() if args.temp else None  # noqa: F841 (listening until the end)
    if args.record:
        doc = {"pid": os.getpid(), "tag": os.environ.get(TAG), "orphans": pids,
               "env": {k: os.environ.get(k) for k in ("MARK", "QUAL_GREETING", "HOME", "TMPDIR", "TMP", "TEMP")},
               "tempdir": tempfile.gettempdir()}
        tmp = f"{args.record}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, args.record)  # whole or absent: the test polls for it
    if args.forever:
        time.sleep(MAX_LIFE_S)
    for i in range(args.burst):  # left in the pipe for the harness to read after the exit
        sys.stdout.write(f"burst {i:06d} " + "x" * 86 + "\n")
    sys.stdout.flush()
    return args.exit


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
