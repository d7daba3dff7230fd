"""`nvrx-qual report RUN_DIR... [--output FILE.md] [--json PATH]`: one Markdown summary over
several runs.

Each run is read from its verdict.json when present (the record `verify` or `run` wrote),
else verified read-only from its files. Runs are grouped into scenarios (workload, fault,
NVRx version) so a percentile never mixes a kill's latency with a hang's. Nothing is ever
overwritten: an existing --output or --json file is refused before any work.

Exit status: 0 every run qualified, 1 some run did not, 2 a path is not a readable run
directory or an output file is refused (the message names it and the fix).

Also the shared helpers of the repeat loops: `scenario_label` and `timeline_links`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from harness import safeio, stats
from harness.exitcodes import ExitStatus, guarded
from harness.picture import FILE_NAME as TIMELINE
from harness.history import RunDirError, check_run_dir
from harness.stats import RepeatStats, RunRecord

EXIT_QUALIFIED, EXIT_FAILED, EXIT_REFUSED = ExitStatus.QUALIFIED, ExitStatus.NOT_QUALIFIED, ExitStatus.REFUSED
TITLE = "Recovery qualification summary"


EXPECTATION_FILE = "expectation.json"  # {"qualified": false, "why": "..."}: a negative scenario of the suite
EXPECTED_NEGATIVE = "expected not to qualify"


@dataclass(frozen=True)
class ScenarioKey:
    workload: str | None
    fault: str
    nvrx_version: str | None
    expected_qualified: bool = True


def scenario_label(workload: str | None, fault: str, nvrx_version: str | None, expected_qualified: bool = True) -> str:
    label = f"{workload or 'unknown'} workload, fault {fault}, NVRx {nvrx_version or 'unknown'}"
    return label if expected_qualified else f"{label} ({EXPECTED_NEGATIVE})"


def expectation_record(why: str) -> str:
    """expectation.json of a run that breaks the recovery on purpose (the suite must catch it)."""
    return json.dumps({"qualified": False, "why": why}, indent=2) + "\n"


def _expected_qualified(run_dir: Path) -> bool:
    """False only when the run directory says it was meant to fail (expectation.json)."""
    path = run_dir / EXPECTATION_FILE
    if path.is_symlink() or not path.is_file():
        return True
    doc, _ = _read_json(path)
    return not (doc is not None and doc.get("qualified") is False)


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    """(the object, None), (None, None) when absent, (None, why) when unreadable."""
    try:
        data = safeio.read_json(path)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError) as exc:
        return None, str(exc) or type(exc).__name__
    return (data, None) if isinstance(data, dict) else (None, "not a JSON object")


def load_run(run_dir: Path, warn: Callable[[str], None] | None = None) -> RunRecord:
    """One run as a RunRecord. Raises RunDirError for a path that is not a readable run
    directory. Writes nothing: a run without verdict.json is verified in memory."""
    from harness.verify import verify_run  # the CLI's other commands need not import the checkers

    check_run_dir(run_dir)
    doc, why = _read_json(run_dir / "verdict.json")
    if doc is not None and not isinstance(doc.get("criteria"), list):
        doc, why = None, "it holds no criteria"
    if doc is None:
        if why and warn is not None:
            warn(f"{run_dir / 'verdict.json'} is unreadable ({why}): verified the run directory instead")
        doc = verify_run(run_dir, picture=False).to_json()
    stated = doc.get("qualified")
    if warn is not None and isinstance(stated, bool) and stated != record_qualified(doc):
        warn(f"{run_dir / 'verdict.json'} says qualified: {str(stated).lower()}, but its criteria say otherwise: "
             "the criteria were counted")
    run_json, _ = _read_json(run_dir / "run.json")
    launch_json, _ = _read_json(run_dir / "launch.json")
    spec = (run_json or {}).get("spec")
    workload = spec.get("workload") if isinstance(spec, dict) else None
    record = RunRecord.from_verdict_json(doc, run_dir=run_dir.absolute(), workload=str(workload) if workload else None,
                                         stopped_early=_stopped(launch_json))
    record = replace(record, expected_qualified=_expected_qualified(run_dir))
    version = (run_json or {}).get("nvrx_version")
    if version and not record.nvrx_version:  # a verdict.json without its launcher section
        record = replace(record, nvrx_version=str(version))
    moment = spec.get("fault_at") if isinstance(spec, dict) else None
    if isinstance(moment, str) and record.fault != "none":  # a kill in a save never mixes with one after a commit
        record = replace(record, fault=fault_label(record.fault, moment))
    return record


def fault_label(fault: str, fault_at: str | None) -> str:
    """The fault as scenarios are grouped: its kind, and its moment when not the default one."""
    return fault if fault == "none" or fault_at in (None, "after-commit") else f"{fault} at {fault_at}"


def record_qualified(doc: dict) -> bool:
    return RunRecord.from_verdict_json(doc).qualified


def _stopped(launch_json: dict | None) -> str | None:
    value = (launch_json or {}).get("stopped_early")
    return str(value) if value else None


def group_runs(records: Iterable[RunRecord]) -> list[RepeatStats]:
    """One RepeatStats per scenario, in order of first appearance."""
    groups: dict[ScenarioKey, list[RunRecord]] = {}
    for r in records:
        groups.setdefault(ScenarioKey(r.workload, r.fault, r.nvrx_version, r.expected_qualified), []).append(r)
    return [stats.summarize(scenario_label(k.workload, k.fault, k.nvrx_version, k.expected_qualified), runs)
            for k, runs in groups.items()]


def timeline_links(records: Iterable[RunRecord], relative_to: Path) -> dict[str, str]:
    """run_dir -> path of its timeline.png relative to `relative_to`, the directory the
    Markdown is read from (so the summary and the runs can move together)."""
    links = {}
    for r in records:
        picture = Path(r.run_dir) / TIMELINE
        if picture.is_file():
            links[r.run_dir] = os.path.relpath(picture.absolute(), relative_to.absolute())
    return links


def refuse_existing(option: str, path: str | None) -> str | None:
    """Why a new output file cannot be written at `path`, or None."""
    if path is None:
        return None
    target = Path(path)
    if target.exists() or target.is_symlink():
        return (f"{option} {path} already exists: choose a new file name (or move it away); existing files are "
                "never overwritten")
    parent = target.absolute().parent
    if not parent.is_dir():
        return f"{option} {path}: directory {parent} does not exist: create it first"
    return None


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("One Markdown summary over several run directories: a row per run (verdict, what did not "
                          "hold, its timeline picture) and per scenario (workload, fault, NVRx version) the pass rate "
                          "of every criterion and p50 / p95 / max of every latency. Reads verdict.json, else verifies "
                          "the run read-only. A directory without a launched run (a dry run's, an empty one) is "
                          "skipped with a note. Exit status: 0 all qualified, 1 some run did not, 2 a path is not a "
                          "readable directory, or no run was given.")
    parser.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run directories ($NVRX_WORK_DIR/runs/<run-id>)")
    parser.add_argument("--output", metavar="FILE.md",
                        help="write the Markdown to this new file instead of standard output (never overwritten)")
    parser.add_argument("--json", metavar="PATH", dest="json_path",
                        help="also write the statistics as JSON to this new file (never overwritten)")


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
    problems = [p for p in (refuse_existing("--output", args.output), refuse_existing("--json", args.json_path)) if p]
    if args.output and args.json_path and os.path.abspath(args.output) == os.path.abspath(args.json_path):
        problems.append(f"--output and --json name the same file {args.output}: give two file names")
    if problems:
        for p in problems:
            _error(p)
        return EXIT_REFUSED
    records, unreadable, skipped = [], 0, 0
    for run_dir in _distinct(args.run_dirs):
        try:
            records.append(load_run(run_dir, warn=_note))
        except RunDirError as exc:
            if _is_browsable_dir(run_dir):  # a directory, but no launched run (plan-only, empty, ...)
                _note(f"skipped: {exc}")
                skipped += 1
            else:
                _error(str(exc))
                unreadable += 1
    if unreadable:
        return EXIT_REFUSED
    if not records:
        _error(f"no launched run among the {skipped} director{'y' if skipped == 1 else 'ies'} given: give the "
               "run directories of launched runs ($NVRX_WORK_DIR/runs/<run-id>)")
        return EXIT_REFUSED
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
        return EXIT_REFUSED
    if output:
        qualified = sum(r.qualified for r in records)
        print(f"nvrx-qual report: {qualified} of {len(records)} runs qualified; written to {output}", file=sys.stderr)
    else:
        print(text, end="")
    return EXIT_QUALIFIED if all(g.all_qualified for g in groups) else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.summary")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: run(args), "nvrx-qual report", debug=False)


if __name__ == "__main__":
    sys.exit(main())
