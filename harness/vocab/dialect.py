"""The log grammar of a run directory, defined once.

Every reader of a run's logs (history for verify and watch, triage for diagnose) and the
one writer of the harness's own console capture (launch.py) use these definitions:

- line prefixes: the harness's console stamp `<ISO>Z out|err `, srun's / NVRx's `<N>: `
  label, torch elastic's tee role prefix `[<role><local rank>]:` (`[default3]:`) and
  torch's `[rank<global rank>]: `;
- time stamps: ISO (`2026-11-29 16:00:03,123` / `T`-separated, optionally in brackets),
  Megatron's `] datetime: ...`, glog's `I1129 16:00:03.123456` (no year: the reader gives
  one); a date or time that does not exist or lies outside events.PLAUSIBLE_YEARS is no
  time at all (None), never a traceback;
- per-cycle file names (`*_cycle<N>.log`), torch elastic's attempt directories
  (`attempt_<N>/<local rank>/`) and NVRx's cycle_info file names;
- log discovery: which files of a run directory are logs, of which kind; links, FIFOs and
  devices are never listed (reads go through harness.safe.safeio, which refuses them too);
- numbers: `number` / `decimal`, the one range check of every number a line or a file name
  states, with the bound of each quantity (BOUNDS); a number outside it, or a run of digits
  longer than any real one (Python refuses to convert more than 4300), is no value (None);
- the UTC offset: one bound and one validation with one message;
- RunDirError, the one error for a path that is not a readable run directory.

Pure functions over strings and directory listings; nothing here prints or exits.
"""

from __future__ import annotations

import calendar
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from harness.vocab import events as ev
from harness.safe import safeio


class RunDirError(Exception):
    """The path is not a readable run directory; the message says why and what to do."""


# ---------------------------------------------------------------- the UTC offset

MAX_UTC_OFFSET_S = 14 * 3600  # time zones span UTC-12..UTC+14


def utc_offset_problem(value: object) -> str | None:
    """None when `value` (local time minus UTC, seconds) is an offset some time zone has;
    else what is wrong with it, as the end of a sentence that names the value's source."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"{str(value)[:40]!r} is not a whole number of seconds"
    if abs(value) > MAX_UTC_OFFSET_S:
        return (f"{value} is no time zone (more than 14 h from UTC): give local time minus UTC in seconds, "
                f"between -{MAX_UTC_OFFSET_S} and {MAX_UTC_OFFSET_S}")
    return None


# ---------------------------------------------------------------- numbers

# The range of each quantity the logs and file names state (inclusive). Far wider than any
# real run; what lies outside is damage or a hostile file, and reads as no value.
BOUNDS: dict[str, tuple[float, float]] = {
    "iteration": (0, 10 ** 12),  # iterations, train_iters, checkpoint iterations
    "samples": (0, 10 ** 18),  # consumed samples
    "count": (0, 10 ** 12),  # skipped / NaN iteration counts, restart attempts, frame line numbers
    "rank": (0, 1 << 24),  # global and local ranks, GPU indices, node labels
    "world": (1, 1 << 24),  # world sizes and parallel sizes
    "cycle": (0, 10 ** 6),  # NVRx cycles, torch elastic attempts and rendezvous rounds
    "exit_code": (-255, 255),  # a process's status, or minus the signal that killed it
    "pid": (0, (1 << 31) - 1),
    "port": (0, 65535),
    "seconds": (0.0, 1e9),  # timeouts and elapsed times
    "megabytes": (0.0, 1e12),  # memory reports
    "loss": (-1e300, 1e300),  # a finite loss (NaN and inf read as no value)
    "record": (-(1 << 53), 1 << 53),  # any number a JSON record (run.json, verdict.json, ...) holds: bigger is damage
}
_MAX_DIGITS = 24  # longer than any bound above: never handed to int() (whose limit is 4300 digits)


def number(text: str | bytes | None, quantity: str) -> int | None:
    """The whole number `text` states (optional sign, decimal digits) when it lies within
    BOUNDS[quantity]; None when absent, not a number, or outside the bound."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or len(digits) > _MAX_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    value = int(text)
    low, high = BOUNDS[quantity]
    return value if low <= value <= high else None


