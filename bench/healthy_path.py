"""What resilience costs when nothing fails: one configuration, trained without a fault,
with and without NVRx ft_launcher's monitoring and asynchronous checkpointing.

    python bench/healthy_path.py [--workload reference|megatron-cpu] [--train-iters N]
                                 [--save-interval K] [--configs resilient,monitor-only,plain]

The commands come from `nvrx-qual plan --fault none` (the suite's own launcher command for the
configuration), rewritten three ways; nothing else differs:
  resilient     ft_launcher with its rank monitors, section and out-of-section timeouts, and the
                workload's asynchronous checkpointing and NVRx client (`--async-save`,
                `--enable-ft-package`), as the suite runs it, less the nemesis wrapper;
  monitor-only  the same ft_launcher, checkpoints saved synchronously;
  plain         torch's own elastic launcher (`python -m torch.distributed.run`, same rendezvous,
                same restart budget), no NVRx client, synchronous checkpoints.
Each runs to its end; the bench reads the iteration lines (the launcher's output, and the per-cycle
logs ft_launcher writes the workers' lines to) and prints, per configuration: the launch's wall
time; training throughput (iterations and samples per second between the time stamps of the
first and the last iteration line, every save in between included); p50 and p95 of the step
time the workload logs (`elapsed time per iteration (ms)`, Megatron's line: the reference
workload counts a save in the next iteration's time, Megatron's timer leaves it out); the number
of checkpoints saved; the peak memory of the whole process tree (launcher, workers, checkpoint
writers: the sum of their resident sets, sampled every 0.1 s, so shared pages count once per
process).

The reference workload pads every step to `--step-time-ms` (100 ms in the suite's runs); the bench
passes `--step-time-ms 0` so that its steps take what they compute. Asserts nothing; figures move
with the machine's load (printed): run it when the machine is quiet.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
CONFIGS = ("resilient", "monitor-only", "plain")
FT_LAUNCHER = "nvidia_resiliency_ext.fault_tolerance.launcher"
ITERATION_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] iteration\s+(\d+)/\s*(\d+) \|"
                          r".*?elapsed time per iteration \(ms\): ([\d.]+)")
SAVED_RE = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")
# Options of ft_launcher torch's launcher does not know, each with the number of values it takes.
FT_ONLY = {"--ft-rank-section-timeouts": 1, "--ft-rank-out-of-section-timeout": 1, "--ft-workload-check-interval": 1,
           "--ft-per-cycle-applog-prefix": 1, "--ft-nvrx-logfile": 1, "--ft-log-server-port": 1,
           "--ft-cycle-info-dir": 1, "--ft-checkpoint-iteration-file": 1, "--ft-no-restart-exit-code": 1,
           "--ft-max-no-progress-cycles": 1, "--ft-restart-policy": 1}
# Workload options of the NVRx client and of asynchronous saving, with the number of values.
ASYNC_ONLY = {"--async-save": 0, "--use-persistent-ckpt-worker": 0, "--async-strategy": 1}
FT_CLIENT = {"--enable-ft-package": 0, "--ft-num-warmup-iters": 1}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def launcher_command(workload: str, work: Path, run_id: str, options: list[str], workload_args: list[str]) -> str:
    """The launcher command `nvrx-qual plan --fault none` prints for this configuration."""
    argv = [sys.executable, "-m", "harness", "plan", "--workload", workload, "--fault", "none", "--baseline", "none",
            "--work-dir", str(work), "--run-id", run_id, *options, "--", *workload_args]
    out = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("cd ") and FT_LAUNCHER in line]
    if len(lines) != 1:
        raise SystemExit(f"expected one launcher command from nvrx-qual plan, got:\n{out}")
    return lines[0]


def _drop(words: list[str], options: dict[str, int]) -> list[str]:
    out, i = [], 0
    while i < len(words):
        name = words[i].split("=", 1)[0]
        if name in options:
            i += 1 + (options[name] if "=" not in words[i] else 0)
            continue
        out.append(words[i])
        i += 1
    return out


def rewrite(command: str, config: str) -> str:
    """The plan's `cd DIR && ENV... python -m ft_launcher OPTS -m harness.nemesis ... -- SCRIPT ARGS`
    as `config` runs it."""
    words = shlex.split(command)
    launcher_opts = words[words.index(FT_LAUNCHER) + 1:]
    nemesis = launcher_opts.index("-m")
    marker = launcher_opts.index("--", nemesis)
    opts, script, script_args = launcher_opts[:nemesis], launcher_opts[marker + 1], launcher_opts[marker + 2:]
    if config in ("monitor-only", "plain"):
        script_args = _drop(script_args, ASYNC_ONLY)
    if config == "plain":
        script_args = _drop(script_args, FT_CLIENT)
        opts = _drop(opts, FT_ONLY)
        module = "torch.distributed.run"
    else:  # NVRx 0.7.0's launcher exits 1 at once without its per-cycle log: the workers' lines go there
        module = FT_LAUNCHER
    # `cd DIR && VAR=... python` stays shell text: it holds ${PYTHONPATH:+...}
    prefix = command[:command.index(" -m " + FT_LAUNCHER)]
    return f"{prefix} -m {module} {shlex.join(opts)} {shlex.join([script, *script_args])}"


@dataclass
class Figures:
    wall_s: float
    exit_code: int
    steps_ms: list[float]
    iterations: list[tuple[int, float]]  # (iteration, the time its log line carries)
    saves: int
    peak_rss_mib: float
    global_batch: int | None

    def throughput(self) -> tuple[float | None, float | None]:
        if len(self.iterations) < 2:
            return None, None
        (i0, t0), (i1, t1) = self.iterations[0], self.iterations[-1]
        per_s = (i1 - i0) / (t1 - t0) if t1 > t0 else None
        return per_s, (per_s * self.global_batch if per_s and self.global_batch else None)


def _sample_peak(pid: int, stop: threading.Event, peak: list[float]) -> None:
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    while not stop.is_set():
        total = 0
        try:
            for proc in [root, *root.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
        except psutil.NoSuchProcess:
            break
        peak[0] = max(peak[0], total / 2**20)
        stop.wait(0.1)


def measure(command: str, global_batch: int | None) -> Figures:
    """Run one launcher command to its end; its figures from its output and its run directory's
    per-cycle logs (where ft_launcher puts the workers' lines)."""
    run_dir = Path(shlex.split(command)[1])
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", f"exec 2>&1; {command}"], env=_env(), stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    stop, peak = threading.Event(), [0.0]
    sampler = threading.Thread(target=_sample_peak, args=(proc.pid, stop, peak), daemon=True)
    sampler.start()
    try:
        console = proc.stdout.read()
        code = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        stop.set()
        sampler.join()
    wall = time.monotonic() - start
    text = console + "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("logs/train_cycle*.log")))
    steps: dict[int, float] = {}
    stamps: dict[int, float] = {}
    for m in ITERATION_RE.finditer(text):
        it = int(m.group(2))
        steps.setdefault(it, float(m.group(4)))
        stamps.setdefault(it, datetime.fromisoformat(m.group(1)).timestamp())
    saves = {int(m.group(1)) for m in SAVED_RE.finditer(text)}
    return Figures(wall, code, [steps[i] for i in sorted(steps)], sorted(stamps.items()), len(saves), peak[0],
                   global_batch)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="reference", choices=("reference", "megatron-cpu"))
    parser.add_argument("--train-iters", type=int, default=None,
                        help="default: 200 for reference, 40 for megatron-cpu")
    parser.add_argument("--save-interval", type=int, default=None, help="default: 20 for reference, 10 for megatron-cpu")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"some of {','.join(CONFIGS)}")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary directory, removed")
    args = parser.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: {', '.join(unknown)} unknown; choose from {', '.join(CONFIGS)}")
    iters = args.train_iters or (200 if args.workload == "reference" else 40)
    interval = args.save_interval or (20 if args.workload == "reference" else 10)
    options = ["--train-iters", str(iters), "--save-interval", str(interval)]
    if args.workload == "reference":
        options += ["--step-time-ms", "0"]
    workload_args: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nvrx-qual-healthy-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        # What torch elastic and NVRx leave in a temporary directory (torchelastic_errors_*, sockets)
        # when the bare launcher command runs them goes into the bench's own, removed with it.
        scratch = Path(tmp) / "tmp"
        scratch.mkdir()
        os.environ["TMPDIR"] = str(scratch)
        print(f"healthy path: {args.workload}, {iters} iterations, a checkpoint every {interval}, no fault; "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
        print(f"{'configuration':<13} {'exit':>4} {'wall':>8} {'it/s':>7} {'samples/s':>9} {'p50 step':>9} "
              f"{'p95 step':>9} {'saves':>5} {'peak RSS':>9}")
        results: dict[str, Figures] = {}
        for config in configs:
            run_id = f"healthy-{config}-{time.strftime('%H%M%S')}"
            command = launcher_command(args.workload, work, run_id, options, workload_args)
            batch = re.search(r"--global-batch-size (\d+)", command)
            fig = results[config] = measure(rewrite(command, config), int(batch.group(1)) if batch else None)
            per_s, samples = fig.throughput()
            steps = fig.steps_ms[1:]  # the first iteration carries the warm-up
            print(f"{config:<13} {fig.exit_code:>4} {fig.wall_s:>7.1f}s {_fmt(per_s, '7.1f')} {_fmt(samples, '9.1f')} "
                  f"{_fmt(_pct(steps, 0.5), '7.1f')}ms {_fmt(_pct(steps, 0.95), '7.1f')}ms {fig.saves:>5} "
                  f"{fig.peak_rss_mib:>6.0f}MiB", flush=True)
            if fig.exit_code != 0 or len(fig.iterations) < iters // 2:
                print(f"  {config}: exit {fig.exit_code}, {len(fig.iterations)} iteration lines read; the command was:\n"
                      f"  {rewrite(command, config)}")
        if "resilient" in results and "plain" in results:
            r, p = results["resilient"], results["plain"]
            (r_it, _), (p_it, _) = r.throughput(), p.throughput()
            r50, p50 = _pct(r.steps_ms[1:], 0.5), _pct(p.steps_ms[1:], 0.5)
            parts = [f"wall {r.wall_s - p.wall_s:+.1f} s"]
            if r_it and p_it:
                parts.append(f"throughput {100 * (r_it / p_it - 1):+.0f}%")
            if r50 is not None and p50 is not None:
                parts.append(f"p50 step {r50 - p50:+.1f} ms")
            parts.append(f"peak RSS {r.peak_rss_mib - p.peak_rss_mib:+.0f} MiB")
            print("resilient against plain: " + ", ".join(parts))
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
