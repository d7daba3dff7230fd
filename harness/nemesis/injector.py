"""The once-only fault injector ("nemesis") that wraps an unmodified training entrypoint.

    python -m harness.nemesis [--fault {kill,hang,term,poison,node,none}] [--fault-at MOMENT] [--fault-rank N]
                              [--run-dir DIR] [--checkpoint-dir DIR] [--poll-interval SECONDS]
                              -- ENTRYPOINT [ARGS...]      (or: -- -m MODULE [ARGS...])

The entrypoint (Megatron's `pretrain_gpt.py`, the reference workload, any script) runs in
this very process, exactly as `python ENTRYPOINT ARGS...` would run it, so a signal hits
the real training process. On the selected global rank the nemesis waits for its moment
(harness.vocab.faults.FAULT_MOMENTS), claims the fault's marker with O_EXCL and only then signals
its own process, or, for `node`, loses its whole node: its launcher (this worker's parent)
and every process under it (the node's other workers, rank monitors, checkpoint workers) are
stopped, then SIGKILLed together, this process last:

- after-commit: a poller thread reads Megatron's tracker; the first iteration above the
  value read at startup fires (`poison` first truncates one `.distcp` of that checkpoint);
- in-save: the poller watches the checkpoint directory: once a checkpoint is committed, the
  first `iter_N/` above it that holds `.distcp` data but no `metadata.json`, with the tracker
  still below N, fires while that async save is in flight (the marker's `iteration` is N); a save
  committed between the poller's look and the injection (checked after a fill, before the
  marker: Moment.holds) is let go, and the next save is waited for;
- in-restore: fault 1 as after-commit; in the replacement cycle an audit hook fires fault 2
  at the first read of a file under `iter_*/` (the load started, no step yet);
- last-iteration: when the entrypoint returns normally with the tracker at --train-iters.

Each planned fault claims its own marker (`fault_injected.json`, then `fault_injected.2.json`)
and a worker that finds its fault's marker stays quiet: one injection per planned fault,
whatever the number of restarts. The plan's schedule (harness.vocab.faults.PlannedFault: kind, rank,
moment per fault, in marker order) is this one fault at each moment of --fault-at, or a
campaign's `--fault campaign --schedule kill@1:after-commit,gil@0:in-save,...`: at startup every
worker finds the first unclaimed marker i, and only the rank the schedule names for fault i arms,
with fault i's kind and moment (docs/campaigns.md).

The wrapper never touches training state, except the one file `poison` truncates or `corrupt`
flips, and `disk-full`'s filler (written beside the checkpoints on the run's own tmpfs, removed
by the fault rank's next cycle).
It reads the tracker and the checkpoint directory, writes markers and signals itself. In every
node's first worker (local rank 0) it also states, before the entrypoint runs, which NVRx the
worker's sys.path finds (harness.nemesis.identity; one `[nemesis] rank R launcher identity: ...`
line that harness.read.history reads back and the launcher_identity check compares with run.json's
contract).
Stdlib only (plus the vocabulary of harness.vocab.faults and the paths of harness.vocab.layout): it is
imported by every training worker and must not pull in torch or slow startup down.

Exit status: the entrypoint's own, unchanged; 2 for bad options or an unusable tracker /
marker path, found before the entrypoint starts; 3 when the selected rank ends normally
without its requested fault having happened (an uninterrupted run is not a recovery).
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import runpy
import signal
import socket
import stat
import sys
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, ClassVar, Mapping, Sequence

from harness.nemesis import inject, identity as nvrx_identity
from harness.vocab import tiers
from harness.vocab.faults import (AFTER_COMMIT, CAMPAIGN, DEFAULT_FAULT_AT, DEFAULT_KIND, FAULT_KINDS, FAULT_MOMENTS,
                                  FAULTS, FILL, FLIP_DISTCP, IN_PROCESS, IN_RESTORE, IN_SAVE, LAST_ITERATION, NODE,
                                  SIGNAL, TRUNCATE_DISTCP, PlannedFault, parse_schedule, single_schedule)
from harness.vocab.layout import (TRACKER_ABSENT, TRACKER_EMPTY, TRACKER_NAME, TRACKER_UNREADABLE, RunLayout,
                            checkpoint_iter_dir, is_megatron_iter_name, is_valid_run_id, parse_iter_name,
                            parse_tracker, read_tracker_file)

FAULT_SIGNALS = {k.name: getattr(signal, k.signal) for k in FAULT_KINDS.values() if k.signal is not None}
COMMIT_MARKER_NAME = "metadata.json"  # dist-checkpointing's commit marker inside iter_N/
DATA_SUFFIX = ".distcp"
DEFAULT_FAULT = DEFAULT_KIND
DEFAULT_FAULT_RANK = 1
# bench/nemesis_latency.py on a 2-core VM: tracker write -> SIGKILL median 33 ms, p95 65 ms;
# the poller costs ~0.3 % of one core (~0.2 ms CPU per poll, wakeup included).
DEFAULT_POLL_INTERVAL_S = 0.05

EXIT_USAGE = 2
EXIT_FAULT_NEVER_HAPPENED = 3

POLLER_THREAD_NAME = "nemesis-poller"


class NemesisError(Exception):
    """Input the wrapper refuses before the entrypoint starts; the message is one line."""


class TrackerError(NemesisError):
    """The tracker file exists but holds no usable iteration."""


class MarkerError(NemesisError):
    """The injection marker could not be claimed for a reason other than 'already there'."""


# ---------------------------------------------------------------- the marker record


@dataclass(frozen=True)
class InjectionRecord:
    """Contents of a marker (docs/contracts.md); `iteration` triggered the fault: the committed
    checkpoint for after-commit / in-restore / last-iteration, the one being saved for in-save."""

    fault: str
    signal: str | None  # None: an in-process kind that sends no signal
    rank: int
    local_rank: int | None
    cycle: int | None
    iteration: int
    baseline_iteration: int
    injected_at: str
    host: str
    pid: int
    tracker: str
    launcher_pid: int | None = None  # node fault: the lost node's launcher (NVRx names nodes <host>_<pid>_<n>)
    fault_at: str = DEFAULT_FAULT_AT
    fault_index: int = 1  # which planned fault (its marker: layout.marker_for(fault_index))
    committed_iteration: int | None = None  # in-save: the tracker's (committed) iteration; iteration is in flight
    poisoned: str | None = None  # poison: the truncated file
    filler: str | None = None  # disk-full: the file that filled the checkpoint filesystem
    filler_bytes: int | None = None  # disk-full: its size
    filesystem_bytes: int | None = None  # disk-full: the size of the filesystem it filled

    def to_json(self) -> str:
        fields = asdict(self)
        if fields["launcher_pid"] is None:  # only a node fault names a launcher
            del fields["launcher_pid"]
        if fields["filler"] is None:  # only disk-full fills a filesystem
            for name in ("filler", "filler_bytes", "filesystem_bytes"):
                del fields[name]
        return json.dumps(fields, indent=2) + "\n"


def utc_now_iso() -> str:
    """UTC ISO-8601 with milliseconds and a Z, the stamp format of every harness file."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# ---------------------------------------------------------------- tracker reading


