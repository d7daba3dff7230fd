"""Goodput and the badput split (harness.judge.goodput, docs/goodput.md) on built run directories
whose every figure is known by construction: recovery_tests.rundirs writes each line at a
chosen time (steps of 200 ms, a loop blocked 100 ms in every save) and records the true times,
and each expected part below is computed from those times by the partition of the wall time
the builder made, not by the code under test's formula."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from fixtures.launching import launches

from harness.judge import criteria, goodput
from harness.read.history import read_run
from harness.vocab.verdict import GOODPUT_PARTS, Goodput, Verdict
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

STEP = 0.2
STALL = 0.1
ONE = Scenario(microsecond_datetimes=True, save_stall_ms=100)
TWO = Scenario(second_failure_at=17, second_injection=True, second_marker=True, moment="in-restore",
               microsecond_datetimes=True, save_stall_ms=100)


def _judge(run_dir: Path, baseline: Path | None = None) -> Goodput:
    tl = read_run(run_dir, inspect_checkpoints=False, progress=False).timeline
    base = read_run(baseline, inspect_checkpoints=False, progress=False).timeline if baseline is not None else None
    return goodput.compute(tl, criteria.analyze(tl).episodes, base)


def _close(actual: float | None, expected: float) -> bool:
    return actual is not None and math.isclose(actual, expected, abs_tol=1e-6)


def _assert_adds_up(g: Goodput) -> None:
    assert g.wall_s is not None and g.productive_s is not None
    assert _close(sum(v for _, v in g.badput_s if v is not None), g.wall_s - g.productive_s)


def test_one_fault_every_part_is_the_constructed_one(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", ONE)
    t, f = built.times, built.facts
    g = _judge(built.run_dir)
    wall = t["launch_ended_at"] - t["launch_started_at"]
    # the builder's partition: startup | 11 steps + 2 stalls | rest | detection | restart | restore | rest
    # (warm-up) | 20 steps + 3 stalls | the final save's stall | rest (shutdown)
    expected = {
        "startup": t["first_line_0"] - STEP - t["launch_started_at"],
        "detection": t["detected_at"] - t["injected_at"],
        "restart": t["workers_started_at"] - t["detected_at"],
        "restore": t["checkpoint_loaded_at"] - t["workers_started_at"],
        "redone": (f["last_before_fault"] - f["restored"]) * STEP,
        "save_stall": 6 * STALL,  # saves at 5, 10, 15, 20, 25, 30
        "rest": ((t["injected_at"] - t["last_line_0"]) + (t["first_line_1"] - STEP - t["checkpoint_loaded_at"])
                 + (t["launch_ended_at"] - t["last_line_1"] - STALL)),
    }
    assert _close(g.step_s, STEP)
    assert g.useful_iterations == 30 and _close(g.productive_s, 30 * STEP)
    assert _close(g.wall_s, wall)
    assert g.ratio == round(30 * STEP / wall, 4) and g.reason is None
    for part, value in expected.items():
        assert _close(g.part(part), value), (part, g.part(part), value)
    _assert_adds_up(g)
    (ep,) = g.per_episode
    assert ep.redone_iterations == 1 and ep.reason is None
    for part in ("detection", "restart", "restore", "redone"):
        assert _close(ep.part(part), expected[part]), part


def test_two_faults_each_episode_has_its_own_figures(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", TWO)
    t, f = built.times, built.facts
    g = _judge(built.run_dir)
    first = {"detection": t["detected_at"] - t["injected_at"], "restart": t["workers_started_at"] - t["detected_at"],
             "restore": t["checkpoint_loaded_at"] - t["workers_started_at"],
             "redone": (f["last_before_fault"] - f["restored"]) * STEP}
    second = {"detection": t["detected_at_2"] - t["injected_at_2"],
              "restart": t["workers_started_at_2"] - t["detected_at_2"],
              "restore": t["checkpoint_loaded_at_2"] - t["workers_started_at_2"],
              "redone": (f["last_before_fault_2"] - f["restored_2"]) * STEP}
    one, two = g.per_episode
    assert (one.number, one.cycle, two.number, two.cycle) == (1, 0, 2, 1)
    assert (one.redone_iterations, two.redone_iterations) == (1, 2)
    for part in first:
        assert _close(one.part(part), first[part]), part
        assert _close(two.part(part), second[part]), part
        assert _close(g.part(part), first[part] + second[part]), part
    # 33 steps trained (1..11, 11..17, 16..30), 30 useful; 6 saves (5, 10 | 15 | 20, 25, 30)
    assert g.useful_iterations == 30 and _close(g.productive_s, 30 * STEP)
    assert _close(g.part("save_stall"), 6 * STALL)
    assert _close(g.part("startup"), t["first_line_0"] - STEP - t["launch_started_at"])
    rest = ((t["injected_at"] - t["last_line_0"]) + (t["first_line_1"] - STEP - t["checkpoint_loaded_at"])
            + (t["injected_at_2"] - t["last_line_1"]) + (t["first_line_2"] - STEP - t["checkpoint_loaded_at_2"])
            + (t["launch_ended_at"] - t["last_line_2"] - STALL))
    assert _close(g.part("rest"), rest)
    wall = t["launch_ended_at"] - t["launch_started_at"]
    assert g.ratio == round(30 * STEP / wall, 4)
    _assert_adds_up(g)


def test_with_a_baseline_an_iteration_is_priced_at_the_baselines_step(tmp_path: Path):
    """The twin ran its steps in 100 ms: the run's slower steps are badput (in rest), and the
    useful and re-done iterations are priced at 100 ms."""
    built = rundirs.build(tmp_path / "run", ONE)
    twin = rundirs.build(tmp_path / "twin", Scenario(fault="none", microsecond_datetimes=True, save_stall_ms=100,
                                                     step_ms=100))
    own = _judge(built.run_dir)
    g = _judge(built.run_dir, twin.run_dir)
    assert _close(g.step_s, 0.1) and "baseline" in (g.step_source or "")
    assert _close(g.productive_s, 3.0) and _close(g.part("redone"), 0.1)
    # the same time, priced otherwise: startup grows by the 100 ms of the first step's price, rest
    # by the 30 + 1 (useful, re-done) iterations' 100 ms each less that
    assert _close(g.part("startup"), own.part("startup") + 0.1)
    assert _close(g.part("rest"), own.part("rest") + 31 * 0.1 - 0.1)
    assert g.baseline_ratio is not None and 0 < g.baseline_ratio < 1
    _assert_adds_up(g)
    assert any("not equally loaded" in n for n in g.notes)


def test_without_a_baseline_goodput_is_computed_from_the_run_alone(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", ONE)
    verdict = verify_run(built.run_dir, picture=False)
    doc = verdict.to_json()["goodput"]
    assert set(doc) == {"ratio", "wall_s", "productive_s", "badput_s", "per_episode", "reason"}
    assert set(doc["badput_s"]) == set(GOODPUT_PARTS)
    assert doc["ratio"] == _judge(built.run_dir).ratio and doc["reason"] is None
    assert any("no baseline" in n for n in verdict.goodput.notes)
    # verdict.json round trip, and goodput decides nothing
    assert Verdict.from_json(json.loads(json.dumps(verdict.to_json()))).to_json() == verdict.to_json()
    assert verdict.qualified


def test_a_missing_model_built_stamp_makes_restore_unknown_and_its_time_rest(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", ONE)
    full = _judge(built.run_dir)
    log = built.run_dir / "logs/train_cycle_cycle1.log"
    log.write_text("".join(line for line in log.read_text().splitlines(True)
                           if "learning rate scheduler are built" not in line))
    g = _judge(built.run_dir)
    assert g.part("restore") is None and g.per_episode[0].part("restore") is None
    assert "restore" in (g.per_episode[0].reason or "") and dict(g.part_reasons).get("restore")
    assert g.ratio == full.ratio
    assert _close(g.part("rest"), full.part("rest") + full.part("restore"))
    _assert_adds_up(g)


def test_no_launch_record_takes_the_span_of_the_stamps_and_says_so(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", Scenario(microsecond_datetimes=True, save_stall_ms=100, launch_json=False))
    g = _judge(built.run_dir)
    assert g.ratio is not None and g.wall_s is not None
    assert g.wall_s < built.times["launch_ended_at"] - built.times["launch_started_at"]
    assert any("no launch.json" in n for n in g.notes)
    _assert_adds_up(g)


def test_no_iteration_lines_leave_the_ratio_unknown_with_its_reason(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", ONE)
    for log in (built.run_dir / "logs").glob("train_cycle_cycle*.log"):
        log.write_text("".join(line for line in log.read_text().splitlines(True) if " iteration " not in line
                               or "checkpoint" in line))
    g = _judge(built.run_dir)
    assert g.ratio is None and g.productive_s is None
    assert "step time is unknown" in (g.reason or "")
    assert g.per_episode[0].part("redone") is None  # cannot be priced


@pytest.mark.parametrize("edit, why", [
    (lambda d: d.update(ended_at="2026-11-29T16:31:00.000Z"), "lasted"),  # ends before it starts
    (lambda d: d.update(ended_at="2026-11-29T16:32:00.000Z"), "longer than the whole launch"),  # 100 ms
])
def test_hostile_launch_times_give_no_ratio(tmp_path: Path, edit, why):
    built = rundirs.build(tmp_path / "run", ONE)
    path = built.run_dir / "launch.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    g = _judge(built.run_dir)
    assert g.ratio is None and why in (g.reason or "")


def test_an_impossible_launch_time_is_not_believed(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", ONE)
    path = built.run_dir / "launch.json"
    doc = json.loads(path.read_text())
    doc["started_at"] = "9999-01-01T00:00:00.000Z"
    path.write_text(json.dumps(doc))
    g = _judge(built.run_dir)
    assert any("no usable started_at" in n for n in g.notes)  # the stamps' span instead, said so
    assert g.wall_s is not None and g.wall_s < built.times["launch_ended_at"] - built.times["launch_started_at"]


def test_a_forged_iteration_stamp_gives_no_ratio(tmp_path: Path):
    """A last iteration line stamped in 2150 (a year history accepts) would make a step last years."""
    built = rundirs.build(tmp_path / "run", ONE)
    log = built.run_dir / "logs/train_cycle_cycle1.log"
    lines = log.read_text().splitlines(True)
    i = max(n for n, line in enumerate(lines) if "iteration       30/" in line)
    lines[i] = re.sub(r"\[2026-", "[2150-", lines[i], count=1)
    log.write_text("".join(lines))
    g = _judge(built.run_dir)
    assert g.ratio is None and "not one a training step takes" in (g.reason or "")


def test_a_save_stamped_before_it_began_makes_save_stall_unknown(tmp_path: Path):
    built = rundirs.build(tmp_path / "run", ONE)
    log = built.run_dir / "logs/train_cycle_cycle0.log"
    text = log.read_text()
    line = next(l for l in text.splitlines() if "scheduled an async checkpoint save at iteration       5" in l)
    log.write_text(text.replace(line, re.sub(r"\[2026-11-29", "[2026-11-28", line)))
    g = _judge(built.run_dir)
    assert g.part("save_stall") is None and "no save takes" in dict(g.part_reasons)["save_stall"]
    assert g.ratio is not None
    _assert_adds_up(g)


@pytest.mark.parametrize("stored", [
    {"ratio": 1e308, "wall_s": "x", "badput_s": {"rest": float("nan")}, "per_episode": "no"},
    {"ratio": 7.5, "wall_s": -1e400, "productive_s": True, "badput_s": [], "per_episode": [{"badput_s": 3}]},
    {"ratio": -0.1, "reason": 42},
])
def test_a_strangers_goodput_section_reads_as_unknown(stored):
    g = Goodput.from_json(stored)
    assert g.ratio is None and g.reason is None
    assert all(v is None or math.isfinite(v) for _, v in g.badput_s)
    assert g.wall_s is None or math.isfinite(g.wall_s)
    for e in g.per_episode:
        assert all(v is None for _, v in e.badput_s)


def test_a_marker_stamped_after_the_detection_makes_detection_unknown(tmp_path: Path):
    """A marker 5 s later than the launcher's record of the failure: detection would be negative."""
    built = rundirs.build(tmp_path / "run", ONE)
    full = _judge(built.run_dir)
    path = built.run_dir / "fault_injected.json"
    doc = json.loads(path.read_text())
    doc["injected_at"] = rundirs._Clock.iso(int(built.times["detected_at"] * 1000) + 5000)
    path.write_text(json.dumps(doc))
    g = _judge(built.run_dir)
    (ep,) = g.per_episode
    assert ep.part("detection") is None and "clocks" in (ep.reason or "")
    assert g.part("detection") is None and _close(g.part("restart"), full.part("restart"))
    assert g.ratio == full.ratio
    _assert_adds_up(g)


