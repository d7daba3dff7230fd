"""history: run directory -> Timeline. Real launcher samples, Megatron's line formats,
rank prefixes, single logs cut into starts, junk, cut-off lines, chunk boundaries, and the
incremental reader of a growing run directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.vocab import events as ev
from harness.read.history import HistoryReader, LogParser, RunDirError, read_history
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

SAMPLES = Path(__file__).parent / "data" / "samples"


def _run_with_launcher_log(tmp_path: Path, sample: str, name: str) -> Path:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    shutil.copy(SAMPLES / sample / name, run / "logs" / "launcher.log")
    if (SAMPLES / sample / "cycle_infos").is_dir():
        shutil.copytree(SAMPLES / sample / "cycle_infos", run / "cycle_infos")
    return run


def _parse(text: str, *, split_starts: bool = True) -> LogParser:
    parser = LogParser("x.log", split_starts=split_starts)
    data = text.encode()
    parser.feed(data)
    return parser


# ---------------------------------------------------------------- real launcher output


def test_sample_070_kill_cycles_failure_and_success(tmp_path):
    tl = read_history(_run_with_launcher_log(tmp_path, "nvrx-0.7.0-kill", "launcher.log"))
    assert tl.launcher_dialect == "0.7.0"
    detected = [e for e in tl.of(ev.ProfilingEvent) if e.name == "failure_detected"]
    assert [(e.cycle, e.subject_cycle) for e in detected] == [(1, 0)]  # numbered with the *next* cycle
    assert tl.utc(detected[0]) == pytest.approx(1795972158.543)  # 2026-11-29 17:09:18.543 UTC
    started = {e.cycle: tl.utc(e) for e in tl.of(ev.ProfilingEvent) if e.name == "worker_start_completed"}
    assert started == {0: pytest.approx(1795972154.035), 1: pytest.approx(1795972160.881)}
    failed = tl.of(ev.WorkerFailed)
    assert [(f.cycle, f.local_rank, f.exitcode, f.pid) for f in failed] == [(0, 1, -9, 17412)]
    assert tl.utc(failed[0]) == pytest.approx(1795972158.543)  # glog stamp, year from the lines before it
    group = tl.of(ev.WorkerGroupFailed)
    assert [(g.cycle, g.state, g.attempts_left, g.max_restarts) for g in group] == [(0, "UNHEALTHY", 2, 2)]
    assert len(tl.of(ev.LauncherSucceeded)) == 1
    assert tl.of(ev.LauncherExit) == []  # --ft-nvrx-logfile loses the final "Agent exits" line
    assert [(c.cycle, c.ts, c.ended) for c in tl.cycle_infos] == [
        (0, pytest.approx(1795972154.009478), pytest.approx(1795972158.545036)),
        (1, pytest.approx(1795972160.872980), pytest.approx(1795972170.002574)),
    ]
    # local prefix and "Time: ... UTC" on the same line give the node's offset
    assert (tl.utc_offset_s, tl.offset_how) == (0, "derived from log lines that carry both local and UTC time")


def test_sample_041_kill_rounds_and_outcome(tmp_path):
    tl = read_history(_run_with_launcher_log(tmp_path, "nvrx-0.4.1-kill", "launcher-console.log"))
    assert tl.launcher_dialect == "0.4.1"
    assert [(j.round, j.src.line) for j in tl.of(ev.RendezvousJoined)] == [(0, 22), (1, 115)]
    assert [(f.cycle, f.local_rank, f.exitcode) for f in tl.of(ev.WorkerFailed)] == [(0, 1, -9)]
    assert [(g.cycle, g.state) for g in tl.of(ev.WorkerGroupFailed)] == [(0, "UNHEALTHY")]
    assert [e.code for e in tl.of(ev.LauncherExit)] == [0]
    assert tl.of(ev.RankTimeout) == []  # "Section(s) ['step'] were still open" is no timeout


def test_sample_041_hang_names_every_timed_out_rank(tmp_path):
    tl = read_history(_run_with_launcher_log(tmp_path, "nvrx-0.4.1-hang", "launcher-console.log"))
    timeouts = tl.of(ev.RankTimeout)
    assert [(t.kind, t.section, t.rank, t.elapsed, t.timeout, t.cycle) for t in timeouts] == [
        ("section", "step", 0, 14.35, 10.0, 0), ("section", "step", 1, 14.57, 10.0, 0)]
    assert [e.rank for e in tl.of(ev.FtTimeoutElapsed)] == [0, 1]
    assert [(g.state, g.cycle) for g in tl.of(ev.WorkerGroupFailed)] == [("FAILED", 0)]  # FAILED, not UNHEALTHY
    assert str(timeouts[1].src).startswith("logs/launcher.log:")


def test_samples_are_the_captures_unmodified():
    """The launcher samples are real output: SHA256SUMS was taken when they were captured,
    and an edit that would make a parser's life easier shows up here."""
    import hashlib

    listed = {}
    for line in (SAMPLES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.removeprefix("./")] = digest
    present = {str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*")
               if p.is_file() and not p.is_symlink() and p.name not in ("README.md", "SHA256SUMS")}
    assert set(listed) == present
    for name, digest in listed.items():
        assert hashlib.sha256((SAMPLES / name).read_bytes()).hexdigest() == digest, name


def test_070_timeout_lines_name_local_rank_and_node():
    text = ("2026-11-29 17:16:04,303 [WARNING] [vm] [workload:?(0) infra:?(?)] rank_monitor_server.py:522 [Cycle 0] "
            "Section 'step' has been open for 14.46 seconds. Timeout is 10.00 seconds.\n"
            "2026-11-29 17:16:04,319 [WARNING] [node7] [workload:5(1) infra:?(?)] rank_monitor_server.py:540 [Cycle 2] "
            "Was out of section for 200.00 seconds. Timeout is 180.00 seconds.\n"
            "2026-11-29 17:16:04,320 [WARNING] [vm] [workload:?(1) infra:?(?)] rank_monitor_server.py:498 [Cycle 0] "
            "Did not get subsequent heartbeat. Waited 60.00 seconds.\n")
    timeouts = _parse(text).launcher
    assert [(t.kind, t.rank, t.local_rank, t.node, t.cycle) for t in timeouts] == [
        ("section", None, 0, "vm", 0), ("out_of_section", 5, 1, "node7", 2), ("heartbeat", None, 1, "vm", 0)]