def record_number(value: object, quantity: str, *, fraction: bool = False, digits: bool = False) -> int | float | None:
    """The one reader of a JSON record's numbers: a whole number (an int, not a bool) within
    BOUNDS[quantity]; None otherwise. `fraction`: a finite float is a value too (NaN and inf
    are not); `digits`: so is a string of at most 16 decimal digits, optionally after `-`
    (records that write numbers as text)."""
    if isinstance(value, bool):
        return None
    if digits and isinstance(value, str):
        text = value.strip()
        body = text[1:] if text[:1] == "-" else text
        if not (body.isascii() and body.isdigit() and len(body) <= 16):
            return None
        value = int(text)
    if not isinstance(value, int) and not (fraction and isinstance(value, float)):
        return None
    low, high = BOUNDS[quantity]
    return value if low <= value <= high else None  # NaN fails both comparisons


def decimal(text: str | bytes | None, quantity: str) -> float | None:
    """The finite decimal number `text` states within BOUNDS[quantity]; None otherwise
    (`inf`, `nan`, 1e400, a run of thousands of digits)."""
    if text is None or len(text) > 64:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    low, high = BOUNDS[quantity]
    return value if low <= value <= high else None  # NaN fails both comparisons


# ---------------------------------------------------------------- time stamps

_DAY_CACHE: dict[tuple[int, int, int], int] = {}


def epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None = None) -> float | None:
    """Seconds since the epoch of a wall-clock stamp read as if it were UTC; None for a date
    that does not exist (month 13, February 30, hour 25) or lies outside PLAUSIBLE_YEARS."""
    key = (y, mo, d)
    day = _DAY_CACHE.get(key)
    if day is None:
        if not (ev.PLAUSIBLE_YEARS[0] <= y <= ev.PLAUSIBLE_YEARS[1] and 1 <= mo <= 12
                and 1 <= d <= calendar.monthrange(y, mo)[1]):
            return None
        day = _DAY_CACHE[key] = calendar.timegm((y, mo, d, 0, 0, 0))
    if h > 23 or mi > 59 or s > 60:
        return None
    t = day + h * 3600 + mi * 60 + s
    if frac:
        frac = frac[:9]  # nanoseconds at most: a longer run of digits is junk, not precision
        t += int(frac) / 10 ** len(frac)
    return float(t)


def parse_iso_utc(text: object) -> float | None:
    """`2026-11-29T16:32:09.789Z` (or +00:00) -> UTC epoch seconds; None when not a stamp or
    not a plausible one (see events.PLAUSIBLE_YEARS)."""
    if not isinstance(text, str) or not text or len(text) > 64:
        return None
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        ts = parsed.timestamp()
    except (ValueError, OverflowError):
        return None
    return ts if ev.plausible_time(ts) else None