parse_iteration = parse_tracker  # the one reading of a tracker's text (harness.vocab.layout)


def read_baseline(tracker: Path) -> int:
    """The iteration already checkpointed at startup: 0 when the tracker is absent.

    Anything else that is not an integer raises TrackerError: treating an empty or
    garbled tracker as 0 would let the fault fire on a checkpoint that predates this run.
    """
    read = read_tracker_file(tracker)
    if read.state == TRACKER_ABSENT:
        return 0
    if read.state == TRACKER_UNREADABLE:
        raise TrackerError(
            f"checkpoint tracker {tracker} is unreadable ({read.error}): "
            "fix or remove it before starting (an absent tracker means a fresh run)"
        )
    if read.state == TRACKER_EMPTY:
        raise TrackerError(
            f"checkpoint tracker {tracker} is empty: write the last completed iteration "
            "into it or remove it before starting"
        )
    if read.value is None:
        raise TrackerError(
            f"checkpoint tracker {tracker} holds {(read.text or '').strip()[:40]!r}, not an iteration number: "
            "point the checkpoint dir at a training checkpoint or remove the file"
        )
    return read.value


def read_tracker(tracker: Path) -> int | None:
    """One poll: the tracker's iteration, or None for any failure.

    Megatron writes the tracker non-atomically (open 'w', then write), so an empty or
    missing file while polling is a passing state, never a value.
    """
    return read_tracker_file(tracker).value


def watch_tracker(
    tracker: Path,
    baseline: int,
    interval: float,
    stop: threading.Event,
    read: Callable[[Path], int | None] = read_tracker,
) -> int | None:
    """Poll until the tracker holds an iteration above `baseline` (returned) or `stop` is set (None)."""
    while not stop.is_set():
        value = read(tracker)
        if value is not None and value > baseline:
            return value
        stop.wait(interval)
    return None


def watch_trackers(trackers: Sequence[Path], baseline: int, interval: float, stop: threading.Event,
                   read: Callable[[Path], int | None] = read_tracker) -> tuple[int | None, Path]:
    """Poll several trackers (Megatron's checkpoint tiers, harness.vocab.tiers) until one holds an
    iteration above `baseline`: (that iteration, its tracker); (None, the first) when stopped."""
    while not stop.is_set():
        for tracker in trackers:
            value = read(tracker)
            if value is not None and value > baseline:
                return value, tracker
        stop.wait(interval)
    return None, trackers[0]


@dataclass(frozen=True)
class InFlightSave:
    """An async save caught in flight: iter_`iteration`/ holds data, no commit marker, and the
    tracker still names `committed`."""

    iteration: int
    committed: int
    directory: Path


def find_in_flight_save(checkpoints: Path, baseline: int,
                        read: Callable[[Path], int | None] = read_tracker) -> InFlightSave | None:
    """One look at the checkpoint directory: the save in flight above a checkpoint committed by
    this run (tracker > baseline), or None. The tracker is read before and after the listing:
    a commit in between makes the answer None."""
    tracker = checkpoints / TRACKER_NAME
    committed = read(tracker)
    if committed is None or committed <= baseline:
        return None
    try:
        entries = [(n, e) for e in os.scandir(checkpoints)
                   if is_megatron_iter_name(e.name) and (n := parse_iter_name(e.name)) is not None and n > committed]
    except OSError:
        return None
    for number, entry in sorted(entries, key=lambda x: x[0]):
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            names = os.listdir(entry.path)
        except OSError:
            continue
        if COMMIT_MARKER_NAME in names or not any(n.endswith(DATA_SUFFIX) for n in names):
            continue
        if read(tracker) != committed or os.path.exists(os.path.join(entry.path, COMMIT_MARKER_NAME)):
            return None  # committed meanwhile: not in flight any more
        return InFlightSave(number, committed, Path(entry.path))
    return None


def watch_in_flight_save(checkpoints: Path, baseline: int, interval: float, stop: threading.Event) -> InFlightSave | None:
    while not stop.is_set():
        found = find_in_flight_save(checkpoints, baseline)
        if found is not None:
            return found
        stop.wait(interval)
    return None


def poison_checkpoint(directory: Path) -> Path:
    """Truncate the largest `.distcp` file of a committed checkpoint to half its size (the run's
    own checkpoint: validation refuses a user-given checkpoint dir). Returns the file."""
    return inject.damage_checkpoint(directory, "truncate")


# What each FaultKind.damage does to the newest committed checkpoint's iter_N/ (returns the damaged file).
def corrupt_checkpoint(directory: Path) -> Path:
    """Invert 4 KiB in the middle of the largest `.distcp` (size unchanged). Returns the file."""
    return inject.damage_checkpoint(directory, "flip")


