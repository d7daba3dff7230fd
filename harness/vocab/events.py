"""Typed events of one run's history and the Timeline that orders them.

Every event is a frozen dataclass that carries where it was read (`Src`: a path relative
to the run directory, a 1-based line number and the line itself, clipped) and the time
stamp written on that line. Launcher-log prefixes and Megatron stamps are the *local* time
of the node that wrote them; NVRx 0.7.0 profiling events, cycle_info files and the
injection marker are UTC. Events keep the stamp as written (`ts`, `ts_utc`) and the
Timeline converts with the run's UTC offset (`Timeline.utc`), which is only known once
every source has been read.

Produced by harness.read.history, consumed by harness.judge.criteria and harness.judge.metrics; nothing here
reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, TypeVar

from harness.vocab.faults import DEFAULT_FAULT_AT, PlannedFault
from harness.vocab.layout import TRACKER_NAME

EVIDENCE_TEXT_MAX = 240

E = TypeVar("E", bound="Event")


def clip(text: str, limit: int = EVIDENCE_TEXT_MAX) -> str:
    """One evidence line: no line breaks, long lines cut with a visible ellipsis."""
    text = text.replace("\r", "").replace("\n", " ").rstrip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Times read from a run directory outside these years are damage or forgery, never a moment of
# a training run: they are read as "no time" (and a marker's becomes a failed criterion).
PLAUSIBLE_YEARS = (2000, 2199)
_PLAUSIBLE_SPAN = (946684800.0, 7258118400.0)  # 2000-01-01 .. 2200-01-01 UTC


def plausible_time(ts: float | None) -> bool:
    return ts is not None and _PLAUSIBLE_SPAN[0] <= ts < _PLAUSIBLE_SPAN[1]


def iso_utc(ts: float | None) -> str | None:
    """UTC ISO-8601 with milliseconds and a Z (the harness's stamp format); None for no time
    or one no clock can show."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (ValueError, OverflowError, OSError):
        return None


@dataclass(frozen=True)
class Src:
    """Where a fact was read: `path:line: text`, path relative to the run directory.

    Line 0 marks a file-level fact (a file that exists or is missing, a JSON record)."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


# ---------------------------------------------------------------- base classes


@dataclass(frozen=True, kw_only=True)
class Event:
    src: Src
    ts: float | None = None  # seconds since the epoch, as written (see ts_utc)
    ts_utc: bool = False  # True: ts is UTC; False: local time of the writing node


@dataclass(frozen=True, kw_only=True)
class AppEvent(Event):
    """A line of the training application (Megatron or the reference workload)."""

    rank: int | None = None  # the rank prefix of the line, when it had one


@dataclass(frozen=True, kw_only=True)
class LauncherEvent(Event):
    """A line of ft_launcher or its rank monitors; `cycle` is the launcher cycle (restart
    count) the line speaks about, as far as the launcher log tells."""

    cycle: int | None = None


# ---------------------------------------------------------------- application events


@dataclass(frozen=True)
class ArgLine:
    name: str
    value: str
    line: int


@dataclass(frozen=True, kw_only=True)
class ArgumentsPrinted(AppEvent):
    """Megatron's sorted `arguments` table, printed by rank 0 at every start."""

    args: tuple[ArgLine, ...]

    def get(self, name: str) -> str | None:
        for arg in self.args:
            if arg.name == name:
                return arg.value
        return None

    def src_of(self, name: str) -> Src | None:
        for arg in self.args:
            if arg.name == name:
                return Src(self.src.path, arg.line, clip(f"  {arg.name} {'.' * max(0, 48 - len(arg.name))} {arg.value}"))
        return None

    def flag(self, name: str) -> bool | None:
        value = self.get(name)
        if value is None:
            return None
        return value.strip() == "True"

    def integer(self, name: str) -> int | None:
        value = self.get(name)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


@dataclass(frozen=True, kw_only=True)
class SettingShown(AppEvent):
    """A training setting the application printed outside Megatron's arguments table:
    megatron-core's own `Setting up optimizer with config OptimizerConfig(...
    use_distributed_optimizer=X ...)` (Megatron-LM and Megatron-Bridge alike), and the lines of
    Megatron-Bridge's `Configuration Summary (Non-Default Values vs Megatron Core)`, which names
    a setting only where it differs from megatron-core's default (`  hidden_dropout: 0.0  (Mcore
    default: 0.1)`). `AppStart.setting` asks the arguments table first, then these."""

    name: str
    value: str


@dataclass(frozen=True, kw_only=True)
class WorkersInitialized(AppEvent):
    """`FT: initialized. Timeouts=...`: once per worker-group (re)start, rank 0."""


@dataclass(frozen=True, kw_only=True)
class SaveStarted(AppEvent):
    iteration: int
    path: str


@dataclass(frozen=True, kw_only=True)
class SaveScheduled(AppEvent):
    iteration: int
    path: str


@dataclass(frozen=True, kw_only=True)
class SaveCommitted(AppEvent):
    """`successfully saved checkpoint from iteration N`: printed after the tracker write."""

    iteration: int
    path: str


@dataclass(frozen=True, kw_only=True)
class SaveTimed(AppEvent):
    """megatron-core's timer report of one blocking save, printed by the last rank after it
    (`    save-checkpoint ....: (min, max)` in milliseconds across ranks, under `(min, max) time
    across ranks (ms):`; `save-checkpoint ....: max` with --timing-log-option max): `seconds`
    is the slowest rank's, the time every rank's training loop was held (the timer starts and
    stops at a barrier). Megatron-LM and Megatron-Bridge both print it; it times the saves of
    a dialect whose save lines carry no stamp (Megatron-Bridge's)."""

    seconds: float


@dataclass(frozen=True, kw_only=True)
class SaveOverwrite(AppEvent):
    """`Overwriting old incomplete / corrupted checkpoint...`."""


@dataclass(frozen=True, kw_only=True)
class NoSpaceLeft(AppEvent):
    """`No space left on device` (ENOSPC, errno 28) in a line of the application: a write of a
    save met a full filesystem (torch DCP's `.metadata`, a shard, Megatron's tracker)."""


@dataclass(frozen=True, kw_only=True)
class LoadStarted(AppEvent):
    iteration: int
    path: str


@dataclass(frozen=True, kw_only=True)
class NonPersistentLoadStarted(LoadStarted):
    """`Loading from a non-persistent checkpoint (non-persistent iter N)`: Megatron (with
    --non-persistent-ckpt-type global) loads its non-persistent checkpoint, at least as new as
    the persistent one, instead of printing `loading distributed checkpoint from ...`
    (harness.vocab.tiers; `path` is the tier's directory name, the line names none)."""


@dataclass(frozen=True, kw_only=True)
class NonPersistentOlder(AppEvent):
    """`WARNING: non-persistent checkpoints are older than persistent checkpoint` (harness.vocab.tiers)."""


# ---- Megatron's local checkpoints and NVRx's LocalCheckpointManager (harness.vocab.tiers)


@dataclass(frozen=True, kw_only=True)
class LocalSaveCommitted(AppEvent):
    """Megatron's `successfully saved local checkpoint from iteration N` (rank 0, after NVRx's
    finalize validated the save: checkpointing.py's iter_finalize_fn)."""

    iteration: int


@dataclass(frozen=True, kw_only=True)
class LocalSaveValidated(AppEvent):
    """NVRx's `Successfully saved local checkpoint from iteration N` (every rank: the manager's
    finalize found the iteration complete across the ranks, base_manager.py)."""

    iteration: int


@dataclass(frozen=True, kw_only=True)
class LocalSaveFailed(AppEvent):
    """NVRx's `Failure during saving local checkpoint from iteration N (last valid iteration is M)`."""

    iteration: int
    last_valid: int | None = None


@dataclass(frozen=True, kw_only=True)
class LocalCopyWritten(AppEvent):
    """NVRx's `Renaming <dirty> to <dir>/iter_N_R_local.pt` (local_manager.py): the line's rank
    holds rank `owner`'s shard of iteration N in its node-local directory (a replica when the
    two differ)."""

    iteration: int
    owner: int
    path: str


@dataclass(frozen=True, kw_only=True)
class LocalCopyRead(AppEvent):
    """NVRx's `Finish loading (N, R, '<session>')` (DEBUG, base_manager.py `_load_fn`): the
    line's rank read rank R's shard of iteration N from its own local directory, to keep it
    (R is itself) or to send it to R (the replication strategy's retrieve plan)."""

    iteration: int
    owner: int


@dataclass(frozen=True, kw_only=True)
class LocalCopyMissing(AppEvent):
    """NVRx's `File <dir>/iter_N_R_local.pt does not exist!` or `No replicated copies for
    id=(N, R, ...) found!`: a shard the load needed was nowhere to read."""

    iteration: int
    owner: int
    path: str | None = None


# ---- NVRx's in-process restart (inprocess.Wrapper, wrap.py; harness.vocab.tiers)


@dataclass(frozen=True, kw_only=True)
class InprocessEvent(AppEvent):
    """One of the Wrapper's own lines, `[<UTC stamp>] rank=R <name>: <exception>`
    (inprocess/utils.py log_exc): `name` is fn_ex (the wrapped function raised), term_ex (the
    rank must restart), restart_ex (HealthCheckPassed: the restart goes ahead in the same
    process), finalize_ex, health_ex, exit_ex (the wrapper gives up), ...; `wrapped_rank` is
    the rank it names."""

    name: str
    wrapped_rank: int | None
    text: str


@dataclass(frozen=True, kw_only=True)
class OptimizerLoaded(AppEvent):
    """`Loading distributed optimizer sharded state of type ...`: once per real optimizer load."""

    kind: str


@dataclass(frozen=True, kw_only=True)
class SchedulerValueLoaded(AppEvent):
    """`> using checkpoint value X for NAME` of the LR scheduler."""

    name: str


@dataclass(frozen=True, kw_only=True)
class CheckpointLoaded(AppEvent):
    iteration: int
    path: str


@dataclass(frozen=True, kw_only=True)
class StartedFromRandom(AppEvent):
    """`could not find the metadata file ... will start from random`."""


@dataclass(frozen=True, kw_only=True)
class ModelBuilt(AppEvent):
    """`[after model, optimizer, and learning rate scheduler are built] datetime: ...`:
    the first stamped line after a load (microseconds since Megatron 0.19, whole seconds before)."""


@dataclass(frozen=True, kw_only=True)
class DataloadersBuilt(AppEvent):
    """`[after dataloaders are built] datetime: ...`: printed after the model-built line by
    Megatron-LM and Megatron-Bridge alike; Megatron-Bridge's first stamped line after its
    checkpoint load, which it does after the model-built line (AppStart.restored)."""


@dataclass(frozen=True, kw_only=True)
class Iteration(AppEvent):
    """One iteration line (a committed optimizer step), printed by the last rank."""

    iteration: int
    train_iters: int
    consumed_samples: int | None = None
    lm_loss: float | None = None
    skipped: int | None = None
    nan: int | None = None


@dataclass(frozen=True, kw_only=True)
class TrainingDone(AppEvent):
    """`[after training is done] datetime: ...`."""


@dataclass(frozen=True, kw_only=True)
class NemesisInjected(AppEvent):
    """The injector's own line `[nemesis] rank R injecting SIG after checkpoint iteration N`."""

    target_rank: int
    signal: str
    iteration: int


@dataclass(frozen=True, kw_only=True)
class NemesisNeverFired(AppEvent):
    """`nemesis: requested fault F on rank R never happened: reason`."""

    reason: str


@dataclass(frozen=True, kw_only=True)
class LauncherImported(AppEvent):
    """The nemesis's `[nemesis] rank R launcher identity: nvidia_resiliency_ext V sha256 H files N
    at PATH` (harness.nemesis.identity): the NVRx a node's first worker finds on its own sys.path.
    `found` False: `... not found (why)`; None: `... unknown (why)` (looking for it failed)."""

    worker_rank: int
    found: bool | None
    version: str | None = None
    sha256: str | None = None
    files: int | None = None
    path: str | None = None
    why: str | None = None


# ---------------------------------------------------------------- launcher events

# 0.7.0 profiling events that belong to the start of the cycle they name.
CYCLE_START_EVENTS = frozenset(
    {"rendezvous_started", "health_check_completed", "rendezvous_completed", "worker_start_started", "worker_start_completed"}
)


@dataclass(frozen=True, kw_only=True)
class ProfilingEvent(LauncherEvent):
    """NVRx >= 0.6 `Cycle: N Event: NAME Node: ... Rank: ... Time: ... UTC` (ts is UTC).

    NVRx numbers `failure_detected` and `worker_terminated` with the *next* cycle: they are
    about the workers of `cycle - 1` (see `subject_cycle`)."""

    name: str
    node: str

    @property
    def subject_cycle(self) -> int | None:
        if self.cycle is None:
            return None
        return self.cycle - 1 if self.name in ("failure_detected", "worker_terminated") else self.cycle


@dataclass(frozen=True, kw_only=True)
class RendezvousJoined(LauncherEvent):
    """`has joined round N of the rendezvous` (0.4.1) / `has joined the rendezvous` (0.7.0: no round)."""

    round: int | None
    node: str | None = None  # NVRx's node id, `<host>_<launcher pid>_<n>` (0.7.0)
    world: int | None = None  # the world of nodes the line names (`in a world of size N`), when it does


@dataclass(frozen=True, kw_only=True)
class WorkerFailed(LauncherEvent):
    """`failed (exitcode: -9) local_rank: 1 (pid: 123)`."""

    exitcode: int
    local_rank: int
    pid: int


@dataclass(frozen=True, kw_only=True)
class WorkerGroupFailed(LauncherEvent):
    """`Worker group UNHEALTHY|FAILED. 2/2 attempts left; will restart worker group`."""

    state: str
    attempts_left: int | None
    max_restarts: int | None


@dataclass(frozen=True, kw_only=True)
class RankTimeout(LauncherEvent):
    """A rank monitor's timeout: `section` (Section 'step' has been open ...),
    `out_of_section` (Was out of section ...) or `heartbeat` (Did not get ... heartbeat).

    0.4.1 names the monitored *global* rank (`RankMonServer<pid>@host:<rank>`); 0.7.0
    names the monitor's local rank (`[workload:?(<local rank>) ...]`) and the node."""

    kind: str
    section: str | None
    rank: int | None
    local_rank: int | None
    node: str | None
    elapsed: float | None
    timeout: float | None


@dataclass(frozen=True, kw_only=True)
class FtTimeoutElapsed(LauncherEvent):
    """0.4.1 `FT timeout elapsed.` right after a timeout message."""

    rank: int | None


@dataclass(frozen=True, kw_only=True)
class WorkerGroupSucceeded(LauncherEvent):
    """`[default] worker group successfully finished.`"""


@dataclass(frozen=True, kw_only=True)
class LauncherSucceeded(LauncherEvent):
    """`Agent .run() is OK. No failures in the result.`"""


@dataclass(frozen=True, kw_only=True)
class LauncherExit(LauncherEvent):
    """`Agent exits with exit code = N` / `... Agent's exit code = N`."""

    code: int


@dataclass(frozen=True, kw_only=True)
class LauncherFailed(LauncherEvent):
    """The agent ended in failure (`Agent .run() raised ...`, `Some rank(s) exited with
    non-zero exit code`, a terminal worker-group failure, ...)."""

    message: str


@dataclass(frozen=True, kw_only=True)
class NoProgressStop(LauncherEvent):
    """NVRx >= 0.6 progress tracker stopped the job (no progress across restarts)."""

    message: str


@dataclass(frozen=True, kw_only=True)
class RestartsExhausted(LauncherEvent):
    """`0/N restart attempts left. Exiting...` (min-healthy policy)."""


# ---------------------------------------------------------------- records of other files


# ---------------------------------------------------------------- failure lines (triage's)
# Lines history's rule table (history.RULES) reads for triage only: a Timeline keeps none of
# them; diagnose folds over them with the launcher events (harness.judge.triage.scan).


@dataclass(frozen=True, kw_only=True)
class DiagnosticEvent(Event):
    """A failure or configuration line only triage folds over."""


@dataclass(frozen=True, kw_only=True)
class TracebackStarted(DiagnosticEvent):
    """`Traceback (most recent call last):` ending a line: a Python traceback opens (triage
    reassembles its frames and exception lines, per writing process)."""


@dataclass(frozen=True, kw_only=True)
class CollectiveFailed(DiagnosticEvent):
    """An NCCL error line (watchdog timeout, communicator aborted, ncclXxxError, c10::DistBackendError);
    `weak`: only an `NCCL WARN`."""

    what: str
    weak: bool = False
    named_rank: int | None = None  # the `[Rank N]` the line names


@dataclass(frozen=True, kw_only=True)
class TaskExited(DiagnosticEvent):
    """`srun: error: <host>: task(s) <ids>: Exited with exit code N` (or Killed, Terminated, ...)."""

    host: str
    tasks: str
    status: str
    exitcode: int | None


@dataclass(frozen=True, kw_only=True)
class HostOomKilled(DiagnosticEvent):
    """`slurmstepd: error: Detected N oom-kill event(s)`: the kernel's OOM killer, not CUDA."""


@dataclass(frozen=True, kw_only=True)
class StepCancelled(DiagnosticEvent):
    """`slurmstepd: error: *** STEP|JOB <id> ON <host> CANCELLED AT <time> [DUE TO <reason>]`."""

    reason: str | None


@dataclass(frozen=True, kw_only=True)
class MemoryReport(DiagnosticEvent):
    """Megatron's `[Rank N] (after K iterations) memory (MB) | allocated: ... | max allocated: ...`,
    or Megatron-Bridge's `memory (GB) | ... | mem-max-allocated-gigabytes: ...` (`unit`)."""

    rank: int
    iterations: str
    max_allocated: str
    max_reserved: str | None
    unit: str = "MB"


@dataclass(frozen=True, kw_only=True)
class FailureSign(DiagnosticEvent):
    """A launcher line that says some worker failed (`Worker group FAILED`, `ChildFailedError`,
    a non-zero agent exit code): proof that the run failed, whoever failed."""


@dataclass(frozen=True, kw_only=True)
class ConfigValue(DiagnosticEvent):
    """One value of the job's shape: a row of Megatron's arguments table (`  seq_length ... 4096`)
    or its `using world size: N, data-parallel size: ...` line."""

    name: str
    value: int


@dataclass(frozen=True, kw_only=True)
class CycleInfo(Event):
    """One `cycle_infos/cycle_info.<job>.<attempt>.<cycle>` record (times UTC)."""

    cycle: int
    attempt: int | None
    ended: float | None
    log_file: str | None
    active_ranks: str | None
    active_nodes: str | None = None  # a Slurm-style host list, e.g. "n[1,3]"
    standby_nodes: str | None = None


@dataclass(frozen=True, kw_only=True)
class Injection(Event):
    """The injection marker `fault_injected.json` (injected_at is UTC)."""

    fault: str
    signal: str | None
    rank: int | None
    local_rank: int | None
    cycle: int | None
    iteration: int | None
    baseline_iteration: int | None
    host: str | None
    pid: int | None
    launcher_pid: int | None = None  # node fault: the lost node's launcher
    fault_at: str = DEFAULT_FAULT_AT  # the moment (harness.plan.spec.FAULT_MOMENTS); absent in a marker: after-commit
    fault_index: int = 1  # which planned fault (fault_injected.json: 1, fault_injected.<n>.json: n)
    committed_iteration: int | None = None  # in-save: the committed checkpoint; `iteration` was in flight
    poisoned: str | None = None  # poison: the file the nemesis truncated
    problem: str | None = None  # a value of the marker that cannot be true (an impossible time, ...)


# ---------------------------------------------------------------- non-event state


@dataclass(frozen=True)
class OptimizerRecord:
    """The optimizer's own record in one checkpoint, read offline (harness.read.optimizer_record):
    Adam's step counters (read from `key`, the DCP object or file, at `step_field`; () when the
    checkpoint keeps none: `common_read` names the common state read without finding one) and
    the slots (buckets or parameters) holding optimizer state. `note` says why it could not be
    read (then steps is None)."""

    key: str | None = None
    steps: tuple[float, ...] | None = None
    moment_slots: int = 0
    missing_moments: tuple[str, ...] = ()  # slots lacking exp_avg or exp_avg_sq (the first few)
    missing_count: int = 0
    note: str | None = None
    step_field: str = "param_groups[*].step"
    common_read: str | None = None


# The classes of checkpoint tensors state_equivalence names (harness.read.end_state.tensor_class).
TENSOR_CLASSES = ("model", "optimizer.param", "optimizer.exp_avg", "optimizer.exp_avg_sq", "optimizer.other")


@dataclass(frozen=True)
class TensorDiff:
    """One tensor item whose bytes differ between a run's final checkpoint and its baseline's."""

    key: str  # the DCP key, with the chunk's offsets when the tensor is stored in several chunks
    tensor_class: str  # one of TENSOR_CLASSES
    dtype: str
    numel: int
    max_abs_diff: float  # nan when a value is NaN on one side only
    within_tolerance: bool  # every element within its class's tolerance (harness.read.end_state.TOLERANCES)


@dataclass(frozen=True)
class StateComparison:
    """A run's final committed checkpoint against the baseline's checkpoint of the same
    iteration, tensor by tensor (harness.read.end_state). `iteration` None: the run committed no
    checkpoint. `note`: why the two could not be compared (then nothing else is known)."""

    checkpoint: str | None  # this run's iteration directory, as shown in evidence
    baseline_checkpoint: str | None  # the baseline's, prefixed with the baseline's directory name
    iteration: int | None
    tolerances: tuple[tuple[str, float, float], ...] = ()  # (class, rtol, atol) for a non-deterministic run
    compared: tuple[tuple[str, int], ...] = ()  # tensor items compared, per class
    differing: tuple[TensorDiff, ...] = ()  # the first few whose bytes differ, classes then keys in order
    differing_count: int = 0
    outside_tolerance_count: int = 0
    max_abs_diff: tuple[tuple[str, float], ...] = ()  # per class, over the differing items
    missing: tuple[str, ...] = ()  # tensors only one side holds (the first few)
    missing_count: int = 0
    not_compared: tuple[str, ...] = ()  # pickled objects (DCP bytes items), never unpickled (the first few)
    not_compared_count: int = 0
    note: str | None = None

    @property
    def compared_count(self) -> int:
        return sum(n for _, n in self.compared)


@dataclass(frozen=True)
class CheckpointOnDisk:
    """One `iter_%07d` directory. `committed`: dist-checkpointing's commit marker
    `metadata.json` is present. Optimizer keys come from the DCP `.metadata` (only for the
    iterations that matter; None when not inspected)."""

    iteration: int
    rel: str
    committed: bool
    has_dcp_metadata: bool
    optimizer_keys: int | None = None
    total_keys: int | None = None
    sample_key: str | None = None
    inspect_note: str | None = None
    optimizer_record: OptimizerRecord | None = None  # only for the iterations the optimizer checks need

    def record_src(self) -> Src:
        rec = self.optimizer_record
        if rec is None or rec.steps is None:
            why = (rec.note if rec is not None else None) or self.inspect_note or "not read"
            return Src(f"{self.rel}/.metadata", 0, f"optimizer record not read: {why}")
        if rec.key is None or not rec.steps:
            where = f"{self.rel}/{rec.common_read}" if rec.common_read else f"{self.rel}/.metadata"
            return Src(where, 0, f"no optimizer step counter recorded; {rec.moment_slots} optimizer state slots")
        shown = ", ".join(f"{s:g}" for s in rec.steps)
        return Src(f"{self.rel}/{rec.key}", 0, f"{rec.step_field} = [{shown}]")

    def commit_src(self) -> Src:
        if self.committed:
            return Src(f"{self.rel}/metadata.json", 0, "present: the save was committed")
        return Src(f"{self.rel}/metadata.json", 0, "missing: the save was never committed")

    def keys_src(self) -> Src:
        if self.optimizer_keys is None:
            return Src(f"{self.rel}/.metadata", 0, f"not inspected: {self.inspect_note or 'unknown reason'}")
        sample = f" (e.g. {self.sample_key})" if self.sample_key else ""
        return Src(f"{self.rel}/.metadata", 0, f"{self.optimizer_keys} optimizer keys{sample} of {self.total_keys} keys")


@dataclass(frozen=True)
class CheckpointState:
    """The checkpoint directory as found when the history was read."""

    path: str | None  # as shown in evidence (relative to the run dir when inside it)
    how: str  # how it was found (run.json, <run>/checkpoints, the arguments table)
    exists: bool
    tracker: str | None  # the tracker's text, stripped; None when absent
    iterations: tuple[CheckpointOnDisk, ...] = ()  # every tier's iter_* (harness.vocab.tiers: non_persistent/ too)
    non_persistent_tracker: str | None = None  # the non-persistent tier's tracker text; None when absent
    non_persistent_path: str | None = None  # that tier's directory as shown (<path>/non_persistent or a custom one)

    def get(self, iteration: int) -> CheckpointOnDisk | None:
        for ckpt in self.iterations:
            if ckpt.iteration == iteration:
                return ckpt
        return None

    def tracker_src(self) -> Src:
        return Src(f"{self.path}/{TRACKER_NAME}", 0, self.tracker if self.tracker is not None else "missing")


@dataclass(frozen=True)
class PlannedLauncher:
    """The launcher a run promised (run.json's contract.launcher): NVRx's package directory as the
    plan's search path finds it, its version and the digest of its files (harness.nemesis.identity);
    path and sha256 None when the plan could not see the install (a declared version, a batch
    script for another machine)."""

    version: str
    path: str | None = None
    sha256: str | None = None
    files: int | None = None


@dataclass(frozen=True)
class PlannedBaseline:
    """The baseline a run promised to be judged against (run.json's contract.baseline): how it
    came (`ran`: the automatic twin; `reused`: found by its configuration hash; `given`:
    --baseline RUN_DIR; `none`: not judged, `why` says why), its run ID (looked up beside the
    run, in the same runs/ folder), its configuration hash, the digest of its checkpoints when
    the run was judged against it (names, kinds, sizes, times: harness.read.evidence), and `problem`
    when it was unusable already then (the twin did not qualify)."""

    how: str
    run_id: str | None = None
    config_hash: str | None = None
    checkpoints_method: str | None = None
    checkpoints_entries: int | None = None
    checkpoints_bytes: int | None = None
    checkpoints_sha256: str | None = None
    checkpoints_sizes_sha256: str | None = None
    why: str | None = None
    problem: str | None = None

    @property
    def has_digest(self) -> bool:
        return None not in (self.checkpoints_method, self.checkpoints_entries, self.checkpoints_bytes,
                            self.checkpoints_sha256, self.checkpoints_sizes_sha256)


@dataclass(frozen=True)
class Contract:
    """What a run promised, recorded once before its launch (run.json's `contract`, version 1;
    docs/contracts.md): every planned fault in marker order (RunConfig.schedule holds them), the
    tier each after-commit fault waits on, the launcher, the baseline, the checkpoint tiers
    (name, value pairs) and the shape (nodes, ranks, parallel sizes, hot spares)."""

    version: int
    fault_after: str | None = None
    launcher: PlannedLauncher | None = None
    baseline: PlannedBaseline | None = None
    tiers: tuple[tuple[str, str | int | None], ...] = ()
    shape: tuple[tuple[str, int | None], ...] = ()


@dataclass(frozen=True)
class RunConfig:
    """What the run was meant to do: run.json's spec, else Megatron's arguments table."""

    requested_fault: str | None = None
    workload: str | None = None  # run.json's spec.workload (reference, megatron-cpu, megatron); None: not recorded
    config_hash: str | None = None  # run.json's configuration hash (harness.launch.baseline); None: not recorded
    fault_rank: int | None = None
    fault_at: str | None = None  # run.json's moment; None: not recorded (after-commit, or see the markers)
    # run.json's spec.schedule: every planned fault (kind, rank, moment) in marker order; () when not
    # recorded (a run before campaigns: its fault, rank and moment say it); a campaign's seed
    schedule: tuple[PlannedFault, ...] = ()
    seed: int | None = None
    max_restarts: int | None = None
    max_no_progress_cycles: int | None = None
    train_iters: int | None = None
    train_iters_src: str | None = None  # evidence line (`file:line: text`) of where it was read
    save_interval: int | None = None
    save_interval_src: str | None = None
    nvrx_version: str | None = None
    utc_offset_s: int | None = None
    extra_args: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()
    dry_run: bool = False
    has_run_json: bool = False
    # The ft_launcher deadlines run.json declares: (name, seconds) for setup, step, checkpointing,
    # out_of_section and check_interval, and the profile they came from.
    deadline_profile: str | None = None
    deadlines: tuple[tuple[str, float], ...] = ()
    # What triage needs of the plan: the nodes, run.json's parallel layout and batch
    # (spec keys of RUN_SHAPE_KEYS with their whole-number values) and when the run was created.
    nnodes: int | None = None
    min_nnodes: int | None = None  # --nnodes MIN:MAX of an elastic launcher: the job may shrink to MIN nodes
    shape: tuple[tuple[str, int], ...] = ()
    created_at: float | None = None  # UTC epoch seconds
    # What the known-defect table (harness.judge.findings) matches on besides the workload: the
    # Megatron version the plan found, and the optimizer configuration (None: not recorded).
    megatron_version: str | None = None
    distributed_optimizer: bool | None = None
    transformer_engine: bool | None = None
    apex: bool | None = None
    # run.json's contract (what the run promised); None: a run directory from before contracts, or
    # a user's own script
    contract: Contract | None = None


RUN_SHAPE_KEYS = ("micro_batch_size", "global_batch_size", "global_batch_size_effective", "seq_length", "tp", "pp",
                  "cp", "dp", "world", "num_attention_heads", "num_layers")


@dataclass(frozen=True)
class LaunchRecord:
    """`launch.json`, written by the harness after the launcher ended."""

    exit_code: int | None
    started_at: float | None
    ended_at: float | None
    stopped_early: str | None
    nvrx_version: str | None
    src: Src
    # (last stamp before, first stamp after, seconds): the harness's wall clock jumped against
    # its monotonic clock between those two stamps (UTC epoch seconds)
    clock_jumps: tuple[tuple[float, float, float], ...] = ()
    # when the harness decided to stop the job (UTC epoch seconds): launcher lines after it are
    # the launcher's answer to that stop, not its own detection
    stopped_at: float | None = None


@dataclass(frozen=True)
class SourceFile:
    """A log file read, with the roles it served (app, launcher) and the bytes read."""

    rel: str
    kind: str  # cycle | launcher | console | other
    bytes_read: int
    roles: tuple[str, ...]


@dataclass(frozen=True)
class AppStart:
    """One start of the training application (a worker-group start): the events of one
    per-cycle log, or of one section of a single log cut at its starts.

    Iteration lines are summarised (first, last, and any with skipped or NaN steps) and
    save lines bounded (each kind's first few, last few and an even selection between:
    harness.read.history.SAVES_HEAD), so that memory stays bounded whatever the length of the
    run and the number of its checkpoints; `saves_committed` counts them all. Every other
    event kind that may repeat is kept the same way (harness.read.history.EVENTS_HEAD)."""

    index: int
    cycle: int | None
    source: str
    events: tuple[AppEvent, ...]
    first_iteration: Iteration | None = None
    last_iteration: Iteration | None = None
    bad_iterations: tuple[Iteration, ...] = ()
    saves_committed: int = 0  # every 'successfully saved checkpoint' line of this start

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def first(self, kind: type[E]) -> E | None:
        for e in self.events:
            if isinstance(e, kind):
                return e
        return None

    @property
    def arguments(self) -> ArgumentsPrinted | None:
        return self.first(ArgumentsPrinted)

    def setting(self, name: str) -> tuple[str, Src] | None:
        """A training setting this start printed, as printed, and where: Megatron's arguments
        table, else the first other line that names it (SettingShown: megatron-core's optimizer
        configuration, Megatron-Bridge's configuration summary); None: not shown."""
        args = self.arguments
        value = args.get(name) if args is not None else None
        if args is not None and value is not None:
            src = args.src_of(name)
            return value, src if src is not None else args.src
        shown = next((e for e in self.events if isinstance(e, SettingShown) and e.name == name), None)
        return (shown.value, shown.src) if shown is not None else None

    def flag(self, name: str) -> tuple[bool, Src] | None:
        """A True/False setting (`setting`), or None when not shown or not a boolean."""
        found = self.setting(name)
        if found is None or found[0].strip() not in ("True", "False"):
            return None
        return found[0].strip() == "True", found[1]

    @property
    def restored(self) -> AppEvent | None:
        """The stamp that times this start's checkpoint load: the first model-built or
        dataloaders-built line after `successfully loaded checkpoint` (Megatron-LM prints the
        model-built line after its load, Megatron-Bridge before it, then its dataloaders-built
        line); None without a finished load or a stamped line after it."""
        loaded = self.first(CheckpointLoaded)
        if loaded is None:
            return None
        return next((e for e in self.events if isinstance(e, (ModelBuilt, DataloadersBuilt))
                     and e.src.line > loaded.src.line), None)

    def load_block(self) -> list[AppEvent]:
        """The events of this start's checkpoint load: from `loading distributed checkpoint`
        to `successfully loaded checkpoint` (or to the first iteration when the latter is missing)."""
        block: list[AppEvent] = []
        inside = False
        for e in self.events:
            if isinstance(e, LoadStarted):
                inside = True
            if inside:
                block.append(e)
                if isinstance(e, (CheckpointLoaded, Iteration, ModelBuilt)):
                    break
        return block


@dataclass(frozen=True)
class LossLine:
    """The `lm loss` one iteration line printed, as printed (comparing the printed value is
    comparing what the run reported), and where (loss_continuity's evidence)."""

    loss: str
    src: Src


@dataclass(frozen=True)
class ProgressPoint:
    """One sampled iteration line of a start: the iteration and its UTC time (the timeline
    picture's curve; history.RunRead.progress)."""

    iteration: int
    t: float


@dataclass(frozen=True)
class Timeline:
    """Everything verify knows about one run, read once from its directory."""

    run_dir: Path
    events: tuple[Event, ...]  # every event, ordered (by UTC time where known, then source order)
    starts: tuple[AppStart, ...]
    checkpoints: CheckpointState | None
    run: RunConfig
    launch: LaunchRecord | None
    injections: tuple[Injection, ...]
    cycle_infos: tuple[CycleInfo, ...]
    utc_offset_s: int
    offset_how: str
    launcher_dialect: str | None  # "0.4.1" | "0.7.0" (0.6+ format) | None: no launcher lines
    sources: tuple[SourceFile, ...]
    notes: tuple[str, ...] = field(default=())

    def utc(self, event: Event | None) -> float | None:
        """The event's time as UTC seconds since the epoch, or None when it carries none."""
        if event is None or event.ts is None:
            return None
        return event.ts if event.ts_utc else event.ts - self.utc_offset_s

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def launcher_events(self) -> Iterator[LauncherEvent]:
        return (e for e in self.events if isinstance(e, LauncherEvent))

    def has_role(self, role: str) -> bool:
        return any(role in s.roles for s in self.sources)

    @property
    def bytes_read(self) -> int:
        return sum(s.bytes_read for s in self.sources)
