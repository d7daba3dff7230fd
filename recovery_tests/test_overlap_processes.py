"""The twin beside the fault run, with real processes: both launches run at once, and every exit
path stops both. A Ctrl-C (SIGINT, SIGTERM, SIGHUP alike: one record of the signals for both,
harness.launch.job.SignalHold) stops both launches, each writing launch.json with how it ended,
and the command exits 128+N; SIGKILL of the harness takes both launches with it (each its own
watchdog); a launch the harness cancels (the run beside it ended by an error) is stopped and
swept like any other.

The harness process is launch_entrypoints/overlap_driver.py (`nvrx-qual run`'s first run of a
configuration, its launchers the fake launcher, which leaves orphans in sessions of their own the
way torch elastic's workers do). What survives is read from /proc.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.launch import job as launch

from .test_launch import _alive, await_record, fake_plan, pids_with_tag, read_record
from .test_signals import await_gone

pytestmark = pytest.mark.e2e

DRIVER = Path(__file__).parent / "launch_entrypoints" / "overlap_driver.py"
REPO = Path(__file__).resolve().parent.parent
RUNS = ("overlap-test", "overlap-test-baseline")  # the fault run and its twin


@pytest.fixture
def driver(tmp_path):
    """Starts the driver; at teardown it and every process either launch recorded are killed,
    whatever happened."""
    procs: list[subprocess.Popen] = []
    work = tmp_path / "work"
    work.mkdir()

    def start(*fake_args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, str(DRIVER), str(work), *fake_args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        procs.append(proc)
        return proc

    yield start, work
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for run_id in RUNS:
        doc = read_record(work / f"{run_id}.record.json")
        for pid in pids_with_tag(doc["tag"]) if doc and doc.get("tag") else []:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def both_running(work: Path) -> list[dict]:
    """The records of both launches, each with its launcher and orphans alive at the same moment."""
    docs = [await_record(work / f"{run_id}.record.json") for run_id in RUNS]
    for doc in docs:
        tagged = pids_with_tag(doc["tag"])
        assert doc["pid"] in tagged and set(doc["orphans"]) <= set(tagged), (doc, tagged)
    return docs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_stop_signal_stops_both_launches(driver, sig):
    start, work = driver
    proc = start("--orphans", "--forever")
    docs = both_running(work)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out[-2000:] + err[-2000:]
    assert f"stopped by {sig.name}" in err and "Traceback" not in err, err
    for doc in docs:
        assert pids_with_tag(doc["tag"]) == [] and not any(_alive(p) for p in [doc["pid"], *doc["orphans"]])
    for run_id in RUNS:
        written = json.loads((work / "runs" / run_id / "launch.json").read_text())
        assert written["ended_by"] == f"signal {sig.name}", (run_id, written)
        assert written["leftover_processes_killed"] >= 2
    # each launch said at once what it stops, on its own labelled line
    for label, run_id in (("twin", "overlap-test-baseline"), ("kill", "overlap-test")):
        assert re.search(rf"^{label}  \[\s*[\d.]+s\] {sig.name} received: stopping run {run_id}: ", out, re.M), out


def test_a_stop_signal_before_the_twin_launched_stops_the_fault_run_and_launches_nothing_more(driver):
    """The reference's twin waits for the fault run's workers to start (the fake launcher never
    records it): SIGINT stops the fault run alone, and the twin is never launched."""
    start, work = driver
    proc = start("--twin-waits", "--orphans", "--forever")
    doc = await_record(work / f"{RUNS[0]}.record.json")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, out[-2000:] + err[-2000:]
    assert "stopped by SIGINT" in err and "Traceback" not in err, err
    assert pids_with_tag(doc["tag"]) == [] and not any(_alive(p) for p in [doc["pid"], *doc["orphans"]])
    assert json.loads((work / "runs" / RUNS[0] / "launch.json").read_text())["ended_by"] == "signal SIGINT"
    assert not (work / f"{RUNS[1]}.record.json").exists() and not (work / "runs" / RUNS[1]).exists()
    assert not re.search(r"^twin  \[", out, re.M), out


def test_sigkill_of_the_harness_takes_both_launches_with_it(driver):
    start, work = driver
    proc = start("--orphans", "--forever")
    docs = both_running(work)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    victims = [p for doc in docs for p in (doc["pid"], *doc["orphans"])]
    assert await_gone(victims) == [], "a launch outlived the SIGKILLed harness"
    assert all(pids_with_tag(doc["tag"]) == [] for doc in docs)


def test_a_cancelled_launch_is_stopped_and_swept(tmp_path):
    """harness.launch.job.launch's `cancel`: once it gives a reason, the job is stopped as on any
    other stop (SIGTERM, then SIGKILL, the sweep by tag) and launch.json says why."""
    record = tmp_path / "record.json"
    plan = fake_plan(tmp_path, "--orphans", "--forever", "--record", str(record))
    recorded = threading.Event()

    def cancel() -> str | None:
        if read_record(record) is not None:
            recorded.set()
            return "cancelled: the fault run it was launched beside ended by RuntimeError"
        return None

    result = launch.launch(plan, deadline_s=60.0, tick_s=0.05, cancel=cancel)
    doc = read_record(record)
    assert recorded.is_set() and doc is not None
    assert (result.ended_by, result.stopped_early) == (
        "cancelled", "cancelled: the fault run it was launched beside ended by RuntimeError")
    assert pids_with_tag(doc["tag"]) == [] and not any(_alive(p) for p in [doc["pid"], *doc["orphans"]])
    assert json.loads(plan.layout.launch_json.read_text())["ended_by"] == "cancelled"
