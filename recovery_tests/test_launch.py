"""harness.launch.job: the console split of NVRx < 0.6 output, and `launch()` on a stand-in
launcher (launch_entrypoints/fake_launcher.py) that prints, exits, runs forever, and leaves
orphans in sessions of their own the way torch elastic's workers do.

Whether a process survived is checked from /proc directly, not with the module's own
`tagged_processes`, so that a bug there cannot hide itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness.launch import job as launch
from harness.machine import priority
from harness.launch.job import ConsoleSplitter, LaunchResult
from harness.vocab.layout import RunLayout
from harness.machine.nvrx import NvrxTarget
from harness.plan.commands import Command, Plan
from harness.plan.spec import RunSpec
from harness.vocab.topology import ConnectionsPolicy

FAKE_LAUNCHER = Path(__file__).parent / "launch_entrypoints" / "fake_launcher.py"
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
WAIT_S = 30.0  # a deadline no test should reach: only a hang does


# ---------------------------------------------------------------- ConsoleSplitter


def split(tmp_path: Path, lines: list[str], *, gpus: int = 2, labelled: bool = False) -> RunLayout:
    layout = RunLayout.of_dir(tmp_path / "run")
    layout.logs.mkdir(parents=True)
    splitter = ConsoleSplitter(layout, gpus, labelled=labelled)
    for line in lines:
        splitter.feed(line)
    splitter.close()
    return layout


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


JOIN = ("[2026-11-29 17:05:41,733] [INFO] [ft_launcher16897@vm] The node 'localhost_16897_0' has joined round {} of "
        "the rendezvous 'rep_kill-0.4.1_0' as rank 0 in a world of size 1.")
FAILED = ("[2026-11-29 17:05:47,701] [ERROR] [ft_launcher16897@vm] failed (exitcode: -9) local_rank: 1 (pid: 16905) "
          "of binary: /usr/bin/python3")


def test_splitter_sends_worker_lines_to_cycle_logs_and_the_rest_to_launcher_log(tmp_path):
    layout = split(tmp_path, [
        "[2026-11-29 17:05:41,697] [INFO] [ft_launcher16897@vm] [default] starting workers for entrypoint: python3",
        JOIN.format(0),
        "[default0]: loading distributed checkpoint from /ckpt at iteration 10",
        "[default1]:[rank1]: RuntimeError: boom",
        "[default0]:",
        FAILED,
    ])
    assert read_lines(layout.cycle_log(0)) == [
        "0:  loading distributed checkpoint from /ckpt at iteration 10",
        "1: [rank1]: RuntimeError: boom",
        "0: ",
    ]
    assert read_lines(layout.launcher_log) == [
        "[2026-11-29 17:05:41,697] [INFO] [ft_launcher16897@vm] [default] starting workers for entrypoint: python3",
        JOIN.format(0),
        FAILED,
    ]
    assert not layout.cycle_log(1).exists()


def test_splitter_advances_the_cycle_with_each_rendezvous_round(tmp_path):
    layout = split(tmp_path, [
        JOIN.format(0), "[default1]:cycle zero",
        JOIN.format(1), "[default1]:cycle one", "[default0]:also one",
        JOIN.format(2), "[default0]:cycle two",
    ])
    assert read_lines(layout.cycle_log(0)) == ["1: cycle zero"]
    assert read_lines(layout.cycle_log(1)) == ["1: cycle one", "0: also one"]
    assert read_lines(layout.cycle_log(2)) == ["0: cycle two"]
    assert read_lines(layout.launcher_log) == [JOIN.format(n) for n in range(3)]


def test_splitter_puts_worker_lines_before_any_round_in_cycle_0(tmp_path):
    layout = split(tmp_path, ["[default1]:early bird", JOIN.format(0), "[default0]:after the join"])
    assert read_lines(layout.cycle_log(0)) == ["1: early bird", "0: after the join"]


def test_splitter_never_goes_back_to_an_older_cycle(tmp_path):
    layout = split(tmp_path, [JOIN.format(2), JOIN.format(1), "[default0]:still two"])
    assert read_lines(layout.cycle_log(2)) == ["0: still two"]
    assert not layout.cycle_log(1).exists()


def test_splitter_maps_srun_labels_to_global_ranks(tmp_path):
    layout = split(tmp_path, [
        "0: " + JOIN.format(0),
        "1: " + JOIN.format(0),
        "0: [default3]:node 0 local 3",
        "1: [default0]:node 1 local 0",
        "1: [default2]:node 1 local 2",
        "1: " + FAILED,
    ], gpus=4, labelled=True)
    assert read_lines(layout.cycle_log(0)) == ["3: node 0 local 3", "4: node 1 local 0", "6: node 1 local 2"]
    # the node label is dropped from launcher lines too, leaving the launcher's own format
    assert read_lines(layout.launcher_log) == [JOIN.format(0), JOIN.format(0), FAILED]


def test_splitter_reassembles_a_line_the_tee_cut_in_two(tmp_path):
    """Seen for real: an unbuffered print writes text then newline; torch's tee read the
    text alone, glued the next rank's line to it, and sent the newline later."""
    layout = split(tmp_path, [
        JOIN.format(0),
        "[default0]:  [ts] scheduled an async checkpoint save at iteration      15 to /ckpt"
        "[default1]: [ts] iteration       16/      20 | lm loss: 5.1E+00 |",
        "[default1]: [ts] iteration       17/      20 | lm loss: 5.0E+00 |",
        "[default0]:",
        "[default1]: [ts] iteration       18/      20 | lm[default0]:done",  # rank 1 killed mid-line
    ])
    assert read_lines(layout.cycle_log(0)) == [
        "1:  [ts] iteration       16/      20 | lm loss: 5.1E+00 |",
        "1:  [ts] iteration       17/      20 | lm loss: 5.0E+00 |",
        "0:   [ts] scheduled an async checkpoint save at iteration      15 to /ckpt",
        "0: done",
        "1:  [ts] iteration       18/      20 | lm",  # kept at the end, as a process cut off mid-line leaves it
    ]
    assert read_lines(layout.launcher_log) == [JOIN.format(0)]


