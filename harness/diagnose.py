"""Cross-rank failure triage: which rank failed first, and why.

The Slurm guide's "Diagnostic des défaillances" in code: scan every rank's output, not
only rank 0's; the first non-NCCL Python traceback is the root cause and the NCCL
timeouts that follow on the other ranks are downstream symptoms. Classify quickly:

    oom        CUDA out of memory: rank, phase (forward/backward/optimizer), batch, sequence
               length, TP/PP/CP/DP and the memory numbers, recorded before anything is changed
    shape      shape / divisibility errors: WORLD_SIZE = TP x DP x CP x PP, heads % TP == 0
    import     wrong worktree, missing `uv sync`, stale PYTHONPATH
    nccl       a collective failed and no rank left a non-NCCL traceback: allocation, port
               reachability, MASTER_ADDR resolution, identical commands on every rank
    traceback  any other first non-NCCL traceback
    exit       a rank died without a traceback (a signal such as SIGKILL, or an exit code)
    hang       the NVRx rank monitor's section/heartbeat timeout fired, no rank crashed
    none       nothing failed

Sources: every file under RUN_DIR/logs (torch elastic's per-rank stderr.log/error.json
included) and every other *.log/*.err/*.out of the run directory (Slurm outputs copied in),
streamed line by line: logs can be gigabytes, hold binary junk, or end in a line cut off by
a killed process. Lines of several ranks may interleave in one file; each process's
traceback is reassembled from its own prefixed lines (`[rank5]: `, NVRx's `5: `, 0.4.1's
`[default5]:`). "First" means earliest in time where the lines carry a stamp (a line
without one takes its process's nearest stamp), then the earliest cycle, then file order.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import cmp_to_key
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from harness import safeio
from harness.history import MAX_UTC_OFFSET_S
from harness.layout import MARKER_NAME, RunLayout, marker_name

CATEGORIES = ("oom", "shape", "import", "nccl", "traceback", "exit", "hang", "none")
ROOT_TRACEBACK_KINDS = ("oom", "shape", "import", "traceback")

_MAX_LINE = 64 * 1024  # longer lines keep their head; the rest is skipped, never buffered
_TEXT_CAP = 400  # characters of a log line kept in evidence
_EVIDENCE_CAP = 16
_MAX_FRAMES = 256  # a runaway recursion keeps its outermost frames and its innermost ones
_MAX_CHAIN = 16
_MAX_KEPT = 20_000  # tracebacks / failure lines kept after per-file de-duplication
_SCAN_EXTENSIONS = (".log", ".err", ".out")
_SKIP_DIRS = ("checkpoints", "cycle_infos")


class DiagnoseInputError(ValueError):
    """The path given is not a readable run directory."""


# ============================================================================ public values


@dataclass(frozen=True)
class ParallelConfig:
    """The shape of the job, from Megatron's arguments table (or run.json as a fallback)."""

    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_length: int | None = None
    tensor_model_parallel_size: int | None = None
    pipeline_model_parallel_size: int | None = None
    context_parallel_size: int | None = None
    data_parallel_size: int | None = None
    world_size: int | None = None
    num_attention_heads: int | None = None
    num_layers: int | None = None
    source: str | None = None  # where the values were read, "file:line" or "run.json"

    def describe(self) -> str:
        parts = [
            (label, value)
            for label, value in (
                ("micro batch", self.micro_batch_size),
                ("global batch", self.global_batch_size),
                ("seq", self.seq_length),
                ("TP", self.tensor_model_parallel_size),
                ("PP", self.pipeline_model_parallel_size),
                ("CP", self.context_parallel_size),
                ("DP", self.data_parallel_size),
                ("world", self.world_size),
                ("heads", self.num_attention_heads),
                ("layers", self.num_layers),
            )
            if value is not None
        ]
        return ", ".join(f"{label} {value}" for label, value in parts) if parts else "unknown"


@dataclass(frozen=True)
class OomMemory:
    """The numbers of a CUDA OOM message, as printed (units kept), before any adjustment."""

    tried_to_allocate: str | None = None
    gpu: int | None = None
    total_capacity: str | None = None
    free: str | None = None
    process_in_use: str | None = None
    allocated_by_pytorch: str | None = None
    reserved_unallocated: str | None = None
    reserved_total: str | None = None
    peak: str | None = None  # Megatron's last memory report of that rank (max allocated/reserved)

    def describe(self) -> str:
        parts = []
        if self.tried_to_allocate:
            parts.append(f"tried to allocate {self.tried_to_allocate}")
        if self.total_capacity:
            gpu = f"GPU {self.gpu}" if self.gpu is not None else "GPU"
            free = f", {self.free} free" if self.free else ""
            parts.append(f"{gpu} capacity {self.total_capacity}{free}")
        if self.process_in_use:
            parts.append(f"process in use {self.process_in_use}")
        if self.allocated_by_pytorch:
            parts.append(f"allocated by PyTorch {self.allocated_by_pytorch}")
        if self.reserved_unallocated:
            parts.append(f"reserved but unallocated {self.reserved_unallocated}")
        if self.reserved_total:
            parts.append(f"reserved in total {self.reserved_total}")
        if self.peak:
            parts.append(f"peak {self.peak}")
        return "; ".join(parts) if parts else "not printed"


@dataclass(frozen=True)
class Symptom:
    """A failure on another rank than the root cause's: usually downstream of it."""

    rank: int | None
    local_rank: int | None
    kind: str  # nccl | hang | exit | teardown | oom | shape | import | traceback
    what: str
    evidence: str  # "relative/file:lineno: text" of its first line

    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.local_rank is not None:
            return f"local rank {self.local_rank}"
        return "unattributed"


@dataclass(frozen=True)
class Triage:
    run_dir: str
    category: str  # one of CATEGORIES
    summary: str  # one sentence
    rank: int | None = None
    local_rank: int | None = None
    cycle: int | None = None
    phase: str | None = None  # OOM only: forward | backward | optimizer
    exception: str | None = None
    location: str | None = None  # innermost frame "path:line in function"
    excerpt: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    config: ParallelConfig = field(default_factory=ParallelConfig)
    memory: OomMemory | None = None
    advice: str = ""
    injected: bool = False  # the root cause is the fault the harness injected (fault_injected.json)
    symptoms: tuple[Symptom, ...] = ()
    files_scanned: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.category != "none"

    def to_json(self) -> dict:
        out = asdict(self)
        out["failed"] = self.failed
        return out


# ============================================================================ lines


@dataclass(slots=True)
class _Line:
    file: str  # relative to the run directory
    lineno: int
    raw: str
    text: str  # with the rank/launcher prefixes peeled off
    time: datetime | None  # UTC, naive; the line's own stamp only (see _Scanner._time)
    rank: int | None  # global rank
    local_rank: int | None
    key: tuple  # the writing process within this file
    cycle: int | None
    stamped: bool = False  # looks stamped; parsed lazily, only when a time is needed

    def evidence(self) -> str:
        text = self.raw.strip()
        if len(text) > _TEXT_CAP:
            text = text[:_TEXT_CAP] + "..."
        return f"{self.file}:{self.lineno}: {text}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ISO_PREFIX = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)? (?:out|err) ")
