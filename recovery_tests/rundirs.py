"""Build realistic run directories for the verify tests, without launching anything.

A `Scenario` describes one run (fault, launcher generation, layout, and the one thing that
went wrong, if any); `build(root, scenario)` writes what a real run leaves behind:

- per-cycle application logs `logs/train_cycle_cycle<N>.log` with NVRx's padded rank
  prefixes and ranks interleaved, Megatron's exact lines (docs/megatron.md): arguments table,
  `FT: initialized`, load block with optimizer and scheduler lines, iteration lines from the
  last rank, async saves committed one iteration later, `[after ...] datetime:` lines; plus
  noise (warnings, a binary-junk line, a line cut off where a killed process stopped);
  or, for a user's own sbatch run, one un-prefixed log with the launcher lines interleaved;
- `logs/launcher.log` in the NVRx 0.7.0 (`--ft-nvrx-logfile`) or 0.4.1 console format,
  `cycle_infos/` (0.7.0 only), optionally `logs/console.log` as the harness captures it;
- `fault_injected.json`, `run.json` (with its contract: the planned faults, the launcher, the
  baseline, the tiers and the shape), `launch.json` as the harness writes them, and the
  nemesis's launcher identity line in every cycle's log;
- `checkpoints/` with the tracker and tiny *real* DCP checkpoints written by PyTorch
  (`.metadata`, `__0_0.distcp`, `metadata.json` as the commit marker).

Log stamps are written in the node's local time (UTC + `utc_offset_s`) and the marker in
UTC, so a wrong conversion shows up in the metrics. `Built.times` holds the true UTC times
of the recovery milestones, the numbers the metrics must reproduce.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from harness.plan.spec import FAULT_KINDS

BASE_UTC_MS = 1795969920_000  # 2026-11-29 16:32:00 UTC
NVRX_DIR = "/opt/venv/lib/python3.12/site-packages/nvidia_resiliency_ext"  # where the built runs' NVRx lies
NVRX_FILES = 236
CONFIG_HASH = hashlib.sha256(b"rundirs: one configuration").hexdigest()  # every built run's (a twin's included)


def nvrx_sha(version: str) -> str:
    """The digest of a built NVRx install's files (harness.nemesis.identity), one per version."""
    return hashlib.sha256(f"nvidia_resiliency_ext {version}".encode()).hexdigest()
STEP_MS = 200  # one training iteration
LAUNCHER_PID = 17401
NODE = "vm"


@dataclass(frozen=True)
class Scenario:
    fault: str = "kill"  # kill | hang | none, or another kind of harness.plan.spec.FAULT_KINDS (its signal token)
    fault_exitcode: int | None = None  # the fault rank's `failed (exitcode` (default: -9, or the kind's first exit code)
    nvrx: str = "0.7.0"  # launcher log format: "0.7.0" (with cycle_infos) or "0.4.1"
    world: int = 2
    fault_rank: int = 1
    train_iters: int = 30
    save_interval: int = 5
    fault_at: int = 10  # the checkpoint the nemesis waits for: K
    utc_offset_s: int = 3600
    run_json: bool = True
    launch_json: bool = True
    per_cycle_logs: bool = True  # False: one un-prefixed log with the launcher lines (a user's sbatch run)
    console_log: bool = False  # the harness's console capture (UTC-stamped) of the launcher lines
    checkpoints: bool = True
    old_save_format: bool = False  # Megatron <= 0.18 "[ t 1/1, p 1/1 ]"
    microsecond_datetimes: bool = False  # Megatron 0.19 "datetime: 2026-12-01 07:52:49.308941"; older: whole seconds
    step_timeout_s: float = 10.0
    # what went wrong
    marker: bool = True  # False: the requested fault never fired
    never_fired_exit3: bool = False  # with marker=False: the nemesis exits 3, the launcher restarts until exhausted
    restart_from_random: bool = False
    no_load_optim: bool = False
    # the optimizer-load line is missing although nothing in the arguments says why (e.g. a
    # release checkpoint); with distributed_optimizer=False its scheduler lines stay
    silent_optimizer_skip: bool = False
    distributed_optimizer: bool = True
    load_iteration: int | None = None  # the replacement loads this instead of K
    restarts_exhausted: bool = False
    give_up_logged: bool = True  # False: the launcher's last lines are lost (NVRx 0.7.0's log server)
    second_failure_at: int | None = None  # the replacement dies again after logging this iteration
    second_injection: bool = False  # ... and the nemesis says it injected again
    moment: str | None = None  # run.json spec.fault_at (e.g. in-restore: the second injection was planned)
    second_marker: bool = False  # with second_injection: fault_injected.2.json claims it (cycle 1)
    second_not_restarted: bool = False  # the launcher starts no cycle after the second failure (its budget ran out)
    saves_after_restore: bool = True
    stop_at: int | None = None  # the replacement stops after this iteration (exit 0 anyway)
    training_done: bool = True
    timeout_ranks: tuple[int, ...] | None = None  # hang: ranks whose monitors time out, in this order (default all)
    timeout_after_ms: int | None = None  # hang: first timeout this long after the injection (default step + 0.5 s)
    uncommitted: tuple[int, ...] = ()  # iter dirs left without metadata.json
    optimizer_in_checkpoints: bool = True
    # Adam's step counter each checkpoint records (param_groups[*].step): "continued" (its
    # iteration, whatever the logs say), "reset" (restarted at the
    # restore: Megatron's DistributedOptimizer on torch Adam), "ahead" (16 per iteration after
    # the restore: one shared counter for 16 parameters), "absent" (no record outside common state)
    optimizer_steps: str = "continued"
    # a job that shrank (or grew): the replacement cycles' Megatron arguments say this world size
    # (and data_parallel_size, TP = PP = 1); run.json's nnodes / min_nnodes say what the plan allowed
    world_after: int | None = None
    nnodes: int = 1
    min_nnodes: int | None = None
    # whose record holds the step: "distributed" (the DistributedOptimizer's DCP object), "plain"
    # (Megatron's common state: optimizer.optimizer.state.common_step) or "chained" (the common
    # state of a ChainedOptimizer of two plain optimizers: optimizer[0], optimizer[1]) or
    # "chained_distributed" (two distributed optimizers, every key under chained_<i>.: Megatron's MoE)
    optimizer_record: str = "distributed"
    # Megatron's non-persistent global tier (harness.vocab.tiers): every N iterations not a multiple of
    # save_interval, saved under checkpoints/non_persistent with its own tracker; None: off
    non_persistent_interval: int | None = None
    # the tier the replacement loads load_iteration from: None (Megatron's own choice: the newest
    # tier) or "persistent" (Megatron says the non-persistent checkpoints are older)
    load_tier: str | None = None
    # the training loop is blocked this long in each save (`saving checkpoint` → `scheduled an async
    # checkpoint save`), and the next iteration comes that much later; None: today's 5 ms inside the step
    save_stall_ms: int | None = None
    step_ms: int = STEP_MS  # one training iteration (an uninterrupted twin on a quieter machine is faster)
    # the non-persistent tier in a directory of its own (--non-persistent-global-ckpt-dir, this
    # name under the run directory) instead of checkpoints/non_persistent; the arguments table says so
    np_dir: str | None = None
    # run.json's contract (harness.launch.contract): what the run promised. False: a run.json from before contracts
    contract: bool = True
    # what every cycle's first worker says it imported (the nemesis's launcher identity line): "planned"
    # (the contract's NVRx), "other" (NVRx 0.4.1 from elsewhere), "missing" (none found), "silent" (no line)
    imported: str = "planned"
    # a campaign (run.json spec.fault campaign): every planned fault as KIND@RANK:MOMENT, fault 1 the
    # scenario's own (its marker); () one fault (in-restore: two) as --fault / spec.fault_at plan it
    planned: tuple[str, ...] = ()
    # the uninterrupted twin's run ID (built beside this run first) that the contract names as the baseline
    baseline_run_id: str | None = None
    # a data replay after the restore: the replacement's losses and final model weights differ from
    # an uninterrupted run's (what loss_continuity and state_equivalence catch)
    diverged_after_restore: bool = False
    # torch elastic's master-port race (harness.judge.findings): the first replacement cycle fails on
    # rank 0 at its start (EADDRINUSE), and cycle 2 is the replacement that recovers
    master_port_taken: bool = False
    # a save the failed cycle began after K's commit and finished before the fault landed, its commit
    # line cut by the fault (Megatron finalizes an async save at a later step): cycle 0 trains to this
    # iteration, which saves, and the marker still names K; the checkpoint is complete on disk
    finished_unlogged: int | None = None


