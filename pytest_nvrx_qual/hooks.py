"""The hooks nvrx-qual's pytest plugin calls (pytest_nvrx_qual adds them in pytest_addhooks)."""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_nvrx_qual_runner(runner) -> None:
    """The session's ScenarioRunner (pytest_nvrx_qual.runs), called once as the first test that
    needs launched scenarios asks for it: a plugin may give it launch slots, a callback per
    launch and per scenario asked, and launch declared scenarios ahead (this checkout's own
    suite does: fixtures/launching.py)."""
