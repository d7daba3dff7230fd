"""Throughput and peak memory of `nvrx-qual verify` on large multi-rank run directories.

    python bench/verify_throughput.py [--cases sparse,dense] [--size-mib 1024] [--ranks 8]
                                      [--dense-size-mib 345] [--dense-ranks 1] [--repeat 3] [--keep]

Two cases, each generated in a temporary directory as the run directory of a kill run with
two cycles whose per-cycle logs (NVRx rank prefixes, Megatron iteration lines from the last
rank, a save line pair every save interval, per-rank noise lines every iteration, a little
binary junk) reach the size asked for, plus launcher.log, cycle_infos/, run.json and the marker:

- sparse: --size-mib MiB from --ranks ranks, a checkpoint every 100 iterations;
- dense: --dense-size-mib MiB from --dense-ranks ranks, a checkpoint every 5 iterations (the
  walkthrough's save interval: about 800,000 iterations and 160,000 save line pairs in 345 MiB,
  the long run of issue 14). Throughput must not depend on what the lines say.

Each case is timed in child processes (so the CPU time and peak RSS are theirs alone: GNU
time's figures, else os.wait4's):

- `python -m harness verify RUN --no-write --quiet` (the whole verify: start-up, history,
  criteria, metrics);
- `grep -c iteration` over the same log files, the floor any line scanner is compared to.

It prints MB per CPU-second (10^6 bytes of log per second of user + system time: on a shared
machine the neighbours' load moves wall time far more than CPU time), MB/s of wall time, the
peak RSS and the ratio to grep, the median of --repeat runs. Modules are compiled once first
(an untimed verify, bytecode in the temporary directory), as an installed nvrx-qual has them;
the start-up alone (verify of a 2 MiB run) is printed too. Target, each case: >= 300 MB per
CPU-second and <= 100 MiB peak RSS. The run directories are deleted afterwards unless --keep.
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
SAVE_EVERY = 100  # the sparse case
DENSE_SAVE_EVERY = 5  # the walkthrough's interval
NOISE = (
    "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "[W1129 16:32:01.000000000 ProcessGroupNCCL.cpp:4561] Warning: barrier using device under current context",
    "/opt/megatron/core/tensor_parallel/layers.py:609: UserWarning: async_grad_allreduce is deprecated",
)


def _stamp(t: datetime) -> str:
    return t.strftime("[%Y-%m-%d %H:%M:%S.%f]")


def _write_cycle(path: Path, cycle: int, ranks: int, first: int, last: int, train_iters: int, t: datetime,
                 load: int | None, save_every: int = SAVE_EVERY) -> tuple[datetime, int]:
    """One cycle's log; returns (end time, bytes written)."""
    width = len(str(ranks - 1))
    pre = [f"{r:>{width}}: " for r in range(ranks)]
    lastp = pre[-1]
    noise = [[p + NOISE[i % len(NOISE)] + "\n" for i in range(len(NOISE))] for p in pre]
    out: list[str] = []
    out.append(pre[0] + "------------------------ arguments ------------------------\n")
    for k, v in (("no_load_optim", False), ("save", "/ckpt"), ("save_interval", save_every), ("train_iters", train_iters)):
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
            if it % save_every == 0:
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


def _bytes_per_iteration(ranks: int, save_every: int) -> int:
    """Bytes one iteration adds to the logs (its line, the noise of every rank, its share of
    the save lines), measured on a sample written the same way, so the logs reach the size."""
    with tempfile.TemporaryDirectory() as tmp:
        _, small = _write_cycle(Path(tmp) / "a.log", 0, ranks, 1, 100, 10**6, T0, None, save_every)
        _, large = _write_cycle(Path(tmp) / "b.log", 0, ranks, 1, 1100, 10**6, T0, None, save_every)
    return (large - small) // 1000


def _launcher_line(t: datetime, msg: str) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} [INFO] [vm] [workload:?(?) infra:?(?)] {msg}\n"


