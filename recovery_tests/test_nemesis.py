"""The once-only fault injector: pure parts in-process, the rest with real wrapper processes.

The e2e tests run `python -m harness.nemesis -- nemesis_entrypoints/worker.py` and drive the
checkpoint tracker from here, as Megatron's rank 0 would from another process. "The poller
has looked at the tracker" is observed, not slept for: the idle worker makes no read
syscalls, so /proc/<pid>/io's syscr counts the poller's reads.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from harness.vocab.layout import MARKER_NAME, TRACKER_NAME
from harness.nemesis.injector import (
    DEFAULT_POLL_INTERVAL_S,
    EXIT_FAULT_NEVER_HAPPENED,
    EXIT_USAGE,
    POLLER_THREAD_NAME,
    InjectionRecord,
    MarkerError,
    NemesisError,
    TrackerError,
    claim_marker,
    parse_command_line,
    parse_iteration,
    read_baseline,
    read_tracker,
    utc_now_iso,
    watch_tracker,
)

WORKER = Path(__file__).resolve().parent / "nemesis_entrypoints" / "worker.py"
DEADLINE_S = 20.0
POLL_S = 0.02  # the wrappers' poll interval in these tests: fast, still a real poll loop
MARKER_FIELDS = [
    "fault", "signal", "rank", "local_rank", "cycle", "iteration", "baseline_iteration",
    "injected_at", "host", "pid", "tracker", "fault_at", "fault_index", "committed_iteration", "poisoned",
]  # fmt: skip
T = TypeVar("T")


# ---------------------------------------------------------------- helpers


def await_true(check: Callable[[], T], what: str, timeout: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.005)


def write_tracker(path: Path, text: str) -> None:
    """Megatron's way: truncate and write in place, not atomic."""
    with open(path, "w") as f:
        f.write(text)


def read_syscalls(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscr:"):
                return int(line.split()[1])
    raise AssertionError("no syscr in /proc/<pid>/io")


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@dataclass
class Wrapper:
    """One launched `python -m harness.nemesis ... -- worker.py` process."""

    proc: subprocess.Popen
    control: Path
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def ready(self) -> dict:
        """The worker's report of how it was started (it is running once this exists)."""
        record = self.control / "record.json"
        await_true(lambda: record.exists() or self.proc.poll() is not None, f"worker {self.pid} to start")
        assert record.exists(), f"wrapper exited {self.proc.returncode} before the worker started:\n{self.stderr()}"
        return json.loads(record.read_text())

    def await_polls(self, count: int) -> None:
        """Wait until the poller has read the tracker `count` more times."""
        start = read_syscalls(self.pid)
        await_true(lambda: read_syscalls(self.pid) >= start + count, f"{count} tracker reads by {self.pid}")

    def await_exit(self) -> int:
        return await_true(lambda: self.proc.poll() is not None, f"{self.pid} to exit") and self.proc.returncode

    def finish(self) -> int:
        """Let the worker return normally; the wrapper's exit status."""
        (self.control / "exit").touch()
        return self.await_exit()

    def await_stopped(self) -> None:
        def stopped() -> bool:
            pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            if pid == 0:
                return False
            if os.WIFSTOPPED(status):
                assert os.WSTOPSIG(status) == signal.SIGSTOP
                return True
            self.proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, tell Popen
            pytest.fail(f"wrapper ended ({self.proc.returncode}) instead of stopping:\n{self.stderr()}")

        await_true(stopped, f"{self.pid} to be stopped")


def clean_env(**values: str) -> dict[str, str]:
    """This environment without any launcher / NVRX_* variable, plus `values`."""
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("NVRX_")}
    env.update(values)
    return env


def rank_env(rank: int, run_dir: Path, **values: str) -> dict[str, str]:
    launcher = dict(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="8", TORCHELASTIC_RESTART_COUNT="0",
        NVRX_RUN_DIR=str(run_dir), NVRX_POLL_INTERVAL=str(POLL_S),
    )  # fmt: skip
    return clean_env(**{**launcher, **values})


