"""Deadlines of launched scenarios: the launch's own deadline and the pytest-timeout derived
from the ft_launcher deadlines (harness.launch.runner), a timed-out scenario reported once and never
relaunched (pytest_nvrx_qual/runs.py), and the gpu-tier options --deadline-profile / --workload-args
(fixtures/plugin.py), the latter in inner pytest sessions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.launch import runner
from harness.plan.spec import DEADLINE_PROFILES, from_sources

pytest_plugins = ["pytester"]


def spec(fault: str, **knobs):
    flags = {"workload": "megatron", "fault": fault, "run_id": "d", "work_dir": Path("/"), **knobs}
    return from_sources(flags, {}, detected={})


def test_the_profiles_deadlines_and_their_name_reach_the_spec():
    short = spec("hang", deadline_profile="short")
    assert (short.section_timeouts_arg, short.out_of_section_timeout, short.workload_check_interval) == (
        "setup:600,step:60,checkpointing:60", 60.0, 1.0)
    assert spec("hang").deadline_profile == "walkthrough" and spec("hang").section_timeouts_arg == \
        "setup:900,step:120,checkpointing:600"
    overridden = spec("hang", deadline_profile="short", out_of_section_timeout=90.0)
    assert overridden.deadline_profile == "custom" and overridden.section_timeouts_arg.endswith("checkpointing:60")
    same = spec("hang", deadline_profile="short", out_of_section_timeout=60.0)
    assert same.deadline_profile == "short"  # restating a profile's own value keeps its name


def test_scenario_deadline_is_setup_per_cycle_worst_section_restart_and_margin():
    for name in DEADLINE_PROFILES:
        hang, kill, none = (runner.scenario_deadline(spec(f, deadline_profile=name)) for f in ("hang", "kill", "none"))
        assert hang > kill > none, name
    s = spec("hang", deadline_profile="short")
    assert runner.scenario_deadline(s) == (2 * 600 + 60 + 1 + runner.RESTART_ALLOWANCE_S + runner.TRAINING_MARGIN_S)
    # the longest deadline a stop can land in counts, whichever it is; setup is not one of them
    longer = spec("hang", deadline_profile="short", out_of_section_timeout=500.0)
    assert runner.scenario_deadline(longer) - runner.scenario_deadline(s) == 440
    walk = spec("hang")  # checkpointing 600 s is the walkthrough's worst, NVRx's 5 s check interval
    assert runner.scenario_deadline(walk) == 2 * 900 + 600 + 5 + runner.RESTART_ALLOWANCE_S + runner.TRAINING_MARGIN_S
    assert runner.pytest_timeout(walk) == runner.scenario_deadline(walk) + runner.VERIFY_GRACE_S


def test_the_check_interval_a_run_leaves_to_nvrx_is_stated_once(monkeypatch):
    """NVRx's default check interval is one fact (nvrx.DEFAULT_CHECK_INTERVAL_S, checked against
    the installed NVRx's own default); the scenario deadline takes it from there, not from a copy."""
    from harness.machine import nvrx

    walk = spec("hang")  # the walkthrough leaves the interval to NVRx
    assert walk.workload_check_interval is None
    before = runner.scenario_deadline(walk)
    monkeypatch.setattr(nvrx, "DEFAULT_CHECK_INTERVAL_S", nvrx.DEFAULT_CHECK_INTERVAL_S + 7)
    assert runner.scenario_deadline(walk) == before + 7
    config = pytest.importorskip("nvidia_resiliency_ext.fault_tolerance.config")
    assert config.FaultToleranceConfig().workload_check_interval == nvrx.DEFAULT_CHECK_INTERVAL_S - 7


# ---------------------------------------------------------------- inner pytest sessions

CONFTEST = '''
import json
import signal

import pytest

from harness.launch import runner

pytest_plugins = ["fixtures.plugin"]


@pytest.fixture(autouse=True)
def stuck_launch(monkeypatch, work_dir):
    """A launch that never returns: it waits for the pytest-timeout signal."""
    def execute(plan, *, deadline_s=None, **_ignored):
        with open(work_dir / "launches.jsonl", "a") as f:
            f.write(json.dumps({"run_id": plan.spec.run_id, "deadline_s": deadline_s}) + "\\n")
        signal.pause()

    monkeypatch.setattr(runner, "execute", execute)


def pytest_collection_finish(session):
    """Each collected item's pytest-timeout, for the outer test to read."""
    out = {item.nodeid.split("::", 1)[1]: (item.get_closest_marker("timeout").args[0]
                                           if item.get_closest_marker("timeout") else None)
           for item in session.items}
    (session.config.rootpath / "timeouts.json").write_text(json.dumps(out))
'''

STUCK = '''
import pytest

from pytest_nvrx_qual.runs import Scenario
from harness.machine.nvrx import NvrxTarget, installed_version

HANG = Scenario("hang", NvrxTarget(installed_version()), name="stuck", knobs=(("baseline", "none"),))


@pytest.mark.timeout(2)
@pytest.mark.parametrize("check", ["replacement_cycle", "optimizer_reload", "clean_finish"])
def test_criterion(check, scenarios):
    scenarios.outcome(HANG)
'''