CHECKPOINT_DAMAGE: dict[str, Callable[[Path], Path]] = {TRUNCATE_DISTCP: poison_checkpoint,
                                                        FLIP_DISTCP: corrupt_checkpoint}
# The action of each IN_PROCESS kind, run in the selected worker once its marker is claimed
# (harness.vocab.faults.FaultKind.injects); test_fault_moments checks that every such kind has one.
# They live in harness.nemesis.inject (exception, segfault, abort, gil).
IN_PROCESS_ACTIONS: dict[str, Callable[[], None]] = dict(inject.ACTIONS)


# ---------------------------------------------------------------- marker claiming


def marker_present(marker: Path) -> bool:
    """A claimed marker is a regular file; a symlink there is no marker (and is refused)."""
    try:
        return stat.S_ISREG(os.lstat(marker).st_mode)
    except OSError:
        return False


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some network filesystems cannot fsync a directory; the file itself is synced.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def claim_marker(marker: Path, record: InjectionRecord) -> bool:
    """Create `marker` exclusively with `record`, durably. True: this process won the claim.

    False: a marker already exists (another worker, or an earlier cycle, injected).
    MarkerError: anything else, including a symlink at the path; nothing is then written
    through the link and a partly written marker is removed, so nobody reads it as a claim.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(marker, flags, 0o644)
    except FileExistsError:
        # O_CREAT|O_EXCL also fails with EEXIST on a symlink, wherever it points.
        if os.path.islink(marker):
            raise MarkerError(f"refusing marker {marker}: it is a symlink, not a file") from None
        return False
    except OSError as exc:
        raise MarkerError(f"cannot create marker {marker}: {exc.strerror or exc}") from exc
    try:
        try:
            data = memoryview(record.to_json().encode())
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(marker.parent)
    except OSError as exc:
        try:
            os.unlink(marker)
        except OSError:
            pass
        raise MarkerError(f"cannot write marker {marker}: {exc.strerror or exc}") from exc
    return True


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Entrypoint:
    """What runs inside the wrapper: a script path (like `python X`) or a module (`python -m X`)."""

    target: str
    args: tuple[str, ...]
    is_module: bool = False


@dataclass(frozen=True)
class NemesisConfig:
    fault: str
    fault_rank: int
    rank: int
    local_rank: int | None
    cycle: int | None
    layout: RunLayout | None  # None only when fault is none
    poll_interval: float
    fault_at: str = DEFAULT_FAULT_AT
    # The entrypoint's --train-iters: a fault after the *final* checkpoint leaves nothing to
    # recover, so the run is reported as "fault never happened" instead of racing the exit.
    final_iteration: int | None = None
    # harness.vocab.tiers: after-commit waits on these (tier, directory) trackers; () = the persistent one only
    fault_after: str = "any"
    watch_dirs: tuple[tuple[str, Path], ...] = ()
    # Every planned fault in marker order (harness.vocab.faults.PlannedFault: kind, rank, moment): a
    # campaign's --schedule, else this one fault at each moment of --fault-at.
    schedule: tuple[PlannedFault, ...] = ()

    @property
    def planned(self) -> tuple[PlannedFault, ...]:
        return self.schedule or single_schedule(self.fault, self.fault_rank, self.fault_at)

    @property
    def selected(self) -> bool:
        """This process injects some planned fault (which one, the markers decide: arm)."""
        return self.fault != "none" and any(f.rank == self.rank for f in self.planned)


def _env(env: Mapping[str, str], name: str) -> str | None:
    # Launch scripts often export empty variables; empty means unset.
    value = env.get(name, "").strip()
    return value or None


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = _env(env, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise NemesisError(f"{name}={value!r} is not an integer: unset it or set a number") from None


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.nemesis",
        usage="%(prog)s [options] -- ENTRYPOINT [ARGS...]   (or: -- -m MODULE [ARGS...])",
        description="Run a training entrypoint unmodified and inject one fault on one rank "
        "right after its first new checkpoint, once per run.",
        epilog="Options fall back to NVRX_DEMO_FAULT, NVRX_FAULT_RANK, "
        "NVRX_RUN_DIR (else $NVRX_WORK_DIR/runs/$NVRX_RUN_ID), NVRX_CHECKPOINT_DIR, NVRX_POLL_INTERVAL.",
    )
    parser.add_argument("--fault", choices=FAULTS, help=f"default $NVRX_DEMO_FAULT or {DEFAULT_FAULT}")
    parser.add_argument("--fault-at", choices=tuple(FAULT_MOMENTS),
                        help=f"the moment; default $NVRX_FAULT_AT or {DEFAULT_FAULT_AT}")
    parser.add_argument("--schedule", help="--fault campaign: every planned fault in marker order, "
                                           "KIND@RANK:MOMENT,... (fault i claims marker i)")
    parser.add_argument("--fault-after", choices=tiers.FAULT_AFTER,
                        help=f"after-commit: the checkpoint tier whose commit fires; default $NVRX_FAULT_AFTER or "
                             f"{tiers.DEFAULT_FAULT_AFTER} (harness.vocab.tiers)")
    parser.add_argument(
        "--fault-rank", type=_non_negative_int, help=f"global RANK that injects; default $NVRX_FAULT_RANK or {DEFAULT_FAULT_RANK}"
    )
    parser.add_argument("--run-dir", type=Path, help="run directory holding fault_injected.json")
    parser.add_argument("--checkpoint-dir", type=Path, help="Megatron --save dir; default <run-dir>/checkpoints")
    parser.add_argument(
        "--poll-interval", type=_positive_seconds, help=f"seconds between tracker reads; default {DEFAULT_POLL_INTERVAL_S}"
    )
    return parser


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Options before the first '--', the entrypoint command after it (None: no '--')."""
    argv = list(argv)
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _entrypoint(command: list[str] | None) -> Entrypoint:
    if command is None:
        raise NemesisError("no entrypoint: put '--' and then the script (or -m MODULE) with its arguments")
    if not command:
        raise NemesisError("no entrypoint after '--': give the training script and its arguments")
    if command[0] == "-m":
        if len(command) < 2:
            raise NemesisError("'-m' after '--' needs a module name")
        return Entrypoint(command[1], tuple(command[2:]), is_module=True)
    return Entrypoint(command[0], tuple(command[1:]))