def format_iso_utc(ts: float) -> str:
    """UTC epoch seconds -> `2026-11-29T16:32:09.789Z`, the harness's own stamps."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# A stamp at the start of a line, in the writer's local time: `2026-11-29 16:00:03,123`,
# `[2026-11-29 16:00:03.123456]`, `2026-11-29T16:00:03`, `2026-11-29_16:00:03`.
STAMP_RE = re.compile(r"\s*\[?(\d{4})-(\d\d)-(\d\d)[ _T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
# glog: `I1129 16:00:03.123456 ...` (severity, month, day; no year).
GLOG_RE = re.compile(r"\s*\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
# Megatron's `[after training is done] datetime: 2026-12-01 07:52:49[.308941]` (0.19 prints microseconds).
DATETIME_RE = re.compile(r"\] datetime: (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")


class LocalStamp(NamedTuple):
    ts: float | None  # local wall-clock time read as UTC; None when the date is impossible
    year: int  # the stamp's year and month (what a later glog stamp of the same log is near: LogClock)
    month: int = 0


def line_stamp(text: str) -> LocalStamp | None:
    """The full-date stamp that starts `text` (leading blanks and one `[` allowed), or None."""
    m = STAMP_RE.match(text)
    if not m:
        return None
    y = int(m.group(1))
    return LocalStamp(epoch(y, *map(int, m.groups()[1:6]), m.group(7)), y, int(m.group(2)))


def glog_stamp(text: str, year: int) -> float | None:
    """The glog stamp that starts `text`, in `year` (glog prints none), or None."""
    m = GLOG_RE.match(text)
    if not m:
        return None
    g = m.groups()
    return epoch(year, int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), g[5])


def megatron_datetime(text: str) -> LocalStamp | None:
    """Megatron's `] datetime: ...` stamp anywhere in `text`, or None."""
    m = DATETIME_RE.search(text)
    if not m:
        return None
    y = int(m.group(1))
    return LocalStamp(epoch(*map(int, m.groups()[:6]), m.group(7)), y, int(m.group(2)))


def maybe_stamped(text: str) -> bool:
    """Cheap test for a stamp at the start of a line (ISO or glog), before any regex."""
    head = text[:16].lstrip(" [")
    if len(head) < 6:
        return False
    first = head[0]
    if first.isdigit():
        return head[4] == "-" and head[:4].isdigit()
    return first in "IWEF" and head[1:5].isdigit()


class LogClock:
    """The one time model of a log file, history's and triage's.

    A full-date stamp at the start of a line (or Megatron's `] datetime:`) gives its time and
    becomes the log's reference date. A glog stamp has no year: it takes the year that puts
    it nearest the reference (within half a year: a December reference makes a January stamp
    next year's), the reference being the log's last full date, else the `anchor` the reader
    was given (the run's own date: triage has it; history's log reader starts without one),
    else there is no time. Times are the writer's local wall clock read as UTC epoch seconds."""

    __slots__ = ("year", "month", "anchor")

    def __init__(self, anchor: tuple[int, int] | None = None) -> None:
        self.year: int | None = None  # of the log's last full date
        self.month: int | None = None
        self.anchor = anchor  # (year, month) before any full date

    def peek(self, text: str) -> tuple[float | None, LocalStamp | None]:
        """(local time, the full date if it is one) of the stamp that starts `text`; changes nothing."""
        full = line_stamp(text)
        if full is not None:
            return full.ts, full
        m = GLOG_RE.match(text)
        if m is None:
            return None, None
        ref = (self.year, self.month) if self.year is not None else self.anchor
        if ref is None:
            return None, None
        month, ref_year, ref_month = int(m.group(1)), ref[0], ref[1] or int(m.group(1))
        year = ref_year - 1 if month > ref_month + 6 else ref_year + 1 if month < ref_month - 6 else ref_year
        return glog_stamp(text, year), None

    def saw(self, stamp: LocalStamp) -> None:
        """A full date read in this log: the reference of the glog stamps after it."""
        self.year, self.month = stamp.year, stamp.month

    def read(self, text: str) -> float | None:
        """The local time of the stamp that starts `text`; a full date becomes the reference."""
        t, full = self.peek(text)
        if full is not None:
            self.saw(full)
        return t


# ---------------------------------------------------------------- line prefixes

CONSOLE_STREAMS = ("out", "err")
# The harness's console capture: `<ISO>Z out ` (launch.py writes it with console_prefix).
CONSOLE_RE = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d) (out|err) ")
LABEL_RE = re.compile(r" *(\d+|\?):(?: |$)")  # srun --label / NVRx's per-cycle `<rank>: `
ROLE_RE = re.compile(r"\[(?!rank\d)([A-Za-z_]+?)(\d+)\]:")  # torch elastic's tee `[<role><local rank>]:`
TORCH_RANK_RE = re.compile(r"\[rank(\d+)\]: ?")  # torch's `[rank<global rank>]: `