def test_a_timed_out_scenario_is_reported_once_and_never_relaunched(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=STUCK)
    work = pytester.path / "work"
    result = pytester.runpytest_subprocess("--work-dir", str(work), "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*Timeout*", "*scenario stuck did not finish*test_criterion?replacement_cycle?*"
                                 "not relaunched*"])
    launches = [json.loads(line) for line in (work / "launches.jsonl").read_text().splitlines()]
    assert len(launches) == 1
    assert launches[0]["deadline_s"] is not None  # the launch had its own deadline, from the spec


GPU_TESTS = '''
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("fault", ["kill", "hang", "none"])
def test_scenario(fault):
    pass


def test_own_timeout_kept():
    pass


test_own_timeout_kept = pytest.mark.timeout(7)(test_own_timeout_kept)


@pytest.mark.gpu
def test_args_not_gpu_marked_module_wide(gpu_workload_args, gpu_knobs):
    pass
'''

ARGS_TEST = '''
def test_args(gpu_workload_args, gpu_knobs):
    assert gpu_workload_args == ("--seed", "1234", "--attention-dropout", "0")
    assert gpu_knobs == {"deadline_profile": "short"}
'''


def test_gpu_tests_get_a_pytest_timeout_from_their_scenarios_deadlines(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_gpu_inner=GPU_TESTS)
    timeouts = {}
    for profile in ("walkthrough", "short"):
        pytester.runpytest_subprocess("--collect-only", "-q", "--deadline-profile", profile, "-p", "no:cacheprovider")
        timeouts[profile] = json.loads((pytester.path / "timeouts.json").read_text())
    for profile, got in timeouts.items():
        want = {f: runner.pytest_timeout(spec(f, deadline_profile=profile)) for f in ("kill", "hang", "none")}
        assert {f: got[f"test_scenario[{f}]"] for f in want} == want, profile
        assert got["test_own_timeout_kept"] == 7
    assert timeouts["short"]["test_scenario[hang]"] < timeouts["walkthrough"]["test_scenario[hang]"] < 3600


def test_workload_args_and_profile_reach_the_gpu_scenarios(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_args=ARGS_TEST)
    result = pytester.runpytest_subprocess("--workload-args=--seed 1234 --attention-dropout 0",
                                           "--deadline-profile", "short", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("args, words", [("'--seed 2", "not a valid shell-quoted string"),
                                         ("--save /x", "set by the harness"),
                                         ("--exit-signal-handler", "refused")])
def test_bad_workload_args_are_refused_before_anything_runs(pytester: pytest.Pytester, args, words):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_args=ARGS_TEST)
    result = pytester.runpytest_subprocess(f"--workload-args={args}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--workload-args*{words}*"])


# ---------------------------------------------------------------- the report names the profile


def test_verdict_and_report_name_the_deadline_profile_that_ran(tmp_path):
    from harness.report.outputs import write_outputs
    from harness.report.verify import verify_run
    from recovery_tests import rundirs

    built = rundirs.build(tmp_path / "run", rundirs.Scenario(fault="hang"))
    verdict = verify_run(built.run_dir)
    assert verdict.to_json()["deadlines"] == {"profile": "reference", "setup": 60.0, "step": 10.0,
                                              "checkpointing": 10.0, "out_of_section": 10.0, "check_interval": 1.0}
    write_outputs(verdict, built.run_dir)
    report = (built.run_dir / "report.md").read_text()
    assert ("- Deadlines: profile **reference**: setup 60 s, step 10 s, checkpointing 10 s, out of section 10 s, "
            "check interval 1 s") in report
    assert json.loads((built.run_dir / "verdict.json").read_text())["deadlines"]["profile"] == "reference"


def test_deadlines_from_a_strangers_run_json_are_range_checked(tmp_path):
    from harness.report.verify import verify_run
    from recovery_tests import rundirs

    built = rundirs.build(tmp_path / "run", rundirs.Scenario(fault="kill"))
    path = built.run_dir / "run.json"
    record = json.loads(path.read_text())
    record["spec"].update(deadline_profile="short\n# injected", out_of_section_timeout=-5, workload_check_interval=1e300,
                          section_timeouts={"setup": "600", "step": True, "checkpointing": float("nan")})
    path.write_text(json.dumps(record))
    assert verify_run(built.run_dir).to_json()["deadlines"] == {}
    record["spec"]["section_timeouts"]["checkpointing"] = 60
    path.write_text(json.dumps(record))
    assert verify_run(built.run_dir).to_json()["deadlines"] == {"profile": None, "checkpointing": 60.0}


def test_the_profile_name_follows_the_deadlines_in_force():
    from harness.plan.spec import DEADLINE_PROFILES, deadline_profile_of

    assert deadline_profile_of({}) == "walkthrough"  # RunSpec's own defaults are the walkthrough's
    for name, deadlines in DEADLINE_PROFILES.items():
        assert deadline_profile_of(dict(deadlines)) == name
    assert deadline_profile_of({**DEADLINE_PROFILES["short"], "workload_check_interval": 2.0}) == "custom"
    # a workload whose defaults set deadlines of their own without naming a profile
    assert deadline_profile_of({"section_timeouts": (("setup", 90), ("step", 15), ("checkpointing", 15))}) == "custom"
    reference = spec("kill", workload="reference")
    assert reference.deadline_profile == "reference" and reference.section_timeouts_arg == "setup:60,step:10,checkpointing:10"
    chosen = from_sources({"workload": "reference", "deadline_profile": "short", "run_id": "d", "work_dir": Path("/")},
                          {}, detected={})
    assert (chosen.deadline_profile, chosen.section_timeouts_arg) == ("short", "setup:600,step:60,checkpointing:60")