def _run_dir(options: argparse.Namespace, env: Mapping[str, str]) -> Path | None:
    if options.run_dir is not None:
        return options.run_dir
    if (explicit := _env(env, "NVRX_RUN_DIR")) is not None:
        return Path(explicit)
    work_dir, run_id = _env(env, "NVRX_WORK_DIR"), _env(env, "NVRX_RUN_ID")
    if work_dir is None or run_id is None:
        return None
    if not is_valid_run_id(run_id):
        raise NemesisError(f"NVRX_RUN_ID={run_id!r} is not a valid run id: use letters, digits, '.', '_' and '-'")
    return RunLayout.for_run(Path(work_dir), run_id).root


def parse_command_line(argv: Sequence[str], env: Mapping[str, str]) -> tuple[NemesisConfig, Entrypoint]:
    """Options + environment -> config. NemesisError (or argparse's exit 2) on bad input."""
    option_args, command = _split_command(argv)
    options = build_parser().parse_args(option_args)  # first, so that --help works alone
    entrypoint = _entrypoint(command)

    fault = options.fault or _env(env, "NVRX_DEMO_FAULT") or DEFAULT_FAULT
    if fault not in FAULTS:
        raise NemesisError(f"NVRX_DEMO_FAULT={fault!r} is not one of {', '.join(FAULTS)}")
    fault_at = options.fault_at or _env(env, "NVRX_FAULT_AT") or DEFAULT_FAULT_AT
    if fault_at not in FAULT_MOMENTS:
        raise NemesisError(f"NVRX_FAULT_AT={fault_at!r} is not one of {', '.join(FAULT_MOMENTS)}")
    planned: tuple[PlannedFault, ...] = ()
    if fault == CAMPAIGN or options.schedule is not None:
        if fault != CAMPAIGN or not options.schedule:
            raise NemesisError("--schedule goes with --fault campaign, and --fault campaign needs --schedule "
                               "KIND@RANK:MOMENT,... (nvrx-qual plans both)")
        try:
            planned = parse_schedule(options.schedule)
        except ValueError as exc:
            raise NemesisError(f"--schedule: {exc}") from None
    missing = [f.kind for f in planned if FAULT_KINDS[f.kind].injects == IN_PROCESS and f.kind not in IN_PROCESS_ACTIONS]
    if missing:
        raise NemesisError(f"fault {missing[0]} is an in-process kind this nemesis has no action for: update nvrx-qual")
    if FAULT_KINDS.get(fault) is not None and not FAULT_KINDS[fault].allows(fault_at):
        raise NemesisError(f"fault {fault} fires only at {', '.join(FAULT_KINDS[fault].moments or ())}: "
                           f"use --fault-at {(FAULT_KINDS[fault].moments or (DEFAULT_FAULT_AT,))[0]}")
    if fault in FAULT_KINDS and FAULT_KINDS[fault].injects == IN_PROCESS and fault not in IN_PROCESS_ACTIONS:
        raise NemesisError(f"fault {fault} is an in-process kind this nemesis has no action for: update nvrx-qual")
    fault_rank = options.fault_rank
    if fault_rank is None:
        fault_rank = _env_int(env, "NVRX_FAULT_RANK")
        fault_rank = DEFAULT_FAULT_RANK if fault_rank is None else fault_rank
        if fault_rank < 0:
            raise NemesisError(f"NVRX_FAULT_RANK={fault_rank} is negative: set a global rank >= 0")
    poll_interval = options.poll_interval
    if poll_interval is None:
        raw = _env(env, "NVRX_POLL_INTERVAL")
        try:
            poll_interval = DEFAULT_POLL_INTERVAL_S if raw is None else _positive_seconds(raw)
        except argparse.ArgumentTypeError as exc:
            raise NemesisError(f"NVRX_POLL_INTERVAL: {exc}") from None

    # Without a launcher there is one process: rank 0 of a world of 1.
    rank = _env_int(env, "RANK")
    world_size = _env_int(env, "WORLD_SIZE") if rank is not None else 1
    rank = 0 if rank is None else rank
    outside = [f for f in planned if world_size is not None and f.rank >= world_size]
    if outside:
        raise NemesisError(f"--schedule: {outside[0].text()} names rank {outside[0].rank}, which does not exist in a "
                           f"world of {world_size}: plan the campaign for this world")
    if fault not in ("none", CAMPAIGN) and world_size is not None and fault_rank >= world_size:
        raise NemesisError(
            f"fault rank {fault_rank} does not exist in a world of {world_size}: "
            f"set NVRX_FAULT_RANK (or --fault-rank) below {world_size}, or NVRX_DEMO_FAULT=none"
        )

    layout = None
    run_dir = _run_dir(options, env)
    if run_dir is not None:
        checkpoint_dir = options.checkpoint_dir or (Path(v) if (v := _env(env, "NVRX_CHECKPOINT_DIR")) else None)
        layout = RunLayout.of_dir(run_dir, checkpoint_dir)
    elif fault != "none":
        raise NemesisError(
            f"fault {fault!r} needs a run directory for its marker: pass --run-dir, set NVRX_RUN_DIR, "
            "or set NVRX_WORK_DIR and NVRX_RUN_ID (or NVRX_DEMO_FAULT=none)"
        )

    fault_after = options.fault_after or _env(env, "NVRX_FAULT_AFTER") or tiers.DEFAULT_FAULT_AFTER
    if fault_after not in tiers.FAULT_AFTER:
        raise NemesisError(f"NVRX_FAULT_AFTER={fault_after!r} is not one of {', '.join(tiers.FAULT_AFTER)}")
    watch_dirs: tuple[tuple[str, Path], ...] = ()
    if layout is not None and fault != "none":
        try:
            watch_dirs = tuple(tiers.watched_dirs(fault_after, entrypoint.args, layout.checkpoints))
        except ValueError as exc:
            raise NemesisError(str(exc)) from None
    config = NemesisConfig(
        fault=fault,
        fault_rank=fault_rank,
        rank=rank,
        local_rank=_env_int(env, "LOCAL_RANK"),
        cycle=_env_int(env, "TORCHELASTIC_RESTART_COUNT"),
        layout=layout,
        poll_interval=poll_interval,
        fault_at=fault_at,
        final_iteration=final_iteration(entrypoint.args),
        fault_after=fault_after,
        watch_dirs=watch_dirs,
        schedule=planned,
    )
    return config, entrypoint


