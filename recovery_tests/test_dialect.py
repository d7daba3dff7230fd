"""The one log grammar (harness/vocab/dialect.py): prefixes, stamps, file names, discovery, the UTC
offset; and history and diagnose reading the same lines alike."""

from __future__ import annotations

import calendar
import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from harness.vocab import dialect as d
from harness.read.history import read_history


def utc(y, mo, day, h, mi, s, frac=0.0) -> float:
    return calendar.timegm((y, mo, day, h, mi, s)) + frac


# ----------------------------------------------------------------------------- prefixes


@pytest.mark.parametrize(("line", "console", "stream", "label", "local", "torch", "body"), [
    ("2026-11-29T16:00:03.250Z err 3: hello", utc(2026, 11, 29, 16, 0, 3, 0.25), "err", 3, None, None, "hello"),
    ("2026-11-29T17:00:03+01:00 out x", utc(2026, 11, 29, 16, 0, 3), "out", None, None, None, "x"),
    ("2026-02-30T16:00:03.000Z out x", None, "out", None, None, None, "x"),  # impossible date: no time, still peeled
    ("[default3]:[rank11]: x", None, None, None, 3, 11, "x"),
    ("12: [rank12]: x", None, None, 12, None, 12, "x"),
    (" 1: [default0]:x", None, None, 1, 0, None, "x"),  # srun --label pads; then the tee prefix
    ("[trainer2]:  num_layers ... 2", None, None, None, 2, None, "  num_layers ... 2"),
    ("[rank3]:x", None, None, None, None, 3, "x"),
    ("[2026-11-29 16:00:03] saving", None, None, None, None, None, "[2026-11-29 16:00:03] saving"),
    ("2026-11-29 16:00:03 out x", None, None, None, None, None, "2026-11-29 16:00:03 out x"),  # no T: not the console's
    ("3:", None, None, 3, None, None, ""),
])  # fmt: skip
def test_each_prefix_form_is_peeled(line, console, stream, label, local, torch, body) -> None:
    p = d.peel(line)
    assert (p.stream, p.label, p.local_rank, p.torch_rank, p.body) == (stream, label, local, torch, body)
    assert p.console == (pytest.approx(console) if console is not None else None)


def test_an_unknown_rank_label_is_peeled_without_a_rank() -> None:
    p = d.peel("?: FT: initialized")
    assert (p.label, p.label_unknown, p.body) == (None, True, "FT: initialized")
    assert d.strip_prefix("?: x") == (None, "x", None)


def test_rank_precedence_torch_then_label_then_local() -> None:
    assert d.strip_prefix("[default1]:[rank5]: x")[0] == 5  # two nodes: local 1 is global 5
    assert d.strip_prefix("4: x")[0] == 4
    assert d.strip_prefix("[default2]:x")[0] == 2


def test_the_console_writer_writes_what_the_reader_parses() -> None:
    ts = utc(2026, 11, 29, 16, 0, 3, 0.789)
    for stream in d.CONSOLE_STREAMS:
        p = d.peel(d.console_prefix(ts, stream) + d.label_prefix(7) + "body")
        assert (p.console, p.stream, p.label, p.body) == (pytest.approx(ts), stream, 7, "body")
    with pytest.raises(ValueError):
        d.console_prefix(ts, "both")


def test_tee_headers_are_found_mid_line_and_only_for_the_workers_role() -> None:
    found = d.tee_headers("[default0]:...ckpt[default1]: iteration 16 [rank2]: [other3]:")
    assert [(m.start(), m.group(2)) for m in found] == [(0, "0"), (18, "1")]


# ----------------------------------------------------------------------------- stamps


