"""`nvrx-qual verify RUN_DIR [--json PATH] [--fault KIND] [--baseline RUN_DIR|none] [--no-write] [--force]`.

Exit status: 0 qualified, 1 a criterion failed (or could not be decided), 2 the path is not a
readable run directory or an output is refused (the message says why), 3 an internal error of
the suite.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from harness.judge import criteria
from harness.report import verify
from harness.vocab.exitcodes import ExitStatus
from harness.read.history import RunDirError
from harness.cli import terminal
from harness.report.outputs import Verdict, verdict_json, write_outputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Check the recovery criteria of a run directory from its files alone and time the "
                          "recovery. Exit status: 0 qualified, 1 a criterion failed, 2 not a readable run directory.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory ($NVRX_WORK_DIR/runs/<run-id>)")
    parser.add_argument("--json", metavar="PATH", dest="json_path",
                        help="also write the verdict JSON to PATH, a new file (never overwritten; '-': standard output)")
    parser.add_argument("--fault", choices=criteria.FAULTS, default=None,
                        help="the fault the run was meant to survive (default: run.json, else the injection marker, "
                             "else none)")
    parser.add_argument("--baseline", metavar="RUN_DIR|none",
                        help="the uninterrupted run of the same configuration that loss_continuity (every lm loss "
                             "after the restored checkpoint) and state_equivalence (the final checkpoint's tensors) "
                             "compare with; 'none' judges without one, by request (default: the baseline run.json's "
                             "contract names, looked up beside the run; missing or changed since, both checks are "
                             "unknown)")
    parser.add_argument("--read-dir", metavar="DIR", action="append", dest="read_dirs",
                        help="also read checkpoints the run's records name in DIR, outside the run directory "
                             "(repeatable; default: only inside it)")
    parser.add_argument("--no-write", action="store_true",
                        help="do not write timeline.png, verdict.json and report.md into the run directory")
    parser.add_argument("--force", action="store_true",
                        help="replace a stored verdict.json that was judged for another fault (without it, verify "
                             "refuses to change the fault a run was judged for)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")


def read_dirs_problem(read_dirs: Sequence[str]) -> str | None:
    """Why a --read-dir cannot be read (not a directory), naming it; None when all can."""
    for given in read_dirs:
        if not os.path.isdir(given):
            return (f"--read-dir {given} is not a directory: name the directory (outside the run directory) whose "
                    "checkpoints the run's records name")
    return None


def _stored_fault_conflict(run_dir: Path, verdict: Verdict) -> str | None:
    """Why writing this verdict would silently change the fault the run was judged for."""
    stored = verify.stored_verdict(run_dir)
    fault = stored.get("fault") if stored else None
    if not isinstance(fault, str) or fault == verdict.fault:
        return None
    return (f"{run_dir / 'verdict.json'} records the run judged for fault {fault}; this verification is for fault "
            f"{verdict.fault} ({verdict.fault_how}): pass --force to replace it, or --no-write (or --json PATH with "
            "--no-write) to judge without changing the stored verdict")


def _what_was_written(paths: Sequence[Path], run_dir: Path, before: dict | None) -> str:
    names = [str(p.relative_to(run_dir)) if p.is_relative_to(run_dir) else str(p) for p in paths]
    if not names:
        return ""
    text = f"nvrx-qual verify: wrote {', '.join(names)} in {run_dir}"
    if before is not None and any(p.name == "verdict.json" and p.parent == run_dir for p in paths):
        earlier = "QUALIFIED" if before.get("qualified") is True else "NOT QUALIFIED"
        text += f" (replacing the earlier verdict.json: {earlier}, fault {before.get('fault', '?')})"
    return text


def _baseline_line(verdict: Verdict) -> str | None:
    """Which baseline loss_continuity and state_equivalence were judged against, or why none."""
    b = verdict.baseline
    if b is None:
        return None
    if b.skipped:
        return f"nvrx-qual verify: baseline skipped by request: {b.skipped}"
    if b.problem:
        return f"nvrx-qual verify: baseline checks unknown: {b.problem}"
    how = {"ran": "the twin run first", "reused": "reused by configuration hash", "given": "--baseline"}.get(b.how, b.how)
    return f"nvrx-qual verify: baseline {b.run_dir} ({how})"


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    to_stdout = args.json_path == "-"
    if not to_stdout and args.json_path is not None and os.path.lexists(args.json_path):
        print(f"nvrx-qual verify: error: --json {args.json_path} already exists: choose a new file name; existing "
              "files (a run's own fault_injected.json above all) are never overwritten", file=sys.stderr)
        return ExitStatus.REFUSED
    refused = read_dirs_problem(args.read_dirs or ())
    if refused:
        print(f"nvrx-qual verify: error: {refused}", file=sys.stderr)
        return ExitStatus.REFUSED
    try:
        verdict, read = verify.judge_run(run_dir, args.fault, baseline=args.baseline, picture=not args.no_write,
                                         read_dirs=args.read_dirs or ())
    except RunDirError as exc:
        print(f"nvrx-qual verify: error: {exc}", file=sys.stderr)
        return ExitStatus.REFUSED
    quiet = getattr(args, "quiet", False)
    before = None if args.no_write else verify.stored_verdict(run_dir)
    if not args.no_write and not getattr(args, "force", False):
        conflict = _stored_fault_conflict(run_dir, verdict)
        if conflict:
            print(f"nvrx-qual verify: error: {conflict}", file=sys.stderr)
            return ExitStatus.REFUSED
    written_note = None
    found = None
    try:
        found, sections = verify.triage(verdict, read)
        written = write_outputs(verdict, None if args.no_write else run_dir, None if to_stdout else args.json_path,
                                sections)
        if to_stdout:
            print(verdict_json(verdict), end="")
        written_note = _what_was_written(written.paths, run_dir, before)
        if written.picture_problem and not quiet:
            print(f"nvrx-qual verify: note: timeline.png not drawn: {written.picture_problem}", file=sys.stderr)
    except OSError as exc:
        print(f"nvrx-qual verify: warning: could not write the verdict ({exc}); pass --no-write for a read-only "
              "run directory, or --json PATH", file=sys.stderr)
    if not quiet:
        if written_note:
            print(written_note, file=sys.stderr if to_stdout else sys.stdout)
        if not to_stdout:
            said = _baseline_line(verdict)
            if said:
                print(said)
            print(terminal.verification(verdict, verify.known_defects(verdict, read, found)))
    return ExitStatus.of_verdict(verdict.qualified)
