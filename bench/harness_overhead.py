"""What `nvrx-qual run` costs beside the bare launcher command `nvrx-qual plan` prints for the
same fault run: the first run of a configuration (its automatic twin included) and a run that
reuses its baseline, on this machine, back to back.

    python bench/harness_overhead.py [--rounds 3] [--workloads reference,megatron-cpu] [--fault kill]
                                     [--work-dir DIR] [--nvrx-path P] [--baseline auto|none]

Per workload, each round times three commands, in an order that rotates from round to round
so that a drift of the machine's load hits each alike:
  bare    the exact launcher command `nvrx-qual plan` printed (`cd RUN_DIR && ... ft_launcher ...`),
          run by bash: the same launcher, workers and nemesis, nothing watched, verified or drawn;
  first   `python -m harness run` in a fresh work directory: where the workload's runs are judged
          against an automatic baseline (`--baseline auto`, the CPU tiers' default) it runs the
          uninterrupted twin beside the fault run (harness.launch.runner.execute_with_baseline), as
          the first run of every configuration does;
  reused  `python -m harness run` in a work directory that holds that baseline already (the first
          round's `first` run leaves it; that round runs `first` before `reused`), as every later
          run of a configuration does: it still pays for judging against it.
Each is timed from the start of its process to its end: wall time, and the CPU time of the
whole process tree (user + system of the waited-for children, which includes the launchers'
workers and the twin's). For the reused runs, launch.json's span splits the wall time into before
the launch (the interpreter, planning, the run directory), the launch (the launcher's start to the
sweep of its processes: compare with bare) and after it (the verdict, its files, the exit).
Prints every round with the load average before each command, the
medians, `first / bare` (issue 35's target: at most 1.3x) and `reused - bare` (at most 1 s on
an idle machine).

A command that exits 2 or 3 (refused, an internal error) is no timing of a run: its last
lines of stderr are printed and it is left out of the medians.

Asserts nothing; figures move with the machine's load (the load average is printed): run it
when the machine is quiet for figures to keep. PYTHONDONTWRITEBYTECODE (set on some CI
machines) makes every Python process of every command compile what it imports: the bench says
whether it is set. Needs tools/install-megatron-cpu.sh for megatron-cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # launch.json's stamps are read as the harness reads them
KINDS = ("bare", "first", "reused")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def timed(argv: list[str], cwd: Path) -> tuple[float, float, int, float, float]:
    """(wall s, CPU s of the process tree, exit status, start and end on the wall clock) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.time()
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - start
    ended = began + wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):  # refused (2) or an internal error (3): no timing of a run; say why
        for line in proc.stderr.decode(errors="replace").splitlines()[-4:]:
            print(f"    stderr: {line[:300]}")
    return wall, cpu, proc.returncode, began, ended


def launch_span(run_dir: Path) -> tuple[float, float] | None:
    """(started, ended) of the run's launch on the wall clock, from its launch.json: from just
    before the launcher is started to the end of the sweep of its processes."""
    from harness.vocab.dialect import parse_iso_utc  # the stamps as the harness reads them

    try:
        record = json.loads((run_dir / "launch.json").read_text())
    except (OSError, ValueError):
        return None
    started, ended = (parse_iso_utc(record.get(k)) if isinstance(record, dict) else None
                      for k in ("started_at", "ended_at"))
    return (started, ended) if started is not None and ended is not None else None


