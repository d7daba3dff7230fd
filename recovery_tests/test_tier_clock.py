"""The tiers' clocks of one session (fixtures/tier_clock.py): .ci/run runs both tiers in one
pytest session and prints each one's span from the reports every worker sends the controller."""

from __future__ import annotations

from types import SimpleNamespace

from fixtures import tier_clock
from fixtures.tier_clock import LAUNCH, QUICK, TierClock


def report(nodeid: str, start: float, stop: float, *markers: str):
    return SimpleNamespace(nodeid=nodeid, start=start, stop=stop, keywords={nodeid: 1, **{m: 1 for m in markers}})


def test_a_test_is_of_the_launch_tier_by_its_launch_or_slow_marker():
    assert tier_clock.tier_of({"test_x": 1, "launch": 1}) == LAUNCH
    assert tier_clock.tier_of({"slow": 1}) == LAUNCH
    assert tier_clock.tier_of({"e2e": 1, "fuzz": 1}) == QUICK  # e2e alone launches no NVRx


def test_each_tier_spans_its_first_start_to_its_last_stop_and_the_overlap_is_said():
    clock = TierClock(clock=lambda: 100.0)
    for r in (report("a.py::q1", 100.5, 101.0), report("a.py::q1", 101.0, 101.2),  # setup, call of one test
              report("b.py::l1", 101.0, 160.0, "launch"), report("c.py::q2", 150.0, 170.0),
              report("d.py::s1", 170.0, 200.0, "slow")):
        clock.add(r)
    assert clock.spans == {QUICK: [100.5, 170.0], LAUNCH: [101.0, 200.0]}
    assert clock.overlap() == 69.0
    assert clock.line() == ("quick tier 70 s (2 tests, 0-70 s of the session); launch tier 99 s (2 tests, "
                            "1-100 s of the session); side by side for 69 s")


def test_one_tier_alone_and_reports_without_times():
    clock = TierClock(clock=lambda: 0.0)
    clock.add(SimpleNamespace(nodeid="x", keywords={}))  # a report that carries no times: not counted
    clock.add(report("a.py::q", 1.0, 3.0))
    assert clock.line() == "quick tier 2 s (1 tests, 1-3 s of the session)"
    assert clock.overlap() == 0.0


def test_the_line_is_written_where_ci_asks_never_through_a_link(tmp_path, monkeypatch):
    target = tmp_path / "times.txt"
    monkeypatch.setenv(tier_clock.TIER_TIMES_ENV, str(target))
    clock = TierClock(clock=lambda: 0.0)
    clock.add(report("a.py::q", 1.0, 3.0))
    clock.pytest_sessionfinish()
    assert target.read_text() == "quick tier 2 s (1 tests, 1-3 s of the session)\n"
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("the user's\n")
    target.unlink()
    target.symlink_to(elsewhere)
    clock.pytest_sessionfinish()
    assert elsewhere.read_text() == "the user's\n"
    assert clock.unwritten is not None and "not written" in clock.unwritten