@pytest.mark.parametrize(("text", "expected"), [
    ("[2026-11-29 16:00:03,5] x", utc(2026, 11, 29, 16, 0, 3, 0.5)),
    ("  2026-11-29T16:00:03.123456789123 x", utc(2026, 11, 29, 16, 0, 3, 0.123456789)),
    ("2026-11-29_16:00:03 x", utc(2026, 11, 29, 16, 0, 3)),
    ("2026-02-29 16:00:03 x", None),  # 2026 is no leap year
    ("2026-13-01 16:00:03 x", None),
    ("2026-11-29 25:00:03 x", None),
    ("2026-11-29 16:61:03 x", None),
    ("1899-11-29 16:00:03 x", None),  # outside the plausible years
    ("2200-01-01 00:00:00 x", None),
])  # fmt: skip
def test_line_stamps_and_impossible_dates(text, expected) -> None:
    stamp = d.line_stamp(text)
    assert stamp is not None and stamp.year == int(text.strip(" [")[:4])
    assert stamp.ts == (pytest.approx(expected) if expected is not None else None)


def test_glog_stamps_take_the_year_they_are_given() -> None:
    assert d.glog_stamp("I1129 16:00:03.250000 12 f.py:1] x", 2026) == pytest.approx(utc(2026, 11, 29, 16, 0, 3, 0.25))
    assert d.glog_stamp("[W0229 16:00:03.0 x", 2026) is None  # no 29 February in 2026
    assert d.glog_stamp("W0229 16:00:03.0 x", 2028) is not None
    assert d.glog_stamp("X1129 16:00:03.0 x", 2026) is None