def final_iteration(args: Sequence[str]) -> int | None:
    """The value of `--train-iters N` / `--train-iters=N` (Megatron's flag), if given."""
    for i, arg in enumerate(args):
        value = arg.partition("=")[2] if arg.startswith("--train-iters=") else (
            args[i + 1] if arg == "--train-iters" and i + 1 < len(args) else None)
        if value is not None:
            return parse_iteration(value)
    return None


# ---------------------------------------------------------------- the process part


def log(message: str) -> None:
    """One unbuffered line on fd 2: it must be out before a SIGKILL, whatever sys.stderr is now."""
    try:
        os.write(2, f"[nemesis] {message}\n".encode(errors="replace"))
    except OSError:
        pass


MOMENTS: dict[str, type[Moment]] = {}  # every Moment subclass, by its name (filled as they are defined)


@dataclass(frozen=True)
class Trigger:
    """What made a moment come: `iteration` triggered the fault (the marker's), `committed` the
    tracker's committed iteration when it differs (in-save: the save in flight is `iteration`)."""

    iteration: int
    committed: int | None = None


class Moment:
    """One fault moment as the selected worker lives it (harness.vocab.faults.FAULT_MOMENTS names them,
    MOMENTS maps each name to its class): `arm` starts watching (by default a poller thread that
    runs `wait` and fires what it returns), `wait` blocks until the moment comes (its Trigger) or
    `stop` is set (None), `at_exit` is called when the entrypoint returned normally. `waits_for`
    and `during` are its words in the arm line and the injection line. A new moment is one
    subclass here, which registers itself in MOMENTS (and its row in harness.vocab.faults)."""

    name: ClassVar[str]
    fires_after_disarm: ClassVar[bool] = False  # it comes after the entrypoint returned (disarmed)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:  # a moment registers itself: MOMENTS[cls.name]
            MOMENTS[cls.name] = cls

    def __init__(self, injector: Injector) -> None:
        self.injector = injector

    def waits_for(self) -> str:
        raise NotImplementedError

    def arm(self) -> None:
        threading.Thread(target=self._poll, name=POLLER_THREAD_NAME, daemon=True).start()

    def wait(self, stop: threading.Event) -> Trigger | None:
        raise NotImplementedError

    def at_exit(self) -> None:
        """The entrypoint returned normally (the injector is disarmed)."""

    def during(self, trigger: Trigger) -> str:
        """What the injection line adds after 'after checkpoint iteration K (baseline B)'."""
        return ""

    def holds(self, trigger: Trigger) -> bool:
        """Whether the moment `wait` found is still there as the fault lands (checked after a fill,
        just before the marker is claimed); False: it passed meanwhile, and the poller waits for
        the next one."""
        return True

    def _poll(self) -> None:
        inj = self.injector
        try:
            while True:
                trigger = self.wait(inj._stop)
                if trigger is None or inj.fire(trigger):
                    break
        except BaseException as exc:  # a dead poller must be reported at exit, not lost
            inj.failure = f"the poller thread failed: {exc!r}"
            log(f"rank {inj.rank}: {inj.failure}")


class AfterCommit(Moment):
    """The first tracker value above the startup baseline (unless it is the final one)."""

    name = AFTER_COMMIT

    def waits_for(self) -> str:
        return f"once {' or '.join(map(str, self.injector.trackers()))} passes iteration {self.injector.baseline}"

    def wait(self, stop: threading.Event) -> Trigger | None:
        inj = self.injector
        iteration, inj.tracker = watch_trackers(inj.trackers(), inj.baseline, inj.config.poll_interval, stop)
        final = inj.config.final_iteration
        if iteration is not None and final is not None and iteration >= final:
            inj.failure = (f"the first checkpoint newer than the baseline {inj.baseline} was the final one "
                           f"(iteration {iteration}, --train-iters {final}): a fault there leaves nothing to "
                           "recover; use a save interval below the train iterations, or --fault-at last-iteration")
            log(f"rank {inj.rank}: not injecting: {inj.failure}")
            return None
        return None if iteration is None else Trigger(iteration)


class InSave(Moment):
    """A save in flight above a checkpoint this run committed (find_in_flight_save)."""

    name = IN_SAVE

    def waits_for(self) -> str:
        inj = self.injector
        return (f"once a save above a committed checkpoint newer than {inj.baseline} is in flight in "
                f"{inj.layout.checkpoints}")

    def wait(self, stop: threading.Event) -> Trigger | None:
        inj = self.injector
        found = watch_in_flight_save(inj.layout.checkpoints, inj.baseline, inj.config.poll_interval, stop)
        return None if found is None else Trigger(found.iteration, committed=found.committed)

    def during(self, trigger: Trigger) -> str:
        return f", during the async save of iteration {trigger.iteration}"

    def holds(self, trigger: Trigger) -> bool:
        """The save is still uncommitted (no commit marker, the tracker where it was): a poller
        slowed by a loaded machine, or a fill, must not land after the commit it aimed before."""
        checkpoints = self.injector.layout.checkpoints
        save = checkpoint_iter_dir(checkpoints, trigger.iteration)
        return (read_tracker(checkpoints / TRACKER_NAME) == trigger.committed
                and not os.path.lexists(save / COMMIT_MARKER_NAME))


