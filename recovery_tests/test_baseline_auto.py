"""`nvrx-qual run` with the automatic baseline, for real: the first kill run of a configuration
runs its uninterrupted twin first and is judged against it; a second run of the same
configuration (another fault even) reuses that twin and launches nothing more than itself;
a restore that drops the data position is caught by loss_continuity and state_equivalence, by
`run` and, without flags, by `verify` and `report` judging against the baseline run.json records."""

from __future__ import annotations

import json
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


def test_second_run_reuses_the_baseline_and_a_dropped_data_position_is_caught(tmp_path):
    work = tmp_path / "work"
    first = run(work, "kill-1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "baseline: running the uninterrupted twin kill-1-baseline (config hash " in first.stdout
    assert launched(work) == ["kill-1", "kill-1-baseline"]
    verdict = json.loads((work / "runs" / "kill-1" / "verdict.json").read_text())
    assert verdict["baseline"]["how"] == "ran" and verdict["baseline"]["matches_run"] is True
    assert criteria(work, "kill-1")["loss_continuity"] == "pass"
    assert criteria(work, "kill-1")["state_equivalence"] == "pass"

    second = run(work, "drop-2", "--", "--drop-on-restore", "data-position")
    assert "baseline: reusing kill-1-baseline (config hash " in second.stdout, second.stdout[-3000:]
    assert "running the uninterrupted twin" not in second.stdout
    assert launched(work) == ["drop-2", "kill-1", "kill-1-baseline"]  # one more launch: the run itself
    assert second.returncode == 1, second.stdout[-3000:]
    statuses = criteria(work, "drop-2")
    assert (statuses["loss_continuity"], statuses["state_equivalence"]) == ("fail", "fail"), statuses
    assert statuses["optimizer_state"] == "pass"  # Adam continued: only the data position was lost
    assert json.loads((work / "runs" / "drop-2" / "verdict.json").read_text())["baseline"]["how"] == "reused"

    # Every reader judges against the baseline run.json's contract records, without flags (issue 31:
    # verify and report once re-judged this very run QUALIFIED without its twin).
    drop = str(work / "runs" / "drop-2")
    verified = cli("verify", drop, "--no-write")
    assert verified.returncode == 1, verified.stdout[-3000:]
    assert "baseline " + str(work / "runs" / "kill-1-baseline") + " (reused by configuration hash)" in verified.stdout
    reported = cli("report", drop)
    assert reported.returncode == 1 and "`state_equivalence` fail" in reported.stdout, reported.stdout[-3000:]
    (work / "runs" / "kill-1-baseline").rename(tmp_path / "moved-away")
    gone = cli("verify", drop, "--no-write")
    assert gone.returncode == 1 and "baseline checks unknown: the baseline kill-1-baseline" in gone.stdout, gone.stdout
    skipped = cli("verify", drop, "--no-write", "--baseline", "none")
    assert skipped.returncode == 0, skipped.stdout[-3000:]  # the rest of the recovery held: only the data was lost
    assert "baseline skipped by request: --baseline none" in skipped.stdout, skipped.stdout


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
