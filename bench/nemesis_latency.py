"""How fast, and how cheaply, the nemesis turns a new checkpoint into a signal.

    /tmp/venv/bin/python bench/nemesis_latency.py [--trials 50] [--poll-interval S] [--idle-seconds 5]

1. Delay: per trial, a real `python -m harness.nemesis --fault kill -- worker.py` process
   polls a tracker at its baseline; at a random phase of its poll cycle this script
   writes a newer iteration (Megatron's way) and times until waitpid reports SIGKILL.
   Also from the marker: write -> `injected_at` (millisecond stamps).
2. CPU cost of the poller: the poller thread's own CPU time (/proc/<pid>/task/<tid>/schedstat,
   nanoseconds) over --idle-seconds of polling in a real wrapper, per poll and per second.
3. Import cost of harness.nemesis (python -X importtime), paid once by every worker.

Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.vocab.layout import MARKER_NAME, TRACKER_NAME  # noqa: E402
from harness.nemesis.injector import DEFAULT_POLL_INTERVAL_S  # noqa: E402

WORKER = REPO / "recovery_tests" / "nemesis_entrypoints" / "worker.py"
DEADLINE_S = 20.0


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.002)


def syscr(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr:"))


@contextmanager
def wrapper(work: Path, name: str, poll_interval: float | None) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A selected-rank wrapper around the idle test worker, its tracker at baseline 0."""
    run_dir, control = work / f"run-{name}", work / f"control-{name}"
    (run_dir / "checkpoints").mkdir(parents=True)
    control.mkdir()
    (run_dir / "checkpoints" / TRACKER_NAME).write_text("0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    env.update(RANK="1", WORLD_SIZE="2", NVRX_DEMO_FAULT="kill", NVRX_RUN_DIR=str(run_dir))
    if poll_interval is not None:
        env["NVRX_POLL_INTERVAL"] = str(poll_interval)
    argv = [sys.executable, "-m", "harness.nemesis", "--", str(WORKER), "--control", str(control)]
    proc = subprocess.Popen(
        argv, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: (control / "record.json").exists() or proc.poll() is not None, "the worker to start")
        if proc.poll() is not None:
            raise SystemExit(f"bench: wrapper exited {proc.returncode} before the worker started")
        yield proc, run_dir
    finally:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def one_trial(work: Path, index: int, poll_interval: float | None, interval: float) -> tuple[float, float]:
    """(write -> SIGKILL seen by waitpid, write -> marker injected_at), seconds."""
    with wrapper(work, str(index), poll_interval) as (proc, run_dir):
        start = syscr(proc.pid)
        wait_for(lambda: syscr(proc.pid) > start, "the first poll")
        time.sleep(random.uniform(0, interval))  # a random phase within the poll cycle
        wall = time.time()
        t0 = time.perf_counter()
        with open(run_dir / "checkpoints" / TRACKER_NAME, "w") as f:
            f.write("5")
        proc.wait(timeout=DEADLINE_S)
        t1 = time.perf_counter()
        if proc.returncode != -signal.SIGKILL:
            raise SystemExit(f"bench: trial {index} ended with {proc.returncode}, not SIGKILL")
        stamp = json.loads((run_dir / MARKER_NAME).read_text())["injected_at"]
        injected = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        return t1 - t0, injected - wall


def poller_cpu(work: Path, poll_interval: float | None, seconds: float) -> tuple[float, int]:
    """(poller thread CPU seconds, polls) over `seconds` of polling an unchanged tracker."""
    with wrapper(work, "idle", poll_interval) as (proc, _):
        tasks = [t for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
        if len(tasks) != 1:
            raise SystemExit(f"bench: expected one poller thread, found tasks {tasks}")
        schedstat = Path(f"/proc/{proc.pid}/task/{tasks[0]}/schedstat")
        cpu0, reads0 = int(schedstat.read_text().split()[0]), syscr(proc.pid)
        time.sleep(seconds)
        cpu1, reads1 = int(schedstat.read_text().split()[0]), syscr(proc.pid)
    return (cpu1 - cpu0) / 1e9, reads1 - reads0


def import_cost_ms() -> float:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import harness.nemesis"],
        capture_output=True, text=True, cwd=REPO, check=True,
    ).stderr  # fmt: skip
    for line in out.splitlines():
        if line.rstrip().endswith("harness.nemesis"):
            return int(line.split("|")[1]) / 1000
    raise SystemExit("bench: harness.nemesis missing from -X importtime output")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--poll-interval", type=float, default=None, help="default: the nemesis default")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    interval = args.poll_interval or DEFAULT_POLL_INTERVAL_S

    with tempfile.TemporaryDirectory(prefix="nemesis-bench-") as tmp:
        work = Path(tmp)
        trials = [one_trial(work, i, args.poll_interval, interval) for i in range(args.trials)]
        cpu_s, polls = poller_cpu(work, args.poll_interval, args.idle_seconds)

    to_signal = [t[0] * 1000 for t in trials]
    to_marker = [t[1] * 1000 for t in trials]
    print(f"nemesis latency, poll interval {interval:g} s, {len(trials)} trials ({os.cpu_count()} CPUs)")
    for label, values in (("tracker write -> SIGKILL (waitpid)", to_signal), ("tracker write -> marker stamp", to_marker)):
        print(
            f"  {label:36s} median {statistics.median(values):6.1f} ms   p95 {percentile(values, 0.95):6.1f} ms"
            f"   max {max(values):6.1f} ms"
        )
    per_poll_us = cpu_s / polls * 1e6 if polls else float("nan")
    print(
        f"poller CPU over {args.idle_seconds:g} s: {cpu_s * 1000:.2f} ms for {polls} polls "
        f"= {per_poll_us:.1f} us/poll, {cpu_s / args.idle_seconds * 100:.3f} % of one core, "
        f"{cpu_s / args.idle_seconds * 0.100 * 1e6:.0f} us per 100 ms training step"
    )
    print(f"import harness.nemesis: {import_cost_ms():.1f} ms (cumulative, -X importtime)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