def test_splitter_keeps_a_leading_number_of_an_unlabelled_launcher_line(tmp_path):
    layout = split(tmp_path, ["1: not an srun label here"], labelled=False)
    assert read_lines(layout.launcher_log) == ["1: not an srun label here"]


# ---------------------------------------------------------------- launch() on a fake launcher


def fake_plan(tmp_path: Path, *args: str, nvrx: str = "0.7.0", env: tuple[tuple[str, str], ...] = ()) -> Plan:
    """A real Plan whose one command is the fake launcher (no srun, single node)."""
    spec = RunSpec(workload="reference", work_dir=tmp_path / "work", run_id="launch-test", gpus_per_node=2)
    command = Command(argv=(sys.executable, str(FAKE_LAUNCHER), *args), cwd=tmp_path, env=env)
    return Plan(spec=spec, nvrx=NvrxTarget(nvrx), launcher=command, srun=None,
                connections=ConnectionsPolicy(None, "not applicable"))


def read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def await_record(path: Path) -> dict:
    deadline = time.monotonic() + WAIT_S
    while (doc := read_record(path)) is None:
        assert time.monotonic() < deadline, f"the fake launcher never wrote {path}"
        time.sleep(0.02)  # poll interval of the wait, not a fixed delay
    return doc


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (a killed orphan waits for init to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pids_with_tag(tag: str) -> list[int]:
    """Live processes whose environment holds NVRX_QUAL_LAUNCH=<tag>, read from /proc."""
    needle = f"{launch.TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry)):
            found.append(int(entry))
    return found


@pytest.fixture
def record(tmp_path: Path):
    """Where the fake launcher records its pid, tag and orphans; anything recorded there
    that still carries the tag is killed at teardown, whatever the test's outcome."""
    path = tmp_path / "record.json"
    yield path
    doc = read_record(path)
    if doc and doc["tag"]:
        for pid in pids_with_tag(doc["tag"]):  # each one leads a session of its own
            try:
                pgid = os.getpgid(pid)
                if pgid != os.getpgrp():
                    os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def launch_json(plan: Plan) -> dict:
    return json.loads(plan.layout.launch_json.read_text())


@pytest.mark.e2e
def test_exit_status_and_every_line_with_a_utc_stamp(tmp_path, record):
    lines = [("out", "first line"), ("err", "a line on stderr"), ("out", "  indented ünïcode"), ("err", ""),
             ("out", "[default0]:looks like a worker")]
    plan = fake_plan(tmp_path, *[f"--line={s}:{t}" for s, t in lines], "--record", str(record), "--exit", "3",
                     env=(("QUAL_GREETING", "hi"),))
    seen = []
    result = launch.launch(plan, deadline_s=None, tick_s=0.05, on_line=seen.append,
                           base_env={"PATH": os.environ["PATH"], "MARK": "from-base"})

    assert result.launcher_exit_code == 3 and result.stopped_early is None
    assert launch_json(plan) == {
        "launcher_exit_code": 3, "started_at": result.started_at, "ended_at": result.ended_at,
        "stopped_early": None, "nvrx_version": "0.7.0", "leftover_processes_killed": 0, "clock_jumps": [],
        "ended_by": "exit", "capture_error": None, "temp_dir": result.temp_dir, "temp_dir_left": None,
        "checkpoint_tmpfs": None, "checkpoint_tmpfs_left": None, "stopped_at": None}
    assert re.fullmatch(STAMP, result.started_at) and re.fullmatch(STAMP, result.ended_at)
    assert result.duration_s >= 0

    console = read_lines(plan.layout.console_log)
    parsed = [re.fullmatch(rf"({STAMP}) out (.*)", line) for line in console]
    assert all(parsed), console
    assert [m.group(2) for m in parsed] == [t for _, t in lines]  # stdout and stderr, in the order written
    stamps = [m.group(1) for m in parsed]
    assert stamps == sorted(stamps) and result.started_at <= stamps[0] and stamps[-1] <= result.ended_at
    assert seen == [t for _, t in lines]

    # the environment: base_env, the command's own variables, and the launch tag
    doc = read_record(record)
    temp = result.temp_dir
    assert doc["env"] == {"MARK": "from-base", "QUAL_GREETING": "hi", "HOME": None, "TMPDIR": temp, "TMP": temp,
                          "TEMP": temp}
    assert doc["tag"].startswith("launch-test-")
    # NVRx >= 0.6 writes its own logs: the harness does not split the console
    assert not plan.layout.launcher_log.exists() and not plan.layout.cycle_log(0).exists()


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["exit", "deadline"])
def test_the_launch_has_a_temporary_directory_of_its_own_removed_when_it_ends(tmp_path, record, how):
    """TMPDIR, TMP and TEMP of the launch name a new directory in the run directory; the
    sockets, pymp-* and torchelastic_errors_* left there (an NVRx socket bound at full length)
    go with it when the launch ends, normally or stopped."""
    plan = fake_plan(tmp_path, "--temp", "--orphans", "--record", str(record), *(["--forever"] if how != "exit" else []))
    result = launch.launch(plan, deadline_s=2.0 if how == "deadline" else None, tick_s=0.05)
    doc = read_record(record)
    temp = Path(doc["tempdir"])
    assert doc["env"]["TMPDIR"] == doc["env"]["TMP"] == doc["env"]["TEMP"] == str(temp) == result.temp_dir
    if len(str(plan.layout.root)) + len("/tmp.XXXXXXXX") <= launch.TEMP_DIR_MAX:
        assert temp.parent == plan.layout.root and temp.name.startswith("tmp."), temp
    else:  # pytest's tmp_path is too long for socket names below it
        assert temp.parent == Path(tempfile.gettempdir()) and temp.name.startswith("nvrx-qual-"), temp
    assert not temp.exists() and result.temp_dir_left is None
    assert sorted(p.name for p in plan.layout.root.iterdir()) == ["launch.json", "logs"]
    assert launch_json(plan)["temp_dir"] == str(temp)


