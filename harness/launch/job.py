"""Run a Plan: real processes, every line captured with the harness's wall-clock time,
a deadline, an early stop when the verdict is already certain, and nothing left behind.

Process hygiene. The launcher starts in its own session (process group). torch elastic
starts every worker in a session of its own too, so killing the launcher's group is not
enough: every process of the launch carries a tag in its environment
(NVRX_QUAL_LAUNCH=<id>), inherited by workers, async checkpoint workers and NVRx's log
servers alike, and the final sweep kills each tagged process that is still alive, on
every exit path (normal end, deadline, early stop, exception, Ctrl-C).

Temporary files. Every launch on this machine gets a temporary directory of its own
(`launch_temp_dir`): TMPDIR, TMP and TEMP name it in the launcher's environment, so what
torch elastic, NVRx and Python put in the temporary directory (NVRx's `_ft_launcher<pid>*.socket`
files and `torchelastic_errors_*` directories, multiprocessing's `pymp-*`, torch's
`torchinductor_<user>`) lands there and is removed with it when the launch ends, whatever ended
it (the watchdog removes it when the harness itself is killed). It lies in the run directory
when the path leaves room for the socket names below it (AF_UNIX paths hold 107 bytes), else it
is a short private directory under the system's temporary directory; launch.json records it.
A launch through srun keeps each node's own TMPDIR: one directory on shared storage for every
node would let two launchers with the same PID on different nodes share a socket path.

Capture. stdout and stderr of the launcher share one pipe so that lines keep the
order in which the launcher wrote them; each line goes to logs/console.log with the
time the harness read it. Every such stamp (and every tick) also reads the monotonic
clock: a wall clock that moves against it by more than CLOCK_JUMP_S between two stamps
(an NTP step, a VM resumed, someone setting the date) is recorded in launch.json as a
clock jump, so the report can say which latencies span it. For NVRx < 0.6 (no log routing in the launcher) the console
is also split into NVRx's shapes: worker lines `[default<local rank>]:text` go to
logs/train_cycle_cycle<N>.log as `<global rank>: text` (N advances with the launcher's
`joined round N` lines), everything else to logs/launcher.log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, TextIO

import psutil

from harness import HOME
from harness.safe import atomic, safeio
from harness.machine import ports, priority, tmpfs
from harness.vocab.faults import FAULT_KINDS
from harness.vocab.dialect import LABEL_RE, RENDEZVOUS_JOINED_RE, console_prefix, label_prefix, tee_headers
from harness.vocab.dialect import format_iso_utc as utc_iso
from harness.vocab.layout import RunLayout
from harness.machine.nvrx import LAUNCHER_MODULE
from harness.plan.commands import Plan

TAG = "NVRX_QUAL_LAUNCH"
TEMP_ENV = ("TMPDIR", "TMP", "TEMP")  # what Python's tempfile (so torch elastic and NVRx) and most tools honour
# AF_UNIX socket paths hold at most 107 bytes. The longest names created below the temporary
# directory: NVRx's `_ft_launcher<pid>_to_rmon.socket` (34 bytes with a 7-digit PID) and
# multiprocessing's `pymp-<8>/listener-<8>` (31), each after a `/`; 40 bytes leave a margin.
SOCKET_PATH_MAX = 107
SOCKET_NAME_ROOM = 40
TEMP_DIR_MAX = SOCKET_PATH_MAX - SOCKET_NAME_ROOM
CLOCK_JUMP_S = 1.0  # wall minus monotonic changing by more than this between two stamps is a jump
MAX_CLOCK_JUMPS = 100
# The launch ledger: when this names a file, every launch appends one JSON line to it before anything
# starts (record_launch). The test suite sets it to count its launches against its budget
# (fixtures/budget.py, docs/testing.md "The launch budget"); nothing else reads it.
LEDGER_ENV = "NVRX_QUAL_LAUNCH_LEDGER"



class ClockWatch:
    """Wall-clock stamps checked against the monotonic clock. Between two stamps (at most a
    tick apart) the two clocks advance alike unless the wall clock was stepped; slewing by
    NTP moves them apart by microseconds, far below the threshold."""

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
                 threshold_s: float = CLOCK_JUMP_S):
        self._wall, self._mono, self._threshold = wall, mono, threshold_s
        self._lock = threading.Lock()
        self._last_wall = wall()
        self._skew = self._last_wall - mono()
        self.jumps: list[dict] = []  # {"before": iso, "after": iso, "jump_s": seconds}, oldest first

    def stamp(self) -> float:
        """The wall-clock time now; a jump since the previous stamp is recorded."""
        wall, mono = self._wall(), self._mono()
        with self._lock:
            skew = wall - mono
            jump = skew - self._skew
            if abs(jump) > self._threshold and len(self.jumps) < MAX_CLOCK_JUMPS:
                self.jumps.append({"before": utc_iso(self._last_wall), "after": utc_iso(wall),
                                   "jump_s": round(jump, 3)})
            self._skew, self._last_wall = skew, wall
        return wall


@dataclass(frozen=True)
class LaunchResult:
    launcher_exit_code: int | None  # None: the harness had to kill it
    started_at: str
    ended_at: str
    stopped_early: str | None  # why the harness stopped the job, or None
    nvrx_version: str
    leftover_processes_killed: int
    clock_jumps: tuple[dict, ...] = ()  # ClockWatch.jumps: the wall clock stepped during the launch
    # how the launch ended: "exit" (the launcher's own), "deadline", "watch" (a certain verdict),
    # "signal SIGTERM" (the harness was asked to stop), "error <Type>" (a bug or I/O error in the harness)
    ended_by: str = "exit"
    capture_error: str | None = None  # why some output could not be written to logs/ (it was still drained)
    temp_dir: str | None = None  # the launch's own temporary directory (None: a launch through srun kept the nodes')
    temp_dir_left: str | None = None  # why it could not be removed at the end (None: it was)
    # disk-full: the tmpfs mounted on checkpoints/ for the launch (harness.machine.tmpfs), and why its release
    # (copy back onto the disk, unmount) was incomplete (None: released)
    checkpoint_tmpfs: str | None = None
    checkpoint_tmpfs_left: str | None = None
    stopped_at: str | None = None  # when the harness decided to stop the job (None: it did not)

    @property
    def duration_s(self) -> float:
        parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()  # noqa: E731
        return parse(self.ended_at) - parse(self.started_at)


class ConsoleSplitter:
    """Writes NVRx >= 0.6's log shapes from an older launcher's console.

    torch elastic's tee tails each rank's output file and writes whatever `readline`
    returned, so a line the worker wrote in two pieces (an unbuffered print writes the text,
    then the newline) reaches the console as a fragment glued to the next write, e.g.
    `[default0]:...checkpoints[default1]: iteration 16 ...`, and its end arrives later as
    `[default0]:`. Each physical line is therefore cut at every `[default<r>]:` header; a
    piece that the newline does not end is held per rank until its end comes."""

    def __init__(self, layout: RunLayout, gpus_per_node: int, labelled: bool):
        self._layout = layout
        self._gpus = gpus_per_node
        self._labelled = labelled
        self._cycle = 0
        self._launcher = safeio.open_append(layout.launcher_log)
        self._cycle_logs: dict[int, TextIO] = {}
        self._pending: dict[int, str] = {}  # global rank -> start of a line whose end has not come

    def feed(self, line: str) -> None:
        node, body = 0, line
        if self._labelled and (label := LABEL_RE.match(line)) and label.group(1).isdigit():
            node, body = int(label.group(1)), line[label.end():]
        headers = tee_headers(body)
        if not headers or headers[0].start() != 0:
            r = RENDEZVOUS_JOINED_RE.search(body)
            if r and r.group("round") is not None:
                self._cycle = max(self._cycle, int(r.group("round")))
            self._launcher.write(body + "\n")
            return
        for i, header in enumerate(headers):
            rank = node * self._gpus + int(header.group(2))
            text = body[header.end():headers[i + 1].start() if i + 1 < len(headers) else len(body)]
            if i + 1 < len(headers):  # cut off by another rank's write: its end comes later
                self._pending[rank] = self._pending.get(rank, "") + text
            else:
                self._cycle_log().write(f"{label_prefix(rank)}{self._pending.pop(rank, '')}{text}\n")

    def _cycle_log(self) -> TextIO:
        log = self._cycle_logs.get(self._cycle)
        if log is None:
            log = self._cycle_logs[self._cycle] = safeio.open_append(self._layout.cycle_log(self._cycle))
        return log

    def flush(self) -> None:
        self._launcher.flush()
        for log in self._cycle_logs.values():
            log.flush()

    def close(self) -> None:
        for rank, text in sorted(self._pending.items()):  # fragments whose end never came
            if text:
                self._cycle_log().write(f"{label_prefix(rank)}{text}\n")
        self._pending.clear()
        self._launcher.close()
        for log in self._cycle_logs.values():
            log.close()


class _Capture(threading.Thread):
    """Reads the launcher's merged stdout/stderr line by line until EOF.

    A write error under logs/ (disk full, permissions) must not stop the reading: the
    launcher would block on a full pipe until the deadline. The first error is kept in
    `error`, writing stops, and the pipe is drained to the end."""

    def __init__(self, pipe, console: TextIO, splitter: ConsoleSplitter | None,
                 on_line: Callable[[str], None] | None, clock: ClockWatch):
        super().__init__(name="nvrx-qual-capture", daemon=True)
        self._pipe, self._console, self._splitter, self._on_line = pipe, console, splitter, on_line
        self._clock = clock
        self.lock = threading.Lock()
        self.error: str | None = None

    def _failed(self, exc: OSError, what: str) -> None:
        if self.error is None:
            self.error = f"{what}: {exc.strerror or exc}; the launcher's output after that was read but not kept"

    def run(self) -> None:
        for raw in iter(self._pipe.readline, b""):
            now = self._clock.stamp()
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self.lock:
                if self.error is None:
                    try:
                        self._console.write(f"{console_prefix(now)}{line}\n")
                        if self._splitter:
                            self._splitter.feed(line)
                    except OSError as exc:
                        self._failed(exc, "writing logs/ failed")
            if self._on_line:
                try:
                    self._on_line(line)
                except OSError:  # progress output gone (a closed terminal): the capture goes on
                    self._on_line = None

    def flush(self) -> None:
        with self.lock:
            if self.error is not None:
                return
            try:
                self._console.flush()
                if self._splitter:
                    self._splitter.flush()
            except OSError as exc:
                self._failed(exc, "writing logs/ failed")


def tagged_processes(tag_value: str) -> list[psutil.Process]:
    """Every live process whose environment carries this launch's tag."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(TAG) == tag_value:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_tagged(tag_value: str, timeout_s: float = 10.0, settle_s: float = 0.0) -> int:
    """SIGKILL every tagged process (stopped ones included: SIGKILL needs no SIGCONT) and
    wait until each is gone or a zombie (dead; only its reaping parent is left to act).
    `settle_s`: first give them up to that long to end on their own (the processes of a Slurm
    step the harness cancelled, which slurmstepd is stopping after srun returned). Returns how
    many were killed."""
    settle_until = time.monotonic() + settle_s
    while time.monotonic() < settle_until and any(p.pid != os.getpid() and _alive(p)
                                                  for p in tagged_processes(tag_value)):
        time.sleep(0.05)
    killed = 0
    deadline = time.monotonic() + timeout_s
    while True:
        procs = [p for p in tagged_processes(tag_value) if p.pid != os.getpid()]
        if not procs:
            return killed
        for proc in procs:
            try:
                proc.kill()
                killed += 1
            except psutil.NoSuchProcess:
                pass
        while time.monotonic() < deadline and any(_alive(p) for p in procs):
            time.sleep(0.02)
        if time.monotonic() > deadline:
            survivors = [p.pid for p in tagged_processes(tag_value)]
            raise RuntimeError(f"processes {survivors} of launch {tag_value} survived SIGKILL")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The harness got SIGINT, SIGTERM or SIGHUP during a launch; every process of the launch
    has been stopped and launch.json written (`result`: its LaunchResult; None when the signal
    came while a SignalHold was held and no launch ran). A KeyboardInterrupt, so pytest ends
    the session."""

    def __init__(self, signum: int, result: "LaunchResult | None"):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
        self.result = result


class _Signals:
    """SIGINT / SIGTERM / SIGHUP during a launch are recorded, not raised: the launch loop
    stops the job through the normal path, and a second signal cannot interrupt the sweep.
    While a SignalHold holds one, every launch of the process, in whatever thread, shares it
    instead of making its own: one signal stops them all."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, object] = {}
        self._shared = False

    def __enter__(self) -> "_Signals":
        if _HELD is not None:
            self._shared = True
            self.received = _HELD.received  # the same record: a signal to the process is one to every launch
            return self
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, _frame) -> None:
        self.received.append(signum)

    def __exit__(self, *_exc) -> None:
        if self._shared:  # the holder restores the handlers
            return
        if self.received:  # the process is on its way out (Interrupted): more presses change nothing,
            for sig in self._previous:  # not even during interpreter shutdown (which resets Python handlers)
                signal.signal(sig, signal.SIG_IGN)
            return
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None


