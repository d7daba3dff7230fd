"""Create a planned run's artifact directories and write run.json, without touching
anything the user already owns."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from harness import __version__, atomic
from harness.plan import Plan
from harness.spec import SpecError


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_utc_offset_s() -> int:
    """Local time minus UTC on this host, so verify can convert local-time log stamps."""
    return -time.altzone if time.localtime().tm_isdst > 0 else -time.timezone


def run_record(plan: Plan, dry_run: bool) -> dict:
    return {
        "schema": 1,
        "created_at": utc_now_iso(),
        "utc_offset_s": local_utc_offset_s(),
        "harness_version": __version__,
        "dry_run": dry_run,
        "nvrx_version": plan.nvrx.version,
        "spec": plan.spec.to_json(),
        "cuda_device_max_connections": {"value": plan.connections.value, "reason": plan.connections.reason},
        "captures_console": plan.captures_console,
        "notes": list(plan.notes),
        "commands": [command.to_json(name) for name, command in plan.commands],
    }


def prepare(plan: Plan, dry_run: bool) -> Path:
    """mkdir the run's directories and write run.json. A run.json of an earlier *dry run*
    of the same ID is replaced (that is the seed's flow: dry run, then the real run); any
    other existing run.json is refused, as validation refused runs with launch evidence."""
    layout = plan.layout
    if layout.run_json.exists():
        try:
            earlier = json.loads(layout.run_json.read_text())
        except (OSError, ValueError):
            earlier = {}
        if not earlier.get("dry_run"):
            raise SpecError([f"run directory {layout.root} already holds run.json of a planned run: "
                             "use a new NVRX_RUN_ID for every test; old runs are never overwritten"])
    for directory in layout.artifact_dirs():
        directory.mkdir(parents=True, exist_ok=True)
    atomic.write_text(layout.run_json, json.dumps(run_record(plan, dry_run), indent=2) + "\n")
    return layout.run_json
