"""A launch spoiled by torch elastic's master-port race (harness.judge.findings: a cycle that no
fault caused failed on rank 0 with EADDRINUSE) is launched once more by the ScenarioRunner
(pytest_nvrx_qual/runs.py): its tests judge the second launch, the spoiled one stays in the
session summary as a run that did not qualify, and a second spoiled launch is not relaunched.
Inner pytest sessions whose launch builds a run directory (recovery_tests/rundirs.py) instead."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

CONFTEST = '''
import json

import pytest

from harness.launch import runner
from harness.launch.job import LaunchResult
from harness.report import verify
from recovery_tests import rundirs

pytest_plugins = ["fixtures.plugin"]

SPOILED = {spoiled}  # how many launches in a row meet the race


@pytest.fixture(autouse=True)
def synthetic_launch(monkeypatch, work_dir):
    def execute(plan, *, deadline_s=None, fail_fast=True, out=None, base_env=None, baseline=None):
        log = work_dir / "launches.jsonl"
        n = len(log.read_text().splitlines()) if log.exists() else 0
        root = plan.layout.root
        rundirs.build(root, rundirs.Scenario(fault=plan.spec.fault, master_port_taken=n < SPOILED))
        with open(log, "a") as f:
            f.write(json.dumps({{"run_id": plan.spec.run_id}}) + "\\n")
        verdict, read = verify.judge_run(root, picture=False)
        found, _ = verify.triage(verdict, read)
        result = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, plan.nvrx.version, 0)
        return runner.Outcome(plan, result, verdict, found, None, verify.known_defects(verdict, read, found))

    monkeypatch.setattr(runner, "execute", execute)
'''

TESTS = '''
from pytest_nvrx_qual.runs import Scenario
from harness.machine.nvrx import NvrxTarget, installed_version

KILL = Scenario("kill", NvrxTarget(installed_version()), knobs=(("baseline", "none"),))


def test_kill_qualifies(scenarios):
    assert scenarios.outcome(KILL).verdict.qualified
'''


def inner_session(pytester: pytest.Pytester, spoiled: int):
    pytester.makeconftest(CONFTEST.format(spoiled=spoiled))
    pytester.makepyfile(test_inner=TESTS)
    work = pytester.path / "work"
    result = pytester.runpytest_inprocess("--work-dir", str(work), "-s", "-p", "no:cacheprovider")
    launches = [json.loads(line)["run_id"] for line in (work / "launches.jsonl").read_text().splitlines()]
    [summary] = sorted((work / "repeats").glob("pytest-*/summary.json"))
    [kill] = json.loads(summary.read_text())["scenarios"]
    return result, launches, kill


def test_a_launch_spoiled_by_the_master_port_race_is_launched_once_more(pytester: pytest.Pytester):
    result, launches, kill = inner_session(pytester, spoiled=1)
    result.assert_outcomes(passed=1)
    assert len(launches) == 2 and launches[0] != launches[1]
    result.stdout.fnmatch_lines([f"*relaunching reference-kill-* once: {launches[0]} failed a cycle that no fault "
                                 "caused, rank 0's worker could not listen on torch elastic's master port*"])
    # the spoiled run is summarized as what it was: not qualified, its failure named
    assert (kill["run_count"], kill["qualified_runs"]) == (2, 1)
    assert [(f["run_id"], f["criterion"]) for f in kill["failures"]] == [(launches[0], "clean_finish")]


def test_a_second_spoiled_launch_is_not_relaunched(pytester: pytest.Pytester):
    result, launches, kill = inner_session(pytester, spoiled=2)
    result.assert_outcomes(failed=1)
    assert len(launches) == 2
    assert (kill["run_count"], kill["qualified_runs"]) == (2, 0)