def test_launcher_outcomes_of_both_generations():
    text = (
        "[2026-11-29 17:05:47,701] [INFO] [ft_launcher1@vm] 0/2 restart attempts left. Exiting...\n"
        "[2026-11-29 17:05:48,000] [ERROR] [ft_launcher1@vm] Some rank(s) exited with non-zero exit code: "
        "{1: ProcessFailure()}. Agent's exit code = 1\n"
        "2026-11-29 17:09:18,544 [ERROR] [vm] [workload:?(?) infra:?(?)] launcher.py:620 [default] Progress tracker "
        "detected no progress across restarts. No more restarts will be attempted.\n"
        "2026-11-29 17:09:18,545 [ERROR] [vm] [workload:?(?) infra:?(?)] launcher.py:3742 NVRx decided the job must "
        "not be restarted (no_progress): Progress tracker detected no progress across restarts.. Agent's exit code = 93\n"
        "2026-11-29 17:09:18,546 [INFO] [vm] [workload:?(?) infra:?(?)] progress_tracker.py:215 Training cycle #0 made "
        "progress: 0 → 10 (10 iterations)\n")
    kinds = [(type(e).__name__, getattr(e, "code", None)) for e in _parse(text).launcher]
    assert kinds == [("RestartsExhausted", None), ("LauncherExit", 1), ("LauncherFailed", None), ("NoProgressStop", None),
                     ("LauncherExit", 93), ("NoProgressStop", None)]


# ---------------------------------------------------------------- Megatron's lines


MEGATRON_START = """\
0: ------------------------ arguments ------------------------
0:   finetune ........................................ False
1: [W1129 16:32:01.000000000 socket.cpp:200] [c10d] hostname not resolved
0:   no_load_optim ................................... True
0:   a_very_long_argument_name_that_is_longer_than_48_chars  17
0:   train_iters ..................................... 100
0: -------------------- end of arguments ---------------------
0: FT: initialized. Timeouts=RankMonitorConfig(...)
0:  loading distributed checkpoint from /ckpt at iteration 10
0: INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type dp_reshardable
0: INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value 0.0001 for learning rate
0:   successfully loaded checkpoint from /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ] at iteration 10
0: [after model, optimizer, and learning rate scheduler are built] datetime: 2026-11-29 17:32:08 
1:  [2026-11-29 17:32:09.310000] iteration       11/     100 | consumed samples:          352 | elapsed time per iteration (ms): 200.0 | learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 9.400000E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |
0: [2026-11-29 17:32:10.000000] saving checkpoint at iteration      15 to /ckpt in torch_dist format
0:   [2026-11-29 17:32:10.005000] scheduled an async checkpoint save at iteration      15 to /ckpt
1:  [2026-11-29 17:32:10.110000] iteration       16/     100 | consumed samples:          512 | lm loss: 9.300000E+00 | number of skipped iterations:   2 | number of nan iterations:   0 |
0:   [2026-11-29 17:32:10.150000] successfully saved checkpoint from iteration      15 to /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ]
0:   [2026-11-29 17:32:11.150000] successfully saved checkpoint at iteration      20 to /ckpt [ t 1/1, p 1/1 ]
1:  [2026-11-29 17:32:12.110000] iteration       20/     100 | consumed samples:          640 | lm loss: 9.200000E+00 | number of skipped iterations:   0 | number of nan iterations:   0 |
0: WARNING:megatron.core.dist_checkpointing.serialization:Overwriting old incomplete / corrupted checkpoint...
1: [nemesis] rank 1 injecting SIGKILL after checkpoint iteration 20 (baseline 0)
0: [after training is done] datetime: 2026-11-29 17:32:13 
"""


def test_megatron_start_parsed_into_typed_events():
    parser = _parse(MEGATRON_START, split_starts=False)
    ((events, first, last, bad, saves),) = parser.snapshot_starts()
    names = [type(e).__name__ for e in events]
    assert names == ["ArgumentsPrinted", "WorkersInitialized", "LoadStarted", "OptimizerLoaded", "SchedulerValueLoaded",
                     "CheckpointLoaded", "ModelBuilt", "SaveStarted", "SaveScheduled", "SaveCommitted", "SaveCommitted",
                     "SaveOverwrite", "NemesisInjected", "TrainingDone"]
    args = events[0]
    assert args.get("no_load_optim") == "True" and args.flag("finetune") is False
    assert args.integer("train_iters") == 100
    assert args.get("a_very_long_argument_name_that_is_longer_than_48_chars") == "17"
    assert str(args.src_of("train_iters")) == "x.log:6:   train_iters ..................................... 100"
    assert [(e.iteration, e.path) for e in events if isinstance(e, ev.SaveCommitted)] == [(15, "/ckpt"), (20, "/ckpt")]
    assert events[5].iteration == 10 and events[12].target_rank == 1 and events[12].iteration == 20
    assert (first.iteration, first.train_iters, first.consumed_samples, first.lm_loss, first.rank) == (11, 100, 352, 9.4, 1)
    assert first.ts == pytest.approx(1795973529.31)  # local stamp as written, converted later with the offset
    assert events[6].ts == pytest.approx(1795973528.0)  # whole seconds of the model-built datetime
    assert (last.iteration, last.src.line) == (20, 20)
    assert [(b.iteration, b.skipped) for b in bad] == [(16, 2)]
    assert saves == 2  # committed saves counted


def test_single_log_is_cut_into_starts():
    start = "\n".join(line[3:] for line in MEGATRON_START.splitlines()[:13]) + "\n"  # without rank prefixes
    random = ("------------------------ arguments ------------------------\n  train_iters ... 100\n"
              "-------------------- end of arguments ---------------------\nFT: initialized. Timeouts=...\n"
              "WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt\n"
              "    will not load any checkpoints and will start from random\n")
    no_table = "FT: initialized. Timeouts=...\n loading distributed checkpoint from /ckpt at iteration 5\n"
    parser = _parse(random + start + no_table)
    starts = parser.snapshot_starts()
    assert [[type(e).__name__ for e in s[0]][:3] for s in starts] == [
        ["ArgumentsPrinted", "WorkersInitialized", "StartedFromRandom"],
        ["ArgumentsPrinted", "WorkersInitialized", "LoadStarted"],
        ["WorkersInitialized", "LoadStarted"]]


