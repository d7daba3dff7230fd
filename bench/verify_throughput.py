"""Throughput and peak memory of `nvrx-qual verify` on a large multi-rank run directory.

    python bench/verify_throughput.py [--size-mib 1024] [--ranks 8] [--repeat 3] [--keep]

Generates, in a temporary directory, the run directory of a kill run with two cycles whose
per-cycle logs (NVRx rank prefixes, Megatron iteration lines from the last rank, saves every
100 iterations, per-rank noise lines every iteration, a little binary junk) total
--size-mib MiB, plus launcher.log, cycle_infos/, run.json and the marker. It then times, in
child processes (so the peak RSS is theirs alone, read with os.wait4):

- `python -m harness verify RUN --no-write --quiet` (the whole verify: history, criteria, metrics);
- `grep -c iteration` over the same log files, the floor any line scanner is compared to.

It prints MB/s (10^6 bytes/s of log read), the peak RSS and the ratio to grep, the median of
--repeat runs. Target on a 2-core machine: >= 100 MB/s and < 200 MiB peak RSS. The run
directory is deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 29, 16, 32, 0, tzinfo=timezone.utc)
SAVE_EVERY = 100
NOISE = (
    "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "[W1129 16:32:01.000000000 ProcessGroupNCCL.cpp:4561] Warning: barrier using device under current context",
    "/opt/megatron/core/tensor_parallel/layers.py:609: UserWarning: async_grad_allreduce is deprecated",
)


def _stamp(t: datetime) -> str:
    return t.strftime("[%Y-%m-%d %H:%M:%S.%f]")


def _write_cycle(path: Path, cycle: int, ranks: int, first: int, last: int, train_iters: int, t: datetime,
                 load: int | None) -> tuple[datetime, int]:
    """One cycle's log; returns (end time, bytes written)."""
    width = len(str(ranks - 1))
    pre = [f"{r:>{width}}: " for r in range(ranks)]
    lastp = pre[-1]
    noise = [[p + NOISE[i % len(NOISE)] + "\n" for i in range(len(NOISE))] for p in pre]
    out: list[str] = []
    out.append(pre[0] + "------------------------ arguments ------------------------\n")
    for k, v in (("no_load_optim", False), ("save", "/ckpt"), ("save_interval", SAVE_EVERY), ("train_iters", train_iters)):
        out.append(pre[0] + "  {} {} {}\n".format(k, "." * (48 - len(k)), v))
    out.append(pre[0] + "-------------------- end of arguments ---------------------\n")
    out.append(pre[0] + "FT: initialized. Timeouts=RankMonitorConfig(...)\n")
    if load is None:
        out.append(pre[0] + "WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt\n")
    else:
        out.append(pre[0] + f" loading distributed checkpoint from /ckpt at iteration {load}\n")
        out.append(pre[0] + "INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type dp_reshardable\n")
        out.append(pre[0] + "INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value 0.0001 for learning rate\n")
        out.append(pre[0] + f"  successfully loaded checkpoint from /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ] at iteration {load}\n")
    t += timedelta(seconds=1)
    out.append(pre[0] + f"[after model, optimizer, and learning rate scheduler are built] datetime: {t:%Y-%m-%d %H:%M:%S} \n")
    written = 0
    step = timedelta(milliseconds=200)
    with open(path, "w", encoding="utf-8") as f:
        for it in range(first, last + 1):
            t += step
            out.append(f"{lastp} {_stamp(t)} iteration {it:8d}/{train_iters:8d} | consumed samples: {it * 32:12d} | "
                       f"elapsed time per iteration (ms): 200.0 | learning rate: 1.000000E-04 | global batch size:    32 | "
                       f"lm loss: {10.0 - it * 1e-6:.6E} | loss scale: 1.0 | grad norm: 1.234 | number of skipped "
                       "iterations:   0 | number of nan iterations:   0 |\n")
            for r in range(ranks):
                out.append(noise[r][(it + r) % len(NOISE)])
            if it % SAVE_EVERY == 0:
                out.append(pre[0] + f"{_stamp(t)} saving checkpoint at iteration {it:7d} to /ckpt in torch_dist format\n")
                out.append(pre[0] + f"  {_stamp(t)} successfully saved checkpoint from iteration {it:7d} to /ckpt "
                                    "[ t 1/1, gtp_remat 1/1, p 1/1 ]\n")
            if it % 50000 == 0:
                out.append(pre[it % ranks] + "\x00\x01\ufffd binary junk\x1b[0m\n")
            if len(out) > 20000:
                chunk = "".join(out)
                written += f.write(chunk)
                out.clear()
        if last == train_iters:
            out.append(pre[0] + f"[after training is done] datetime: {t:%Y-%m-%d %H:%M:%S} \n")
        written += f.write("".join(out))
    return t, written


def _bytes_per_iteration(ranks: int) -> int:
    """Bytes one iteration adds to the logs (its line, the noise of every rank), measured on a
    sample written the same way, so the logs reach the requested size."""
    with tempfile.TemporaryDirectory() as tmp:
        _, small = _write_cycle(Path(tmp) / "a.log", 0, ranks, 1, 100, 10**6, T0, None)
        _, large = _write_cycle(Path(tmp) / "b.log", 0, ranks, 1, 1100, 10**6, T0, None)
    return (large - small) // 1000


