"""Signals and orphans: SIGINT, SIGTERM and SIGHUP of the harness stop the whole launch and
write launch.json with how it ended (exit status 128+N); a second signal does not interrupt
the sweep; SIGKILL of the harness, which cannot be caught, still takes the launch with it
(the watchdog); a write error under logs/ never leaves the launcher blocked on a full pipe; a
disk-full run's tmpfs on checkpoints/ is released on a stop signal and on the harness's SIGKILL.

Real processes throughout: a harness process (launch_entrypoints/launch_driver.py, or the
real `nvrx-qual run`) and the fake launcher that leaves orphans in sessions of their own the
way torch elastic's workers do. What survives is read from /proc, not from the module's own
process finder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.launch import job as launch
from harness.safe import safeio

from .test_launch import _alive, await_record, fake_plan, pids_with_tag, record  # noqa: F401

pytestmark = pytest.mark.e2e

DRIVER = Path(__file__).parent / "launch_entrypoints" / "launch_driver.py"
REPO = Path(__file__).resolve().parent.parent
GONE_WITHIN_S = 15.0  # the fake launcher's processes end on their own after 30 s: a test must fail before


def start_driver(tmp_path: Path, record_path: Path, *launcher_args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path / "work"), "--orphans", "--forever",
                             "--record", str(record_path), *launcher_args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc


def await_gone(pids: list[int], within_s: float = GONE_WITHIN_S) -> list[int]:
    deadline = time.monotonic() + within_s
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def launch_json_of(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "work" / "runs" / "signal-test" / "launch.json").read_text())


@pytest.fixture
def short_tmpdir():
    """A new empty TMPDIR with a short path (socket names must fit below it), removed at teardown."""
    path = Path(tempfile.mkdtemp(prefix="nq-sig-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def harness_proc():
    """The driver process; killed with its group at teardown whatever happened."""
    procs: list[subprocess.Popen] = []
    yield procs.append
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_stops_the_whole_launch_and_says_so_in_launch_json(tmp_path, record, harness_proc, sig):
    proc = start_driver(tmp_path, record)
    harness_proc(proc)
    doc = await_record(record)
    tagged = pids_with_tag(doc["tag"])
    assert doc["pid"] in tagged and set(doc["orphans"]) <= set(tagged)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {sig.name}" in err and "Traceback" not in err
    assert pids_with_tag(doc["tag"]) == [] and not any(_alive(p) for p in [doc["pid"], *doc["orphans"]])
    written = launch_json_of(tmp_path)
    assert written["ended_by"] == f"signal {sig.name}"
    assert written["stopped_early"] == f"interrupted: the harness received {sig.name}"
    assert written["leftover_processes_killed"] >= 2


def test_a_second_signal_does_not_interrupt_the_sweep(tmp_path, record, harness_proc):
    # The launcher ignores SIGTERM, so the harness sits in the grace period (3 s) when more signals come.
    proc = start_driver(tmp_path, record, "--grace=3", "--ignore-term")
    harness_proc(proc)
    doc = await_record(record)
    proc.send_signal(signal.SIGTERM)
    for sig in (signal.SIGINT, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        time.sleep(0.1)  # spacing between the user's presses, not a wait for a condition
        if proc.poll() is None:
            proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err  # the first signal's status, whatever came after
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert pids_with_tag(doc["tag"]) == [] and not any(_alive(p) for p in [doc["pid"], *doc["orphans"]])
    assert launch_json_of(tmp_path)["ended_by"] == "signal SIGTERM"


def test_a_stop_signal_is_acknowledged_at_once_not_after_the_grace(tmp_path, record, harness_proc):
    """Ctrl-C: a line saying what is being stopped comes while the stop is still under way (the
    launcher ignores SIGTERM here, so the harness is bound to wait out the grace, 3 s here,
    before its SIGKILL); then the stop ends as ever."""
    proc = start_driver(tmp_path, record, "--grace=3", "--ignore-term")
    harness_proc(proc)
    doc = await_record(record)
    proc.send_signal(signal.SIGINT)
    first, seen = "", []
    for line in proc.stderr:  # up to the driver's first own line (or the end of stderr: a failure below)
        seen.append(line)
        if line.startswith("launch_driver: "):
            first = line
            break
    still_stopping = proc.poll() is None and bool(pids_with_tag(doc["tag"]))
    _out, err = proc.communicate(timeout=60)
    err = "".join(seen) + err
    assert first.startswith("launch_driver: SIGINT received: stopping run signal-test: SIGTERM to its launcher now, "
                            "SIGKILL to whatever is left after 3 s"), first + err
    assert still_stopping, "the acknowledgement came only after the stop"
    assert proc.returncode == 128 + signal.SIGINT and "stopped by SIGINT" in err
    assert pids_with_tag(doc["tag"]) == []


def test_sigkill_of_the_harness_takes_the_launch_with_it(tmp_path, record, harness_proc):
    proc = start_driver(tmp_path, record, "--temp")
    harness_proc(proc)
    doc = await_record(record)
    victims = [doc["pid"], *doc["orphans"]]  # one orphan is stopped (SIGSTOP), as a hung worker
    temp = Path(doc["tempdir"])
    assert temp.is_dir() and doc["env"]["TMPDIR"] == str(temp)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert await_gone(victims) == [], "the launch outlived the SIGKILLed harness"
    assert pids_with_tag(doc["tag"]) == []
    deadline = time.monotonic() + GONE_WITHIN_S  # the watchdog removes it right after the kill
    while temp.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not temp.exists(), f"the launch's temporary directory outlived the SIGKILLed harness: {temp}"


def test_a_write_error_under_logs_does_not_block_the_launcher(tmp_path, monkeypatch, record):
    """logs/console.log on a full disk (/dev/full): the capture keeps draining the pipe, the
    launcher ends on its own (not at the deadline) and the error is reported."""
    real = safeio.open_append

    def full_disk(path):
        return open("/dev/full", "a", encoding="utf-8") if Path(path).name == "console.log" else real(path)

    monkeypatch.setattr(launch.safeio, "open_append", full_disk)
    plan = fake_plan(tmp_path, "--burst", "20000", "--record", str(record), "--exit", "0")  # 2 MB: 30 pipe buffers
    result = launch.launch(plan, deadline_s=20.0, tick_s=0.05)
    assert result.stopped_early is None and result.launcher_exit_code == 0
    assert result.capture_error and "No space left on device" in result.capture_error
    written = json.loads(plan.layout.launch_json.read_text())
    assert written["capture_error"] == result.capture_error and written["ended_by"] == "exit"


# ---------------------------------------------------------------- the real `nvrx-qual run`


def _launch_pids(run_id: str) -> list[int]:
    """Live processes tagged with this run's launch (tag = <run-id>-<random>)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(f"{launch.TAG}={run_id}-".encode()) for v in env) and _alive(int(entry)):
            found.append(int(entry))
    return found