# what a rank-0 worker prints when its TCPStore cannot listen on the master port (torch 2.x)
PORT_TAKEN_TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/opt/megatron/pretrain_gpt.py", line 324, in <module>',
    "    pretrain(",
    '  File "/usr/lib/python3/dist-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store',
    "    return TCPStore(",
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "port: 36523, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
)


@dataclass
class Built:
    run_dir: Path
    scenario: Scenario
    times: dict[str, float] = field(default_factory=dict)  # true UTC seconds of the milestones
    facts: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- formatting


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


class _Clock:
    def __init__(self, offset_s: int) -> None:
        self.offset_ms = offset_s * 1000

    def megatron(self, ms: int) -> str:  # [YYYY-mm-dd HH:MM:SS.ffffff], local
        return _dt(ms + self.offset_ms).strftime("[%Y-%m-%d %H:%M:%S.%f]")

    def whole(self, ms: int) -> str:  # datetime: YYYY-mm-dd HH:MM:SS, local
        return _dt(ms + self.offset_ms).strftime("%Y-%m-%d %H:%M:%S")

    def launcher070(self, ms: int) -> str:
        d = _dt(ms + self.offset_ms)
        return d.strftime("%Y-%m-%d %H:%M:%S") + f",{d.microsecond // 1000:03d}"

    def launcher041(self, ms: int) -> str:
        return "[" + self.launcher070(ms) + "]"

    def glog(self, ms: int, level: str = "E") -> str:
        d = _dt(ms + self.offset_ms)
        return f"{level}{d.strftime('%m%d %H:%M:%S')}.{d.microsecond:06d}"

    @staticmethod
    def utc(ms: int) -> str:
        d = _dt(ms)
        return d.strftime("%Y-%m-%d %H:%M:%S") + f".{d.microsecond // 1000:03d}"

    @staticmethod
    def iso(ms: int) -> str:
        d = _dt(ms)
        return d.strftime("%Y-%m-%dT%H:%M:%S") + f".{d.microsecond // 1000:03d}Z"


def _arg(name: str, value: object) -> str:
    return "  {} {} {}".format(name, "." * (48 - len(name)), value)


# ---------------------------------------------------------------- the builder


