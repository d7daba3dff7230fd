"""The artifact tree of one run (docs/contracts.md, "The run directory").

    $NVRX_WORK_DIR/runs/$NVRX_RUN_ID/
      fault_injected.json      injection marker (absent: no fault happened)
      cycle_infos/             NVRx cycle_info.<job>.<attempt>.<cycle> JSON files
      checkpoints/             Megatron --save/--load dir (or NVRX_CHECKPOINT_DIR)
      logs/train_cycle.log     application log prefix; per cycle: train_cycle_cycle<N>.log
      logs/launcher.log        launcher / rank-monitor log
      logs/console.log         every line the harness captured, with its wall-clock time
      run.json                 the RunSpec and the exact commands, written before launch
      launch.json              how the launch ended (launcher exit status, early stop), by the harness
      verdict.json, report.md  written by verify

Path arithmetic, and the one reading of the two names Megatron gives a checkpoint directory's
contents: the tracker (`read_tracker_file`, `parse_tracker`) and an `iter_N` entry
(`parse_iter_name`, `iter_name`). Nothing here touches the filesystem except those read-only
looks and the `leftovers` listing. Stdlib and harness.safe.safeio only: the nemesis imports it in
every worker.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.safe import safeio

RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_RUN_ID_RE = re.compile(RUN_ID_PATTERN + r"\Z")

MARKER_NAME = "fault_injected.json"
# A plan with several faults (--fault-at in-restore) claims one marker per fault: the first
# is MARKER_NAME, fault n >= 2 claims `fault_injected.<n>.json`.
MARKER_GLOB = "fault_injected*.json"


def marker_name(index: int) -> str:
    """The marker file of the plan's fault number `index` (1-based)."""
    if index < 1:
        raise ValueError(f"fault index {index} must be 1 or more")
    return MARKER_NAME if index == 1 else f"fault_injected.{index}.json"


def marker_index(name: str) -> int | None:
    """The fault number a marker file name stands for; None for any other name."""
    if name == MARKER_NAME:
        return 1
    m = re.fullmatch(r"fault_injected\.([2-9]|[1-9][0-9])\.json", name)
    return int(m.group(1)) if m else None
TRACKER_NAME = "latest_checkpointed_iteration.txt"
VERDICT_NAME = "verdict.json"
REPORT_NAME = "report.md"
TIMELINE_NAME = "timeline.png"
# {"qualified": false, "why": ...}: a negative scenario of the suite (written by its fixtures)
EXPECTATION_NAME = "expectation.json"
CLAIM_NAME = ".nvrx-qual.lock"  # flock'ed by the one process that prepares or runs this run ID (harness.launch.prepare)
FT_STATE_NAME = "ft_state.json"
CYCLE_LOG_STEM = "train_cycle"


MAX_ITERATION_DIGITS = 18  # an iteration count far beyond any run, and far below Python's int-string limit
TRACKER_READ_LIMIT = 4096  # a tracker is a bare integer; more than this is not one
ITER_PREFIX = "iter_"


def parse_tracker(text: str) -> int | None:
    """The iteration in the text of Megatron's tracker: a bare non-negative integer (maybe with
    a newline); else None ("release", a sign, anything else, a number of absurd length). The one
    reading of a tracker's text: the nemesis, planning and the criteria all use it."""
    stripped = text.strip()
    if stripped.isascii() and stripped.isdigit() and len(stripped) <= MAX_ITERATION_DIGITS:
        return int(stripped)
    return None


# TrackerRead.state
TRACKER_ABSENT = "absent"  # no file: a fresh run
TRACKER_UNREADABLE = "unreadable"  # not a regular file (a link, a FIFO, a directory), too long, an I/O error, not UTF-8
TRACKER_EMPTY = "empty"  # nothing but white space (Megatron writes it non-atomically: a passing state while it runs)
TRACKER_GARBLED = "garbled"  # text that is not an iteration number ("release", "-3", "12abc")
TRACKER_OK = "ok"


@dataclass(frozen=True)
class TrackerRead:
    """One read of a tracker file. `value`: its iteration when `state` is TRACKER_OK; `text`: what
    it holds (undecodable bytes replaced; None when absent or unreadable as a file); `error`:
    why it is unreadable (the system's words)."""

    state: str
    value: int | None = None
    text: str | None = None
    error: str | None = None


def read_tracker_file(path: str | os.PathLike) -> TrackerRead:
    """The one reader of Megatron's tracker file, for every caller (the nemesis polls it in every
    worker, validation reads a user's, history a received run's). Never follows a link, never
    blocks on a FIFO (O_NONBLOCK), never reads more than TRACKER_READ_LIMIT + 1 bytes, one read
    system call; never raises for what the file holds or is."""
    try:
        fd = safeio.open_regular(path)  # no link followed, no FIFO or device read; says which it was
    except FileNotFoundError:
        return TrackerRead(TRACKER_ABSENT)
    except OSError as exc:
        return TrackerRead(TRACKER_UNREADABLE, error=exc.strerror or str(exc))
    try:
        data = os.read(fd, TRACKER_READ_LIMIT + 1)
    except OSError as exc:
        return TrackerRead(TRACKER_UNREADABLE, error=exc.strerror or str(exc))
    finally:
        os.close(fd)
    if len(data) > TRACKER_READ_LIMIT:
        return TrackerRead(TRACKER_UNREADABLE, error=f"longer than {TRACKER_READ_LIMIT} bytes, not a tracker")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return TrackerRead(TRACKER_UNREADABLE, text=data.decode("utf-8", "replace"), error="not UTF-8 text")
    if not text.strip():
        return TrackerRead(TRACKER_EMPTY, text=text)
    value = parse_tracker(text)
    return TrackerRead(TRACKER_OK if value is not None else TRACKER_GARBLED, value=value, text=text)


