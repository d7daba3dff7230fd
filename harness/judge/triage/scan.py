"""Scan: log lines -> typed records (tracebacks, failure events, configuration values).

A fold over history's line stream (harness.read.history.LineStream): history reads every line
of a log (the one line model, dialect.LogLine; the one time model, the file's dialect.LogClock;
the one cycle rule, history.cycle_opened) and makes its events by the one rule table
(history.RULES: the launcher's rank monitor timeouts and worker exits, NCCL errors, srun exits,
Slurm's OOM kills and cancellations, Megatron's memory reports and shape values, failure signs).
Triage folds the typed events into its records and reassembles only what spans lines, which no
rule can read: Python tracebacks (chained ones too) and torch elastic's ChildFailedError summary
block. torch elastic's error.json comes the same way (history.read_error_file).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from harness.vocab import events as ev_types
from harness.vocab.dialect import LogLine, number
from harness.read.history import LineStream, ReadLine, read_error_file
from harness.judge.triage.model import HANG, OomMemory

_MAX_FRAMES = 256  # a runaway recursion keeps its outermost frames and its innermost ones
_MAX_CHAIN = 16
_MAX_KEPT = 20_000  # tracebacks / failure lines kept after per-file de-duplication
_MAX_RANKS = 1 << 16  # ranks whose memory report is kept


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
    start: LogLine
    base: int  # indentation of the `Traceback` line; the exception line sits at it
    frames: list[_Frame] = field(default_factory=list)
    exceptions: list[tuple[str, LogLine]] = field(default_factory=list)
    time: float | None = None  # UTC epoch seconds
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

    def feed(self, line: LogLine, opens: bool, text: str | None = None) -> list[_Traceback]:
        """`opens`: the line opens a traceback (history.RULES made a TracebackStarted of it)."""
        text = line.body if text is None else text
        done: list[_Traceback] = []
        stripped = text.strip()
        if self._state == "idle":
            if opens:
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
            if self._state == "chain" and opens:
                self._state = "frames"
                return done
            done.append(self._finish())
            if opens:
                self._start(line, text)
            return done
        # frames
        assert self.current is not None
        if not stripped:
            return done
        if opens:  # the previous one was cut off
            done.append(self._finish())
            self._start(line, text)
            return done
        frame = _FRAME_RE.match(text)
        if frame:
            frames = self.current.frames
            frames.append(_Frame(frame.group(2), number(frame.group(3), "count") or 0, frame.group(4).strip(), "",
                                 line.evidence()))
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

    def _start(self, line: LogLine, text: str) -> None:
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
    """oom | shape | import | traceback (root-cause kinds) or collective | teardown (downstream)
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
        return "collective"
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
    return OomMemory(gpu=number(gpu.group(1), "rank") if gpu else None, peak=peak, **values)


# ============================================================================ other failure lines


@dataclass(frozen=True)
class _Event:
    """One failure line that is not a Python traceback: an NCCL error, a rank monitor
    timeout, or a process exit reported by a launcher/scheduler."""

    kind: str  # collective | collective-weak | hang | exit
    what: str
    line: LogLine
    time: float | None  # UTC epoch seconds
    rank: int | None
    local_rank: int | None
    cycle: int | None
    file_rank: int
    exitcode: int | None = None
    secondary: bool = False  # torch elastic listed it under "Failures:", not as the root cause


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
    last_stamped: LogLine | None = None
    waiting: list[_Traceback] = field(default_factory=list)  # tracebacks still without a time