TEE_ROLE = "default"  # the role ft_launcher / torchrun give their workers


def tee_headers(text: str) -> list[re.Match]:
    """Every `[default<local rank>]:` in `text`: torch elastic's tee glues a line that a
    worker wrote in pieces to another rank's write, so headers occur mid-line too."""
    return [m for m in ROLE_RE.finditer(text) if m.group(1) == TEE_ROLE]


def label_prefix(rank: int) -> str:
    """What NVRx >= 0.6 puts before each line of a per-cycle log (the global rank)."""
    return f"{rank}: "


def console_prefix(ts: float, stream: str = "out") -> str:
    """What the harness puts before each line it captures in logs/console.log."""
    if stream not in CONSOLE_STREAMS:
        raise ValueError(f"console stream {stream!r}: one of {CONSOLE_STREAMS}")
    return f"{format_iso_utc(ts)} {stream} "


class Prefixes(NamedTuple):
    body: str  # the line without the prefixes below
    console: float | None  # the harness's capture time, UTC epoch seconds (None: no console stamp, or an impossible one)
    stream: str | None  # "out" | "err" of the console stamp
    label: int | None  # the `<N>: ` label: a global rank in a per-cycle log, else srun's node/task
    label_unknown: bool  # the label was `?: ` (NVRx: rank not known)
    role: str | None  # torch elastic's tee role (`default`)
    local_rank: int | None  # the tee prefix's local rank
    torch_rank: int | None  # torch's `[rank<N>]:` global rank


def _console(m: re.Match) -> float | None:
    t = epoch(*map(int, m.groups()[:6]), m.group(7))
    zone = m.group(8)
    if t is not None and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        t -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return t


def peel(text: str) -> Prefixes:
    """Removes, in this order, the console stamp, a tee role prefix, a `<N>: ` label (then a
    role prefix if none came before it: `1: [default0]:` from srun --label) and torch's
    `[rank<N>]: `; each is optional."""
    console = stream = role = None
    label = local = torch_rank = None
    unknown = False
    if text[10:11] == "T" and text[:2].isdigit():
        m = CONSOLE_RE.match(text)
        if m:
            console, stream = _console(m), m.group(9)
            text = text[m.end():]
    if text[:1] == "[" and text[:5] != "[rank":
        m = ROLE_RE.match(text)
        if m:
            role, local = m.group(1), number(m.group(2), "rank")
            text = text[m.end():]
    if text[:1].isdigit() or text[:1] in " ?":
        m = LABEL_RE.match(text)
        if m:
            if m.group(1) == "?":
                unknown = True
            else:
                label = number(m.group(1), "rank")
            text = text[m.end():]
            if role is None and text[:1] == "[" and text[:5] != "[rank":
                m = ROLE_RE.match(text)
                if m:
                    role, local = m.group(1), number(m.group(2), "rank")
                    text = text[m.end():]
    if text[:5] == "[rank":
        m = TORCH_RANK_RE.match(text)
        if m:
            torch_rank = number(m.group(1), "rank")
            text = text[m.end():]
    return Prefixes(text, console, stream, label, unknown, role, local, torch_rank)


def strip_prefix(text: str) -> tuple[int | None, str, float | None]:
    """(rank, body, console capture time UTC) of one line. The rank is torch's `[rank<N>]:`
    where present (a global rank), else the `<N>: ` label, else the tee prefix's local rank
    (a global rank on one node, the only place an older launcher's console is split)."""
    p = peel(text)
    rank = p.torch_rank
    if rank is None:
        rank = p.label if p.label is not None else p.local_rank
    return rank, p.body, p.console