_HELD: _Signals | None = None  # the stop signals a SignalHold holds for every launch of the process


class SignalHold:
    """While held (a `with` block, or enter() .. release()), SIGINT / SIGTERM / SIGHUP are
    recorded once for every launch of the process, whichever thread runs it (a thread other than
    the main one cannot set a handler of its own): each launch running or started meanwhile
    stops its job on the first one and raises Interrupted, as a launch alone does. Held from the
    main thread (elsewhere, or inside another hold, it holds nothing and the launches keep their
    own). A signal that came while no launch was running to raise it (between two launches, or
    after the last) raises Interrupted at the release, so it is never lost."""

    def __init__(self) -> None:
        self._signals: _Signals | None = None

    def enter(self) -> "SignalHold":
        global _HELD
        if _HELD is None and threading.current_thread() is threading.main_thread():
            self._signals = _Signals().__enter__()
            _HELD = self._signals
        return self

    def release(self, raising: bool = False) -> None:
        """Give the handlers back; Interrupted when a signal came and nothing is `raising` already."""
        global _HELD
        signals, self._signals = self._signals, None
        if signals is None:
            return
        _HELD = None
        signals.__exit__(None, None, None)
        if signals.first is not None and not raising:
            raise Interrupted(signals.first, None)

    def __enter__(self) -> "SignalHold":
        return self.enter()

    def __exit__(self, exc_type, _exc, _tb) -> None:
        self.release(raising=exc_type is not None)