def test_the_temporary_directory_leaves_room_for_socket_names(tmp_path, monkeypatch):
    """In the run directory when the path is short enough for NVRx's socket names below it;
    otherwise a short private directory under the system's temporary directory (or /tmp)."""
    short_base = Path(tempfile.mkdtemp(prefix="nq-", dir="/tmp"))  # tmp_path itself is too long
    try:
        short = RunLayout.of_dir(short_base / "runs" / "r1")
        short.root.mkdir(parents=True)
        made = launch.launch_temp_dir(short)
        assert made.parent == short.root and made.name.startswith("tmp.") and (made.stat().st_mode & 0o777) == 0o700
        deep = RunLayout.of_dir(tmp_path / ("d" * 60) / "runs" / "run")
        deep.root.mkdir(parents=True)
        monkeypatch.setattr(launch.tempfile, "tempdir", str(short_base))
        private = launch.launch_temp_dir(deep)
        assert private.parent == short_base and private.name.startswith("nvrx-qual-")
        (tmp_path / ("t" * 80)).mkdir()
        monkeypatch.setattr(launch.tempfile, "tempdir", str(tmp_path / ("t" * 80)))
        fallback = launch.launch_temp_dir(deep)
        assert fallback.parent == Path("/tmp") and fallback.name.startswith("nvrx-qual-")
        for made_dir in (made, private, fallback):
            longest = f"{made_dir}/_ft_launcher4194304_to_rmon.socket"  # NVRx's longest name, a 7-digit PID
            assert len(longest.encode()) <= launch.SOCKET_PATH_MAX, longest
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(longest)
            assert launch.remove_temp_dir(made_dir) is None and not made_dir.exists()
    finally:
        shutil.rmtree(short_base, ignore_errors=True)