class _Run:
    def __init__(self, root: Path, s: Scenario) -> None:
        self.s = s
        self.root = root
        self.ckpt = root / "checkpoints"
        self.clock = _Clock(s.utc_offset_s)
        self.app: dict[int, list[tuple[int, int, str]]] = {}  # cycle -> (ms, rank, text)
        self.launcher: list[tuple[int, str]] = []
        self.cycle_infos: list[dict] = []
        self.saves: dict[int, bool] = {}  # iteration -> committed
        self.np_saves: set[int] = set()  # the non-persistent tier's iterations
        self.np_ckpt = root / s.np_dir if s.np_dir else self.ckpt / "non_persistent"
        self.times: dict[str, float] = {}
        self.facts: dict[str, int] = {}
        self.last = s.world - 1
        self.gbs = 32
        self._seq = 0

    # ---- emitters

    def say(self, cycle: int, ms: int, rank: int, text: str) -> None:
        self._seq += 1
        self.app.setdefault(cycle, []).append((ms, self._seq, rank, text))

    def log(self, ms: int, text: str) -> None:
        self._seq += 1
        self.launcher.append((ms, self._seq, text))

    def l070(self, ms: int, level: str, where: str, msg: str, workload: str = "?(?)") -> None:
        self.log(ms, f"{self.clock.launcher070(ms)} [{level}] [{NODE}] [workload:{workload} infra:?(?)] {where} {msg}")

    def l041(self, ms: int, level: str, msg: str, who: str = f"ft_launcher{LAUNCHER_PID}@{NODE}") -> None:
        self.log(ms, f"{self.clock.launcher041(ms)} [{level}] [{who}] {msg}")

    def profiling(self, ms: int, cycle: int, name: str) -> None:
        self.l070(ms, "INFO", "profiling.py:93  ", f"- Cycle: {cycle} Event: {name} Node: localhost_{LAUNCHER_PID}_0 "
                                                   f"Rank: 0 Time: {self.clock.utc(ms)} UTC")

    # ---- launcher side

    def launcher_start(self, ms: int) -> None:
        if self.s.nvrx == "0.7.0":
            self.l070(ms - 60, "INFO", "launcher.py:2754", "Using nproc_per_node=2.")
            self.l070(ms - 40, "INFO", "launcher.py:655", "[default] starting workers for entrypoint: python3")
        else:
            self.l041(ms - 60, "INFO", "Using nproc_per_node=2.")
            self.l041(ms - 40, "INFO", "[default] starting workers for entrypoint: python3")

    def cycle_start(self, cycle: int, ms: int) -> int:
        """Rendezvous and worker start of one cycle; returns the workers-started time."""
        if self.s.nvrx == "0.7.0":
            self.profiling(ms, cycle, "rendezvous_started")
            self.l070(ms + 6, "INFO", "ft_rendezvous_barrier.py:2804",
                      f"The node 'localhost_{LAUNCHER_PID}_0' has joined the rendezvous 'job' as rank 0 in a world of size 1.")
            self.profiling(ms + 7, cycle, "rendezvous_completed")
            self.profiling(ms + 9, cycle, "worker_start_started")
            started = ms + 30
            self.profiling(started, cycle, "worker_start_completed")
            self.cycle_infos.append({"cycle_number": cycle, "cycle_start_time": self.clock.iso(ms + 4),
                                     "cycle_end_time": None, "cycle_log_file": str(self.root / f"logs/train_cycle_cycle{cycle}.log"),
                                     "active_nodes": "localhost", "generation": "1", "active_ranks": "0", "job_id": "",
                                     "attempt_index": 0, "standby_nodes": ""})
        else:
            self.l041(ms, "INFO", f"The node 'localhost_{LAUNCHER_PID}_0' attempts to join the next round of the rendezvous 'job'.")
            started = ms + 30
            self.l041(started, "INFO", f"The node 'localhost_{LAUNCHER_PID}_0' has joined round {cycle} of the rendezvous "
                                       "'job' as rank 0 in a world of size 1.")
        return started

    def cycle_end(self, cycle: int, ms: int) -> None:
        if self.cycle_infos and self.cycle_infos[-1]["cycle_number"] == cycle:
            self.cycle_infos[-1]["cycle_end_time"] = self.clock.iso(ms)

    def failure(self, cycle: int, ms: int, local_rank: int, exitcode: int, restart: bool, hang_ranks: tuple[int, ...] = ()) -> int:
        """The launcher's record of a failed cycle; returns the detection time."""
        detected = ms
        v070 = self.s.nvrx == "0.7.0"
        for i, r in enumerate(hang_ranks):
            t = ms + 15 * i
            elapsed = self.s.step_timeout_s + 4.46 + i * 0.2
            msg = f"Section 'step' has been open for {elapsed:.2f} seconds. Timeout is {self.s.step_timeout_s:.2f} seconds."
            if v070:
                self.l070(t, "WARNING", "rank_monitor_server.py:522", f"[Cycle {cycle}] {msg}", workload=f"?({r})")
            else:
                self.l041(t, "WARNING", msg, who=f"RankMonServer{11937 + r}@{NODE}:{r}")
                self.l041(t, "WARNING", "FT timeout elapsed.", who=f"RankMonServer{11937 + r}@{NODE}:{r}")
        t = ms + (80 if hang_ranks else 0)
        if v070:
            self.log(t, f"{self.clock.glog(t)} {LAUNCHER_PID} torch/distributed/elastic/multiprocessing/api.py:1002] failed "
                        f"(exitcode: {exitcode}) local_rank: {local_rank} (pid: {17412 + cycle}) of binary: /usr/bin/python3")
            self.profiling(t, cycle + 1, "failure_detected")
            detected = t  # 0.6+: the failure_detected event is the detection, for a hang too
            if restart:
                self.l070(t + 1, "INFO", "launcher.py:636", f"[default] Worker group UNHEALTHY. {2 - cycle}/2 attempts left; "
                                                            "will restart worker group")
                self.profiling(t + 1300, cycle + 1, "worker_terminated")
        else:
            self.l041(t, "ERROR", f"failed (exitcode: {exitcode}) local_rank: {local_rank} (pid: {16905 + cycle}) of binary: "
                                  "/usr/bin/python3")
            if not hang_ranks:
                detected = t
            if restart:
                state = "FAILED" if hang_ranks else "UNHEALTHY"
                self.l041(t + 1, "INFO", f"[default] Worker group {state}. {2 - cycle}/2 attempts left; will restart worker group")
                self.l041(t + 2, "INFO", "Stopping workers... Timeout = 30 sec.")
        self.cycle_end(cycle, t + 2)
        return detected

    def success(self, ms: int) -> None:
        if self.s.nvrx == "0.7.0":
            self.l070(ms, "INFO", "launcher.py:672", "[default] worker group successfully finished. Waiting 300 seconds for "
                                                     "other agents to finish.")
            self.l070(ms + 1000, "INFO", "launcher.py:1712", "Agent .run() is OK. No failures in the result. "
                                                             "result=RunResult(state=<WorkerState.SUCCEEDED: 'SUCCEEDED'>, "
                                                             "return_values={0: None, 1: None}, failures={})")
            # 0.7.0 with --ft-nvrx-logfile loses the final "Agent exits with exit code" line
        else:
            self.l041(ms, "INFO", "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.")
            self.l041(ms + 9, "INFO", "Agent .run() is OK. No failures in the result. result=RunResult(state=<WorkerState."
                                      "SUCCEEDED: 'SUCCEEDED'>, return_values={0: None, 1: None}, failures={})")
            self.l041(ms + 30, "INFO", "Agent exits with exit code = 0.")

    def give_up(self, ms: int) -> None:
        if not self.s.give_up_logged:
            return
        msg = ("Some rank(s) exited with non-zero exit code: {1: ProcessFailure(local_rank=1, exitcode=-9)}. "
               "Agent's exit code = 1")
        if self.s.nvrx == "0.7.0":
            self.l070(ms, "ERROR", "launcher.py:3746", msg)
        else:
            self.l041(ms, "ERROR", msg)

    # ---- application side

    def megatron_start(self, cycle: int, ms: int, no_load_optim: bool = False, distributed: bool = True) -> int:
        """Arguments table, FT init, warnings; returns the time the load begins."""
        s = self.s
        args = {
            "async_save": True, "ckpt_format": "torch_dist", "ckpt_step": None, "exit_interval": None, "finetune": False,
            "global_batch_size": self.gbs, "load": self.ckpt, "log_interval": 1, "no_load_optim": no_load_optim,
            "save": self.ckpt, "save_interval": s.save_interval, "train_iters": s.train_iters,
            "use_distributed_optimizer": distributed, "world_size": s.world,
        }
        if s.non_persistent_interval:
            args["non_persistent_ckpt_type"] = "global"
            args["non_persistent_global_ckpt_dir"] = self.np_ckpt if s.np_dir else None
        if s.world_after is not None:
            args["world_size"] = args["data_parallel_size"] = s.world if cycle == 0 else s.world_after
        per_node = max(1, s.world // max(1, s.nnodes))
        for r in range(0, s.world, per_node):  # the nemesis in every node's first worker, before the entrypoint
            if s.imported == "planned":
                self.say(cycle, ms - 3, r, f"[nemesis] rank {r} launcher identity: nvidia_resiliency_ext {s.nvrx} sha256 "
                                           f"{nvrx_sha(s.nvrx)} files {NVRX_FILES} at {NVRX_DIR}")
            elif s.imported == "other":
                self.say(cycle, ms - 3, r, f"[nemesis] rank {r} launcher identity: nvidia_resiliency_ext 0.4.1 sha256 "
                                           f"{nvrx_sha('0.4.1')} files 114 at /usr/lib/python3/dist-packages/"
                                           "nvidia_resiliency_ext")
            elif s.imported == "missing":
                self.say(cycle, ms - 3, r, f"[nemesis] rank {r} launcher identity: nvidia_resiliency_ext not found "
                                           "(not on sys.path)")
        for r in range(s.world):
            self.say(cycle, ms, r, "/opt/megatron/training/arguments.py:1: UserWarning: --async-save is not supported "
                                   "without --use-persistent-ckpt-worker. Disabling --async-save.")
        self.say(cycle, ms + 5, 0, "------------------------ arguments ------------------------")
        for i, (k, v) in enumerate(sorted(args.items())):
            self.say(cycle, ms + 5, 0, _arg(k, v))
            if i == 3 and s.world > 1:  # another rank's line lands inside the table
                self.say(cycle, ms + 5, 1, "[W1129 16:32:01.000000000 socket.cpp:200] [c10d] hostname not resolved")
        self.say(cycle, ms + 5, 0, "-------------------- end of arguments ---------------------")
        self.say(cycle, ms + 400, 0, "FT: initialized. Timeouts=RankMonitorConfig(section_timeouts={'setup': 900, "
                                     "'step': 120, 'checkpointing': 600}, out_of_section=180)")
        return ms + 500

    def load(self, cycle: int, ms: int, iteration: int | None, optimizer: bool, distributed: bool = True) -> None:
        if iteration is None:
            self.say(cycle, ms, 0, f"WARNING: could not find the metadata file {self.ckpt}/latest_checkpointed_iteration.txt")
            self.say(cycle, ms, 0, "    will not load any checkpoints and will start from random")
            return
        if self.s.non_persistent_interval and not self.np_saves:  # Megatron reads the tier's tracker first
            self.say(cycle, ms - 5, 0, f"WARNING: could not find the metadata file {self.np_ckpt}/"
                                       "latest_checkpointed_iteration.txt")
            self.say(cycle, ms - 4, 0, "    will not load any non-persistent checkpoint")
        if iteration in self.np_saves and self.s.load_tier != "persistent":
            self.say(cycle, ms, 0, f"Loading from a non-persistent checkpoint (non-persistent iter {iteration})")
        else:
            if self.np_saves:
                self.say(cycle, ms - 2, 0, "WARNING: non-persistent checkpoints are older than persistent checkpoint")
            self.say(cycle, ms, 0, f" loading distributed checkpoint from {self.ckpt} at iteration {iteration}")
        self.say(cycle, ms + 10, 0, " sharded_state_dict metadata loaded from the checkpoint: {'distrib_optim_sharding_type': "
                                    "'dp_reshardable', 'chained_optim_avoid_prefix': True}")
        self.say(cycle, ms + 11, 0, " checkpoint version 3.0")
        if optimizer and distributed:
            self.say(cycle, ms + 20, 0, "INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer "
                                        "sharded state of type dp_reshardable")
        if optimizer:
            self.say(cycle, ms + 30, 0, "INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value 0.0001 "
                                        "for learning rate")
            self.say(cycle, ms + 31, 0, "INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value 1e-05 "
                                        "for minimum learning rate")
        self.say(cycle, ms + 40, 0, f"  successfully loaded checkpoint from {self.ckpt} [ t 1/1, gtp_remat 1/1, p 1/1 ] "
                                    f"at iteration {iteration}")

    def built(self, cycle: int, ms: int) -> int:
        if self.s.microsecond_datetimes:
            stamp = self.clock.megatron(ms)[1:-1]
            self.say(cycle, ms, 0, f"[after model, optimizer, and learning rate scheduler are built] datetime: {stamp} ")
            return ms
        self.say(cycle, ms, 0, f"[after model, optimizer, and learning rate scheduler are built] datetime: {self.clock.whole(ms)} ")
        # the stamp is whole seconds of local time: its true UTC value is the floor
        return (ms + self.clock.offset_ms) // 1000 * 1000 - self.clock.offset_ms

    def iteration(self, cycle: int, ms: int, it: int, skipped: int = 0) -> None:
        loss = 10.5 - 0.1 * it + (0.25 if self.s.diverged_after_restore and cycle > 0 else 0.0)
        self.say(cycle, ms, self.last,
                 f" {self.clock.megatron(ms)} iteration {it:8d}/{self.s.train_iters:8d} | consumed samples: {it * self.gbs:12d} "
                 f"| elapsed time per iteration (ms): {STEP_MS:.1f} | learning rate: 1.000000E-04 | global batch size: "
                 f"{self.gbs:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations: "
                 f"{skipped:3d} | number of nan iterations:   0 |")

    def save(self, cycle: int, ms: int, it: int) -> None:
        to = self.ckpt
        if self.s.non_persistent_interval and it % self.s.save_interval:
            to = self.np_ckpt
            self.np_saves.add(it)
        self.say(cycle, ms, 0, f"{self.clock.megatron(ms)} saving checkpoint at iteration {it:7d} to {to} in torch_dist format")
        blocked = 5 if self.s.save_stall_ms is None else self.s.save_stall_ms
        self.say(cycle, ms + blocked, 0, f"  {self.clock.megatron(ms + blocked)} scheduled an async checkpoint save at "
                                         f"iteration {it:7d} to {to}")
        self.saves.setdefault(it, False)

    def commit(self, cycle: int, ms: int, it: int) -> None:
        shape = "[ t 1/1, p 1/1 ]" if self.s.old_save_format else "[ t 1/1, gtp_remat 1/1, p 1/1 ]"
        self.say(cycle, ms, 0, f"  {self.clock.megatron(ms)} successfully saved checkpoint from iteration {it:7d} to "
                               f"{self.ckpt} {shape}")
        self.saves[it] = True

    def train(self, cycle: int, start_ms: int, first: int, last: int, *, saves: bool = True) -> int:
        """Iterations first..last, async saves committed at the next iteration; returns the end time."""
        ms = start_ms
        pending: int | None = None
        stall = self.s.save_stall_ms or 0
        for it in range(first, last + 1):
            ms += self.s.step_ms
            self.iteration(cycle, ms, it)
            self.times.setdefault(f"first_line_{cycle}", ms / 1000)
            self.times[f"last_line_{cycle}"] = ms / 1000
            if pending is not None:
                self.commit(cycle, ms + 20, pending)
                pending = None
            if it % 3 == 0:
                self.say(cycle, ms + 30, it % self.s.world, f"[rank{it % self.s.world}]:[W1129] ProcessGroupGloo.cpp:1000 "
                                                           "Warning: some gloo noise about iteration timing")
            if saves and (it % self.s.save_interval == 0
                          or (self.s.non_persistent_interval and it % self.s.non_persistent_interval == 0)):
                self.save(cycle, ms + 40, it)
                pending = it
                if it < last:  # the loop was blocked in the save: the next iteration comes later
                    ms += stall
        if pending is not None and last == self.s.train_iters:  # the end of training finalizes the last async save
            self.commit(cycle, ms + 80 + stall, pending)
            return ms + 100 + stall
        return ms + 100


def build(root: Path, s: Scenario = Scenario()) -> Built:  # noqa: C901 - one scenario, told in order
    """Write the run directory of scenario `s` at `root` (created)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    run = _Run(root, s)
    k = s.fault_at
    t = BASE_UTC_MS
    run.launcher_start(t)
    fault_cycle = 0

    # ---- cycle 0: fresh start, train to K+1 (K commits at the end of K+1), fault
    started0 = run.cycle_start(0, t)
    load_at = run.megatron_start(0, started0 + 300, distributed=s.distributed_optimizer)
    run.load(0, load_at, None, optimizer=False)
    built0 = load_at + 600
    run.built(0, built0)
    if s.fault == "none" or not s.marker:
        end = run.train(0, built0 + 500, 1, s.train_iters)
        run.say(0, end, 0, f"[after training is done] datetime: {run.clock.whole(end)} ")
        finish = end + 500
        if s.never_fired_exit3:
            run.say(0, end + 10, s.fault_rank, f"nemesis: requested fault {s.fault} on rank {s.fault_rank} never happened: no "
                                               "checkpoint newer than the startup baseline appeared before the entrypoint ended")
            cycle = 0
            for cycle in range(3):
                det = run.failure(cycle, finish, local_rank=s.fault_rank, exitcode=3, restart=cycle < 2)
                if cycle < 2:
                    st = run.cycle_start(cycle + 1, det + 2300)
                    la = run.megatron_start(cycle + 1, st + 300)
                    run.load(cycle + 1, la, s.train_iters, optimizer=True)
                    run.built(cycle + 1, la + 600)
                    run.say(cycle + 1, la + 700, 0, f"[after training is done] datetime: {run.clock.whole(la + 700)} ")
                    finish = la + 900
            run.give_up(finish + 100)
            return _finish(run, exit_code=1, ended_ms=finish + 200)
        run.success(finish)
        return _finish(run, exit_code=0, ended_ms=finish + 1100)

    last0 = k + 1 if s.finished_unlogged is None else s.finished_unlogged
    end = run.train(0, built0 + 500, 1, last0)
    if s.finished_unlogged is not None:
        run.saves[s.finished_unlogged] = True  # finished on disk; its commit line never came
    commit_k = end - 100 + 20  # the commit line of K, printed after iteration K+1
    injected = commit_k + 40
    run.times["injected_at"] = injected / 1000
    run.facts["last_before_fault"] = last0
    run.facts["restored"] = k  # until a replacement loads something else
    signal = _signal_of(s)
    run.say(0, injected, s.fault_rank, f"[nemesis] rank {s.fault_rank} injecting {signal} after checkpoint iteration {k} (baseline 0)")
    _marker(root, s, run, injected, k)
    # what the surviving ranks print, and the cut-off line of the killed one
    run.say(0, injected + 30, 0, "[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:27554: "
                                 "Connection reset by peer.")
    run.say(0, injected + 31, 0, "\x00\x01\x02\ufffd\ufffd binary junk \x1b[0m")
    if not FAULT_KINDS[s.fault].monitor_detects:
        detected = run.failure(0, injected + 90, local_rank=s.fault_rank, exitcode=_exitcode_of(s),
                               restart=not s.restarts_exhausted)
    else:
        ranks = s.timeout_ranks if s.timeout_ranks is not None else tuple(range(s.world))
        after = s.timeout_after_ms if s.timeout_after_ms is not None else int(s.step_timeout_s * 1000) + 500
        detected = run.failure(0, injected + after, local_rank=0, exitcode=_exitcode_of(s),
                               restart=not s.restarts_exhausted, hang_ranks=ranks)
    run.times["detected_at"] = detected / 1000
    if s.restarts_exhausted:
        run.give_up(detected + 500)
        return _finish(run, exit_code=1, ended_ms=detected + 600, cut_cycle=0)

    rc = 1  # the replacement's cycle
    if s.master_port_taken:
        # the first replacement's rank 0 cannot listen on the master port torch elastic picked: no
        # fault caused it, and NVRx restarts once more (torch's DistNetworkError, as CI met it)
        assert s.second_failure_at is None, "master_port_taken and second_failure_at use the same cycles"
        taken = run.cycle_start(1, detected + 2300)
        for i, line in enumerate(PORT_TAKEN_TRACEBACK):
            run.say(1, taken + 900 + i, 0, line)
        detected = run.failure(1, taken + 1000, local_rank=0, exitcode=1, restart=True)
        rc = 2

    # ---- cycle rc: the replacement
    started1 = run.cycle_start(rc, detected + 2300)
    run.times["workers_started_at"] = started1 / 1000
    load_at = run.megatron_start(rc, started1 + 700, no_load_optim=s.no_load_optim, distributed=s.distributed_optimizer)
    loaded = None if s.restart_from_random else (s.load_iteration if s.load_iteration is not None else k)
    run.load(rc, load_at, loaded, optimizer=not (s.no_load_optim or s.silent_optimizer_skip),
             distributed=s.distributed_optimizer)
    built1 = load_at + 700
    built_true = run.built(rc, built1) / 1000
    first = 1 if loaded is None else loaded + 1
    run.times["first_step_at"] = (built1 + 600 + s.step_ms) / 1000
    if loaded is not None:  # nothing loaded, nothing to time
        run.times["checkpoint_loaded_at"] = built_true
    run.facts["first_after_restore"] = first
    run.facts["restored"] = loaded if loaded is not None else 0
    last1 = s.train_iters
    if s.second_failure_at is not None:
        last1 = s.second_failure_at
    elif s.stop_at is not None:
        last1 = s.stop_at
    end1 = run.train(rc, built1 + 600, first, last1, saves=s.saves_after_restore)
    final_cycle = rc
    if s.second_failure_at is not None:
        if s.second_injection:
            run.say(1, end1 - 50, s.fault_rank, f"[nemesis] rank {s.fault_rank} injecting SIGKILL after checkpoint iteration "
                                                f"{(last1 // s.save_interval) * s.save_interval} (baseline {k})")
            if s.second_marker:
                again = (last1 // s.save_interval) * s.save_interval
                record = {"fault": s.fault, "signal": "SIGKILL", "rank": s.fault_rank, "local_rank": s.fault_rank,
                          "cycle": 1, "iteration": again, "baseline_iteration": k,
                          "injected_at": _Clock.iso(end1 - 50), "host": NODE, "pid": 17513,
                          "fault_at": s.moment or "after-commit", "fault_index": 2}
                (root / "fault_injected.2.json").write_text(json.dumps(record, indent=2) + "\n")
        det2 = run.failure(1, end1 + 100, local_rank=s.fault_rank, exitcode=-9 if s.second_injection else 1,
                           restart=not s.second_not_restarted)
        if s.second_not_restarted:
            run.give_up(det2 + 500)
            return _finish(run, exit_code=1, ended_ms=det2 + 600, cut_cycle=1)
        started2 = run.cycle_start(2, det2 + 2300)
        resume = max(i for i, ok in run.saves.items() if ok)
        la2 = run.megatron_start(2, started2 + 700)
        run.load(2, la2, resume, optimizer=True)
        built2 = run.built(2, la2 + 700) / 1000
        run.times.update({"injected_at_2": (end1 - 50) / 1000, "detected_at_2": det2 / 1000,
                          "workers_started_at_2": started2 / 1000, "checkpoint_loaded_at_2": built2})
        run.facts.update({"last_before_fault_2": last1, "restored_2": resume})
        end1 = run.train(2, la2 + 1300, resume + 1, s.train_iters)
        final_cycle = 2
    if s.training_done:
        run.say(final_cycle, end1, 0, f"[after training is done] datetime: {run.clock.whole(end1)} ")
    run.cycle_end(final_cycle, end1 + 400)
    run.success(end1 + 500)
    return _finish(run, exit_code=0, ended_ms=end1 + 1600, cut_cycle=fault_cycle)


def _signal_of(s: Scenario) -> str:
    return FAULT_KINDS[s.fault].signal


def _exitcode_of(s: Scenario) -> int:
    if s.fault_exitcode is not None:
        return s.fault_exitcode
    return (FAULT_KINDS[s.fault].exit_codes or (-9,))[0]


def _marker(root: Path, s: Scenario, run: _Run, injected_ms: int, k: int) -> None:
    record = {"fault": s.fault, "signal": _signal_of(s), "rank": s.fault_rank,
              "local_rank": s.fault_rank, "cycle": 0, "iteration": k, "baseline_iteration": 0,
              "injected_at": _Clock.iso(injected_ms), "host": NODE, "pid": 17412,
              "tracker": str(run.ckpt / "latest_checkpointed_iteration.txt")}
    (root / "fault_injected.json").write_text(json.dumps(record, indent=2) + "\n")


def _finish(run: _Run, *, exit_code: int, ended_ms: int, cut_cycle: int | None = None) -> Built:
    s, root = run.s, run.root
    width = len(str(s.world - 1))
    if s.per_cycle_logs:
        for cycle, lines in run.app.items():
            lines.sort(key=lambda x: (x[0], x[1]))
            with open(root / f"logs/train_cycle_cycle{cycle}.log", "w", encoding="utf-8", newline="\n") as f:
                for _, _, rank, text in lines:
                    f.write(f"{rank:>{width}}: {text}\n")
                if cycle == cut_cycle:  # the killed rank's last write, cut mid-line
                    f.write(f"{s.fault_rank:>{width}}: [W1129 16:32:09.000] ProcessGroupGloo.cpp:1203 Warning: recv fr")
        launcher_lines = sorted(run.launcher)
        (root / "logs/launcher.log").write_text("".join(t + "\n" for _, _, t in launcher_lines), encoding="utf-8")
    else:  # a user's own sbatch: one file, launcher lines and un-prefixed worker lines interleaved
        merged = [(ms, seq, text) for lines in run.app.values() for ms, seq, _, text in lines] + run.launcher
        merged.sort(key=lambda x: (x[0], x[1]))
        (root / "logs/megatron-1234.out").write_text("".join(t + "\n" for _, _, t in merged), encoding="utf-8")
    if s.console_log:
        with open(root / "logs/console.log", "w", encoding="utf-8") as f:
            for ms, _, text in sorted(run.launcher):
                f.write(f"{_Clock.iso(ms + 3)} err {text}\n")
    if s.nvrx == "0.7.0" and run.cycle_infos:
        (root / "cycle_infos").mkdir(exist_ok=True)
        for info in run.cycle_infos:
            (root / f"cycle_infos/cycle_info..0.{info['cycle_number']}").write_text(json.dumps(info, indent=2))
        (root / "cycle_infos/cycle_info..current").symlink_to(f"cycle_info..0.{run.cycle_infos[-1]['cycle_number']}")
    if s.checkpoints:
        _write_checkpoints(run)
    if s.run_json:
        extra = ["--no-load-optim"] if s.no_load_optim else []
        argv = ["/usr/bin/python3", "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", "--nproc-per-node", str(s.world),
                "--max-restarts", "0" if s.restarts_exhausted else "2", "-m", "harness.nemesis", "--", "pretrain_gpt.py",
                "--save", str(run.ckpt), "--load", str(run.ckpt), *extra]
        planned = [p.to_json(i) for i, p in enumerate(_schedule(s), start=1)]
        campaign = {"faults": len(s.planned), "seed": 7, "fault_kinds": sorted({p["kind"] for p in planned})} \
            if s.planned else {}
        record = {"schema": 1, "created_at": _Clock.iso(BASE_UTC_MS - 5000), "utc_offset_s": s.utc_offset_s,
                  "nvrx_version": s.nvrx, "config_hash": CONFIG_HASH,
                  "spec": {"workload": "megatron", "fault": "campaign" if s.planned else s.fault,
                           "fault_rank": s.fault_rank, "train_iters": s.train_iters, **campaign,
                           **({"schedule": planned} if s.planned else {}),
                           "save_interval": s.save_interval, "nnodes": s.nnodes, "gpus_per_node": s.world // s.nnodes,
                           **({"min_nnodes": s.min_nnodes} if s.min_nnodes is not None else {}),
                           "checkpoint_dir": str(run.ckpt), "extra_args": extra, "run_id": root.name,
                           "deadline_profile": "reference", "out_of_section_timeout": s.step_timeout_s,
                           "section_timeouts": {"setup": 60.0, "step": s.step_timeout_s,
                                                "checkpointing": s.step_timeout_s},
                           "workload_check_interval": 1.0,
                           **({"fault_at": s.moment} if s.moment else {})},
                  "commands": [{"name": "launcher", "argv": argv, "env": {}, "cwd": str(root)}]}
        if s.contract:
            record["contract"] = _contract(s, root, planned)
        (root / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    run.times.update({"launch_started_at": (BASE_UTC_MS - 100) / 1000, "launch_ended_at": ended_ms / 1000})
    if s.launch_json:
        record = {"launcher_exit_code": exit_code, "started_at": _Clock.iso(BASE_UTC_MS - 100),
                  "ended_at": _Clock.iso(ended_ms), "stopped_early": None, "nvrx_version": s.nvrx}
        (root / "launch.json").write_text(json.dumps(record, indent=2) + "\n")
    return Built(root, s, dict(run.times), dict(run.facts))


def _schedule(s: Scenario) -> tuple:
    """The scenario's planned faults (harness.vocab.faults.PlannedFault), fault 1 first."""
    from harness.vocab.faults import parse_schedule, single_schedule

    if s.planned:
        return parse_schedule(",".join(s.planned))
    return single_schedule(s.fault, s.fault_rank, s.moment or "after-commit") if s.fault != "none" else ()


def _contract(s: Scenario, root: Path, planned: list[dict]) -> dict:
    """run.json's contract as harness.launch.contract writes it for this scenario's plan."""
    from harness.read import evidence

    baseline: dict = {"how": "none", "run_id": None, "config_hash": None, "checkpoints": None,
                      "why": "--baseline none" if s.fault != "none" else "fault none: this run is itself a baseline",
                      "problem": None}
    if s.baseline_run_id is not None:
        digest = evidence.digest(root.parent / s.baseline_run_id / "checkpoints")
        baseline = {"how": "ran", "run_id": s.baseline_run_id, "config_hash": CONFIG_HASH,
                    "checkpoints": digest.to_json() if digest is not None else None, "why": None, "problem": None}
    return {
        "version": 1,
        "faults": [{**p, "fault_after": "any" if p["moment"] == "after-commit" else None} for p in planned],
        "launcher": {"package": "nvidia_resiliency_ext", "path": NVRX_DIR, "version": s.nvrx, "sha256": nvrx_sha(s.nvrx),
                     "files": NVRX_FILES},
        "baseline": baseline,
        "tiers": {"save_interval": s.save_interval, "fault_after": "any",
                  "non_persistent_ckpt_type": "global" if s.non_persistent_interval else None},
        "shape": {"nnodes": s.nnodes, "gpus_per_node": s.world // s.nnodes, "world": s.world, "tp": 1, "pp": 1, "cp": 1,
                  "dp": s.world, "hot_spares": 0, "min_nnodes": s.min_nnodes},
    }


# ---------------------------------------------------------------- checkpoints (real DCP)

_TEMPLATES: dict[tuple[bool, float | None, str, float], Path] = {}


def _plain_optimizer(step: float | None) -> dict:
    """A plain optimizer's entry of Megatron's common state (the fp16/bf16 wrapper's shape)."""
    import torch

    groups = [{"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": wd} for wd in (0.01, 0.0)]
    state = {"common_step": torch.tensor(float(step))} if step is not None else {}
    return {"optimizer": {"state": state, "param_groups": groups}}


def _template(with_optimizer: bool, step: float | None = None, record: str = "distributed", shift: float = 0.0) -> Path:
    """A tiny DCP checkpoint written by PyTorch once per process and step, copied per iteration;
    `shift` is added to the model's weights (a run whose end state diverged)."""
    if (with_optimizer, step, record, shift) not in _TEMPLATES:
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp

        base = Path(tempfile.mkdtemp(prefix="nvrxq-dcp-"))
        atexit.register(shutil.rmtree, base, True)
        param = "model.decoder.layers.0.mlp.linear_fc1.weight"
        state = {param: torch.arange(16.0).reshape(4, 4) + shift, "common_state": {"iteration": 0}}
        if with_optimizer and record in ("distributed", "chained_distributed"):
            # a ChainedOptimizer of two distributed optimizers (MoE: dense and expert parameters) keys each
            # one's state under chained_<i>.
            chains = ("chained_0.", "chained_1.") if record == "chained_distributed" else ("",)
            for chain in chains:
                prefix = (f"{chain}optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, "
                          "torch.float32).bucket_idx_0")
                for name in ("param", "exp_avg", "exp_avg_sq"):
                    state[f"{prefix}.{name}"] = torch.zeros(16)
                if step is not None:  # a tuple stays one pickled DCP object, as Megatron's list does
                    state[f"{chain}optimizer.distributed.dp_group_idx_0.optimizer"] = (
                        {"param_groups": [{"lr": 1e-4, "step": step}, {"lr": 1e-4, "step": step}]},)
        elif with_optimizer:  # Megatron's plain optimizer: moments per parameter, the step in the common state
            del state["common_state"]
            params = [param] if record == "plain" else [param, "model.decoder.layers.0.mlp.experts.weight"]
            for p in params[1:]:
                state[p] = torch.zeros(4, 4)
            for p in params:
                for name in ("fp32_param", "exp_avg", "exp_avg_sq"):
                    state[f"optimizer.state.{name}.{p}"] = torch.zeros(4, 4)
            opt = _plain_optimizer(step) if record == "plain" else {0: _plain_optimizer(step), 1: _plain_optimizer(step)}
            state["common_state/shard_0_1"] = ({"iteration": 0, "optimizer": opt},)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
            dcp.save(state, storage_writer=dcp.FileSystemWriter(str(base)))
        _TEMPLATES[(with_optimizer, step, record, shift)] = base
    return _TEMPLATES[(with_optimizer, step, record, shift)]


def _recorded_step(run: "_Run", it: int) -> float | None:
    s = run.s
    if s.optimizer_steps == "absent":
        return None
    k = run.facts.get("restored")
    after = k is not None and it > k and "last_before_fault" in run.facts and s.fault != "none"
    if not after or s.optimizer_steps == "continued":
        return float(it)
    if s.optimizer_steps == "ahead":
        return float((it - k) * 16)
    return float(it - k)


def _write_checkpoints(run: _Run) -> None:
    s = run.s
    run.ckpt.mkdir(exist_ok=True)
    committed = [it for it, ok in run.saves.items() if ok and it not in run.np_saves]
    np_committed = [it for it, ok in run.saves.items() if ok and it in run.np_saves]
    if run.np_saves:
        run.np_ckpt.mkdir(exist_ok=True)
    if np_committed:
        (run.np_ckpt / "latest_checkpointed_iteration.txt").write_text(str(max(np_committed)))
    for it in sorted(run.saves):
        d = (run.np_ckpt if it in run.np_saves else run.ckpt) / f"iter_{it:07d}"
        if d.exists():
            shutil.rmtree(d)
        k = run.facts.get("restored")
        shift = 1.0 if s.diverged_after_restore and k is not None and it > k and "last_before_fault" in run.facts else 0.0
        shutil.copytree(_template(s.optimizer_in_checkpoints, _recorded_step(run, it), s.optimizer_record, shift), d)
        if run.saves[it] and it not in s.uncommitted:
            (d / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1}))
    if committed:
        (run.ckpt / "latest_checkpointed_iteration.txt").write_text(str(max(committed)))