@contextmanager
def launched(
    tmp_path: Path,
    env: dict[str, str],
    nemesis_args: tuple[str, ...] = (),
    worker_args: tuple[str, ...] = (),
    name: str = "w",
    entrypoint: tuple[str, ...] = (str(WORKER),),
    cwd: Path | None = None,
) -> Iterator[Wrapper]:
    """Start one wrapper in its own session; its group is killed on every way out."""
    control = tmp_path / f"control-{name}"
    control.mkdir()
    argv = [sys.executable, "-m", "harness.nemesis", *nemesis_args, "--", *entrypoint,
            "--control", str(control), *worker_args]  # fmt: skip
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with open(out, "wb") as out_f, open(err, "wb") as err_f:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f, env=env,
            cwd=cwd or tmp_path, start_new_session=True,
        )  # fmt: skip
    try:
        yield Wrapper(proc, control, out, err)
    finally:
        if proc.returncode is None:  # once reaped, its group no longer exists
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@contextmanager
def launched_many(tmp_path: Path, env: dict[str, str], count: int) -> Iterator[list[Wrapper]]:
    with ExitStack() as stack:
        yield [stack.enter_context(launched(tmp_path, env, name=f"w{i}")) for i in range(count)]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    (path / "checkpoints").mkdir(parents=True)
    return path


def sample_record(**changes) -> InjectionRecord:
    fields = dict(
        fault="kill", signal="SIGKILL", rank=1, local_rank=1, cycle=0, iteration=10, baseline_iteration=0,
        injected_at="2026-11-29T16:32:09.789Z", host="node", pid=123, tracker="/ckpt/" + TRACKER_NAME,
    )  # fmt: skip
    fields.update(changes)
    return InjectionRecord(**fields)


needs_proc_io = pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/<pid>/io")


# ---------------------------------------------------------------- tracker reading


def test_baseline_of_an_absent_tracker_is_zero(tmp_path: Path) -> None:
    assert read_baseline(tmp_path / TRACKER_NAME) == 0
    assert read_baseline(tmp_path / "no-such-dir" / TRACKER_NAME) == 0


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("15", 15), ("15\n", 15), (" 120 \n", 120)])
def test_baseline_is_the_trackers_integer(tmp_path: Path, text: str, value: int) -> None:
    tracker = tmp_path / TRACKER_NAME
    tracker.write_text(text)
    assert read_baseline(tracker) == value


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "is empty"), (" \n", "is empty"), ("release", "not an iteration"), ("-3", "not an iteration"),
     ("1.5", "not an iteration"), ("12abc", "not an iteration"), ("\u0661\u0662", "not an iteration")],
)  # fmt: skip
def test_baseline_refuses_a_tracker_without_an_integer(tmp_path: Path, text: str, problem: str) -> None:
    tracker = tmp_path / TRACKER_NAME
    tracker.write_text(text)
    with pytest.raises(TrackerError, match=re.escape(str(tracker)) + ".*" + problem):
        read_baseline(tracker)


def test_baseline_refuses_an_unreadable_tracker(tmp_path: Path) -> None:
    tracker = tmp_path / TRACKER_NAME
    tracker.mkdir()  # root reads through chmod 000; a directory is unreadable for anyone
    with pytest.raises(TrackerError, match=re.escape(str(tracker)) + " is unreadable"):
        read_baseline(tracker)


def test_a_failed_poll_is_no_value(tmp_path: Path) -> None:
    tracker = tmp_path / TRACKER_NAME
    assert read_tracker(tracker) is None
    for text in ("", "1", "garbage"):
        tracker.write_text(text)
        assert read_tracker(tracker) == parse_iteration(text)
    assert parse_iteration("") is None and parse_iteration("garbage") is None
    tracker.unlink()
    tracker.mkdir()
    assert read_tracker(tracker) is None


def test_watch_ignores_failed_reads_and_old_iterations_until_a_newer_one() -> None:
    reads = iter([None, 5, None, 3, 5, 10, 15])
    calls = []

    def fake_read(path: Path) -> int | None:
        calls.append(path)
        return next(reads)

    assert watch_tracker(Path("t"), baseline=5, interval=0, stop=threading.Event(), read=fake_read) == 10
    assert len(calls) == 6


