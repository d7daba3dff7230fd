"""`nvrx-qual run` with the automatic baseline, for real: the first run of a configuration runs
its uninterrupted twin beside the fault run and is judged against it once both have ended, and a restore that drops the data position
is caught by loss_continuity and state_equivalence, by `run` and, without flags, by `verify` and
`report` judging against the baseline run.json records. (A later run of a configuration reusing
the twin, launching nothing more than itself: test_repeat.py's real repeats, which reuse the
session's uninterrupted run.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
# A short reference run; deadlines generous for a loaded machine (they are not in the hash).
COMMON = ["--workload", "reference", "--train-iters", "10", "--save-interval", "5", "--deadline-profile", "short"]


def run(work: Path, run_id: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "run", *COMMON, "--work-dir", str(work),
                           "--run-id", run_id, *args], cwd=REPO, capture_output=True, text=True, timeout=900)


def launched(work: Path) -> list[str]:
    """Run directories that hold a launch (launch.json): one per launcher started."""
    return sorted(p.parent.name for p in (work / "runs").glob("*/launch.json"))


def criteria(work: Path, run_id: str) -> dict[str, str]:
    doc = json.loads((work / "runs" / run_id / "verdict.json").read_text())
    return {c["id"]: c["status"] for c in doc["criteria"]}


@pytest.mark.launch
def test_the_first_run_runs_its_twin_and_a_dropped_data_position_is_caught(tmp_path):
    work = tmp_path / "work"
    run_ = run(work, "baseline-auto-drop", "--", "--drop-on-restore", "data-position")
    assert "baseline: running the uninterrupted twin baseline-auto-drop-baseline (config hash " in run_.stdout, \
        run_.stdout[-3000:] + run_.stderr[-2000:]
    assert "BASELINE QUALIFIED" in run_.stdout, run_.stdout[-3000:]
    assert launched(work) == ["baseline-auto-drop", "baseline-auto-drop-baseline"]  # the twin and the run
    assert "beside the fault run" in run_.stdout and re.search(r"^twin  \[", run_.stdout, re.M), run_.stdout[-3000:]
    assert run_.returncode == 1, run_.stdout[-3000:]
    verdict = json.loads((work / "runs" / "baseline-auto-drop" / "verdict.json").read_text())
    assert verdict["baseline"]["how"] == "ran" and verdict["baseline"]["matches_run"] is True, verdict["baseline"]
    statuses = criteria(work, "baseline-auto-drop")
    assert (statuses["loss_continuity"], statuses["state_equivalence"]) == ("fail", "fail"), statuses
    assert statuses["optimizer_state"] == "pass"  # Adam continued: only the data position was lost
    twin = criteria(work, "baseline-auto-drop-baseline")
    assert all(status in ("pass", "not_applicable") for status in twin.values()), twin

    # Every reader judges against the baseline run.json's contract records, without flags (issue 31:
    # verify and report once re-judged this very run QUALIFIED without its twin).
    drop = str(work / "runs" / "baseline-auto-drop")
    verified = cli("verify", drop, "--no-write")
    assert verified.returncode == 1, verified.stdout[-3000:]
    twin_dir = work / "runs" / "baseline-auto-drop-baseline"
    assert f"baseline {twin_dir} (the twin run first)" in verified.stdout, verified.stdout[-3000:]
    reported = cli("report", drop)
    assert reported.returncode == 1 and "`state_equivalence` fail" in reported.stdout, reported.stdout[-3000:]
    twin_dir.rename(tmp_path / "moved-away")
    gone = cli("verify", drop, "--no-write")
    assert gone.returncode == 1, gone.stdout
    assert "baseline checks unknown: the baseline baseline-auto-drop-baseline" in gone.stdout, gone.stdout
    skipped = cli("verify", drop, "--no-write", "--baseline", "none")
    assert skipped.returncode == 0, skipped.stdout[-3000:]  # the rest of the recovery held: only the data was lost
    assert "baseline skipped by request: --baseline none" in skipped.stdout, skipped.stdout


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
