"""`nvrx-qual report RUN_DIR... [--output FILE.md] [--json PATH]`: one Markdown summary over
several runs.

Each run is read from its verdict.json when present (the record `verify` or `run` wrote),
else verified read-only from its files. Runs are grouped into scenarios (workload, fault,
NVRx version) so a percentile never mixes a kill's latency with a hang's. Nothing is ever
overwritten: an existing --output or --json file is refused before any work.

The command itself (options, lines printed, exit status) is harness.cli.report.

Also the shared helpers of the repeat loops: `scenario_label` and `timeline_links`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from harness import safeio, stats
from harness.picture import FILE_NAME as TIMELINE
from harness.history import RunDirError, check_run_dir
from harness.stats import RepeatStats, RunRecord

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