@dataclass(slots=True)
class LogLine:
    """One line of a log as every reader sees it (history's and triage's): where it is, its
    text with the prefixes peeled, who wrote it, when, and the launcher cycle it belongs to."""

    file: str  # relative to the run directory
    lineno: int
    raw: str
    body: str  # with the console stamp, the tee role, the label and torch's rank prefix peeled off
    rank: int | None  # global rank: torch's `[rank<N>]:`, else the `<N>: ` label where labels are ranks
    local_rank: int | None  # the tee prefix's local rank, else the file's (torch elastic's attempt directories)
    key: tuple  # the writing process within this file: (node label, ("rank"|"local", N))
    console: float | None  # the harness's capture time, UTC epoch seconds
    time: float | None = None  # UTC epoch seconds; the reader's clock sets it (console stamp first)
    cycle: int | None = None  # the reader sets it (history.cycle_opened)

    def evidence(self, cap: int = 400) -> str:
        text = self.raw.strip()
        if len(text) > cap:
            text = text[:cap] + "..."
        return f"{self.file}:{self.lineno}: {text}"


def read_line(file: str, lineno: int, raw: str, *, labels_are_ranks: bool, file_local: int | None = None) -> LogLine:
    """The LogLine of `raw`. A `<N>: ` label is a global rank where `labels_are_ranks` (a
    per-cycle application log, NVRx >= 0.6; history reads every label so), else a node
    (srun --label, NVRx's infra-rank prefix of a launcher log)."""
    p = peel(raw)
    node = rank = None
    local = file_local
    key: tuple = ()
    if p.local_rank is not None:
        local = p.local_rank
        key = ("local", local)
    if p.label is not None:
        if labels_are_ranks:
            rank = p.label
            key = ("rank", rank)
        else:
            node = p.label
    if p.torch_rank is not None:
        rank = p.torch_rank
        if not key:
            key = ("rank", rank)
    return LogLine(file, lineno, raw, p.body, rank, local, (node, *key), p.console)


# ---------------------------------------------------------------- launcher lines
# Lines of the launcher (torch elastic's agent under ft_launcher, NVRx's rank monitors and
# profiling), used by history's rule table (history.RULES); triage reads these lines through that table.

# NVRx >= 0.6 profiling: `Cycle: 1 Event: worker_start_completed Node: n_1_0 Rank: 0 Time: 2026-11-29 17:09:20.881 UTC`
PROFILING_RE = re.compile(
    r"Cycle: (\d+) Event: (\w+) Node: (\S+) Rank: \S+ Time: (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))? UTC"
)
# torch elastic's rendezvous (NVRx 0.4.1: `The node 'n_1_0' has joined round 1 of the rendezvous 'job' as rank 0
# in a world of size 2.`; NVRx 0.7.0's barrier rendezvous: `... has joined the rendezvous 'job' as rank 0 in a world
# of size 1.`): groups node (None when not quoted plainly), round (None on 0.7.0), world (None when not printed)
RENDEZVOUS_JOINED_RE = re.compile(
    r"(?:The node '(?P<node>[^'\s]{1,200})' )?has joined (?:round (?P<round>\d+) of )?the rendezvous"
    r"(?: .* in a world of size (?P<world>\d+))?"
)
# The rank monitor's timeouts (NVRx 0.4.1; 0.6+ prefixes `[Cycle N] `), one message each:
# `Section 'step' has been open for 14.35 seconds. Timeout is 10.00 seconds.` (section, elapsed, timeout)
SECTION_TIMEOUT_RE = re.compile(r"Section '([^']+)' has been open for ([\d.]+) seconds\. Timeout is ([\d.]+) seconds")
# `Was out of section for 31.20 seconds. Timeout is 30.00 seconds.` (elapsed, timeout)
OUT_OF_SECTION_RE = re.compile(r"Was out of section for ([\d.]+) seconds\. Timeout is ([\d.]+) seconds")
# `Did not get initial heartbeat. Waited 60.00 seconds.` (initial | subsequent, waited)
HEARTBEAT_MISSED_RE = re.compile(r"Did not get (initial|subsequent) heartbeat\. Waited ([\d.]+) seconds")
# torch elastic's agent, every NVRx version: `failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: ...`
WORKER_FAILED_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# NVRx 0.4.1's rank monitor logger name: `[RankMonServer16902@vm:0]` (node, global rank or `<none>`)
RANKMON_RE = re.compile(r"\[RankMonServer\d+@([^:\]\s]+):(\d+|<none>)\]")
# NVRx >= 0.6's rank monitor prefix: `[node7] [workload:5(1) infra:?(?)]` (node, global rank, local rank; `?` unknown)
WORKLOAD_RE = re.compile(r"(?:\[([^\]\[]+)\] )?\[workload:(\d+|\?)\((\d+|\?)\) infra:")