def test_watch_returns_nothing_once_stopped() -> None:
    stop = threading.Event()
    calls = []

    def read_then_stop(path: Path) -> int | None:
        calls.append(path)
        if len(calls) == 3:
            stop.set()
        return None

    assert watch_tracker(Path("t"), baseline=0, interval=0, stop=stop, read=read_then_stop) is None
    assert len(calls) == 3
    assert watch_tracker(Path("t"), baseline=0, interval=0, stop=stop, read=read_then_stop) is None
    assert len(calls) == 3


# ---------------------------------------------------------------- the marker


def test_record_json_has_the_contract_fields() -> None:
    record = sample_record()
    assert list(json.loads(record.to_json())) == MARKER_FIELDS
    assert json.loads(record.to_json())["iteration"] == 10
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", utc_now_iso())


def test_claim_is_exclusive_and_durable_json(tmp_path: Path) -> None:
    marker = tmp_path / MARKER_NAME
    assert claim_marker(marker, sample_record()) is True
    assert json.loads(marker.read_text()) == json.loads(sample_record().to_json())
    assert stat.S_IMODE(marker.stat().st_mode) == 0o644 & ~_umask()
    assert claim_marker(marker, sample_record(pid=456, iteration=20)) is False
    assert json.loads(marker.read_text())["pid"] == 123


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("target_exists", [False, True])
def test_claim_refuses_a_symlink_and_writes_nothing_through_it(tmp_path: Path, target_exists: bool) -> None:
    target = tmp_path / "elsewhere.json"
    if target_exists:
        target.write_text("precious")
    marker = tmp_path / MARKER_NAME
    marker.symlink_to(target)
    with pytest.raises(MarkerError, match="symlink"):
        claim_marker(marker, sample_record())
    assert (target.read_text() == "precious") if target_exists else not target.exists()
    assert marker.is_symlink()


def test_claim_in_a_missing_run_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(MarkerError, match="cannot create marker"):
        claim_marker(tmp_path / "gone" / MARKER_NAME, sample_record())


# ---------------------------------------------------------------- options and environment


def test_options_default_to_the_seed_environment(tmp_path: Path) -> None:
    env = {"NVRX_WORK_DIR": str(tmp_path), "NVRX_RUN_ID": "r1", "RANK": "1", "WORLD_SIZE": "2",
           "LOCAL_RANK": "1", "TORCHELASTIC_RESTART_COUNT": "2"}  # fmt: skip
    config, entry = parse_command_line(["--", "train.py", "--lr", "1"], env)
    assert (config.fault, config.fault_rank, config.rank, config.local_rank, config.cycle) == ("kill", 1, 1, 1, 2)
    assert config.selected and config.poll_interval == DEFAULT_POLL_INTERVAL_S
    assert config.layout.root == tmp_path / "runs" / "r1"
    assert config.layout.tracker == tmp_path / "runs" / "r1" / "checkpoints" / TRACKER_NAME
    assert (entry.target, entry.args, entry.is_module) == ("train.py", ("--lr", "1"), False)


def test_flags_win_over_the_environment(tmp_path: Path) -> None:
    env = {"NVRX_DEMO_FAULT": "kill", "NVRX_FAULT_RANK": "1", "NVRX_RUN_DIR": "/env/run",
           "NVRX_CHECKPOINT_DIR": "/env/ckpt", "NVRX_POLL_INTERVAL": "0.5", "RANK": "0", "WORLD_SIZE": "2"}  # fmt: skip
    argv = ["--fault", "hang", "--fault-rank", "0", "--run-dir", str(tmp_path), "--checkpoint-dir", "/flag/ckpt",
            "--poll-interval", "0.01", "--", "-m", "pkg.train", "x"]  # fmt: skip
    config, entry = parse_command_line(argv, env)
    assert (config.fault, config.fault_rank, config.poll_interval) == ("hang", 0, 0.01)
    assert config.layout.root == tmp_path and config.layout.checkpoints == Path("/flag/ckpt")
    assert (entry.target, entry.args, entry.is_module) == ("pkg.train", ("x",), True)
    config, _ = parse_command_line(["--", "t.py"], env)
    assert (config.fault, config.fault_rank, config.selected) == ("kill", 1, False)
    assert config.layout.checkpoints == Path("/env/ckpt") and config.poll_interval == 0.5


