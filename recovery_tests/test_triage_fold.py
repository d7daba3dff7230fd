"""Triage is a fold over history's event stream (issues 26 and 33): one line model
(dialect.LogLine), one time model (dialect.LogClock), one cycle rule (history.cycle_opened), one
rule table (history.RULES) and one line loop (history.LineStream, history.read_error_file) for
every line it reads. Read from the sources with `ast` (like test_one_reader.py), these tests fail
when triage grows a line record, a stamp reader, a one-line pattern, a loop over a file's lines
or a cycle rule of its own again; the behaviour tests pin the time model both readers share.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from harness.vocab import dialect as d
from harness.vocab import events as ev
from harness.read import history

ROOT = Path(__file__).resolve().parent.parent
TRIAGE = sorted((ROOT / "harness" / "judge" / "triage").glob("*.py"))
# the stamp readers of the log grammar: only dialect.LogClock may call them
STAMP_READERS = {"line_stamp", "glog_stamp", "megatron_datetime", "STAMP_RE", "GLOG_RE", "DATETIME_RE", "peel",
                 "strip_prefix", "glog_year", "glog_month"}


def _trees() -> dict[str, ast.Module]:
    return {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text(encoding="utf-8")) for p in TRIAGE}


def test_triage_defines_no_line_model_of_its_own() -> None:
    """A class of triage that holds a log line's text and its line number is a second line model:
    use dialect.LogLine, which history's reader builds too."""
    found = []
    for rel, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = {t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
                if "lineno" in fields and fields & {"raw", "text", "body"}:
                    found.append(f"{rel}: class {node.name}")
    assert not found, f"a second line model: {found}"


def test_triage_reads_no_stamp_itself() -> None:
    """Triage dates lines only through dialect.LogClock (history's clock); it names no stamp
    reader and no year rule of its own."""
    found = []
    for rel, tree in _trees().items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module == "harness.vocab.dialect":
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.Name):
                names = [node.id]
            found += [f"{rel}:{node.lineno}: {n}" for n in names if n in STAMP_READERS]
            if isinstance(node, ast.FunctionDef) and re.search(r"year|stamp", node.name):
                found.append(f"{rel}:{node.lineno}: def {node.name}")
    assert not found, f"triage reads stamps itself: {found}"
    assert not hasattr(d, "glog_year"), "a second year rule for glog stamps beside LogClock"


# What reads a file's lines, dates them, numbers their cycles or matches them against the rule
# table: history's alone (harness.read.history.LineStream and read_error_file); triage folds over
# what they yield and reassembles only the multi-line blocks (tracebacks, torch elastic's summary).
LINE_READERS = {
    "open": "opens a file", "open_log": "opens a log", "readline": "reads lines", "readlines": "reads lines",
    "splitlines": "splits text into lines", "read_text": "reads a file", "read_bytes": "reads a file",
    "read_line": "builds a LogLine of its own", "LogLine": "builds a LogLine of its own",
    "cycle_opened": "numbers cycles itself", "cycle_of_name": "numbers cycles itself",
    "attempt_of_path": "numbers cycles itself", "file_identity": "numbers cycles itself",
    "LogParser": "drives history's parser itself", "match_rule": "matches the rule table itself",
    "diagnostic_matches": "matches the rule table itself", "events_of": "makes events itself",
    "LAUNCHER_KEYWORDS": "screens lines itself", "LogClock": "dates lines itself", "maybe_stamped": "dates lines itself",
}


def line_loops(rel: str, tree: ast.AST) -> list[str]:
    """Where a module reads, numbers or matches lines itself: a call, or a name it imports or
    uses, of LINE_READERS (LogLine as a type annotation is the line model, and allowed)."""
    found = []
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in LINE_READERS:
                found.append(f"{rel}:{node.lineno}: {name}(...) {LINE_READERS[name]}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{rel}:{node.lineno}: imports {a.name}: {LINE_READERS[a.name]}" for a in node.names
                      if a.name in LINE_READERS and a.name != "LogLine"]
        elif isinstance(node, ast.Attribute) and node.attr in LINE_READERS and node.attr != "LogLine" \
                and id(node) not in called:
            found.append(f"{rel}:{node.lineno}: .{node.attr} {LINE_READERS[node.attr]}")
    return sorted(set(found))


def test_triage_keeps_no_line_loop_or_cycle_rule_of_its_own() -> None:
    """The lines triage folds are history's: read, capped, cleaned, dated, given their cycle and
    their events by history.LineStream (error.json's by history.read_error_file)."""
    found = [f for rel, tree in _trees().items() for f in line_loops(rel, tree)]
    assert not found, f"triage reads or numbers lines itself (fold over history.LineStream): {found}"
    imported = {a.name for tree in _trees().values() for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "harness.read.history" for a in node.names}
    assert {"LineStream", "read_error_file"} <= imported, imported


def test_the_rule_sees_a_second_line_loop() -> None:
    tree = ast.parse("from harness.read.history import cycle_opened\n"
                     "def scan(path):\n"
                     "    cycle = None\n"
                     "    for lineno, raw in enumerate(path.read_text().splitlines(), 1):\n"
                     "        for e in parser.events_of(rule, m, raw, src, None):\n"
                     "            cycle = cycle_opened(e) or cycle\n")
    assert {f.split(": ", 1)[1] for f in line_loops("x.py", tree)} == {
        "cycle_opened(...) numbers cycles itself", "events_of(...) makes events itself",
        "imports cycle_opened: numbers cycles itself", "read_text(...) reads a file",
        "splitlines(...) splits text into lines"}