def test_prefix_variants_rank_padding_tee_and_console():
    lines = (
        " 3:  [2026-11-29 17:32:09.310000] iteration       11/     100 | consumed samples: 1 |\n"
        "[default1]:[2026-11-29 17:32:09.510000] iteration       12/     100 | consumed samples: 2 |\n"
        "2026-11-29T16:32:09.789Z out [default0]: loading distributed checkpoint from /c at iteration 3\n"
    )
    parser = _parse(lines, split_starts=False)
    ((events, first, last, _, _),) = parser.snapshot_starts()
    assert (first.rank, first.iteration, last.rank, last.iteration) == (3, 11, 1, 12)
    assert [(type(e).__name__, e.rank) for e in events] == [("LoadStarted", 0)]
    assert parser.offset_pairs == []  # the load line carries no local stamp to pair with


def test_junk_and_cut_off_last_line(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    good = MEGATRON_START.encode()
    junk = b"0: \xff\xfe\x00\x00 binary \x1b[0m\r\n" + bytes(range(256)) + b"\n"
    cut = b"1:  [2026-11-29 17:32:13.110000] iteration       21/     100 | consumed sam"
    (run / "logs" / "train_cycle_cycle0.log").write_bytes(good + junk + cut)
    reader = HistoryReader(run)
    live = reader.poll()  # a live run: the cut line may still be completed
    assert live.starts[0].last_iteration.iteration == 20
    final = reader.poll(final=True)  # the writer is gone: what was written counts
    assert final.starts[0].last_iteration.iteration == 21
    assert final.starts[0].first(ev.TrainingDone) is not None


def test_monster_line_without_newline_is_cut_not_buffered(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    blob = b"\x00" * (3 << 20)  # 3 MiB of junk without a line break, then real lines
    (run / "logs" / "train_cycle_cycle0.log").write_bytes(blob + b"\n" + MEGATRON_START.encode())
    tl = HistoryReader(run, chunk_size=1 << 20).poll(final=True)
    assert tl.starts[0].last_iteration.iteration == 20


# ---------------------------------------------------------------- whole run directories


def test_chunk_boundaries_do_not_change_the_timeline(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(fault="hang", nvrx="0.4.1", world=16, fault_rank=5, train_iters=60))
    whole = read_history(built.run_dir)
    tiny = HistoryReader(built.run_dir, chunk_size=977).poll(final=True)  # cuts lines and the arguments table
    assert _shape(tiny) == _shape(whole)
    assert whole.starts[1].first_iteration.iteration == 11 and whole.starts[1].last_iteration.iteration == 60
    assert whole.starts[1].arguments.integer("train_iters") == 60


def _shape(tl: ev.Timeline) -> list:
    return [(type(e).__name__, str(e.src), tl.utc(e)) for e in tl.events]


def test_incremental_polls_read_each_byte_once_and_match_a_full_read(tmp_path):
    built = rundirs.build(tmp_path / "done", Scenario(train_iters=40))
    live = tmp_path / "live"
    files = sorted(p for p in built.run_dir.rglob("*") if p.is_file() and not p.is_symlink())
    for p in files:  # small files whole, the logs grow in pieces cut mid-line
        (live / p.relative_to(built.run_dir)).parent.mkdir(parents=True, exist_ok=True)
    logs = [p for p in files if p.suffix == ".log"]
    for p in files:
        if p not in logs:
            shutil.copy(p, live / p.relative_to(built.run_dir))
    reader = HistoryReader(live)
    data = {p: p.read_bytes() for p in logs}
    done = {p: 0 for p in logs}
    step = 0
    while any(done[p] < len(data[p]) for p in logs):
        for p in logs:
            piece = data[p][done[p]:done[p] + 1500 + 37 * step]
            with open(live / p.relative_to(built.run_dir), "ab") as f:
                f.write(piece)
            done[p] += len(piece)
        reader.poll()
        step += 1
    final = reader.poll(final=True)
    assert step > 5
    assert _shape(final) == _shape(read_history(built.run_dir))
    assert sum(s.bytes_read for s in final.sources) == sum(len(d) for d in data.values())


def test_checkpoint_state_commit_markers_tracker_and_optimizer_keys(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(uncommitted=(5,)))
    tl = read_history(built.run_dir)
    ck = tl.checkpoints
    assert (ck.path, ck.how, ck.exists, ck.tracker) == ("checkpoints", "run.json spec.checkpoint_dir", True, "30")
    assert [(c.iteration, c.committed) for c in ck.iterations][:3] == [(5, False), (10, True), (15, True)]
    k = ck.get(10)  # the marker's and the loaded iteration: inspected with PyTorch's DCP reader
    assert (k.optimizer_keys, k.total_keys) == (2, 6)  # exp_avg and exp_avg_sq; not param
    assert (k.optimizer_record.key, k.optimizer_record.steps) == ("optimizer.distributed.dp_group_idx_0.optimizer",
                                                                  (10.0, 10.0))
    assert k.sample_key.startswith("optimizer.distributed.") and "exp_avg" in k.sample_key
    assert ck.get(20).optimizer_keys is None and ck.get(20).inspect_note == "not needed by any check"
    off = HistoryReader(built.run_dir, inspect_checkpoints=False).poll(final=True).checkpoints.get(10)
    assert off.optimizer_keys is None and off.inspect_note == "checkpoint inspection turned off"


def test_checkpoint_dir_found_from_the_arguments_table_when_run_json_is_gone(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(run_json=False))
    moved = tmp_path / "elsewhere"
    shutil.move(built.run_dir / "checkpoints", moved)
    tl = read_history(built.run_dir)
    assert tl.checkpoints.exists is False  # the table names the old path, which is gone
    shutil.move(moved, built.run_dir / "checkpoints")
    assert read_history(built.run_dir).checkpoints.how == "<run>/checkpoints"


def test_marker_variants(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(checkpoints=False))
    marker = built.run_dir / "fault_injected.json"
    record = json.loads(marker.read_text())
    marker.write_text(json.dumps(record) + "\n" + json.dumps({**record, "iteration": 15}) + "\n")  # JSON lines
    tl = read_history(built.run_dir)
    assert [(i.iteration, i.src.line) for i in tl.injections] == [(10, 1), (15, 2)]
    marker.write_text("")  # claimed but never written: still an injection
    tl = read_history(built.run_dir)
    assert len(tl.injections) == 1 and tl.injections[0].iteration is None
    assert any("fault_injected.json holds no JSON record" in n for n in tl.notes)


def test_offset_from_console_capture_without_run_json(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(nvrx="0.4.1", run_json=False, console_log=True, utc_offset_s=-18000))
    tl = read_history(built.run_dir)
    assert (tl.utc_offset_s, tl.offset_how) == (-18000, "derived from log lines that carry both local and UTC time")


def test_sources_and_roles(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(console_log=True))
    tl = read_history(built.run_dir)
    roles = {s.rel: s.roles for s in tl.sources}
    assert roles == {"logs/launcher.log": ("launcher",), "logs/train_cycle_cycle0.log": ("app",),
                     "logs/train_cycle_cycle1.log": ("app",)}  # console.log is a fallback, not read
    single = rundirs.build(tmp_path / "single", Scenario(per_cycle_logs=False, run_json=False))
    tl = read_history(single.run_dir)
    assert {s.rel: s.roles for s in tl.sources} == {"logs/megatron-1234.out": ("app", "launcher")}
    assert [s.cycle for s in tl.starts] == [0, 1]


def _missing(p: Path) -> Path:
    return p / "missing"


def _a_file(p: Path) -> Path:
    (p / "file").write_text("x")
    return p / "file"


def _empty(p: Path) -> Path:
    (p / "empty").mkdir()
    return p / "empty"


def _plan_only(p: Path) -> Path:
    (p / "plan").mkdir()
    (p / "plan" / "run.json").write_text('{"dry_run": true}')
    return p / "plan"


@pytest.mark.parametrize("make, why", [
    (_missing, "does not exist"),
    (_a_file, "is not a directory"),
    (_empty, "holds nothing"),
    (_plan_only, "is a plan that never ran: it holds only run.json"),
])
def test_unreadable_run_dirs_say_why(tmp_path, make, why):
    with pytest.raises(RunDirError) as info:
        read_history(make(tmp_path))
    assert why in str(info.value)


def test_an_unreadable_log_is_a_note_not_a_crash(tmp_path, monkeypatch):
    from harness.read import history

    built = rundirs.build(tmp_path / "run", Scenario(checkpoints=False))

    real = history.safeio.open_binary

    def refuse(path):
        if str(path).endswith("train_cycle_cycle1.log"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(history.safeio, "open_binary", refuse)
    tl = read_history(built.run_dir)
    assert "logs/train_cycle_cycle1.log could not be read completely (Permission denied)" in " ".join(tl.notes)
    assert [s.cycle for s in tl.starts] == [0]  # cycle 0 is still there; cycle 1 is missing, not invented


# ---------------------------------------------------------------- bounded with the checkpoints


def _dense_log(saves: int, every: int = 5) -> str:
    lines = []
    for it in range(1, saves * every + 1):
        lines.append(f"1:  [2026-11-29 17:32:09.310000] iteration {it:8d}/{saves * every:8d} | consumed samples: {it} | "
                     "lm loss: 9.400000E+00 | number of skipped iterations:   0 | number of nan iterations:   0 |")
        if it % every == 0:
            lines.append(f"0:  [2026-11-29 17:32:09.410000] saving checkpoint at iteration {it:7d} to /ckpt in torch_dist format")
            lines.append(f"0:   successfully saved checkpoint from iteration {it:7d} to /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ]")
    return "\n".join(lines) + "\n"


def test_save_lines_are_kept_bounded_whatever_the_number_of_checkpoints():
    """A checkpoint every 5 iterations: the start keeps the first, the last and an even
    selection of its save lines (not one event per save) and counts them all."""
    from harness.read.history import SAVES_HEAD, SAVES_SAMPLE, SAVES_TAIL

    ((events, _first, last, _, committed),) = [_feed_whole(_dense_log(2000))]
    saves = [e for e in events if isinstance(e, ev.SaveCommitted)]
    assert committed == 2000
    assert len(saves) <= SAVES_HEAD + SAVES_TAIL + SAVES_SAMPLE
    its = [s.iteration for s in saves]
    assert its == sorted(its) and its[:SAVES_HEAD] == [5 * i for i in range(1, SAVES_HEAD + 1)]
    assert its[-SAVES_TAIL:] == [5 * i for i in range(2000 - SAVES_TAIL + 1, 2001)]
    middle = its[SAVES_HEAD:-SAVES_TAIL]
    assert len(middle) >= SAVES_SAMPLE // 2  # an even selection for the picture, not just the ends
    assert saves[-1].src.line == 14_000 and saves[-1].src.text.startswith("0:   successfully saved checkpoint")
    assert len([e for e in events if isinstance(e, ev.SaveStarted)]) <= SAVES_HEAD + SAVES_TAIL + SAVES_SAMPLE
    assert (last.iteration, last.src.line) == (10_000, 14_000 - 2)


def _feed_whole(text: str):
    parser = LogParser("x.log", split_starts=False)
    data = text.encode()
    pos = 0
    while pos < len(data):  # pieces of about 64 KiB, cut at line ends
        cut = data.rfind(b"\n", pos, pos + (1 << 16)) + 1 or len(data)
        parser.feed(data[pos:cut])
        pos = cut
    (start,) = parser.snapshot_starts()
    return start


def test_save_lines_kept_in_bulk_are_kept_as_one_by_one():
    """The save lanes add a chunk's save lines to a record at once (_Kept.extend): the record
    ends as adding them one by one leaves it (count, first, last, the even selection), and
    keeps() names exactly the entries extend asks for, whatever the chunks' sizes."""
    import random

    from harness.read.history import _Kept

    rng = random.Random(35)
    for trial in range(200):
        head, tail, sample = rng.choice([(8, 32, 64), (1, 1, 0), (0, 3, 4), (2, 5, 1)])
        one, bulk = _Kept(head, tail, sample), _Kept(head, tail, sample)
        serial = 0
        for _ in range(rng.randint(1, 12)):
            n = rng.choice([0, 1, 2, 7, rng.randint(0, 300), rng.randint(0, 5000)])
            entries = [(serial + o, f"line {serial + o}") for o in range(n)]
            for entry in entries:
                one.add(entry)
            expected = bulk.keeps(n)
            asked: list[int] = []
            bulk.extend(n, lambda o: asked.append(o) or entries[o])
            assert asked == expected, trial
            serial += n
            assert (bulk.count, bulk.head, list(bulk.tail), bulk.sample, bulk.stride) == (
                one.count, one.head, list(one.tail), one.sample, one.stride), trial
            assert bulk.kept() == one.kept()


def test_the_save_lane_takes_the_lines_the_rule_table_makes_save_events_of():
    """A start that trains keeps its save lines in bulk, on the raw bytes; every line the rule
    table (match_rule, in table order) would read otherwise goes the full path: a save line
    whose path holds "checkpoint" stays a save, a phrase its pattern does not match is none, and
    a line that also holds an earlier rule's line (the nemesis's, a second save phrase, one
    hidden in another keyword's hit) is that rule's."""
    from harness.read import history
    from harness.vocab.dialect import strip_prefix
    from harness.read.history import match_rule

    stamp = "[2026-11-29 17:32:09.410000]"
    tricky = [
        f"0:  {stamp} saving checkpoint at iteration {{it:7d}} to /ckpt in torch_dist format",
        f"0:   {stamp} successfully saved checkpoint from iteration {{it:7d}} to /data/checkpoints/run [ t 1/1 ]",
        f"0:  {stamp} scheduled an async checkpoint save at iteration {{it}} to /ckpt",
        "0:  saving checkpoint at iteration {it:7d} to /ckpt",  # no format: the pattern does not match
        "0: saving checkpoint at iteration {it} to /ckpt in torch_dist format nemesis: requested fault kill on rank 1 "
        "never happened: not reached",
        "0: saving checkpoint at iteration {it} to /a in torch_dist format; successfully saved checkpoint from "
        "iteration {it} to /a",
        "0: saving checkpoint at iteration {it} to /a in torch_dist format progressuccessfully saved checkpoint from "
        "iteration {it} to /a",  # "progress" begins where the earlier rule's phrase begins
        "0: [nemesis] rank 1 injecting SIGKILL after checkpoint iteration {it}",
        "2026-11-29T16:32:09.410000Z out 0:  saving checkpoint at iteration {it:7d} to /ckpt in torch_dist format",
    ]
    lines = []
    for it in range(1, 61):
        lines.append(f"1:  [2026-11-29 17:32:09.310000] iteration {it:8d}/     100 | consumed samples: {it} | "
                     "lm loss: 9.400000E+00 | number of skipped iterations:   0 | number of nan iterations:   0 |")
        lines.append(tricky[it % len(tricky)].format(it=it))
    calls = []
    real = history.LogParser._keep_saves

    def spy(self, hits, a, b, pos, line):  # noqa: ANN001
        calls.append(b - a)
        return real(self, hits, a, b, pos, line)

    parser = LogParser("x.log", split_starts=False)
    parser._keep_saves = spy.__get__(parser)
    parser.feed(("\n".join(lines) + "\n").encode())
    ((events, *_),) = parser.snapshot_starts()
    made = [(type(e).__name__, e.src.line) for e in events if not isinstance(e, (ev.Iteration,))]
    expected = []
    for number, text in enumerate(lines, 1):
        rule, _m = match_rule(strip_prefix(text)[1])
        if rule is not None and rule.app:
            expected.append((rule.event.__name__, number))
    assert made == expected
    assert sum(calls) >= 10  # the lane took the plain save lines
    assert {"SaveStarted", "SaveCommitted", "SaveScheduled", "NemesisNeverFired", "NemesisInjected"} <= {k for k, _ in made}


def test_a_run_with_dense_checkpoints_reads_every_save_count_and_the_last(tmp_path: Path):
    """The Timeline of a run that saves every 5 iterations holds a bounded number of save
    events; the criteria still see the last checkpoint and the committed count."""
    run = rundirs.build(tmp_path / "run", Scenario(train_iters=4000, save_interval=5, fault_at=2000,
                                                   checkpoints=False)).run_dir
    tl = read_history(run)
    assert [s.saves_committed for s in tl.starts] == [400, 400]
    assert len(tl.of(ev.SaveCommitted)) <= 2 * 104
    assert max(e.iteration for e in tl.starts[0].of(ev.SaveCommitted)) == 2000
    assert min(e.iteration for e in tl.starts[1].of(ev.SaveCommitted)) == 2005


def test_one_read_holds_the_timeline_the_curve_and_the_losses_only_when_asked(tmp_path: Path):
    from harness.read.history import read_run

    run = rundirs.build(tmp_path / "run", Scenario(checkpoints=False)).run_dir
    plain = read_run(run)
    assert plain.losses is None and plain.progress is not None and len(plain.progress) == len(plain.timeline.starts)
    assert read_run(run, progress=False).progress is None
    kept = read_run(run, losses=True, progress=False).losses
    t = plain.timeline.run.train_iters
    assert sorted(kept) == list(range(1, t + 1))
    replacement = plain.timeline.starts[-1]
    first = replacement.first_iteration
    assert kept[first.iteration].src == first.src  # the replacement's line of an iteration wins


def test_losses_of_a_live_read_equal_those_of_one_read(tmp_path: Path):
    """The watcher's reader, polled while the logs grow, then read once more at the end, keeps
    the same losses as one read of the finished run."""
    from harness.read.history import read_run

    built = rundirs.build(tmp_path / "done", Scenario(checkpoints=False)).run_dir
    live = tmp_path / "live"
    shutil.copytree(built, live, ignore=shutil.ignore_patterns("*.log"))
    (live / "logs").mkdir(exist_ok=True)
    reader = HistoryReader(live, inspect_checkpoints=False, losses=True)
    for log in sorted((built / "logs").iterdir()):
        data = log.read_bytes()
        with open(live / "logs" / log.name, "wb") as f:
            for at in range(0, len(data), 997):  # cut mid-line
                f.write(data[at:at + 997])
                f.flush()
                try:
                    reader.poll()
                except RunDirError:  # nothing readable yet
                    pass
    assert reader.read().losses == read_run(built, losses=True).losses


# ---------------------------------------------------------------- bounded with every repeated line kind

# One line of each kind history turns into an event; the launcher's profiling, timeout,
# rendezvous and exit lines and Megatron's FT, optimizer, scheduler and load lines may repeat
# without end in a received log.
FLOOD_APP = (
    "0: FT: initialized. Timeouts=RankMonitorConfig(...)",
    "0: INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type dp_reshardable",
    "0: INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value 0.0001 for learning rate",
    "0:  loading distributed checkpoint from /ckpt at iteration 10",
    "0:   successfully loaded checkpoint from /ckpt [ t 1/1 ] at iteration 10",
    "0: [after model, optimizer, and learning rate scheduler are built] datetime: 2026-11-29 17:32:08 ",
    "0: WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt",
    "0: WARNING:megatron.core.dist_checkpointing.serialization:Overwriting old incomplete / corrupted checkpoint...",
    "1: [nemesis] rank 1 injecting SIGKILL after checkpoint iteration 20 (baseline 0)",
    "1: nemesis: requested fault kill on rank 1 never happened: too few iterations",
    "0: [after training is done] datetime: 2026-11-29 17:32:13 ",
)
FLOOD_LAUNCHER = (
    "2026-11-29 17:09:20,881 [INFO] [vm] profiling.py:88 Cycle: 1 Event: worker_start_completed Node: n_1_0 Rank: 0 "
    "Time: 2026-11-29 17:09:20.881 UTC",
    "2026-11-29 17:16:04,303 [WARNING] [vm] [workload:?(0) infra:?(?)] rank_monitor_server.py:522 [Cycle 0] "
    "Section 'step' has been open for 14.46 seconds. Timeout is 10.00 seconds.",
    "[2026-11-29 17:05:40,000] [INFO] [RankMonServer16902@vm:0] FT timeout elapsed",
    "[2026-11-29 17:05:41,000] [INFO] The node 'n_1_0' has joined round 1 of the rendezvous 'job' as rank 0 "
    "in a world of size 2.",
    "[2026-11-29 17:05:42,000] [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: /usr/bin/python",
    "[2026-11-29 17:05:43,000] [INFO] Worker group FAILED. 2/3 attempts left; will restart worker group",
    "[2026-11-29 17:05:44,000] [INFO] 0/2 restart attempts left. Exiting...",
    "[2026-11-29 17:05:45,000] [INFO] [ft_launcher1@vm] Agent .run() is OK. Agent's exit code = 0",
    "[2026-11-29 17:05:46,000] [ERROR] Progress tracker detected no progress across restarts.",
)


def _flood_run(path: Path, lines: int) -> Path:
    """A run whose per-cycle log and launcher log repeat every event line kind `lines` times in
    all; the launcher log carries application lines too, without prefixes, as a user's single
    log does (every FT line there opens a start)."""
    logs = path / "logs"
    logs.mkdir(parents=True)
    with open(logs / "train_cycle0.log", "w") as fh:
        for _ in range(lines // len(FLOOD_APP) + 1):
            fh.write("\n".join(FLOOD_APP) + "\n")
    with open(logs / "launcher.log", "w") as fh:
        block = FLOOD_LAUNCHER + tuple(line[3:] for line in FLOOD_APP)
        for _ in range(lines // len(block) + 1):
            fh.write("\n".join(block) + "\n")
    return path


def _peak_of_read(run: Path) -> tuple[int, ev.Timeline]:
    import tracemalloc

    tracemalloc.start()
    try:  # 256 KiB chunks: what one chunk's keyword lines cost is the same for both sizes
        read = HistoryReader(run, inspect_checkpoints=False, chunk_size=1 << 18).read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, read.timeline


def test_memory_does_not_grow_with_repeated_event_lines(tmp_path: Path):
    """Ten times the lines of every event kind cost far less than ten times the memory
    (issue 24, 3d: FT initialisation, profiling and optimizer lines kept one event per line)."""
    small_peak, small = _peak_of_read(_flood_run(tmp_path / "small", 5_000))
    large_peak, large = _peak_of_read(_flood_run(tmp_path / "large", 50_000))
    assert large_peak < 2 * small_peak, f"peak {large_peak} bytes for 50k lines against {small_peak} for 5k"
    # what the criteria read is still there: the first and last of each kind, and the cycle's start
    for tl in (small, large):
        app = next(s for s in tl.starts if s.source == "logs/train_cycle0.log")
        assert app.first(ev.WorkersInitialized).src.line == 1
        assert app.first(ev.OptimizerLoaded).src.line == 2
        assert app.first(ev.TrainingDone) is not None
        profiling = tl.of(ev.ProfilingEvent)
        assert profiling[0].src.line == 1 and profiling[0].cycle == 1
        assert {type(e) for e in tl.launcher_events()} >= {ev.RankTimeout, ev.FtTimeoutElapsed, ev.RendezvousJoined,
                                                          ev.WorkerFailed, ev.WorkerGroupFailed, ev.RestartsExhausted,
                                                          ev.LauncherSucceeded, ev.LauncherExit, ev.NoProgressStop}


def test_notes_on_ignored_checkpoint_entries_are_bounded(tmp_path: Path):
    """Each odd entry of the checkpoint dir costs a note up to ten; the rest are counted."""
    from harness.read.history import MAX_IGNORED_NOTES

    run = rundirs.build(tmp_path / "run", Scenario()).run_dir
    for zeros in range(7, 22):  # 15 names of iteration 1 that are not Megatron's iter_0000001
        (run / "checkpoints" / ("iter_" + "0" * zeros + "1")).mkdir()
    notes = [n for n in read_history(run).notes if n.startswith("ignored")]
    assert len(notes) == MAX_IGNORED_NOTES + 1
    assert notes[-1].endswith(f"ignored {15 - MAX_IGNORED_NOTES} more entries of checkpoints for the same reasons")


def test_every_joining_node_of_a_large_cluster_is_kept(tmp_path: Path):
    """The bounded record samples repeated lines, but the nodes that joined a cycle are what
    node_replacement compares: 2,000 nodes joining one cycle keep their 2,000 join lines (a
    10,000-GPU job has about 1,250 nodes), while the same line repeated keeps a sample."""
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    nodes = [f"node{i:05d}" for i in range(2000)]
    lines = [f"[I] The node '{n}' has joined the rendezvous" for n in nodes]
    lines += ["[I] The node 'node00000' has joined the rendezvous"] * 5000
    (logs / "launcher.log").write_text("\n".join(lines) + "\n")
    joined = [e for e in read_history(tmp_path / "run").launcher_events() if isinstance(e, ev.RendezvousJoined)]
    assert {e.node for e in joined} == set(nodes)
    assert len(joined) < 2000 + 200  # the repeats of one node's line are sampled, not all kept


# ---------------------------------------------------------------- the line rules (issue 26)

# One real line per rule of history.RULES, and the event it makes. A new rule without its line
# here fails test_every_line_rule_has_a_line_the_reader_turns_into_its_event.
RULE_LINES = [
    ("0: [nemesis] rank 1 injecting SIGKILL after checkpoint iteration 10", "NemesisInjected"),
    ("nemesis: requested fault kill on rank 1 never happened: no checkpoint was committed", "NemesisNeverFired"),
    ("0: [nemesis] rank 0 launcher identity: nvidia_resiliency_ext 0.7.0 sha256 " + "0" * 64 + " files 236 at /opt/"
     "nvrx dir/nvidia_resiliency_ext", "LauncherImported"),
    ("0: [2026-11-29 17:32:10.000000]   successfully saved checkpoint from iteration      10 to /ckpt "
     "[ t 1/1, p 1/1 ]", "SaveCommitted"),
    ("0: scheduled an async checkpoint save at iteration      10 to /ckpt", "SaveScheduled"),
    ("0: [2026-11-29 17:32:09.900000] saving checkpoint at iteration      10 to /ckpt in torch_dist format",
     "SaveStarted"),
    ("0:  loading distributed checkpoint from /ckpt at iteration 10", "LoadStarted"),
    ("0:   successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 10", "CheckpointLoaded"),
    ("0: Loading from a non-persistent checkpoint (non-persistent iter 12)", "NonPersistentLoadStarted"),
    ("0: WARNING: non-persistent checkpoints are older than persistent checkpoint", "NonPersistentOlder"),
    ("0: WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt", "StartedFromRandom"),
    # local checkpoints: Megatron's own line, then NVRx's LocalCheckpointManager (harness.vocab.tiers)
    ("0:   [2026-11-29 17:32:10.000000] successfully saved local checkpoint from iteration      11",
     "LocalSaveCommitted"),
    ("1: INFO:root:Successfully saved local checkpoint from iteration 11", "LocalSaveValidated"),
    ("0: nvidia_resiliency_ext.checkpointing.local.ckpt_managers.base_manager.CheckpointingException: Failure during "
     "saving local checkpoint from iteration 2 (last valid iteration is -1)", "LocalSaveFailed"),
    ("1: INFO:root:Renaming /nvme/ckpt/iter_0000011_0_local.dirty.pt to /nvme/ckpt/iter_0000011_0_local.pt",
     "LocalCopyWritten"),
    ("0: DEBUG:nvidia_resiliency_ext.checkpointing.local.ckpt_managers.base_manager:Finish loading (11, 1, '')",
     "LocalCopyRead"),
    ("1: INFO:root:File /nvme/ckpt/iter_0000011_1_local.pt does not exist!", "LocalCopyMissing"),
    ("1: nvidia_resiliency_ext.checkpointing.local.replication.strategies.NoReplicasAvailableError: No replicated "
     "copies for id=(11, 1, '') found!", "LocalCopyMissing"),
    # NVRx's in-process Wrapper (inprocess/wrap.py, utils.log_exc)
    ("1: 2026-11-29 17:32:04,200 [ERROR] [vm] [workload:1(1) infra:1(1)] wrap.py:582 [2026-11-29 16:32:04.200000] "
     "rank=1 fn_ex: RuntimeError('boom')", "InprocessEvent"),
    ("0:  > using checkpoint value 0.0001 for learning rate", "SchedulerValueLoaded"),
    ("0: Overwriting old incomplete / corrupted checkpoint...", "SaveOverwrite"),
    ("0: [rank0]: OSError: [Errno 28] No space left on device", "NoSpaceLeft"),
    ("0: INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type "
     "fully_sharded_model_space", "OptimizerLoaded"),
    ("0: INFO:megatron.core.optimizer:Setting up optimizer with config OptimizerConfig(lr=0.0001, min_lr=1e-05, "
     "bf16=True, use_distributed_optimizer=False, overlap_cpu_optimizer_d2h_h2d=False)", "SettingShown"),
    # Megatron-Bridge's configuration summary (docs/megatron-bridge.md)
    ("0:   hidden_dropout: 0.0  (Mcore default: 0.1)", "SettingShown"),
    ("0: [after model, optimizer, and learning rate scheduler are built] datetime: 2026-11-29 17:32:08 ", "ModelBuilt"),
    ("0: [after dataloaders are built] datetime: 2026-12-05 07:13:27 ", "DataloadersBuilt"),
    ("1:     save-checkpoint ................................: (1158.78, 1162.81)", "SaveTimed"),
    ("0: ------------------------ arguments ------------------------\n"
     "0: -------------------- end of arguments ---------------------", "ArgumentsPrinted"),
    ("0: FT: initialized. Timeouts=RankMonitorConfig(...)", "WorkersInitialized"),
    ("0: [after training is done] datetime: 2026-11-29 17:33:00 ", "TrainingDone"),
    ("2026-11-29 16:00:05,000 [RankMonServer16902@vm:4] Section 'step' has been open for 12.00 seconds. "
     "Timeout is 10.00 seconds", "RankTimeout"),
    ("[2026-11-29 16:00:05,000] [node7] [workload:5(1) infra:?(?)] Was out of section for 31.20 seconds. "
     "Timeout is 30.00 seconds", "RankTimeout"),
    ("[2026-11-29 16:00:05,000] [node7] [workload:5(1) infra:?(?)] Did not get subsequent heartbeat. Waited 30.00 "
     "seconds.", "RankTimeout"),
    ("[2026-11-29 17:09:20,881] [INFO] [vm] profiling.py:93 - Cycle: 1 Event: worker_start_completed Node: n_1_0 "
     "Rank: 0 Time: 2026-11-29 17:09:20.881 UTC", "ProfilingEvent"),
    ("[2026-11-29 16:00:06,000] [RankMonServer16902@vm:4] FT timeout elapsed.", "FtTimeoutElapsed"),
    ("[2026-11-29 16:00:01,000] [INFO] The node 'vm_1_0' has joined round 3 of the rendezvous 'job' as rank 0 in a "
     "world of size 2.", "RendezvousJoined"),
    ("[2026-11-29 17:32:04,280] [ERROR] [ft_launcher17401@vm] failed (exitcode: -9) local_rank: 1 (pid: 16905) of "
     "binary: /usr/bin/python3", "WorkerFailed"),
    ("[2026-11-29 17:32:04,300] [INFO] [default] Worker group FAILED. 2/3 attempts left; will restart worker group",
     "WorkerGroupFailed"),
    ("[2026-11-29 17:33:04,300] [INFO] [default] worker group successfully finished. Waiting 300 seconds for other "
     "agents to finish.", "WorkerGroupSucceeded"),
    ("[2026-11-29 17:33:04,300] [INFO] 0/3 restart attempts left", "RestartsExhausted"),
    ("[2026-11-29 17:33:05,000] [INFO] Agent .run() is OK. No failures in the result.", "LauncherSucceeded"),
    ("[2026-11-29 17:33:05,000] [ERROR] EARLY TERMINATION: detected no progress across restarts", "NoProgressStop"),
    # failure lines, read for triage only (events.DiagnosticEvent)
    ("[rank3]: Traceback (most recent call last):", "TracebackStarted"),
    ("[rank1]:[E1129 16:42:11.123456789 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=1873, OpType=ALLREDUCE) ran for 600083 milliseconds before timing out.",
     "CollectiveFailed"),
    ("srun: error: node-2: task 5: Exited with exit code 1", "TaskExited"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
     "HostOomKilled"),
    ("slurmstepd: error: *** STEP 4242.0 ON node-1 CANCELLED AT 2026-11-29T16:50:00 DUE TO TIME LIMIT ***",
     "StepCancelled"),
    ("[Rank 5] (after 10 iterations) memory (MB) | allocated: 1024.0 | max allocated: 2048.0 | reserved: 3072.0 | "
     "max reserved: 3072.0", "MemoryReport"),
    ("[Rank 0] (after 5 iterations) memory (GB) | mem-allocated-gigabytes: 1.2 | mem-max-allocated-gigabytes: 2.5 | "
     "mem-max-reserved-gigabytes: 3.0 | mem-alloc-retires: 0", "MemoryReport"),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "FailureSign"),
    ("  seq_length ...................................... 4096", "ConfigValue"),
    ("using world size: 8, data-parallel size: 2, context-parallel size: 1, tensor-model-parallel size: 2",
     "ConfigValue"),
]


def _triage_reads(line: str) -> list[str]:
    """The failure-line events triage's dispatch (history.diagnostic_matches) makes of `line`."""
    from harness.vocab.dialect import strip_prefix
    from harness.read.history import diagnostic_matches

    rank, body, _ = strip_prefix(line)
    parser = LogParser("x.log", split_starts=False)
    return [type(e).__name__ for rule, m in diagnostic_matches(body)
            for e in parser.events_of(rule, m, body, ev.Src("x.log", 1, ""), rank)]


@pytest.mark.parametrize("line,kind", RULE_LINES, ids=[f"{i}-{k}" for i, (_, k) in enumerate(RULE_LINES)])
def test_a_line_rule_makes_its_event_through_the_screen_and_the_dispatch(line: str, kind: str):
    """The reader's screen (keywords derived from the table) lets the line through and the
    dispatch (the same table) makes its event; a per-cycle log's screen too, for application lines."""
    from harness.read.history import ALL_KEYWORDS, APP_KEYWORDS

    for keywords in (ALL_KEYWORDS, APP_KEYWORDS):
        parser = LogParser("x.log", split_starts=True, keywords=keywords)
        parser.feed((line + "\n").encode())
        made = [type(e).__name__ for s in parser.snapshot_starts() for e in s[0]] + [
            type(e).__name__ for e in parser.launcher]
        app = issubclass(getattr(ev, kind), ev.AppEvent)
        if issubclass(getattr(ev, kind), ev.DiagnosticEvent):  # triage's alone: history's timeline keeps none
            assert kind not in made and kind in _triage_reads(line)
        elif keywords is APP_KEYWORDS and not app:
            assert made == []  # a per-cycle log is not searched for launcher lines
        else:
            assert made == [kind]


def test_the_nemesis_lines_of_every_fault_kind_are_read():
    """The nemesis names what it injects, or the fault that never happened, by the kind's signal
    or its name: disk-full, gpu-hang and gpu-error carry a hyphen (CI, 2026-12-05: a disk-full
    fault that never happened was judged without the nemesis's reason, its line unread)."""
    from harness.vocab.faults import FAULT_KINDS, SIGNAL

    for kind in FAULT_KINDS.values():
        how = kind.signal if kind.injects == SIGNAL else kind.name
        parser = LogParser("x.log", split_starts=True)
        parser.feed((f"1: [nemesis] rank 1 injecting {how} after checkpoint iteration 10 (baseline 0)\n"
                     f"1: nemesis: requested fault {kind.name} on rank 1 never happened: the moment passed\n").encode())
        made = [e for s in parser.snapshot_starts() for e in s[0]]
        assert [type(e).__name__ for e in made] == ["NemesisInjected", "NemesisNeverFired"], (kind.name, made)
        assert made[1].reason == "the moment passed"


def test_every_line_rule_has_a_line_the_reader_turns_into_its_event():
    """Adding a kind of log line is one entry of history.RULES and its line in RULE_LINES."""
    from harness.vocab.dialect import strip_prefix
    from harness.read.history import RULES, diagnostic_matches, match_rule

    bodies = [strip_prefix(line.splitlines()[0])[1] for line, _ in RULE_LINES]
    taken = {id(match_rule(b)[0]) for b in bodies} | {id(rule) for b in bodies for rule, _m in diagnostic_matches(b)}
    missing = [f"{r.event.__name__} {r.pattern.pattern[:60]!r}" for r in RULES if id(r) not in taken]
    assert not missing, f"rules without a line in RULE_LINES: {missing}"


def test_non_persistent_load_opens_the_load_of_a_start():
    """Megatron with --non-persistent-ckpt-type global prints `Loading from a non-persistent
    checkpoint (non-persistent iter N)` where a persistent load prints `loading distributed
    checkpoint from ...`: it is that start's load, and in a single log a second one begins the next start."""
    start = ("------------------------ arguments ------------------------\n  train_iters ... 100\n"
             "-------------------- end of arguments ---------------------\nFT: initialized. Timeouts=...\n")
    np_load = ("Loading from a non-persistent checkpoint (non-persistent iter 12)\n"
               "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 12\n")
    parser = _parse(start + np_load + np_load)
    starts = parser.snapshot_starts()
    assert [[type(e).__name__ for e in s[0]] for s in starts] == [
        ["ArgumentsPrinted", "WorkersInitialized", "NonPersistentLoadStarted", "CheckpointLoaded"],
        ["NonPersistentLoadStarted", "CheckpointLoaded"]]
    loaded = starts[0][0][2]
    assert (loaded.iteration, loaded.src.line) == (12, 5)