def test_report_picture_and_console_show_every_fault_and_the_split(tmp_path: Path):
    from harness.cli.terminal import goodput_line
    from harness.report.outputs import render_report

    built = rundirs.build(tmp_path / "run", TWO)
    verdict = verify_run(built.run_dir, picture=True)
    g = verdict.goodput
    text = render_report(verdict)
    section = text[text.index("## Goodput"):text.index("## Evidence")]
    assert f"**Goodput {100 * g.ratio:.1f} %**" in section
    for part in ("start-up", "detection", "restart", "restore", "re-done iterations", "checkpoint save stalls", "rest"):
        assert f"| {part}" in section, part
    assert "| 1 of 2 | after-commit | 0 |" in section and "| 2 of 2 | in-restore | 1 |" in section
    band = verdict.picture.goodput
    assert band is not None and f"goodput {100 * g.ratio:.1f} %" in band.label
    labels = [s.label for s in band.segments]
    for part in ("detection", "restart", "restore"):  # every recovery, not only the last
        assert labels.count(part) == 2, part
    assert labels.count("startup") == 1 and labels.count("save_stall") == 6
    line = goodput_line(g)
    top = max(((p, v) for p, v in g.badput_s if v is not None), key=lambda pv: pv[1])
    assert "\n" not in line and f"{100 * g.ratio:.1f} %" in line and f"{top[0]} {top[1]:.2f} s" in line
    (tmp_path / "out").mkdir()
    from harness.report.picture import draw
    pytest.importorskip("matplotlib")
    assert draw(verdict.picture, tmp_path / "out" / "timeline.png").stat().st_size > 0