class InRestore(Moment):
    """The replacement's first read of a file under iter_*/: its load started, no step yet."""

    name = IN_RESTORE

    def __init__(self, injector: Injector) -> None:
        super().__init__(injector)
        self._fired = False

    def waits_for(self) -> str:
        return f"at the first read under {self.injector.layout.checkpoints}/iter_* (the load)"

    def arm(self) -> None:
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple) -> None:
        inj = self.injector
        if event != "open" or self._fired or inj.disarmed:
            return
        path, mode = args[0], args[1]
        if not isinstance(path, (str, bytes, os.PathLike)) or (isinstance(mode, str) and any(c in mode for c in "wax+")):
            return
        if isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR):
            return
        text = os.fsdecode(path)
        checkpoints = os.fsdecode(os.path.abspath(inj.layout.checkpoints))
        rel = os.path.relpath(os.path.abspath(text), checkpoints)
        loading = parse_iter_name(rel.split(os.sep, 1)[0])
        if rel.startswith("..") or loading is None:
            return
        self._fired = True
        iteration = read_tracker(inj.layout.tracker)
        inj.fire(Trigger(iteration if iteration is not None else loading))

    def during(self, trigger: Trigger) -> str:
        return ", while the replacement loads it"


class LastIteration(Moment):
    """The entrypoint returned normally with the final checkpoint committed."""

    name = LAST_ITERATION
    fires_after_disarm = True

    def waits_for(self) -> str:
        return "when the entrypoint ends with the final checkpoint committed"

    def arm(self) -> None:
        pass  # nothing to watch: at_exit decides

    def at_exit(self) -> None:
        inj = self.injector
        final = inj.config.final_iteration
        committed = read_tracker(inj.layout.tracker)
        if final is None:
            inj.failure = "--fault-at last-iteration needs the entrypoint's --train-iters to know the final iteration"
        elif committed != final:
            inj.failure = (f"the entrypoint ended with the tracker at {committed}, not at the final iteration {final}: "
                           "the final checkpoint was not committed")
        else:
            inj.fire(Trigger(final))
            return
        log(f"rank {inj.rank}: not injecting: {inj.failure}")

    def during(self, trigger: Trigger) -> str:
        return ", the final one, before the clean exit"




def schedule(planned: str | Sequence[PlannedFault]) -> tuple[type[Moment], ...]:
    """The moment of every planned fault, in marker order: schedule[i - 1] is fault i's, which
    claims layout.marker_for(i). `planned`: the plan's schedule (NemesisConfig.planned), or a
    --fault-at name for one fault at each of its moments (harness.vocab.faults.FaultMoment.moments)."""
    names = FAULT_MOMENTS[planned].moments if isinstance(planned, str) else tuple(f.moment for f in planned)
    return tuple(MOMENTS[name] for name in names)


