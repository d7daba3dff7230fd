"""Final failures: a criterion marks a failure `final` when no later line of the run can undo
it, and the watcher stops a live job on exactly those (harness.launch.watch.certain_failure asks the
criteria; it restates none of their rules). The timing of the stop, line by line, is
recovery_tests/test_watch.py's."""

from __future__ import annotations

import pytest

from harness.judge import criteria
from harness.launch import watch
from harness.judge.criteria import FAIL, analyze, evaluate
from harness.read.history import HistoryReader
from harness.vocab.verdict import CriterionResult
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

BASE = dict(train_iters=20, checkpoints=False)

FINAL = {  # scenario: the criterion whose failure no later line can undo
    "started-from-random": (Scenario(**BASE, restart_from_random=True), "optimizer_reload"),
    "older-checkpoint": (Scenario(**BASE, load_iteration=5), "optimizer_reload"),
    "no-load-optim": (Scenario(**BASE, no_load_optim=True), "optimizer_reload"),
    "optimizer-not-reloaded": (Scenario(**BASE, silent_optimizer_skip=True), "optimizer_reload"),
    "second-failure": (Scenario(**BASE, second_failure_at=17), "clean_finish"),
    "second-injection": (Scenario(**BASE, second_failure_at=17, second_injection=True), "clean_finish"),
    "never-fired": (Scenario(**BASE, marker=False, never_fired_exit3=True), "pre_fault_checkpoint"),
    "launcher-gave-up": (Scenario(**BASE, restarts_exhausted=True), "clean_finish"),
}
GOOD = {"kill": Scenario(**BASE), "hang": Scenario(**BASE, fault="hang"), "none": Scenario(**BASE, fault="none"),
        "plain-optimizer": Scenario(**BASE, distributed_optimizer=False)}


def _results(tmp_path, s):
    tl = HistoryReader(rundirs.build(tmp_path / "run", s).run_dir, inspect_checkpoints=False).poll()
    a = analyze(tl, s.fault)
    return tl, a, evaluate(tl, a)


@pytest.mark.parametrize("name", sorted(FINAL))
def test_a_failure_no_line_can_undo_is_final(name, tmp_path):
    s, cid = FINAL[name]
    tl, a, results = _results(tmp_path, s)
    final = [r.id for r in results if r.final]
    assert cid in final, [(r.id, r.status, r.final) for r in results]
    assert all(r.status == FAIL for r in results if r.final)
    assert watch.certain_failure(tl, a).startswith(f"{final[0]} cannot pass: ")


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_qualified_run_has_nothing_final(name, tmp_path):
    tl, a, results = _results(tmp_path, GOOD[name])
    assert criteria.qualified(results) and not any(r.final for r in results)
    assert watch.certain_failure(tl, a) is None


def test_an_unfinished_run_fails_clean_finish_but_not_finally(tmp_path):
    """A live run has no launcher success and no 'training is done' yet: clean_finish fails,
    and the watcher must not stop on that."""
    tl, a, results = _results(tmp_path, Scenario(**BASE, training_done=False))
    clean = next(r for r in results if r.id == "clean_finish")
    assert clean.status == FAIL and not clean.final
    assert watch.certain_failure(tl, a) is None


def test_the_watcher_stops_on_what_the_criteria_mark_final_and_nothing_else(tmp_path, monkeypatch):
    tl, a, _ = _results(tmp_path, Scenario(**BASE))
    fake = [CriterionResult("later_checkpoint", FAIL, "not final"), CriterionResult("x", FAIL, "it is over", final=True)]
    monkeypatch.setattr(watch, "judge", lambda _tl, _a: criteria.Judgement(tuple(fake)))
    assert watch.certain_failure(tl, a) == "x cannot pass: it is over"
    fake.pop()
    assert watch.certain_failure(tl, a) is None


def test_the_stop_reason_names_what_decided_it_first(tmp_path):
    """clean_finish lists the problems no later line can undo before those a live run still
    has (no launcher success yet): the watcher's stop reason starts with the deciding one."""
    run = rundirs.build(tmp_path / "run", Scenario(**BASE, second_failure_at=17)).run_dir
    (run / "launch.json").unlink()  # live: the launch has not ended, the launcher not succeeded
    log = run / "logs" / "launcher.log"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True)
                           if "Agent .run() is OK" not in line and "successfully finished" not in line
                           and "exit code = 0" not in line))
    tl = HistoryReader(run, inspect_checkpoints=False).poll()
    reason = watch.certain_failure(tl, analyze(tl, "kill"))
    assert "no launcher success was recorded" in reason
    assert reason.startswith(
        "clean_finish cannot pass: The run did not finish cleanly: 2 cycles failed (0, 1); only the injected one may;")
