"""The documented test commands leave in the temporary directory only the directories of the
tests that failed (issue 32, item 5): the project's own pytest configuration says so
(pyproject.toml, tmp_path_retention_policy = "failed"), not only `.ci/run`'s command line.

Each test runs an inner pytest session under this project's configuration file, with pytest's
temporary root moved into tmp_path (PYTEST_DEBUG_TEMPROOT), and looks at what it left there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

INNER = """
import pytest

BIG = b"x" * (1 << 20)


def test_passes_and_writes(tmp_path):
    (tmp_path / "passed.bin").write_bytes(BIG)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    path = tmp_path_factory.mktemp("shared")
    (path / "module.bin").write_bytes(BIG)
    return path


def test_uses_a_module_directory(shared):
    assert (shared / "module.bin").exists()
"""

FAILING = """

def test_fails_and_writes(tmp_path):
    (tmp_path / "failed.bin").write_bytes(BIG)
    assert False, "meant to fail"
"""


def inner_session(tmp_path: Path, source: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run `source` as a test module under this project's pytest configuration (its
    pyproject.toml); pytest's temporary root is a new folder in tmp_path."""
    tests = tmp_path / "inner"
    tests.mkdir()
    (tests / "test_inner.py").write_text(source)
    temproot = tmp_path / "temproot"
    temproot.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env["PYTEST_DEBUG_TEMPROOT"] = str(temproot)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tests), str(tests / "test_inner.py")],
                          capture_output=True, text=True, env=env, cwd=tests, timeout=300,
                          stdin=subprocess.DEVNULL)
    return proc, temproot


def left(temproot: Path) -> list[str]:
    return sorted(str(p.relative_to(temproot)) for p in temproot.rglob("*") if p.is_file() or p.is_symlink())


def test_a_passing_session_leaves_no_file_in_the_temporary_directory(tmp_path):
    proc, temproot = inner_session(tmp_path, INNER)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert left(temproot) == [], "pytest kept the directories of passing tests: " + ", ".join(left(temproot))


def test_a_failing_session_keeps_the_failed_tests_directory_only(tmp_path):
    proc, temproot = inner_session(tmp_path, INNER + FAILING)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    kept = left(temproot)
    assert any(k.endswith("failed.bin") for k in kept), kept
    assert not any(k.endswith("passed.bin") for k in kept), kept
