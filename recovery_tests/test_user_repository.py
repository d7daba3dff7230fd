"""nvrx-qual's pytest plugin in a repository of the user's own, run with this environment's
nvrx-qual (installed, as by tools/bootstrap and .ci/run: `pip install -e .`): pytest loads the
plugin through its `pytest11` entry point in every session of the environment, so the plugin
must not break a repository that has packages named `fixtures` or `harness` of its own, and its
documented fixtures must work there as written.

Each repository is built in tmp_path and tested by a fresh `python -m pytest` (and the `pytest`
script) in it; nothing is installed."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from fixtures.launching import launches
from fixtures.processes import run_in_session
from pytest_nvrx_qual.runs import Scenario
from harness import HOME
from harness.machine import nvrx
from harness.report.verify import stored_verdict
from harness.vocab.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "test_my_recovery.py"
PYTESTS = {"python -m pytest": [sys.executable, "-m", "pytest"],
           "pytest": [str(Path(sys.executable).parent / "pytest")]}


def declared_entry_points() -> dict[str, str]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(doc["project"]["entry-points"]["pytest11"])


def installed_entry_points() -> dict[str, str] | None:
    try:
        dist = importlib.metadata.distribution("nvrx-qual")
    except importlib.metadata.PackageNotFoundError:
        return None
    return {ep.name: ep.value for ep in dist.entry_points if ep.group == "pytest11"}


@pytest.fixture(scope="module")
def environment() -> dict[str, str]:
    """This environment, for a pytest in the user's repository: the installed nvrx-qual must be
    this checkout's (its entry points those pyproject.toml declares), else nothing here says
    anything about this checkout."""
    installed = installed_entry_points()
    if installed != declared_entry_points():
        pytest.fail(f"this environment's nvrx-qual ({sys.prefix}) registers the pytest11 entry points {installed}, "
                    f"pyproject.toml declares {declared_entry_points()}: install this checkout (pip install -e .)",
                    pytrace=False)
    # the outer session's options and plugins are not the user's
    return {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}


def user_repository(where: Path, tests: dict[str, str], *, own_packages: bool = True) -> Path:
    """A repository of the user's: its own packages `fixtures` (with fixtures/data.py) and
    `harness`, its tests, a pytest.ini of its own (the rootdir)."""
    where.mkdir(parents=True)
    (where / "pytest.ini").write_text("[pytest]\n")
    if own_packages:
        (where / "fixtures").mkdir()
        (where / "fixtures" / "__init__.py").write_text("")
        (where / "fixtures" / "data.py").write_text("ROWS = [1, 2, 3]\n")
        (where / "harness").mkdir()
        (where / "harness" / "__init__.py").write_text("OWNER = 'the user'\n")
    for name, text in tests.items():
        (where / name).write_text(textwrap.dedent(text))
    return where


def pytest_in(repo: Path, env: dict[str, str], *args: str, how: str = "python -m pytest",
              timeout_s: float = 300) -> subprocess.CompletedProcess:
    # the inner session's temporary directories stay in this test's tmp_path
    temproot = repo.parent / f"{repo.name}-temproot"
    temproot.mkdir(exist_ok=True)
    env = {**env, "PYTEST_DEBUG_TEMPROOT": str(temproot)}
    return run_in_session([*PYTESTS[how], "-p", "no:cacheprovider", "-rA", *args], timeout_s=timeout_s, cwd=repo,
                          env=env)


def said(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"


OWN_TESTS = {"test_mine.py": """
    from fixtures.data import ROWS
    import harness


    def test_my_own_packages():
        assert ROWS == [1, 2, 3] and harness.OWNER == "the user"
    """}


@pytest.mark.parametrize("how", sorted(PYTESTS))
def test_a_repository_with_its_own_fixtures_and_harness_passes_pytest(tmp_path, environment, how):
    repo = user_repository(tmp_path / "repo", OWN_TESTS)
    proc = pytest_in(repo, environment, how=how)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, said(proc)


def test_the_entry_point_imports_nothing_but_the_plugin_pytest_and_the_standard_library():
    """A session that never asks for the plugin's fixtures gets no top-level module of nvrx-qual's
    but the plugin's own (no `harness`, no `fixtures`, no torch)."""
    probe = textwrap.dedent("""
        import importlib, json, sys
        import pytest
        before = set(sys.modules)
        for value in sys.argv[1:]:
            importlib.import_module(value.partition(":")[0])
        new = {m.partition(".")[0] for m in set(sys.modules) - before}
        print(json.dumps(sorted(new - set(sys.stdlib_module_names))))
    """)
    points = declared_entry_points()
    proc = subprocess.run([sys.executable, "-c", probe, *points.values()], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == '["pytest_nvrx_qual"]' and list(points.values()) == ["pytest_nvrx_qual"], (
        points, proc.stdout)


def test_a_launching_fixture_beside_the_repositorys_own_harness_says_what_stops_it(tmp_path, environment):
    """The user's tests imported their `harness`: nvrx-qual's cannot be imported beside it, and
    the fixture says so (instead of an AttributeError deep in the plugin), while the test that
    asks for nothing of nvrx-qual's passes."""
    tests = {**OWN_TESTS, "test_launchers.py": """
        import harness


        def test_launchers(installed_launchers):
            pass
        """}
    repo = user_repository(tmp_path / "repo", tests)
    proc = pytest_in(repo, environment)
    assert proc.returncode == 1, said(proc)
    assert "1 passed" in proc.stdout and "1 error" in proc.stdout, said(proc)
    where = (repo / "harness" / "__init__.py").resolve()
    assert f"but this session imported another `harness` first ({where})" in proc.stdout, said(proc)


def test_the_plugins_launchers_are_the_ones_the_command_line_finds(tmp_path, environment):
    """From a repository without .nvrx/ of its own, `nvrx-qual run` takes the newest NVRx this
    machine has (harness.machine.nvrx.newest: pip's, or nvrx-qual's checkout's .nvrx/0.7.0); the
    plugin's one_launcher and newest_launcher are that one, from the same working directory. The
    repository has a `harness` of its own, first on sys.path, which its tests do not import: the
    fixtures load nvrx-qual's all the same."""
    tests = {"test_launchers.py": """
        def test_one(one_launcher):
            from harness.machine import nvrx  # nvrx-qual's, which the fixture imported

            assert one_launcher == nvrx.newest()


        def test_newest(newest_launcher):
            from harness.machine import nvrx

            assert newest_launcher == nvrx.newest()
        """}
    repo = user_repository(tmp_path / "repo", tests)
    expected = nvrx.newest((repo, HOME))
    assert expected is not None, "no NVRx installed here: pip install nvidia-resiliency-ext"
    proc = pytest_in(repo, environment)
    outcome = "2 passed" if expected.has_no_restart_exit_code else "1 passed, 1 skipped"
    assert proc.returncode == 0 and outcome in proc.stdout, said(proc)


# ---------------------------------------------------------------- the documented example, as written


def uninterrupted(one_launcher) -> Scenario:
    """The suite's uninterrupted reference run (the default configuration's baseline)."""
    return Scenario("none", one_launcher)


@launches(uninterrupted)
def test_the_docs_example_runs_as_written_in_a_users_repository(tmp_path, environment, one_launcher, scenarios,
                                                                 work_dir):
    """docs/examples/test_my_recovery.py, copied unchanged into a repository that has its own
    `fixtures` and `harness` packages, passes there: one kill launched through `qual_run`,
    judged against the suite's own uninterrupted run of that configuration, which it finds in
    the work dir as `nvrx-qual run` would (no twin launched for it)."""
    baseline = scenarios.outcome(uninterrupted(one_launcher))
    assert baseline.verdict.qualified, baseline.run_dir
    repo = user_repository(tmp_path / "repo", {})
    shutil.copyfile(EXAMPLE, repo / EXAMPLE.name)
    with scenarios.launch_slot():
        proc = pytest_in(repo, environment, "--work-dir", str(work_dir), timeout_s=1500)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, said(proc)
    # (other runs may appear meanwhile: the suite launches the coming tests' scenarios ahead)
    launched = sorted(p for p in (work_dir / "runs").iterdir() if p.name.startswith("my-recovery-kill-"))
    assert len(launched) == 1, launched
    verdict = Verdict.from_json(stored_verdict(launched[0]))
    assert verdict.qualified and verdict.baseline is not None, launched[0]
    assert (verdict.baseline.how, Path(verdict.baseline.run_dir)) == ("reused", baseline.run_dir), verdict.baseline