def bare_command(options: list[str], work: Path, run_id: str) -> str:
    """The launcher command `nvrx-qual plan` prints for this run (its run directory made)."""
    out = subprocess.run([sys.executable, "-m", "harness", "plan", *options, "--work-dir", str(work),
                          "--run-id", run_id], env=_env(), capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("cd ") and "fault_tolerance.launcher" in line]
    if len(lines) != 1:
        raise SystemExit(f"expected one launcher command from nvrx-qual plan, got:\n{out}")
    return lines[0]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def bench_workload(workload: str, args: argparse.Namespace, root: Path) -> dict[str, list[tuple[float, float]]]:
    """Every round's (wall, CPU) per kind for one workload, printed as it goes."""
    options = ["--workload", workload, "--fault", args.fault]
    if args.nvrx_path is not None:
        options += ["--nvrx-path", args.nvrx_path]
    run_options = options + (["--baseline", args.baseline] if args.baseline is not None else [])
    shared = root / f"{workload}-reused"  # the first round's `first` run leaves its baseline here
    bare_dir = root / f"{workload}-bare"
    for d in (shared, bare_dir):
        d.mkdir(parents=True, exist_ok=True)
    print(f"\n{workload}, fault {args.fault}, {args.rounds} rounds "
          f"(load average before each command in brackets)")
    print(f"{'round':>5}  {'bare wall/CPU':>20}  {'first wall/CPU':>20}  {'reused wall/CPU':>20}")
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    split: list[tuple[float, float, float]] = []  # a reused run's (before, launch, after) in seconds
    for i in range(args.rounds):
        stamp = time.strftime("%H%M%S")
        first_dir = shared if i == 0 else root / f"{workload}-first-{i}"
        first_dir.mkdir(parents=True, exist_ok=True)
        argv = {
            "bare": ["bash", "-c", bare_command(options, bare_dir, f"bare-{stamp}-{i}")],
            "first": [sys.executable, "-m", "harness", "run", *run_options, "--quiet", "--work-dir", str(first_dir),
                      "--run-id", f"first-{stamp}-{i}"],
            "reused": [sys.executable, "-m", "harness", "run", *run_options, "--quiet", "--work-dir", str(shared),
                       "--run-id", f"reused-{stamp}-{i}"],
        }
        order = [("first", "bare", "reused"), ("bare", "reused", "first"), ("reused", "first", "bare")][i % 3]
        row: dict[str, str] = {}
        for kind in order:
            load = os.getloadavg()[0]
            wall, cpu, code, began, ended = timed(argv[kind], root)
            if code in (0, 1):  # a run that was refused or broke is no timing: left out of the medians
                got[kind].append((wall, cpu))
                span = launch_span(shared / "runs" / argv[kind][-1]) if kind == "reused" else None
                if span is not None:
                    split.append((span[0] - began, span[1] - span[0], ended - span[1]))
            row[kind] = f"{wall:6.1f}s/{cpu:5.1f}s [{load:4.1f}]"
            if code != 0:
                print(f"  {kind} exited {code}: {shlex.join(argv[kind])[:300]}")
        print(f"{i + 1:>5}  {row['bare']:>20}  {row['first']:>20}  {row['reused']:>20}", flush=True)
    if split:
        before, during, after = (statistics.median(x[j] for x in split) for j in range(3))
        print(f"  reused, median split (launch.json's span): {before:.2f} s before the launch, {during:.2f} s the "
              f"launch, {after:.2f} s after it (the verdict, its files, the process's exit)")
    return got


def summary(workload: str, got: dict[str, list[tuple[float, float]]]) -> None:
    if not all(got.values()):
        print(f"{workload}: no medians: no round of {', '.join(k for k, v in got.items() if not v)} ran to a verdict")
        return
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in got.items()}
    (bw, bc), (fw, fc), (rw, rc) = med["bare"], med["first"], med["reused"]
    print(f"{workload} medians: bare {bw:.2f} s wall / {bc:.2f} s CPU; first run (twin included) {fw:.2f} s wall / "
          f"{fc:.2f} s CPU; reused baseline {rw:.2f} s wall / {rc:.2f} s CPU")
    print(f"{workload}: first / bare {fw / bw:.2f}x wall, {fc / bc:.2f}x CPU (target: at most 1.3x); "
          f"reused - bare {rw - bw:+.2f} s wall, {rc - bc:+.2f} s CPU (target: within 1 s on an idle machine)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default="reference,megatron-cpu")
    parser.add_argument("--fault", default="kill")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary directory, removed")
    parser.add_argument("--nvrx-path", default=None, help="passed to plan and run (default: their own choice)")
    parser.add_argument("--baseline", default=None, help="passed to run (default: the workload's own)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvrx-qual-overhead-") as tmp:
        root = args.work_dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        # What torch elastic and NVRx leave in a temporary directory (torchelastic_errors_*, sockets)
        # when the bare launcher command runs them goes into the bench's own, removed with it.
        scratch = Path(tmp) / "tmp"
        scratch.mkdir()
        os.environ["TMPDIR"] = str(scratch)
        bytecode = "off (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs "
              f"({cpu_model()}), bytecode caching {bytecode}, load average {os.getloadavg()[0]:.1f} at the start")
        results = {w: bench_workload(w, args, root) for w in args.workloads.split(",")}
        print()
        for workload, got in results.items():
            summary(workload, got)
        print(f"# load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min) at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