def test_fault_none_needs_no_run_dir() -> None:
    config, _ = parse_command_line(["--fault", "none", "--", "t.py"], {"RANK": "1"})
    assert config.layout is None and not config.selected


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--", "t.py"], {"RANK": "1"}, "NVRX_RUN_DIR"),
        (["--", "t.py"], {"NVRX_WORK_DIR": "/w", "NVRX_RUN_ID": "../x", "RANK": "1"}, "NVRX_RUN_ID='../x'"),
        (["--run-dir", "/r"], {}, "no entrypoint"),
        (["--run-dir", "/r", "--"], {}, "no entrypoint after"),
        (["--run-dir", "/r", "--", "-m"], {}, "needs a module"),
        (["--", "t.py"], {"NVRX_DEMO_FAULT": "crash", "NVRX_RUN_DIR": "/r"}, "NVRX_DEMO_FAULT='crash'"),
        (["--", "t.py"], {"NVRX_FAULT_RANK": "one", "NVRX_RUN_DIR": "/r"}, "NVRX_FAULT_RANK='one'"),
        (["--", "t.py"], {"NVRX_POLL_INTERVAL": "0", "NVRX_RUN_DIR": "/r"}, "NVRX_POLL_INTERVAL"),
        (["--", "t.py"], {"RANK": "x", "NVRX_RUN_DIR": "/r"}, "RANK='x'"),
        (["--", "t.py"], {"RANK": "0", "WORLD_SIZE": "1", "NVRX_RUN_DIR": "/r"}, "fault rank 1 does not exist"),
        (["--", "t.py"], {"NVRX_RUN_DIR": "/r"}, "world of 1"),  # no launcher: a single process
    ],
)
def test_bad_options_are_refused_with_the_name_to_fix(argv: list[str], env: dict, message: str) -> None:
    with pytest.raises(NemesisError, match=re.escape(message)):
        parse_command_line(argv, env)


