"""`nvrx-qual report RUN_DIR... [--output FILE.md] [--json PATH]`: one Markdown summary over
several runs (each judged again from its evidence by harness.report.stats.load_run; a verdict.json is
compared, never trusted).

Exit status: 0 every run qualified, 1 some run did not, 2 a path is not a readable run
directory or an output file is refused (the message names it and the fix).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from harness.safe import safeio
from harness.report import stats
from harness.vocab.exitcodes import ExitStatus
from harness.cli.verify import read_dirs_problem
from harness.read.history import RecordRefused, RunDirError
from harness.report.stats import RepeatStats, RunRecord
from harness.report.stats import TITLE, group_runs, load_run, refuse_existing, timeline_links

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("One Markdown summary over several run directories: a row per run (verdict, what did not "
                          "hold, its timeline picture) and per scenario (workload, fault, NVRx version) the pass rate "
                          "of every criterion and p50 / p95 / max of every latency. Every run is judged again from its "
                          "evidence, as verify does, writing nothing; a stored verdict.json that disagrees, is stale "
                          "or has lost its evidence is noted, and one that cannot be judged again is never counted "
                          "as qualified. A directory without a launched run (a dry run's, an empty one) is "
                          "skipped with a note. Exit status: 0 all qualified, 1 some run did not, 2 a path is not a "
                          "readable directory, or no run was given.")
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run directories ($NVRX_WORK_DIR/runs/<run-id>)")
    parser.add_argument("--output", metavar="FILE.md",
                        help="write the Markdown to this new file instead of standard output (never overwritten)")
    parser.add_argument("--json", metavar="PATH", dest="json_path",
                        help="also write the statistics as JSON to this new file (never overwritten)")
    parser.add_argument("--read-dir", metavar="DIR", action="append", dest="read_dirs",
                        help="also read checkpoints the runs' records name in DIR, outside their run directories "
                             "(repeatable)")


def _note(message: str) -> None:
    print(f"nvrx-qual report: note: {message}", file=sys.stderr)


def _is_browsable_dir(path: Path) -> bool:
    """A directory we may list: one that holds no launched run is skipped, not an error."""
    return path.is_dir() and os.access(path, os.R_OK | os.X_OK)


def _error(message: str) -> None:
    print(f"nvrx-qual report: error: {message}", file=sys.stderr)


def _distinct(paths: Sequence[str]) -> list[Path]:
    """Each run once, however often it was named (a shell glob and an explicit path)."""
    seen, out = set(), []
    for p in paths:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(Path(p))
    return out


def run(args: argparse.Namespace) -> int:
    problems = [p for p in (refuse_existing("--output", args.output), refuse_existing("--json", args.json_path),
                            read_dirs_problem(args.read_dirs or ())) if p]
    if args.output and args.json_path and os.path.abspath(args.output) == os.path.abspath(args.json_path):
        problems.append(f"--output and --json name the same file {args.output}: give two file names")
    if problems:
        for p in problems:
            _error(p)
        return ExitStatus.REFUSED
    records, unreadable, skipped = [], 0, 0
    for run_dir in _distinct(args.run_dirs):
        try:
            records.append(load_run(run_dir, warn=_note, read_dirs=args.read_dirs or ()))
        except RunDirError as exc:
            if _is_browsable_dir(run_dir) and not isinstance(exc, RecordRefused):  # no launched run (plan-only, empty)
                _note(f"skipped: {exc}")
                skipped += 1
            else:
                _error(str(exc))
                unreadable += 1
    if unreadable:
        return ExitStatus.REFUSED
    if not records:
        _error(f"no launched run among the {skipped} director{'y' if skipped == 1 else 'ies'} given: give the "
               "run directories of launched runs ($NVRX_WORK_DIR/runs/<run-id>)")
        return ExitStatus.REFUSED
    groups = group_runs(records)
    return _emit(groups, records, args.output, args.json_path)


def _emit(groups: list[RepeatStats], records: list[RunRecord], output: str | None, json_path: str | None) -> int:
    relative_to = Path(output).absolute().parent if output else Path.cwd()  # stdout: read from here, presumably
    text = stats.render_markdown(groups, TITLE, timeline_links(records, relative_to))
    try:
        if json_path:
            # created exclusively, never through a link: a file that appeared meanwhile is kept
            safeio.create_new(json_path, json.dumps(stats.summary_json(groups, TITLE), indent=2, ensure_ascii=False) + "\n")
        if output:
            safeio.create_new(output, text)
    except OSError as exc:
        _error(f"cannot write the summary ({exc}): choose another path")
        return ExitStatus.REFUSED
    counted = [g for g in groups if not g.stopped_by_user]
    if output:
        stopped = len(records) - sum(len(g.runs) for g in counted)
        print(f"nvrx-qual report: {stats.counted_sentence(records).removesuffix('.')}"
              + (f" ({stopped} stopped by the user, not counted)" if stopped else "") + f"; written to {output}",
              file=sys.stderr)
    else:
        print(text, end="")
    # the exit status says what qualified (an expected negative caught is still not qualified);
    # runs the person stopped are not counted either way
    return ExitStatus.of_verdict(bool(counted) and all(g.all_qualified for g in counted))
