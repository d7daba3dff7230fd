"""The harness's own cost: `nvrx-qual run` against the bare launcher command `nvrx-qual plan`
prints for the same run, in pairs, on this machine.

    python bench/harness_overhead.py [--pairs 4] [--work-dir DIR] [--workload reference] [--fault kill]

Each pair runs, in alternating order so that a drift of the machine's load hits both alike:
  bare   the exact command `nvrx-qual plan` printed (`cd RUN_DIR && ... ft_launcher ...`), run by
         bash: the same launcher, workers and nemesis, nothing watched, verified or drawn;
  run    `python -m harness run` with the same options (its own start-up imports, the watcher,
         verify, report.md, timeline.png, the final sweep).
Both are timed from the start of their process to its end: wall time, and the CPU time of the
whole process tree (user + system of the waited-for children, which includes the launcher's
workers). Prints every pair, the medians and the difference (the harness's own cost).

Like for like: where the workload's runs are judged against an automatic baseline (`--baseline
auto`, the CPU tiers' default), the first run of a configuration also runs its uninterrupted
twin, which the bare command never does. One untimed `nvrx-qual run` therefore comes first,
so that every timed run reuses that baseline (as every run of a configuration after its first
does) and still pays for judging against it (loss_continuity, state_equivalence); what the
twin itself costs is bench/baseline_cost.py's figure. `--baseline none` times runs without one.

Asserts nothing; figures move with the machine's load (the load average is printed): run it
when the machine is quiet. PYTHONDONTWRITEBYTECODE (set on some CI machines) makes every
Python process of both commands compile what it imports: the bench says whether it is set.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def timed(argv: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, CPU s of the process tree, exit status) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def bare_command(options: list[str], work: Path, run_id: str) -> str:
    """The launcher command `nvrx-qual plan` prints for this run (its run directory made)."""
    out = subprocess.run([sys.executable, "-m", "harness", "plan", *options, "--work-dir", str(work),
                          "--run-id", run_id], env=_env(), capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("cd ") and "fault_tolerance.launcher" in line]
    if len(lines) != 1:
        raise SystemExit(f"expected one launcher command from nvrx-qual plan, got:\n{out}")
    return lines[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--workload", default="reference")
    parser.add_argument("--fault", default="kill")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary directory, removed")
    parser.add_argument("--nvrx-path", default=None, help="passed to plan and run (default: their own choice)")
    parser.add_argument("--baseline", default=None,
                        help="passed to run (default: the workload's own; with auto one untimed run comes first)")
    args = parser.parse_args()
    options = ["--workload", args.workload, "--fault", args.fault]
    if args.nvrx_path is not None:
        options += ["--nvrx-path", args.nvrx_path]
    run_options = options + (["--baseline", args.baseline] if args.baseline is not None else [])
    with tempfile.TemporaryDirectory(prefix="nvrx-qual-overhead-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        # What torch elastic and NVRx leave in a temporary directory (torchelastic_errors_*, sockets)
        # when the bare launcher command runs them goes into the bench's own, removed with it.
        scratch = Path(tmp) / "tmp"
        scratch.mkdir()
        os.environ["TMPDIR"] = str(scratch)
        bytecode = "off (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
        print(f"harness overhead: {args.workload}, fault {args.fault}, {args.pairs} pairs, {os.cpu_count()} CPUs, "
              f"bytecode caching {bytecode}, load average {os.getloadavg()[0]:.1f} at the start")
        first = [sys.executable, "-m", "harness", "run", *run_options, "--quiet", "--work-dir", str(work),
                 "--run-id", f"untimed-{time.strftime('%H%M%S')}"]
        wall, _cpu, code = timed(first, work)
        print(f"untimed first run (its baseline, when it has one, for the timed runs to reuse): {wall:.1f} s, "
              f"exit {code}")
        print(f"{'pair':>4} {'bare wall':>10} {'run wall':>10} {'diff':>7} {'bare CPU':>10} {'run CPU':>10} {'diff':>7}")
        rows = []
        for i in range(args.pairs):
            stamp = time.strftime("%H%M%S")
            bare_id, run_id = f"bare-{stamp}-{i}", f"run-{stamp}-{i}"
            bare = ["bash", "-c", bare_command(options, work, bare_id)]
            run = [sys.executable, "-m", "harness", "run", *run_options, "--quiet", "--work-dir", str(work),
                   "--run-id", run_id]
            order = [("bare", bare), ("run", run)] if i % 2 == 0 else [("run", run), ("bare", bare)]
            got = {}
            for name, argv in order:
                got[name] = timed(argv, work)
                if got[name][2] not in (0,):
                    print(f"  {name} exited {got[name][2]}: {shlex.join(argv)[:200]}")
            (bw, bc, _), (rw, rc, _) = got["bare"], got["run"]
            rows.append((bw, rw, bc, rc))
            print(f"{i + 1:>4} {bw:>9.2f}s {rw:>9.2f}s {rw - bw:>6.2f}s {bc:>9.2f}s {rc:>9.2f}s {rc - bc:>6.2f}s")
        med = [statistics.median(col) for col in zip(*rows)]
        diffs_wall = statistics.median(r[1] - r[0] for r in rows)
        diffs_cpu = statistics.median(r[3] - r[2] for r in rows)
        print(f"median: bare {med[0]:.2f} s wall / {med[2]:.2f} s CPU; run {med[1]:.2f} s wall / {med[3]:.2f} s CPU")
        print(f"harness's own cost (median of the pair differences): {diffs_wall:.2f} s wall, {diffs_cpu:.2f} s CPU; "
              f"ratio {med[1] / med[0]:.2f}x wall, {med[3] / med[2]:.2f}x CPU")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