@pytest.mark.e2e
def test_lines_still_in_the_pipe_at_exit_are_captured_whole(tmp_path, monkeypatch):
    # The launcher exits with 500 lines unread in the pipe, and the capture is held back on
    # the first of them until launch() has swept the tagged processes: the console may be
    # closed (and launch.json written) only after the capture has drained the pipe.
    swept = threading.Event()
    real_kill_tagged = launch.kill_tagged

    def kill_tagged(tag: str, *args, **kwargs) -> int:
        killed = real_kill_tagged(tag, *args, **kwargs)
        swept.set()
        return killed

    def on_line(line: str) -> None:
        if not seen:
            assert swept.wait(WAIT_S), "launch() never swept the tagged processes"
        seen.append(line)

    seen: list[str] = []
    monkeypatch.setattr(launch, "kill_tagged", kill_tagged)
    plan = fake_plan(tmp_path, "--burst", "500")
    assert launch.launch(plan, deadline_s=WAIT_S, tick_s=0.05, on_line=on_line).launcher_exit_code == 0
    console = read_lines(plan.layout.console_log)
    assert len(console) == len(seen) == 500
    assert console[-1].endswith(" out burst 000499 " + "x" * 86)


@pytest.mark.e2e
def test_console_of_an_old_launcher_is_split_into_nvrx_log_shapes(tmp_path, record):
    lines = ["[INFO] starting workers", JOIN.format(0), "[default1]:training", FAILED, JOIN.format(1),
             "[default0]:resumed"]
    plan = fake_plan(tmp_path, *[f"--line=out:{t}" for t in lines], nvrx="0.4.1")
    assert plan.captures_console
    result = launch.launch(plan, deadline_s=None, tick_s=0.05)
    assert result.launcher_exit_code == 0
    assert read_lines(plan.layout.launcher_log) == ["[INFO] starting workers", JOIN.format(0), FAILED, JOIN.format(1)]
    assert read_lines(plan.layout.cycle_log(0)) == ["1: training"]
    assert read_lines(plan.layout.cycle_log(1)) == ["0: resumed"]
    assert len(read_lines(plan.layout.console_log)) == len(lines)