def _profiling(t: datetime, cycle: int, name: str) -> str:
    return _launcher_line(t, f"profiling.py:93   - Cycle: {cycle} Event: {name} Node: localhost_1_0 Rank: 0 "
                             f"Time: {t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d} UTC")


def generate(run: Path, size_mib: int, ranks: int, save_every: int = SAVE_EVERY) -> int:
    """Write the run directory; returns the bytes of its logs."""
    (run / "logs").mkdir(parents=True)
    train_iters = max(save_every * 3, -(-size_mib * (1 << 20) // _bytes_per_iteration(ranks, save_every)))
    train_iters = -(-train_iters // save_every) * save_every  # the final checkpoint is a save of its own
    k = (train_iters * 2 // 5) // save_every * save_every
    launcher = [_profiling(T0, 0, "worker_start_completed")]
    end0, b0 = _write_cycle(run / "logs/train_cycle_cycle0.log", 0, ranks, 1, k + 1, train_iters, T0, None,
                          save_every)
    injected = end0 + timedelta(milliseconds=50)
    detected = injected + timedelta(milliseconds=90)
    started = detected + timedelta(seconds=2)
    launcher += [_launcher_line(detected, "launcher.py:1 failed (exitcode: -9) local_rank: 1 (pid: 2) of binary: python"),
                 _profiling(detected, 1, "failure_detected"),
                 _launcher_line(detected, "launcher.py:636 [default] Worker group UNHEALTHY. 2/2 attempts left; will restart worker group"),
                 _profiling(started, 1, "worker_start_completed")]
    end1, b1 = _write_cycle(run / "logs/train_cycle_cycle1.log", 1, ranks, k + 1, train_iters, train_iters, started, k,
                          save_every)
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
                                                       "save_interval": save_every}}))
    return b0 + b1 + len("".join(launcher))


GNU_TIME = "/usr/bin/time"


def _measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, int, bytes]:
    """(wall seconds, CPU seconds (user + system), peak RSS in KiB, exit status, stdout) of one
    child process.

    Linux counts, in a child's peak RSS, the memory of the process it was forked from until
    it exec'd (here this benchmark, with the generator's buffers): the figure would never go
    below the benchmark's own. GNU time, a small process, forks the command itself and
    reports the command's own peak and CPU time; without it, os.wait4's figures are shown (the
    RSS an upper bound)."""
    rss_file = None
    if os.access(GNU_TIME, os.X_OK):
        fd, rss_file = tempfile.mkstemp(prefix="nvrxq-rss-")
        os.close(fd)
        argv = [GNU_TIME, "-o", rss_file, "-f", "%M %U %S", *argv]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                            env=env)
    try:
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    if rss_file is not None:
        try:
            fields = Path(rss_file).read_text().split()[-3:]
            if len(fields) == 3 and fields[0].isdigit():
                rss, cpu = int(fields[0]), float(fields[1]) + float(fields[2])
        finally:
            os.unlink(rss_file)
    return wall, cpu, rss, proc.returncode, out


def _child_env(base: Path) -> dict[str, str]:
    """The environment of the verify children: bytecode compiled once, kept in the temporary
    directory (an installed nvrx-qual has its modules compiled; compiling on every run would
    count the compiler, not verify)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    return env


def _start_up(base: Path, env: dict[str, str]) -> None:
    """Compile the modules (one untimed verify) and print the start-up's own cost: the CPU
    time of verify on a 2 MiB run, which every case's figure includes."""
    run = base / "start-up"
    generate(run, 2, 1, DENSE_SAVE_EVERY)
    verify = [sys.executable, "-m", "harness", "verify", str(run), "--no-write", "--quiet"]
    _measure(verify, env)
    runs = [_measure(verify, env) for _ in range(3)]
    cpu = median(r[1] for r in runs)
    print(f"start-up (imports and verdict; verify of a 2 MiB run): {cpu:.2f} s CPU, peak RSS "
          f"{max(r[2] for r in runs) / 1024:.1f} MiB")
    shutil.rmtree(run, ignore_errors=True)


