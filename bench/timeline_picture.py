"""Cost of timeline.png for a short and a long run.

    python bench/timeline_picture.py [--repeat 3] [--keep]

Builds two realistic run directories with the test suite's builder (recovery_tests/rundirs.py,
2 ranks, a kill after the middle checkpoint): 100 iterations (checkpoint every 5) and
100,000 iterations (checkpoint every 1,000; ~17 MB of log per cycle). For each it prints the
median over --repeat of:

- reading the run with its progress curve (history.read_run, sampled in the pass) and the points it kept;
- building the picture's data (harness.report.picture.build, via verify without writing);
- drawing the PNG (harness.report.picture.draw: matplotlib Agg), its pixel size and bytes.

The sampling must not grow with the run's length (it reads a fixed number of windows per
log), and the drawing should stay around a second on a 2-core machine.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.report import picture, verify  # noqa: E402
from harness.read.history import read_run  # noqa: E402
from recovery_tests import rundirs  # noqa: E402

RUNS = {
    "100 iterations": rundirs.Scenario(train_iters=100, save_interval=5, fault_at=50, checkpoints=False),
    "100,000 iterations": rundirs.Scenario(train_iters=100_000, save_interval=1000, fault_at=50_000,
                                           checkpoints=False),
}


def _timed(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nvrx-qual-bench-picture-"))
    try:
        print(f"{'run':<20} {'log MB':>7} {'read ms':>10} {'points':>7} {'verify ms':>10} {'draw ms':>8} "
              f"{'png':>10} {'KiB':>6}")
        for name, scenario in RUNS.items():
            run = rundirs.build(root / name.split()[0].replace(",", ""), scenario).run_dir
            log_mb = sum(p.stat().st_size for p in (run / "logs").iterdir()) / 1e6
            sample_s, read = _timed(lambda: read_run(run), args.repeat)
            curves = read.progress
            verify_s, verdict = _timed(lambda: verify.verify_run(run), args.repeat)
            png = run / picture.FILE_NAME
            draw_s, _ = _timed(lambda: picture.draw(verdict.picture, png), args.repeat)
            from matplotlib.image import imread

            h, w = imread(png).shape[:2]
            print(f"{name:<20} {log_mb:>7.1f} {sample_s * 1e3:>10.1f} {sum(map(len, curves)):>7} "
                  f"{verify_s * 1e3:>10.1f} {draw_s * 1e3:>8.1f} {f'{w}x{h}':>10} {png.stat().st_size / 1024:>6.0f}")
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