# ---------------------------------------------------------------- file names

LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
CYCLE_FILE_RE = re.compile(r"_cycle(\d+)(\.[^.]*)?$")
ATTEMPT_DIR_RE = re.compile(r"(?:^|/)attempt_(\d+)(?:/(\d+))?/")  # torch elastic: <log_dir>/attempt_<N>/<local rank>/
CYCLE_INFO_RE = re.compile(r"cycle_info\.(.*)\.(\d+)\.(\d+)$")  # NVRx: cycle_info.<job>.<attempt>.<cycle>
SKIP_DIRS = ("checkpoints", "cycle_infos")  # top-level folders of a run directory that hold no logs


def cycle_of_name(name: str) -> int | None:
    """N of a per-cycle log `<stem>_cycle<N>[.log|.out|.err|.txt]` (NVRx appends `_cycle<N>`
    to the stem of --ft-per-cycle-applog-prefix); None for any other name."""
    m = CYCLE_FILE_RE.search(name)
    if m and (m.group(2) is None or name.endswith(LOG_SUFFIXES)):
        return number(m.group(1), "cycle")
    return None


def attempt_of_path(rel: str) -> tuple[int, int | None] | None:
    """(attempt, local rank or None) of a file in torch elastic's attempt directories."""
    m = ATTEMPT_DIR_RE.search(rel)
    attempt = number(m.group(1), "cycle") if m else None
    if attempt is None:
        return None
    return attempt, number(m.group(2), "rank")


def cycle_info_name(name: str) -> tuple[str, int, int] | None:
    """(job, attempt, cycle) of an NVRx cycle_info file name."""
    m = CYCLE_INFO_RE.match(name)
    if not m:
        return None
    attempt, cycle = number(m.group(2), "cycle"), number(m.group(3), "cycle")
    return (m.group(1), attempt, cycle) if attempt is not None and cycle is not None else None


# ---------------------------------------------------------------- discovery


@dataclass(frozen=True)
class LogFile:
    path: Path
    rel: str  # relative to the run directory, with "/"
    kind: str  # "launcher" | "console" | "cycle" (per-cycle application log) | "attempt" (torch elastic) | "other"
    cycle: int | None = None  # per-cycle logs: N; attempt files: the attempt
    local_rank: int | None = None  # attempt files: the worker's local rank
    flat: bool = True  # directly in logs/ or in the run directory itself (not in a subfolder)
    suffixed: bool = True  # the name ends with one of LOG_SUFFIXES


def _kind(rel: str, name: str, in_logs_top: bool) -> tuple[str, int | None, int | None]:
    if in_logs_top and name == "launcher.log":
        return "launcher", None, None
    if in_logs_top and name == "console.log":
        return "console", None, None
    cycle = cycle_of_name(name)
    if cycle is not None:
        return "cycle", cycle, None
    attempt = attempt_of_path(rel)
    if attempt is not None:
        return "attempt", attempt[0], attempt[1]
    return "other", None, None