def record_launch(plan: Plan) -> None:
    """One line in the ledger LEDGER_ENV names (nothing when it is unset): the run ID, workload,
    fault, NVRx version, whether the command starts NVRx's launcher, and the pytest test that was
    running (PYTEST_CURRENT_TEST). Appended with one write of an O_APPEND descriptor (whole lines
    from several processes at once), never through a link; a ledger that cannot be written raises
    OSError before anything is launched."""
    env = os.environ  # the harness's own environment, whatever the launch's is
    path = env.get(LEDGER_ENV)
    if not path:
        return
    words = [w for _, c in plan.commands for w in c.argv]
    spec = plan.spec
    doc = {"run_id": spec.run_id, "workload": spec.workload, "fault": spec.fault, "nvrx": plan.nvrx.version,
           "nnodes": spec.nnodes, "ft_launcher": LAUNCHER_MODULE in words or any(
               os.path.basename(w) == "ft_launcher" for w in words),
           "srun": plan.srun is not None, "test": env.get("PYTEST_CURRENT_TEST", "")[:300], "pid": os.getpid(),
           "at": utc_iso(time.time())}
    with safeio.open_append(path) as ledger:
        ledger.write(json.dumps(doc) + "\n")  # one write: short of PIPE_BUF, whole under O_APPEND