def test_megatron_datetime_and_iso() -> None:
    got = d.megatron_datetime("[after training is done] datetime: 2026-12-01 07:52:49.308941 ")
    assert got is not None and got.ts == pytest.approx(utc(2026, 12, 1, 7, 52, 49, 0.308941))
    assert d.megatron_datetime("[after training is done] datetime: 2026-12-32 07:52:49").ts is None
    assert d.parse_iso_utc("2026-11-29T16:32:09.789Z") == pytest.approx(utc(2026, 11, 29, 16, 32, 9, 0.789))
    assert d.parse_iso_utc("2026-11-29T17:32:09+01:00") == pytest.approx(utc(2026, 11, 29, 16, 32, 9))
    for bad in ("1970-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "yesterday", 12, None, "2" * 100):
        assert d.parse_iso_utc(bad) is None
    ts = utc(2026, 11, 29, 16, 32, 9, 0.789)
    assert d.format_iso_utc(ts) == "2026-11-29T16:32:09.789Z" and d.parse_iso_utc(d.format_iso_utc(ts)) == pytest.approx(ts)


# ----------------------------------------------------------------------------- file names


@pytest.mark.parametrize(("name", "cycle"), [
    ("train_cycle3.log", 3), ("train_cycle12.out", 12), ("x_cycle0", 0), ("x_cycle3.json", None),
    ("x_cycle3.log.1", None), ("cycle3.log", None), ("train.log", None),
])  # fmt: skip
def test_cycle_file_names(name, cycle) -> None:
    assert d.cycle_of_name(name) == cycle


def test_attempt_dirs_and_cycle_info_names() -> None:
    assert d.attempt_of_path("logs/elastic/none_abc/attempt_2/5/stderr.log") == (2, 5)
    assert d.attempt_of_path("attempt_1/error.json") == (1, None)
    assert d.attempt_of_path("logs/my_attempt_1/x.log") is None
    assert d.cycle_info_name("cycle_info.job.7.0.3") == ("job.7", 0, 3)
    assert d.cycle_info_name("cycle_info.job.x.3") is None


# ----------------------------------------------------------------------------- discovery


def _touch(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_discovery_kinds_skips_and_never_follows_links(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for rel in ("logs/launcher.log", "logs/console.log", "logs/train_cycle0.log", "logs/train_cycle1.log",
                "logs/elastic/attempt_0/1/stderr.log", "logs/error.json", "slurm-7.out", "notes.txt",
                "checkpoints/iter_0000010/x.log", ".hidden/x.log", "run.json"):
        _touch(run / rel)
    outside = tmp_path / "outside"
    _touch(outside / "secret.log")
    os.symlink(outside / "secret.log", run / "logs" / "link.log")
    os.symlink(outside, run / "logs" / "linkdir")
    os.symlink(outside / "secret.log", run / "linked.out")
    os.mkfifo(run / "logs" / "fifo.log")
    found = {f.rel: f for f in d.discover(run)}
    assert sorted(found) == ["logs/console.log", "logs/elastic/attempt_0/1/stderr.log", "logs/error.json",
                             "logs/launcher.log", "logs/train_cycle0.log", "logs/train_cycle1.log", "notes.txt",
                             "slurm-7.out"]  # fmt: skip
    assert (found["logs/launcher.log"].kind, found["logs/console.log"].kind) == ("launcher", "console")
    assert (found["logs/train_cycle1.log"].kind, found["logs/train_cycle1.log"].cycle) == ("cycle", 1)
    attempt = found["logs/elastic/attempt_0/1/stderr.log"]
    assert (attempt.kind, attempt.cycle, attempt.local_rank, attempt.flat) == ("attempt", 0, 1, False)
    # history's view: flat and named like a log
    assert [rel for _p, rel, _k, _c in d.classify_logs(run)] == [
        "logs/console.log", "logs/launcher.log", "logs/train_cycle0.log", "logs/train_cycle1.log", "notes.txt",
        "slurm-7.out"]  # fmt: skip
    assert [rel for _p, rel in d.application_logs(run)] == ["logs/train_cycle0.log", "logs/train_cycle1.log"]


def test_a_logs_folder_that_is_a_link_is_not_entered(tmp_path: Path) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside"
    _touch(outside / "launcher.log")
    run.mkdir()
    os.symlink(outside, run / "logs")
    assert d.discover(run) == [] and d.classify_logs(run) == []


def test_check_readable_dir(tmp_path: Path) -> None:
    with pytest.raises(d.RunDirError, match="does not exist"):
        d.check_readable_dir(tmp_path / "nope")
    _touch(tmp_path / "f")
    with pytest.raises(d.RunDirError, match="is not a directory"):
        d.check_readable_dir(tmp_path / "f")
    d.check_readable_dir(tmp_path)


# ----------------------------------------------------------------------------- the UTC offset


@pytest.mark.parametrize("value", [0, 3600, -43200, d.MAX_UTC_OFFSET_S, -d.MAX_UTC_OFFSET_S])
def test_offsets_time_zones_have(value) -> None:
    assert d.utc_offset_problem(value) is None


@pytest.mark.parametrize(("value", "says"), [
    (d.MAX_UTC_OFFSET_S + 1, "is no time zone"), (-d.MAX_UTC_OFFSET_S - 1, "is no time zone"),
    (10**30, "is no time zone"), (True, "not a whole number"), ("3600", "not a whole number"),
    (3600.0, "not a whole number"), (None, "not a whole number"),
])  # fmt: skip
def test_offsets_no_time_zone_has(value, says) -> None:
    problem = d.utc_offset_problem(value)
    assert problem is not None and says in problem


def test_history_and_diagnose_apply_one_bound(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from harness.cli import main as cli_main

    _touch(tmp_path / "logs" / "train_cycle0.log", "0: [2026-11-29 17:00:01] FT: initialized\n")
    (tmp_path / "run.json").write_text(json.dumps({"utc_offset_s": d.MAX_UTC_OFFSET_S + 1}))
    timeline = read_history(tmp_path)
    assert timeline.utc_offset_s != d.MAX_UTC_OFFSET_S + 1
    assert any("is no time zone" in n for n in timeline.notes)
    assert cli_main(["diagnose", str(tmp_path), "--utc-offset", str(d.MAX_UTC_OFFSET_S + 1)]) == 2
    assert "--utc-offset 50401 is no time zone" in capsys.readouterr().err
    assert cli_main(["diagnose", str(tmp_path), "--utc-offset", str(d.MAX_UTC_OFFSET_S)]) == 0


# ----------------------------------------------------------------------------- one reading of a line


CYCLE_LINES = [
    "0: [2026-11-29 17:00:01.000000] saving checkpoint at iteration 10 to /ckpt in torch_dist format",
    "1: [2026-11-29 17:00:02.500000] successfully saved checkpoint from iteration 10 to /ckpt",
    "[default0]:[rank3]: [2026-11-29 17:00:03.000000] successfully saved checkpoint from iteration 10 to /ckpt",
    "2: I1129 17:00:04.000000 12 train.py:1] FT: initialized",
    "5: [2026-02-30 17:00:05.000000] successfully saved checkpoint from iteration 10 to /ckpt",  # no such day
]


def test_history_and_diagnose_read_the_same_rank_and_time_from_each_line(tmp_path: Path) -> None:
    """verify (history) and diagnose must order one run alike: the same line is the same
    rank at the same UTC time for both."""
    from harness.read.history import LineStream  # the lines triage folds over

    rel = "logs/train_cycle0.log"
    _touch(tmp_path / rel, "\n".join(CYCLE_LINES) + "\n")
    (tmp_path / "run.json").write_text(json.dumps({"utc_offset_s": 3600, "created_at": "2026-11-29T16:00:00Z"}))
    timeline = read_history(tmp_path)
    assert timeline.utc_offset_s == 3600
    seen = {e.src.line: (e.rank, None if e.ts is None else e.ts - (0 if e.ts_utc else timeline.utc_offset_s))
            for e in timeline.events if e.src.path == rel}
    assert sorted(seen) == [1, 2, 3, 4, 5]

    read = list(LineStream(tmp_path / rel, rel, utc_offset_s=3600))
    assert [r.line.lineno for r in read] == [1, 2, 3, 4, 5]
    for r in read:
        line = r.line
        got = (line.rank, line.time)
        want = seen[line.lineno]
        assert got[0] == want[0], (raw, got, want)
        assert (got[1] is None) == (want[1] is None) and (got[1] is None or got[1] == pytest.approx(want[1])), (raw, got, want)
    assert seen[3] == (3, pytest.approx(utc(2026, 11, 29, 16, 0, 3)))
    assert seen[4] == (2, pytest.approx(utc(2026, 11, 29, 16, 0, 4)))
    assert seen[5][1] is None


# ----------------------------------------------------------------------------- launcher lines

LAUNCHER_LINES = [  # (line, what history makes of it, what triage makes of it)
    # NVRx 0.4.1: torch elastic's rendezvous with rounds, the rank monitor's logger name
    ("[2026-11-29 16:00:01,000] [INFO] The node 'vm_1_0' has joined round 3 of the rendezvous 'job' as rank 0 "
     "in a world of size 2.", ("joined", 3, None), ("cycle", 3, 2)),
    ("2026-11-29 16:00:05,000 [RankMonServer16902@vm:4] Section 'step' has been open for 12.00 seconds. "
     "Timeout is 10.00 seconds", ("timeout", 4, None), ("hang", 4, None)),
    # NVRx 0.7.0: the barrier rendezvous without rounds, the workload prefix, profiling events
    ("[2026-11-29 16:00:01,000] The node 'vm_1_0' has joined the rendezvous 'job' as rank 0 in a world of size 1.",
     ("joined", None, "vm_1_0"), ("cycle", None, 1)),
    ("[2026-11-29 16:00:05,000] [node7] [workload:5(1) infra:?(?)] Did not get subsequent heartbeat. Waited 30.00 "
     "seconds. Timeout is 30.00 seconds", ("timeout", 5, 1), ("hang", 5, 1)),
    ("[2026-11-29 16:00:05,000] [vm] [workload:?(0) infra:?(?)] [Cycle 1] Was out of section for 31.20 seconds. "
     "Timeout is 30.00 seconds.", ("timeout", None, 0), ("hang", None, 0)),
    ("Cycle: 2 Event: worker_start_completed Node: vm_1_0 Rank: 0 Time: 2026-11-29 16:00:09.000 UTC",
     ("profiling", 2, "worker_start_completed"), ("cycle", 2, None)),
    # every version: torch elastic's agent on a dead worker
    ("[2026-11-29 16:00:06,000] failed (exitcode: -9) local_rank: 1 (pid: 4242) of binary: python",
     ("failed", -9, 1), ("exit", -9, 1)),
]


@pytest.mark.parametrize(("line", "history_reads", "triage_reads"), LAUNCHER_LINES)
def test_history_and_triage_read_the_launcher_lines_alike(tmp_path: Path, line: str, history_reads: tuple,
                                                          triage_reads: tuple) -> None:
    """One definition of the launcher grammar (dialect.PROFILING_RE, RENDEZVOUS_JOINED_RE,
    WORKER_FAILED_RE, RANKMON_RE, WORKLOAD_RE): both readers take the same numbers from a line."""
    from harness.vocab import events as ev
    from harness.judge.triage import scan

    rel = "logs/launcher.log"
    _touch(tmp_path / rel, line + "\n")
    (tmp_path / "run.json").write_text(json.dumps({"utc_offset_s": 0, "created_at": "2026-11-29T16:00:00Z"}))
    events = [e for e in read_history(tmp_path).launcher_events()]
    assert len(events) == 1, events
    e = events[0]
    got = {ev.RendezvousJoined: lambda: ("joined", e.round, e.node), ev.RankTimeout: lambda: ("timeout", e.rank, e.local_rank),
           ev.ProfilingEvent: lambda: ("profiling", e.cycle, e.name),
           ev.WorkerFailed: lambda: ("failed", e.exitcode, e.local_rank)}[type(e)]()
    assert got == history_reads

    scanner = scan._Scanner(tmp_path, scan._Context(0))
    scanner.scan([tmp_path / rel])
    kind = triage_reads[0]
    if kind == "cycle":  # the launcher line moves the cycle of the lines after it, and names the number of nodes
        _touch(tmp_path / rel, line + "\nTraceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
               "ValueError: boom\n")
        scanner = scan._Scanner(tmp_path, scan._Context(0))
        scanner.scan([tmp_path / rel])
        assert [tb.cycle for tb in scanner.tracebacks] == [triage_reads[1]]
        assert scanner.world_of_nodes == triage_reads[2]
        return
    found = [x for x in scanner.events if x.kind == kind]
    assert len(found) == 1, scanner.events
    x = found[0]
    assert (kind, x.exitcode if kind == "exit" else x.rank, x.local_rank) == triage_reads


@pytest.mark.parametrize("name", sorted(__import__("harness.vocab.events", fromlist=["x"]).CYCLE_START_EVENTS))
def test_history_and_triage_share_one_cycle_rule(tmp_path: Path, name: str) -> None:
    """Every profiling event that opens a cycle for history (events.CYCLE_START_EVENTS, via
    history.cycle_opened) moves triage's cycle too: a traceback after it belongs to that cycle
    for both readers."""
    from harness.vocab import events as ev
    from harness.judge.triage import scan

    rel = "logs/launcher.log"
    _touch(tmp_path / rel, f"Cycle: 2 Event: {name} Node: vm_1_0 Rank: 0 Time: 2026-11-29 16:00:09.000 UTC\n"
                           "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: boom\n"
                           "[2026-11-29 16:00:10,000] failed (exitcode: 1) local_rank: 0 (pid: 4242) of binary: python\n")
    (tmp_path / "run.json").write_text(json.dumps({"utc_offset_s": 0, "created_at": "2026-11-29T16:00:00Z"}))
    failed = [e for e in read_history(tmp_path).launcher_events() if isinstance(e, ev.WorkerFailed)]
    scanner = scan._Scanner(tmp_path, scan._Context(0))
    scanner.scan([tmp_path / rel])
    assert [e.cycle for e in failed] == [2]
    assert [tb.cycle for tb in scanner.tracebacks] == [2] and [e.cycle for e in scanner.events] == [2]


def test_triage_reads_the_launcher_grammar_only_through_history_rules() -> None:
    """One reader per format: triage takes the launcher's lines (rank monitor timeouts, worker
    exits, rendezvous rounds, profiling events) from history's rule table, never from patterns
    of its own (a second reading would drift from history's, as its cycle rule once did)."""
    import ast

    launcher_grammar = {"PROFILING_RE", "RENDEZVOUS_JOINED_RE", "SECTION_TIMEOUT_RE", "OUT_OF_SECTION_RE",
                        "HEARTBEAT_MISSED_RE", "RANK_TIMEOUT_RES", "WORKER_FAILED_RE", "RANKMON_RE", "WORKLOAD_RE"}
    triage = Path(__file__).resolve().parent.parent / "harness" / "judge" / "triage"
    used = {(f.name, node.id if isinstance(node, ast.Name) else node.attr)
            for f in sorted(triage.glob("*.py")) for node in ast.walk(ast.parse(f.read_text()))
            if isinstance(node, (ast.Name, ast.Attribute)) and (node.id if isinstance(node, ast.Name) else node.attr)
            in launcher_grammar}
    used |= {(f.name, alias.name) for f in sorted(triage.glob("*.py")) for node in ast.walk(ast.parse(f.read_text()))
             if isinstance(node, ast.ImportFrom) for alias in node.names if alias.name in launcher_grammar}
    assert not used, f"triage matches launcher lines with its own patterns: {sorted(used)}"


# ---------------------------------------------------------------- numbers and discovery bounds (issue 24, class 4)


def test_every_number_is_range_checked_where_it_is_parsed():
    from harness.vocab.dialect import BOUNDS, decimal, number, record_number

    assert number("  42 ", "iteration") == 42 and number("-9", "exit_code") == -9
    for text, quantity in (("9" * 5000, "iteration"), ("1" + "0" * 400, "rank"), ("-1", "iteration"),
                           (str(10 ** 12 + 1), "iteration"), ("256", "exit_code"), ("0", "world"), ("1e3", "cycle"),
                           ("", "rank"), (None, "rank"), ("?", "rank"), ("١٢", "rank")):
        assert number(text, quantity) is None, (text[:20] if text else text, quantity)
    assert decimal("14.35", "seconds") == 14.35
    for text in ("1e400", "-1e400", "inf", "nan", "NaN", "9" * 5000, "x"):
        assert decimal(text, "loss") is None, text[:20]
    assert record_number(7, "cycle") == 7
    assert [record_number(v, "cycle") for v in (True, 7.0, "7", 10 ** 400, -1, None)] == [None] * 6
    assert all(low <= high for low, high in BOUNDS.values())


def test_discovery_is_bounded_in_depth_and_never_recurses(tmp_path):
    """A tree under logs/ deeper than the interpreter's recursion limit: the logs near the top
    are listed, those below MAX_LOG_DEPTH are not, and nothing raises."""
    import os
    import sys

    from harness.vocab.dialect import MAX_LOG_DEPTH, discover

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "top.log").write_text("x\n")
    depth = sys.getrecursionlimit() + 100
    fd = os.open(tmp_path / "logs", os.O_RDONLY | os.O_DIRECTORY)
    chain = [fd]
    try:
        for level in range(1, depth + 1):
            os.mkdir("d", dir_fd=fd)
            fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            chain.append(fd)
            os.close(os.open(f"at{level}.log", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        found = {f.rel.rsplit("/", 1)[-1] for f in discover(tmp_path)}
    finally:
        for level in range(len(chain) - 1, 0, -1):  # remove bottom-up, by descriptor (deeper than PATH_MAX)
            os.unlink(f"at{level}.log", dir_fd=chain[level])
            os.close(chain[level])
            os.rmdir("d", dir_fd=chain[level - 1])
        os.close(chain[0])
    assert "top.log" in found
    assert f"at{MAX_LOG_DEPTH - 1}.log" in found and f"at{MAX_LOG_DEPTH}.log" not in found
