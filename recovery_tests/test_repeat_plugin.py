"""pytest's `--repeat N` (fixtures/plugin.py), run in an inner pytest session whose conftest
loads the plugin and replaces the launch with a synthetic run directory
(recovery_tests/rundirs.py): run 2 of every scenario fails optimizer_reload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = '''
import json

import pytest

from harness.launch import runner
from harness.launch.job import LaunchResult
from harness.report.verify import verify_run
from recovery_tests import rundirs

pytest_plugins = ["fixtures.plugin"]


@pytest.fixture(autouse=True)
def synthetic_launch(monkeypatch, work_dir):
    """What pytest_nvrx_qual/runs.py calls to launch: builds the run directory instead, and notes
    which baseline each run was compared with."""
    def execute(plan, *, deadline_s=None, fail_fast=True, out=None, base_env=None, baseline=None):
        root = plan.layout.root
        broken = "-r2-" in plan.spec.run_id or "--no-load-optim" in plan.spec.extra_args
        rundirs.build(root, rundirs.Scenario(fault=plan.spec.fault, no_load_optim=broken))
        with open(work_dir / "launches.jsonl", "a") as f:
            f.write(json.dumps({"run_id": plan.spec.run_id, "baseline": baseline and baseline.name}) + "\\n")
        result = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, plan.nvrx.version, 0)
        return runner.Outcome(plan, result, verify_run(root), None)

    monkeypatch.setattr(runner, "execute", execute)
'''

TESTS = '''
import pytest

from pytest_nvrx_qual.runs import Scenario
from harness.machine.nvrx import NvrxTarget, installed_version

TARGET = NvrxTarget(installed_version())
KILL = Scenario("kill", TARGET, baseline=Scenario("none", TARGET))


@pytest.mark.parametrize("check", ["optimizer_reload", "clean_finish"])
def test_criterion(check, scenarios):
    assert scenarios.outcome(KILL).verdict.criterion(check).status == "pass"


def test_without_scenarios():
    assert 1 + 1 == 2
'''


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS)
    return pytester


def summaries(work: Path) -> list[Path]:
    return sorted((work / "repeats").glob("pytest-*/summary.json"))


def test_repeat_3_runs_each_scenario_test_three_times_and_names_the_failing_run(inner):
    work = inner.path / "work"
    result = inner.runpytest_inprocess("--repeat", "3", "--work-dir", str(work), "-v")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines([
        "*test_criterion?repeat1-optimizer_reload? PASSED*",
        "*test_criterion?repeat2-optimizer_reload? FAILED*",
        "*test_criterion?repeat3-optimizer_reload? PASSED*",
    ], consecutive=False)
    outcomes = {r.nodeid.split("::")[1]: r.outcome for r in result.reprec.getreports("pytest_runtest_logreport")
                if r.when == "call"}
    assert outcomes == {f"test_criterion[repeat{i}-{check}]": "failed" if (i, check) == (2, "optimizer_reload")
                        else "passed" for i in (1, 2, 3) for check in ("optimizer_reload", "clean_finish")} | \
        {"test_without_scenarios": "passed"}  # not repeated: it launches no scenario
    # one launch per scenario and repeat, the baseline from the same repeat
    launches = [json.loads(line) for line in (work / "launches.jsonl").read_text().splitlines()]
    kills = [entry for entry in launches if entry["run_id"].startswith("reference-kill")]
    assert len(kills) == 3 and len(launches) == 6 and len({e["run_id"] for e in launches}) == 6
    for entry in kills:
        tag = entry["run_id"].split("-nvrx")[1].split("-")[1]  # r1, r2, r3
        assert entry["baseline"].startswith("reference-none-") and f"-{tag}-" in entry["baseline"], entry
    [path] = summaries(work)
    doc = json.loads(path.read_text())
    by_label = {s["label"]: s for s in doc["scenarios"]}
    kill = next(s for label, s in by_label.items() if label.startswith("reference-kill"))
    none = next(s for label, s in by_label.items() if label.startswith("reference-none"))
    assert (kill["run_count"], kill["qualified_runs"]) == (3, 2)
    assert [f["criterion"] for f in kill["failures"]] == ["optimizer_reload"]
    assert "-r2-" in kill["failures"][0]["run_id"] and kill["failures"][0]["run_dir"].startswith(str(work))
    assert [("-r1-" in r["run_id"], "-r2-" in r["run_id"], "-r3-" in r["run_id"]) for r in kill["runs"]] == \
        [(True, False, False), (False, True, False), (False, False, True)]
    assert (none["run_count"], none["qualified_runs"]) == (3, 3)
    assert kill["metrics"]["failure_to_first_step_s"]["p95"] == 5.12
    result.stdout.fnmatch_lines([
        "*nvrx-qual scenarios*",
        "reference-kill-nvrx*: 2 of 3 runs qualified; failure → first step p50 5.12 s, p95 5.12 s, max 5.12 s",
        "  reference-kill-nvrx*-r2-*: optimizer_reload fail: *",
        f"summary: {path.parent / 'summary.md'} and {path}",
    ])


def test_without_repeat_ids_stay_and_a_reused_work_dir_keeps_each_summary(inner):
    work = inner.path / "work"
    for _ in range(2):
        result = inner.runpytest_inprocess("--work-dir", str(work), "-v", "-k", "clean_finish")
        result.assert_outcomes(passed=1, deselected=2)
        result.stdout.fnmatch_lines(["*test_criterion?clean_finish? PASSED*"])
        assert "repeat1" not in result.stdout.str()
    first, second = summaries(work)
    assert first.parent != second.parent
    for path in (first, second):
        doc = json.loads(path.read_text())
        assert [s["run_count"] for s in doc["scenarios"]] == [1, 1]  # the baseline, then the kill
        assert all("-r1-" not in r["run_id"] for s in doc["scenarios"] for r in s["runs"])


def test_in_process_sessions_that_import_torch_leave_a_sound_interpreter(tmp_path):
    """The test above in a fresh interpreter: its two in-process sessions each reach torch (the
    synthetic checkpoints, the DCP metadata reader). pytester drops from sys.modules what a session
    imported first, and torch's C extension cannot be initialised twice in one process: without
    recovery_tests/conftest.py loading torch before pytester's snapshot, the second import
    corrupted the interpreter and pytest died with SIGSEGV (exit 139) after every test had passed."""
    test = "test_without_repeat_ids_stay_and_a_reused_work_dir_keeps_each_summary"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'basetemp'}",
         f"recovery_tests/{Path(__file__).name}::{test}"],
        cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit status {proc.returncode} (-11 is SIGSEGV):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    assert "1 passed" in proc.stdout


def test_no_scenario_no_summary(inner):
    work = inner.path / "work"
    result = inner.runpytest_inprocess("--work-dir", str(work), "-k", "without_scenarios")
    result.assert_outcomes(passed=1, deselected=2)
    assert "nvrx-qual scenarios" not in result.stdout.str() and summaries(work) == []


def test_repeat_0_is_a_usage_error(inner):
    result = inner.runpytest_inprocess("--repeat", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--repeat 0 must be 1 or more*"])


NEGATIVE_TESTS = '''
from pytest_nvrx_qual.runs import Scenario
from harness.machine.nvrx import NvrxTarget, installed_version

TARGET = NvrxTarget(installed_version())
NEGATIVE = Scenario("kill", TARGET, name="no-load-optim", workload_args=("--no-load-optim",), expect_qualified=False)


def test_no_load_optim_is_caught(scenarios):
    assert not scenarios.outcome(NEGATIVE).verdict.qualified
'''


def test_expected_negative_is_labelled_as_expected_in_the_summary_and_in_report(pytester, capsys):
    """A scenario that breaks the recovery on purpose reads "caught, as expected" (not "0 of 1
    qualified" in red) at the session's end, in summary.json and in `nvrx-qual report`."""
    from harness import cli

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_negative=NEGATIVE_TESTS)
    work = pytester.path / "work"
    result = pytester.runpytest_inprocess("--work-dir", str(work))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*nvrx-qual scenarios*",
                                 "no-load-optim (expected not to qualify): as expected: 1 of 1 run caught not qualifying *"])
    [path] = summaries(work)
    # the session also launched the scenario's automatic baseline (--baseline auto, the reference
    # workload's default): one uninterrupted run of its configuration, a scenario of its own
    twin, scenario = json.loads(path.read_text())["scenarios"]
    assert twin["label"].startswith("baseline-reference-") and (twin["run_count"], twin["qualified_runs"]) == (1, 1)
    assert (scenario["expected_negative"], scenario["as_expected"]) == (True, True)
    [run_dir] = [p for p in (work / "runs").iterdir() if p.name.startswith("no-load-optim")]
    assert json.loads((run_dir / "expectation.json").read_text())["qualified"] is False
    capsys.readouterr()
    assert cli.main(["report", str(run_dir)]) == 1  # the exit status still says what qualified
    out = capsys.readouterr().out
    assert "✅ not qualified, as expected" in out and "(expected not to qualify)" in out
    assert "1 of them had a broken recovery to catch (expected not to qualify); 1 of those were caught." in out