@pytest.mark.e2e
def test_orphans_in_their_own_sessions_are_killed_after_a_normal_exit(tmp_path, record):
    plan = fake_plan(tmp_path, "--orphans", "--record", str(record))
    result = launch.launch(plan, deadline_s=None, tick_s=0.05)

    doc = read_record(record)
    assert doc is not None and len(doc["orphans"]) == 2
    assert result.launcher_exit_code == 0 and result.stopped_early is None
    assert result.leftover_processes_killed >= 2
    assert pids_with_tag(doc["tag"]) == []
    assert not any(_alive(pid) for pid in doc["orphans"])  # the SIGSTOPped one included
    assert launch_json(plan)["leftover_processes_killed"] == result.leftover_processes_killed
    # the sleeping orphan wrote into the inherited pipe; its line was captured
    assert any(line.endswith(" out orphan sleeping") for line in read_lines(plan.layout.console_log))


def cpu_priority(pid: int) -> tuple[int, int | None]:
    """(nice value, its session group's nice value or None where the kernel has no autogroup)."""
    try:  # None also where the file reads empty: the process is in the kernel's default group
        group = priority.autogroup_nice(Path(f"/proc/{pid}/autogroup").read_text())
    except FileNotFoundError:
        group = None
    return os.getpriority(os.PRIO_PROCESS, pid), group


def test_an_autogroup_line_is_read_and_an_empty_one_means_no_group():
    assert priority.autogroup_nice("/autogroup-5700 nice 3\n") == 3
    assert priority.autogroup_nice("") is None  # what a process in the kernel's default group reads
    with pytest.raises(ValueError, match="not an autogroup line"):
        priority.autogroup_nice("/autogroup-5700 3\n")


@pytest.mark.parametrize("leader_reads, follower_written", [
    ("", False),  # the default group, not the session's to set: the session is done, its other processes are not tried again
    ("garbled\n", True),  # not understood: the session's next process tries again
    ("/autogroup-8 nice 0\n", False),  # set through the leader, once for the session
])
def test_a_session_is_lowered_once_and_never_where_its_group_does_not_apply(
        tmp_path, leader_reads, follower_written):
    """Lowered against a stand-in /proc for the autogroup files (the nice values are real): a shell
    leading a session of its own, with a child in it. The leader's file is met first."""
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (children := psutil.Process(shell.pid).children()):
            assert time.monotonic() < deadline, "the shell never started its child"
            time.sleep(0.02)  # poll interval of the wait, not a fixed delay
        (child,) = children
        for pid, text in ((shell.pid, leader_reads), (child.pid, "/autogroup-8 nice 0\n")):
            (tmp_path / str(pid)).mkdir()
            (tmp_path / str(pid) / "autogroup").write_text(text)
        nice = max(os.getpriority(os.PRIO_PROCESS, shell.pid) + 2, 5)
        if nice > 19:
            pytest.skip("this session already runs at the lowest priorities: nothing lower to set")

        priority.Lowered(nice, proc=tmp_path).catch_up([shell.pid])

        assert os.getpriority(os.PRIO_PROCESS, shell.pid) == nice
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == nice
        follower = (tmp_path / str(child.pid) / "autogroup").read_text()
        assert follower.startswith(str(nice)) is follower_written, follower
        if leader_reads.startswith("/autogroup"):
            assert (tmp_path / str(shell.pid) / "autogroup").read_text().startswith(str(nice))
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


@pytest.mark.e2e
def test_a_launch_at_a_lower_priority_lowers_its_processes_in_every_session(tmp_path, record):
    """nice > 0 (the twin beside a fault run): the launcher and the orphans it starts in sessions
    of their own, as torch elastic starts workers, each get the nice value, and each session's
    group (autogroup) too, which is what the scheduler weighs between sessions. The harness's own
    priority is left as it was."""
    plan = fake_plan(tmp_path, "--orphans", "--forever", "--record", str(record))
    ours = cpu_priority(os.getpid())
    target = max(ours[0] + 3, 7)  # lower than what the launch inherits, whatever the session's own nice value
    if target > 19:
        pytest.skip(f"this session already runs at nice {ours[0]}: nothing lower to set")
    seen: dict[int, tuple[int, int | None]] = {}
    sessions: set[int] = set()

    def watch() -> str | None:
        doc = read_record(record)
        if doc is None:  # the orphans are not started yet
            return None
        pids = (doc["pid"], *doc["orphans"])
        sessions.update(os.getsid(pid) for pid in pids)
        seen.update((pid, cpu_priority(pid)) for pid in pids)
        return "all lowered" if all(nice == target and group in (target, None) for nice, group in seen.values()) \
            else None

    result = launch.launch(plan, deadline_s=10, tick_s=0.05, watch=watch, nice=target)
    assert result.stopped_early == "all lowered", seen
    assert len(seen) == 3 and len(sessions) == 3  # the launcher's session and one of each orphan's
    assert cpu_priority(os.getpid()) == ours


