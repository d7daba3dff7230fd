"""What the automatic baseline adds to a run's wall time, on this machine.

    python bench/baseline_cost.py [--work-dir DIR] [--workloads reference,megatron-cpu] [-- RUN ARGS]

Per workload, in a fresh work directory, through the same code as `nvrx-qual run`
(runner.obtain_baseline, then runner.execute_preflighted):
  1. a kill run with `--baseline auto`: the twin runs first (its wall time is what auto adds);
  2. the same configuration again: the baseline is reused (its lookup is what auto adds then).
Prints the figures and the verdicts; asserts nothing. RUN ARGS (e.g. --section-timeouts ...)
are passed as flags to both runs; they are not part of the configuration hash when they are
deadlines. Needs tools/install-megatron-cpu.sh for megatron-cpu.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.plan import resolve
from harness.launch import runner  # noqa: E402
from harness.plan import commands as planmod  # noqa: E402


def one_run(workload: str, work_dir: Path, run_id: str, flags: dict) -> dict[str, object]:
    spec, target, _ = resolve.resolve_spec({"workload": workload, "fault": "kill", "work_dir": work_dir,
                                            "run_id": run_id, **flags}, ())
    plan = planmod.build(spec, target)
    started = time.monotonic()
    runner.preflight(plan, os.environ)
    used = runner.obtain_baseline(plan, out=None)
    baseline_s = time.monotonic() - started
    outcome = runner.execute_preflighted(plan, fail_fast=True, out=None, baseline=used)
    total_s = time.monotonic() - started
    statuses = {c.id: str(c.status) for c in outcome.verdict.criteria}
    return {"how": used.how, "baseline_s": baseline_s, "fault_run_s": total_s - baseline_s, "total_s": total_s,
            "qualified": outcome.verdict.qualified, "loss_continuity": statuses.get("loss_continuity"),
            "state_equivalence": statuses.get("state_equivalence")}


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--workloads", default="reference,megatron-cpu")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    flags: dict[str, str] = {}
    for i in range(0, len(extra) - 1, 2):
        flags[extra[i].lstrip("-").replace("-", "_")] = extra[i + 1]
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    for workload in args.workloads.split(","):
        work = args.work_dir or Path(tempfile.mkdtemp(prefix=f"nvrxq-bench-baseline-{workload}-"))
        for n in (1, 2):
            r = one_run(workload, work, f"bench-{workload}-{n}", flags)
            print(f"{workload} run {n}: baseline {r['how']} in {r['baseline_s']:.1f} s, fault run {r['fault_run_s']:.1f} s, "
                  f"total {r['total_s']:.1f} s; qualified {r['qualified']}, loss_continuity {r['loss_continuity']}, "
                  f"state_equivalence {r['state_equivalence']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