def test_a_crash_in_the_pricing_is_no_verdict(tmp_path: Path, monkeypatch):
    built = rundirs.build(tmp_path / "run", ONE)
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(goodput, "compute", broken)
    verdict = verify_run(built.run_dir, picture=False)
    assert verdict.qualified and verdict.goodput.ratio is None
    assert "ZeroDivisionError" in verdict.goodput.reason


def _real_kill(nvrx_target):
    from pytest_nvrx_qual.runs import Scenario as Launched

    return Launched("kill", nvrx_target, baseline=Launched("none", nvrx_target))


@pytest.mark.e2e
@launches(_real_kill)
def test_a_real_reference_kill_has_every_part_and_they_add_up(nvrx_target, scenarios):
    """A real run (the same launch as test_recovery_cpu's kill): every part is measured, the
    recovery's parts are the metrics' latencies, and the step is priced at the baseline's."""
    outcome = scenarios.outcome(_real_kill(nvrx_target))
    g, m = outcome.verdict.goodput, outcome.verdict.metrics
    assert g is not None and g.ratio is not None and 0 < g.ratio < 1, g
    assert all(v is not None and v >= 0 for p, v in g.badput_s if p != "rest"), g.badput_s
    _assert_adds_up(g)
    (ep,) = g.per_episode
    for part in ("detection", "restart", "restore"):
        assert _close(ep.part(part), getattr(m, f"{part}_s")), part
    assert ep.redone_iterations == m.lost_iterations
    assert "baseline" in (g.step_source or "") and g.baseline_ratio is not None
    doc = json.loads((outcome.run_dir / "verdict.json").read_text())["goodput"]
    assert doc["ratio"] == g.ratio


def test_a_load_the_next_fault_cut_is_restore_until_that_fault(tmp_path: Path):
    """The first replacement never finished its load (its `successfully loaded` line is gone):
    its restore lasted from its workers' start to the second fault's injection."""
    built = rundirs.build(tmp_path / "run", TWO)
    t = built.times
    log = built.run_dir / "logs/train_cycle_cycle1.log"
    log.write_text("".join(line for line in log.read_text().splitlines(True)
                           if "successfully loaded checkpoint" not in line))
    g = _judge(built.run_dir)
    one, two = g.per_episode
    assert _close(one.part("restore"), t["injected_at_2"] - t["workers_started_at"])
    assert _close(two.part("restore"), t["checkpoint_loaded_at_2"] - t["workers_started_at_2"])
    tl = read_run(built.run_dir, inspect_checkpoints=False, progress=False).timeline
    spans = goodput.compute(tl, criteria.analyze(tl).episodes).spans
    assert ("restore", t["workers_started_at"], t["injected_at_2"]) in [(p, round(a, 3), round(b, 3)) for p, a, b in spans]
    _assert_adds_up(g)