_ROLE_PREFIX = re.compile(r"\[(?!rank)([A-Za-z_]+?)(\d+)\]:", re.IGNORECASE)
_NUM_PREFIX = re.compile(r" *(\d+):(?: |$)")
_TORCH_PREFIX = re.compile(r"\[rank(\d+)\]: ?")
_DATE_STAMP = re.compile(r"\s*\[?(\d{4})-(\d\d)-(\d\d)[ _T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_GLOG_STAMP = re.compile(r"\[?([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
_CYCLE_FILE = re.compile(r"_cycle(\d+)(?:\.[^/]*)?$")
_ATTEMPT_DIR = re.compile(r"(?:^|/)attempt_(\d+)(?:/(\d+))?/")


def _clean(chunk: bytes) -> str:
    text = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\r" in text:  # progress bars: what the terminal finally showed
        pieces = [p for p in text.split("\r") if p.strip()]
        text = pieces[-1] if pieces else ""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


def _iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) without ever holding more than one capped line in memory."""
    with safeio.open_binary(path) as fh:  # never a link, FIFO or device
        lineno = 0
        while True:
            chunk = fh.readline(_MAX_LINE)
            if not chunk:
                return
            lineno += 1
            if len(chunk) == _MAX_LINE and not chunk.endswith(b"\n"):
                while True:  # skip the rest of an over-long line
                    more = fh.readline(_MAX_LINE)
                    if not more or more.endswith(b"\n"):
                        break
            yield lineno, _clean(chunk)


def _looks_binary(path: Path) -> bool:
    with safeio.open_binary(path) as fh:
        head = fh.read(4096)
    if not head:
        return False
    control = sum(1 for b in head if b < 9 or 13 < b < 32 and b != 27)
    return control / len(head) > 0.3


def _maybe_stamped(text: str) -> bool:
    """Cheap test for a stamp at the start of a line (Megatron, launcher, glog); the
    regexes and datetime arithmetic run only for lines whose time is actually needed."""
    head = text[:16].lstrip(" [")
    if len(head) < 6:
        return False
    first = head[0]
    if first.isdigit():
        return head[4] == "-" and head[:4].isdigit()
    return first in "IWEF" and head[1:5].isdigit()


def _fraction(digits: str | None) -> int:
    return int((digits or "0")[:6].ljust(6, "0"))


# ============================================================================ tracebacks


@dataclass(frozen=True)
class _Frame:
    path: str
    lineno: int
    function: str
    source: str
    line: str  # the evidence of the `File` line


_FRAME_RE = re.compile(r'(\s*)File "(.*)", line (\d+), in (.*)$')
_EXC_RE = re.compile(r"([A-Za-z_][\w.]*)(?::(?: (.*))?)?$")
_TB_START = "Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


@dataclass
class _Traceback:
    start: _Line
    base: int  # indentation of the `Traceback` line; the exception line sits at it
    frames: list[_Frame] = field(default_factory=list)
    exceptions: list[tuple[str, _Line]] = field(default_factory=list)
    time: datetime | None = None
    rank: int | None = None
    local_rank: int | None = None
    cycle: int | None = None
    file_rank: int = 0
    kind: str = "traceback"  # set by _classify
    source: str = "log"  # log | elastic-summary | error-file

    @property
    def exception(self) -> str | None:
        return self.exceptions[-1][0] if self.exceptions else None

    def exception_texts(self) -> list[str]:
        return [text for text, _ in self.exceptions]


class _TracebackBuilder:
    """Reassembles the Python tracebacks of one process from its lines (chained ones too)."""

    def __init__(self, base: int | None = None) -> None:
        self._forced_base = base
        self.current: _Traceback | None = None
        self._state = "idle"  # idle | frames | after_exception | chain
        self._blank = 0

    def feed(self, line: _Line, text: str | None = None) -> list[_Traceback]:
        text = line.text if text is None else text
        done: list[_Traceback] = []
        stripped = text.strip()
        if self._state == "idle":
            if stripped.endswith(_TB_START):
                self._start(line, text)
            return done
        if self._state in ("after_exception", "chain"):
            if not stripped:
                self._blank += 1
                if self._blank > 3:
                    done.append(self._finish())
                return done
            if stripped in _CHAIN_MARKERS:
                self._state = "chain"
                return done
            if self._state == "chain" and stripped.endswith(_TB_START):
                self._state = "frames"
                return done
            done.append(self._finish())
            if stripped.endswith(_TB_START):
                self._start(line, text)
            return done
        # frames
        assert self.current is not None
        if not stripped:
            return done
        if stripped.endswith(_TB_START):  # the previous one was cut off
            done.append(self._finish())
            self._start(line, text)
            return done
        frame = _FRAME_RE.match(text)
        if frame:
            frames = self.current.frames
            frames.append(_Frame(frame.group(2), int(frame.group(3)), frame.group(4).strip(), "", line.evidence()))
            if len(frames) > _MAX_FRAMES:
                del frames[8]
            return done
        indent = len(text) - len(text.lstrip())
        if indent > self.current.base:
            last = self.current.frames[-1] if self.current.frames else None
            if last is not None and not last.source and stripped.strip("^~ ") and not stripped.startswith("["):
                self.current.frames[-1] = _Frame(last.path, last.lineno, last.function, stripped, last.line)
            return done
        exc = _EXC_RE.match(stripped)
        if exc and not stripped.startswith("["):
            if len(self.current.exceptions) >= _MAX_CHAIN:
                del self.current.exceptions[1]
            self.current.exceptions.append((stripped, line))
            self._state = "after_exception"
            self._blank = 0
            return done
        done.append(self._finish())  # junk where the exception line should be: cut off
        return done

    def close(self) -> list[_Traceback]:
        return [self._finish()] if self._state != "idle" else []

    def _start(self, line: _Line, text: str) -> None:
        base = self._forced_base
        if base is None:
            base = len(text) - len(text.lstrip())
        self.current = _Traceback(start=line, base=base)
        self._state = "frames"
        self._blank = 0

    def _finish(self) -> _Traceback:
        tb = self.current
        assert tb is not None
        self.current = None
        self._state = "idle"
        return tb


# ============================================================================ classification

_OOM_RE = re.compile(r"OutOfMemoryError|out of memory", re.IGNORECASE)  # torch's, CUDA's and NCCL's wording
_COMM_RE = re.compile(
    r"NCCL|nccl|DistBackendError|DistNetworkError|DistStoreError|ProcessGroupNCCL|collective operation timeout|"
    r"Watchdog caught|Connection reset by peer|Connection closed by peer|Broken pipe|remote worker|"
    r"Rendezvous\w*Error|RendezvousTimeout|store->get|Socket Timeout|gloo/transport|"
    r"Timed out waiting \d+ms for (?:recv|send)|communicator was aborted"
)
_SHAPE_RE = re.compile(
    r"not divisible by|must be divisible|divisible by|not a multiple of|must be a multiple of|size mismatch|"
    r"shape mismatch|shapes? cannot be multiplied|size of tensor a|Expected size|is invalid for input of size|"
    r"mat1 and mat2|Sizes of tensors must match|dimension mismatch|world.?size|num_attention_heads|"
    r"num_query_groups|tensor_model_parallel_size|pipeline_model_parallel_size|context_parallel_size|"
    r"data_parallel_size|micro_batch_size|global_batch_size",
    re.IGNORECASE,
)
_SHAPE_ASSERT_RE = re.compile(r"\bassert\b.*(%|divisib|shape|size|world|heads|multiple)", re.IGNORECASE)
_TEARDOWN_RE = re.compile(r"SignalException|KeyboardInterrupt|CancelledError|got signal: (?:15|2|1)\b")
_NVML_RE = re.compile(r"nvml|libnvidia-ml", re.IGNORECASE)


def _exc_type(exception: str) -> str:
    match = _EXC_RE.match(exception)
    return match.group(1) if match else ""


def _classify(tb: _Traceback) -> str:
    """oom | shape | import | traceback (root-cause kinds) or nccl | teardown (downstream)
    or noise | launcher (never a root cause)."""
    texts = tb.exception_texts()
    joined = "\n".join(texts)
    types = [_exc_type(t) for t in texts]
    last_type = types[-1] if types else ""
    if last_type.endswith("ChildFailedError"):
        return "launcher"  # torch elastic's summary of its children; parsed on its own
    functions = " ".join(f.function for f in tb.frames)
    if tb.rank is None and tb.local_rank is None and (_NVML_RE.search(joined) or _NVML_RE.search(functions)):
        return "noise"  # the launcher's optional GPU health check on a host without NVML
    if _TEARDOWN_RE.search(joined):
        return "teardown"
    if _OOM_RE.search(joined):
        return "oom"
    sources = " ".join(f"{f.path} {f.function} {f.source}" for f in tb.frames[-3:])
    if _COMM_RE.search(joined) or re.search(r"ProcessGroupNCCL|_nccl|nccl_", sources):
        return "nccl"
    if any(t.endswith(("ModuleNotFoundError", "ImportError")) for t in types):
        return "import"
    if _SHAPE_RE.search(joined):
        return "shape"
    if last_type.endswith("AssertionError") and tb.frames and _SHAPE_ASSERT_RE.search(tb.frames[-1].source):
        return "shape"
    return "traceback"


def _headline_exception(tb: _Traceback) -> str | None:
    """The exception line that decided the category (an OOM deep in a chain, say)."""
    if tb.kind == "oom":
        for text, _ in tb.exceptions:
            if _OOM_RE.search(text):
                return text
    if tb.kind == "import":
        for text, _ in tb.exceptions:
            if _exc_type(text).endswith(("ModuleNotFoundError", "ImportError")):
                return text
    return tb.exception


_PHASE_SOURCE = (
    ("optimizer", re.compile(r"\boptimi[sz]er\w*\.step\(|\bopt\.step\(|\bscaler\.step\(|\boptimizer_step\(")),
    ("backward", re.compile(r"\.backward\(|\bbackward_step\(|\bcustom_backward\(|run_backward\(")),
    ("forward", re.compile(r"\bforward_step\(|\bforward_step_func\(|\bmodel\(|\bself\.module\(|\.forward\(")),
)
_BACKWARD_FUNCS = {"backward_step", "custom_backward", "backward", "_engine_run_backward", "run_backward"}
_FORWARD_FUNCS = {"forward_step", "forward"}


def _phase(frames: Sequence[_Frame]) -> str | None:
    """Outermost first: the training loop's own call (`loss.backward()`, `optimizer.step()`,
    `forward_step(...)`) names the phase, even when activation recomputation runs a
    `forward` inside backward."""
    for frame in frames:
        for phase, pattern in _PHASE_SOURCE:
            if pattern.search(frame.source):
                return phase
        if frame.function in _BACKWARD_FUNCS:
            return "backward"
        if frame.function == "step" and "optim" in frame.path or frame.function.startswith(
            ("_multi_tensor_adam", "_single_tensor_adam", "_fused_adam")
        ):
            return "optimizer"
        if frame.function in _FORWARD_FUNCS:
            return "forward"
    return None


_SIZE = r"([\d.]+ [KMGTP]?i?B)"
_OOM_NEW = (
    ("tried_to_allocate", re.compile(r"Tried to allocate " + _SIZE)),
    ("total_capacity", re.compile(r"total capacity of " + _SIZE)),
    ("free", re.compile(r"of which " + _SIZE + " is free")),
    ("process_in_use", re.compile(r"this process has " + _SIZE + " memory in use")),
    ("allocated_by_pytorch", re.compile(_SIZE + " is allocated by PyTorch")),
    ("reserved_unallocated", re.compile(_SIZE + " is reserved by PyTorch but unallocated")),
)
_OOM_OLD = (
    ("total_capacity", re.compile(_SIZE + " total capacity")),
    ("allocated_by_pytorch", re.compile(_SIZE + " already allocated")),
    ("free", re.compile(_SIZE + " free")),
    ("reserved_total", re.compile(_SIZE + " reserved in total by PyTorch")),
)
_OOM_GPU = re.compile(r"GPU (\d+)")


def _oom_memory(message: str, peak: str | None) -> OomMemory:
    values: dict[str, str] = {}
    for name, pattern in _OOM_NEW + _OOM_OLD:
        if name not in values:
            match = pattern.search(message)
            if match:
                values[name] = match.group(1)
    gpu = _OOM_GPU.search(message)
    return OomMemory(gpu=int(gpu.group(1)) if gpu else None, peak=peak, **values)


# ============================================================================ other failure lines


@dataclass(frozen=True)
class _Event:
    """One failure line that is not a Python traceback: an NCCL error, a rank monitor
    timeout, or a process exit reported by a launcher/scheduler."""

    kind: str  # nccl | nccl-weak | hang | exit
    what: str
    line: _Line
    time: datetime | None
    rank: int | None
    local_rank: int | None
    cycle: int | None
    file_rank: int
    exitcode: int | None = None
    secondary: bool = False  # torch elastic listed it under "Failures:", not as the root cause


_NCCL_NAME = re.compile(r"nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error")
_NCCL_STRONG = (
    (re.compile(r"Watchdog caught collective operation timeout"), "NCCL watchdog: collective operation timeout"),
    (re.compile(r"Process group watchdog thread terminated"), "NCCL watchdog terminated the process group"),
    (re.compile(r"NCCL communicator was aborted"), "NCCL communicator aborted"),
    (_NCCL_NAME, None),
    (re.compile(r"NCCL error"), None),
    (re.compile(r"c10::DistBackendError"), "process aborted on c10::DistBackendError"),
    (re.compile(r"Some NCCL operations have failed or timed out"), "NCCL operations failed or timed out"),
)
_NCCL_ANY = re.compile(
    r"Watchdog caught|watchdog thread terminated|communicator was aborted|nccl\w+Error|NCCL error|DistBackendError|"
    r"Some NCCL operations|NCCL WARN"
)
_NCCL_RANK = re.compile(r"\bRank (\d+)\]")
_HANG_RE = re.compile(
    r"Section '([^']+)' has been open for ([\d.]+) seconds|Did not get (initial|subsequent) heartbeat|"
    r"Was out of section for ([\d.]+) seconds"
)
_RANKMON_RANK = re.compile(r"RankMonServer\d+@[^:\]\s]*:(\d+)\]")
_WORKLOAD_LOCAL = re.compile(r"\[workload:(\d+|\?)\((\d+)\)")
_EXIT_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_SRUN_EXIT = re.compile(
    r"srun: error: (\S+): tasks? ([\d,\-\[\]]+): (Exited with exit code (\d+)|Killed|Terminated|Aborted|"
    r"Segmentation fault|Bus error)"
)
_SLURM_OOM = re.compile(r"slurmstepd: error: Detected \d+ oom[-_]kill event")
_SLURM_CANCEL = re.compile(r"slurmstepd: error: \*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+))?")
_FAILURE_SIGNS = re.compile(
    r"Worker group (?:FAILED|UNHEALTHY)|Some rank\(s\) exited with non-zero|ChildFailedError|"
    r"Agent's exit code = [1-9]|exits with exit code = [1-9]"
)
_JOINED_ROUND = re.compile(r"has joined (?:round (\d+) of )?the rendezvous .* in a world of size (\d+)")
_WORKER_START = re.compile(r"Cycle: (\d+) Event: worker_start_(?:started|completed)")
_MEMORY_REPORT = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)"
    r"(?: \| reserved: ([\d.]+) \| max reserved: ([\d.]+))?"
)
_CONFIG_KEYS = (
    "micro_batch_size", "global_batch_size", "seq_length", "tensor_model_parallel_size",
    "pipeline_model_parallel_size", "context_parallel_size", "data_parallel_size", "world_size",
    "num_attention_heads", "num_layers",
)  # fmt: skip
_ARG_ROW = re.compile(r"\s{1,4}(" + "|".join(_CONFIG_KEYS) + r") \.{3,} (\S+)\s*$")
_WORLD_LINE = re.compile(
    r"(world|data-parallel|context-parallel|tensor-model-parallel|pipeline-model-parallel) size: (\d+)"
)
_WORLD_LINE_KEYS = {
    "world": "world_size", "data-parallel": "data_parallel_size", "context-parallel": "context_parallel_size",
    "tensor-model-parallel": "tensor_model_parallel_size", "pipeline-model-parallel": "pipeline_model_parallel_size",
}  # fmt: skip
_SUMMARY_FIELD = re.compile(r"\s+(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_SUMMARY_RANK = re.compile(r"(-?\d+) \(local_rank: (\d+)\)")
_SUMMARY_EXIT = re.compile(r"(-?\d+)")
_SEPARATOR = re.compile(r"\s*(=|-){10,}\s*$")
_SUMMARY_ENTRY = re.compile(r"\s*\[(\d+)\]:\s*$")
_TEARDOWN_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _signal_name(exitcode: int | None) -> str | None:
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def _exit_what(exitcode: int) -> str:
    name = _signal_name(exitcode)
    return f"killed by {name} (exit code {exitcode})" if name else f"exited with code {exitcode}"


# ============================================================================ the scan


@dataclass
class _Stream:
    """Per writing process within one file."""

    builder: _TracebackBuilder = field(default_factory=_TracebackBuilder)
    last_stamped: _Line | None = None
    waiting: list[_Traceback] = field(default_factory=list)  # tracebacks still without a time


@dataclass
class _SummaryEntry:
    section: str
    first: _Line
    fields: dict[str, str] = field(default_factory=dict)
    builder: _TracebackBuilder | None = None
    tracebacks: list[_Traceback] = field(default_factory=list)


class _SummaryParser:
    """torch elastic's ChildFailedError block (`Failures:` / `Root Cause (first observed
    failure):`, then `[i]:` entries of `time/host/rank/exitcode/error_file/traceback`
    fields, the traceback indented by two more spaces when the worker wrote an error file)."""

    def __init__(self, emit: Callable[[_SummaryEntry], None]) -> None:
        self._emit = emit
        self._section: str | None = None  # None: not inside a block
        self._entry: _SummaryEntry | None = None

    def feed(self, line: _Line) -> bool:
        """True when the line belongs to a block (and is consumed)."""
        text = line.text
        stripped = text.strip()
        if stripped == "Failures:" or stripped.startswith("Root Cause (first observed failure)"):
            self._flush()
            self._section = "root" if stripped.startswith("Root Cause") else "others"
            return True
        if self._section is None:
            return False
        if _SEPARATOR.match(text):
            self._flush()
            if stripped.startswith("="):
                self._section = None
            return True
        if _SUMMARY_ENTRY.match(text):
            self._flush()
            self._entry = _SummaryEntry(self._section, line)
            return True
        entry = self._entry
        if entry is None:
            if "<NO_OTHER_FAILURES>" in text:
                return True
            self._section = None
            return False
        if entry.builder is not None:
            entry.tracebacks.extend(entry.builder.feed(line))
            return True
        match = _SUMMARY_FIELD.match(text)
        if not match:
            self._flush()
            self._section = None
            return False
        name, value = match.group(1), match.group(2).strip()
        entry.fields[name] = value
        if name == "traceback" and value.startswith(_TB_START):
            entry.builder = _TracebackBuilder(base=len(text) - len(text.lstrip()))
            entry.builder.feed(line, _TB_START)
        return True

    def close(self) -> None:
        self._flush()
        self._section = None

    def _flush(self) -> None:
        entry, self._entry = self._entry, None
        if entry is None:
            return
        if entry.builder is not None:
            entry.tracebacks.extend(entry.builder.close())
            entry.builder = None
        self._emit(entry)


@dataclass
class _Context:
    utc_offset: timedelta
    ref_year: int
    ref_month: int


class _Scanner:
    def __init__(self, root: Path, ctx: _Context) -> None:
        self.root = root
        self.ctx = ctx
        self.tracebacks: list[_Traceback] = []
        self.events: list[_Event] = []
        self.failure_signs: list[_Line] = []
        self._seen: set[tuple] = set()  # the same failure repeated in one file is kept once
        self.dropped = 0
        self.configs: dict[str, dict[str, tuple[int, int]]] = {}  # file -> key -> (value, lineno)
        self.config_order: list[str] = []
        self.memory: dict[int, str] = {}  # rank -> Megatron's last memory report
        self.world_of_nodes: int | None = None
        self.scanned: list[str] = []
        self.unreadable: list[str] = []

    # --------------------------------------------------------------- files
    def scan(self, files: Sequence[Path]) -> None:
        for file_rank, path in enumerate(files):
            rel = path.relative_to(self.root).as_posix()
            try:
                if path.name == "error.json":
                    self._scan_error_file(path, rel, file_rank)
                elif not path.name.endswith(_SCAN_EXTENSIONS + (".txt",)) and _looks_binary(path):
                    continue  # tensorboard events and the like; a text log with junk is still read
                else:
                    self._scan_file(path, rel, file_rank)
                self.scanned.append(rel)
            except OSError as err:
                self.unreadable.append(f"{rel}: {err.strerror or err}")

    def _file_identity(self, rel: str) -> tuple[int | None, int | None, bool]:
        """(cycle, local rank, per-cycle app log) that the file's path says."""
        name = rel.rsplit("/", 1)[-1]
        cycle_match = _CYCLE_FILE.search(name)
        if cycle_match:
            return int(cycle_match.group(1)), None, True
        attempt = _ATTEMPT_DIR.search(rel)
        if attempt:
            return int(attempt.group(1)), int(attempt.group(2)) if attempt.group(2) else None, False
        return None, None, False

    def _scan_file(self, path: Path, rel: str, file_rank: int) -> None:
        file_cycle, file_local, per_cycle = self._file_identity(rel)
        streams: dict[tuple, _Stream] = {}
        cycle_state = file_cycle
        summary = _SummaryParser(lambda entry: self._finish_summary(entry, file_rank))
        for lineno, raw in _iter_lines(path):
            line = self._peel(rel, lineno, raw, per_cycle, file_local)
            # launcher lines move the cycle of everything after them
            if file_cycle is None and ("joined" in line.text or "Event: worker_start" in line.text):
                joined = _JOINED_ROUND.search(line.text)
                if joined:
                    if joined.group(1) is not None:
                        cycle_state = int(joined.group(1))
                    self.world_of_nodes = int(joined.group(2))
                started = _WORKER_START.search(line.text)
                if started:
                    cycle_state = int(started.group(1))
            line.cycle = cycle_state
            stream = streams.setdefault(line.key, _Stream())
            if line.time is not None or line.stamped:
                stream.last_stamped = line
                if stream.waiting and self._time(line) is not None:
                    for tb in stream.waiting:  # an upper bound beats no time at all
                        tb.time = line.time
                    stream.waiting.clear()

            if summary.feed(line):
                continue
            for tb in stream.builder.feed(line):
                self._keep_traceback(tb, stream, file_rank)
            if stream.builder.current is not None and stream.builder.current.start is line:
                stream.builder.current.time = self._stream_time(stream)
            self._line_events(line, stream, file_rank)
        for stream in streams.values():
            for tb in stream.builder.close():
                self._keep_traceback(tb, stream, file_rank)
        summary.close()

    def _peel(self, rel: str, lineno: int, raw: str, per_cycle: bool, file_local: int | None) -> _Line:
        text = raw
        time: datetime | None = None
        node: int | None = None
        rank: int | None = None
        local = file_local
        key: tuple = ()
        if text[10:11] == "T":
            iso = _ISO_PREFIX.match(text)
            if iso:
                time = self._iso_time(iso.group(1), iso.group(2))
                text = text[iso.end():]
        if text[:1] == "[" and text[:5] != "[rank":
            role = _ROLE_PREFIX.match(text)
            if role:
                local = int(role.group(2))
                key = ("local", local)
                text = text[role.end():]
        if text[:1].isdigit() or text[:1] == " ":
            num = _NUM_PREFIX.match(text)
            if num:
                if per_cycle:
                    rank = int(num.group(1))
                    key = ("rank", rank)
                else:  # srun --label or NVRx's infra-rank file prefix: a node, not a worker
                    node = int(num.group(1))
                text = text[num.end():]
        if text[:5] == "[rank":
            torch_prefix = _TORCH_PREFIX.match(text)
            if torch_prefix:
                rank = int(torch_prefix.group(1))
                if not key:
                    key = ("rank", rank)
                text = text[torch_prefix.end():]
        stamped = time is None and _maybe_stamped(text)
        return _Line(rel, lineno, raw, text, time, rank, local, (node, *key), None, stamped)

    def _time(self, line: _Line | None) -> datetime | None:
        if line is None:
            return None
        if line.stamped:
            line.stamped = False
            line.time = self._own_time(line.text)
        return line.time

    def _stream_time(self, stream: _Stream) -> datetime | None:
        return self._time(stream.last_stamped)

    # --------------------------------------------------------------- time
    def _iso_time(self, stamp: str, zone: str | None) -> datetime | None:
        try:
            value = datetime.fromisoformat(stamp)
        except ValueError:
            return None
        if zone and zone != "Z":
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            value -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        return value

    def _own_time(self, text: str) -> datetime | None:
        """A stamp the writer put at the start of its line, converted to UTC."""
        head = text[:48]
        if not head:
            return None
        if "-" in head:
            match = _DATE_STAMP.match(head)
            if match:
                y, mo, d, h, mi, s, frac = match.groups()
                try:
                    local = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _fraction(frac))
                except ValueError:
                    return None
                return local - self.ctx.utc_offset
        if head.lstrip("[")[:1] in "IWEF":
            match = _GLOG_STAMP.match(head)
            if match:
                _, mo, d, h, mi, s, frac = match.groups()
                year = self.ctx.ref_year - (1 if int(mo) > self.ctx.ref_month + 6 else 0)
                try:
                    local = datetime(year, int(mo), int(d), int(h), int(mi), int(s), _fraction(frac))
                except ValueError:
                    return None
                return local - self.ctx.utc_offset
        return None

    # --------------------------------------------------------------- tracebacks
    def _keep_traceback(self, tb: _Traceback, stream: _Stream | None, file_rank: int) -> None:
        start = tb.start
        tb.rank = start.rank if tb.rank is None else tb.rank
        tb.local_rank = start.local_rank if tb.local_rank is None else tb.local_rank
        tb.cycle = start.cycle if tb.cycle is None else tb.cycle
        tb.file_rank = file_rank
        tb.kind = _classify(tb)
        if tb.kind in ("noise", "launcher"):
            return
        if not self._first(("tb", start.file, tb.rank, tb.local_rank, tb.cycle, (tb.exception or "")[:300])):
            return
        if tb.time is None and stream is not None:
            tb.time = self._stream_time(stream)
            if tb.time is None:
                stream.waiting.append(tb)
        self.tracebacks.append(tb)

    def _finish_summary(self, entry: _SummaryEntry, file_rank: int) -> None:
        fields = entry.fields
        rank_match = _SUMMARY_RANK.match(fields.get("rank", ""))
        rank = int(rank_match.group(1)) if rank_match else None
        local = int(rank_match.group(2)) if rank_match else None
        exit_match = _SUMMARY_EXIT.match(fields.get("exitcode", ""))
        exitcode = int(exit_match.group(1)) if exit_match else None
        when = self._own_time(fields["time"]) if fields.get("time") else None
        line = entry.first
        for tb in entry.tracebacks:
            tb.rank, tb.local_rank, tb.time, tb.source = rank, local, when, "elastic-summary"
            tb.cycle = line.cycle
            self._keep_traceback(tb, None, file_rank)
        if exitcode is not None and exitcode != 0:
            what = _exit_what(exitcode)
            if entry.section == "root":
                what += " (torch elastic: root cause, first observed failure)"
            secondary = entry.section != "root"
            self._add_event(
                _Event("exit", what, line, when, rank, local, line.cycle, file_rank, exitcode, secondary)
            )
            self._failure_sign(line)

    def _scan_error_file(self, path: Path, rel: str, file_rank: int) -> None:
        """torch elastic's per-worker error.json (written by @record): the worker's traceback."""
        try:
            data = safeio.read_json(path, limit=16 * 1024 * 1024)
        except (OSError, ValueError, RecursionError):
            return
        message = data.get("message") if isinstance(data, dict) else None
        if not isinstance(message, dict):
            return
        extra = message.get("extraInfo") or {}
        callstack = extra.get("py_callstack")
        if not isinstance(callstack, str):
            return
        when = None
        try:
            when = datetime.fromtimestamp(int(extra.get("timestamp")), timezone.utc).replace(tzinfo=None)
        except (TypeError, ValueError, OverflowError, OSError):
            pass
        cycle, local, _ = self._file_identity(rel)
        builder = _TracebackBuilder()
        found: list[_Traceback] = []
        for lineno, text in enumerate(callstack.splitlines(), start=1):
            line = _Line(rel, lineno, text, text, None, None, local, (), cycle)
            found.extend(builder.feed(line))
        found.extend(builder.close())
        for tb in found:
            tb.time, tb.source, tb.local_rank = when, "error-file", local
            self._keep_traceback(tb, None, file_rank)

    def _first(self, key: tuple) -> bool:
        """Whether this failure is new (bounded memory on logs that repeat one error forever)."""
        if key in self._seen:
            return False
        if len(self._seen) >= _MAX_KEPT:
            self.dropped += 1
            return False
        self._seen.add(key)
        return True

    def _add_event(self, ev: _Event) -> None:
        anonymous = ev.what[:120] if ev.rank is None and ev.local_rank is None else None
        if self._first(("ev", ev.line.file, ev.kind, ev.rank, ev.local_rank, ev.cycle, ev.exitcode, anonymous)):
            self.events.append(ev)

    def _failure_sign(self, line: _Line) -> None:
        if len(self.failure_signs) < _MAX_KEPT:
            self.failure_signs.append(line)

    # --------------------------------------------------------------- non-traceback lines
    def _line_events(self, line: _Line, stream: _Stream, file_rank: int) -> None:
        text = line.text
        if ("NCCL" in text or "nccl" in text or "DistBackendError" in text) and _NCCL_ANY.search(text):
            self._nccl_event(line, self._stream_time(stream), file_rank)
        if "open for" in text or "heartbeat" in text or "out of section" in text:
            hang = _HANG_RE.search(text)
            if hang:
                when = self._stream_time(stream)
                rank, local = line.rank, line.local_rank
                monitor = _RANKMON_RANK.search(text)
                if monitor:
                    rank = int(monitor.group(1))
                workload = _WORKLOAD_LOCAL.search(text)
                if workload:
                    local = int(workload.group(2))
                    rank = int(workload.group(1)) if workload.group(1).isdigit() else rank
                what = "rank monitor timeout: " + text[hang.start():].strip()
                self._add_event(_Event("hang", what, line, when, rank, local, line.cycle, file_rank))
        if "exitcode" in text or "srun:" in text or "slurmstepd:" in text:
            self._exit_event(line, self._stream_time(stream), file_rank)
        if ("FAILED" in text or "UNHEALTHY" in text or "non-zero" in text or "ChildFailedError" in text
                or "exit code =" in text) and _FAILURE_SIGNS.search(text):
            self._failure_sign(line)
        if " ..." in text:
            row = _ARG_ROW.match(text)
            if row:
                self._config_value(line, row.group(1), row.group(2))
        if "size: " in text and "using world size" in text:
            for name, value in _WORLD_LINE.findall(text):
                self._config_value(line, _WORLD_LINE_KEYS[name], value)
        if "memory (MB)" in text:
            report = _MEMORY_REPORT.search(text)
            if report:
                rank, iters, _alloc, max_alloc, _res, max_res = report.groups()
                peak = f"max allocated {max_alloc} MB"
                if max_res:
                    peak += f", max reserved {max_res} MB"
                where = f"{line.file}:{line.lineno}"
                self.memory[int(rank)] = f"{peak} (Megatron's report after {iters} iterations, {where})"

    def _nccl_event(self, line: _Line, when: datetime | None, file_rank: int) -> None:
        text = line.text
        what = None
        for pattern, label in _NCCL_STRONG:
            match = pattern.search(text)
            if match:
                if label is None:
                    label = match.group(0) if pattern is _NCCL_NAME else "NCCL error: " + _tail(text, match.start())
                what = label
                break
        kind = "nccl"
        if what is None:
            if "NCCL WARN" not in text:
                return
            kind, what = "nccl-weak", "NCCL WARN " + _tail(text, text.index("NCCL WARN") + 10)
        rank = line.rank
        if rank is None:
            named = _NCCL_RANK.search(text)
            rank = int(named.group(1)) if named else None
        self._add_event(_Event(kind, what, line, when, rank, line.local_rank, line.cycle, file_rank))

    def _exit_event(self, line: _Line, when: datetime | None, file_rank: int) -> None:
        text = line.text
        failed = _EXIT_RE.search(text)
        if failed:
            code, local = int(failed.group(1)), int(failed.group(2))
            self._add_event(
                _Event("exit", _exit_what(code), line, when, None, local, line.cycle, file_rank, code)
            )
            self._failure_sign(line)
            return
        srun = _SRUN_EXIT.search(text)
        if srun:
            host, tasks, status, code = srun.groups()
            exitcode = int(code) if code else None
            what = f"srun: task {tasks} on {host}: {status}"
            self._add_event(_Event("exit", what, line, when, None, None, line.cycle, file_rank, exitcode))
            self._failure_sign(line)
            return
        if _SLURM_OOM.search(text):
            what = "host out of memory: slurmstepd reported an oom_kill event (the kernel OOM killer, not CUDA)"
            self._add_event(_Event("exit", what, line, when, None, None, line.cycle, file_rank, -9))
            self._failure_sign(line)
            return
        cancel = _SLURM_CANCEL.search(text)
        if cancel:
            why = (cancel.group(1) or "").strip()
            what = "Slurm cancelled the step" + (f" due to {why.lower()}" if why else "")
            self._add_event(_Event("exit", what, line, when, None, None, line.cycle, file_rank, -15))
            self._failure_sign(line)

    def _config_value(self, line: _Line, key: str, value: str) -> None:
        try:
            number = int(value)
        except ValueError:
            return
        per_file = self.configs.get(line.file)
        if per_file is None:
            per_file = self.configs[line.file] = {}
            self.config_order.append(line.file)
        per_file.setdefault(key, (number, line.lineno))


def _tail(text: str, start: int, limit: int = 200) -> str:
    out = text[start:].strip()
    return out if len(out) <= limit else out[:limit] + "..."


# ============================================================================ the decision


@dataclass(frozen=True)
class _Candidate:
    kind: str  # the category it would give
    time: datetime | None
    cycle: int | None
    file: str
    file_rank: int
    lineno: int
    priority: int  # where order cannot be told: tracebacks, then exits, then hangs
    item: object


def _compare(a: _Candidate, b: _Candidate) -> int:
    if a.time is not None and b.time is not None and a.time != b.time:
        return -1 if a.time < b.time else 1
    if a.cycle is not None and b.cycle is not None and a.cycle != b.cycle:
        return -1 if a.cycle < b.cycle else 1
    if a.file == b.file and a.lineno != b.lineno:
        return -1 if a.lineno < b.lineno else 1
    for x, y in ((a.priority, b.priority), (a.file_rank, b.file_rank), (a.lineno, b.lineno)):
        if x != y:
            return -1 if x < y else 1
    return 0


_earliest_key = cmp_to_key(_compare)


def _tb_candidate(tb: _Traceback) -> _Candidate:
    return _Candidate(tb.kind, tb.time, tb.cycle, tb.start.file, tb.file_rank, tb.start.lineno, 0, tb)


def _event_candidate(ev: _Event, priority: int) -> _Candidate:
    kind = "hang" if ev.kind == "hang" else "nccl" if ev.kind.startswith("nccl") else "exit"
    return _Candidate(kind, ev.time, ev.cycle, ev.line.file, ev.file_rank, ev.line.lineno, priority, ev)


@dataclass(frozen=True)
class _RunFacts:
    """What run.json and fault_injected.json say, all optional."""

    utc_offset_s: int
    ref: datetime
    nnodes: int | None
    spec: dict
    marker: dict | None
    markers: tuple[dict, ...] = ()  # every planned fault's marker (fault_injected.json, fault_injected.2.json, ...)


def _read_json(path: Path) -> dict | None:
    try:
        data = safeio.read_json(path)
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _run_facts(layout: RunLayout, files: Sequence[Path], utc_offset_s: int | None) -> _RunFacts:
    run = _read_json(layout.run_json) or {}
    spec = run.get("spec") if isinstance(run.get("spec"), dict) else {}
    offset = utc_offset_s
    if offset is None:
        offset = run.get("utc_offset_s")
        # a received run.json may say anything: an offset no time zone has is ignored, as history does
        if not isinstance(offset, int) or isinstance(offset, bool) or abs(offset) > MAX_UTC_OFFSET_S:
            offset = 0
    ref = None
    for stamp in (run.get("created_at"), (_read_json(layout.launch_json) or {}).get("started_at")):
        if isinstance(stamp, str):
            try:
                ref = datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(tzinfo=None)
                break
            except ValueError:
                pass
    if ref is None:  # glog stamps carry no year: take the logs' own
        mtimes = []
        for path in files:
            try:
                mtimes.append(path.stat().st_mtime)
            except OSError:
                pass
        ref = datetime.fromtimestamp(max(mtimes)) if mtimes else datetime.now()
    nnodes = spec.get("nnodes") if isinstance(spec.get("nnodes"), int) else None
    marker = _read_json(layout.marker)
    markers: list[dict] = []
    for index in range(1, 10):  # one marker per planned fault, numbered without gaps
        found = _read_json(layout.marker_for(index))
        if found is None:
            break
        markers.append(found)
    return _RunFacts(offset, ref, nnodes, spec, marker, tuple(markers))


def _log_files(layout: RunLayout) -> list[Path]:
    """Everything under logs/, plus *.log/*.err/*.out elsewhere in the run directory;
    ordered so that, without times, per-cycle application logs of the earliest cycle come
    first, then torch elastic's per-rank logs, Slurm outputs, the console, the launcher."""
    found: set[Path] = set()
    for directory, subdirs, names in os.walk(layout.root, followlinks=False):
        here = Path(directory)
        if here == layout.root:
            subdirs[:] = [d for d in subdirs if d not in _SKIP_DIRS and not d.startswith(".")]
        inside_logs = here == layout.logs or layout.logs in here.parents
        for name in names:
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            if inside_logs or name.endswith(_SCAN_EXTENSIONS):
                found.add(path)

    def order(path: Path) -> tuple:
        rel = path.relative_to(layout.root).as_posix()
        name = path.name
        cycle = _CYCLE_FILE.search(name)
        if cycle:
            return (0, int(cycle.group(1)), rel)
        attempt = _ATTEMPT_DIR.search(rel)
        if attempt:
            return (1, int(attempt.group(1)), rel)
        if path == layout.console_log:
            return (3, 0, rel)
        if path == layout.launcher_log:
            return (4, 0, rel)
        return (2, 0, rel)

    return sorted(found, key=order)


def diagnose(run_dir: Path, *, utc_offset_s: int | None = None) -> Triage:
    """Triage the failure of one run directory. `utc_offset_s` overrides run.json's
    local-minus-UTC offset used to compare local-time log stamps with UTC ones."""
    root = Path(run_dir)
    if not root.exists():
        raise DiagnoseInputError(f"run directory {root} does not exist: pass the runs/<run-id> directory")
    if not root.is_dir():
        raise DiagnoseInputError(f"run directory {root} is not a directory: pass the runs/<run-id> directory")
    if not os.access(root, os.R_OK | os.X_OK):
        raise DiagnoseInputError(f"run directory {root} is not readable: fix its permissions or copy it")
    layout = RunLayout.of_dir(root)
    files = _log_files(layout)
    facts = _run_facts(layout, files, utc_offset_s)
    ctx = _Context(timedelta(seconds=facts.utc_offset_s), facts.ref.year, facts.ref.month)
    scanner = _Scanner(root, ctx)
    scanner.scan(files)
    return _stopped_by_harness(root, _decide(root, scanner, facts))


def _stopped_by_harness(root: Path, triage: Triage) -> Triage:
    """Signal deaths after the harness stopped a doomed job are its doing, not a root cause."""
    reason = (_read_json(root / "launch.json") or {}).get("stopped_early")
    if not reason or triage.category not in ("exit", "none"):
        return triage
    return dataclasses.replace(
        triage, summary=f"The harness stopped the job early: {reason}. The signal exits that follow are its doing.",
        advice="Act on the reason the harness stopped the job (see the failed criteria); nothing crashed on its own.")


def _single_node(scanner: _Scanner, facts: _RunFacts) -> bool:
    return facts.nnodes == 1 or (facts.nnodes is None and scanner.world_of_nodes == 1)


RankResolver = Callable[[Optional[int], Optional[int]], Optional[int]]


def _rank_resolver(scanner: _Scanner, facts: _RunFacts) -> RankResolver:
    """Global rank from (global, local): the same on one node; elsewhere only where torch
    elastic's summary paired them ("rank : 5 (local_rank: 1)") without ambiguity."""
    single = _single_node(scanner, facts)
    local_map: dict[int, set[int]] = {}
    for ev in scanner.events:
        if ev.kind == "exit" and ev.rank is not None and ev.local_rank is not None:
            local_map.setdefault(ev.local_rank, set()).add(ev.rank)

    def resolve(rank: int | None, local: int | None) -> int | None:
        if rank is not None or local is None:
            return rank
        if single:
            return local
        known = local_map.get(local, set())
        return next(iter(known)) if len(known) == 1 else None

    return resolve


@dataclass
class _Findings:
    """Everything the scan found, deduplicated; what the root cause is chosen from."""

    tracebacks: list[_Traceback]
    events: list[_Event]
    failure_signs: list[_Line]
    launcher_failed: bool
    global_rank: RankResolver

    def in_cycles_after(self, cycle: int) -> "_Findings":
        def later(c: int | None) -> bool:
            return c is not None and c > cycle

        return _Findings(
            [tb for tb in self.tracebacks if later(tb.cycle)], [ev for ev in self.events if later(ev.cycle)],
            [line for line in self.failure_signs if later(line.cycle)], False, self.global_rank,
        )  # fmt: skip

    def of(self, kind: str) -> list[_Event]:
        return [e for e in self.events if e.kind == kind]


def _unexplained_exit(ev: _Event, found: _Findings) -> bool:
    """A rank that died with no traceback, NCCL error or rank monitor timeout of its own:
    a root cause in itself (a SIGKILL, a segfault). Teardown signals never are, nor an
    abort while NCCL errors are about, nor what torch elastic saw after its root cause."""
    code = ev.exitcode
    if ev.secondary or code is None or code == 0 or (ev.rank is None and ev.local_rank is None):
        return False
    name = _signal_name(code)
    if name and signal.Signals.__members__.get(name) in _TEARDOWN_SIGNALS:
        return False
    comm_seen = bool(found.of("nccl")) or any(tb.kind == "nccl" for tb in found.tracebacks)
    if name == "SIGABRT" and comm_seen:
        return False
    rank = found.global_rank(ev.rank, ev.local_rank)
    if rank is not None:
        own = [found.global_rank(tb.rank, tb.local_rank) for tb in found.tracebacks]
        own += [found.global_rank(e.rank, e.local_rank) for e in found.events
                if e.kind in ("nccl", "nccl-weak", "hang")]  # fmt: skip
        return rank not in own
    return not found.tracebacks and (code > 0 or not comm_seen)


def _choose_root(found: _Findings) -> tuple[object, str] | None:
    """(the root cause, its category): the earliest non-NCCL traceback, unexplained death
    or rank monitor timeout; else NCCL; else whatever exit or teardown is left."""
    candidates = [_tb_candidate(tb) for tb in found.tracebacks if tb.kind in ROOT_TRACEBACK_KINDS]
    candidates += [_event_candidate(ev, 1) for ev in found.of("exit") if _unexplained_exit(ev, found)]
    candidates += [_event_candidate(ev, 2) for ev in found.of("hang")]
    if candidates:
        chosen = min(candidates, key=_earliest_key)
        return chosen.item, chosen.kind
    comm_tbs = [tb for tb in found.tracebacks if tb.kind == "nccl"]
    strong, weak = found.of("nccl"), found.of("nccl-weak")
    if comm_tbs or strong or (weak and (found.failure_signs or found.launcher_failed)):
        # a plain `NCCL WARN` names no rank; the errors that follow it do
        pool = [_tb_candidate(tb) for tb in comm_tbs] + [_event_candidate(e, 1) for e in strong]
        pool = pool or [_event_candidate(e, 1) for e in weak]
        return min(pool, key=_earliest_key).item, "nccl"
    if found.of("exit"):
        return min((_event_candidate(e, 1) for e in found.of("exit")), key=_earliest_key).item, "exit"
    if found.tracebacks:  # only teardown tracebacks: someone stopped the job
        return min((_tb_candidate(tb) for tb in found.tracebacks), key=_earliest_key).item, "exit"
    return None


def _injected_rank(category: str, ev: _Event, rank: int | None, marker: dict) -> tuple[bool, int | None]:
    """Whether the event is the fault the nemesis injected (fault_injected.json): same
    cycle, same rank and, for a kill, death by the marker's signal; and the rank to name."""
    def number(key: str) -> int | None:
        value = marker.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    marker_rank, marker_local, marker_cycle = number("rank"), number("local_rank"), number("cycle")
    if marker_cycle is not None and ev.cycle is not None and marker_cycle != ev.cycle:
        return False, rank
    fault = marker.get("fault")
    if category == "hang" and fault == "hang":
        return True, marker_rank
    if category == "exit" and fault == "kill" and _signal_name(ev.exitcode) == marker.get("signal", "SIGKILL"):
        if (rank is not None and rank == marker_rank) or (rank is None and ev.local_rank == marker_local):
            return True, marker_rank if marker_rank is not None else rank
    return False, rank


def _marker_file(marker: dict) -> str:
    """The marker file a record was read from (a multi-fault plan numbers its faults)."""
    index = marker.get("fault_index")
    return marker_name(index) if isinstance(index, int) and 1 <= index < 100 else MARKER_NAME


def _decide(root: Path, scanner: _Scanner, facts: _RunFacts) -> Triage:
    global_rank = _rank_resolver(scanner, facts)
    found = _Findings(_dedupe(scanner.tracebacks, global_rank), scanner.events, scanner.failure_signs,
                      _launcher_failed(root), global_rank)  # fmt: skip
    chosen = _choose_root(found)
    files, unreadable = tuple(scanner.scanned), tuple(scanner.unreadable)
    marker = facts.marker or {}
    markers = facts.markers or ((marker,) if marker else ())
    after_injection = None
    while chosen is not None and isinstance(chosen[0], _Event) and markers:
        ev, category = chosen
        hit = next((m for m in markers if _injected_rank(category, ev, global_rank(ev.rank, ev.local_rank), m)[0]), None)
        if hit is None or ev.cycle is None:
            break
        marker = hit
        # the injected fault is expected: what broke in the cycles after it is the story
        later = _choose_root(found.in_cycles_after(ev.cycle))
        if later is None:
            break
        after_injection, chosen = ev, later
    config = _config(scanner, facts, chosen[0] if chosen else None)
    if chosen is None:
        summary = f"No failure found in {len(files)} log file(s)."
        if not files:
            summary = "No log files found under logs/ or as *.log/*.err/*.out in the run directory."
        return Triage(str(root), "none", summary, config=config, advice=_advice("none", None, config, None, False),
                      files_scanned=files, unreadable=unreadable)  # fmt: skip
    item, category = chosen
    if isinstance(item, _Traceback):
        triage = _traceback_triage(root, category, item, scanner, found, config, files, unreadable)
    else:
        assert isinstance(item, _Event)
        triage = _event_triage(root, category, item, found, marker, config, files, unreadable)
    if after_injection is not None:
        note = (f"After the fault the harness injected in cycle {after_injection.cycle} ({MARKER_NAME}), "
                f"a later cycle failed: ")  # fmt: skip
        triage = replace(triage, summary=note + triage.summary[0].lower() + triage.summary[1:])
    return triage


def _event_triage(
    root: Path, category: str, ev: _Event, found: _Findings, marker: dict, config: ParallelConfig,
    files: tuple[str, ...], unreadable: tuple[str, ...],
) -> Triage:  # fmt: skip
    rank = found.global_rank(ev.rank, ev.local_rank)
    injected = False
    if category in ("exit", "hang") and marker:
        injected, rank = _injected_rank(category, ev, rank, marker)
    if category == "hang" and not injected:
        rank = None  # every rank blocked with the stuck one times out: the monitor cannot say which
    family = ("nccl", "nccl-weak") if ev.kind.startswith("nccl") else (ev.kind,)
    evidence = [ev.line.evidence()]
    evidence += [e.line.evidence() for e in found.events if e is not ev and e.kind in family][: _EVIDENCE_CAP - 1]
    symptoms = _symptoms(found, exclude=ev, root_rank=rank)
    if rank is not None:
        who = f"rank {rank}"
    else:
        who = f"local rank {ev.local_rank}" if ev.local_rank is not None else "a process"
    if category == "exit" and rank is None and ev.local_rank is None:
        summary = f"{ev.what[0].upper()}{ev.what[1:]}, and no rank left a Python traceback"
    elif category == "exit":
        summary = f"{who[0].upper()}{who[1:]} {ev.what}, without a Python traceback"
    elif category == "hang":
        summary = f"No rank crashed: the NVRx rank monitor timed out ({ev.what.split(': ', 1)[-1]})"
        timed_out = {found.global_rank(e.rank, e.local_rank) for e in found.of("hang") if e.cycle == ev.cycle}
        if None not in timed_out:
            summary += f"; monitors of rank(s) {_rank_ranges(sorted(timed_out))} timed out"  # type: ignore[arg-type]
        if rank is not None:
            summary += f"; rank {rank} is the one the harness stopped"
    else:
        summary = f"NCCL failure without a non-NCCL Python traceback on {who}: {ev.what}"
    if ev.cycle is not None:
        summary += f" (cycle {ev.cycle})"
    if injected:
        fault = marker.get("signal", marker.get("fault"))
        summary += f"; this is the fault the harness injected ({_marker_file(marker)}: {fault})"
    return Triage(
        str(root), category, summary + ".", rank=rank, local_rank=ev.local_rank, cycle=ev.cycle,
        evidence=tuple(evidence), config=config, advice=_advice(category, rank, config, ev, injected),
        injected=injected, symptoms=symptoms, files_scanned=files, unreadable=unreadable,
    )  # fmt: skip


def _launcher_failed(root: Path) -> bool:
    launch = _read_json(root / "launch.json") or {}
    code = launch.get("launcher_exit_code")
    return isinstance(code, int) and code != 0


def _dedupe(tracebacks: list[_Traceback], global_rank) -> list[_Traceback]:
    """The same traceback reaches several files (console capture, per-cycle log, torch
    elastic's summary): keep its earliest, best attributed copy."""
    groups: dict[tuple, list[_Traceback]] = {}
    for tb in tracebacks:
        key = (global_rank(tb.rank, tb.local_rank), tb.cycle, (tb.exception or "")[:300])
        groups.setdefault(key, []).append(tb)
    ranked_exceptions = {(k[2]) for k in groups if k[0] is not None}
    kept = []
    for key, group in groups.items():
        if key[0] is None and key[2] and key[2] in ranked_exceptions:
            continue  # an anonymous copy (the launcher's) of a rank's traceback
        best = min(group, key=lambda tb: _earliest_key(_tb_candidate(tb)))
        if best.time is None:
            best.time = min((tb.time for tb in group if tb.time is not None), default=None)
        kept.append(best)
    return kept


def _config(scanner: _Scanner, facts: _RunFacts, root_item: object | None) -> ParallelConfig:
    root_file = None
    if isinstance(root_item, _Traceback):
        root_file = root_item.start.file
    elif isinstance(root_item, _Event):
        root_file = root_item.line.file
    order = sorted(scanner.config_order, key=lambda f: f != root_file)
    values: dict[str, int] = {}
    source = None
    for name in order:
        for key, (value, lineno) in scanner.configs[name].items():
            if key not in values:
                values[key] = value
                source = source or f"{name}:{lineno}"
    spec = facts.spec
    fallback = {
        "micro_batch_size": spec.get("micro_batch_size"),
        "global_batch_size": spec.get("global_batch_size") or spec.get("global_batch_size_effective"),
        "seq_length": spec.get("seq_length"),
        "tensor_model_parallel_size": spec.get("tp"),
        "pipeline_model_parallel_size": spec.get("pp"),
        "context_parallel_size": spec.get("cp"),
        "data_parallel_size": spec.get("dp"),
        "world_size": spec.get("world"),
        "num_attention_heads": spec.get("num_attention_heads"),
        "num_layers": spec.get("num_layers"),
    }
    for key, value in fallback.items():
        if key not in values and isinstance(value, int) and not isinstance(value, bool):
            values[key] = value
            source = source or "run.json"
    world, tp = values.get("world_size"), values.get("tensor_model_parallel_size")
    pp, cp = values.get("pipeline_model_parallel_size"), values.get("context_parallel_size")
    if "data_parallel_size" not in values and world and tp and pp:
        model = tp * pp * (cp or 1)
        if world % model == 0:
            values["data_parallel_size"] = world // model
    return ParallelConfig(source=source, **values)


def _traceback_triage(
    root: Path, category: str, tb: _Traceback, scanner: _Scanner, found: _Findings, config: ParallelConfig,
    files: tuple[str, ...], unreadable: tuple[str, ...],
) -> Triage:  # fmt: skip
    rank = found.global_rank(tb.rank, tb.local_rank)
    exception = _headline_exception(tb)
    innermost = tb.frames[-1] if tb.frames else None
    location = f"{innermost.path}:{innermost.lineno} in {innermost.function}" if innermost else None
    phase = _phase(tb.frames) if category == "oom" else None
    memory = None
    if category == "oom":
        peak = scanner.memory.get(rank) if rank is not None else None
        memory = _oom_memory(exception or "", peak)
    evidence = [tb.start.evidence()]
    if innermost is not None:
        evidence.append(innermost.line)
    if tb.exceptions:
        for text, line in tb.exceptions:
            if text == exception:
                evidence.append(line.evidence())
                break
    else:
        evidence.append(f"{tb.start.file}: the traceback is cut off before its exception line")
    if config.source and config.source != "run.json":
        evidence.append(f"{config.source}: Megatron arguments table ({config.describe()})")
    symptoms = _symptoms(found, exclude=tb, root_rank=rank)
    who = f"rank {rank}" if rank is not None else (
        f"local rank {tb.local_rank}" if tb.local_rank is not None else "an unidentified process")
    cycle = f" in cycle {tb.cycle}" if tb.cycle is not None else ""
    shown = exception or "a traceback cut off before its exception line"
    if category == "oom":
        summary = f"CUDA out of memory on {who}{cycle}" + (f", during {phase}" if phase else "") + "."
    elif category == "shape":
        summary = f"Shape / divisibility error on {who}{cycle}: {_short(shown)}."
    elif category == "import":
        summary = f"Import error on {who}{cycle}: {_short(shown)}."
    elif category == "exit":  # only teardown tracebacks: the job was stopped from outside
        summary = f"{who[0].upper()}{who[1:]} was stopped by a signal{cycle}: {_short(shown)}."
    elif category == "nccl":
        summary = f"NCCL / collective failure on {who}{cycle} and no non-NCCL traceback on any rank: {_short(shown)}."
    else:
        summary = f"First non-NCCL traceback on {who}{cycle}: {_short(shown)}" + (
            f" at {location}." if location else ".")
    same = sorted({s.rank for s in symptoms if s.rank is not None and s.kind == category})
    later = sorted({s.rank for s in symptoms if s.rank is not None} - set(same))
    if same and category != "exit":
        summary = summary[:-1] + f"; the same error on rank(s) {_rank_ranges(same)}."
    if later and category != "exit":
        summary = summary[:-1] + f"; the failures on rank(s) {_rank_ranges(later)} are downstream symptoms."
    return Triage(
        str(root), category, summary, rank=rank, local_rank=tb.local_rank, cycle=tb.cycle, phase=phase,
        exception=exception, location=location, excerpt=_excerpt(tb, exception), evidence=tuple(evidence),
        config=config, memory=memory, advice=_advice(category, rank, config, tb, False),
        symptoms=symptoms, files_scanned=files, unreadable=unreadable,
    )  # fmt: skip


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _excerpt(tb: _Traceback, exception: str | None) -> tuple[str, ...]:
    """First two and last three frames and the exception: enough to recognise it."""
    def fmt(frame: _Frame) -> list[str]:
        out = [f'  File "{frame.path}", line {frame.lineno}, in {frame.function}']
        if frame.source:
            out.append(f"    {_short(frame.source, 160)}")
        return out

    lines = [_TB_START]
    frames = tb.frames
    if len(frames) > 5:
        for frame in frames[:2]:
            lines += fmt(frame)
        lines.append(f"  ... {len(frames) - 5} frame(s) omitted ...")
        for frame in frames[-3:]:
            lines += fmt(frame)
    else:
        for frame in frames:
            lines += fmt(frame)
    lines.append(_short(exception, 600) if exception else "(cut off before the exception line)")
    return tuple(lines)


def _symptoms(found: _Findings, *, exclude: object, root_rank: int | None) -> tuple[Symptom, ...]:
    """Failures on the other ranks, one per rank and kind, first occurrence kept."""
    tracebacks, events, global_rank = found.tracebacks, found.events, found.global_rank
    found: dict[tuple, tuple[object, Symptom]] = {}
    items: list[tuple[_Candidate, Symptom]] = []
    for tb in tracebacks:
        if tb is exclude:
            continue
        kind = tb.kind
        what = _short(_headline_exception(tb) or "traceback cut off before its exception line", 240)
        rank = global_rank(tb.rank, tb.local_rank)
        items.append((_tb_candidate(tb), Symptom(rank, tb.local_rank, kind, what, tb.start.evidence())))
    for ev in events:
        if ev is exclude:
            continue
        kind = "nccl" if ev.kind.startswith("nccl") else ev.kind
        if kind == "exit" and ev.exitcode is not None:
            name = _signal_name(ev.exitcode)
            if name and signal.Signals.__members__.get(name) in _TEARDOWN_SIGNALS:
                kind = "teardown"
        rank = global_rank(ev.rank, ev.local_rank)
        symptom = Symptom(rank, ev.local_rank, kind, _short(ev.what, 240), ev.line.evidence())
        items.append((_event_candidate(ev, 1), symptom))
    items.sort(key=lambda pair: _earliest_key(pair[0]))
    attributed_nccl = any(s.kind == "nccl" and (s.rank is not None or s.local_rank is not None) for _c, s in items)
    for _cand, symptom in items:
        if root_rank is not None and symptom.rank == root_rank:
            continue
        if attributed_nccl and symptom.kind == "nccl" and symptom.rank is None and symptom.local_rank is None:
            continue  # "terminate called after ... DistBackendError": the ranked lines say it better
        key = (symptom.rank, symptom.local_rank if symptom.rank is None else None, symptom.kind)
        if key not in found:
            found[key] = (_cand, symptom)
    ordered = sorted(
        (s for _c, s in found.values()),
        key=lambda s: (s.rank is None, s.rank if s.rank is not None else -1,
                       s.local_rank if s.local_rank is not None else -1, s.kind),
    )  # fmt: skip
    return tuple(ordered)


# ============================================================================ advice


def _advice(category: str, rank: int | None, config: ParallelConfig, item: object | None, injected: bool) -> str:
    who = f"rank {rank}" if rank is not None else "the failing rank"
    if category == "oom":
        return (
            f"Out of memory on {who}: record the rank, phase, micro/global batch size, sequence length, "
            f"TP/DP/CP/PP ({config.describe()}) and the memory numbers above before changing anything; then "
            "lower the micro batch size or sequence length, raise TP/PP/CP, or enable activation recomputation "
            "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when much memory is reserved but unallocated)."
        )
    if category == "shape":
        return "Shape / divisibility error: " + _shape_check(config)
    if category == "import":
        return (
            "Import error: the wrong worktree, a missing `uv sync` (run `uv sync --extra training --extra dev` "
            "in the Megatron-LM worktree before submitting) or a stale PYTHONPATH; confirm the job does "
            "`cd <MEGATRON_WORKTREE>` before launch and that every node sees the same path."
        )
    if category == "nccl":
        return (
            "NCCL failure without a non-NCCL Python traceback: check the allocation (every node and GPU present), "
            "that MASTER_PORT is reachable from every node, that MASTER_ADDR resolves to the same host everywhere, "
            "and that every rank runs the identical command."
        )
    if category == "exit":
        base = (
            f"{who[0].upper()}{who[1:]} died without a Python traceback: look for the kernel OOM killer "
            "(dmesg, slurmstepd oom_kill), a node or GPU fault (Xid in dmesg), or a signal from outside; "
            "NCCL timeouts on the other ranks that follow are downstream."
        )
        stopped = isinstance(item, _Event) and (
            "cancelled" in item.what or item.exitcode in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP))
        if isinstance(item, _Traceback) or stopped:
            return (
                "The job was stopped from outside (scancel, the Slurm time limit, or a launcher tearing the "
                "workers down after a failure that left no other trace in these logs): check the scheduler's "
                "accounting (sacct -j JOBID) and the launcher log."
            )
        if injected:
            return (
                f"This is the fault the harness injected ({MARKER_NAME}); whether training recovered is what "
                "`nvrx-qual verify` decides. " + base
            )
        return base
    if category == "hang":
        base = (
            "A rank stopped making progress and no rank crashed: find the stuck rank (py-spy dump --pid on "
            "each rank, the last log line of each rank, NCCL's flight recorder) before raising the section "
            "timeouts; a collective waiting on a dead or stopped peer is the usual cause."
        )
        if injected:
            return f"This is the hang the harness injected ({MARKER_NAME}, SIGSTOP). " + base
        return base
    if category == "traceback":
        exception = item.exception if isinstance(item, _Traceback) else None
        text = (
            f"Start from this traceback on {who}: it is the first non-NCCL error; NCCL timeouts on other "
            "ranks after it are downstream symptoms."
        )
        if exception and "CUDA_DEVICE_MAX_CONNECTIONS" in exception:
            text += (
                " CUDA_DEVICE_MAX_CONNECTIONS: set it to 1 on pre-Blackwell GPUs with TP>1 or CP>1 (non-FSDP), "
                "leave it unset or above 1 with Torch-FSDP2 / Megatron-FSDP, 32 with "
                "overlap_moe_expert_parallel_comm."
            )
        return text
    return "Nothing to triage: no traceback, NCCL error, rank exit or rank monitor timeout in the logs."


def _shape_check(config: ParallelConfig) -> str:
    tp, pp = config.tensor_model_parallel_size, config.pipeline_model_parallel_size
    cp, dp, world = config.context_parallel_size, config.data_parallel_size, config.world_size
    heads = config.num_attention_heads
    text = "check WORLD_SIZE = TP × DP × CP × PP and num_attention_heads % TP == 0"
    facts = []
    if world is not None and tp and pp:
        model = tp * pp * (cp or 1)
        if dp:
            verdict = "holds" if world == model * dp else "does NOT hold"
            product = f"TP {tp} × DP {dp} × CP {cp or 1} × PP {pp} = {model * dp}"
            facts.append(f"WORLD_SIZE {world} vs {product}: {verdict}")
        else:
            verdict = "divisible" if world % model == 0 else "NOT divisible"
            facts.append(f"WORLD_SIZE {world} by TP × CP × PP = {model}: {verdict}")
    if heads is not None and tp:
        facts.append(f"num_attention_heads {heads} % TP {tp} = {heads % tp}" + (" (must be 0)" if heads % tp else ""))
    if config.global_batch_size and config.micro_batch_size and dp:
        rem = config.global_batch_size % (config.micro_batch_size * dp)
        if rem:
            facts.append(
                f"global batch {config.global_batch_size} % (micro batch {config.micro_batch_size} × DP {dp}) "
                f"= {rem} (must be 0)"
            )
    if config.num_layers and pp and config.num_layers % pp:
        facts.append(f"num_layers {config.num_layers} % PP {pp} = {config.num_layers % pp} (must be 0)")
    return text + (" (" + "; ".join(facts) + ")." if facts else ".")


# ============================================================================ Markdown


def _md_code(text: str) -> str:
    ticks = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rank_ranges(ranks: Sequence[int]) -> str:
    ranks = sorted(set(ranks))
    out: list[str] = []
    start = prev = None
    for r in ranks + [None]:  # type: ignore[operator]
        if start is None:
            start = prev = r
        elif r is not None and r == prev + 1:
            prev = r
        else:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = r
    return ",".join(out)


_NUMBERS = re.compile(r"\d+")


def render_markdown(triage: Triage) -> str:
    """The "Failure triage" section of a failed run's report."""
    out = ["## Failure triage", "", f"**{triage.category}** — {triage.summary}", ""]
    if triage.category == "none":
        out.append(f"Scanned {len(triage.files_scanned)} file(s).")
        if triage.unreadable:
            out += ["", "Unreadable:"] + [f"- {_md_code(u)}" for u in triage.unreadable]
        return "\n".join(out) + "\n"
    facts = []
    if triage.rank is not None:
        local = f" (local rank {triage.local_rank})" if triage.local_rank is not None else ""
        facts.append(f"- Rank: {triage.rank}{local}")
    elif triage.local_rank is not None:
        facts.append(f"- Local rank: {triage.local_rank}")
    if triage.cycle is not None:
        facts.append(f"- Cycle: {triage.cycle}")
    if triage.phase:
        facts.append(f"- Phase: {triage.phase}")
    if triage.exception:
        facts.append(f"- Exception: {_md_code(_short(triage.exception, 600))}")
    if triage.location:
        facts.append(f"- Where: {_md_code(triage.location)}")
    if triage.memory is not None:
        facts.append(f"- Memory: {triage.memory.describe()}")
    if triage.config.source:
        facts.append(f"- Job shape: {triage.config.describe()} (from {_md_code(triage.config.source)})")
    out += facts
    out += ["", f"**Advice:** {triage.advice}", ""]
    if triage.excerpt:
        out += ["Traceback excerpt:", "", "~~~text", *triage.excerpt, "~~~", ""]
    if triage.symptoms:
        out += ["Failures on other ranks:", "", "| ranks | kind | what | first seen |",
                "|---|---|---|---|"]  # fmt: skip
        groups: dict[tuple[str, str], list[Symptom]] = {}
        for s in triage.symptoms:
            groups.setdefault((s.kind, _NUMBERS.sub("N", s.what)), []).append(s)
        for (kind, _), members in groups.items():
            ranks = [s.rank for s in members if s.rank is not None]
            locals_ = [s.local_rank for s in members if s.rank is None and s.local_rank is not None]
            who = []
            if ranks:
                who.append(_rank_ranges(ranks))
            if locals_:
                who.append("local " + _rank_ranges(locals_))
            if len(ranks) + len(locals_) < len(members):
                who.append("unattributed")
            first_seen = _md_code(_md_cell(_short(members[0].evidence, 200)))
            out.append(f"| {_md_cell(' / '.join(who))} | {kind} | {_md_cell(members[0].what)} | {first_seen} |")
        out.append("")
    if triage.evidence:
        out += ["Evidence:", ""] + [f"- {_md_code(_short(e, 300))}" for e in triage.evidence] + [""]
    unreadable = f"; unreadable: {', '.join(triage.unreadable)}" if triage.unreadable else ""
    out.append(f"Scanned {len(triage.files_scanned)} file(s){unreadable}.")
    return "\n".join(out) + "\n"