@pytest.mark.launch
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_nvrx_qual_run_leaves_nothing_behind_when_signalled(tmp_path, harness_proc, short_tmpdir, sig):
    run_id = f"sig-{sig.name.lower()}"
    work = tmp_path / "work"
    argv = [sys.executable, "-m", "harness", "run", "--workload", "reference", "--fault", "none",
            "--work-dir", str(work), "--run-id", run_id, "--train-iters", "400"]  # the installed NVRx
    temp = short_tmpdir  # to be left empty
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(temp)})
    harness_proc(proc)
    logs = work / "runs" / run_id / "logs"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:  # until training runs: workers and all are up
        if any(" iteration " in p.read_text(errors="replace") for p in logs.glob("*cycle*.log")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1]
    pids = _launch_pids(run_id)
    assert len(pids) >= 3, pids  # launcher + two workers at least
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert await_gone(pids, 30.0) == [] and _launch_pids(run_id) == []
    deadline = time.monotonic() + GONE_WITHIN_S  # after a SIGKILL the watchdog removes the launch's directory
    while list(temp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(temp.iterdir()) == [], "left behind in TMPDIR"
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert f"SIGTERM received: stopping run {run_id}: SIGTERM to its launcher now" in out  # a progress line
        doc = json.loads((work / "runs" / run_id / "launch.json").read_text())
        assert doc["ended_by"] == "signal SIGTERM"


def _mounted_under(root: Path) -> list[str]:
    real = os.path.realpath(root)
    with open("/proc/self/mounts", encoding="utf-8") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(real + os.sep)]


def _await_mount(root: Path) -> list[str]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while not (found := _mounted_under(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


@pytest.fixture
def no_mount_left(tmp_path):
    """Whatever the test found, no tmpfs of it stays mounted after it (released at teardown)."""
    yield
    from harness.machine import tmpfs

    for point in _mounted_under(tmp_path):
        tmpfs.release(Path(point))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_disk_full_mount_goes_with_the_harness(tmp_path, record, harness_proc, no_mount_left, sig):
    """SIGTERM: launch()'s own `finally` releases the tmpfs; SIGKILL: the watchdog does."""
    from harness.machine import tmpfs

    if tmpfs.problems():
        pytest.skip(f"needs root and a working tmpfs mount: {tmpfs.problems()[0]}")
    proc = start_driver(tmp_path, record, "--disk-full")
    harness_proc(proc)
    doc = await_record(record)
    checkpoints = tmp_path / "work" / "runs" / "signal-test" / "checkpoints"
    assert _await_mount(tmp_path) == [str(checkpoints)]
    (checkpoints / "written-during-the-run").write_text("kept")
    if sig == signal.SIGKILL:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert await_gone([doc["pid"], *doc["orphans"]]) == []
        deadline = time.monotonic() + GONE_WITHIN_S  # the watchdog releases it right after the kill:
        released = lambda: not _mounted_under(tmp_path) and not list(  # noqa: E731 unmounted, the copy moved back
            checkpoints.parent.glob(tmpfs.STAGING_PREFIX + "*"))
        while not released() and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err
        assert launch_json_of(tmp_path)["checkpoint_tmpfs_left"] is None
    assert _mounted_under(tmp_path) == [], "the disk-full tmpfs outlived the harness"
    assert (checkpoints / "written-during-the-run").read_text() == "kept"