@pytest.mark.parametrize("argv", [["--poll-interval", "-1", "--", "t.py"], ["--fault", "boom", "--", "t.py"]])
def test_bad_flags_exit_like_argparse(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_command_line(argv, {})
    assert info.value.code == 2


# ---------------------------------------------------------------- real processes: injection


@pytest.mark.e2e
@needs_proc_io
def test_kill_waits_for_a_checkpoint_beyond_the_existing_one(tmp_path: Path, run_dir: Path) -> None:
    checkpoints = tmp_path / "earlier-run-ckpts"  # NVRX_CHECKPOINT_DIR with checkpoints of an earlier run
    checkpoints.mkdir()
    tracker = checkpoints / TRACKER_NAME
    tracker.write_text("5")
    env = rank_env(1, run_dir, NVRX_CHECKPOINT_DIR=str(checkpoints), NVRX_DEMO_FAULT="kill")
    with launched(tmp_path, env) as wrapper:
        assert POLLER_THREAD_NAME in wrapper.ready()["threads"]
        wrapper.await_polls(3)  # it has seen iteration 5 == baseline, and held back
        assert wrapper.proc.poll() is None and not (run_dir / MARKER_NAME).exists()

        before = utc_now_iso()
        write_tracker(tracker, "10")
        assert wrapper.await_exit() == -signal.SIGKILL

    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert marker == {
        "fault": "kill", "signal": "SIGKILL", "rank": 1, "local_rank": 1, "cycle": 0, "iteration": 10,
        "baseline_iteration": 5, "injected_at": marker["injected_at"], "host": socket.gethostname(),
        "pid": wrapper.pid, "tracker": str(tracker), "fault_at": "after-commit", "fault_index": 1,
        "committed_iteration": None, "poisoned": None,
    }  # fmt: skip
    assert marker["injected_at"] >= before
    assert "[nemesis] rank 1 injecting SIGKILL after checkpoint iteration 10 (baseline 5)" in wrapper.stderr()
    assert wrapper.stdout() == "entrypoint started\n"


@pytest.mark.e2e
def test_hang_stops_a_worker_that_advances_its_own_tracker(tmp_path: Path, run_dir: Path) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    env = clean_env(RANK="1", WORLD_SIZE="2")
    args = ("--fault", "hang", "--run-dir", str(run_dir), "--poll-interval", str(POLL_S))
    with launched(tmp_path, env, args, ("--advance", str(tracker), "--every", "0.2", "--step", "5")) as wrapper:
        wrapper.await_stopped()
        assert proc_state(wrapper.pid) == "T"
        marker = json.loads((run_dir / MARKER_NAME).read_text())
        assert (marker["fault"], marker["signal"], marker["pid"]) == ("hang", "SIGSTOP", wrapper.pid)
        assert (marker["local_rank"], marker["cycle"], marker["baseline_iteration"]) == (None, None, 0)
        assert marker["iteration"] >= 5 and marker["iteration"] % 5 == 0
        assert read_tracker(tracker) >= marker["iteration"]
        assert f"injecting SIGSTOP after checkpoint iteration {marker['iteration']} (baseline 0)" in wrapper.stderr()


@pytest.mark.e2e
@needs_proc_io
def test_eight_workers_claiming_at_once_inject_exactly_once(tmp_path: Path, run_dir: Path) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    tracker.write_text("0")
    env = rank_env(1, run_dir)
    with launched_many(tmp_path, env, 8) as wrappers:
        for wrapper in wrappers:
            wrapper.ready()
            wrapper.await_polls(1)
        write_tracker(tracker, "5")

        def settled() -> bool:
            dead = [w for w in wrappers if w.proc.poll() is not None]
            quiet = [w for w in wrappers if "already claimed" in w.stderr()]
            return len(dead) + len(quiet) == len(wrappers)

        await_true(settled, "every worker to inject or to back off")
        killed = [w for w in wrappers if w.proc.returncode is not None]
        assert [w.proc.returncode for w in killed] == [-signal.SIGKILL]
        assert json.loads((run_dir / MARKER_NAME).read_text())["pid"] == killed[0].pid
        survivors = [w for w in wrappers if w is not killed[0]]
        assert [w.finish() for w in survivors] == [0] * 7  # the marker counts as "the fault happened"
        assert all(" injecting SIG" not in w.stderr() for w in survivors)


@pytest.mark.e2e
def test_a_replacement_worker_finds_the_marker_and_stays_quiet(tmp_path: Path, run_dir: Path) -> None:
    marker = run_dir / MARKER_NAME
    marker.write_text(sample_record().to_json())
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    env = rank_env(1, run_dir, TORCHELASTIC_RESTART_COUNT="1")
    with launched(tmp_path, env, worker_args=("--advance", str(tracker), "--every", "0.05")) as wrapper:
        assert wrapper.ready()["threads"] == ["MainThread"]  # no poller at all
        await_true(lambda: (read_tracker(tracker) or 0) >= 15, "the worker to save three checkpoints")
        assert wrapper.finish() == 0
    assert "exists (fault injected in an earlier cycle); not injecting again" in wrapper.stderr()
    assert marker.read_text() == sample_record().to_json()


@pytest.mark.e2e
@pytest.mark.parametrize("target_exists", [False, True])
def test_a_symlinked_marker_at_startup_is_refused(tmp_path: Path, run_dir: Path, target_exists: bool) -> None:
    target = tmp_path / "elsewhere.json"
    if target_exists:
        target.write_text("precious")
    (run_dir / MARKER_NAME).symlink_to(target)
    with launched(tmp_path, rank_env(1, run_dir)) as wrapper:
        assert wrapper.await_exit() == EXIT_USAGE
    assert wrapper.stdout() == ""
    assert f"marker path {run_dir / MARKER_NAME} exists but is not a regular file" in wrapper.stderr()
    assert (target.read_text() == "precious") if target_exists else not target.exists()


@pytest.mark.e2e
def test_a_marker_symlinked_while_running_is_refused_and_reported(tmp_path: Path, run_dir: Path) -> None:
    target = tmp_path / "elsewhere.json"
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    with launched(tmp_path, rank_env(1, run_dir)) as wrapper:
        wrapper.ready()
        (run_dir / MARKER_NAME).symlink_to(target)
        write_tracker(tracker, "5")
        await_true(lambda: "not injecting" in wrapper.stderr(), "the claim to be refused")
        assert wrapper.proc.poll() is None and not target.exists()
        assert wrapper.finish() == EXIT_FAULT_NEVER_HAPPENED
    assert "requested fault kill on rank 1 never happened: claiming the marker failed" in wrapper.stderr()
    assert "symlink" in wrapper.stderr() and not target.exists()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("setup", "problem"),
    [("", "is empty"), ("release", "holds 'release', not an iteration number"),
     ("x7", "holds 'x7', not an iteration number"), (None, "is unreadable")],
)  # fmt: skip
def test_a_bad_tracker_at_startup_stops_before_the_entrypoint(
    tmp_path: Path, run_dir: Path, setup: str | None, problem: str
) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    if setup is None:
        tracker.mkdir()
    else:
        tracker.write_text(setup)
    with launched(tmp_path, rank_env(1, run_dir)) as wrapper:
        assert wrapper.await_exit() == EXIT_USAGE
    assert wrapper.stdout() == ""
    assert f"checkpoint tracker {tracker} {problem}" in wrapper.stderr()
    assert not (run_dir / MARKER_NAME).exists()


