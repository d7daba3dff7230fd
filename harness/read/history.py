"""Run directory -> Timeline of typed events (harness.vocab.events).

Streaming and bounded: logs are read in binary, in large chunks, from the offset reached by
the previous read; one pass of an Aho-Corasick automaton over each chunk (the screen, derived
from RULES) finds the lines that hold a rule's keyword, and only those are decoded and
matched, save lines (one or more per checkpoint) in bulk without decoding; iteration lines
are folded into per-start summaries (first, last, anomalies) instead of being kept one by one. A
`HistoryReader` can be polled while the run is still writing: each `poll()` parses only the
bytes appended since the last one and keeps incomplete last lines for later.

Sources (docs/contracts.md, "The run directory"):
- application lines: `logs/*_cycle<N>.*` (one start per file, cycle N), else any other log
  (a user's single log, cut into starts at its argument tables / `FT: initialized` /
  checkpoint-load lines), else `logs/launcher.log` or `logs/console.log` when those carry them;
- launcher lines: `logs/launcher.log`, else `logs/console.log`, else any other log;
- `fault_injected.json`, `run.json`, `launch.json`, `cycle_infos/`, the checkpoint directory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
import time
from collections import deque
from datetime import datetime, timezone
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq, gt, itemgetter, lt
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ahocorasick_rs import BytesAhoCorasick, Implementation, MatchKind

from harness.vocab import events as ev
from harness.safe import safeio
from harness.vocab import tiers
from harness.vocab.dialect import CYCLE_INFO_RE as _CYCLE_INFO_RE
from harness.vocab.dialect import MAX_UTC_OFFSET_S, RunDirError, check_readable_dir, parse_iso_utc, utc_offset_problem
from harness.vocab.dialect import HEARTBEAT_MISSED_RE, OUT_OF_SECTION_RE, SECTION_TIMEOUT_RE
from harness.vocab.dialect import PROFILING_RE, RANKMON_RE, RENDEZVOUS_JOINED_RE, WORKER_FAILED_RE, WORKLOAD_RE
from harness.vocab.dialect import LogClock, LogLine, decimal, megatron_datetime, number, read_line, record_number
from harness.vocab.dialect import attempt_of_path, cycle_of_name, maybe_stamped
from harness.vocab.dialect import classify_logs as _classify_logs
from harness.vocab.dialect import epoch as _epoch
from harness.vocab.dialect import strip_prefix as _strip_prefix
from harness.vocab.events import Src, clip
from harness.vocab.faults import DEFAULT_FAULT_AT, PlannedFault, schedule_from_json
from harness.vocab.layout import (LOCAL_SHARD_PATTERN, MARKER_NAME, TRACKER_NAME, is_megatron_iter_name, is_valid_run_id,
                            marker_index, parse_iter_name, read_tracker_file)
from harness.read.optimizer_record import moment_keys, read_dcp_metadata, read_optimizer_record

CHUNK_SIZE = 1 << 20  # small enough to stay in a core's cache while the screen, the counts and the lanes pass over it
MAX_PENDING_LINE = 1 << 20  # a "line" longer than this (binary junk) is cut, to bound memory
MAX_BAD_ITERATIONS = 64  # per start: skipped / NaN iteration lines kept as evidence
MAX_MARKER_RECORDS = 64  # one record per injection: more is junk  # time zones span UTC-12..UTC+14
DCP_METADATA_LIMIT = 1 << 30  # a checkpoint's .metadata lists keys: far smaller than this
MAX_ARGS_LINES = 4000  # an arguments table that never ends is closed after this many lines
MAX_IGNORED_NOTES = 10  # checkpoint-dir entries named in a note each; the rest are counted

ITER_KEY = b" iteration "

# ---- iteration lines (docs/megatron.md, "Log lines"): the bulk of a log, folded apart from the rules below
_ITER_RE = re.compile(r"iteration +(\d+)/ *(\d+) \|")
_ITER_RE_B = re.compile(rb"iteration +\d+/ *\d+ \|")
_CONSUMED_RE = re.compile(r"consumed samples: +(\d+)")
_LOSS_RE = re.compile(r"lm loss: ([-+0-9.eEnaifNA]+)")
_SKIPPED_RE = re.compile(r"number of skipped iterations: +(\d+)")
_NAN_RE = re.compile(r"number of nan iterations: +(\d+)")
_BAD_SKIPPED_RE = re.compile(rb"skipped iterations: *[1-9]")
_BAD_NAN_RE = re.compile(rb"nan iterations: *[1-9]")
# Cheap screen before those regexes: a region whose every counter field reads "0 | ... 0 |" has no bad step.
_COUNTER_FIELD = b"number of skipped iterations:"
_COUNTERS_ZERO = b"number of skipped iterations:   0 | number of nan iterations:   0 |"
_ARGS_FOOTER_RE = re.compile(r"-{3,} end of arguments -{3,}")
_ARG_LINE_RE = re.compile(r"\s*([A-Za-z_]\w*) \.* ?(?: (.*))?$")
_CYCLE_TAG_RE = re.compile(r"\[Cycle (\d+)\]")

# Phases of one application start, in the order Megatron prints them. A line that opens a
# phase the current start has already reached, or passed, begins the next start (single logs
# only). The load and the model-built line are not ordered: Megatron-LM loads before it prints
# the model-built line, Megatron-Bridge after; neither passes the other (_REOPENED_BY).
PH_NONE, PH_ARGS, PH_FT, PH_LOAD, PH_BUILT, PH_ITER, PH_DONE = -1, 0, 1, 2, 3, 4, 5
_PHASES = (PH_ARGS, PH_FT, PH_LOAD, PH_BUILT, PH_ITER, PH_DONE)
_UNORDERED = {(PH_LOAD, PH_BUILT), (PH_BUILT, PH_LOAD)}
# per opening phase: the phases (a bit each) whose presence in the current start means it has been reached or passed
_REOPENED_BY = {p: sum(1 << q for q in _PHASES if q >= p and (p, q) not in _UNORDERED) for p in _PHASES}


# ---------------------------------------------------------------- the line rules


@dataclass(frozen=True)
class LineRule:
    """One kind of log line, and everything the reader derives from it.

    - `keyword`: a substring every such line holds. The screen (one automaton over the raw
      data, whatever the number of keywords) and the dispatch's cheap test both come from it:
      a line that holds no rule's keyword is never decoded.
    - `pattern`: matched (re.search) on the line's body, prefixes peeled. Rules are tried in
      table order; the first whose keyword and pattern match takes the line.
    - `event`: the event type the line makes. Without `make`, the event is built from the
      pattern's named groups, each an event field of the same name: a count, rank, cycle or
      iteration is range-checked (dialect.number), and a value out of range makes no event
      unless the field accepts None.
    - `make`: (parser, match, body, src, rank) -> the event(s), for lines that need more.
    - `phase`: the phase of an application start the line belongs to; `opens`: the line opens
      that phase (seen again, it begins the next start of a single log).
    - `stamp`: which stamp gives the event its time: "line" (the stamp that starts the line),
      "datetime" (Megatron's `] datetime:`), or None.
    - `fast`: one of the lines a run prints at every checkpoint: once a start trains, they are
      screened on the raw bytes by their phrase (the pattern's words up to " checkpoint"),
      matched in bulk (the pattern itself, on the raw line), counted and kept raw, and decoded
      only if kept.
    - `alternatives`: other substrings, any of which lets the line through instead of `keyword`
      (failure lines only, which have more than one wording).

    A rule whose event is an events.DiagnosticEvent (a failure line: NCCL errors, srun exits,
    memory reports, ...) is read for triage only: the reader's screens and dispatch leave it
    out, and `diagnostic_matches` tries each such rule on every line triage reads.
    """

    keyword: str
    pattern: re.Pattern
    event: type
    make: object = None  # Callable[[LogParser, re.Match, str, Src, int | None], ev.Event | tuple | None]
    phase: int = PH_NONE
    opens: bool = False
    stamp: str | None = None
    fast: bool = False
    alternatives: tuple[str, ...] = ()

    @property
    def app(self) -> bool:
        return issubclass(self.event, ev.AppEvent)

    @property
    def diagnostic(self) -> bool:
        return issubclass(self.event, ev.DiagnosticEvent)


def _rule(keyword: str, pattern: str, event: type, make: object = None, **kw) -> LineRule:  # noqa: ANN001
    return LineRule(keyword, re.compile(pattern), event, make, **kw)


# ---- factories of the lines that need more than their named groups


def _arguments(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> "_ArgsBuilder":
    """Megatron's arguments table: the lines after this header belong to it (LogParser._args_block)."""
    if p._args is not None:
        p._close_args()
    p._args = _ArgsBuilder(rank, src)
    return p._args


def _profiling(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.ProfilingEvent | None:
    if (cycle := p._num(m.group(1), "cycle", src)) is None:
        return None
    name = m.group(2)
    utc = _epoch(*map(int, m.groups()[3:9]), m.group(10))
    local = p._stamp(b)
    if local is not None and utc is not None and len(p.offset_pairs) < 16:
        p.offset_pairs.append((local, utc))
    return ev.ProfilingEvent(src=src, ts=utc, ts_utc=True, cycle=cycle, name=name, node=m.group(3))


def _joined(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.RendezvousJoined | None:
    joined_round = p._num(m.group("round"), "cycle", src)
    world = p._num(m.group("world"), "world", src)
    if joined_round is not None:
        return ev.RendezvousJoined(src=src, ts=p._stamp(b), cycle=joined_round, round=joined_round, world=world)
    if m.group("round") is None and "has joined the rendezvous" in b:
        return ev.RendezvousJoined(src=src, ts=p._stamp(b), cycle=p.launcher_cycle, round=None, node=m.group("node"),
                                   world=world)
    return None  # a round no run reaches


def _timeout(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.RankTimeout:
    if m.re is SECTION_TIMEOUT_RE:
        kind, section, elapsed, timeout = "section", m.group(1), m.group(2), m.group(3)
    elif m.re is OUT_OF_SECTION_RE:
        kind, section, elapsed, timeout = "out_of_section", None, m.group(1), m.group(2)
    else:
        kind, section, elapsed, timeout = "heartbeat", None, None, m.group(2)
    rank = local_rank = node = None
    if who := RANKMON_RE.search(b):  # 0.4.1: the monitored global rank
        node, rank = who.group(1), p._num(who.group(2), "rank", src)
    elif who := WORKLOAD_RE.search(b):  # 0.6+: [node] [workload:<rank>(<local rank>) ...]
        node, rank, local_rank = who.group(1), p._num(who.group(2), "rank", src), p._num(who.group(3), "rank", src)
    tag = _CYCLE_TAG_RE.search(b)
    cycle = p._num(tag.group(1), "cycle", src) if tag else p.launcher_cycle
    return ev.RankTimeout(src=src, ts=p._stamp(b), cycle=cycle, kind=kind, section=section, rank=rank,
                          local_rank=local_rank, node=node, timeout=p._num(timeout, "seconds", src, decimal),
                          elapsed=p._num(elapsed, "seconds", src, decimal) if elapsed is not None else None)


def _ft_timeout(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.FtTimeoutElapsed:
    who = RANKMON_RE.search(b)
    return ev.FtTimeoutElapsed(src=src, ts=p._stamp(b), cycle=p.launcher_cycle,
                               rank=p._num(who.group(2), "rank", src) if who else None)


def _attempts_left(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.LauncherEvent:
    if m.group(1) == "0":
        return ev.RestartsExhausted(src=src, ts=p._stamp(b), cycle=p.launcher_cycle)
    return ev.WorkerGroupFailed(src=src, ts=p._stamp(b), cycle=p.launcher_cycle, state="FAILED",
                                attempts_left=p._num(m.group(1), "count", src),
                                max_restarts=p._num(m.group(2), "count", src))


_AGENT_FAILED = ("Agent .run() raised", "terminal worker-group failure", "Some rank(s) exited with non-zero",
                 "Agent run ended with exception")
_AGENT_EXIT_RE = re.compile(r"Agent(?: exits with exit code =|'s exit code =) (-?\d+)")


def _agent(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> tuple[ev.LauncherEvent, ...]:
    """The agent's last words: one line may say it succeeded, its exit code and why it failed."""
    ts, cycle, out = p._stamp(b), p.launcher_cycle, []
    if "Agent .run() is OK" in b:
        out.append(ev.LauncherSucceeded(src=src, ts=ts, cycle=cycle))
    if (code := _AGENT_EXIT_RE.search(b)) and (value := p._num(code.group(1), "exit_code", src)) is not None:
        out.append(ev.LauncherExit(src=src, ts=ts, cycle=cycle, code=value))
    if any(k in b for k in _AGENT_FAILED):
        out.append(ev.LauncherFailed(src=src, ts=ts, cycle=cycle, message=clip(b, 160)))
    if "must not be restarted" in b and "progress" in b:
        out.append(ev.NoProgressStop(src=src, ts=ts, cycle=cycle, message=clip(b, 160)))
    return tuple(out)


def _np_load(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.NonPersistentLoadStarted | None:
    """A load of Megatron's non-persistent tier (harness.vocab.tiers): the line names no directory."""
    if (iteration := p._num(m.group(1), "iteration", src)) is None:
        return None
    return ev.NonPersistentLoadStarted(src=src, rank=rank, iteration=iteration, path=tiers.NON_PERSISTENT_SUBDIR)


def _from_random(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.StartedFromRandom | None:
    """No tracker to load from: a start from random, unless the missing tracker is the
    non-persistent tier's (harness.vocab.tiers), after which Megatron loads the persistent one."""
    if tiers.is_non_persistent_path(b) or any(f"{d.rstrip('/')}/" in b for d in p.np_dirs):
        return None
    return ev.StartedFromRandom(src=src, rank=rank)


_INPROCESS_RE = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\] rank=(?P<rank>\d+) "
                           r"(?P<name>[a-z]+_ex): (?P<text>.*)$")


def _inprocess(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.InprocessEvent:
    """NVRx's in-process Wrapper line (harness.vocab.tiers): its own UTC stamp, the rank it names."""
    utc = _epoch(*map(int, m.groups()[0:6]), m.group(7))
    return ev.InprocessEvent(src=src, ts=utc, ts_utc=utc is not None, rank=rank, name=m.group("name"),
                             wrapped_rank=p._num(m.group("rank"), "rank", src), text=clip(m.group("text"), 200))


_IDENTITY_FOUND_RE = re.compile(r"(?P<version>\S+) sha256 (?P<sha>[0-9a-f]{64}|\?) files (?P<files>\d+|\?) at "
                                r"(?P<path>.+?)\s*$")
_IDENTITY_OTHER_RE = re.compile(r"(?P<state>not found|unknown) \((?P<why>.*)\)\s*$")


def _launcher_imported(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.LauncherImported | None:
    """The nemesis's launcher identity line (harness.nemesis.identity writes it): the NVRx a node's
    first worker finds; a version that is no version, a digest that is no sha256 is no event."""
    worker = p._num(m.group("rank"), "rank", src)
    if worker is None:
        return None
    rest = m.group("rest")
    if found := _IDENTITY_FOUND_RE.match(rest):
        version = found.group("version")
        files = found.group("files")
        return ev.LauncherImported(
            src=src, rank=rank, worker_rank=worker, found=True,
            version=version if re.fullmatch(r"[0-9][0-9A-Za-z.+_-]{0,63}", version) else None,
            sha256=found.group("sha") if found.group("sha") != "?" else None,
            files=p._num(files, "count", src) if files != "?" else None, path=clip(found.group("path"), 400))
    if other := _IDENTITY_OTHER_RE.match(rest):
        return ev.LauncherImported(src=src, rank=rank, worker_rank=worker,
                                   found=False if other.group("state") == "not found" else None,
                                   why=clip(other.group("why"), 200))
    return None


def _no_progress(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.NoProgressStop:
    return ev.NoProgressStop(src=src, ts=p._stamp(b), cycle=p.launcher_cycle, message=clip(b, 160))


def _tail(text: str, start: int, limit: int = 200) -> str:
    out = text[start:].strip()
    return out if len(out) <= limit else out[:limit] + "..."


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
_NCCL_RANK = re.compile(r"\bRank (\d+)\]")


def _collective(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.CollectiveFailed | None:
    """What an NCCL error line says (the strongest wording first); an `NCCL WARN` alone is weak."""
    what = None
    for pattern, label in _NCCL_STRONG:
        found = pattern.search(b)
        if found:
            what = label if label is not None else (
                found.group(0) if pattern is _NCCL_NAME else "NCCL error: " + _tail(b, found.start()))
            break
    weak = what is None
    if weak:
        if "NCCL WARN" not in b:
            return None
        what = "NCCL WARN " + _tail(b, b.index("NCCL WARN") + 10)
    named = _NCCL_RANK.search(b)
    return ev.CollectiveFailed(src=src, what=what, weak=weak,
                               named_rank=p._num(named.group(1), "rank", src) if named else None)


_WORLD_LINE_KEYS = {
    "world": "world_size", "data-parallel": "data_parallel_size", "context-parallel": "context_parallel_size",
    "tensor-model-parallel": "tensor_model_parallel_size", "pipeline-model-parallel": "pipeline_model_parallel_size",
}  # fmt: skip
_WORLD_LINE_RE = re.compile(
    r"(world|data-parallel|context-parallel|tensor-model-parallel|pipeline-model-parallel) size: (\d+)")


def _world_sizes(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> tuple[ev.ConfigValue, ...]:
    """Megatron's `using world size: N, data-parallel size: N, ...`: one value per size it names."""
    return tuple(ev.ConfigValue(src=src, name=_WORLD_LINE_KEYS[name], value=value)
                 for name, text in _WORLD_LINE_RE.findall(b) if (value := number(text, "count")) is not None)


# Settings read outside Megatron's arguments table (events.SettingShown), by name: the plain
# optimizer's evidence (optimizer_reload) and the dropout (a workload's determinism). Only
# these: Megatron-Bridge's configuration summary has dozens of lines, and the reader keeps a
# bounded number of events of a kind.
SHOWN_SETTINGS = ("use_distributed_optimizer", "hidden_dropout", "attention_dropout")
_SETTING_VALUE_RE = re.compile(r"[\w.+-]{1,64}")


def _setting(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.SettingShown | None:
    """A SHOWN_SETTINGS value printed outside the arguments table; a value that is no single word is none."""
    value = m.group("value")
    if not _SETTING_VALUE_RE.fullmatch(value):
        return None
    return ev.SettingShown(src=src, rank=rank, name=m.group("name"), value=value)


def _save_timed(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.SaveTimed | None:
    """megatron-core's `save-checkpoint` timer: the slowest rank's milliseconds (the max of
    `(min, max)`, or the one value of --timing-log-option max), as seconds; a value no save takes is none."""
    ms = decimal(m.group("max") or m.group("only"), "seconds")
    low = decimal(m.group("min"), "seconds") if m.group("min") is not None else None
    if ms is None or (m.group("min") is not None and (low is None or low > ms)):
        return None
    return ev.SaveTimed(src=src, rank=rank, seconds=ms / 1000.0)


def _memory(p: "LogParser", m: re.Match, b: str, src: Src, rank: int | None) -> ev.MemoryReport | None:
    """Megatron's memory report in MB, Megatron-Bridge's in GB (whose values a CPU run never
    has: torch.cuda.memory_stats() is empty there, so the line ends after its unit)."""
    named = p._num(m.group("rank"), "rank", src)
    peak = m.group("max_allocated")
    if named is None or peak is None or decimal(peak, "megabytes") is None:
        return None
    reserved = m.group("max_reserved")
    return ev.MemoryReport(src=src, rank=named, iterations=m.group("iterations"), max_allocated=peak,
                           max_reserved=reserved if reserved is not None and decimal(reserved, "megabytes") is not None
                           else None, unit=m.group("unit"))


CONFIG_KEYS = (
    "micro_batch_size", "global_batch_size", "seq_length", "tensor_model_parallel_size",
    "pipeline_model_parallel_size", "context_parallel_size", "data_parallel_size", "world_size",
    "num_attention_heads", "num_layers",
)  # fmt: skip  (the values of the job's shape triage reports)


# The table: application lines (docs/megatron.md, "Log lines"), then launcher lines (NVRx
# 0.4.1 and 0.6+/0.7.0; the patterns triage matches too live in harness.vocab.dialect). Adding a
# kind of line is adding an entry here (and its event type in harness.vocab.events).
RULES: tuple[LineRule, ...] = (
    # the nemesis's own lines, before the checkpoint lines: they say "after checkpoint iteration N"
    _rule("[nemesis]", r"\[nemesis\] rank (?P<target_rank>\d+) injecting (?P<signal>[\w-]+) after checkpoint "
          r"iteration (?P<iteration>\d+)", ev.NemesisInjected),
    _rule("nemesis: requested", r"nemesis: requested fault [\w-]+ on rank \d+ never happened: (?P<reason>.*)", ev.NemesisNeverFired),
    _rule("launcher identity", r"\[nemesis\] rank (?P<rank>\d+) launcher identity: nvidia_resiliency_ext (?P<rest>.*)$",
          ev.LauncherImported, _launcher_imported),
    # saves, as many as checkpoints: the fast path; in the order the screen tries them
    _rule("checkpoint", r"successfully saved checkpoint (?:from|at) iteration +(?P<iteration>\d+) to "
          r"(?P<path>.+?)(?: \[|$)", ev.SaveCommitted, phase=PH_ITER, stamp="line", fast=True),
    _rule("checkpoint", r"scheduled an async checkpoint save at iteration +(?P<iteration>\d+) to (?P<path>\S+)",
          ev.SaveScheduled, phase=PH_ITER, stamp="line", fast=True),
    _rule("checkpoint", r"saving checkpoint at iteration +(?P<iteration>\d+) to (?P<path>.+?) in \S+ format",
          ev.SaveStarted, phase=PH_ITER, stamp="line", fast=True),
    # loads
    _rule("checkpoint", r"loading distributed checkpoint from (?P<path>.+?) at iteration (?P<iteration>\d+)",
          ev.LoadStarted, phase=PH_LOAD, opens=True),
    _rule("checkpoint", r"successfully loaded checkpoint from (?P<path>.+?)(?: \[[^\]]*\])? at iteration "
          r"(?P<iteration>\d+)", ev.CheckpointLoaded, phase=PH_LOAD),
    _rule("checkpoint", tiers.NP_LOAD_RE.pattern, ev.NonPersistentLoadStarted, _np_load, phase=PH_LOAD, opens=True),
    _rule("checkpoint", re.escape(tiers.NP_OLDER_TEXT), ev.NonPersistentOlder),
    # (also printed for a missing *non-persistent* tracker, followed by "will not load any non-persistent
    # checkpoint": no start from random, Megatron goes on to the persistent tier; docs/megatron.md)
    _rule("checkpoint", r"could not find the metadata file", ev.StartedFromRandom, _from_random, phase=PH_LOAD,
          opens=True),
    # Megatron's local checkpoints and NVRx's LocalCheckpointManager (harness.vocab.tiers); Megatron's own line is
    # lower case, NVRx's root-logger line upper case: the save patterns above take neither ("saved local")
    _rule("checkpoint", r"(?<![A-Za-z])successfully saved local checkpoint from iteration +(?P<iteration>\d+)",
          ev.LocalSaveCommitted, phase=PH_ITER, stamp="line"),
    _rule("checkpoint", r"Successfully saved local checkpoint from iteration (?P<iteration>\d+)", ev.LocalSaveValidated),
    _rule("checkpoint", r"Failure during saving local checkpoint from iteration (?P<iteration>\d+) \(last valid "
          r"iteration is (?:(?P<last_valid>\d+)|-1)\)", ev.LocalSaveFailed),
    _rule("Renaming", r"Renaming \S+\.dirty\.pt to (?P<path>\S*" + LOCAL_SHARD_PATTERN + r")\s*$", ev.LocalCopyWritten),
    _rule("Finish loading", r"Finish loading \((?P<iteration>\d+), (?P<owner>\d+),", ev.LocalCopyRead),
    _rule("does not exist!", r"File (?P<path>\S*" + LOCAL_SHARD_PATTERN + r") does not exist!", ev.LocalCopyMissing),
    _rule("No replicated copies", r"No replicated copies for id=\((?P<iteration>\d+), (?P<owner>\d+),", ev.LocalCopyMissing),
    # NVRx's in-process Wrapper (inprocess/wrap.py through utils.log_exc)
    _rule("_ex: ", _INPROCESS_RE.pattern, ev.InprocessEvent, _inprocess),
    _rule("checkpoint", r"> using checkpoint value \S+ for (?P<name>.+?)\s*$", ev.SchedulerValueLoaded, phase=PH_LOAD),
    _rule("checkpoint", r"Overwriting old incomplete", ev.SaveOverwrite, phase=PH_ITER, stamp="line"),
    _rule("No space left", r"No space left on device", ev.NoSpaceLeft),
    _rule("ptimizer", r"Loading distributed optimizer sharded state of type (?P<kind>\S+)", ev.OptimizerLoaded,
          phase=PH_LOAD),
    # megatron-core's own record of the optimizer it builds (Megatron-LM and Megatron-Bridge): the plain
    # optimizer's evidence where no arguments table is printed (Megatron-Bridge)
    _rule("Setting up optimizer", r"Setting up optimizer with config \w*OptimizerConfig\(.*?\b(?P<name>"
          r"use_distributed_optimizer)=(?P<value>\w+)", ev.SettingShown, _setting),
    # Megatron-Bridge's configuration summary: a setting where it differs from megatron-core's default
    _rule("(Mcore default: ", r"^\s*(?P<name>" + "|".join(SHOWN_SETTINGS) + r"): (?P<value>\S+)\s+\(Mcore default: ",
          ev.SettingShown, _setting),
    _rule("ptimizer", r"\[after model, optimizer, and learning rate scheduler are built\]", ev.ModelBuilt,
          phase=PH_BUILT, opens=True, stamp="datetime"),
    _rule("dataloaders are built", r"\[after dataloaders are built\]", ev.DataloadersBuilt, phase=PH_BUILT,
          stamp="datetime"),
    # megatron-core's timer of a blocking save (printed by the last rank after it): the time of a save whose
    # lines carry no stamp (Megatron-Bridge's); not the non-persistent tier's `save-checkpoint-non-persistent`
    _rule("save-checkpoint ", r"^\s*save-checkpoint \.*: (?:\((?P<min>[\d.]+), (?P<max>[\d.]+)\)|(?P<only>[\d.]+))\s*$",
          ev.SaveTimed, _save_timed, phase=PH_ITER),
    _rule("arguments ---", r"-{3,} arguments -{3,}", ev.ArgumentsPrinted, _arguments, phase=PH_ARGS, opens=True),
    _rule("FT: initialized", r"FT: initialized", ev.WorkersInitialized, phase=PH_FT, opens=True, stamp="line"),
    _rule("training is done", r"\[after training is done\]", ev.TrainingDone, phase=PH_DONE, stamp="datetime"),
    # the rank monitors
    _rule("Timeout is", SECTION_TIMEOUT_RE.pattern, ev.RankTimeout, _timeout),
    _rule("Timeout is", OUT_OF_SECTION_RE.pattern, ev.RankTimeout, _timeout),
    _rule("heartbeat", HEARTBEAT_MISSED_RE.pattern, ev.RankTimeout, _timeout),
    _rule("Cycle", PROFILING_RE.pattern, ev.ProfilingEvent, _profiling),
    _rule("FT timeout", r"FT timeout elapsed", ev.FtTimeoutElapsed, _ft_timeout),
    # the agent
    _rule("joined", RENDEZVOUS_JOINED_RE.pattern, ev.RendezvousJoined, _joined),
    _rule("(exitcode", r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+) \(pid: (?P<pid>\d+)\)",
          ev.WorkerFailed, stamp="line"),
    _rule("orker group", r"Worker group (?P<state>UNHEALTHY|FAILED)\. (?P<attempts_left>\d+)/(?P<max_restarts>\d+) "
          r"attempts left", ev.WorkerGroupFailed, stamp="line"),
    _rule("orker group", r"worker group successfully finished", ev.WorkerGroupSucceeded, stamp="line"),
    _rule("attempts left", r"(\d+)/(\d+) restart attempts left", ev.WorkerGroupFailed, _attempts_left),
    _rule("Agent", r"Agent", ev.LauncherEvent, _agent),
    _rule("progress", r"detected no progress across restarts|EARLY TERMINATION", ev.NoProgressStop, _no_progress),
    # failure lines, read for triage only (events.DiagnosticEvent): each is tried on every line it reads
    # a traceback that starts its line, torch elastic's summary field, or one a WARNING/ERROR record quotes; not one
    # an INFO/DEBUG message quotes (Megatron-Bridge's safe_import_from logs the handled ImportError of an optional
    # import so at every start: "Import of X from Y failed with: Traceback ...")
    _rule("Traceback (most recent call last):", r"^(?:\s*(?:traceback\s*:\s*)?|.*\b(?:WARNING|ERROR|CRITICAL|FATAL)\b"
          r".*)Traceback \(most recent call last\):\s*$", ev.TracebackStarted),
    _rule("NCCL", r"Watchdog caught|watchdog thread terminated|communicator was aborted|nccl\w+Error|NCCL error|"
          r"DistBackendError|Some NCCL operations|NCCL WARN", ev.CollectiveFailed, _collective,
          alternatives=("nccl", "DistBackendError")),
    _rule("srun:", r"srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,\-\[\]]+): (?P<status>Exited with exit code "
          r"(?P<exitcode>\d+)|Killed|Terminated|Aborted|Segmentation fault|Bus error)", ev.TaskExited),
    _rule("slurmstepd:", r"slurmstepd: error: Detected \d+ oom[-_]kill event", ev.HostOomKilled),
    _rule("slurmstepd:", r"slurmstepd: error: \*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO "
          r"(?P<reason>[A-Z ]+))?", ev.StepCancelled),
    _rule("memory (MB)", r"\[Rank (?P<rank>\d+)\] \(after (?P<iterations>\d+) iterations\) memory \((?P<unit>MB)\) \| "
          r"allocated: [\d.]+ \| max allocated: (?P<max_allocated>[\d.]+)(?: \| reserved: [\d.]+ \| max reserved: "
          r"(?P<max_reserved>[\d.]+))?", ev.MemoryReport, _memory),
    # Megatron-Bridge's: `memory (GB)` and its `| mem-<name>-gigabytes: V` fields (none on CPU: no event)
    _rule("memory (GB)", r"\[Rank (?P<rank>\d+)\] \(after (?P<iterations>\d+) iterations\) memory \((?P<unit>GB)\)"
          r"(?:.*?\| mem-max-allocated-gigabytes: (?P<max_allocated>[\d.eE+-]+))?"
          r"(?:.*?\| mem-max-reserved-gigabytes: (?P<max_reserved>[\d.eE+-]+))?", ev.MemoryReport, _memory),
    _rule("FAILED", r"Worker group (?:FAILED|UNHEALTHY)|Some rank\(s\) exited with non-zero|ChildFailedError|"
          r"Agent's exit code = [1-9]|exits with exit code = [1-9]", ev.FailureSign,
          alternatives=("UNHEALTHY", "non-zero", "ChildFailedError", "exit code =")),
    _rule(" ...", r"^\s{1,4}(?P<name>" + "|".join(CONFIG_KEYS) + r") \.{3,} (?P<value>\S+)\s*$", ev.ConfigValue),
    _rule("using world size", r"size: ", ev.ConfigValue, _world_sizes),
)
READER_RULES = tuple(r for r in RULES if not r.diagnostic)  # what history's reader keeps
DIAGNOSTIC_RULES = tuple(r for r in RULES if r.diagnostic)  # what triage reads besides (events.DiagnosticEvent)
assert not any(r.alternatives for r in READER_RULES)  # the reader's screens are its keywords
_FAST_RULES = tuple(r for r in READER_RULES if r.fast)
_RULE_OF: dict[type, LineRule] = {r.event: r for r in _FAST_RULES}
FAST_KEYWORD = b"checkpoint"
assert all(r.keyword.encode() == FAST_KEYWORD for r in _FAST_RULES)


def cycle_opened(event: ev.Event) -> int | None:
    """The one cycle rule (history's and triage's): the launcher cycle a launcher line opens.
    A profiling event of a cycle's start (events.CYCLE_START_EVENTS) names it; torch elastic's
    rendezvous round (NVRx 0.4.1) is it; any other line opens none (None)."""
    if isinstance(event, ev.ProfilingEvent):
        return event.cycle if event.name in ev.CYCLE_START_EVENTS else None
    if isinstance(event, ev.RendezvousJoined):
        return event.round
    return None


def match_rule(body: str) -> tuple[LineRule, re.Match] | tuple[None, None]:
    """The rule that takes a line (its body, prefixes peeled): the first whose keyword and
    pattern match; (None, None) for a line no rule takes. Failure lines (DIAGNOSTIC_RULES) are
    `diagnostic_matches`'."""
    for rule in READER_RULES:
        if rule.keyword in body and (m := rule.pattern.search(body)):
            return rule, m
    return None, None


# every keyword and alternative of the failure-line rules: the screen of each line triage reads
_DIAGNOSTIC_SCREEN = re.compile("|".join(dict.fromkeys(re.escape(k) for r in DIAGNOSTIC_RULES
                                                       for k in (r.keyword, *r.alternatives))))
_DIAGNOSTIC_NEEDLES = tuple((r, (r.keyword, *r.alternatives)) for r in DIAGNOSTIC_RULES)


def diagnostic_matches(body: str) -> list[tuple[LineRule, re.Match]]:
    """Every failure-line rule (DIAGNOSTIC_RULES) that takes the line `body`, in table order:
    triage reads each line for all of them (one line may say an NCCL error and be a failure sign)."""
    if not _DIAGNOSTIC_SCREEN.search(body):  # most lines: one pass in C
        return []
    out = []
    for rule, needles in _DIAGNOSTIC_NEEDLES:
        for needle in needles:
            if needle in body:
                if m := rule.pattern.search(body):
                    out.append((rule, m))
                break
    return out


def _keywords(rules: tuple[LineRule, ...]) -> tuple[bytes, ...]:
    return tuple(dict.fromkeys(r.keyword.encode() for r in rules))


# The screens: a per-cycle application log is searched for the application keywords only.
APP_KEYWORDS = _keywords(tuple(r for r in READER_RULES if r.app))
ALL_KEYWORDS = _keywords(READER_RULES)
LAUNCHER_KEYWORDS = tuple(k for k in ALL_KEYWORDS if k not in APP_KEYWORDS)


def _hides(m: bytes, d: bytes, m_first: bool) -> bool:
    """Whether a leftmost-first hit of m can hide an occurrence of d: m holds d, or m begins
    before d and ends inside it, or (m listed first) m begins d."""
    return (d in m and m != d) or any(m.endswith(d[:k]) for k in range(1, min(len(m), len(d)))) or (
        m_first and d.startswith(m) and m != d)


class _Screen:
    """The screen of one set of keywords, derived from RULES: one Aho-Corasick automaton
    (ahocorasick_rs, leftmost-first: non-overlapping hits, in order) over the fast rules'
    phrases, then every keyword. One pass over a chunk finds every line a rule may take, at a
    cost that does not grow with the number of rules: up to 64 patterns (the table has far fewer) a SIMD
    prefilter finds the candidates; beyond, the DFA alone, several times slower per byte but
    still the same for any number of patterns.

    - `phrases`: per fast rule, its pattern's words up to and with " checkpoint" (a literal
      prefix of the pattern); `kinds`: its event type; `valid`: its pattern on raw bytes,
      matched where the phrase is found.
    - `harmless`: per pattern, whether its hit leaves a save line a save line: a keyword
      through which no rule tried before the fast ones takes a line (rules are tried in table
      order), and whose hit cannot hide a phrase or such a rule's keyword (hits do not
      overlap). A line whose first hit is a phrase its pattern matches, and whose other hits
      are harmless (a save path with "checkpoint" in it), is a save line whatever the full path
      would try; a line with any other hit goes the full path, which decides.
    """

    __slots__ = ("automaton", "patterns", "fast", "kinds", "valid", "harmless")

    def __init__(self, keywords: tuple[bytes, ...]) -> None:
        fast = tuple(r for r in _FAST_RULES if r.keyword.encode() in keywords)
        phrases = tuple(r.pattern.pattern.split(" checkpoint", 1)[0].encode() + b" checkpoint" for r in fast)
        assert all(re.fullmatch(rb"[\w ]+", p) and r.pattern.pattern.encode().startswith(p)
                   for p, r in zip(phrases, fast))  # literal words that begin the pattern
        self.patterns = (*phrases, *keywords)
        self.fast = len(phrases)
        self.kinds = tuple(r.event for r in fast)
        self.valid = tuple(re.compile(r.pattern.pattern.encode()).match for r in fast)
        last_fast = max((READER_RULES.index(r) for r in _FAST_RULES), default=-1)
        first_rule = {k: min((i for i, r in enumerate(READER_RULES) if r.keyword.encode() == k and not r.fast),
                             default=len(READER_RULES)) for k in keywords}
        late = (*(False for _ in phrases), *(first_rule[k] > last_fast for k in keywords))
        deciding = [(x, d) for x, (d, lt_) in enumerate(zip(self.patterns, late)) if not lt_]

        def hides_deciding(y: int) -> bool:
            return any(_hides(self.patterns[y], d, y < x) for x, d in deciding if x != y)

        assert not any(hides_deciding(y) for y in range(len(phrases)))  # a phrase's own hit hides none
        self.harmless = tuple(lt_ and not hides_deciding(y) for y, lt_ in enumerate(late))
        self.automaton = BytesAhoCorasick(list(self.patterns), matchkind=MatchKind.LeftmostFirst,
                                          implementation=Implementation.DFA)


_SCREENS: dict[tuple[bytes, ...], _Screen] = {}


def _screen(keywords: tuple[bytes, ...]) -> _Screen:
    screen = _SCREENS.get(keywords)
    if screen is None:
        screen = _SCREENS[keywords] = _Screen(keywords)
    return screen


class _Hits:
    """The screen's hits in one chunk (each a pattern's occurrence, in order) and what the save
    lanes need of them, each computed for all hits at once in C loops (map): where each hit's
    line ends, whether it is the first hit of its line, whether it lets its line be a save line
    (`ok`: a first hit that is a phrase its pattern matches, a later one a harmless keyword),
    and, when asked for, where each line starts and `strict` (ok, and the line does not start
    with a harness console stamp "20..", which the full path still reads for the UTC offset)."""

    __slots__ = ("data", "ps", "ss", "les", "first", "ok", "_lss", "_strict")

    def __init__(self, screen: _Screen, data: bytes | bytearray, n: int) -> None:
        self.data = data
        self._lss: list[int] | None = None
        self._strict: list[bool] | None = None
        with memoryview(data) as view, view[:n] as chunk:
            found = screen.automaton.find_matches_as_indexes(chunk)
        if not found:
            self.ps = self.ss = self.les = self.first = self.ok = ()
            return
        ps, ss = list(map(itemgetter(0), found)), list(map(itemgetter(1), found))
        les = list(map(data.find, repeat(b"\n"), map(itemgetter(2), found), repeat(n)))
        if les[-1] < 0:  # the chunk's last line is cut (a final read): it ends at n
            les = [n if x < 0 else x for x in les]
        first = list(map(lt, [-1, *les[:-1]], ss))
        fast, valid, harmless = screen.fast, screen.valid, screen.harmless
        self.ps, self.ss, self.les, self.first = ps, ss, les, first
        self.ok = [(p < fast and valid[p](data, s, le) is not None) if f else harmless[p]
                   for f, p, s, le in zip(first, ps, ss, les)]

    def line_starts(self) -> list[int]:
        if self._lss is None:
            self._lss = list(map((1).__add__, map(self.data.rfind, repeat(b"\n"), repeat(0), self.ss)))
        return self._lss

    def strict(self) -> list[bool]:
        if self._strict is None:  # ok and not twenty: True > False is the one True
            self._strict = list(map(gt, self.ok, map(self.data.startswith, repeat(b"20"), self.line_starts())))
        return self._strict

    def lane_end(self, i: int, strict: bool) -> int:
        """The first hit at or after i (the first of its line) that begins a line that is not a
        save line: the save lane runs over the lines of hits[i:lane_end]."""
        flags = self.strict() if strict else self.ok
        try:
            b = flags.index(False, i)
        except ValueError:
            return len(flags)
        first = self.first
        while b > i and not first[b]:
            b -= 1
        return b

    def line_ok(self, i: int, strict: bool) -> bool:
        """Whether the line whose first hit is hits[i] is a save line (as lane_end sees it)."""
        flags = self.strict() if strict else self.ok
        j, first = i + 1, self.first
        while j < len(first) and not first[j]:
            j += 1
        return all(flags[i:j])


# Named groups: the quantity dialect.number checks them against (other groups are text).
_QUANTITY = {"iteration": "iteration", "last_valid": "iteration", "owner": "rank", "target_rank": "rank",
             "local_rank": "rank", "exitcode": "exit_code", "pid": "pid", "attempts_left": "count",
             "max_restarts": "count", "rank": "rank", "value": "count"}
_OPTIONAL: dict[type, frozenset[str]] = {}  # per event type: the fields that accept None


def _optional_fields(kind: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(kind) if "None" in str(f.type))



# ---------------------------------------------------------------- one log file


class _ArgsBuilder:
    __slots__ = ("rank", "src", "lines", "count")

    def __init__(self, rank: int | None, src: Src) -> None:
        self.rank = rank
        self.src = src
        self.lines: list[ev.ArgLine] = []
        self.count = 0

    def build(self) -> ev.ArgumentsPrinted:
        return ev.ArgumentsPrinted(src=self.src, rank=self.rank, args=tuple(self.lines))


# Save lines repeat with every checkpoint (a pair every 5 iterations at the walkthrough's
# interval): a start keeps, per kind, its first SAVES_HEAD, its last SAVES_TAIL and an evenly
# thinned selection of at most SAVES_SAMPLE (the picture's diamonds), plus the count. Only
# the kept lines are ever decoded, so memory and time do not grow with the checkpoints.
SAVES_HEAD = 8
SAVES_TAIL = 32
SAVES_SAMPLE = 64
# Every other line kind may repeat without end too (every rank's `FT: initialized`, a
# profiling event per node and cycle, a log that repeats one launcher line): each is kept the
# same way, per start and kind for application lines (EVENTS_*), per kind, cycle and
# profiling event name or joining node for launcher lines (LAUNCHER_*, at most LAUNCHER_KEYS groups, later
# groups share one per kind), and a log opens at most MAX_STARTS starts (later ones are read
# as part of its last, with a note). Memory is then a constant plus the cycles.
EVENTS_HEAD, EVENTS_TAIL, EVENTS_SAMPLE = 8, 8, 16
ARGS_HEAD, ARGS_TAIL, ARGS_SAMPLE = 1, 1, 0  # an arguments table holds up to MAX_ARGS_LINES lines
LAUNCHER_HEAD, LAUNCHER_TAIL, LAUNCHER_SAMPLE = 32, 32, 32
LAUNCHER_KEYS = 16_384  # groups: enough for every node of a 10,000-GPU job's cycles to keep its join line
MAX_STARTS = 256


class _Kept:
    """The bounded record of one kind of repeated line: its first `head` entries, its last
    `tail`, an evenly thinned selection of at most `sample` between, and the count. Entries are
    lists or tuples whose item `order` gives their place (the line number of a save entry, a
    sequence number otherwise)."""

    __slots__ = ("count", "head", "tail", "sample", "stride", "head_max", "sample_max", "order")

    def __init__(self, head: int = SAVES_HEAD, tail: int = SAVES_TAIL, sample: int = SAVES_SAMPLE,
                 order: int = 1) -> None:
        self.count = 0
        self.head: list = []
        self.tail: deque = deque(maxlen=tail)
        self.sample: list = []
        self.stride = 1
        self.head_max = head
        self.sample_max = sample
        self.order = order

    def add(self, entry) -> None:  # noqa: ANN001 - a save entry [raw, line, event] or (seq, event)
        self.count += 1
        if len(self.head) < self.head_max:
            self.head.append(entry)
            return
        self.tail.append(entry)
        if self.sample_max and self.count % self.stride == 0:
            self.sample.append(entry)
            if len(self.sample) > self.sample_max:
                self.sample = self.sample[::2]
                self.stride *= 2

    def extend(self, n: int, entry) -> None:  # noqa: ANN001 - entry(o): the o-th new entry
        """Add n entries, as n calls of add would, asking `entry(o)` (o counts from 0) for only
        those the record keeps (the same o may be asked for twice: give the same object)."""
        o = 0
        while o < n and len(self.head) < self.head_max:
            self.count += 1
            self.head.append(entry(o))
            o += 1
        if o == n:
            return
        first, last = self.count + 1, self.count + n - o  # the counts the rest take
        if self.sample_max:
            k = -(-first // self.stride) * self.stride  # add() samples the entry whose count the stride divides
            while k <= last:
                self.sample.append(entry(o + k - first))
                if len(self.sample) > self.sample_max:
                    self.sample = self.sample[::2]
                    self.stride *= 2
                k = (k // self.stride + 1) * self.stride
        self.tail.extend(entry(x) for x in range(max(o, n - (self.tail.maxlen or 0)), n))
        self.count = last

    def keeps(self, n: int) -> list[int]:
        """The o (from 0) of the entries that extend(n, ...) would ask for, changing nothing."""
        probe = _Kept(self.head_max, self.tail.maxlen or 0, self.sample_max, self.order)
        probe.count, probe.stride = self.count, self.stride
        probe.head, probe.sample = [None] * len(self.head), [None] * len(self.sample)
        asked: list[int] = []
        probe.extend(n, lambda o: asked.append(o))
        return asked

    def kept(self) -> list:
        seen: dict[int, object] = {}
        at = self.order
        for entry in (*self.head, *self.sample, *self.tail):
            seen.setdefault(entry[at], entry)
        return [seen[k] for k in sorted(seen)]

    def replace(self, old: object, new: object) -> None:
        """Put `new` in place of every kept (seq, old) entry."""
        for box in (self.head, self.sample, self.tail):
            for i, entry in enumerate(box):
                if entry[1] is old:
                    box[i] = (entry[0], new)


_SaveLines = _Kept


def _app_record(kind: type) -> _Kept:
    if kind is ev.ArgumentsPrinted:
        return _Kept(ARGS_HEAD, ARGS_TAIL, ARGS_SAMPLE, order=0)
    return _Kept(EVENTS_HEAD, EVENTS_TAIL, EVENTS_SAMPLE, order=0)


class _StartBuilder:
    __slots__ = ("phase", "seen", "events", "first", "_last", "_last_raw", "bad", "saves", "points", "next_at",
                 "stride")

    def __init__(self) -> None:
        self.phase = PH_NONE  # the latest phase reached
        self.seen = 0  # a bit per phase reached (_REOPENED_BY)
        # per kind: (sequence number, AppEvent, or an _ArgsBuilder while its table is open)
        self.events: dict[type, _Kept] = {}
        self.first: ev.Iteration | None = None
        self._last: ev.Iteration | None = None
        self._last_raw: tuple[bytes, int] | None = None  # the last iteration line, parsed when asked for
        self.bad: dict[int, ev.Iteration] = {}
        self.saves: dict[type, _SaveLines] = {}
        # the progress curve, sampled in the pass: (iteration, local stamp, file offset) of
        # iteration lines at least `stride` bytes apart, thinned to at most PROGRESS_SAMPLES
        self.points: list[tuple[bytes, int]] = []  # (the raw iteration line, its file offset): parsed when drawn
        self.next_at = 0  # the file offset from which the next sample is taken
        self.stride = 0  # 0: every iteration line, until the first thinning

    def save_lines(self, kind: type) -> _Kept:
        """This start's record of one kind of save line (made on first use)."""
        record = self.saves.get(kind)
        if record is None:
            record = self.saves[kind] = _Kept()
        return record

    def add(self, kind: type, seq: int, event: object) -> None:
        record = self.events.get(kind)
        if record is None:
            record = self.events[kind] = _app_record(kind)
        record.add((seq, event))

    def last(self, parser: "LogParser") -> ev.Iteration | None:
        if self._last_raw is not None:
            raw, lineno = self._last_raw
            self._last_raw = None
            self._last = parser._iteration(raw, lineno) or self._last
        return self._last

    def set_last(self, it: ev.Iteration | None = None, raw: tuple[bytes, int] | None = None) -> None:
        if raw is not None:
            self._last_raw = raw
        else:
            self._last, self._last_raw = it, None


class LogParser:
    """Incremental parser of one log file; `feed` takes whole lines (bytes)."""

    def __init__(self, rel: str, *, split_starts: bool, keywords: tuple[bytes, ...] = ALL_KEYWORDS,
                 losses: bool = False) -> None:
        self.rel = rel
        self.screen = _screen(keywords)
        # iteration -> the last lm loss printed for it (loss_continuity), only when asked for:
        # it is the one record that grows with the iterations
        self.losses: dict[int, ev.LossLine] | None = {} if losses else None
        self.split_starts = split_starts
        self.keywords = keywords
        self.lineno = 0
        self.fed = 0  # bytes fed so far: the file offset of the next feed's first byte
        self.starts: list[_StartBuilder] = []
        self.starts_merged = 0  # starts past MAX_STARTS, read as part of the last
        self._seq = 0  # events in the order read
        self._launcher: dict[tuple, _Kept] = {}  # (kind, cycle, profiling event name) -> its lines
        self._launcher_list: list[ev.LauncherEvent] | None = []  # what `launcher` gives; None: to be merged
        self.clock = LogClock()  # the one time model (dialect.LogClock): the log's year, from its last full date
        self.launcher_cycle = 0
        self.dialect: str | None = None
        self.offset_pairs: list[tuple[float, float]] = []  # (local stamp, UTC stamp) of one line
        self.first_local_ts: float | None = None
        self._args: _ArgsBuilder | None = None
        # --non-persistent-global-ckpt-dir values of the arguments tables read so far (harness.vocab.tiers):
        # a missing tracker there is the non-persistent tier's, not a start from random
        self.np_dirs: set[str] = set()
        self.out_of_range = 0  # numbers outside dialect.BOUNDS, read as no value
        self.out_of_range_first: str | None = None  # the first, for the note

    def _num(self, text: str | None, quantity: str, src: Src, read=number):  # noqa: ANN001 - number or decimal
        """dialect.number (or .decimal) of a field of the line at `src`, counting what is out of range."""
        value = read(text, quantity)
        if value is None and text is not None and text not in ("?", "<none>"):
            self.out_of_range += 1
            if self.out_of_range_first is None:
                self.out_of_range_first = f"{quantity} {clip(text, 24)} at {src.path}:{src.line}"
        return value

    # ---- driving

    def feed(self, data: bytes | bytearray, end: int | None = None) -> None:
        """Parse data[:end], which ends at a line boundary (or is a file's last, cut line).

        One pass of the screen finds the lines a rule may take. Iteration lines are folded
        region by region (_iterations); the save lines of a start that already trains are kept
        in bulk (_keep_saves) and do not end the region, so a run that saves every few
        iterations costs little more than one that never saves."""
        n = len(data) if end is None else end
        pos = 0
        line = self.lineno  # lines wholly before `pos`
        if self._args is not None:
            pos, line = self._args_block(data, pos, n, line)
        region, region_line = pos, line  # the iteration lines not yet folded start here
        hits = _Hits(self.screen, data, n)
        ps, ss, les = hits.ps, hits.ss, hits.les
        count, starts, fast = data.count, self.starts, self.screen.fast
        i, total = 0, len(ps)
        while i < total:
            s = ss[i]
            if s < pos:  # a later hit of a line already read, or a line of an arguments table
                i += 1
                continue
            p = ps[i]  # the first hit of its line: `pos` is a line start
            strict = len(self.offset_pairs) < 16  # (until then, console-stamped lines go the full path)
            if p < fast and self.year is not None and starts and starts[-1].first is not None:
                # (until a full stamp gave the year, glog stamps (no year) need every stamped line read)
                b = hits.lane_end(i, strict)
                if b > i:
                    pos, line = self._keep_saves(hits, i, b, pos, line)
                    i = b
                    continue
            ls = data.rfind(b"\n", 0, s) + 1
            le = les[i]
            line += count(b"\n", pos, ls)
            kind = self.screen.kinds[p] if p < fast and self.year is not None and hits.line_ok(i, strict) else None
            self._iterations(data, region, ls, region_line, line - region_line)
            line += 1
            if kind is not None:  # a save line before the start trains: kept raw all the same
                self._save(kind, [bytes(data[ls:le]), line, None])
            else:
                self._line(data[ls:le], line)
            pos = le + 1
            if self._args is not None:
                pos, line = self._args_block(data, pos, n, line)
            region, region_line = pos, line
            i += 1
        if pos < n:
            line += count(b"\n", pos, n)
        if region < n:
            self._iterations(data, region, n, region_line, line - region_line)
        if n and pos <= n and data[n - 1:n] != b"\n":  # a cut last line no hit took
            line += 1
        self.lineno = line
        self.fed += n

    def _keep_saves(self, hits: _Hits, a: int, b: int, pos: int, line: int) -> tuple[int, int]:
        """The save lines of hits[a:b] (lines of the start that trains, each a save line): per
        kind, counted, and of those its record keeps, the raw line and its number, copied once,
        decoded never. Returns (pos, line) after the last of them."""
        data, ps, les, first = hits.data, hits.ps, hits.les, hits.first
        if all(first[a:b]):  # one hit per line, the usual save line
            firsts, kinds = range(a, b), ps[a:b]
        else:
            firsts = list(compress(range(a, b), first[a:b]))
            kinds = list(map(ps.__getitem__, firsts))
        present = set(kinds)
        start = self.starts[-1]
        plans, wanted = [], set()
        for p in present:
            lines = firsts if len(present) == 1 else list(compress(firsts, map(eq, kinds, repeat(p))))
            record = start.save_lines(self.screen.kinds[p])
            wanted.update(lines[o] for o in record.keeps(len(lines)))
            plans.append((record, lines))
        lss = hits.line_starts()
        wanted.add(firsts[-1])  # (a record's tail always keeps its last)
        entries: dict[int, list] = {}
        count, cur = data.count, pos
        for x in sorted(wanted):  # line numbers: one count over the lanes' bytes, in order
            ls = lss[x]
            line += count(b"\n", cur, ls)
            cur = ls
            entries[x] = [bytes(data[ls:les[x]]), line + 1, None]
        for record, lines in plans:
            record.extend(len(lines), lambda o, lines=lines: entries[lines[o]])
        return les[firsts[-1]] + 1, line + 1

    def _args_block(self, data: bytes, pos: int, n: int, line: int) -> tuple[int, int]:
        """Inside an open arguments table every line matters (the table lines carry no keyword)."""
        while pos < n and self._args is not None:
            le = data.find(b"\n", pos, n)
            if le < 0:
                le = n
            line += 1
            self._args_line(data[pos:le], line)
            pos = le + 1
        return pos, line

    def _args_line(self, raw: bytes, lineno: int) -> None:
        args = self._args
        assert args is not None
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        rank, body, _ = _strip_prefix(text)
        args.count += 1
        if _ARGS_FOOTER_RE.search(body) or args.count > MAX_ARGS_LINES:
            self._close_args()
            return
        if rank == args.rank:
            m = _ARG_LINE_RE.match(body)
            if m and body.startswith(" "):
                value = (m.group(2) or "").strip()
                args.lines.append(ev.ArgLine(m.group(1), value, lineno))
                if m.group(1) == tiers.NP_DIR_ARG and value not in ("", "None") and len(self.np_dirs) < 8:
                    self.np_dirs.add(value)
                return
        self._line(raw, lineno)  # an interleaved line of another rank or of the launcher

    def _close_args(self) -> None:
        args, self._args = self._args, None
        if args is None:
            return
        built = args.build()
        for start in self.starts:
            record = start.events.get(ev.ArgumentsPrinted)
            if record is not None:
                record.replace(args, built)

    # ---- starts

    def _start(self, opener: int | None = None, phase: int = PH_NONE) -> _StartBuilder:
        cur = self.starts[-1] if self.starts else None
        if cur is None or (opener is not None and self.split_starts and cur.seen & _REOPENED_BY[opener]):
            if len(self.starts) < MAX_STARTS:
                cur = _StartBuilder()
                self.starts.append(cur)
            else:
                self.starts_merged += 1
        reached = opener if opener is not None else phase
        cur.phase = max(cur.phase, reached)
        if reached != PH_NONE:
            cur.seen |= 1 << reached
        return cur

    def _app(self, event: ev.AppEvent, opener: int | None = None, phase: int = PH_NONE) -> None:
        self._seq += 1
        self._start(opener, phase).add(type(event), self._seq, event)

    # ---- launcher lines, bounded per (kind, cycle, profiling event name)

    def _emit(self, event: ev.LauncherEvent) -> None:
        self._seq += 1
        if (cycle := cycle_opened(event)) is not None:
            self.launcher_cycle = cycle
        # one group per joining node too: node_replacement compares the nodes of two cycles, and a
        # cluster of thousands of nodes must not lose some to the sampling (LAUNCHER_KEYS bounds it)
        sub = event.name if isinstance(event, ev.ProfilingEvent) else (
            event.node if isinstance(event, ev.RendezvousJoined) else None)
        key = (type(event), event.cycle, sub)
        record = self._launcher.get(key)
        if record is None:
            if len(self._launcher) >= LAUNCHER_KEYS:
                key = (type(event), None, "more groups than LAUNCHER_KEYS")
                record = self._launcher.get(key)
            if record is None:
                record = self._launcher[key] = _Kept(LAUNCHER_HEAD, LAUNCHER_TAIL, LAUNCHER_SAMPLE, order=0)
        record.add((self._seq, event))
        self._launcher_list = None

    @property
    def launcher(self) -> list[ev.LauncherEvent]:
        """The launcher events kept, in the order read."""
        if self._launcher_list is None:
            entries = [entry for record in self._launcher.values() for entry in record.kept()]
            entries.sort(key=lambda entry: entry[0])
            self._launcher_list = [event for _seq, event in entries]
        return self._launcher_list

    # ---- iteration lines (the bulk of a training log)

    def _iterations(self, data: bytes, a: int, b: int, line_at_a: int, newlines: int) -> None:
        """Fold the iteration lines of data[a:b] (no keyword lines in between; `newlines`
        line breaks) into the current start: only the first, the last and those reporting
        skipped or NaN steps are parsed; everything else is skipped at C speed."""
        i = data.find(ITER_KEY, a, b)
        if i < 0:
            return
        if self.losses is not None:
            self._losses(data, a, b, line_at_a)

        def lineno(ls: int) -> int:  # count from the nearer end of the region
            if ls - a < b - ls:
                return line_at_a + data.count(b"\n", a, ls) + 1
            return line_at_a + newlines - data.count(b"\n", ls, b) + 1

        start = self.starts[-1] if self.starts else None
        first_at = -1  # offset of the line parsed as this start's first iteration, if in this region
        if start is None or start.first is None:
            while i >= 0:
                ls = max(data.rfind(b"\n", a, i) + 1, a)
                le = _line_end(data, i, b)
                it = self._iteration(data[ls:le], lineno(ls))
                if it is not None:
                    start = self._start(phase=PH_ITER)
                    start.first = it
                    start.set_last(it)
                    first_at = ls
                    break
                i = data.find(ITER_KEY, le, b)
            if first_at < 0:
                return  # " iteration " only in other lines: no start is implied
        assert start is not None
        start.phase = max(start.phase, PH_ITER)
        start.seen |= 1 << PH_ITER
        if start.next_at - self.fed < b:
            self._sample(start, data, a, b)
        # The region's last iteration line is kept raw and parsed only when asked for: a region
        # ends at every keyword line (a save every 5 iterations), so parsing each would make
        # the time depend on how often the run saves.
        j = data.rfind(ITER_KEY, a, b)
        while j >= a:
            ls = max(data.rfind(b"\n", a, j) + 1, a)
            if ls <= first_at:
                break
            raw = data[ls:_line_end(data, j, b)]
            if _ITER_RE_B.search(raw):
                start.set_last(raw=(bytes(raw), lineno(ls)))
                break
            j = data.rfind(ITER_KEY, a, ls)
        if len(start.bad) >= MAX_BAD_ITERATIONS or data.count(_COUNTER_FIELD, a, b) == data.count(_COUNTERS_ZERO, a, b):
            return
        for rx in (_BAD_SKIPPED_RE, _BAD_NAN_RE):
            for m in rx.finditer(data, a, b):
                ls = max(data.rfind(b"\n", a, m.start()) + 1, a)
                at = lineno(ls)
                if at in start.bad or len(start.bad) >= MAX_BAD_ITERATIONS:
                    continue
                it = self._iteration(data[ls:_line_end(data, m.start(), b)], at)
                if it is not None and ((it.skipped or 0) > 0 or (it.nan or 0) > 0):
                    start.bad[at] = it

    def _sample(self, start: _StartBuilder, data: bytes, a: int, b: int) -> None:
        """The progress curve's points in data[a:b]: the first iteration line at or after each
        sampling offset. Evenly spaced in bytes, at most PROGRESS_SAMPLES per start whatever the
        run's length: when full, every other point goes and the spacing doubles."""
        base = self.fed
        at = max(a, start.next_at - base)
        while at < b:
            i = data.find(ITER_KEY, at, b)
            if i < 0:
                return
            ls = max(data.rfind(b"\n", a, i) + 1, a)
            le = _line_end(data, i, b)
            raw = data[ls:le]
            at = le + 1
            if not _ITER_RE_B.search(raw):
                continue
            # Kept raw: most points are thinned away before anything draws them, so only the
            # kept ones are ever decoded (point()).
            start.points.append((bytes(raw), base + ls))
            if len(start.points) > PROGRESS_SAMPLES:
                kept = start.points[::2]
                start.stride = start.stride * 2 if start.stride else max(
                    1, (kept[-1][1] - kept[0][1]) // max(len(kept) - 1, 1))
                start.points = kept
            start.next_at = base + at + start.stride
            at = start.next_at - base

    def _losses(self, data: bytes, a: int, b: int, line_at_a: int) -> None:
        """Every `lm loss` of the iteration lines of data[a:b]; a later line of an iteration wins."""
        counted, newlines = a, 0
        i = data.find(b"lm loss", a, b)
        while i >= 0:
            ls = max(data.rfind(b"\n", a, i) + 1, a)
            le = _line_end(data, i, b)
            newlines += data.count(b"\n", counted, ls)
            counted = ls
            text = bytes(data[ls:le]).decode("utf-8", "replace").rstrip("\r\n")
            found = iteration_loss(text)
            if found is not None:
                self.losses[found[0]] = ev.LossLine(found[1], Src(self.rel, line_at_a + newlines + 1, clip(text)))
            i = data.find(b"lm loss", le, b)

    def _iteration(self, raw: bytes, lineno: int) -> ev.Iteration | None:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        rank, body, _ = _strip_prefix(text)
        m = _ITER_RE.search(body)
        iteration, train_iters = (number(m.group(1), "iteration"), number(m.group(2), "iteration")) if m else (None, None)
        if iteration is None or train_iters is None:  # not an iteration line, or numbers no run has
            return None
        return ev.Iteration(
            src=Src(self.rel, lineno, clip(text)),
            ts=self._stamp(body),
            rank=rank,
            iteration=iteration,
            train_iters=train_iters,
            consumed_samples=_int_of(_CONSUMED_RE.search(body), "samples"),
            lm_loss=_float_of(_LOSS_RE.search(body)),
            skipped=_int_of(_SKIPPED_RE.search(body), "count"),
            nan=_int_of(_NAN_RE.search(body), "count"),
        )

    def point(self, raw: bytes) -> tuple[int, float | None] | None:
        """(iteration, local stamp) of a sampled progress line; changes no state of the parser
        (it runs after the pass, on the few lines the curve kept)."""
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        _rank, body, _ = _strip_prefix(text)
        m = _ITER_RE.search(body)
        iteration = number(m.group(1), "iteration") if m else None
        if iteration is None:
            return None
        return iteration, self._read_stamp(body)[0]

    # ---- stamps

    @property
    def year(self) -> int | None:
        return self.clock.year

    def _read_stamp(self, body: str) -> tuple[float | None, int | None]:
        """(local time, the year a full-date stamp gave) of the stamp that starts `body`
        (dialect.LogClock.peek). Changes nothing."""
        t, full = self.clock.peek(body)
        return t, (full.year if full is not None else None)

    def _stamp(self, body: str) -> float | None:
        t, full = self.clock.peek(body)
        if full is not None:
            self.clock.saw(full)
            if self.first_local_ts is None:
                self.first_local_ts = t
        return t

    # ---- save lines (as many as checkpoints): kept raw, bounded, decoded when needed

    def _save(self, kind: type, entry: list) -> None:
        start = self.starts[-1] if self.starts and self.starts[-1].phase >= PH_ITER else self._start(phase=PH_ITER)
        start.save_lines(kind).add(entry)

    def _saved_event(self, kind: type, entry: list) -> ev.AppEvent | None:
        if entry[2] is None and entry[0] is not None:
            text = entry[0].decode("utf-8", "replace").rstrip("\r\n")
            rank, b, _ = _strip_prefix(text)
            rule = _RULE_OF[kind]
            m = rule.pattern.search(b)
            if m is not None:
                entry[2] = self._make(rule, m, b, Src(self.rel, entry[1], clip(text)), rank)
            entry[0] = None  # parsed (or not a save after all): the raw line is no longer needed
        return entry[2]

    # ---- one keyword line

    def _line(self, raw: bytes, lineno: int) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        line = read_line(self.rel, lineno, text, labels_are_ranks=True)  # the one line model (dialect.LogLine)
        rank = line.rank if line.rank is not None else line.local_rank
        body, console = line.body, line.console
        src = Src(self.rel, lineno, clip(text))
        if console is not None and len(self.offset_pairs) < 16:
            local = self._stamp(body)
            if local is not None:
                self.offset_pairs.append((local, console))
        rule, m = match_rule(body)
        if (rule is None or not rule.app) and self.dialect is None:  # a launcher's line (or none's): whose?
            if "[workload:" in body:
                self.dialect = "0.7.0"
            elif "[ft_launcher" in body or "[RankMonServer" in body:
                self.dialect = "0.4.1"
        if rule is None:
            return
        for event in self.events_of(rule, m, body, src, rank):
            if not rule.app:
                self._emit(event)
            elif rule.fast:
                self._save(rule.event, [None, src.line, event])
            else:
                self._seq += 1
                self._start(rule.phase if rule.opens else None, rule.phase).add(rule.event, self._seq, event)

    def events_of(self, rule: LineRule, m: re.Match, body: str, src: Src, rank: int | None) -> tuple[ev.Event, ...]:
        """The events the line `body` makes by `rule` (m: its match), in this log's state (its
        year, its launcher cycle): what the reader keeps, and what triage folds over."""
        made = rule.make(self, m, body, src, rank) if rule.make is not None else self._make(rule, m, body, src, rank)
        return tuple(e for e in (made if isinstance(made, tuple) else (made,)) if e is not None)

    def _make(self, rule: LineRule, m: re.Match, b: str, src: Src, rank: int | None) -> ev.Event | None:
        """The event of a rule without a factory, from its pattern's named groups."""
        fields: dict[str, object] = {}
        for name, text in m.groupdict().items():
            quantity = _QUANTITY.get(name)
            if quantity is None:
                fields[name] = text
                continue
            fields[name] = value = self._num(text, quantity, src)
            if value is None and name not in _OPTIONAL.setdefault(rule.event, _optional_fields(rule.event)):
                return None  # a number no run prints: no event
        if rule.stamp == "line":
            fields["ts"] = self._stamp(b)
        elif rule.stamp == "datetime":
            fields["ts"] = self._datetime(b)
        if rule.app:
            fields["rank"] = rank
        elif not rule.diagnostic:
            fields["cycle"] = self.launcher_cycle
        return rule.event(src=src, **fields)

    def _datetime(self, b: str) -> float | None:
        found = megatron_datetime(b)
        if found is None:
            return None
        self.clock.saw(found)
        return found.ts

    # ---- results

    def snapshot_starts(self) -> list[tuple[list[ev.AppEvent], ev.Iteration | None, ev.Iteration | None,
                                            list[ev.Iteration], int]]:
        """Per start: its events (the kept save lines among them), first and last iteration,
        the iterations with skipped or NaN steps, and the number of committed saves."""
        out = []
        for s in self.starts:
            events = [e.build() if isinstance(e, _ArgsBuilder) else e
                      for record in s.events.values() for _seq, e in record.kept()]
            for kind, record in s.saves.items():
                events.extend(e for entry in record.kept() if (e := self._saved_event(kind, entry)) is not None)
            events.sort(key=lambda e: e.src.line)
            committed = s.saves.get(ev.SaveCommitted)
            out.append((events, s.first, s.last(self), [s.bad[k] for k in sorted(s.bad)],
                        committed.count if committed else 0))
        return out


def _line_end(data: bytes, i: int, b: int) -> int:
    le = data.find(b"\n", i, b)
    return b if le < 0 else le


def _int_of(m: re.Match | None, quantity: str) -> int | None:
    return number(m.group(1), quantity) if m else None


def _float_of(m: re.Match | None) -> float | None:
    return decimal(m.group(1), "loss") if m else None


# ---------------------------------------------------------------- every line, for a reader that folds them all

# triage (harness.judge.triage) reads every line of every log, not only the lines a rule's keyword
# screens in: a Python traceback's frames and torch elastic's ChildFailedError summary span lines
# no rule names. It folds over this stream; the lines, their times, their cycles and the events of
# the rule table are history's, made here as the reader above makes them.

LINE_CAP = 64 * 1024  # a longer line keeps its head; the rest is skipped, never buffered
TEXT_LOG_SUFFIXES = (".log", ".err", ".out", ".txt")  # read as text even when they hold junk
ERROR_FILE_LIMIT = 16 * 1024 * 1024  # torch elastic's error.json: a traceback, far smaller
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LAUNCHER_SCREEN = re.compile("|".join(re.escape(k.decode()) for k in LAUNCHER_KEYWORDS))


@dataclass(frozen=True)
class ReadLine:
    """One line as history reads it: the line itself (dialect.LogLine, its UTC time and its
    cycle set), whether it carries a stamp of its own (a stamp with an impossible date dates
    nothing and still says so), and the events history's rule table makes of it: a launcher
    log's launcher events (RULES; `launcher_at`: where the rule matched) and the failure-line
    events (DIAGNOSTIC_RULES, events.DiagnosticEvent)."""

    line: LogLine
    stamped: bool = False
    launcher: tuple[ev.LauncherEvent, ...] = ()
    launcher_at: int = 0
    diagnostic: tuple[ev.Event, ...] = ()

    @property
    def opens_traceback(self) -> bool:
        return any(isinstance(e, ev.TracebackStarted) for e in self.diagnostic)


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


def _capped_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) without ever holding more than one capped line in memory; read in
    buffered chunks up to the file's size at opening (safeio.open_log: never a link, FIFO or device)."""
    with safeio.open_log(path) as fh:
        lineno = 0
        while True:
            chunk = fh.readline(LINE_CAP)
            if not chunk:
                return
            lineno += 1
            if len(chunk) == LINE_CAP and not chunk.endswith(b"\n"):
                while True:  # skip the rest of an over-long line
                    more = fh.readline(LINE_CAP)
                    if not more or more.endswith(b"\n"):
                        break
            yield lineno, _clean(chunk)


def file_identity(rel: str) -> tuple[int | None, int | None, bool]:
    """(cycle, local rank, a per-cycle application log) that a log's path says: a per-cycle
    application log's name (its cycle), torch elastic's attempt directory (its restart and
    local rank), else nothing (its lines take the cycle of the launcher lines before them)."""
    cycle = cycle_of_name(rel.rsplit("/", 1)[-1])
    if cycle is not None:
        return cycle, None, True
    attempt = attempt_of_path(rel)
    if attempt is not None:
        return attempt[0], attempt[1], False
    return None, None, False


class LineStream:
    """Every line of one log file, in order, as history reads it (iterate it once): each line
    peeled (dialect.read_line; a `<N>: ` label is a rank in a per-cycle application log, a node
    elsewhere), dated by the file's clock (dialect.LogClock: the harness's console stamp first,
    else the writer's own stamp, shifted by the run's UTC offset), given its cycle (the file's
    own, or the cycle the launcher lines before it opened: cycle_opened), and with the events the
    rule table makes of it. `binary`: a file of another suffix whose head is mostly control bytes
    (tensorboard events and the like), not worth reading."""

    def __init__(self, path: Path, rel: str, *, utc_offset_s: float = 0, anchor: tuple[int, int] | None = None) -> None:
        self.path, self.rel, self.utc_offset_s = path, rel, utc_offset_s
        self.file_cycle, self.file_local, self.per_cycle = file_identity(rel)
        self.parser = LogParser(rel, split_starts=False)  # this file's state: its clock, its year
        self.parser.clock.anchor = anchor

    @property
    def numbered_by_launcher(self) -> bool:
        """The lines take their cycle from the launcher lines before them (the file names none)."""
        return self.file_cycle is None

    @property
    def binary(self) -> bool:
        if self.path.name.endswith(TEXT_LOG_SUFFIXES):
            return False
        with safeio.open_log(self.path, 4096) as fh:
            head = fh.read(4096)
        if not head:
            return False
        control = sum(1 for b in head if b < 9 or 13 < b < 32 and b != 27)
        return control / len(head) > 0.3

    def utc(self, text: str) -> float | None:
        """A stamp written in this file (a field of a multi-line block), in UTC, by the file's clock."""
        local = self.parser.clock.read(text)
        return None if local is None else local - self.utc_offset_s

    def __iter__(self) -> Iterator[ReadLine]:
        cycle = self.file_cycle
        for lineno, raw in _capped_lines(self.path):
            line = read_line(self.rel, lineno, raw, labels_are_ranks=self.per_cycle, file_local=self.file_local)
            stamped = self._date(line)
            # a per-cycle application log holds worker output, no launcher line
            launcher, at = self._launcher_events(line) if not self.per_cycle else ((), 0)
            if self.file_cycle is None:  # launcher lines move the cycle of everything after them
                for event in launcher:
                    if (opened := cycle_opened(event)) is not None:
                        cycle = opened
            line.cycle = cycle
            yield ReadLine(line, stamped, launcher, at, self._diagnostic(line))

    def _date(self, line: LogLine) -> bool:
        own = maybe_stamped(line.body)
        local = self.parser.clock.read(line.body) if own else None  # a full date moves the log's year
        if line.console is not None:
            line.time = line.console
            return True
        line.time = None if local is None else local - self.utc_offset_s
        return own

    def _launcher_events(self, line: LogLine) -> tuple[tuple[ev.LauncherEvent, ...], int]:
        text = line.body
        if not _LAUNCHER_SCREEN.search(text):
            return (), 0
        rule, m = match_rule(text)
        if rule is None or rule.app:
            return (), 0
        return self.parser.events_of(rule, m, text, Src(line.file, line.lineno, ""), line.rank), m.start()  # type: ignore[return-value]

    def _diagnostic(self, line: LogLine) -> tuple[ev.Event, ...]:
        text = line.body
        matches = diagnostic_matches(text)
        return tuple(event for rule, m in matches
                     for event in self.parser.events_of(rule, m, text, Src(line.file, line.lineno, ""), line.rank))


@dataclass(frozen=True)
class ErrorFile:
    """torch elastic's per-worker error.json (written by @record): the worker's traceback as
    lines (its `py_callstack`, each a ReadLine of the local rank and cycle its path names, dated
    `when`), and the time it records (UTC)."""

    when: float | None
    local_rank: int | None
    lines: tuple[ReadLine, ...]


def read_error_file(path: Path, rel: str) -> ErrorFile | None:
    """The error.json at `path`, or None when it holds no traceback (or is no JSON record)."""
    try:
        data = safeio.read_json(path, limit=ERROR_FILE_LIMIT)
    except (OSError, ValueError, RecursionError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, dict):
        return None
    extra = message.get("extraInfo") or {}
    callstack = extra.get("py_callstack") if isinstance(extra, dict) else None
    if not isinstance(callstack, str):
        return None
    when = None
    try:  # a time datetime can hold, or none
        when = datetime.fromtimestamp(int(extra.get("timestamp")), timezone.utc).timestamp()
    except (TypeError, ValueError, OverflowError, OSError):
        pass
    cycle, local, _ = file_identity(rel)
    parser = LogParser(rel, split_starts=False)
    lines = []
    for lineno, text in enumerate(callstack.splitlines(), start=1):
        line = LogLine(rel, lineno, text, text, None, local, (), None, cycle=cycle)
        matches = diagnostic_matches(text)
        lines.append(ReadLine(line, diagnostic=tuple(
            e for rule, m in matches for e in parser.events_of(rule, m, text, Src(rel, lineno, ""), None))))
    return ErrorFile(when, local, tuple(lines))


# ---------------------------------------------------------------- files, incrementally


class _TrackedFile:
    def __init__(self, path: Path, rel: str, kind: str, cycle: int | None, losses: bool = False) -> None:
        self.losses = losses
        self.path = path
        self.rel = rel
        self.kind = kind
        self.cycle = cycle
        self.offset = 0
        self.bytes_read = 0
        self.ident: tuple[int, int] | None = None
        self.error: str | None = None  # why the last read failed, if it did
        self.parser = self._new_parser()

    def _new_parser(self) -> LogParser:
        # a per-cycle log holds worker output only: the launcher keywords would be wasted passes
        keywords = APP_KEYWORDS if self.kind == "cycle" else ALL_KEYWORDS
        return LogParser(self.rel, split_starts=self.kind != "cycle", keywords=keywords, losses=self.losses)

    def read(self, chunk_size: int, final: bool) -> None:
        """Parse what was appended since the last read; incomplete last lines wait unless final.

        One buffer is reused for the whole file (readinto): fresh multi-MiB objects per
        chunk would cost a page fault per 4 KiB, as much as the parsing itself."""
        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):  # became a link, FIFO or device: never read
            self.error = f"it is {safeio.kind_of(st.st_mode)} now, not a regular file"
            return
        ident = (st.st_dev, st.st_ino)
        if self.ident != ident or st.st_size < self.offset:  # replaced or truncated: start over
            if self.ident is not None:
                self.parser = self._new_parser()
                self.offset = 0
            self.ident = ident
        if st.st_size == self.offset:
            return
        parser = self.parser
        buf = bytearray(chunk_size + MAX_PENDING_LINE)
        view = memoryview(buf)
        consumed = self.offset
        kept = 0  # bytes of an incomplete line carried at the front of buf
        self.error = None
        try:
            with safeio.open_binary(self.path) as f:
                f.seek(self.offset)
                # up to the size at opening: what a live writer appends meanwhile waits for the next poll
                left = os.fstat(f.fileno()).st_size - self.offset
                while left > 0:
                    got = f.readinto(view[kept:kept + min(chunk_size, left)])
                    if not got:
                        break
                    left -= got
                    end = kept + got
                    cut = buf.rfind(b"\n", 0, end)
                    if cut < 0:
                        if end < MAX_PENDING_LINE:
                            kept = end
                            continue
                        cut = end - 1  # a monster line (binary junk): cut it, memory stays bounded
                    parser.feed(buf, cut + 1)
                    consumed += cut + 1
                    kept = end - cut - 1
                    buf[:kept] = buf[cut + 1:end]
                if final and kept:
                    parser.feed(buf, kept)
                    consumed += kept
        except OSError as exc:  # what was parsed stays; the rest is reported, not guessed
            self.error = exc.strerror or str(exc)
        finally:
            view.release()
        self.bytes_read += consumed - self.offset
        self.offset = consumed


# ---------------------------------------------------------------- the reader


@dataclass
class _JsonFile:
    data: object
    src: Src
    error: str | None


class HistoryReader:
    """Reads a run directory into a Timeline; `poll()` again to take in what was appended.

    `inspect_checkpoints=False` skips listing optimizer keys from DCP metadata and reading the
    optimizer records (a few ms per checkpoint, no PyTorch): a watcher of a live run wants it off."""

    def __init__(self, run_dir: str | os.PathLike, *, inspect_checkpoints: bool = True,
                 chunk_size: int = CHUNK_SIZE, losses: bool = False,
                 read_dirs: Sequence[str | os.PathLike] = ()) -> None:
        self.run_dir = Path(run_dir)
        # directories outside the run directory that its records may name and that may be read
        # (the caller vouches for them: verify/report --read-dir, the runner's own plan)
        self.read_dirs = tuple(Path(os.path.realpath(d)) for d in read_dirs)
        self.inspect_checkpoints = inspect_checkpoints
        self.chunk_size = chunk_size
        self.losses = losses  # keep every iteration's lm loss (loss_continuity against a baseline)
        self._app_files: list[_TrackedFile] = []
        self._points: list[tuple[LogParser, list[tuple[bytes, int]]]] = []  # per start of the last poll
        self._files: dict[str, _TrackedFile] = {}
        self._dcp_cache: dict[tuple[str, int, int], tuple[int | None, int | None, str | None, str | None]] = {}
        self._record_cache: dict[tuple[str, int, int], ev.OptimizerRecord] = {}
        self._run_json: list[_JsonFile | None] = []  # run.json read by planned(), taken by the next poll

    def planned(self) -> ev.RunConfig:
        """What run.json alone says (its contract above all), before the logs are read: a caller
        that must know what the run promised to decide how to read it (verify: with the losses,
        against the recorded baseline). The next poll takes this very read of run.json."""
        run_json = _read_run_json(self.run_dir)
        self._run_json = [run_json]
        return _run_config(run_json, None, [])

    def poll(self, *, final: bool = False) -> ev.Timeline:
        """The Timeline of everything readable now. With final=True a last line without a
        newline (a process killed mid-write) is parsed too: use it once the run has ended."""
        check_run_dir(self.run_dir)
        notes: list[str] = []
        run_json = self._run_json.pop() if self._run_json else _read_run_json(self.run_dir)
        launch_json = _read_json(self.run_dir / "launch.json", "launch.json")
        for jf, name in ((run_json, "run.json"), (launch_json, "launch.json")):
            if jf is not None and jf.error:
                notes.append(f"{name} is unreadable ({jf.error}); ignored")
        if launch_json is not None and isinstance(launch_json.data, dict) and launch_json.data.get("capture_error"):
            notes.append(f"the harness could not keep every launcher line: {clip(str(launch_json.data['capture_error']))}")
        injections = self._injections(notes)
        cycle_infos = self._cycle_infos(notes)

        files = self._discover()
        logs = self.run_dir / "logs"
        if os.path.lexists(logs) and not safeio.is_real_dir(logs):
            notes.append(f"logs is {safeio.kind_of(os.lstat(logs).st_mode)}, not a folder: links in a received run "
                         "directory are never followed, so the logs behind it were not read; copy them into the run "
                         "directory (cp -rL) to have them judged")
        app_files = self._app_files = self._pick_role(files, "app", final)
        launcher_files = self._pick_role(files, "launcher", final)

        starts, app_stream = self._starts(app_files)
        dialect = next((f.parser.dialect for f in launcher_files if f.parser.dialect), None)
        config = _run_config(run_json, launch_json, starts, notes)
        offset, offset_how = self._utc_offset(config, files, notes)
        checkpoints = self._checkpoints(run_json, starts, injections, notes)
        launch = _launch_record(launch_json)

        ordered = _order(app_stream, [(f.rel, f.parser.launcher) for f in launcher_files], injections, cycle_infos, offset)
        sources = tuple(
            ev.SourceFile(f.rel, f.kind, f.bytes_read,
                          tuple(r for r, chosen in (("app", app_files), ("launcher", launcher_files)) if f in chosen))
            for f in files if f.bytes_read or f in app_files or f in launcher_files
        )
        for f in files:
            if f.error:
                notes.append(f"{f.rel} could not be read completely ({f.error}); its remaining lines are missing")
            if f.parser.out_of_range:
                notes.append(f"{f.rel}: {f.parser.out_of_range} number(s) outside what any run prints were read as no "
                             f"value (the first: {f.parser.out_of_range_first})")
            if f.parser.starts_merged and f in app_files:
                notes.append(f"{f.rel} opens more than {MAX_STARTS} application starts; the lines of the "
                             f"{f.parser.starts_merged} later ones were read as part of its last start")
        if not app_files:
            notes.append("no application log lines found (no logs/*_cycle<N>.log or other training log)")
        if not launcher_files:
            notes.append("no launcher log lines found (logs/launcher.log, logs/console.log or another log)")
        return ev.Timeline(
            run_dir=self.run_dir, events=tuple(ordered), starts=tuple(starts), checkpoints=checkpoints, run=config,
            launch=launch, injections=tuple(injections), cycle_infos=tuple(cycle_infos), utc_offset_s=offset,
            offset_how=offset_how, launcher_dialect=dialect, sources=sources, notes=tuple(notes),
        )

    def read(self, *, final: bool = True, progress: bool = True, inspect_checkpoints: bool | None = None) -> RunRead:
        """Everything downstream needs, from this reader's one pass: the Timeline (polled once
        more, `final` as for poll), the progress curve of each start for timeline.png (unless
        progress=False: a caller that draws nothing), and the losses when the reader keeps
        them. `inspect_checkpoints` turns checkpoint inspection on for this read (a watcher's
        reader, which had it off while the run was live)."""
        if inspect_checkpoints is not None:
            self.inspect_checkpoints = inspect_checkpoints
        timeline = self.poll(final=final)
        losses = None
        if self.losses:
            losses = {}
            for f in self._app_files:  # in cycle order: a replacement's line of an iteration wins
                losses.update(f.parser.losses or {})
        return RunRead(timeline=timeline, progress=self._progress(timeline) if progress else None, losses=losses)

    def _progress(self, timeline: ev.Timeline) -> tuple[tuple[ev.ProgressPoint, ...], ...]:
        """Iteration against UTC time for each start: the points sampled in the pass, and the
        start's exact first and last iteration."""
        out = []
        for start, sampled in zip(timeline.starts, self._points):
            parser, lines = sampled
            parsed = (parser.point(raw) for raw, _offset in lines)
            points = {ev.ProgressPoint(p[0], p[1] - timeline.utc_offset_s) for p in parsed if p is not None and p[1] is not None}
            for it in (start.first_iteration, start.last_iteration):
                t = timeline.utc(it)
                if it is not None and t is not None:
                    points.add(ev.ProgressPoint(it.iteration, t))
            out.append(tuple(sorted(points, key=lambda q: (q.t, q.iteration))))
        return tuple(out)

    # ---- logs

    def _discover(self) -> list[_TrackedFile]:
        out = []
        for path, rel, kind, cycle in _classify_logs(self.run_dir):
            tracked = self._files.get(rel)
            if tracked is None:
                tracked = self._files[rel] = _TrackedFile(path, rel, kind, cycle, self.losses)
            out.append(tracked)
        return out

    def _pick_role(self, files: list[_TrackedFile], role: str, final: bool) -> list[_TrackedFile]:
        """The highest-priority group of files that carries lines of this role (parsed lazily)."""
        by_kind = {k: [f for f in files if f.kind == k] for k in ("cycle", "launcher", "console", "other")}
        order = ("cycle", "other", "launcher", "console") if role == "app" else ("launcher", "console", "other")
        for kind in order:
            group = by_kind[kind]
            for f in group:
                f.read(self.chunk_size, final)
            if role == "app" and kind == "cycle" and group:
                return sorted(group, key=lambda f: (f.cycle, f.rel))
            if any((f.parser.starts if role == "app" else f.parser.launcher) for f in group):
                return [f for f in group if (f.parser.starts if role == "app" else f.parser.launcher)]
        return []

    def _starts(self, app_files: list[_TrackedFile]) -> tuple[list[ev.AppStart], list[tuple[str, list[ev.Event]]]]:
        self._points = []
        starts: list[ev.AppStart] = []
        stream: list[tuple[str, list[ev.Event]]] = []
        for f in app_files:
            file_events: list[ev.Event] = []
            for ordinal, (events, first, last, bad, saves) in enumerate(f.parser.snapshot_starts()):
                self._points.append((f.parser, f.parser.starts[ordinal].points))
                merged = list(events)
                for it in _unique([first, last, *bad]):
                    merged.append(it)
                merged.sort(key=lambda e: e.src.line)
                cycle = f.cycle if f.kind == "cycle" else ordinal
                starts.append(ev.AppStart(index=len(starts), cycle=cycle, source=f.rel, events=tuple(merged),
                                          first_iteration=first, last_iteration=last, bad_iterations=tuple(bad),
                                          saves_committed=saves))
                file_events.extend(merged)
            stream.append((f.rel, file_events))
        return starts, stream

    # ---- small JSON records

    def _injections(self, notes: list[str]) -> list[ev.Injection]:
        """Every marker: fault_injected.json, then fault_injected.<n>.json of a multi-fault plan."""
        try:
            names = [n for n in os.listdir(self.run_dir) if marker_index(n) is not None]
        except OSError:
            return []
        out: list[ev.Injection] = []
        for name in sorted(names, key=lambda n: marker_index(n) or 0):
            out.extend(self._marker(name, notes))
        return out

    def _marker(self, name: str, notes: list[str]) -> list[ev.Injection]:
        MARKER_NAME = name  # noqa: N806 - the messages below name the file read
        path = self.run_dir / name
        if not os.path.lexists(path):
            return []
        try:
            text = safeio.read_text(path)
        except OSError as exc:
            notes.append(f"{MARKER_NAME} exists but is unreadable ({exc.strerror}); counted as one injection")
            return [ev.Injection(src=Src(MARKER_NAME, 0, "unreadable"), fault="unknown", signal=None, rank=None,
                                 local_rank=None, cycle=None, iteration=None, baseline_iteration=None, host=None, pid=None)]
        records: list[object] = []
        try:
            data = safeio.parse_record(text)
            records = data if isinstance(data, list) else [data]
        except safeio.UnusableRecord as exc:
            raise refused_record(path, MARKER_NAME, exc) from None
        except (ValueError, RecursionError):
            for line in text.splitlines():  # tolerate JSON lines (one record per injection)
                try:
                    records.append(safeio.parse_record(line))
                except safeio.UnusableRecord as exc:
                    raise refused_record(path, MARKER_NAME, exc) from None
                except (ValueError, RecursionError):
                    continue
        if not records:
            notes.append(f"{MARKER_NAME} holds no JSON record; counted as one injection of unknown iteration")
            records = [{}]
        out = []
        for i, rec in enumerate(records[:MAX_MARKER_RECORDS]):
            rec = rec if isinstance(rec, dict) else {}
            shown = json.dumps({k: rec[k] for k in ("fault", "fault_at", "rank", "cycle", "iteration", "injected_at") if k in rec})
            ts = parse_iso_utc(rec.get("injected_at"))
            problems = []
            if ts is None and rec.get("injected_at") not in (None, ""):
                problems.append(f"injected_at {clip(repr(rec.get('injected_at')), 60)} is not a possible time")
            for key in ("iteration", "baseline_iteration", "rank", "cycle"):
                value = rec.get(key)
                if value is not None and (_int(value) is None or _int(value) < 0):
                    problems.append(f"{key} {clip(repr(value), 40)} is not a non-negative integer")
            out.append(ev.Injection(
                src=Src(MARKER_NAME, i + 1 if len(records) > 1 else 1, clip(shown)),
                ts=ts, ts_utc=True, problem="; ".join(problems) or None,
                fault=clip(str(rec.get("fault") or "unknown"), 40), signal=_str(rec.get("signal")), rank=_int(rec.get("rank")),
                local_rank=_int(rec.get("local_rank")), cycle=_int(rec.get("cycle")), iteration=_int(rec.get("iteration")),
                baseline_iteration=_int(rec.get("baseline_iteration")), host=_str(rec.get("host")), pid=_int(rec.get("pid")),
                launcher_pid=_int(rec.get("launcher_pid")),
                fault_at=_str(rec.get("fault_at")) or DEFAULT_FAULT_AT, fault_index=marker_index(name) or 1,
                committed_iteration=_int(rec.get("committed_iteration")), poisoned=_str(rec.get("poisoned")),
            ))
        return out

    def _cycle_infos(self, notes: list[str]) -> list[ev.CycleInfo]:
        directory = self.run_dir / "cycle_infos"
        out: list[ev.CycleInfo] = []
        if not safeio.is_real_dir(directory):
            return out
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return out
        for name in names:
            m = _CYCLE_INFO_RE.match(name)
            path = directory / name
            if not m or path.is_symlink():
                continue
            jf = _read_json(path, f"cycle_infos/{name}")
            if jf is None or jf.error or not isinstance(jf.data, dict):
                notes.append(f"cycle_infos/{name} is unreadable; ignored")
                continue
            d = jf.data
            cycle = _int(d.get("cycle_number"))
            if cycle is None or cycle < 0:
                cycle = number(m.group(3), "cycle")
            if cycle is None:
                notes.append(f"cycle_infos/{clip(name, 80)} names no cycle a run can have; ignored")
                continue
            out.append(ev.CycleInfo(
                src=jf.src, ts=parse_iso_utc(d.get("cycle_start_time")), ts_utc=True,
                cycle=cycle, attempt=_int(d.get("attempt_index")),
                ended=parse_iso_utc(d.get("cycle_end_time")), log_file=_str(d.get("cycle_log_file")),
                active_ranks=_str(d.get("active_ranks")), active_nodes=_str(d.get("active_nodes")),
                standby_nodes=_str(d.get("standby_nodes")),
            ))
        out.sort(key=lambda c: (c.attempt or 0, c.cycle))
        return out

    # ---- time

    def _utc_offset(self, config: ev.RunConfig, files: list[_TrackedFile], notes: list[str]) -> tuple[int, str]:
        if config.utc_offset_s is not None:
            problem = utc_offset_problem(config.utc_offset_s)
            if problem is None:
                return config.utc_offset_s, "run.json utc_offset_s"
            notes.append(f"run.json's utc_offset_s {problem}; ignored")
        pairs = [p for f in files for p in f.parser.offset_pairs if abs(p[0] - p[1]) <= MAX_UTC_OFFSET_S + 3600]
        if not pairs:
            pairs = _console_head_pairs(self.run_dir / "logs" / "console.log")
        if pairs:
            offsets = sorted(round((local - utc) / 900) * 900 for local, utc in pairs)
            return int(offsets[len(offsets) // 2]), "derived from log lines that carry both local and UTC time"
        local_ts = next((f.parser.first_local_ts for f in files if f.parser.first_local_ts is not None), None)
        at = local_ts if local_ts is not None else time.time()
        offset = int(time.localtime(at).tm_gmtoff)
        if local_ts is not None:
            notes.append(f"UTC offset of the log stamps unknown (no run.json utc_offset_s, no line with both local and UTC "
                         f"time): assumed this machine's ({offset:+d} s); latencies that mix the marker's UTC time with "
                         "log stamps may be off by whole hours")
            return offset, "assumed: the verifying machine's local offset"
        return offset, "not needed (no local-time stamps)"

    # ---- checkpoints

    def _checkpoints(self, run_json: _JsonFile | None, starts: list[ev.AppStart], injections: list[ev.Injection],
                     notes: list[str]) -> ev.CheckpointState | None:
        """The checkpoint tiers on disk. Every directory the records name (run.json's
        checkpoint_dir and workload arguments, the arguments tables' --save, --load and
        --non-persistent-global-ckpt-dir) is read only inside the run directory, or inside a
        directory the caller named (`read_dirs`: verify/report --read-dir, the runner's own
        plan); each one that is not read is noted. A path recorded where the run was written
        (run.json's work_dir/runs/run_id) is taken where the run directory is now; a relative
        one from the launch's recorded working directory, never from the reader's."""
        spec = _spec(run_json)
        root, copied = _recorded_root(spec, self.run_dir)
        cwd = _launch_cwd(run_json, root, self.run_dir)
        own = self.run_dir / "checkpoints"
        # (the path or None, how it was found, the text the record holds, why it cannot be a path)
        candidates: list[tuple[Path | None, str, str, str | None]] = []
        if isinstance(spec.get("checkpoint_dir"), str) and spec["checkpoint_dir"]:
            text = spec["checkpoint_dir"]
            path, problem = _named_dir(text, root, cwd, self.run_dir)
            candidates.append((path, "run.json spec.checkpoint_dir", text, problem))
        candidates.append((own, "<run>/checkpoints", "checkpoints", None))
        for start in starts:
            args = start.arguments
            for key in ("save", "load"):
                value = args.get(key) if args else None
                if value and value != "None":
                    path, problem = _named_dir(value, root, cwd, self.run_dir)
                    candidates.append((path, f"the arguments table's {key}", value, problem))
        chosen, refused, skipped = None, [], []  # the first candidate that is there and may be read
        for p, how, text, problem in candidates:
            if p is None or not self._may_read(p):
                if text not in skipped:
                    skipped.append(text)
                    notes.append(_not_read_note("the checkpoint directory", how, text, p, problem))
            else:
                link = _link_below(p, self.run_dir)
                if link is None and p.is_dir():  # is_dir: False for a link loop
                    chosen = (p, how)
                    break
                if link is not None and link not in refused:
                    refused.append(link)
                    notes.append(f"{_shown(link, self.run_dir)} is a symbolic link: links in a received run directory "
                                 "are never followed, so the checkpoints behind it were not read; copy them into the "
                                 "run directory (cp -rL) to have them judged")
            if p == own and os.path.lexists(own):
                break  # the run's own checkpoints/ is there: the arguments table's paths (maybe the original's) are not
        if chosen is None:
            # no persistent tier to read: a non-persistent one named outside is still noted
            np_path, np_how, np_text, np_problem = self._non_persistent_dir(run_json, starts, own, root, cwd)
            if np_how != "default" and (np_path is None or not self._may_read(np_path)) and np_text not in skipped:
                notes.append(_not_read_note("the non-persistent global checkpoint directory", np_how, np_text,
                                            np_path, np_problem))
            first = candidates[0]
            shown = _shown(first[0], self.run_dir) if first[0] is not None else clip(first[2], 200)
            how = "not followed: a symlink" if refused else (
                "not read: outside the run directory" if skipped and first[2] in skipped else "not found")
            return ev.CheckpointState(path=shown, how=how, exists=False, tracker=None)
        path, how = chosen
        recorded = candidates[0]
        if recorded[1] == "run.json spec.checkpoint_dir" and recorded[0] != path and recorded[2] not in skipped:
            notes.append(f"run.json's checkpoint_dir {recorded[0]} is not here; used {path} ({how})")
        shown = _shown(path, self.run_dir)
        if copied and not _lexically_inside(path, self.run_dir):
            notes.append(f"this run directory was copied from {root}; its checkpoint dir {path} lies outside it and was "
                         "read where it is now (--read-dir), which may not be the run's own checkpoints")
        tracker = _tracker_text(path)
        wanted = self._interesting_iterations(starts, injections)
        iters = self._iter_dirs(path, shown, wanted, notes)
        np_tracker = np_shown = None
        np_path, np_how, np_text, np_problem = self._non_persistent_dir(run_json, starts, path, root, cwd)
        np_label = _shown(np_path, self.run_dir) if np_path is not None else clip(repr(np_text), 120)
        if np_path is None or not self._may_read(np_path):
            if np_text not in skipped:
                notes.append(_not_read_note("the non-persistent global checkpoint directory", np_how, np_text, np_path,
                                            np_problem))
        elif _link_below(np_path, self.run_dir) is not None:
            notes.append(f"{np_label} is a symbolic link: not followed, so the "
                         "non-persistent checkpoints behind it were not read")
        elif np_path.is_dir() and not np_path.is_symlink():
            np_tracker, np_shown = _tracker_text(np_path), np_label
            if np_path != path:  # a custom directory that is --save itself holds no second tier
                iters += self._iter_dirs(np_path, np_label, wanted, notes)
        elif np_how != "default":
            notes.append(f"the non-persistent global checkpoint directory {np_label} ({np_how}) is not here, so the "
                         "non-persistent checkpoints were not read")
        iters.sort(key=lambda c: c.iteration)
        return ev.CheckpointState(path=shown, how=how, exists=True, tracker=tracker, iterations=tuple(iters),
                                  non_persistent_tracker=np_tracker, non_persistent_path=np_shown)

    def _may_read(self, path: Path) -> bool:
        """A directory the records name may be read: it lies (by its path, links aside, which
        _link_below refuses) inside the run directory, or inside a directory the caller named."""
        if _lexically_inside(path, self.run_dir):
            return True
        if not self.read_dirs:
            return False
        try:
            real = Path(os.path.realpath(path))
        except (OSError, ValueError):
            return False
        return any(real == d or d in real.parents for d in self.read_dirs)

    def _non_persistent_dir(self, run_json: _JsonFile | None, starts: list[ev.AppStart], save: Path,
                            root: Path | None, cwd: Path | None) -> tuple[Path | None, str, str, str | None]:
        """Where Megatron wrote non-persistent global checkpoints (harness.vocab.tiers): the
        --non-persistent-global-ckpt-dir of the arguments table (the last start's that names
        one), else of run.json's workload arguments, else <save>/non_persistent. (the path or
        None, how it was found, the text recorded, why it cannot be a path)"""
        for start in reversed(starts):
            value = start.arguments.get(tiers.NP_DIR_ARG) if start.arguments else None
            if value and value != "None":
                path, problem = _named_dir(value, root, cwd, self.run_dir)
                return path, "the arguments table's " + tiers.NP_DIR_ARG, value, problem
        extra = _spec(run_json).get("extra_args")  # a stranger's run.json: a list of strings, or nothing
        given = tiers.custom_non_persistent_dir(tuple(a for a in extra if isinstance(a, str))
                                                if isinstance(extra, list) else ())
        if given:
            path, problem = _named_dir(given, root, cwd, self.run_dir)
            return path, "run.json's workload arguments", given, problem
        default = save / tiers.NON_PERSISTENT_SUBDIR
        return default, "default", str(default), None

    def _iter_dirs(self, path: Path, shown: str, wanted: set[int], notes: list[str]) -> list[ev.CheckpointOnDisk]:
        iters = []
        try:
            entries = list(os.scandir(path))
        except OSError as exc:
            notes.append(f"checkpoint dir {shown} unreadable ({exc.strerror})")
            entries = []
        ignored = 0
        for entry in entries:
            it = number(str(n), "iteration") if (n := parse_iter_name(entry.name)) is not None else None
            if it is None:
                continue
            try:
                real_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                real_dir = False
            if not is_megatron_iter_name(entry.name) or not real_dir:
                ignored += 1
                if ignored > MAX_IGNORED_NOTES:
                    continue
                what = "a symlink" if entry.is_symlink() else ("not Megatron's iter_%07d name" if real_dir
                                                              else "not a directory")
                notes.append(f"ignored {shown}/{entry.name}: {what}; only the directory Megatron writes for an "
                             "iteration counts as its checkpoint")
                continue
            d = Path(entry.path)
            has_md = safeio.is_regular(d / ".metadata")
            opt = total = sample = note = record = None
            if it in wanted:
                opt, total, sample, note = self._dcp_keys(d) if has_md else (None, None, None, "no .metadata file")
                record = self._optimizer_record(d) if has_md and self.inspect_checkpoints else None
            else:
                note = "not needed by any check"
            iters.append(ev.CheckpointOnDisk(iteration=it, rel=f"{shown}/{entry.name}", committed=safeio.is_regular(d / "metadata.json"),
                                             has_dcp_metadata=has_md, optimizer_keys=opt, total_keys=total,
                                             sample_key=sample, inspect_note=note, optimizer_record=record))
        if ignored > MAX_IGNORED_NOTES:
            notes.append(f"ignored {ignored - MAX_IGNORED_NOTES} more entries of {shown} for the same reasons")
        return iters

    @staticmethod
    def _interesting_iterations(starts: list[ev.AppStart], injections: list[ev.Injection]) -> set[int]:
        wanted = {i.iteration for i in injections if i.iteration is not None}
        for start in starts:
            for e in start.events:
                if isinstance(e, (ev.LoadStarted, ev.CheckpointLoaded)):
                    wanted.add(e.iteration)
            saved = [e.iteration for e in start.events if isinstance(e, ev.SaveCommitted)]
            if saved:
                wanted.add(max(saved))
        # the first checkpoint committed after each load: the optimizer's step counter is checked there
        for i, start in enumerate(starts):
            for e in start.events:
                if isinstance(e, ev.CheckpointLoaded):
                    later = [s.iteration for st in starts[i:] for s in st.events
                             if isinstance(s, ev.SaveCommitted) and s.iteration > e.iteration]
                    if later:
                        wanted.add(min(later))
        return wanted

    def _optimizer_record(self, directory: Path) -> ev.OptimizerRecord:
        try:
            st = (directory / ".metadata").stat()
        except OSError as exc:
            return ev.OptimizerRecord(note=f".metadata unreadable ({exc.strerror})")
        key = (str(directory), st.st_mtime_ns, st.st_size)
        if key not in self._record_cache:
            self._record_cache[key] = read_optimizer_record(directory)
        return self._record_cache[key]

    def _dcp_keys(self, directory: Path) -> tuple[int | None, int | None, str | None, str | None]:
        if not self.inspect_checkpoints:
            return None, None, None, "checkpoint inspection turned off"
        md = directory / ".metadata"
        try:
            st = os.lstat(md)
        except OSError as exc:
            return None, None, None, f".metadata unreadable ({exc.strerror})"
        if not stat.S_ISREG(st.st_mode) or st.st_size > DCP_METADATA_LIMIT:
            why = safeio.kind_of(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes"
            return None, None, None, f".metadata not read ({why})"
        key = (str(md), st.st_mtime_ns, st.st_size)
        if key not in self._dcp_cache:
            self._dcp_cache[key] = dcp_optimizer_keys(directory)
        return self._dcp_cache[key]


def warm_up() -> None:
    """Import what reading a checkpoint's optimizer record needs (numpy, for its tensors; no
    PyTorch: harness.safe.safe_unpickle) ahead of time, e.g. while a launch is running."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass


def dcp_optimizer_keys(directory: Path) -> tuple[int | None, int | None, str | None, str | None]:
    """(optimizer keys, all keys, a sample optimizer key, why not known) of one DCP checkpoint,
    read with harness.read.optimizer_record.read_dcp_metadata (no PyTorch). Optimizer tensors are
    the keys holding Adam moments (`exp_avg`, `exp_avg_sq`) by optimizer_record.moment_keys, the
    rule optimizer_state reads them by: Megatron's distributed and plain optimizers, each under a
    ChainedOptimizer's `chained_<i>.` prefix too."""
    # Not torch's FileSystemReader.read_metadata: that is a plain pickle.load (code from a received run dir).
    try:
        metadata = read_dcp_metadata(directory)
        keys = [str(k) for k in metadata.state_dict_metadata]
    except Exception as exc:  # noqa: BLE001 - any damage in a received file makes the keys unknown, with the reason
        return None, None, None, f"DCP metadata unreadable: {clip(f'{type(exc).__name__}: {exc}', 120)}"
    optimizer = sorted(moment_keys(keys))
    return len(optimizer), len(keys), (optimizer[0] if optimizer else None), None


# ---------------------------------------------------------------- assembly helpers


def check_run_dir(run_dir: Path) -> None:
    """Raise RunDirError unless this looks like a run directory we can read."""
    check_readable_dir(run_dir)
    has_logs = bool(_classify_logs(run_dir))
    has_marker = (run_dir / MARKER_NAME).exists()
    try:
        has_ckpt = safeio.is_real_dir(run_dir / "checkpoints") and any((run_dir / "checkpoints").iterdir())
    except OSError:
        has_ckpt = False
    if not (has_logs or has_marker or has_ckpt):
        if (run_dir / "run.json").exists():  # said the same to every command that reads it (verify, report, ...)
            raise RunDirError(f"{run_dir} is a plan that never ran: it holds only run.json (from nvrx-qual plan or a "
                              f"dry run), no logs, no {MARKER_NAME} and no checkpoints; nothing to judge until it is "
                              "launched (nvrx-qual run)")
        raise RunDirError(f"{run_dir} holds nothing: no logs (logs/*.log), no {MARKER_NAME} and no checkpoints; give "
                          "the directory of a launched run")


def _tracker_text(directory: Path) -> str | None:
    read = read_tracker_file(directory / TRACKER_NAME)  # layout's one tracker reader
    return read.text.strip()[:64] if read.text is not None else None


def _console_head_pairs(path: Path, limit: int = 256 << 10) -> list[tuple[float, float]]:
    """(local, UTC) stamp pairs from the head of the harness's console capture: its UTC
    capture time next to the launcher's own local stamp gives the node's UTC offset."""
    try:
        with safeio.open_binary(path) as f:
            head = f.read(limit)
    except OSError:
        return []
    parser = LogParser("logs/console.log", split_starts=True)
    pairs: list[tuple[float, float]] = []
    for raw in head.split(b"\n")[:-1]:
        _, body, console = _strip_prefix(raw.decode("utf-8", "replace"))
        local = parser._stamp(body) if console is not None else None
        if local is not None and console is not None:
            pairs.append((local, console))
            if len(pairs) >= 16:
                break
    return pairs


class RecordRefused(RunDirError):
    """A run directory one of whose records holds a string the OS cannot take (refused input,
    not a directory without a run)."""


def refused_record(path: Path, rel: str, problem: safeio.UnusableRecord | str) -> RecordRefused:
    """The refusal of a run directory one of whose records (`path`, `rel` in the run
    directory) holds a string the OS cannot take."""
    return RecordRefused(
        f"{path}: {problem}; nvrx-qual never writes such a record, so {rel} was altered or damaged "
        "after the run: restore it from the run (or remove that field) and verify again")


def _read_json(path: Path, rel: str) -> _JsonFile | None:
    """One JSON record of the run directory (run.json, launch.json, cycle infos); None when
    absent. Raises RunDirError when a string of it cannot reach the OS (safeio.parse_record)."""
    try:
        text = safeio.read_text(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _JsonFile(None, Src(rel, 0, "unreadable"), exc.strerror or str(exc))
    try:
        data = safeio.parse_record(text)
    except safeio.UnusableRecord as exc:
        raise refused_record(path, rel, exc) from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than any record
        return _JsonFile(None, Src(rel, 0, "not JSON"), clip(str(exc) or type(exc).__name__, 120))
    return _JsonFile(data, Src(rel, 1, clip(json.dumps(data, separators=(", ", ": ")))), None)


def _read_run_json(run_dir: Path) -> _JsonFile | None:
    """run.json, every string checked (_read_json) and the paths and names it records too
    (unusable_path): RunDirError for one the OS cannot take."""
    run_json = _read_json(run_dir / "run.json", "run.json")
    if run_json is not None and (unusable := unusable_path(run_json.data)) is not None:
        raise refused_record(run_dir / "run.json", "run.json", unusable)
    return run_json


def unusable_path(record: object) -> str | None:
    """run.json's first string that names a path (spec.work_dir, spec.checkpoint_dir, the
    launch's working directories, the directories its workload arguments name) or one name
    (spec.run_id) and that the OS cannot take as such (safeio.path_problem): where and why."""
    if not isinstance(record, dict):
        return None
    spec = record.get("spec") if isinstance(record.get("spec"), dict) else {}
    named: list[tuple[str, object]] = [("spec.work_dir", spec.get("work_dir")),
                                       ("spec.checkpoint_dir", spec.get("checkpoint_dir")),
                                       ("spec.run_id", spec.get("run_id"))]
    if isinstance(spec.get("work_dir"), str) and isinstance(spec.get("run_id"), str):
        named.append(("spec.work_dir/runs/spec.run_id", f"{spec['work_dir']}/runs/{spec['run_id']}"))
    extra = spec.get("extra_args")
    for i, arg in enumerate(extra[:4096] if isinstance(extra, list) else []):
        if not isinstance(arg, str):
            continue
        for flag in tiers.DIR_FLAGS:  # the value of `--flag V` or `--flag=V`
            if arg.startswith(flag + "="):
                named.append((f"spec.extra_args[{i}] ({flag})", arg.partition("=")[2]))
            elif arg == flag and i + 1 < len(extra):
                named.append((f"spec.extra_args[{i + 1}] ({flag})", extra[i + 1]))
    commands = record.get("commands")
    for i, command in enumerate(commands[:64] if isinstance(commands, list) else []):
        if isinstance(command, dict):
            named.append((f"commands[{i}].cwd", command.get("cwd")))
    for where, value in named:
        if isinstance(value, str) and value and (problem := safeio.path_problem(value)) is not None:
            return f"{where} holds {problem}"
    return None


def _spec(run_json: _JsonFile | None) -> dict:
    if run_json is None or not isinstance(run_json.data, dict):
        return {}
    spec = run_json.data.get("spec")
    return spec if isinstance(spec, dict) else {}


def _run_config(run_json: _JsonFile | None, launch_json: _JsonFile | None, starts: list[ev.AppStart],
                notes: list[str] | None = None) -> ev.RunConfig:
    data = run_json.data if run_json is not None and isinstance(run_json.data, dict) else {}
    spec = _spec(run_json)
    contract, planned = _contract(data.get("contract"), notes if notes is not None else [])
    args = next((s.arguments for s in starts if s.arguments is not None), None)
    train_iters = train_src = save_interval = save_src = None
    if args is not None and args.integer("train_iters") is not None:
        train_iters, train_src = args.integer("train_iters"), str(args.src_of("train_iters"))
    elif _int(spec.get("train_iters")) is not None:
        train_iters = _int(spec.get("train_iters"))
        train_src = f"run.json:0: spec.train_iters = {train_iters}"
    else:
        last = next((s.last_iteration for s in reversed(starts) if s.last_iteration is not None), None)
        if last is not None:
            train_iters, train_src = last.train_iters, str(last.src)
    if args is not None and args.integer("save_interval") is not None:
        save_interval, save_src = args.integer("save_interval"), str(args.src_of("save_interval"))
    elif _int(spec.get("save_interval")) is not None:
        save_interval = _int(spec.get("save_interval"))
        save_src = f"run.json:0: spec.save_interval = {save_interval}"
    commands = data.get("commands") if isinstance(data.get("commands"), list) else []
    argv: tuple[str, ...] = ()
    if commands and isinstance(commands[0], dict) and isinstance(commands[0].get("argv"), list):
        argv = tuple(str(a) for a in commands[0]["argv"])
    nvrx = _str(data.get("nvrx_version"))
    if nvrx is None and launch_json is not None and isinstance(launch_json.data, dict):
        nvrx = _str(launch_json.data.get("nvrx_version"))
    extra = spec.get("extra_args") if isinstance(spec.get("extra_args"), list) else []
    profile, deadlines = _deadlines(spec)
    return ev.RunConfig(
        deadline_profile=profile, deadlines=deadlines,
        requested_fault=_str(spec.get("fault")),
        config_hash=_str(data.get("config_hash")),
        fault_rank=_int(spec.get("fault_rank")),
        fault_at=_str(spec.get("fault_at")), max_restarts=_int(spec.get("max_restarts")),
        schedule=planned if planned is not None else (schedule_from_json(spec.get("schedule")) or ()),
        seed=_int(spec.get("seed")),
        max_no_progress_cycles=_int(spec.get("max_no_progress_cycles")),
        train_iters=train_iters, train_iters_src=train_src, save_interval=save_interval, save_interval_src=save_src,
        nvrx_version=nvrx, utc_offset_s=_int(data.get("utc_offset_s")), extra_args=tuple(str(a) for a in extra),
        argv=argv, dry_run=bool(data.get("dry_run")), has_run_json=run_json is not None and run_json.error is None,
        nnodes=spec.get("nnodes") if _whole(spec.get("nnodes")) else None,
        min_nnodes=spec.get("min_nnodes") if _whole(spec.get("min_nnodes")) else None,
        shape=tuple((k, spec[k]) for k in ev.RUN_SHAPE_KEYS if _whole(spec.get(k))),
        created_at=parse_iso_utc(data.get("created_at")),
        workload=_str(spec.get("workload")), megatron_version=_str(data.get("megatron_version")),
        distributed_optimizer=_bool(spec.get("distributed_optimizer")),
        transformer_engine=_bool(spec.get("transformer_engine")), apex=_bool(spec.get("apex")),
        contract=contract,
    )


CONTRACT_VERSION = 1  # the version of run.json's contract this reader knows (harness.launch.contract.VERSION)
_BASELINE_HOWS = ("ran", "reused", "given", "none", "auto")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+_-]{0,63}")
MAX_PATH_CHARS = 4096
MAX_RUN_ID_CHARS = 255


def run_config(run_dir: str | os.PathLike) -> ev.RunConfig:
    """What run.json alone says of a run (its logs unread): the same reading as a Timeline's
    `run`, for a caller that must know the contract before it reads the run (verify: which
    baseline to read it with)."""
    return _run_config(_read_run_json(Path(run_dir)), None, [])


def _contract(value: object, notes: list[str]) -> tuple[ev.Contract | None, tuple[PlannedFault, ...] | None]:
    """run.json's `contract` (harness.launch.contract writes it; docs/contracts.md), every field checked:
    a part that is not what the suite writes is left out with a note, never guessed. Returns the
    contract and its planned faults (None: none readable, the spec's schedule stands)."""
    if value is None:
        return None, None
    version = value.get("version") if isinstance(value, dict) else None
    if not isinstance(value, dict) or version != CONTRACT_VERSION or isinstance(version, bool):
        notes.append(f"run.json's contract is not version {CONTRACT_VERSION} of the format this reader knows "
                     f"({clip(repr(version), 40)}): ignored; the run is judged as one from before contracts")
        return None, None
    planned: tuple[PlannedFault, ...] | None = None
    faults = value.get("faults")
    if faults == []:
        planned = ()
    elif faults is not None:
        planned = schedule_from_json(faults)
        if planned is None or any(not isinstance(f, dict) or f.get("fault_index") != i
                                  for i, f in enumerate(faults, start=1)):
            notes.append("run.json's contract.faults is not a list of planned faults in marker order: ignored; "
                         "spec.schedule stands")
            planned = None
    fault_after = value.get("tiers", {}).get("fault_after") if isinstance(value.get("tiers"), dict) else None
    return ev.Contract(
        version=CONTRACT_VERSION,
        fault_after=fault_after if fault_after in tiers.FAULT_AFTER else None,
        launcher=_planned_launcher(value.get("launcher"), notes),
        baseline=_planned_baseline(value.get("baseline"), notes),
        tiers=_pairs(value.get("tiers"), ("save_interval", "fault_after", "non_persistent_ckpt_type")),
        shape=_pairs(value.get("shape"), ("nnodes", "gpus_per_node", "world", "tp", "pp", "cp", "dp", "hot_spares",
                                          "min_nnodes")),
    ), planned


def _pairs(value: object, keys: tuple[str, ...]) -> tuple[tuple[str, str | int | None], ...]:
    """The named whole numbers and short words of a contract section; anything else left out."""
    if not isinstance(value, dict):
        return ()
    out: list[tuple[str, str | int | None]] = []
    for key in keys:
        item = value.get(key)
        if item is None or (isinstance(item, str) and _PROFILE_RE.fullmatch(item)):
            out.append((key, item))
        elif (n := _int(item)) is not None and _whole(item):
            out.append((key, n))
    return tuple(out)


def _text(value: object, limit: int) -> str | None:
    """A string as the suite writes one: not empty, no NUL, not longer than `limit`."""
    return value if isinstance(value, str) and value and "\0" not in value and len(value) <= limit else None


def _planned_launcher(value: object, notes: list[str]) -> ev.PlannedLauncher | None:
    if value is None:
        return None
    version = value.get("version") if isinstance(value, dict) else None
    if not isinstance(value, dict) or not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        notes.append("run.json's contract.launcher names no NVRx version: ignored (launcher_identity cannot compare)")
        return None
    sha, path, files = value.get("sha256"), value.get("path"), value.get("files")
    return ev.PlannedLauncher(version=version, path=_text(path, MAX_PATH_CHARS),
                              sha256=sha if isinstance(sha, str) and _SHA256_RE.fullmatch(sha) else None,
                              files=_int(files) if _whole(files) and files >= 0 else None)


def _planned_baseline(value: object, notes: list[str]) -> ev.PlannedBaseline | None:
    if value is None:
        return None
    how = value.get("how") if isinstance(value, dict) else None
    if not isinstance(value, dict) or how not in _BASELINE_HOWS:
        notes.append(f"run.json's contract.baseline says no way it came ({clip(repr(how), 40)}): ignored")
        return None
    run_id = value.get("run_id")
    if run_id is not None and not (isinstance(run_id, str) and len(run_id) <= MAX_RUN_ID_CHARS and is_valid_run_id(run_id)):
        notes.append(f"run.json's contract.baseline.run_id {clip(repr(run_id), 80)} is not a run ID: the baseline "
                     "it names cannot be looked up")
        return ev.PlannedBaseline(how=how, problem=f"run.json names the baseline {clip(repr(run_id), 80)}, which is "
                                                   "not a run ID")
    digest = value.get("checkpoints")
    digest = digest if isinstance(digest, dict) else {}
    config = value.get("config_hash")
    entries, size = digest.get("entries"), digest.get("bytes")
    sha, sizes = digest.get("sha256"), digest.get("sizes_sha256")
    return ev.PlannedBaseline(
        how=how, run_id=run_id, config_hash=config if isinstance(config, str) and _SHA256_RE.fullmatch(config) else None,
        checkpoints_method=_text(digest.get("method"), 200),
        checkpoints_entries=_int(entries) if _whole(entries) and entries >= 0 else None,
        checkpoints_bytes=_int(size) if _whole(size) and size >= 0 else None,
        checkpoints_sha256=sha if isinstance(sha, str) and _SHA256_RE.fullmatch(sha) else None,
        checkpoints_sizes_sha256=sizes if isinstance(sizes, str) and _SHA256_RE.fullmatch(sizes) else None,
        why=_str(value.get("why")), problem=_str(value.get("problem")))


def _whole(value: object) -> bool:
    """A JSON whole number as run.json writes one (not a bool, not a string)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _launch_record(launch_json: _JsonFile | None) -> ev.LaunchRecord | None:
    if launch_json is None or not isinstance(launch_json.data, dict):
        return None
    d = launch_json.data
    stopped = d.get("stopped_early")
    return ev.LaunchRecord(exit_code=_int(d.get("launcher_exit_code")), started_at=parse_iso_utc(d.get("started_at")),
                           ended_at=parse_iso_utc(d.get("ended_at")), stopped_early=str(stopped) if stopped else None,
                           nvrx_version=_str(d.get("nvrx_version")), src=launch_json.src,
                           clock_jumps=_clock_jumps(d.get("clock_jumps")), stopped_at=parse_iso_utc(d.get("stopped_at")))


MAX_CLOCK_JUMP_S = 10 * 365 * 86400.0


def _clock_jumps(value: object) -> tuple[tuple[float, float, float], ...]:
    """launch.json's clock jumps, each range-checked; anything malformed is left out."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value[:100]:
        if not isinstance(item, dict):
            continue
        before, after, jump = parse_iso_utc(item.get("before")), parse_iso_utc(item.get("after")), item.get("jump_s")
        if (before is None or after is None or isinstance(jump, bool) or not isinstance(jump, (int, float))
                or not math.isfinite(jump) or abs(jump) > MAX_CLOCK_JUMP_S):
            continue
        out.append((before, after, float(jump)))
    return tuple(out)


def _order(app_stream: list[tuple[str, list[ev.Event]]], launcher_stream: list[tuple[str, list[ev.LauncherEvent]]],
           injections: list[ev.Injection], cycle_infos: list[ev.CycleInfo], offset: int) -> list[ev.Event]:
    """One order for every event: UTC time where the event has one; an unstamped line takes
    the time of the stamped line before it in the same file (or after it, at a file's top).
    A file's own order stands: a line never sorts before one written above it in its file
    (Megatron's `datetime:` stamps are whole seconds, floored, and `[after training is done]`
    follows the last save line it would otherwise precede)."""
    keyed: list[tuple[float, int, int, ev.Event]] = []
    rank = 0
    for _, events in [*app_stream, *launcher_stream]:
        times = [(e.ts if e.ts_utc else e.ts - offset) if e.ts is not None else None for e in events]
        carried: float | None = next((t for t in times if t is not None), None)
        for i, (e, t) in enumerate(zip(events, times)):
            if t is not None and (carried is None or t > carried):
                carried = t
            keyed.append((carried if carried is not None else float("inf"), rank, i, e))
        rank += 1
    for e in [*injections, *cycle_infos]:
        keyed.append((e.ts if e.ts is not None else float("inf"), rank, 0, e))
        rank += 1
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed]


def _unique(items: list[ev.Iteration | None]) -> list[ev.Iteration]:
    seen: set[int] = set()
    out = []
    for it in items:
        if it is not None and it.src.line not in seen:
            seen.add(it.src.line)
            out.append(it)
    return out


def _recorded_root(spec: dict, run_dir: Path) -> tuple[Path | None, bool]:
    """(where the run directory was written: run.json's work_dir/runs/run_id, when both are
    recorded, the work dir absolute and the run ID a valid one; whether that is elsewhere than
    the directory read now, i.e. it was copied since)."""
    work_dir, run_id = spec.get("work_dir"), spec.get("run_id")
    if not isinstance(work_dir, str) or not isinstance(run_id, str) or not is_valid_run_id(run_id) \
            or not os.path.isabs(work_dir):
        return None, False
    root = Path(work_dir) / "runs" / run_id
    try:
        same = root.resolve() == run_dir.resolve()
    except (OSError, RuntimeError, ValueError):
        same = False
    return root, not same


def _rebased(path: Path, original: Path | None, run_dir: Path) -> Path:
    """A path inside the run's original directory, moved to where the run is now."""
    if original is None:
        return path
    try:
        return run_dir / Path(os.path.normpath(path)).relative_to(os.path.normpath(original))
    except ValueError:
        return path


def _launch_cwd(run_json: _JsonFile | None, root: Path | None, run_dir: Path) -> Path | None:
    """The launch's working directory (run.json commands[0].cwd, absolute), where the run
    directory is now when it lies in it; None when not recorded."""
    commands = run_json.data.get("commands") if run_json is not None and isinstance(run_json.data, dict) else None
    first = commands[0] if isinstance(commands, list) and commands else None
    cwd = first.get("cwd") if isinstance(first, dict) else None
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or safeio.path_problem(cwd) is not None:
        return None
    return _rebased(Path(cwd), root, run_dir)


def _named_dir(text: str, root: Path | None, cwd: Path | None, run_dir: Path) -> tuple[Path | None, str | None]:
    """The directory a record or an arguments table names, where the run directory is now:
    (the path, None), or (None, why it names none): a string no path can be (a NUL, too long)
    or a relative path without a recorded working directory of the launch."""
    problem = safeio.path_problem(text)
    if problem is not None:
        return None, f"holds {problem}"
    path = Path(text)
    if not path.is_absolute():
        if cwd is None:
            return None, "is relative and run.json records no working directory of the launch to read it from"
        path = cwd / path
    return _rebased(path, root, run_dir), None


def _not_read_note(what: str, how: str, text: str, path: Path | None, problem: str | None) -> str:
    """The note on a directory the records name that was not read: `what` it is, `how` it was
    found, the `text` recorded, its `path` (None: `problem` says why it names none)."""
    if path is None:
        return f"{what} {clip(repr(text), 120)} ({how}) {problem}: not read"
    return (f"{what} {path} ({how}) lies outside the run directory and was not read: a received run directory's "
            f"records may name any path; pass --read-dir {path} to verify or report to read it there, or copy it into "
            "the run directory")


def _lexically_inside(path: Path, run_dir: Path) -> bool:
    """`path` names a place inside the run directory by its words (.. resolved, links not)."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(run_dir))
    return rel == "." or not (rel == ".." or rel.startswith("../") or os.path.isabs(rel))


def _link_below(path: Path, run_dir: Path) -> Path | None:
    """The first symbolic link on the way from the run directory down to `path` (lexically
    inside it), or None (also for a path outside the run directory)."""
    if not _lexically_inside(path, run_dir):
        return None
    rel = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(run_dir)))
    current = run_dir
    for part in rel.parts:
        if part in ("", "."):
            continue
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return current
        except OSError:
            return None
    return None


def _shown(path: Path, run_dir: Path) -> str:
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return str(path)


_PROFILE_RE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
MAX_DEADLINE_S = 10_000_000.0


def _seconds(value: object) -> float | None:
    """A positive, finite number of seconds below MAX_DEADLINE_S, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < MAX_DEADLINE_S else None  # NaN fails both comparisons


def _deadlines(spec: dict) -> tuple[str | None, tuple[tuple[str, float], ...]]:
    """run.json's deadline profile and deadlines, each range-checked; what fails is left out."""
    profile = spec.get("deadline_profile")
    profile = profile if isinstance(profile, str) and _PROFILE_RE.fullmatch(profile) else None
    out: list[tuple[str, float]] = []
    sections = spec.get("section_timeouts")
    if isinstance(sections, dict):
        for name in ("setup", "step", "checkpointing"):
            if (sec := _seconds(sections.get(name))) is not None:
                out.append((name, sec))
    for key, name in (("out_of_section_timeout", "out_of_section"), ("workload_check_interval", "check_interval")):
        if (sec := _seconds(spec.get(key))) is not None:
            out.append((name, sec))
    return profile, tuple(out)


def _int(value: object) -> int | None:
    """An integer of a JSON record, or None when it is missing or not a plausible one (dialect.record_number)."""
    return record_number(value, "record", digits=True)  # type: ignore[return-value]


def _str(value: object) -> str | None:
    return clip(str(value), 200) if value is not None and value != "" else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def read_injections(run_dir: str | os.PathLike) -> tuple[list[ev.Injection], list[str]]:
    """Every marker of a run directory (fault_injected.json, fault_injected.<n>.json up to the
    layout's last), as history reads them, and the notes on those it could not read."""
    notes: list[str] = []
    return HistoryReader(run_dir)._injections(notes), notes


def read_history(run_dir: str | os.PathLike, **kwargs) -> ev.Timeline:
    """The whole history of a finished run (incomplete last lines included)."""
    return HistoryReader(run_dir, **kwargs).poll(final=True)


@dataclass(frozen=True)
class RunRead:
    """One read of a run directory: all that verify, the runner and the picture take from it.

    Its memory is bounded by a constant plus the number of cycles (the Timeline keeps
    summaries of iterations and saves), except `losses`, one entry per iteration, which is
    only kept when asked for (a comparison against a baseline)."""

    timeline: ev.Timeline
    progress: tuple[tuple[ev.ProgressPoint, ...], ...] | None = None  # per start (timeline.png); None: not sampled
    losses: Mapping[int, ev.LossLine] | None = None  # iteration -> last lm loss printed; None: not kept

    @property
    def run_dir(self) -> Path:
        return self.timeline.run_dir


def read_run(run_dir: str | os.PathLike, *, inspect_checkpoints: bool = True, losses: bool = False,
             progress: bool = True, read_dirs: Sequence[str | os.PathLike] = ()) -> RunRead:
    """The one read of a finished run (incomplete last lines included): see RunRead.
    `read_dirs`: directories outside the run directory its records name that may be read."""
    return HistoryReader(run_dir, inspect_checkpoints=inspect_checkpoints, losses=losses,
                         read_dirs=read_dirs).read(progress=progress)


# ---------------------------------------------------------------- small public readers


def iteration_loss(text: str) -> tuple[int, str] | None:
    """(iteration, lm loss as printed) of one Megatron iteration line, whatever its prefixes."""
    _rank, body, _ = _strip_prefix(text)
    it, loss = _ITER_RE.search(body), _LOSS_RE.search(body)
    iteration = number(it.group(1), "iteration") if it else None
    return (iteration, loss.group(1)) if iteration is not None and loss else None


# ---------------------------------------------------------------- the progress curve

PROGRESS_SAMPLES = 1200  # per start: a smooth curve at any run length, bounded memory (LogParser._sample)