@dataclass
class _SummaryEntry:
    section: str
    first: LogLine
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

    def feed(self, line: LogLine, opens: bool) -> bool:
        """True when the line belongs to a block (and is consumed); `opens`: it opens a traceback."""
        text = line.body
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
            entry.tracebacks.extend(entry.builder.feed(line, opens))
            return True
        match = _SUMMARY_FIELD.match(text)
        if not match:
            self._flush()
            self._section = None
            return False
        name, value = match.group(1), match.group(2).strip()
        entry.fields[name] = value
        if name == "traceback" and opens:  # `traceback : Traceback (most recent call last):`
            entry.builder = _TracebackBuilder(base=len(text) - len(text.lstrip()))
            entry.builder.feed(line, True, _TB_START)
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
    utc_offset_s: float  # local minus UTC: what turns a writer's local stamp into UTC
    anchor: tuple[int, int] | None = None  # (year, month) of the run: glog stamps before a log's first full date are near it


class _Scanner:
    def __init__(self, root: Path, ctx: _Context) -> None:
        self.root = root
        self.ctx = ctx
        self.tracebacks: list[_Traceback] = []
        self.events: list[_Event] = []
        self.failure_signs: list[LogLine] = []
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
                    self._fold_error_file(path, rel, file_rank)
                else:
                    lines = LineStream(path, rel, utc_offset_s=self.ctx.utc_offset_s, anchor=self.ctx.anchor)
                    if lines.binary:
                        continue  # tensorboard events and the like; a text log with junk is still read
                    self._fold(lines, file_rank)
                self.scanned.append(rel)
            except OSError as err:
                self.unreadable.append(f"{rel}: {err.strerror or err}")

    def _fold(self, lines: LineStream, file_rank: int) -> None:
        """History's lines of one file into triage's records: each writing process's lines
        reassembled into its tracebacks, torch elastic's summary block read whole, every other
        line's events folded (_line_events)."""
        streams: dict[tuple, _Stream] = {}
        summary = _SummaryParser(lambda entry: self._finish_summary(entry, lines, file_rank))
        for read in lines:
            line = read.line
            if lines.numbered_by_launcher:
                for event in read.launcher:
                    if isinstance(event, ev_types.RendezvousJoined) and event.world is not None:
                        self.world_of_nodes = event.world
            stream = streams.get(line.key)
            if stream is None:  # one per writing process; a log naming more shares the last one
                stream = streams[line.key if len(streams) < _MAX_RANKS else ("more processes",)] = (
                    streams.get(("more processes",)) or _Stream())
            if read.stamped:  # (a stamp with an impossible date dates nothing and still ends the time a traceback
                stream.last_stamped = line  # before it could take)
                if stream.waiting and line.time is not None:
                    for tb in stream.waiting:  # an upper bound beats no time at all
                        tb.time = line.time
                    stream.waiting.clear()
            opens = read.opens_traceback
            if summary.feed(line, opens):
                continue
            for tb in stream.builder.feed(line, opens):
                self._keep_traceback(tb, stream, file_rank)
            if stream.builder.current is not None and stream.builder.current.start is line:
                stream.builder.current.time = self._stream_time(stream)
            self._line_events(read, stream, file_rank)
        for stream in streams.values():
            for tb in stream.builder.close():
                self._keep_traceback(tb, stream, file_rank)
        summary.close()

    # --------------------------------------------------------------- time
    def _stream_time(self, stream: _Stream) -> float | None:
        return stream.last_stamped.time if stream.last_stamped is not None else None

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

    def _finish_summary(self, entry: _SummaryEntry, lines: LineStream, file_rank: int) -> None:
        fields = entry.fields
        rank_match = _SUMMARY_RANK.match(fields.get("rank", ""))
        rank = number(rank_match.group(1), "rank") if rank_match else None
        local = number(rank_match.group(2), "rank") if rank_match else None
        exit_match = _SUMMARY_EXIT.match(fields.get("exitcode", ""))
        exitcode = number(exit_match.group(1), "exit_code") if exit_match else None
        when = lines.utc(fields["time"]) if fields.get("time") else None
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

    def _fold_error_file(self, path: Path, rel: str, file_rank: int) -> None:
        """torch elastic's per-worker error.json, as history reads it: the worker's traceback."""
        found_file = read_error_file(path, rel)
        if found_file is None:
            return
        builder = _TracebackBuilder()
        found: list[_Traceback] = []
        for read in found_file.lines:
            found.extend(builder.feed(read.line, read.opens_traceback))
        found.extend(builder.close())
        for tb in found:
            tb.time, tb.source, tb.local_rank = found_file.when, "error-file", found_file.local_rank
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

    def _failure_sign(self, line: LogLine) -> None:
        if len(self.failure_signs) < _MAX_KEPT:
            self.failure_signs.append(line)

    # --------------------------------------------------------------- one-line kinds: history's events
    def _line_events(self, read: ReadLine, stream: _Stream, file_rank: int) -> None:
        """The fold: the line's events (history's launcher rules, then its failure-line rules,
        events.DiagnosticEvent) into triage's records."""
        line, diagnostic, launcher, at = read.line, read.diagnostic, read.launcher, read.launcher_at
        text = line.body
        when = self._stream_time(stream)
        for event in diagnostic:  # a collective's error first (as the line is read: before its launcher's word)
            if isinstance(event, ev_types.CollectiveFailed):
                rank = line.rank if line.rank is not None else event.named_rank
                self._add_event(_Event("collective-weak" if event.weak else "collective", event.what, line, when, rank,
                                       line.local_rank, line.cycle, file_rank))
        for event in launcher:
            if isinstance(event, ev_types.RankTimeout):
                rank = event.rank if event.rank is not None else line.rank
                local = event.local_rank if event.local_rank is not None else line.local_rank
                what = "rank monitor timeout: " + text[at:].strip()
                self._add_event(_Event(HANG, what, line, when, rank, local, line.cycle, file_rank))
            elif isinstance(event, ev_types.WorkerFailed):
                code = event.exitcode
                self._add_event(_Event("exit", _exit_what(code), line, when, None, event.local_rank,
                                       line.cycle, file_rank, code))
                self._failure_sign(line)
        for event in diagnostic:
            if isinstance(event, ev_types.TaskExited):
                what = f"srun: task {event.tasks} on {event.host}: {event.status}"
                self._exit(line, what, when, file_rank, event.exitcode)
            elif isinstance(event, ev_types.HostOomKilled):
                what = "host out of memory: slurmstepd reported an oom_kill event (the kernel OOM killer, not CUDA)"
                self._exit(line, what, when, file_rank, -9)
            elif isinstance(event, ev_types.StepCancelled):
                why = (event.reason or "").strip()
                self._exit(line, "Slurm cancelled the step" + (f" due to {why.lower()}" if why else ""), when,
                           file_rank, -15)
            elif isinstance(event, ev_types.FailureSign):
                self._failure_sign(line)
            elif isinstance(event, ev_types.ConfigValue):
                self._config_value(line, event.name, event.value)
            elif isinstance(event, ev_types.MemoryReport) and len(self.memory) < _MAX_RANKS:
                peak = f"max allocated {event.max_allocated} {event.unit}"
                if event.max_reserved:
                    peak += f", max reserved {event.max_reserved} {event.unit}"
                where = f"{line.file}:{line.lineno}"
                self.memory[event.rank] = (f"{peak} (Megatron's report after {_clip_number(event.iterations)} "
                                           f"iterations, {where})")

    def _exit(self, line: LogLine, what: str, when: float | None, file_rank: int, exitcode: int | None) -> None:
        """A scheduler's word that a task or step ended (srun, slurmstepd)."""
        self._add_event(_Event("exit", what, line, when, None, None, line.cycle, file_rank, exitcode))
        self._failure_sign(line)

    def _config_value(self, line: LogLine, key: str, value: int) -> None:
        per_file = self.configs.get(line.file)
        if per_file is None:
            per_file = self.configs[line.file] = {}
            self.config_order.append(line.file)
        per_file.setdefault(key, (value, line.lineno))


def _clip_number(digits: str) -> str:
    return digits if len(digits) <= 24 else digits[:12] + "..."

