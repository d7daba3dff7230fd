"""harness.vocab.verdict: one status vocabulary with Jepsen's merge order, and a Verdict whose
JSON round trip is exact on the verdicts this suite writes (docs/contracts.md)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.judge import criteria
from harness.plan import spec
from harness.vocab.verdict import CriterionResult, Fault, Status, Verdict, merge, qualified
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

P, F, N, U = Status.PASS, Status.FAIL, Status.NOT_APPLICABLE, Status.UNKNOWN


@pytest.mark.parametrize("statuses, merged", [
    ([], N), ([N], N), ([N, N], N), ([P], P), ([P, N], P), ([N, P], P),
    ([P, U], U), ([U, P], U), ([U, F], F), ([F, U, P], F), ([P, F], F), ([N, U], U), ([N, F], F),
])
def test_merge_fail_beats_unknown_beats_pass_and_not_applicable_is_the_identity(statuses, merged):
    assert merge(statuses) is merged
    assert merge(reversed(statuses)) is merged  # commutative


def test_status_is_the_string_it_was():
    assert P == "pass" and json.dumps([P, F, N, U]) == '["pass", "fail", "not_applicable", "unknown"]'
    assert f"{N:<15}|" == "not_applicable |" and str(U) == "unknown"
    assert criteria.PASS is P and criteria.FAIL is F and criteria.STATUSES == (P, F, N, U)
    assert Status.parse("passed") is U and Status.parse(None) is U
    assert CriterionResult("x", "fail", "d").status is F  # a stored string becomes the enum


def test_qualified_is_the_merge():
    assert not qualified([])
    assert qualified([CriterionResult("a", P, ""), CriterionResult("b", N, "")])
    assert not qualified([CriterionResult("a", P, ""), CriterionResult("b", U, "")])


def test_one_fault_vocabulary():
    assert tuple(f.value for f in Fault) == spec.FAULTS == criteria.FAULTS
    assert set(spec.FAULT_KINDS) | {"none", "campaign"} == set(spec.FAULTS)


@pytest.mark.parametrize("scenario", [
    Scenario(), Scenario(fault="hang"), Scenario(fault="none"), Scenario(nvrx="0.4.1", run_json=False),
    Scenario(restart_from_random=True), Scenario(second_failure_at=15, second_injection=True, moment="in-restore",
                                                 second_marker=True),
    Scenario(restarts_exhausted=True), Scenario(marker=False),
], ids=["kill", "hang", "none", "0.4.1-no-run-json", "random", "in-restore", "exhausted", "never-fired"])
def test_verdict_json_round_trip_is_exact(tmp_path, scenario):
    verdict = verify_run(rundirs.build(tmp_path / "run", scenario).run_dir, picture=False)
    doc = json.loads(json.dumps(verdict.to_json()))
    back = Verdict.from_json(doc)
    assert back.to_json() == doc
    # every typed field; the picture and `final` (the watcher's, not the record's) are not in the JSON
    unfinal = lambda results: tuple(dataclasses.replace(c, final=False) for c in results)  # noqa: E731
    assert back == dataclasses.replace(verdict, criteria=unfinal(verdict.criteria), episodes=tuple(
        dataclasses.replace(e, criteria=unfinal(e.criteria)) for e in verdict.episodes))
    assert [e.criteria[0].values for e in back.episodes] == [e.criteria[0].values for e in verdict.episodes]
    assert all(isinstance(c.status, Status) for c in back.criteria)


def test_from_json_reads_a_damaged_verdict_as_unknowns():
    v = Verdict.from_json({"criteria": [{"id": "a", "status": "passed"}, "junk"], "metrics": {"detection_s": "1"},
                           "launcher": [], "qualified": "yes"})
    assert [c.status for c in v.criteria] == [U] and v.metrics.detection_s is None
    assert v.launcher is None and v.qualified is False and v.fault == "?"