def replan(run_dir: Path, fault: str) -> None:
    """Re-label a built run's run.json as planned for another kind of fault: spec.fault and every
    fault of its contract (what the run promised), as a run planned that way records them."""
    record = json.loads((run_dir / "run.json").read_text())
    record["spec"]["fault"] = fault
    for planned in record.get("contract", {}).get("faults", []):
        planned["kind"] = fault
    (run_dir / "run.json").write_text(json.dumps(record, indent=2) + "\n")


def expected_metrics(built: Built) -> dict[str, float | int | None]:
    """The latency split the metrics must reproduce, from the scenario's true times."""
    t = built.times
    def span(a: str, b: str) -> float | None:
        return round(t[b] - t[a], 3) if a in t and b in t else None
    lost = None
    if "last_before_fault" in built.facts and "restored" in built.facts:
        lost = built.facts["last_before_fault"] - built.facts["restored"]
    return {
        "detection_s": span("injected_at", "detected_at"),
        "restart_s": span("detected_at", "workers_started_at"),
        "restore_s": span("workers_started_at", "checkpoint_loaded_at"),
        "first_step_s": span("checkpoint_loaded_at", "first_step_at"),
        "failure_to_first_step_s": span("injected_at", "first_step_at"),
        "lost_iterations": lost,
    }


__all__ = ["Built", "Scenario", "build", "expected_metrics", "replan", "replay_without_monitor_timeouts"]


# ---------------------------------------------------------------- a real run directory, replayed


def replay_without_monitor_timeouts(run_dir: Path, into: Path) -> int:
    """A copy of a real run directory at `into` with every rank-monitor timeout line (section and
    out-of-section) removed from its logs, for a test that a detection the criteria demand is not
    inferred from what is left; the number of lines removed."""
    shutil.copytree(run_dir, into, symlinks=True)
    cut = 0
    for log in (into / "logs").glob("*.log"):
        lines = log.read_text(errors="replace").splitlines(keepends=True)
        kept = [line for line in lines if "has been open for" not in line and "out-of-section" not in line.lower()]
        cut += len(lines) - len(kept)
        log.write_text("".join(kept))
    return cut
