"""Fixtures of the suite's own tests (the suite's plugin is fixtures/plugin.py, built on the
installable plugin pytest_nvrx_qual)."""

from __future__ import annotations

import importlib
import os
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Modules that an in-process pytest session (pytester.runpytest_inprocess) of the plugin imports
# and that cannot be imported a second time in one process. Pytester restores sys.modules after
# every in-process session, dropping each module first imported inside it; the next import of
# torch then runs the initialisation of its C extension (torch._C) again, which corrupts the
# interpreter: a SystemError ("bad call flags") that harness/read/history.py reads as "PyTorch is not
# importable here", then SIGSEGV in that import or in pytest's final garbage collection.
# Imported before pytester takes its snapshot, they stay loaded across sessions.
NOT_REIMPORTABLE = ("torch", "torch.distributed.checkpoint")


@pytest.fixture(scope="session")
def not_reimportable_modules() -> tuple[str, ...]:
    """NOT_REIMPORTABLE, imported (those that are installed): session scope, so before any pytester."""
    loaded = []
    for name in NOT_REIMPORTABLE:
        try:
            with warnings.catch_warnings():  # torch's import-time warnings (pynvml) are not the test's
                warnings.simplefilter("ignore")
                importlib.import_module(name)
        except ImportError:  # absent: then nothing imports it twice either
            continue
        loaded.append(name)
    return tuple(loaded)


@pytest.fixture
def pytester(not_reimportable_modules: tuple[str, ...], pytester: pytest.Pytester,
             monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's pytester, taking its sys.modules snapshot only after NOT_REIMPORTABLE are loaded.
    Its sessions in a process of their own (runpytest_subprocess) find this checkout's fixtures/
    and recovery_tests/, which are not installed, on PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    return pytester