class Injector:
    """The selected rank's fault: its moment waits, then it claims its marker and injects.

    `moment`: the Moment of this fault (schedule(fault_at)[fault_index - 1]); `fault_index`
    is the planned fault it stands for (its marker)."""

    def __init__(self, config: NemesisConfig, layout: RunLayout, baseline: int, *, watch: str,
                 fault_index: int = 1, kind: str | None = None) -> None:
        self.config = config
        self.kind = kind or config.fault  # this fault's kind (a campaign's schedule names one per fault)
        self.layout = layout
        self.baseline = baseline
        self.watch = watch
        self.fault_index = fault_index
        self.marker = layout.marker_for(fault_index)
        self.moment = MOMENTS[watch](self)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # disarm() cannot slip between claim and signal
        self.disarmed = False
        self.failure: str | None = None  # why the fault did not happen, when we know
        self.passed: list[int] = []  # the iterations whose moment passed before the fault could land
        self.tracker = layout.tracker  # the tracker whose commit fired (harness.vocab.tiers: any watched tier's)

    def why_not(self) -> str | None:
        """Why the fault did not happen, when known: a failure, else the moments that passed."""
        if self.failure is not None or not self.passed:
            return self.failure
        return (f"the {self.moment.name} moment of iteration {', '.join(map(str, self.passed))} passed before the "
                "fault could land (committed meanwhile) and no later one came before the entrypoint ended; give the "
                "run more saves (--train-iters)")

    def trackers(self) -> list[Path]:
        """The trackers after-commit watches: those of the tiers --fault-after names."""
        return [d / TRACKER_NAME for _tier, d in self.config.watch_dirs] or [self.layout.tracker]

    @property
    def rank(self) -> int:
        return self.config.rank

    def start(self) -> None:
        self.moment.arm()

    def disarm(self) -> None:
        """Stop for good; waits for an injection in progress (which then ends this process)."""
        self._stop.set()
        with self._lock:
            self.disarmed = True

    def at_normal_exit(self) -> None:
        """The entrypoint returned normally: the moment's last word (last-iteration fires here)."""
        self.moment.at_exit()

    def _record(self, iteration: int, committed: int | None, poisoned: str | None,
                launcher_pid: int | None = None, filled: tuple[Path, int, int] | None = None) -> InjectionRecord:
        config = self.config
        return InjectionRecord(
            fault=self.kind,
            signal=FAULT_KINDS[self.kind].signal,
            rank=config.rank,
            local_rank=config.local_rank,
            cycle=config.cycle,
            iteration=iteration,
            baseline_iteration=self.baseline,
            injected_at=utc_now_iso(),
            host=socket.gethostname(),
            pid=os.getpid(),
            tracker=os.path.abspath(self.tracker),
            launcher_pid=launcher_pid,
            fault_at=self.watch,
            fault_index=self.fault_index,
            committed_iteration=committed,
            poisoned=poisoned,
            filler=str(filled[0]) if filled else None,
            filler_bytes=filled[1] if filled else None,
            filesystem_bytes=filled[2] if filled else None,
        )

    def fire(self, trigger: Trigger) -> bool:
        """Inject at `trigger`; False when its moment passed before the fault could land (nothing
        was claimed or left behind: the caller waits for the next one), else True (injected, or
        not for a reason in `failure`)."""
        with self._lock:
            if self.disarmed and not self.moment.fires_after_disarm:
                return True
            return self._inject(trigger)

    def _inject(self, trigger: Trigger) -> bool:
        iteration, committed = trigger.iteration, trigger.committed
        rank, marker = self.rank, self.marker
        kind = FAULT_KINDS[self.kind]
        poisoned = None
        node_pids: list[int] = []
        if kind.injects == NODE:
            try:
                node_pids = node_processes(os.getpid())
            except NodeError as exc:
                self.failure = f"cannot lose this node: {exc}"
                log(f"rank {rank}: not injecting: {self.failure}")
                return True
        if kind.damage is not None:
            try:
                poisoned = str(CHECKPOINT_DAMAGE[kind.damage](checkpoint_iter_dir(self.tracker.parent, iteration)))
            except OSError as exc:
                self.failure = f"poisoning checkpoint {iteration} failed: {exc}"
                log(f"rank {rank}: not injecting: {self.failure}")
                return True
        filled = None
        if kind.injects == FILL:  # the marker lives in the run directory, on the disk: it is claimed after the fill
            try:
                filled = inject.fill_filesystem(self.layout.checkpoints)
            except OSError as exc:
                self.failure = f"filling the checkpoint filesystem failed: {exc}"
                log(f"rank {rank}: not injecting: {self.failure}")
                return True
        if not self.moment.holds(trigger):  # it passed while this poller waited or filled: take it all back
            if filled is not None:
                inject.free_filesystem(self.layout.checkpoints)
            log(f"rank {rank}: the {self.moment.name} moment of iteration {iteration} passed before the fault could "
                "land (committed meanwhile); waiting for the next one")
            self.passed.append(iteration)
            return False
        try:
            claimed = claim_marker(marker, self._record(iteration, committed, poisoned,
                                                        node_pids[0] if node_pids else None, filled))
        except MarkerError as exc:
            self.failure = f"claiming the marker failed: {exc}"
            log(f"rank {rank}: not injecting: {exc}")
            if filled is not None:  # no marker names the filler: take it back now
                inject.free_filesystem(self.layout.checkpoints)
            return True
        if not claimed:
            log(f"rank {rank}: marker {marker} already claimed by another worker; not injecting")
            if filled is not None:
                inject.free_filesystem(self.layout.checkpoints)
            return True
        if kind.injects == NODE:
            log(f"rank {rank} losing its node {socket.gethostname()} after checkpoint iteration {iteration} "
                f"(baseline {self.baseline}): {kind.signal} of launcher {node_pids[0]} and its "
                f"{len(node_pids) - 1} descendant(s)")
            kill_node(node_pids)
            return True
        # One prefix for every moment (history reads it): the committed checkpoint the fault came after.
        after = committed if committed is not None else iteration
        what = self.moment.during(trigger)
        verb = "corrupted" if kind.damage == FLIP_DISTCP else "truncated"
        extra = f", {verb} {poisoned}" if poisoned else ""
        if filled is not None:
            extra = (f", filled the checkpoint filesystem with {filled[0]} ({filled[1]} bytes of {filled[2]}): "
                     "the rank runs on")
        how = kind.signal if kind.injects == SIGNAL else kind.name
        # In-process kinds: the line comes first, a native crash or a held GIL leaves no chance afterwards.
        log(f"rank {rank} injecting {how} after checkpoint iteration {after} (baseline {self.baseline}){what}{extra}")
        if kind.injects == FILL:
            return True
        if kind.injects == IN_PROCESS:
            try:
                IN_PROCESS_ACTIONS[kind.name]()
            except inject.InjectError as exc:
                self.failure = f"the {kind.name} action failed: {exc}"
                log(f"rank {rank}: {self.failure}")
            return True
        os.kill(os.getpid(), FAULT_SIGNALS[kind.name])
        return True


# ---------------------------------------------------------------- losing a whole node


class NodeError(NemesisError):
    """The worker's node (its launcher and what runs under it) cannot be identified."""


_LAUNCHER_WORDS = ("nvidia_resiliency_ext.fault_tolerance.launcher", "ft_launcher", "torch.distributed.run",
                   "torchrun")