@pytest.mark.e2e
def test_deadline_stops_a_launcher_that_runs_forever(tmp_path, record):
    plan = fake_plan(tmp_path, "--forever", "--record", str(record))
    deadline_s, grace_s = 1.0, 5.0
    result = launch.launch(plan, deadline_s=deadline_s, tick_s=0.05, term_grace_s=grace_s)

    assert result.stopped_early is not None and "deadline of 1 s" in result.stopped_early
    assert result.launcher_exit_code == -signal.SIGTERM  # it honoured the SIGTERM
    assert deadline_s <= result.duration_s < deadline_s + grace_s
    assert launch_json(plan)["stopped_early"] == result.stopped_early
    assert pids_with_tag(read_record(record)["tag"]) == []


@pytest.mark.e2e
def test_a_launcher_ignoring_sigterm_is_killed_after_the_grace(tmp_path, record):
    plan = fake_plan(tmp_path, "--ignore-term", "--forever", "--record", str(record))
    result = launch.launch(plan, deadline_s=0.5, tick_s=0.05, term_grace_s=1.0)

    assert result.launcher_exit_code is None  # the harness had to SIGKILL it
    assert "deadline" in result.stopped_early
    assert result.duration_s >= 1.5
    assert launch_json(plan)["launcher_exit_code"] is None
    assert pids_with_tag(read_record(record)["tag"]) == []


@pytest.mark.e2e
def test_watch_reason_stops_the_job_after_on_stop(tmp_path, record):
    plan = fake_plan(tmp_path, "--forever", "--record", str(record))
    calls, stops = [], []

    def watch() -> str | None:
        calls.append(time.monotonic())
        if len(calls) == 1:  # the launcher is up (and recorded) before the reason comes
            await_record(record)
        return "the replacement started from random" if len(calls) == 2 else None

    def on_stop() -> None:  # runs before the SIGTERM: the launcher is still alive
        stops.append(_alive(read_record(record)["pid"]))

    result = launch.launch(plan, deadline_s=WAIT_S, tick_s=0.05, watch=watch, on_stop=on_stop)

    assert result.stopped_early == "the replacement started from random"
    assert len(calls) == 2 and stops == [True]
    assert result.launcher_exit_code == -signal.SIGTERM
    assert launch_json(plan)["stopped_early"] == "the replacement started from random"
    assert pids_with_tag(read_record(record)["tag"]) == []


@pytest.mark.e2e
def test_a_failing_on_stop_is_recorded_and_the_job_still_stops(tmp_path, record):
    plan = fake_plan(tmp_path, "--forever", "--record", str(record))

    def on_stop() -> None:
        raise RuntimeError("scancel: Invalid job id specified")

    result = launch.launch(plan, deadline_s=WAIT_S, tick_s=0.05, watch=lambda: await_record(record) and "doomed",
                           on_stop=on_stop)
    assert result.stopped_early == "doomed (cancelling the job step failed: scancel: Invalid job id specified)"
    assert result.launcher_exit_code == -signal.SIGTERM
    # when it decided to stop: the launcher's lines after it answer the stop (criteria.before_the_stop)
    assert result.started_at <= result.stopped_at <= result.ended_at
    assert launch_json(plan)["stopped_at"] == result.stopped_at
    assert pids_with_tag(read_record(record)["tag"]) == []


