"""Megatron-Bridge's log dialect, read by the one reader (harness.read.history's RULES) from a real
run: recovery_tests/data/runs/bridge-plain-kill, `nvrx-qual run --workload megatron-bridge
--distributed-optimizer 0` (a kill of rank 1 after checkpoint 4, recovered; QUALIFIED), its
logs as Bridge 0.6.2 wrote them. Where Bridge's output differs from Megatron-LM's
(docs/megatron-bridge.md, "Bridge's log lines against history.py"), each gap is read here
without weakening a criterion:

- no arguments table: the plain optimizer is told by megatron-core's own optimizer
  configuration line; with neither, optimizer_reload is unknown, never "without its optimizer";
- the model-built line comes before the load: the restore is timed by the first stamped line
  after it;
- save lines without a stamp: the save stalls are megatron-core's `save-checkpoint` timer;
- the INFO-logged traceback of an optional import at every start is no failure;
- the memory report in GB; a single log of Bridge's starts is cut where they start.

Needs no Bridge: the run directory is recorded (without its checkpoints)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness import workloads
from harness.judge import goodput, metrics
from harness.judge.criteria import FAIL, PASS, UNKNOWN, analyze, evaluate
from harness.judge.triage import diagnose
from harness.read.history import HistoryReader, LogParser, read_history
from harness.vocab import events as ev
from recovery_tests import recorded
from recovery_tests.test_console import console

NAME = "bridge-plain-kill"
RUN = recorded.recorded(NAME)
OPTIMIZER_CONFIG = "Setting up optimizer with config OptimizerConfig("


def _copy(tmp_path: Path, drop: str | None = None) -> Path:
    """The recorded run in a directory of its own, with every log line holding `drop` removed."""
    run_dir = tmp_path / NAME
    shutil.copytree(RUN, run_dir)
    if drop is not None:
        dropped = 0
        for log in (run_dir / "logs").glob("train_cycle_cycle*.log"):
            lines = log.read_text().splitlines(keepends=True)
            kept = [line for line in lines if drop not in line]
            dropped += len(lines) - len(kept)
            log.write_text("".join(kept))
        assert dropped, drop
    return run_dir


def _judge(run_dir: Path, cid: str):
    tl = HistoryReader(run_dir, inspect_checkpoints=False).poll(final=True)
    return next(r for r in evaluate(tl, analyze(tl)) if r.id == cid)


# ---------------------------------------------------------------- (a) the plain optimizer without an arguments table


def test_the_plain_optimizer_is_told_by_megatron_core_s_own_configuration_line():
    result = _judge(RUN, "optimizer_reload")
    assert result.status == PASS, result.detail
    assert "scheduler (plain optimizer) lines" in result.detail
    assert any(OPTIMIZER_CONFIG in e and "logs/train_cycle_cycle1.log" in e for e in result.evidence), result.evidence
    start = read_history(RUN).starts[-1]
    assert start.arguments is None  # Bridge prints no arguments table
    assert start.flag("use_distributed_optimizer")[0] is False


def test_without_any_record_of_the_optimizer_the_reload_is_unknown_not_failed(tmp_path):
    """The scheduler lines show a load, and nothing says whether the optimizer is the plain one
    (which loads silently): the evidence is missing, not contrary."""
    result = _judge(_copy(tmp_path, drop=OPTIMIZER_CONFIG), "optimizer_reload")
    assert result.status == UNKNOWN, result.detail
    assert "whether its optimizer is the distributed one is not shown" in result.detail
    assert "without its optimizer state" not in result.detail
    assert any("using checkpoint value" in e for e in result.evidence), result.evidence


def test_a_load_without_scheduler_lines_still_fails(tmp_path):
    """Unknown is only for missing evidence of the optimizer's kind: a load block with neither
    the optimizer's nor the scheduler's lines is a load without its optimizer state."""
    result = _judge(_copy(tmp_path, drop="using checkpoint value"), "optimizer_reload")
    assert result.status == FAIL and "without its optimizer state" in result.detail, result.detail


def test_the_watcher_lets_the_recovered_bridge_run_finish_and_says_what_it_loaded(tmp_path):
    """Replayed write by write, the watcher never stops the run (the study's run was stopped
    early on 'optimizer_reload cannot pass') and tells the load as one with optimizer state."""
    lines = [text for _, text in console(NAME, tmp_path, 0.5)]
    assert "replacement workers (cycle 1) loaded checkpoint 4 with optimizer state" in lines, lines
    assert "training done at iteration 12/12" in lines


# ---------------------------------------------------------------- (b) the restore ends after the load


def test_the_restore_is_timed_by_the_first_stamped_line_after_the_load():
    tl = read_history(RUN)
    replacement = tl.starts[-1]
    built, loaded = replacement.first(ev.ModelBuilt), replacement.first(ev.CheckpointLoaded)
    assert built.src.line < loaded.src.line  # Bridge builds, then loads
    assert isinstance(replacement.restored, ev.DataloadersBuilt) and replacement.restored.src.line > loaded.src.line
    m = metrics.compute(tl, analyze(tl))
    assert "[after dataloaders are built]" in m.evidence["checkpoint_loaded_at"]
    assert m.checkpoint_loaded_at == tl.utc(replacement.restored) > tl.utc(built)
    assert m.restore_s is not None and m.first_step_s is not None and 0 <= m.first_step_s <= 2.0
    assert metrics.SECOND_RESOLUTION_NOTE in m.notes  # Bridge's datetime stamps are whole seconds


# ---------------------------------------------------------------- (c) save stalls from megatron-core's timer


def _timer_seconds(run_dir: Path) -> list[float]:
    rx = re.compile(r"save-checkpoint \.+: \(([\d.]+), ([\d.]+)\)")
    return [float(m.group(2)) / 1000 for log in sorted((run_dir / "logs").glob("train_cycle_cycle*.log"))
            for m in rx.finditer(log.read_text())]


def test_unstamped_saves_are_timed_by_the_save_checkpoint_timer():
    tl = read_history(RUN)
    assert all(e.ts is None for s in tl.starts for e in s.of(ev.SaveStarted))  # Bridge's save lines carry no stamp
    timers = _timer_seconds(RUN)
    assert len(timers) == 3  # saves 4 (cycle 0), 8 and 12 (cycle 1)
    g = goodput.compute(tl, analyze(tl).episodes)
    assert g.reason is None and g.ratio is not None, (g.reason, g.part_reasons)
    assert g.part("save_stall") == pytest.approx(sum(timers), abs=1e-3)
    assert goodput.step_time(tl).seconds is not None


def test_a_save_without_stamp_or_timer_leaves_the_stall_unknown(tmp_path):
    run_dir = _copy(tmp_path, drop="save-checkpoint ....")
    tl = read_history(run_dir)
    g = goodput.compute(tl, analyze(tl).episodes)
    assert g.ratio is None and g.part("save_stall") is None  # the step time itself needs the stalls
    assert "a save line without a time stamp, and no save-checkpoint timer after it" in g.reason, g.reason


# ---------------------------------------------------------------- (d) an INFO-logged traceback, (e) memory in GB


def test_bridge_s_logged_import_traceback_is_not_a_failure():
    """Bridge's safe_import_from logs the handled AttributeError of an optional Transformer
    Engine symbol with its traceback, at every start on every rank: the triage of the killed
    run names the injected kill, not that traceback."""
    text = (RUN / "logs" / "train_cycle_cycle0.log").read_text()
    assert "failed with: Traceback (most recent call last):" in text and "FP8GlobalStateManager" in text
    t = diagnose(RUN)
    assert t.category == "exit" and t.injected, t.summary
    assert "FP8GlobalStateManager" not in t.summary and t.exception is None


@pytest.mark.parametrize(("line", "opens"), [
    ("0: Traceback (most recent call last):", True),
    ("  traceback : Traceback (most recent call last):", True),  # torch elastic's failure summary
    ("0: ERROR:root:step failed: Traceback (most recent call last):", True),
    ("1: INFO:megatron.bridge.utils.import_utils:Import of FP8GlobalStateManager from "
     "megatron.core.extensions.transformer_engine failed with: Traceback (most recent call last):", False),
    ("1: Import of FP8GlobalStateManager from megatron.core.extensions.transformer_engine failed with: Traceback "
     "(most recent call last):", False),
])
def test_a_traceback_opens_where_a_failure_prints_it(line, opens):
    from harness.read.history import diagnostic_matches
    from harness.vocab.dialect import strip_prefix

    body = strip_prefix(line)[1]
    assert any(r.event is ev.TracebackStarted for r, _ in diagnostic_matches(body)) is opens


def _memory(line: str) -> list[ev.MemoryReport]:
    from harness.read.history import diagnostic_matches
    from harness.vocab.dialect import strip_prefix

    rank, body, _ = strip_prefix(line)
    parser = LogParser("x.log", split_starts=False)
    return [e for r, m in diagnostic_matches(body) for e in parser.events_of(r, m, body, ev.Src("x.log", 1, ""), rank)
            if isinstance(e, ev.MemoryReport)]


def test_bridge_s_memory_report_in_gb():
    [report] = _memory("0: [Rank 0] (after 5 iterations) memory (GB) | mem-allocated-gigabytes: 1.2 | "
                       "mem-max-allocated-gigabytes: 2.5 | mem-reserved-gigabytes: 2.8 | mem-max-reserved-gigabytes: 3.0 "
                       "| mem-alloc-retires: 0 | mem-allocated-count: 412")
    assert (report.rank, report.iterations, report.max_allocated, report.max_reserved, report.unit) == (
        0, "5", "2.5", "3.0", "GB")
    assert "[Rank 0] (after 5 iterations) memory (GB)" in (RUN / "logs" / "train_cycle_cycle1.log").read_text()
    assert _memory("0: [Rank 0] (after 5 iterations) memory (GB)") == []  # on CPU: no figures, no report
    [mb] = _memory("[Rank 5] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0")
    assert (mb.max_allocated, mb.unit) == ("2.0", "MB")


# ---------------------------------------------------------------- a single log, and the dropout


def test_a_single_log_of_bridge_s_starts_is_cut_where_each_starts(tmp_path):
    """A user's one log of both starts: Bridge's load after its model-built line belongs to
    the same start (Megatron-LM loads before that line), so two starts, not three."""
    logs = RUN / "logs"
    parser = LogParser("job.log", split_starts=True)
    parser.feed((logs / "train_cycle_cycle0.log").read_bytes() + (logs / "train_cycle_cycle1.log").read_bytes())
    starts = parser.snapshot_starts()
    kinds = [[type(e).__name__ for e in events] for events, *_ in starts]
    assert len(starts) == 2, kinds
    assert "LoadStarted" not in kinds[0] and {"ModelBuilt", "LoadStarted", "CheckpointLoaded"} <= set(kinds[1])


def test_its_training_is_deterministic_by_its_configuration_summary(tmp_path):
    """Bridge names a dropout in its summary only where it differs from megatron-core's 0.1:
    both shown as 0.0 is bitwise deterministic; one not shown is not."""
    bridge = workloads.get("megatron-bridge")
    said = bridge.determinism(read_history(RUN))
    assert said.exact and said.reason == "deterministic_cpu"
    assert any("hidden_dropout: 0.0  (Mcore default: 0.1)" in src.text for src in said.evidence), said.evidence
    dropped = bridge.determinism(read_history(_copy(tmp_path, drop="attention_dropout: 0.0")))
    assert not dropped.exact and dropped.facts["why"][0] == "dropout_unseen"
