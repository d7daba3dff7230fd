"""The GPU workflow (.github/workflows/) is checked here, because it only runs on self-hosted GPU
runners and its mistakes would surface late: `actionlint` (syntax, expressions, the shell of each
step) and `zizmor` (GitHub Actions security: template injection, credentials persisted by
checkout, unpinned or over-privileged steps). Both come with the `dev` extra
(pip install -e '.[dev]'; .ci/run installs it); without them the test is skipped, saying so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed: pip install -e '.[dev]' (the dev extra; .ci/run installs it)")
    return found


def test_there_is_a_workflow_to_check():
    assert WORKFLOWS, ".github/workflows/*.yml"


def test_actionlint_finds_nothing():
    proc = subprocess.run([tool("actionlint"), "-no-color", *map(str, WORKFLOWS)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_finds_nothing():
    proc = subprocess.run([tool("zizmor"), "--offline", "--no-progress", *map(str, WORKFLOWS)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