@pytest.mark.e2e
def test_an_exception_in_watch_propagates_and_leaves_nothing_alive(tmp_path, record):
    plan = fake_plan(tmp_path, "--orphans", "--forever", "--record", str(record))

    def watch() -> str | None:
        if read_record(record) is None:  # orphans not started yet
            return None
        raise RuntimeError("the watcher broke")

    with pytest.raises(RuntimeError, match="the watcher broke"):
        launch.launch(plan, deadline_s=WAIT_S, tick_s=0.05, watch=watch)

    doc = read_record(record)
    assert pids_with_tag(doc["tag"]) == []
    assert not _alive(doc["pid"]) and not any(_alive(pid) for pid in doc["orphans"])
    written = launch_json(plan)
    assert written["launcher_exit_code"] is None and written["stopped_early"] is None
    assert written["leftover_processes_killed"] >= 2


def test_launch_result_duration():
    result = LaunchResult(0, "2026-11-29T16:32:00.000Z", "2026-11-29T16:32:09.789Z", None, "0.7.0", 0)
    assert result.duration_s == pytest.approx(9.789)


class SteppableClocks:
    """A wall and a monotonic clock that advance together, unless the wall clock is stepped."""

    def __init__(self) -> None:
        self.mono_now, self.wall_offset = 100.0, 1_795_969_920.0

    def mono(self) -> float:
        return self.mono_now

    def wall(self) -> float:
        return self.mono_now + self.wall_offset


def test_clock_watch_records_a_step_of_the_wall_clock_not_a_slew():
    clocks = SteppableClocks()
    watch = launch.ClockWatch(wall=clocks.wall, mono=clocks.mono)
    for _ in range(4000):  # an NTP slew of 0.5 ms per half-second tick: 2 s in all, never a jump
        clocks.mono_now += 0.5
        clocks.wall_offset += 0.0005
        watch.stamp()
    assert watch.jumps == []
    clocks.mono_now += 0.5
    before = clocks.wall()
    clocks.wall_offset += 54.0  # someone set the date
    clocks.mono_now += 0.5
    stamped = watch.stamp()
    assert stamped == clocks.wall()
    [jump] = watch.jumps
    assert jump["jump_s"] == pytest.approx(54.0, abs=0.01)
    assert jump["before"] < jump["after"] and jump["before"] == launch.utc_iso(before - 0.5)
    clocks.mono_now += 0.5
    clocks.wall_offset -= 3.0  # and back
    watch.stamp()
    assert [j["jump_s"] for j in watch.jumps] == [pytest.approx(54.0, abs=0.01), pytest.approx(-3.0, abs=0.01)]


def _tagged_child(tag: str, code: str) -> subprocess.Popen:
    env = {**os.environ, launch.TAG: tag}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while not launch.tagged_processes(tag):  # its environment is readable once it runs
        assert time.monotonic() < deadline, "the tagged child never showed up"
        time.sleep(0.01)
    return child


def test_the_sweep_of_a_cancelled_slurm_step_lets_its_processes_end_before_killing_them():
    """A step the harness cancelled with scancel is stopped by slurmstepd after srun returned:
    the sweep gives its processes settle_s to end on their own and counts none it did not kill
    (CI, 2026-12-05: one process of a cancelled step was still ending when the sweep came)."""
    ending = "import time; time.sleep(0.4)"  # a process on its way out, as slurmstepd stops it
    tag = f"settle-{os.getpid()}-{time.monotonic_ns()}"
    child = _tagged_child(tag, ending)
    assert launch.kill_tagged(tag, settle_s=WAIT_S) == 0
    assert child.wait(WAIT_S) == 0  # it ended on its own
    # without settle_s the same process is killed and counted: the harness's own launches
    tag2 = tag + "-now"
    child = _tagged_child(tag2, ending)
    assert launch.kill_tagged(tag2) == 1
    assert child.wait(WAIT_S) == -signal.SIGKILL
    # settle_s is a bound, not a promise: one that does not end is killed when it runs out
    tag3 = tag + "-stuck"
    child = _tagged_child(tag3, "import time; time.sleep(60)")
    started = time.monotonic()
    assert launch.kill_tagged(tag3, settle_s=0.3) == 1
    assert child.wait(WAIT_S) == -signal.SIGKILL and time.monotonic() - started < 5
