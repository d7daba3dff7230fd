"""`nvrx-qual diagnose RUN_DIR [--json] [--utc-offset SECONDS]`: the cross-rank root cause.

Exit status: 0 nothing failed but the fault the harness injected (a run that recovered), 1 a
root cause was found, 2 RUN_DIR is not a readable directory or --utc-offset is no time zone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.judge import triage as triaging
from harness.vocab.dialect import RunDirError, utc_offset_problem
from harness.vocab.exitcodes import ExitStatus
from harness.report.diagnosis import render_markdown
from harness.judge.triage import Triage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run directory (runs/<run-id>/)")
    parser.add_argument("--json", action="store_true", help="print the triage as JSON instead of Markdown")
    parser.add_argument(
        "--utc-offset",
        type=int,
        default=None,
        metavar="SECONDS",
        help="local time minus UTC of the hosts that wrote the logs (default: run.json's utc_offset_s, else 0)",
    )
    parser.epilog = ("Exit status: 0 nothing failed but the fault the harness injected (a run that recovered), "
                     "1 a root cause was found, 2 RUN_DIR is not a readable directory.")


def exit_status(triage: Triage) -> ExitStatus:
    """0 when nothing failed, or only the fault the harness injected itself (a recovered run
    has exactly that failure); 1 when something else broke."""
    return ExitStatus.of_verdict(not (triage.failed and not triage.injected))


def run(args: argparse.Namespace) -> int:
    offset = getattr(args, "utc_offset", None)
    if offset is not None and (problem := utc_offset_problem(offset)) is not None:
        print(f"nvrx-qual diagnose: --utc-offset {problem}", file=sys.stderr)
        return ExitStatus.REFUSED
    try:
        triage = triaging.diagnose(args.run_dir, utc_offset_s=offset)
    except RunDirError as err:
        print(f"nvrx-qual diagnose: {err}", file=sys.stderr)
        return ExitStatus.REFUSED
    status = exit_status(triage)
    text = json.dumps(triage.to_json(), indent=2, default=str) + "\n" if args.json else render_markdown(triage)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head` stopped reading: not an error of the triage
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush stays quiet
    return status