def _triage_patterns() -> list[tuple[str, str]]:
    out = []
    for rel, tree in _trees().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
                    and node.args and isinstance(node.args[0], (ast.Constant, ast.BinOp, ast.JoinedStr))):
                try:
                    out.append((f"{rel}:{node.lineno}", ast.literal_eval(node.args[0])))
                except ValueError:
                    out.append((f"{rel}:{node.lineno}", ast.unparse(node.args[0])))
    return out


# one line of each one-line kind only history.RULES may read (NCCL wording and torch elastic's
# ChildFailedError also classify a traceback's exception, so their lines are not listed)
ONE_LINE_KINDS = {
    "TracebackStarted": "[rank3]: Traceback (most recent call last):",
    "TaskExited": "srun: error: node-2: task 5: Exited with exit code 1",
    "HostOomKilled": "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0.",
    "StepCancelled": "slurmstepd: error: *** STEP 4242.0 ON node-1 CANCELLED AT 2026-11-29T16:50:00 DUE TO TIME LIMIT ***",
    "MemoryReport": "[Rank 5] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0",
    "ConfigValue": "  seq_length ...................................... 4096",
}


@pytest.mark.parametrize("kind", list(ONE_LINE_KINDS))
def test_a_one_line_kind_is_read_by_history_rules_not_by_a_triage_pattern(kind: str) -> None:
    line = ONE_LINE_KINDS[kind]
    body = d.strip_prefix(line)[1]  # a rule reads a line's body, its rank prefix peeled (as history's reader does)
    assert any(r.event.__name__ == kind and r.pattern.search(body) for r in getattr(history, "DIAGNOSTIC_RULES", ())), f"no rule of history.RULES reads {kind}"
    mine = []
    for where, pattern in _triage_patterns():
        try:  # (a pattern that matches any text, an exception line's say, reads no kind of line)
            if re.search(pattern, line) and not re.search(pattern, "an unrelated line: of 12 words"):
                mine.append(f"{where}: {pattern[:60]!r}")
        except re.error:
            pass
    assert not mine, f"triage reads {kind} lines with patterns of its own: {mine}"


def test_every_failure_line_kind_is_a_diagnostic_event() -> None:
    rules = getattr(history, "DIAGNOSTIC_RULES", ())
    assert rules and all(issubclass(r.event, getattr(ev, "DiagnosticEvent", ())) for r in rules)
    assert all(r in history.RULES for r in rules)


# ----------------------------------------------------------------------------- the one time model


def _run(tmp_path: Path, log: list[str], created: str = "2026-11-29T16:00:00Z") -> Path:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train_cycle0.log").write_text("\n".join(log) + "\n")
    (tmp_path / "run.json").write_text(json.dumps({"utc_offset_s": 0, "created_at": created}))
    return tmp_path


def _oom_traceback(stamp: str) -> list[str]:
    return [f"0: [W{stamp} ProcessGroupNCCL.cpp:1] Warning: rank 0 about to fail",
            "0: Traceback (most recent call last):", '0:   File "train.py", line 3, in <module>',
            "0: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]


def _triage_time(run: Path) -> float | None:
    from harness.judge.triage import scan

    scanner = scan._Scanner(run, scan._Context(0, (2026, 11)))
    scanner.scan([run / "logs" / "train_cycle0.log"])
    (tb,) = scanner.tracebacks
    return tb.time


def test_a_glog_stamp_takes_the_year_of_the_logs_last_full_date_for_triage_as_for_history(tmp_path: Path) -> None:
    """A log copied in from 2024 into a run made in 2026: its glog stamps belong to 2024, the
    year its own full dates state (history's rule); triage once dated them by the run's creation."""
    log = ["0: [2024-03-05 10:00:00] iteration        1/     100 | consumed samples:           32 |",
           *_oom_traceback("0305 10:00:05.000000")]
    run = _run(tmp_path, log)
    assert _triage_time(run) == d.epoch(2024, 3, 5, 10, 0, 5)
    clock = d.LogClock()  # history's clock reads the same time
    clock.read("[2024-03-05 10:00:00] x")
    assert clock.read("W0305 10:00:05.000000 x") == _triage_time(run)


def test_a_glog_stamp_after_new_year_belongs_to_the_next_year(tmp_path: Path) -> None:
    """The nearest year: a December full date, then a January glog stamp, is next January."""
    clock = d.LogClock()
    clock.read("2026-12-31 23:59:58,000 last line of the year")
    assert clock.read("I0101 00:00:01.000000 x") == d.epoch(2027, 1, 1, 0, 0, 1)
    run = _run(tmp_path, ["0: [2026-12-31 23:59:58] iteration 1/ 100 |", *_oom_traceback("0101 00:00:01.000000")])
    assert _triage_time(run) == d.epoch(2027, 1, 1, 0, 0, 1)


def test_before_any_full_date_a_glog_stamp_is_near_the_runs_own_date() -> None:
    """Only the anchor a reader was given (triage: the run's creation) dates a glog stamp that no
    full date precedes; without one there is no time (history's log reader)."""
    assert d.LogClock().read("E1129 16:42:10.123456 x") is None
    assert d.LogClock((2026, 11)).read("E1129 16:42:10.123456 x") == pytest.approx(d.epoch(2026, 11, 29, 16, 42, 10, "123456"))
    assert d.LogClock((2027, 1)).read("E1229 16:42:10.000000 x") == d.epoch(2026, 12, 29, 16, 42, 10)