def launch_temp_dir(layout: RunLayout) -> Path:
    """Create the launch's temporary directory: `tmp.<random>` in the run directory when its
    path leaves SOCKET_NAME_ROOM bytes for socket names, else a new private `nvrx-qual-<random>`
    under the system's temporary directory (or /tmp when that path is long too). Mode 0700,
    always a new directory (mkdtemp), never an existing one."""
    if len(os.fsencode(layout.root)) + len("/tmp.") + 8 <= TEMP_DIR_MAX:
        return Path(tempfile.mkdtemp(prefix="tmp.", dir=layout.root))
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + len("/nvrx-qual-") + 8 > TEMP_DIR_MAX:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="nvrx-qual-", dir=base))


def remove_temp_dir(path: Path) -> str | None:
    """Remove the launch's temporary directory and everything in it (links are removed, never
    followed); the reason it could not be, or None."""
    failures: list[str] = []

    def failed(_func, where, exc) -> None:
        failures.append(f"{where}: {exc if isinstance(exc, BaseException) else exc[1]}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=failed)
    else:  # onerror's (type, value, traceback), deprecated from 3.12 on
        shutil.rmtree(path, onerror=failed)
    if not failures and not os.path.lexists(path):
        return None
    return f"{len(failures)} entries could not be removed, the first: {failures[0]}" if failures else f"{path} remains"


class _Watchdog:
    """A small process of its own session that outlives the harness: when the harness dies
    without saying goodbye (SIGKILL, a crash of the interpreter), its stdin reaches EOF and it
    kills every process of the launch by tag, then removes the launch's temporary directory.
    SIGKILL cannot be caught; this is what makes the launch die with the harness anyway."""

    def __init__(self, tag_value: str, temp_dir: Path | None, unmount: Path | None = None):
        env = {k: v for k, v in os.environ.items() if k != TAG}  # never one of the processes it kills
        package_root = str(HOME)  # wherever this harness is
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        argv = [sys.executable, "-m", "harness.launch.watchdog", tag_value, *([str(temp_dir)] if temp_dir else []),
                *(["--unmount", str(unmount)] if unmount is not None else [])]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)

    def dismiss(self) -> None:
        try:
            self.proc.stdin.write(b"done\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=10.0)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def launch(plan: Plan, *, deadline_s: float | None, watch: Callable[[], str | None] | None = None,
           tick_s: float = 0.5, term_grace_s: float = 10.0, on_line: Callable[[str], None] | None = None,
           base_env: dict[str, str] | None = None, on_stop: Callable[[], object] | None = None,
           on_signal: Callable[[str], None] | None = None,
           cancel: Callable[[], str | None] | None = None, nice: int = 0) -> LaunchResult:
    """Run the plan's command to its end, the deadline, or the first reason `watch` returns.

    `watch` is called about every `tick_s` seconds while the job runs; returning a string
    stops the job (SIGTERM to the launcher's group, SIGKILL to everything after
    `term_grace_s`) and records that string as the reason; `on_stop` runs first (a
    multi-node run cancels its srun step there; the step id it returns is added to the
    reason). SIGINT, SIGTERM and SIGHUP of the harness stop the job the same way and then
    raise Interrupted; `on_signal` is told at once (within a tick), with one sentence saying what
    is being stopped, since the stop itself can take the whole grace. `cancel`, called every
    tick like `watch`, returns why the harness itself no longer wants the job (the run it was
    launched beside ended by an error): the job is stopped the same way, `ended_by` "cancelled".
    `nice` > 0: every process of the launch, in whatever session it starts, runs at that lower
    CPU priority (harness.machine.priority), from the launcher's start and then from the tick after
    each one's start. A watchdog process kills the launch if the harness itself is killed. Writes
    launch.json on every path.
    """
    layout = plan.layout
    commands = [c for _, c in plan.commands]  # one, or one launcher per node with --local-nodes
    record_launch(plan)
    tag_value = f"{plan.spec.run_id}-{uuid.uuid4().hex[:12]}"
    base = dict(os.environ if base_env is None else base_env)
    safeio.make_dirs(layout.logs, below=layout.root)
    temp_dir = None if plan.srun is not None else launch_temp_dir(layout)
    temp_left: str | None = None
    kind = FAULT_KINDS.get(plan.spec.fault)
    tmpfs_on = layout.checkpoints if kind is not None and kind.fills_filesystem and plan.srun is None else None
    tmpfs_left: str | None = None
    try:
        if tmpfs_on is not None:  # disk-full: a size-limited filesystem of the run's own, released in `finally`
            tmpfs.mount(tmpfs_on)
        console = safeio.open_append(layout.console_log)
    except BaseException:
        if tmpfs_on is not None:
            tmpfs.release(tmpfs_on)
        if temp_dir is not None:
            remove_temp_dir(temp_dir)
        raise
    splitter = (ConsoleSplitter(layout, plan.spec.gpus_per_node, labelled=plan.srun is not None)
                if plan.captures_console else None)
    clock = ClockWatch()
    started = clock.stamp()
    started_mono = time.monotonic()  # the deadline is kept by the monotonic clock, whatever the wall clock does
    stopped_early: str | None = None
    step_cancelled = False  # the harness asked Slurm to cancel the job step (on_stop)
    stopped_at: str | None = None
    ended_by = "exit"
    exit_code: int | None = None
    leftovers = 0
    procs: list[subprocess.Popen] = []
    capture: _Capture | None = None
    with _Signals() as signals:
        watchdog = _Watchdog(tag_value, temp_dir, tmpfs_on)
        # One pipe for every launcher: lines keep the order in which they were written.
        read_fd, write_fd = os.pipe()
        try:
            try:
                for command in commands:
                    env = command.environ(base)
                    env[TAG] = tag_value
                    if temp_dir is not None:
                        env.update((name, str(temp_dir)) for name in TEMP_ENV)
                    procs.append(subprocess.Popen(list(command.argv), cwd=command.cwd, env=env,
                                                  stdin=subprocess.DEVNULL, stdout=write_fd, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
            finally:
                os.close(write_fd)
            lowered = priority.Lowered(nice) if nice > 0 else None
            if lowered is not None:
                lowered.catch_up(p.pid for p in procs)
            capture = _Capture(os.fdopen(read_fd, "rb"), console, splitter, on_line, clock)
            read_fd = -1
            capture.start()
            while True:
                running = [p for p in procs if p.poll() is None]
                if not running:
                    exit_code = _combined([p.returncode for p in procs])
                    break
                try:
                    running[0].wait(timeout=tick_s)
                    continue
                except subprocess.TimeoutExpired:
                    pass
                capture.flush()  # the watcher reads the split logs
                clock.stamp()  # a tick without output still notices a jump
                if lowered is not None:
                    lowered.catch_up(p.pid for p in running)
                if signals.first is not None:
                    name = signal.Signals(signals.first).name
                    stopped_early, ended_by = f"interrupted: the harness received {name}", f"signal {name}"
                    _acknowledge(on_signal, f"{name} received: stopping run {plan.spec.run_id}: SIGTERM to its "
                                            f"launcher{'s' if len(procs) > 1 else ''} now, SIGKILL to whatever is "
                                            f"left after {term_grace_s:g} s, then launch.json")
                elif deadline_s is not None and time.monotonic() - started_mono > deadline_s:
                    stopped_early, ended_by = f"deadline of {deadline_s:g} s passed before the launcher finished", \
                        "deadline"
                elif cancel is not None and (why := cancel()):
                    stopped_early, ended_by = why, "cancelled"
                elif watch is not None:
                    stopped_early = watch()
                    ended_by = "watch" if stopped_early else ended_by
                if stopped_early:
                    stopped_at = utc_iso(clock.stamp())
                    stopped_early += _rendezvous_port_note(plan, tag_value)
                    if on_stop is not None:
                        try:
                            cancelled = on_stop()
                            if isinstance(cancelled, str) and cancelled:  # the job step Slurm was asked to cancel
                                stopped_early += f" (scancel {cancelled})"
                                step_cancelled = True
                        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:  # said in the reason;
                            # the group signals below still stop the local side
                            stopped_early += f" (cancelling the job step failed: {exc})"
                    for p in procs:
                        _signal_group(p.pid, signal.SIGTERM)
                    exit_code = _wait_grace(procs, term_grace_s, signals)
                    break
        except BaseException as exc:
            ended_by = f"error {type(exc).__name__}"
            raise
        finally:
            sweep_error: str | None = None
            try:
                if read_fd >= 0:
                    os.close(read_fd)
                for p in procs:
                    _signal_group(p.pid, signal.SIGKILL)
                for p in procs:
                    if p.poll() is None:
                        p.wait()
                # a cancelled step's processes are Slurm's to stop: the sweep waits for that first
                leftovers = kill_tagged(tag_value, settle_s=term_grace_s if step_cancelled else 0.0)
            except RuntimeError as exc:  # survivors of SIGKILL: said in launch.json, then raised
                sweep_error = str(exc)
                raise
            finally:
                if tmpfs_on is not None:  # every process of the launch is gone: copy checkpoints/ out, unmount
                    tmpfs_left = tmpfs.release(tmpfs_on)
                if temp_dir is not None:  # every process of the launch is gone by now
                    temp_left = remove_temp_dir(temp_dir) if sweep_error is None else \
                        "kept: some processes of the launch survived SIGKILL"
                watchdog.dismiss()
                if capture is not None:
                    capture.join(timeout=10.0)
                    capture.flush()
                for closing in (console, splitter):
                    try:
                        if closing is not None:
                            closing.close()
                    except OSError as exc:
                        if capture is not None:
                            capture._failed(exc, "closing logs/ failed")
                result = LaunchResult(
                    launcher_exit_code=exit_code, started_at=utc_iso(started), ended_at=utc_iso(clock.stamp()),
                    stopped_early=stopped_early, nvrx_version=plan.nvrx.version, leftover_processes_killed=leftovers,
                    clock_jumps=tuple(clock.jumps),
                    ended_by=ended_by if sweep_error is None else f"{ended_by}; {sweep_error}",
                    capture_error=capture.error if capture is not None else None,
                    temp_dir=None if temp_dir is None else str(temp_dir), temp_dir_left=temp_left,
                    checkpoint_tmpfs=None if tmpfs_on is None else f"{tmpfs_on} ({tmpfs.SIZE_BYTES >> 20} MiB)",
                    checkpoint_tmpfs_left=tmpfs_left, stopped_at=stopped_at)
                write_launch_json(layout, result)
    if signals.first is not None:
        raise Interrupted(signals.first, result)
    return result


def _acknowledge(on_signal: Callable[[str], None] | None, text: str) -> None:
    """Tell the caller a stop signal was heard; a terminal that is gone (SIGHUP) never keeps the
    launch from being stopped."""
    if on_signal is None:
        return
    try:
        on_signal(text)
    except (OSError, ValueError):  # a closed or broken output stream
        pass


def _combined(codes: list[int | None]) -> int | None:
    """One launcher: its status. Several: 0 when all are 0, else the worst, a signal counted
    as 128+N the way srun reports a task killed by it."""
    if len(codes) == 1 or None in codes:
        return codes[0] if len(codes) == 1 else None
    return max((128 - c if c < 0 else c) for c in codes)


def _rendezvous_port_note(plan: Plan, tag_value: str) -> str:
    """When a single-node launch is stopped, say so if its rendezvous port is held by a
    process that is not part of the launch: the launcher then waits on a stranger for ever."""
    port = ports.local_port(plan.spec.rdzv_endpoint) if plan.spec.nnodes == 1 and plan.srun is None else None
    if port is None:
        return ""
    try:
        ours = {p.pid for p in tagged_processes(tag_value)}
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid not in ours:
                who = f"pid {conn.pid}" if conn.pid else "another process"
                return (f"; the rendezvous port {port} is held by {who}, not by this launch: address already in use, "
                        "so the launcher waited on a stranger (leave RDZV_ENDPOINT unset, or free the port)")
    except (psutil.Error, OSError):
        return ""
    return ""


def _wait_grace(procs: list[subprocess.Popen], grace_s: float, signals: _Signals) -> int | None:
    """The launchers' combined status if they all exit within the grace; a further signal ends
    the wait (SIGKILL follows), it never interrupts the sweep."""
    seen = len(signals.received)
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        running = [p for p in procs if p.poll() is None]
        if not running:
            return _combined([p.returncode for p in procs])
        try:
            running[0].wait(timeout=min(0.2, max(end - time.monotonic(), 0.01)))
        except subprocess.TimeoutExpired:
            if len(signals.received) > max(seen, 1):
                return None
    return None


def write_launch_json(layout: RunLayout, result: LaunchResult) -> None:
    atomic.write_text(layout.launch_json, json.dumps(asdict(result), indent=2) + "\n")
