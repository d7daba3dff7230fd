"""The suite's test command on two pytest-xdist workers (`-n 2 --dist loadgroup`,
fixtures/plugin.py): whole modules to one worker, the Slurm modules together on one, longest
groups first, and the "nvrx-qual scenarios" section of every worker printed by the controller.
Inner sessions in subprocesses, launches replaced by synthetic run directories as in
test_repeat_plugin.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fixtures import budget, plugin
from recovery_tests.test_repeat_plugin import CONFTEST

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

# Each test notes its xdist worker as it starts (before a Slurm test's setup skips it here).
NOTE = '''

import os


def pytest_runtest_logstart(nodeid, location):
    if "PYTEST_XDIST_WORKER" in os.environ:  # the controller reports it again
        with open(os.environ["NOTES"], "a") as f:
            f.write(json.dumps([nodeid, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
'''

MODULE = '''
import pytest


@pytest.mark.parametrize("i", range(6))
def test_unit(i):
    pass
'''

SCENARIO_MODULE = '''
import pytest

from pytest_nvrx_qual.runs import Scenario
from harness.machine.nvrx import NvrxTarget, installed_version

KILL = Scenario("kill", NvrxTarget(installed_version()))


@pytest.mark.e2e
@pytest.mark.parametrize("check", ["optimizer_reload", "clean_finish"])
def test_criterion(check, scenarios):
    assert scenarios.outcome(KILL).verdict.criterion(check).status == "pass"
'''

SLURM_MODULE = '''
import pytest

pytestmark = pytest.mark.slurm(nodes=1)


@pytest.mark.parametrize("i", range(3))
def test_on_the_cluster(i):
    pass
'''


def run_inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, conftest: str = CONFTEST, **modules: str):
    pytester.makeconftest(conftest + NOTE)
    pytester.makefile(".py", **modules)
    pytester.makeini("[pytest]\nmarkers =\n    e2e: e2e\n")
    notes = pytester.path / "notes.jsonl"
    monkeypatch.setenv("NOTES", str(notes))
    monkeypatch.delenv("NVRX_QUAL_REQUIRE_SLURM", raising=False)
    monkeypatch.delenv("SLURM_CONF", raising=False)  # no cluster for the inner session, even under .ci/run
    # run by a worker of an outer -n session (the suite's own command), the inner controller must
    # not inherit that worker's identity: it would note every test again as that worker
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    # the inner conftest imports recovery_tests: this checkout on the subprocess's path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                                           "-o", "addopts=", timeout=300)
    lines = notes.read_text().splitlines() if notes.exists() else []
    return result, [tuple(json.loads(line)) for line in lines]


def test_whole_modules_per_worker_slurm_together_longest_first_and_every_workers_scenarios(pytester, monkeypatch):
    result, notes = run_inner(
        pytester, monkeypatch,
        test_a=MODULE, test_b=MODULE, test_c=MODULE, test_d=MODULE,
        test_slurm_cluster=SLURM_MODULE, test_slurm_local=SLURM_MODULE,
        test_y=SCENARIO_MODULE, test_z=SCENARIO_MODULE)
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 28 and outcomes.get("skipped") == 6, out[-3000:]  # no cluster here
    assert len(notes) == 34, notes
    workers_of: dict[str, set[str]] = {}
    for nodeid, worker in notes:
        workers_of.setdefault(plugin.xdist_group_of(nodeid), set()).add(worker)
    assert set(workers_of) == {"test_a.py", "test_b.py", "test_c.py", "test_d.py", "test_y.py", "test_z.py",
                               plugin.SLURM_GROUP}, notes
    assert all(len(w) == 1 for w in workers_of.values()), workers_of  # a group never split
    assert set().union(*workers_of.values()) == {"gw0", "gw1"}, workers_of  # both workers used
    # on each worker: the Slurm group, then the e2e modules, then the rest
    rank = {plugin.SLURM_GROUP: 0, "test_y.py": 1, "test_z.py": 1}
    for worker in ("gw0", "gw1"):
        ranks = [rank.get(plugin.xdist_group_of(nodeid), 2) for nodeid, w in notes if w == worker]
        assert ranks == sorted(ranks), (worker, notes)
    # the controller prints the scenarios of every worker that launched one
    assert "nvrx-qual scenarios" in out, out[-3000:]
    launching = {w for nodeid, w in notes if plugin.xdist_group_of(nodeid) in ("test_y.py", "test_z.py")}
    for worker in launching:
        assert f"launched by xdist worker {worker}:" in out, out[-3000:]
    assert out.count("summary: ") == len(launching), out[-3000:]


def test_a_slurm_test_outside_the_slurm_modules_is_refused(pytester, monkeypatch):
    result, _ = run_inner(pytester, monkeypatch, test_a=MODULE, test_elsewhere=SLURM_MODULE)
    assert result.parseoutcomes().get("errors") == 3 and result.parseoutcomes().get("passed") == 6  # in setup
    result.stdout.fnmatch_lines(["*slurm-marked test outside fixtures.plugin.SLURM_MODULES (test_elsewhere.py)*"])


# CONFTEST's synthetic launch without its autouse monkeypatch (which every test would then use)
SESSION_WIDE_LAUNCH = '''
import json

from harness.launch import runner
from harness.launch.job import LaunchResult
from harness.report.verify import verify_run
from recovery_tests import rundirs

pytest_plugins = ["fixtures.plugin"]


def execute(plan, **_):
    root = plan.layout.root
    rundirs.build(root, rundirs.Scenario(fault=plan.spec.fault))
    result = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, plan.nvrx.version, 0)
    return runner.Outcome(plan, result, verify_run(root), None)


runner.execute = execute
'''

MIXED_MODULE = SCENARIO_MODULE + '''

@pytest.mark.launch
def test_own_launch():
    pass


def test_plain():
    pass


@pytest.mark.launch
def test_patches(monkeypatch):
    monkeypatch.setenv("X", "1")
'''


def test_in_a_group_the_tests_that_do_not_launch_or_change_the_process_run_before_its_launches(pytester,
                                                                                               monkeypatch):
    """A background launch runs in its test process: a test that changes the process
    (monkeypatch) waits for it (fixtures/launching.py), unless it runs before the group's
    launches start, as do the tests that launch nothing."""
    result, notes = run_inner(pytester, monkeypatch, SESSION_WIDE_LAUNCH, test_m=MIXED_MODULE)
    result.assert_outcomes(passed=5)
    order = [nodeid.split("::")[1] for nodeid, _ in notes]
    assert order == ["test_plain", "test_patches", "test_criterion[optimizer_reload]", "test_criterion[clean_finish]",
                     "test_own_launch"], notes


@pytest.mark.parametrize(("nodeid", "group"), [
    ("recovery_tests/test_slurm_cluster.py::test_x[kill]", plugin.SLURM_GROUP),
    ("recovery_tests/test_slurm_local.py::test_y", plugin.SLURM_GROUP),
    ("recovery_tests/test_slurm.py::test_z", "recovery_tests/test_slurm.py"),
    ("recovery_tests/test_fault_kinds.py::test_k[a::b]", "recovery_tests/test_fault_kinds.py"),
])
def test_the_group_of_a_test_id(nodeid, group):
    assert plugin.xdist_group_of(nodeid) == group


def test_launches_together_puts_every_launching_module_in_one_group_beside_the_slurm_group():
    """.ci/run's launch tier (`--launches-together`): the modules the launch budget names share
    one worker's session (its launches and baselines), the Slurm group runs on the other."""
    modules = plugin.launching_modules(budget.read_table())
    assert {"test_recovery_cpu.py", "test_fault_matrix.py", "test_goodput.py", "test_slurm_allocation.py"} <= modules
    assert not any(" " in m or "(" in m for m in modules), modules
    group = lambda nodeid: plugin.xdist_group_of(nodeid, modules)  # noqa: E731
    assert group("recovery_tests/test_recovery_cpu.py::test_k[kill]") == plugin.LAUNCH_GROUP
    assert group("recovery_tests/test_goodput.py::test_g") == plugin.LAUNCH_GROUP
    assert group("recovery_tests/test_slurm_allocation.py::test_s") == plugin.SLURM_GROUP  # Slurm first
    assert group("recovery_tests/test_kit.py::test_k") == "recovery_tests/test_kit.py"
    # without the option every module is its own group
    assert plugin.xdist_group_of("recovery_tests/test_goodput.py::test_g") == "recovery_tests/test_goodput.py"
