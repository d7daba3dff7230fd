"""Wall time of one kill -> verdict for the megatron-cpu workload beside the reference
workload's, on this machine, and where the time goes.

    python bench/megatron_cpu.py [--work-dir DIR] [--workloads reference,megatron-cpu]
    python bench/megatron_cpu.py --shapes tp2,tp2-pp2,dp2-tp2 [--work-dir DIR]
    python bench/megatron_cpu.py --runs RUN_DIR...

--shapes: Megatron's own loop at the parallel shapes of SHAPES (plain optimizer, a kill on
the last rank, which for TP2 x PP2 is on the last pipeline stage), one kill -> verdict each,
with the ranks and the restore latency. --runs: the same figures read back from run
directories already judged (e.g. the e2e tests' under --work-dir), nothing launched.

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

from harness.plan import resolve
from harness.launch import runner  # noqa: E402
from harness.plan import commands as planmod  # noqa: E402
from harness.judge.criteria import analyze  # noqa: E402
from harness.read.history import parse_iso_utc, read_history  # noqa: E402


# name -> (RunSpec knobs): ranks = gpus_per_node on one node
SHAPES: dict[str, dict[str, object]] = {
    "tp1": {"gpus_per_node": 2},
    "tp2": {"gpus_per_node": 2, "tp": 2},
    "tp2-pp2": {"gpus_per_node": 4, "tp": 2, "pp": 2},
    "dp2-tp2": {"gpus_per_node": 4, "tp": 2},
}


def one_run(workload: str, work_dir: Path, knobs: dict[str, object] | None = None,
            label: str | None = None) -> dict[str, float | str | None]:
    flags = {"workload": workload, "fault": "kill", "work_dir": work_dir,
             "run_id": f"bench-{label or workload}-{time.strftime('%H%M%S')}", **(knobs or {})}
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
        "ranks": str(spec.world),
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


def from_run(run_dir: Path) -> dict[str, float | str | None]:
    """The figures of a run already judged: its run.json, launch.json and timeline (read-only)."""
    import json

    from harness.report.verify import verify_run

    spec = json.loads((run_dir / "run.json").read_text())["spec"]
    verdict = verify_run(run_dir, write=False, picture=False)
    m = verdict.metrics
    tl = read_history(run_dir)
    launch_json = run_dir / "launch.json"  # an sbatch run has none: its launcher's exit is not recorded
    ended = parse_iso_utc(json.loads(launch_json.read_text()).get("ended_at")) if launch_json.is_file() else None
    shape = f"TP{spec.get('tp', 1)} PP{spec.get('pp', 1)} DP{spec.get('dp')}"
    return {
        "shape": shape,
        "ranks": str(spec.get("world")),
        "fault rank": str(spec.get("fault_rank")) if spec.get("fault") != "none" else "-",
        "verdict": "QUALIFIED" if verdict.qualified else "NOT QUALIFIED",
        "kill -> launcher exit": None if m.injected_at is None or ended is None else ended - m.injected_at,
        # the verdict the run wrote (runner or the batch script's verify): its file's time
        "kill -> verdict": None if m.injected_at is None or not (run_dir / "verdict.json").is_file()
        else (run_dir / "verdict.json").stat().st_mtime - m.injected_at,
        "detection": m.detection_s,
        "restart": m.restart_s,
        "restore": m.restore_s,
        "first step": m.first_step_s,
        "failure -> 1st commit": m.failure_to_first_step_s,
        "cycles": str(len({s.cycle for s in tl.starts})),
        "run dir": str(run_dir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=None, help="where the runs go (default: a temp dir, kept)")
    parser.add_argument("--workloads", default="reference,megatron-cpu")
    parser.add_argument("--shapes", default=None, help=f"megatron-cpu shapes, comma-separated: {', '.join(SHAPES)}")
    parser.add_argument("--runs", type=Path, nargs="+", default=None, help="judged run directories to read back")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="nvrxq-bench-"))
    if args.runs:
        rows = {}
        for r in args.runs:
            if (r / "run.json").is_file():
                row = from_run(r)
                label = f"{row['shape']} r{row['fault rank']}".replace(" ", "")
                while label in rows:
                    label += "'"
                rows[label] = row
    else:
        warm_up()
        if args.shapes:
            shapes = args.shapes.split(",")
            unknown = [s for s in shapes if s not in SHAPES]
            if unknown:
                parser.error(f"unknown shape(s) {', '.join(unknown)}: choose from {', '.join(SHAPES)}")
            rows = {s: one_run("megatron-cpu", work, {**SHAPES[s], "distributed_optimizer": False,
                                                      "fault_rank": int(SHAPES[s]["gpus_per_node"]) - 1}, s)
                    for s in shapes}
        else:
            rows = {w: one_run(w, work) for w in args.workloads.split(",")}
    if not rows:
        parser.error("no run directory with a run.json among --runs")
    names = list(rows)
    keys = [k for k in next(iter(rows.values())) if k != "run dir"]
    width = max(18, *(len(n) + 2 for n in names))
    print(f"{'':24}" + "".join(f"{n:>{width}}" for n in names))
    for key in keys:
        cells = []
        for n in names:
            v = rows[n][key]
            cells.append(f"{v:>{width - 1}.2f}s" if isinstance(v, float) else f"{'—' if v is None else v:>{width}}")
        print(f"{key:24}" + "".join(cells))
    for n in names:
        print(f"{n}: {rows[n]['run dir']}")


if __name__ == "__main__":
    main()
