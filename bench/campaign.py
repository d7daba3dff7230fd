"""What a campaign of several faults costs: seeded campaigns run end to end, one per seed.

    python bench/campaign.py [--workload reference|megatron-cpu] [--faults N] [--seeds 7,11]
                             [--fault-kinds kill,hang,...] [--work-dir DIR] [-- WORKLOAD_ARGS...]

Each campaign is `nvrx-qual run --faults N --seed S` (docs/campaigns.md) as a user runs it: the
planned schedule, the sized run and restart budget, the launch, the per-fault verdict. The bench
prints per campaign: the seed, the number of faults, the kinds in schedule order, the verdict
(QUALIFIED / NOT QUALIFIED, with the faults that held it back), the wall time of the whole command
(its automatic baseline included, when it ran one) and the goodput ratio from verdict.json's
`goodput.ratio` (productive training time over wall time, written by the goodput pass; "n/a" when
the verdict holds none). Asserts nothing; figures move with the machine's load (printed with them):
run it when the machine is quiet. megatron-cpu runs with the plain optimizer (the distributed
one's step reset on CPU is a known finding, docs/megatron-cpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["TMPDIR"] = str(scratch)  # what torch elastic and NVRx leave in a temporary directory goes with it
    return env


def run_campaign(workload: str, faults: int, seed: int, kinds: str | None, work: Path, scratch: Path,
                 extra: list[str]) -> dict:
    run_id = f"bench-campaign-{workload}-{faults}-s{seed}-{int(time.time())}"
    argv = [sys.executable, "-m", "harness", "run", "--workload", workload, "--faults", str(faults),
            "--seed", str(seed), "--work-dir", str(work), "--run-id", run_id, "--quiet"]
    if kinds:
        argv += ["--fault-kinds", kinds]
    if workload == "megatron-cpu":
        argv += ["--distributed-optimizer", "0"]
    started = time.monotonic()
    proc = subprocess.run([*argv, "--", *extra] if extra else argv, env=_env(scratch), capture_output=True, text=True)
    wall = time.monotonic() - started
    run_dir = work / "runs" / run_id
    try:
        verdict = json.loads((run_dir / "verdict.json").read_text())
    except (OSError, ValueError):
        verdict = {}
    schedule = (verdict.get("campaign") or {}).get("schedule") or []
    goodput = verdict.get("goodput")
    ratio = goodput.get("ratio") if isinstance(goodput, dict) else None
    held = [f"{e.get('episode')}:{e.get('fault')}" for e in verdict.get("episodes", [])
            if any(c.get("status") in ("fail", "unknown") and not c.get("superseded") for c in e.get("criteria", []))]
    if not verdict:
        outcome = f"no verdict (exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:120]})"
    else:
        outcome = "QUALIFIED" if verdict.get("qualified") else "NOT QUALIFIED" + (f" ({', '.join(held)})" if held else "")
    return {"seed": seed, "faults": len(schedule) or faults, "kinds": ",".join(str(f.get("kind")) for f in schedule),
            "verdict": outcome, "wall_s": wall, "goodput": ratio, "run_dir": str(run_dir)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="reference", choices=("reference", "megatron-cpu"))
    parser.add_argument("--faults", type=int, default=4)
    parser.add_argument("--seeds", default="7", help="comma-separated seeds, one campaign each (default 7)")
    parser.add_argument("--fault-kinds", default=None, help="the kinds to draw from (default: the campaign's own)")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the runs here (default: a temporary one)")
    own, extra = (sys.argv[1:], []) if "--" not in sys.argv else (
        sys.argv[1:sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1:])
    args = parser.parse_args(own)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="nvrx-qual-campaign-") as tmp:
        work = args.work_dir or Path(tmp) / "work"
        scratch = Path(tmp) / "scratch"
        work.mkdir(parents=True, exist_ok=True)
        scratch.mkdir()
        print(f"campaigns: {args.workload}, {args.faults} faults, seeds {', '.join(map(str, seeds))}; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
        print(f"{'seed':>6} {'faults':>6} {'wall':>8} {'goodput':>8}  {'verdict':<16} kinds")
        for seed in seeds:
            r = run_campaign(args.workload, args.faults, seed, args.fault_kinds, work, scratch, extra)
            goodput = "n/a" if r["goodput"] is None else f"{r['goodput']:.3f}"
            print(f"{r['seed']:>6} {r['faults']:>6} {r['wall_s']:>7.1f}s {goodput:>8}  {r['verdict']:<16} {r['kinds']}",
                  flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
