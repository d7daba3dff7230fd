"""Wall time of one kill -> verdict for the megatron-cpu workload beside the reference
workload's, on this machine, and where the time goes.

    python bench/megatron_cpu.py [--work-dir DIR] [--workloads reference,megatron-cpu]

Each workload runs once, through the same code as `nvrx-qual run` (plan, nemesis, launch with
the watcher, verify). The split comes from the run's own timeline (UTC stamps of the launcher
and of the training log):
  prepare          harness start -> launcher started (preflight, run directory, run.json)
  launcher start   launcher started -> cycle 0's workers started (launcher event)
  init (cycle 0)   cycle 0's workers started -> its first iteration line (Python imports,
                   Megatron's initialize, model and optimizer, data)
  train to fault   first iteration -> the injection (marker)
  recovery         detection, restart, restore, first step: the verdict's latency split
  tail             first iteration after the restore -> launcher exit (training, saves, shutdown)
  verify           launcher exit -> verdict written
Prints the figures; asserts nothing. Needs tools/install-megatron-cpu.sh for megatron-cpu.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import resolve, runner  # noqa: E402
from harness import plan as planmod  # noqa: E402
from harness.criteria import analyze  # noqa: E402
from harness.history import parse_iso_utc, read_history  # noqa: E402


def one_run(workload: str, work_dir: Path) -> dict[str, float | str | None]:
    flags = {"workload": workload, "fault": "kill", "work_dir": work_dir,
             "run_id": f"bench-{workload}-{time.strftime('%H%M%S')}"}
    spec, target, _ = resolve.resolve_spec(flags, ())
    plan = planmod.build(spec, target)
    started = time.time()
    outcome = runner.execute(plan, out=None)
    ended = time.time()
    tl = read_history(outcome.run_dir)
    a = analyze(tl)
    m = outcome.verdict.metrics
    w0 = tl.utc(a.workers_started.get(0))
    first0 = tl.utc(tl.starts[0].first_iteration) if tl.starts else None
    injected = m.injected_at
    first_after = (m.injected_at + m.failure_to_first_step_s
                   if m.injected_at is not None and m.failure_to_first_step_s is not None else None)
    launch_start, launcher_done = parse_iso_utc(outcome.launch.started_at), parse_iso_utc(outcome.launch.ended_at)

    def span(a_: float | None, b_: float | None) -> float | None:
        return None if a_ is None or b_ is None else b_ - a_

    return {
        "verdict": "QUALIFIED" if outcome.verdict.qualified else "NOT QUALIFIED",
        "failed": ", ".join(c.id for c in outcome.verdict.criteria if c.status == "fail") or "-",
        "total kill -> verdict": ended - started,
        "prepare": span(started, launch_start),
        "launcher start": span(launch_start, w0),
        "init (cycle 0)": span(w0, first0),
        "train to fault": span(first0, injected),
        "detection": m.detection_s,
        "restart": m.restart_s,
        "restore": m.restore_s,
        "first step": m.first_step_s,
        "tail": span(first_after, launcher_done),
        "verify": span(launcher_done, ended),
        "run dir": str(outcome.run_dir),
    }


def warm_up() -> None:
    """What verify imports on first use (torch's checkpoint reader, matplotlib), imported once
    before the first run, so the first workload's verify does not pay for both."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.distributed.checkpoint  # noqa: F401
        try:
            import matplotlib.pyplot  # noqa: F401
        except ImportError:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=None, help="where the runs go (default: a temp dir, kept)")
    parser.add_argument("--workloads", default="reference,megatron-cpu")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="nvrxq-bench-"))
    warm_up()
    rows = {w: one_run(w, work) for w in args.workloads.split(",")}
    names = list(rows)
    keys = [k for k in next(iter(rows.values())) if k != "run dir"]
    print(f"{'':24}" + "".join(f"{n:>18}" for n in names))
    for key in keys:
        cells = []
        for n in names:
            v = rows[n][key]
            cells.append(f"{v:>17.2f}s" if isinstance(v, float) else f"{'—' if v is None else v:>18}")
        print(f"{key:24}" + "".join(cells))
    for n in names:
        print(f"{n}: {rows[n]['run dir']}")


if __name__ == "__main__":
    main()
