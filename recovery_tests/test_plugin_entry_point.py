"""The pytest plugin as an installed package gives it: pyproject's `pytest11` entry point loads
pytest_nvrx_qual in a repository of the user's own, without a conftest.py; the distribution
installs no package but `harness` and the plugin (no top-level `fixtures`); and in this
checkout, whose suite names the same plugin, it is registered once, not twice.

The installation is simulated the way pip leaves it: a dist-info directory with the
entry_points.txt that pyproject.toml declares, on the path of a fresh pytest process
(recovery_tests/test_user_repository.py runs the environment's real installation)."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def entry_points() -> dict[str, str]:
    return pyproject()["project"]["entry-points"]["pytest11"]


def installed_top_level(root: Path = ROOT) -> list[str]:
    """The top-level packages of this checkout that [tool.setuptools.packages.find]'s include
    patterns take (setuptools matches them with fnmatch against the dotted names)."""
    include = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file()
                  and any(fnmatch.fnmatchcase(p.name, pattern) for pattern in include))


def installed(site: Path, points: dict[str, str]) -> dict[str, str]:
    info = site / "nvrx_qual-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvrx-qual\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])  # ROOT: the package itself, as pip would install it
    # the inner sessions' temporary directories go beside `site`, in this test's own tmp_path: a
    # user's repository has no retention setting of ours, and pytest would keep its work dir in /tmp
    temproot = site.parent / f"{site.name}-temproot"
    temproot.mkdir()
    env["PYTEST_DEBUG_TEMPROOT"] = str(temproot)
    return env


def pytest_in(where: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=where, env=env,
                          capture_output=True, text=True, timeout=300)


def plugin_section() -> str:
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    return text.split("## The pytest plugin in your own repository", 1)[1].split("\n## ", 1)[0]


def test_pyproject_registers_the_plugin_under_its_module_name():
    assert entry_points() == {"pytest_nvrx_qual": "pytest_nvrx_qual"}
    # and the docs call it by that name (`-p no:NAME` takes it)
    assert "registered as the `pytest11` entry point `pytest_nvrx_qual`" in " ".join(plugin_section().split())


def test_the_distribution_installs_the_library_and_the_plugin_only():
    """No top-level `fixtures` (PyPI has an unrelated, widely used one, and a repository has its
    own), no recovery_tests: the suite's scaffolding stays in the checkout."""
    assert installed_top_level() == ["harness", "pytest_nvrx_qual"]


def test_a_users_repository_gets_the_fixtures_without_a_conftest(tmp_path):
    repo = tmp_path / "user-repo"
    repo.mkdir()
    (repo / "test_mine.py").write_text("def test_uses_the_plugin(work_dir, run_allocator, qual_run):\n"
                                       "    assert work_dir.is_dir() and callable(qual_run)\n")
    env = installed(tmp_path / "site", entry_points())
    proc = pytest_in(repo, env, "-q", "test_mine.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
    helped = pytest_in(repo, env, "--help")
    assert "--work-dir" in helped.stdout and "--repeat" in helped.stdout
    # the suite's own options are not the plugin's
    assert "--deadline-profile" not in helped.stdout and "--launch-slots" not in helped.stdout
    # without entry points, the same repository has no such fixture: the test can fail (autoload
    # off, since where nvrx-qual is really installed, as by tools/bootstrap, its entry point is
    # on the path too)
    bare_env = {**installed(tmp_path / "bare", {}), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    bare = pytest_in(repo, bare_env, "-q", "test_mine.py")
    assert bare.returncode != 0 and "fixture 'work_dir' not found" in bare.stdout


def documented_fixtures() -> set[str]:
    """The names in the first column of the fixture table of docs/testing.md's plugin section."""
    rows = [line.split("|")[1] for line in plugin_section().splitlines() if line.startswith("| `")]
    return {name for cell in rows for name in re.findall(r"`([a-z_]+)`", cell)}


def plugin_fixtures(listing: str) -> set[str]:
    """The fixtures `pytest --fixtures` lists as the plugin's."""
    section = listing.split("fixtures defined from pytest_nvrx_qual", 1)[1].split("\n---", 1)[0]
    return set(re.findall(r"^([a-z][a-z_]*)\b.* -- ", section, flags=re.M))


def test_the_documented_fixtures_are_the_plugins(tmp_path):
    """docs/testing.md names every fixture the plugin gives a user's repository and no other
    (`nvrx_target` is a parameter the plugin gives, not a fixture function)."""
    repo = tmp_path / "user-repo"
    repo.mkdir()
    (repo / "pytest.ini").write_text("[pytest]\n")
    listing = pytest_in(repo, installed(tmp_path / "site", entry_points()), "--fixtures")
    assert listing.returncode == 0, listing.stdout[-3000:] + listing.stderr[-2000:]
    assert plugin_fixtures(listing.stdout) | {"nvrx_target"} == documented_fixtures(), listing.stdout[-4000:]


def test_this_checkouts_conftest_and_the_entry_point_register_it_once(tmp_path):
    env = installed(tmp_path / "site", entry_points())
    proc = pytest_in(ROOT, env, "-q", "--co", "recovery_tests/test_exitcodes.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "already registered" not in proc.stdout + proc.stderr