@pytest.mark.e2e
@needs_proc_io
def test_a_tracker_briefly_unreadable_while_polling_still_triggers(tmp_path: Path, run_dir: Path) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    with launched(tmp_path, rank_env(1, run_dir)) as wrapper:
        wrapper.ready()
        for garbage in ("", "1x", "9" * 5000):  # mid-write, garbled, too long: all just "not now"
            write_tracker(tracker, garbage)
            wrapper.await_polls(3)
            assert wrapper.proc.poll() is None, wrapper.stderr()
        write_tracker(tracker, "7")
        assert wrapper.await_exit() == -signal.SIGKILL
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert (marker["iteration"], marker["baseline_iteration"]) == (7, 0)


@pytest.mark.e2e
@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_a_fault_that_never_happened_fails_the_selected_rank(tmp_path: Path, run_dir: Path, fault: str) -> None:
    with launched(tmp_path, rank_env(1, run_dir, NVRX_DEMO_FAULT=fault), worker_args=("--exit-now",)) as wrapper:
        assert wrapper.await_exit() == EXIT_FAULT_NEVER_HAPPENED
    assert wrapper.stdout() == "entrypoint started\n"
    assert f"requested fault {fault} on rank 1 never happened: no checkpoint newer than" in wrapper.stderr()
    assert not (run_dir / MARKER_NAME).exists()


@pytest.mark.e2e
@needs_proc_io
def test_a_checkpoint_at_the_final_iteration_never_triggers(tmp_path: Path, run_dir: Path) -> None:
    """Save interval >= train iterations: the only checkpoint is the final one, so the fault
    must not race the normal exit; the run is reported as a fault that never happened."""
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    with launched(tmp_path, rank_env(1, run_dir), worker_args=("--train-iters", "20")) as wrapper:
        wrapper.ready()
        write_tracker(tracker, "20")
        await_true(lambda: "not injecting" in wrapper.stderr(), "the poller to see the final checkpoint")
        assert wrapper.proc.poll() is None and not (run_dir / MARKER_NAME).exists()
        assert wrapper.finish() == EXIT_FAULT_NEVER_HAPPENED
    assert "never happened: the first checkpoint newer than the baseline 0 was the final one " \
           "(iteration 20, --train-iters 20)" in wrapper.stderr()