def _launcher_line(t: datetime, msg: str) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} [INFO] [vm] [workload:?(?) infra:?(?)] {msg}\n"


def _profiling(t: datetime, cycle: int, name: str) -> str:
    return _launcher_line(t, f"profiling.py:93   - Cycle: {cycle} Event: {name} Node: localhost_1_0 Rank: 0 "
                             f"Time: {t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d} UTC")


def generate(run: Path, size_mib: int, ranks: int) -> int:
    """Write the run directory; returns the bytes of its logs."""
    (run / "logs").mkdir(parents=True)
    train_iters = max(SAVE_EVERY * 3, -(-size_mib * (1 << 20) // _bytes_per_iteration(ranks)))
    k = (train_iters * 2 // 5) // SAVE_EVERY * SAVE_EVERY
    launcher = [_profiling(T0, 0, "worker_start_completed")]
    end0, b0 = _write_cycle(run / "logs/train_cycle_cycle0.log", 0, ranks, 1, k + 1, train_iters, T0, None)
    injected = end0 + timedelta(milliseconds=50)
    detected = injected + timedelta(milliseconds=90)
    started = detected + timedelta(seconds=2)
    launcher += [_launcher_line(detected, "launcher.py:1 failed (exitcode: -9) local_rank: 1 (pid: 2) of binary: python"),
                 _profiling(detected, 1, "failure_detected"),
                 _launcher_line(detected, "launcher.py:636 [default] Worker group UNHEALTHY. 2/2 attempts left; will restart worker group"),
                 _profiling(started, 1, "worker_start_completed")]
    end1, b1 = _write_cycle(run / "logs/train_cycle_cycle1.log", 1, ranks, k + 1, train_iters, train_iters, started, k)
    launcher += [_launcher_line(end1, "launcher.py:1712 Agent .run() is OK. No failures in the result.")]
    (run / "logs/launcher.log").write_text("".join(launcher))
    (run / "cycle_infos").mkdir()
    for c, (a, b) in enumerate(((T0, detected), (started, end1))):
        (run / f"cycle_infos/cycle_info..0.{c}").write_text(json.dumps(
            {"cycle_number": c, "cycle_start_time": a.isoformat().replace("+00:00", "Z"),
             "cycle_end_time": b.isoformat().replace("+00:00", "Z"), "attempt_index": 0}))
    (run / "fault_injected.json").write_text(json.dumps(
        {"fault": "kill", "signal": "SIGKILL", "rank": 1, "local_rank": 1, "cycle": 0, "iteration": k,
         "baseline_iteration": 0, "injected_at": injected.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", "host": "vm", "pid": 2}))
    (run / "run.json").write_text(json.dumps({"schema": 1, "utc_offset_s": 0, "nvrx_version": "0.7.0",
                                              "spec": {"fault": "kill", "fault_rank": 1, "train_iters": train_iters,
                                                       "save_interval": SAVE_EVERY}}))
    return b0 + b1 + len("".join(launcher))


def _measure(argv: list[str]) -> tuple[float, int, int, bytes]:
    """(wall seconds, peak RSS in KiB, exit status, stdout) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try:
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss, proc.returncode, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="total size of the logs (default 1024)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks per cycle log (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is shown (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temporary run directory")
    parser.add_argument("--keep", action="store_true", help="keep the generated run directory")
    args = parser.parse_args(argv)

    base = Path(tempfile.mkdtemp(prefix="nvrxq-bench-", dir=args.dir))
    run = base / "run"
    try:
        t = time.perf_counter()
        size = generate(run, args.size_mib, args.ranks)
        logs = sorted(str(p) for p in (run / "logs").iterdir())
        print(f"generated {size / 2**20:.0f} MiB of logs ({args.ranks} ranks, 2 cycles) in {time.perf_counter() - t:.1f} s: {run}")
        verify = [sys.executable, "-m", "harness", "verify", str(run), "--no-write", "--quiet"]
        grep = ["grep", "-c", "iteration", *logs]
        rows = {"verify": [], "grep": []}
        status = None
        for _ in range(args.repeat):
            wall, rss, status, out = _measure(verify)
            if status not in (0, 1):
                print(out.decode(errors="replace"))
                raise SystemExit(f"verify failed with status {status}")
            rows["verify"].append((wall, rss))
            wall, rss, _, _ = _measure(grep)
            rows["grep"].append((wall, rss))
        v_wall = median(w for w, _ in rows["verify"])
        g_wall = median(w for w, _ in rows["grep"])
        v_rss = max(r for _, r in rows["verify"])
        g_rss = max(r for _, r in rows["grep"])
        mb = size / 1e6
        print(f"verify: {mb / v_wall:7.1f} MB/s  ({v_wall:.2f} s, median of {args.repeat}), peak RSS {v_rss / 1024:.1f} MiB, "
              f"verdict {'qualified' if status == 0 else 'NOT qualified'}")
        print(f"grep -c iteration: {mb / g_wall:7.1f} MB/s  ({g_wall:.2f} s), peak RSS {g_rss / 1024:.1f} MiB")
        print(f"verify / grep throughput: {g_wall / v_wall:.2f}")
        ok = mb / v_wall >= 100 and v_rss / 1024 < 200
        print(f"target (>= 100 MB/s, < 200 MiB): {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {run}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