def _case(name: str, base: Path, size_mib: int, ranks: int, save_every: int, repeat: int,
          env: dict[str, str]) -> bool:
    """Generate one case, measure it, print its figures; True when it meets the target."""
    run = base / name
    t = time.perf_counter()
    size = generate(run, size_mib, ranks, save_every)
    logs = sorted(str(p) for p in (run / "logs").iterdir())
    print(f"{name}: generated {size / 2**20:.0f} MiB of logs ({ranks} rank(s), 2 cycles, a checkpoint every "
          f"{save_every} iterations) in {time.perf_counter() - t:.1f} s: {run} (load average {os.getloadavg()[0]:.1f})")
    verify = [sys.executable, "-m", "harness", "verify", str(run), "--no-write", "--quiet"]
    grep = ["grep", "-c", "iteration", *logs]
    rows: dict[str, list[tuple[float, float, int]]] = {"verify": [], "grep": []}
    for _ in range(repeat):
        wall, cpu, rss, status, out = _measure(verify, env)
        if status != 0:  # the generated run is a qualifying recovery: anything else is a bug of the reader
            print(out.decode(errors="replace"))
            raise SystemExit(f"verify of the {name} case exited {status}, not 0 (qualified)")
        rows["verify"].append((wall, cpu, rss))
        wall, cpu, rss, _, _ = _measure(grep)
        rows["grep"].append((wall, cpu, rss))
    mb = size / 1e6
    figures = {}
    for tool, measured in rows.items():
        wall, cpu = median(r[0] for r in measured), median(r[1] for r in measured)
        figures[tool] = (wall, cpu, max(r[2] for r in measured) / 1024)
    (v_wall, v_cpu, v_rss), (g_wall, g_cpu, g_rss) = figures["verify"], figures["grep"]
    print(f"  verify:            {mb / v_cpu:7.1f} MB per CPU-second ({v_cpu:.2f} s user + system), "
          f"{mb / v_wall:7.1f} MB/s wall ({v_wall:.2f} s), median of {repeat}; peak RSS {v_rss:.1f} MiB; "
          "verdict qualified")
    print(f"  grep -c iteration: {mb / max(g_cpu, 1e-3):7.1f} MB per CPU-second ({g_cpu:.2f} s), {mb / g_wall:7.1f} MB/s "
          f"wall ({g_wall:.2f} s); peak RSS {g_rss:.1f} MiB")
    print(f"  grep / verify, CPU time: {v_cpu / max(g_cpu, 1e-3):.1f}x faster")
    ok = mb / v_cpu >= 300 and v_rss <= 100
    print(f"  target (>= 300 MB per CPU-second, <= 100 MiB): {'met' if ok else 'NOT met'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="sparse,dense", help="which cases, comma-separated (default sparse,dense)")
    parser.add_argument("--size-mib", type=int, default=1024, help="sparse case: total size of the logs (default 1024)")
    parser.add_argument("--ranks", type=int, default=8, help="sparse case: ranks per cycle log (default 8)")
    parser.add_argument("--dense-size-mib", type=int, default=345,
                        help="dense case: total size of the logs (default 345, as in issue 14)")
    parser.add_argument("--dense-ranks", type=int, default=1, help="dense case: ranks per cycle log (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is shown (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temporary run directories")
    parser.add_argument("--keep", action="store_true", help="keep the generated run directories")
    args = parser.parse_args(argv)
    cases = {"sparse": (args.size_mib, args.ranks, SAVE_EVERY), "dense": (args.dense_size_mib, args.dense_ranks,
                                                                          DENSE_SAVE_EVERY)}
    chosen = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in cases]
    if unknown or not chosen:
        parser.error(f"--cases {args.cases!r}: choose among {', '.join(cases)}")

    base = Path(tempfile.mkdtemp(prefix="nvrxq-bench-", dir=args.dir))
    try:
        print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: CPU time moves with the "
              "neighbours' load far less than wall time, but it moves)")
        env = _child_env(base)
        _start_up(base, env)
        met = [_case(name, base, *cases[name], args.repeat, env) for name in chosen]
        return 0 if all(met) else 1
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