@pytest.mark.e2e
@needs_proc_io
def test_a_checkpoint_before_the_final_iteration_triggers(tmp_path: Path, run_dir: Path) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    with launched(tmp_path, rank_env(1, run_dir), worker_args=("--train-iters=20",)) as wrapper:
        wrapper.ready()
        write_tracker(tracker, "15")
        assert wrapper.await_exit() == -signal.SIGKILL
    assert json.loads((run_dir / MARKER_NAME).read_text())["iteration"] == 15


@pytest.mark.e2e
def test_the_selected_ranks_own_failure_passes_through(tmp_path: Path, run_dir: Path) -> None:
    with launched(tmp_path, rank_env(1, run_dir), worker_args=("--exit-now", "--exit-code", "5")) as wrapper:
        assert wrapper.await_exit() == 5
    assert "never happened" not in wrapper.stderr()


# ---------------------------------------------------------------- real processes: pass-through


def said_only_its_identity(stderr: str) -> bool:
    """Without a fault to inject, the nemesis says one thing: which launcher the worker imports
    (run.json's contract is judged against it); nothing else of its own reaches the output."""
    return all(re.match(r"\[nemesis\] rank \d+ launcher identity: ", line) for line in stderr.splitlines())


@pytest.mark.e2e
@pytest.mark.parametrize(("script", "cwd"), [(str(WORKER), None), (WORKER.name, WORKER.parent)])
def test_without_a_fault_the_entrypoint_runs_as_if_started_directly(
    tmp_path: Path, script: str, cwd: Path | None
) -> None:
    args = ("--exit-now", "--exit-code", "7")
    env = clean_env(NVRX_DEMO_FAULT="none", RANK="1")
    with launched(tmp_path, env, worker_args=args, entrypoint=(script,), cwd=cwd) as wrapper:
        assert wrapper.await_exit() == 7
        record = wrapper.ready()
    assert record["argv"] == [script, "--control", str(wrapper.control), *args]
    assert (record["name"], record["file"], record["path0"]) == ("__main__", script, str(WORKER.parent))
    assert record["threads"] == ["MainThread"]
    assert said_only_its_identity(wrapper.stderr())


@pytest.mark.e2e
def test_a_spawned_child_of_the_entrypoint_imports_it_as_mp_main_without_a_poller(
    tmp_path: Path, run_dir: Path
) -> None:
    """Megatron's persistent checkpoint worker is such a child: it must neither rerun
    training nor carry a second injector."""
    with launched(tmp_path, rank_env(1, run_dir), worker_args=("--spawn",)) as wrapper:
        assert POLLER_THREAD_NAME in wrapper.ready()["threads"]
        spawned = json.loads((wrapper.control / "spawned.json").read_text())
        assert spawned["name"] == "__mp_main__" and spawned["threads"] == ["MainThread"]
        assert spawned["argv"][0] == str(WORKER)
        write_tracker(run_dir / "checkpoints" / TRACKER_NAME, "5")
        assert wrapper.await_exit() == -signal.SIGKILL


@pytest.mark.e2e
def test_other_ranks_only_run_the_entrypoint(tmp_path: Path, run_dir: Path) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    with launched(tmp_path, rank_env(0, run_dir), worker_args=("--advance", str(tracker), "--every", "0.05")) as wrapper:
        assert wrapper.ready()["threads"] == ["MainThread"]
        await_true(lambda: (read_tracker(tracker) or 0) >= 15, "the worker to save three checkpoints")
        assert wrapper.finish() == 0
    assert said_only_its_identity(wrapper.stderr()) and not (run_dir / MARKER_NAME).exists()


@pytest.mark.e2e
def test_a_module_entrypoint_runs_like_python_dash_m(tmp_path: Path) -> None:
    env = clean_env(NVRX_DEMO_FAULT="none")
    with launched(tmp_path, env, entrypoint=("-m", WORKER.stem), worker_args=("--exit-now", "--exit-code", "4"),
                  cwd=WORKER.parent) as wrapper:  # fmt: skip
        assert wrapper.await_exit() == 4
        record = wrapper.ready()
    assert record["name"] == "__main__" and record["argv"][0] == str(WORKER)
    assert record["argv"][1:] == ["--control", str(wrapper.control), "--exit-now", "--exit-code", "4"]