# NVRx's LocalCheckpointManager names each rank's shard of a local checkpoint
# `iter_%07d_<rank>_local.pt` (checkpointing/local/ckpt_managers/local_manager.py,
# _filename_from_template); its log lines name such files. The regex of that name, with the
# iteration and the owner rank as named groups (harness.vocab.tiers reads the lines, not the files).
LOCAL_SHARD_PATTERN = ITER_PREFIX + r"(?P<iteration>\d+)_(?P<owner>\d+)_local\.pt"


def iter_name(iteration: int) -> str:
    """Megatron's name for one saved iteration's directory: `iter_%07d`."""
    return f"{ITER_PREFIX}{iteration:07d}"


def parse_iter_name(name: str) -> int | None:
    """The iteration an `iter_<digits>` entry name stands for (ASCII digits, at most
    MAX_ITERATION_DIGITS of them after the leading zeros); None for any other name. The one parser of such names:
    whether it is Megatron's own spelling is `name == iter_name(value)` (is_megatron_iter_name)."""
    if not name.startswith(ITER_PREFIX):
        return None
    digits = name[len(ITER_PREFIX):]
    # leading zeros do not count (an entry name is at most 255 bytes); the value's digits do
    if digits.isascii() and digits.isdigit() and len(digits) <= 255 and len(digits.lstrip("0")) <= MAX_ITERATION_DIGITS:
        return int(digits)
    return None


def is_megatron_iter_name(name: str) -> bool:
    """Exactly the name Megatron writes for its iteration (`iter_0000005`, not `iter_5` nor `iter_00000005`)."""
    value = parse_iter_name(name)
    return value is not None and name == iter_name(value)


def is_valid_run_id(run_id: str) -> bool:
    return bool(_RUN_ID_RE.match(run_id))


def checkpoint_iter_dir(checkpoints: Path, iteration: int) -> Path:
    """Megatron's `iter_%07d` directory for one saved iteration."""
    return checkpoints / iter_name(iteration)


@dataclass(frozen=True)
class RunLayout:
    root: Path
    checkpoints: Path

    @classmethod
    def for_run(cls, work_dir: Path, run_id: str, checkpoint_dir: Path | None = None) -> "RunLayout":
        root = Path(work_dir) / "runs" / run_id
        return cls(root=root, checkpoints=Path(checkpoint_dir) if checkpoint_dir else root / "checkpoints")

    @classmethod
    def of_dir(cls, run_dir: Path, checkpoint_dir: Path | None = None) -> "RunLayout":
        root = Path(run_dir)
        return cls(root=root, checkpoints=Path(checkpoint_dir) if checkpoint_dir else root / "checkpoints")

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def marker(self) -> Path:
        return self.root / MARKER_NAME

    def marker_for(self, index: int) -> Path:
        return self.root / marker_name(index)

    @property
    def cycle_infos(self) -> Path:
        return self.root / "cycle_infos"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def train_log_prefix(self) -> Path:
        """What `--ft-per-cycle-applog-prefix` gets; NVRx appends `_cycle<N>` to the stem."""
        return self.logs / f"{CYCLE_LOG_STEM}.log"

    def cycle_log(self, cycle: int) -> Path:
        return self.logs / f"{CYCLE_LOG_STEM}_cycle{cycle}.log"

    @property
    def launcher_log(self) -> Path:
        return self.logs / "launcher.log"

    @property
    def console_log(self) -> Path:
        return self.logs / "console.log"

    @property
    def elastic_log_dir(self) -> Path:
        """torch elastic's --log-dir, kept inside the run instead of a stray /tmp dir."""
        return self.logs / "elastic"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def launch_json(self) -> Path:
        return self.root / "launch.json"

    @property
    def verdict_json(self) -> Path:
        return self.root / VERDICT_NAME

    @property
    def report_md(self) -> Path:
        return self.root / REPORT_NAME

    @property
    def tracker(self) -> Path:
        return self.checkpoints / TRACKER_NAME

    @property
    def ft_state(self) -> Path:
        return self.checkpoints / FT_STATE_NAME

    def leftovers(self, limit: int = 4) -> tuple[str, ...]:
        """What an earlier run left in this run directory's logs/, checkpoints/ and cycle_infos/
        (at most `limit` names, relative to the root; read-only, no link followed). A
        checkpoint directory outside the root (NVRX_CHECKPOINT_DIR) is the user's, not counted."""
        found: list[str] = []
        for directory in (self.checkpoints, self.logs, self.cycle_infos):
            if directory != self.root and self.root not in directory.parents:
                continue
            rel = directory.relative_to(self.root)
            try:
                if not stat.S_ISDIR(os.lstat(directory).st_mode):
                    found.append(f"{rel} (not a directory)")
                    continue
                with os.scandir(directory) as entries:
                    for entry in entries:
                        found.append(f"{rel}/{entry.name}")
                        break
            except FileNotFoundError:
                continue
            except OSError as exc:
                found.append(f"{rel} (unreadable: {exc.strerror})")
            if len(found) >= limit:
                break
        return tuple(found[:limit])

    def artifact_dirs(self) -> tuple[Path, ...]:
        """Directories a launch needs before anything starts."""
        return (self.root, self.logs, self.cycle_infos, self.checkpoints)