def _proc_text(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read(65536)


def _parent_of(pid: int) -> int | None:
    try:
        stat_text = _proc_text(pid, "stat").decode(errors="replace")
    except OSError:
        return None
    # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'
    fields = stat_text[stat_text.rfind(")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def node_processes(worker_pid: int) -> list[int]:
    """[launcher, its descendants...]: what dies with this worker's node. The launcher is the
    worker's parent and must look like one (ft_launcher / torchrun), so a worker run without a
    launcher never kills whatever happens to be its parent."""
    launcher = _parent_of(worker_pid)
    if launcher is None or launcher <= 1:
        raise NodeError(f"worker {worker_pid} has no launcher parent")
    try:
        cmdline = _proc_text(launcher, "cmdline").replace(b"\0", b" ").decode(errors="replace")
    except OSError as exc:
        raise NodeError(f"cannot read the command line of parent {launcher}: {exc}") from exc
    if not any(word in cmdline for word in _LAUNCHER_WORDS):
        raise NodeError(f"parent {launcher} is not a launcher ({cmdline[:120]!r})")
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out, todo = [launcher], [launcher]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def kill_node(pids: list[int]) -> None:
    """Freeze every process of the node first (none can react, restart or report), then
    SIGKILL them all; the calling worker, one of them, dies last."""
    me = os.getpid()
    frozen: set[int] = set()
    for _ in range(5):  # a child forked before its parent froze shows up on the next listing
        fresh = [p for p in pids if p != me and p not in frozen]
        if not fresh:
            break
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        frozen.update(fresh)
        try:
            pids = node_processes(me)
        except NemesisError:
            break
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def free_filled_filesystem(config: NemesisConfig, layout: RunLayout) -> None:
    """disk-full: the fault rank's next cycle removes the filler its fault wrote, before its
    entrypoint starts (the space an operator frees; the marker names the filler, this line says
    when it went). The replacement then loads and saves on a filesystem with room again."""
    kind = FAULT_KINDS.get(config.fault)
    if kind is None or kind.injects != FILL or not marker_present(layout.marker_for(1)):
        return
    try:
        freed = inject.free_filesystem(layout.checkpoints)
    except OSError as exc:
        log(f"rank {config.rank}: could not free the checkpoint filesystem: {exc}")
        return
    if freed is not None:
        log(f"rank {config.rank} freed the checkpoint filesystem: removed {layout.checkpoints / inject.FILLER_NAME} "
            f"({freed} bytes), as an operator would, before this cycle's entrypoint")


def arm(config: NemesisConfig) -> Injector | None:
    """Startup checks of the selected rank; the armed injector, or None when nothing is to be done."""
    if not config.selected:
        return None
    layout = config.layout
    assert layout is not None  # parse_command_line guarantees it when a fault is requested
    if not layout.root.is_dir():
        raise NemesisError(f"run directory {layout.root} does not exist: create it (nvrx-qual does) or fix --run-dir")
    free_filled_filesystem(config, layout)
    faults = config.planned
    plan = schedule(faults)
    planned = len(plan)
    index = None
    for i in range(1, planned + 1):
        path = layout.marker_for(i)
        if os.path.lexists(path) and not marker_present(path):
            raise NemesisError(f"marker path {path} exists but is not a regular file: remove it or use a new run id")
        if index is None and not marker_present(path):
            index = i
    if index is None:
        log(f"rank {config.rank}: marker {layout.marker_for(planned)} exists (fault injected in an earlier cycle); "
            f"not injecting again: every planned fault was injected")
        return None
    # The schedule's index is the marker number: the first unclaimed marker is this cycle's fault,
    # injected by the rank the schedule names.
    fault = faults[index - 1]
    if fault.rank != config.rank:
        return None
    watch = plan[index - 1].name
    # after-commit watches the trackers of the tiers --fault-after names (harness.vocab.tiers); the
    # baseline is the newest of them, so a restarted cycle waits for a commit newer than every tier's
    trackers = [d / TRACKER_NAME for _tier, d in config.watch_dirs] if FAULT_MOMENTS[watch].watches_commits else []
    baseline = max([read_baseline(layout.tracker), *(read_baseline(t) for t in trackers)])
    injector = Injector(config, layout, baseline, watch=watch, fault_index=index, kind=fault.kind)
    log(f"rank {config.rank} armed: {fault.kind} (fault {index} of {planned}, {watch}) {injector.moment.waits_for()} "
        f"(poll every {config.poll_interval:g} s)")
    injector.start()
    return injector


def run_entrypoint(entrypoint: Entrypoint, ready: Callable[[], None] | None = None) -> None:
    """Run it the way `python SCRIPT ARGS` / `python -m MODULE ARGS` would, in this process;
    `ready` is called once sys.path is what the entrypoint will import from, just before it runs."""
    if entrypoint.is_module:
        sys.argv = [entrypoint.target, *entrypoint.args]
        if ready is not None:
            ready()
        runpy.run_module(entrypoint.target, run_name="__main__", alter_sys=True)
        return
    script = entrypoint.target
    sys.argv = [script, *entrypoint.args]
    # Like the interpreter: the script's (real) directory first on the path, replacing
    # this wrapper's; Megatron's pretrain_gpt.py imports `megatron` from its checkout.
    # run_path sets argv[0] and __file__ to the path as given (the harness gives absolute ones).
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    if ready is not None:
        ready()
    runpy.run_path(script, run_name="__main__")


def state_launcher(config: NemesisConfig) -> None:
    """The first worker of each node (local rank 0) says which NVRx its sys.path finds, without
    importing it (harness.nemesis.identity): one line that harness.read.history reads back and
    launcher_identity compares with the launcher run.json's contract planned. Never fails the worker."""
    if config.local_rank not in (None, 0):
        return
    try:
        found = nvrx_identity.locate()
        log(found.line(config.rank) if found is not None else nvrx_identity.not_found_line(config.rank, "not on sys.path"))
    except Exception as exc:  # noqa: BLE001 - an identity that cannot be told is said, never a failed worker
        log(nvrx_identity.unknown_line(config.rank, f"{type(exc).__name__}: {str(exc)[:120]}"))


def _exit_code(exc: SystemExit) -> int | None:
    """The status a SystemExit means: 0 for None/0, None when it is not a plain int (a message)."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config, entrypoint = parse_command_line(sys.argv[1:] if argv is None else argv, os.environ)
        if not entrypoint.is_module and not os.path.exists(entrypoint.target):
            raise NemesisError(f"entrypoint {entrypoint.target} does not exist: give the training script's path")
        injector = arm(config)
    except NemesisError as exc:
        print(f"nemesis: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE

    pid = os.getpid()
    try:
        run_entrypoint(entrypoint, ready=lambda: state_launcher(config))
    except SystemExit as exc:
        if os.getpid() != pid or _exit_code(exc) != 0:
            raise  # a forked child, or the entrypoint's own failure: pass it through unchanged
    finally:
        if injector is not None and os.getpid() == pid:
            injector.disarm()
    if os.getpid() != pid or not config.selected:
        return 0
    assert config.layout is not None
    if injector is not None:
        injector.at_normal_exit()  # last-iteration fires here, before the clean exit
    if injector is None or marker_present(injector.marker):
        return 0
    reason = (injector.why_not() if injector is not None else None) or (
        f"no checkpoint newer than the startup baseline appeared in {config.layout.tracker} before the entrypoint ended"
    )
    print(
        f"nemesis: requested fault {injector.kind if injector is not None else config.fault} on rank {config.rank} "
        f"never happened: {reason}",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_FAULT_NEVER_HAPPENED


if __name__ == "__main__":
    sys.exit(main())