MAX_LOG_DEPTH = 16  # folders below the run directory that discovery enters (torch elastic's need 4)
MAX_LOG_FILES = 100_000  # log files listed at most


def discover(run_dir: str | os.PathLike, *, nested: bool = True) -> list[LogFile]:
    """Every log file of a run directory: each regular file under logs/ (any name; in
    subfolders too when `nested`) and each file named *.log/*.out/*.err/*.txt or
    *_cycle<N> in the run directory itself (and, when `nested`, in its other subfolders,
    outside checkpoints/, cycle_infos/ and hidden ones). Files in logs/ come first, each
    folder's entries sorted by name, depth first. Links (to files or folders), FIFOs and
    devices are never listed nor entered. Bounded: folders more than MAX_LOG_DEPTH below the
    run directory are not entered and at most MAX_LOG_FILES files are listed (a walk with its
    own stack, so no depth of folders exhausts the interpreter's)."""
    root = Path(run_dir)
    found: list[LogFile] = []

    def listing(directory: Path, rel_dir: str) -> list[tuple[Path, str]]:
        """Lists one folder's log files into `found`; returns its subfolders to enter."""
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return []
        inside_logs = rel_dir == "logs" or rel_dir.startswith("logs/")
        subdirs = []
        for entry in entries:
            name = entry.name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if rel_dir or (name not in SKIP_DIRS + ("logs",) and not name.startswith(".")):
                        subdirs.append((Path(entry.path), rel))
                    continue
                if not entry.is_file(follow_symlinks=False):  # links, FIFOs, devices are never read
                    continue
            except OSError:
                continue
            suffixed = name.endswith(LOG_SUFFIXES)
            kind, cycle, local = _kind(rel, name, rel_dir == "logs")
            if (inside_logs or suffixed or kind == "cycle") and len(found) < MAX_LOG_FILES:
                found.append(LogFile(Path(entry.path), rel, kind, cycle, local, rel_dir in ("", "logs"), suffixed))
        return subdirs

    def walk(directory: Path, rel_dir: str) -> None:
        stack = [(directory, rel_dir)]
        while stack:
            path, rel = stack.pop()
            subdirs = listing(path, rel)
            if nested and rel.count("/") + 1 < MAX_LOG_DEPTH:
                stack.extend(reversed(subdirs))  # the first by name is entered first

    if safeio.is_real_dir(root / "logs"):  # a link named logs is not followed
        walk(root / "logs", "logs")
    walk(root, "")  # which skips logs/ (walked above, or a link)
    return found


def classify_logs(run_dir: str | os.PathLike) -> list[tuple[Path, str, str, int | None]]:
    """(path, rel, kind, cycle) of the logs history reads: those directly in logs/ (a real
    folder, not a link) or in the run directory, named like a log."""
    return [(f.path, f.rel, f.kind, f.cycle) for f in discover(run_dir, nested=False)
            if f.flat and (f.suffixed or f.kind == "cycle")]


def application_logs(run_dir: str | os.PathLike) -> list[tuple[Path, str]]:
    """(path, path relative to the run dir) of the application logs, in cycle order: the
    per-cycle logs, else the other logs (a user's single log)."""
    logs = classify_logs(Path(run_dir))
    cycles = sorted((c for c in logs if c[2] == "cycle"), key=lambda c: c[3])
    return [(path, rel) for path, rel, _kind, _cycle in (cycles or [c for c in logs if c[2] == "other"])]


def check_readable_dir(run_dir: Path) -> None:
    """Raise RunDirError unless `run_dir` is a directory this process can list and enter."""
    if not run_dir.exists():
        raise RunDirError(f"{run_dir} does not exist: give the path of a run directory (runs/<run-id>)")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory: give the path of a run directory (runs/<run-id>)")
    if not os.access(run_dir, os.R_OK | os.X_OK):
        raise RunDirError(f"{run_dir} is not readable: check its permissions")
