"""Statistics over several runs (harness.report.stats), checked against values computed by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.report import stats
from harness.cli import terminal
from harness import __version__
from harness.judge.criteria import CHECK_IDS, CRITERIA_IDS, FAIL, NOT_APPLICABLE, PASS, UNKNOWN
from harness.report.stats import RunRecord
from harness.report.verify import verify_run
from recovery_tests import rundirs

ALL_PASS = {cid: PASS for cid in CHECK_IDS}


def verdict_doc(name: str, statuses: dict[str, str] = ALL_PASS, fault: str = "kill", **metrics) -> dict:
    """A verdict.json as `Verdict.to_json()` writes it, cut to what the statistics read."""
    return {"schema": 1, "run_dir": f"/w/runs/{name}", "fault": fault,
            "qualified": all(s in (PASS, NOT_APPLICABLE) for s in statuses.values()),
            "criteria": [{"id": cid, "status": s, "detail": f"{cid} was {s} in {name}", "evidence": []}
                         for cid, s in statuses.items()],
            "metrics": {name: None for name in stats.METRICS} | metrics,
            "launcher": {"nvrx_version": "0.7.0"},
            "suite_version": __version__, "criteria_set": list(statuses)}


def record(name: str, statuses: dict[str, str] = ALL_PASS, **metrics) -> RunRecord:
    return RunRecord.from_verdict_json(verdict_doc(name, statuses, **metrics))


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([1, 2, 3, 4, 10], 50, 3.0),
    ([1, 2, 3, 4, 10], 95, 8.8),  # rank 0.95 x 4 = 3.8: 4 + 0.8 x (10 - 4)
    ([10, 1, 4, 2, 3], 95, 8.8),  # order of the runs does not matter
    ([1, 2], 50, 1.5),
    ([1, 2], 95, 1.95),
    ([7.5], 95, 7.5),
    ([1, 2, 3, 4, 10], 100, 10.0),
    ([1, 2, 3, 4, 10], 0, 1.0),
])
def test_percentile_interpolates_between_nearest_ranks(values, q, expected):
    assert stats.percentile(values, q) == pytest.approx(expected)


@pytest.mark.parametrize(("values", "q"), [([], 50), ([1.0], 101), ([1.0], -1)])
def test_percentile_refuses_nonsense(values, q):
    with pytest.raises(ValueError):
        stats.percentile(values, q)


def test_metric_percentiles_over_five_runs():
    runs = [record(f"r{i}", failure_to_first_step_s=v, lost_iterations=li)
            for i, (v, li) in enumerate([(1, 1), (2, 1), (3, 2), (4, 2), (10, 5)], 1)]
    m = stats.summarize("kill", runs).metric("failure_to_first_step_s")
    assert (m.n, m.missing, m.p50, m.p95, m.max) == (5, 0, 3.0, 8.8, 10.0)
    lost = stats.summarize("kill", runs).metric("lost_iterations")
    assert (lost.p50, lost.p95, lost.max) == (2.0, 4.4, 5.0)  # 2 + 0.8 x (5 - 2)


def test_a_metric_missing_in_one_run_is_missing_not_zero():
    runs = [record("a", restore_s=2.0), record("b", restore_s=None), record("c", restore_s=4.0)]
    m = stats.summarize("kill", runs).metric("restore_s")
    # as zero it would read p50 2.0; left out it is the middle of 2 and 4
    assert (m.n, m.missing, m.p50, m.p95, m.max) == (2, 1, 3.0, 3.9, 4.0)
    nothing = stats.summarize("kill", runs).metric("detection_s")
    assert (nothing.n, nothing.missing, nothing.p50, nothing.p95, nothing.max) == (0, 3, None, None, None)


def test_one_run_is_its_own_percentiles():
    m = stats.summarize("kill", [record("only", detection_s=0.42)]).metric("detection_s")
    assert (m.n, m.p50, m.p95, m.max) == (1, 0.42, 0.42, 0.42)


def test_pass_rate_and_failures_name_run_criterion_and_detail():
    broken = dict(ALL_PASS, optimizer_reload=FAIL)
    s = stats.summarize("kill", [record("rep-r1"), record("rep-r2", broken), record("rep-r3")])
    rate = s.criterion("optimizer_reload")
    assert (rate.passed, rate.failed, rate.unknown, rate.runs, rate.held) == (2, 1, 0, 3, 2)
    assert rate.rate == pytest.approx(2 / 3)
    assert s.criterion("clean_finish").rate == 1.0
    assert (s.qualified_runs, s.all_qualified) == (2, False)
    assert [(f.run_dir, f.run_id, f.criterion, f.status, f.detail) for f in s.failures] == [
        ("/w/runs/rep-r2", "rep-r2", "optimizer_reload", FAIL, "optimizer_reload was fail in rep-r2")]
    doc = s.to_json()
    assert doc["failures"] == [{"run_id": "rep-r2", "run_dir": "/w/runs/rep-r2", "criterion": "optimizer_reload",
                                "status": FAIL, "detail": "optimizer_reload was fail in rep-r2"}]
    assert {c["id"]: c["pass_rate"] for c in doc["criteria"]}["optimizer_reload"] == pytest.approx(2 / 3)
    assert [r["qualified"] for r in doc["runs"]] == [True, False, True]


def test_not_applicable_counts_as_held():
    quiet = {cid: NOT_APPLICABLE for cid in CHECK_IDS[:3]} | {cid: PASS for cid in CHECK_IDS[3:]}
    s = stats.summarize("none", [record("n1", quiet), record("n2", quiet)])
    pre = s.criterion("pre_fault_checkpoint")
    assert (pre.passed, pre.not_applicable, pre.held, pre.rate) == (0, 2, 2, 1.0)
    assert s.all_qualified and s.failures == ()


def test_unknown_and_unheard_of_statuses_do_not_hold():
    s = stats.summarize("kill", [record("u1", dict(ALL_PASS, later_checkpoint=UNKNOWN)),
                                 record("u2", dict(ALL_PASS, later_checkpoint="exploded"))])
    rate = s.criterion("later_checkpoint")
    assert (rate.unknown, rate.held, rate.rate) == (2, 0, 0.0)
    # one vocabulary: a status no checker can return is read as unknown (harness.vocab.verdict.Status.parse)
    assert [(f.run_id, f.status) for f in s.failures] == [("u1", UNKNOWN), ("u2", UNKNOWN)]


def test_five_criteria_first_then_further_checks_and_not_checked_counted():
    odd_order = {"loss_continuity": PASS, **{cid: PASS for cid in reversed(CHECK_IDS)}}
    s = stats.summarize("kill", [record("with-baseline", odd_order), record("without")])
    assert [c.id for c in s.criteria] == [*CRITERIA_IDS, "loss_continuity", "launcher_identity", "optimizer_state"]
    lc = s.criterion("loss_continuity")
    assert (lc.runs, lc.not_checked, lc.rate) == (1, 1, 1.0)


def test_markdown_names_the_failing_run_and_criterion():
    broken = dict(ALL_PASS, optimizer_reload=FAIL)
    s = stats.summarize("reference workload, fault kill, NVRx 0.7.0",
                        [record("rep-r1", failure_to_first_step_s=5.0), record("rep-r2", broken)])
    text = stats.render_markdown([s], "Repeats", links={"/w/runs/rep-r1": "../runs/rep-r1/timeline.png"})
    assert text.startswith("# Repeats\n\n1 of 2 runs qualified.")
    assert "| 1 | `rep-r1` | reference workload, fault kill, NVRx 0.7.0 | ✅ qualified | — | 5.00 | " \
           "[timeline.png](../runs/rep-r1/timeline.png) |" in text
    assert "| 2 | `rep-r2` | reference workload, fault kill, NVRx 0.7.0 | ❌ not qualified | `optimizer_reload` fail " \
           "| — | — |" in text
    assert "| `optimizer_reload` | 1/2 (50 %) | 1 | 0 | 1 | 0 | 0 |" in text
    assert "- `rep-r2`: `optimizer_reload` fail: optimizer_reload was fail in rep-r2 (`/w/runs/rep-r2`)" in text
    assert "| failure → first committed step (s) | 1/2 | 5.00 | 5.00 | 5.00 |" in text
    lines = stats.scenario_lines(s)
    assert lines[0].startswith("reference workload, fault kill, NVRx 0.7.0: 1 of 2 runs qualified; "
                               "failure → first step p50 5.00 s, p95 5.00 s, max 5.00 s")
    assert lines[1:] == ["  rep-r2: optimizer_reload fail: optimizer_reload was fail in rep-r2"]


def test_lost_iterations_shown_as_counts():
    s = stats.summarize("kill", [record("a", lost_iterations=1), record("b", lost_iterations=2)])
    assert "| lost iterations | 2/2 | 1.5 | 1.95 | 2 |" in stats.render_markdown([s], "t")


def test_record_from_a_real_verdict(tmp_path):
    built = rundirs.build(tmp_path / "runs" / "nlo", rundirs.Scenario(no_load_optim=True))
    verdict = verify_run(built.run_dir)
    r = RunRecord.from_verdict_json(verdict.to_json(), workload="megatron", stopped_early="it had to")
    assert (r.run_id, r.fault, r.qualified, r.workload, r.stopped_early) == ("nlo", "kill", False, "megatron",
                                                                             "it had to")
    assert [c.id for c in r.criteria] == [c.id for c in verdict.criteria]
    assert [c.id for c in r.failed] == ["optimizer_reload"]
    assert r.metric("failure_to_first_step_s") == verdict.metrics.failure_to_first_step_s
    assert r.metric("lost_iterations") == verdict.metrics.lost_iterations


def test_record_tolerates_a_sparse_verdict():
    r = RunRecord.from_verdict_json({"criteria": [{"id": "clean_finish"}], "metrics": {"detection_s": "fast"}})
    assert (r.run_dir, r.fault, r.qualified) == ("?", "?", False)
    assert r.criteria[0].status == UNKNOWN and r.metric("detection_s") is None


def test_write_summary_writes_json_and_markdown(tmp_path):
    s = stats.summarize("kill", [record("w1", detection_s=1.0), record("w2", dict(ALL_PASS, clean_finish=FAIL))])
    json_path, md_path = stats.write_summary([s], tmp_path / "out", "Two runs", notes=["a note"])
    doc = json.loads(json_path.read_text())
    assert (doc["schema"], doc["title"], doc["run_count"], doc["qualified_runs"], doc["all_qualified"]) == \
        (1, "Two runs", 2, 1, False)
    assert doc["scenarios"][0]["failures"][0]["run_id"] == "w2"
    assert doc["scenarios"][0]["failures"][0]["criterion"] == "clean_finish"
    assert doc["scenarios"][0]["metrics"]["detection_s"] == {"n": 1, "missing": 1, "p50": 1.0, "p95": 1.0, "max": 1.0}
    assert md_path.read_text().startswith("# Two runs\n\n1 of 2 runs qualified.\n\n> a note\n")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json", "summary.md"]  # no temp files


def test_verdict_cells_say_baseline_and_expected_negative():
    baseline = RunRecord.from_verdict_json(verdict_doc("none-1", fault="none"))
    assert baseline.verdict_cell == "✅ baseline (no fault: no recovery exercised)"
    broken = dict(ALL_PASS, optimizer_reload=FAIL)
    caught = dataclasses.replace(record("neg-1", broken), expected_qualified=False)
    missed = dataclasses.replace(record("neg-2"), expected_qualified=False)
    assert caught.verdict_cell == "✅ not qualified, as expected" and caught.as_expected
    assert missed.verdict_cell == "⚠️ qualified, but expected to be caught" and not missed.as_expected
    group = stats.summarize("no-load-optim (expected not to qualify)", [caught, missed])
    assert group.expected_negative and not group.as_expected
    assert group.qualified_sentence().endswith("the suite did not catch it.")
    only_caught = stats.summarize("no-load-optim (expected not to qualify)", [caught])
    assert only_caught.qualified_sentence().startswith("as expected: 1 of 1 run caught not qualifying")
    assert only_caught.as_expected and not only_caught.all_qualified
    assert stats.scenario_lines(group)[0].startswith("no-load-optim (expected not to qualify): 1 of 2 runs qualified although")
