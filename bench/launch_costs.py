"""What each scenario class of the launch budget cost in a test session, from its run directories.

    python bench/launch_costs.py DIR [DIR ...]

DIR: a work directory of a session (`--work-dir`, or pytest's `nvrx-qual-work*` under its base
temp; `.ci/run` keeps them when a test failed) or any directory above run directories. Every run
directory with a launch.json is one launch: its class as fixtures/budget.py gives it (the
ScenarioRunner's `baseline-<workload>` is not recorded in the run directory: an uninterrupted
run of a scenario's configuration shows under its run ID's class), its wall time from the
launcher's start to its end (launch.json), and when it ran. Prints per class: launches, total
and longest wall time, and the session's launch time in all against its wall span (how much the
launches overlapped). Asserts nothing; the figures go to docs/figures.md with date and machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures.budget import class_of_run_id  # noqa: E402


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def launches(roots: list[Path]) -> list[tuple[str, float, float]]:
    """(class, start, end) of every launch.json below the roots."""
    out = []
    for root in roots:
        for record in sorted(root.rglob("launch.json")):
            try:
                doc = json.loads(record.read_text(encoding="utf-8"))
                start, end = _stamp(doc["started_at"]), _stamp(doc["ended_at"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            out.append((class_of_run_id(record.parent.name), start, end))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    found = launches(args.dirs)
    if not found:
        print("no launch.json below " + ", ".join(map(str, args.dirs)))
        return 1
    by_class: dict[str, list[float]] = defaultdict(list)
    for cls, start, end in found:
        by_class[cls].append(end - start)
    print(f"{platform.node()}, {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}: {len(found)} launches")
    print(f"{'class':<64} {'n':>3} {'total s':>9} {'max s':>7}")
    for cls, walls in sorted(by_class.items(), key=lambda kv: -sum(kv[1])):
        print(f"{cls:<64} {len(walls):>3} {sum(walls):>9.1f} {max(walls):>7.1f}")
    busy = sum(end - start for _, start, end in found)
    span = max(end for _, _, end in found) - min(start for _, start, _ in found)
    print(f"launch time in all {busy:.1f} s over a span of {span:.1f} s: {busy / span:.2f} launches at once on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
