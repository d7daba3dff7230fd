"""timeline.png: the data it shows (pure, from realistic run directories), the picture
itself (size, colours of each cycle and of the injection, not blank), its place in
report.md, the 100,000-iteration case, and verify without matplotlib."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.read import history
from harness.report import picture, verify
from harness.cli import main as cli_main
from harness.vocab.events import ProgressPoint
from harness.read.history import PROGRESS_SAMPLES, read_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario


def _hex(colour: str) -> tuple[float, float, float]:
    return tuple(int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


def _pixels_near(image, colour: str, tol: float = 0.06) -> int:
    import numpy

    rgb = numpy.asarray(_hex(colour))
    return int((numpy.abs(image[:, :, :3] - rgb) <= tol).all(axis=2).sum())


def _png(path: Path):
    from matplotlib.image import imread

    return imread(path)


# ---------------------------------------------------------------- the data (no matplotlib needed)


def test_picture_data_of_a_recovery_matches_the_run(tmp_path: Path):
    built = rundirs.build(tmp_path / "kill", Scenario())
    verdict = verify.verify_run(built.run_dir)
    p = verdict.picture
    assert p is not None and p.has_recovery
    assert [c.cycle for c in p.curves] == [0, 1]
    # every iteration line of this short run is on the curve, the restart re-does iteration 11
    assert [q.iteration for q in p.curves[0].points] == list(range(1, 12))
    assert [q.iteration for q in p.curves[1].points] == list(range(11, 31))
    assert [m.iteration for m in p.checkpoints] == [5, 10, 15, 20, 25, 30] and p.checkpoints_committed == 6
    assert [m.cycle for m in p.checkpoints] == [0, 0, 1, 1, 1, 1]
    t = built.times
    expected = {"injected": t["injected_at"], "detected": t["detected_at"], "started": t["workers_started_at"],
                "loaded": verdict.metrics.checkpoint_loaded_at, "first_step": t["first_step_at"]}
    assert {m.key: m.t for m in p.moments} == pytest.approx(expected, abs=1e-3)
    m = verdict.metrics
    assert {s.label: s.seconds for s in p.segments} == pytest.approx(
        {"detection": m.detection_s, "restart": m.restart_s, "restore": m.restore_s, "first step": m.first_step_s})
    assert p.recovery_s == pytest.approx(5.12)
    assert "QUALIFIED" in p.title and "kill (SIGKILL) on rank 1 after checkpoint 10" in p.subtitle


def test_picture_of_a_failed_run_names_what_did_not_hold(tmp_path: Path):
    run = rundirs.build(tmp_path / "random", Scenario(restart_from_random=True)).run_dir
    p = verify.verify_run(run).picture
    assert p is not None and p.title.endswith("NOT QUALIFIED")
    assert "did not hold: optimizer_reload" in p.subtitle
    assert p.curves[1].points[0].iteration == 1  # the replacement started from scratch, as drawn
    assert "loaded" not in {m.key for m in p.moments}  # no load: no moment and no restore bar, never guessed
    assert [s.label for s in p.segments] == ["detection", "restart"]


def test_uninterrupted_run_has_no_recovery_to_draw(tmp_path: Path):
    p = verify.verify_run(rundirs.build(tmp_path / "none", Scenario(fault="none")).run_dir).picture
    assert p is not None and not p.has_recovery and p.moments == () and p.segments == ()
    assert len(p.curves) == 1 and "no fault" in p.subtitle


def test_single_user_log_splits_the_curve_at_its_starts(tmp_path: Path):
    """A user's sbatch run: one un-prefixed log holding both starts; each sampled line goes
    to the start whose time span holds it."""
    run = rundirs.build(tmp_path / "single", Scenario(nvrx="0.4.1", per_cycle_logs=False)).run_dir
    curves = read_run(run).progress
    assert [q.iteration for q in curves[0]] == list(range(1, 12))
    assert [q.iteration for q in curves[1]] == list(range(11, 31))


def test_time_at_interpolates_between_samples_and_clamps():
    pts = [ProgressPoint(10, 100.0), ProgressPoint(20, 200.0)]
    assert picture._time_at(pts, 15) == pytest.approx(150.0)
    assert picture._time_at(pts, 5) == 100.0 and picture._time_at(pts, 25) == 200.0
    assert picture._time_at([], 1) is None


def test_checkpoint_marks_thin_evenly_and_keep_the_restored_one():
    marks = [picture.CheckpointMark(i * 10, float(i), 0) for i in range(1, 201)]  # 200 saves
    shown = picture._thin(marks, keep={1230}, limit=60)
    stride = 4  # the smallest whole stride that shows at most 60 of 200
    assert [m.iteration for m in shown if m.iteration != 1230] == [m.iteration for m in marks[::stride]]
    assert 1230 in {m.iteration for m in shown} and len(shown) == 51
    assert picture._thin(marks[:5], keep=set(), limit=60) == marks[:5]


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> rundirs.Built:
    """100,000 iterations at 200 ms (5.5 h), a checkpoint every 1,000, killed after 50,000."""
    return rundirs.build(tmp_path_factory.mktemp("long") / "run",
                         Scenario(train_iters=100_000, save_interval=1000, fault_at=50_000, checkpoints=False))


def test_long_run_curve_is_sampled_and_bounded(long_run):
    read = read_run(long_run.run_dir)
    timeline, curves = read.timeline, read.progress
    assert len(curves) == 2
    for start, curve in zip(timeline.starts, curves):
        its = [q.iteration for q in curve]
        assert len(curve) <= PROGRESS_SAMPLES + 2
        assert len(curve) > PROGRESS_SAMPLES // 2  # a real curve, not two end points
        assert its == sorted(its)  # one start never goes back
        assert (its[0], its[-1]) == (start.first_iteration.iteration, start.last_iteration.iteration)
    assert curves[0][-1].iteration == 50_001 and curves[1][0].iteration == 50_001


def test_long_run_picture_thins_checkpoints_and_keeps_the_recovery(long_run):
    verdict = verify.verify_run(long_run.run_dir)
    p = verdict.picture
    assert p.checkpoints_committed == 100 and len(p.checkpoints) <= picture.MAX_CHECKPOINT_MARKS + 1
    assert 50_000 in {m.iteration for m in p.checkpoints}  # the one the recovery loaded
    assert p.recovery_s == pytest.approx(5.12) and len(p.segments) == 4


# ---------------------------------------------------------------- the PNG


@pytest.mark.parametrize("scenario", [Scenario(), Scenario(fault="hang"), Scenario(nvrx="0.4.1"),
                                      Scenario(restart_from_random=True)],
                         ids=["kill-0.7.0", "hang-0.7.0", "kill-0.4.1", "restart-from-random"])
def test_verify_draws_timeline_png_and_embeds_it(tmp_path: Path, scenario: Scenario):
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    run = rundirs.build(tmp_path / "run", scenario).run_dir
    verdict = verify.verify_run(run, write=True)
    png = run / picture.FILE_NAME
    image = _png(png)
    width, height = (round(v * picture.DPI) for v in picture.FIGSIZE_IN)
    assert image.shape[:2] == (height, width)
    ink = (image[:, :, :3] < 0.9).any(axis=2).mean()
    assert ink > 0.04, f"only {ink:.1%} of the picture is not white"
    assert _pixels_near(image, "#1f77b4") > 200  # cycle 0's curve
    assert _pixels_near(image, "#ff7f0e") > 200  # cycle 1's curve
    assert _pixels_near(image, "#d62728") > 300  # the injection line(s)
    assert _pixels_near(image, "#b2abd2") > 500  # the restart bar of the latency split
    report = (run / "report.md").read_text()
    picture_at, criteria_at = report.index("](timeline.png)"), report.index("## Criteria")
    assert picture_at < criteria_at  # first the picture, then the criteria table
    assert verdict.qualified == (not scenario.restart_from_random)


def test_long_run_png_is_drawn(long_run):
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    verify.verify_run(long_run.run_dir, write=True)
    image = _png(long_run.run_dir / picture.FILE_NAME)
    assert _pixels_near(image, "#1f77b4") > 500 and _pixels_near(image, "#ff7f0e") > 500


def test_no_fault_png_is_one_panel(tmp_path: Path):
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    run = rundirs.build(tmp_path / "none", Scenario(fault="none")).run_dir
    verify.verify_run(run, write=True)
    image = _png(run / picture.FILE_NAME)
    assert _pixels_near(image, "#1f77b4") > 500
    assert _pixels_near(image, "#d62728") == 0 and _pixels_near(image, "#b2abd2") == 0  # nothing to recover


def test_verify_without_matplotlib_still_judges_and_says_so(tmp_path: Path, monkeypatch, capsys):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    run = rundirs.build(tmp_path / "run", Scenario()).run_dir
    assert cli_main(["verify", str(run)]) == 0
    err = capsys.readouterr().err
    assert "timeline.png not drawn: matplotlib is not installed" in err and "nvrx-qual[plot]" in err
    assert not (run / picture.FILE_NAME).exists()
    assert json.loads((run / "verdict.json").read_text())["qualified"] is True
    report = (run / "report.md").read_text()
    assert "_No timeline picture: matplotlib is not installed" in report and "](timeline.png)" not in report


def test_launcher_cycle_marks_show_every_failure_and_restart(tmp_path: Path):
    """A replacement that dies again: both failed cycles and both restarts are on the picture."""
    run = rundirs.build(tmp_path / "twice", Scenario(second_failure_at=15, fault="kill")).run_dir
    p = verify.verify_run(run).picture
    failed = [m.cycle for m in p.cycle_marks if m.kind == "failed"]
    started = [m.cycle for m in p.cycle_marks if m.kind == "started"]
    assert failed[:2] == [0, 1] and started[:3] == [0, 1, 2], p.cycle_marks
    assert [m.t for m in p.cycle_marks] == sorted(m.t for m in p.cycle_marks)


def test_run_summary_says_when_the_picture_is_missing(tmp_path: Path, monkeypatch, clean_spec_env):
    """`nvrx-qual run` without matplotlib: the run is judged, and its last lines say why
    there is no picture and what to install."""
    from harness.launch import runner
    from harness.cli import terminal
    from harness.plan.resolve import resolve_spec
    from harness.plan import commands as planmod
    from harness.launch.job import LaunchResult

    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    spec, target, _ = resolve_spec({"workload": "reference", "fault": "kill", "work_dir": tmp_path,
                                    "run_id": "no-picture"}, ())
    plan = planmod.build(spec, target)
    rundirs.build(plan.layout.root, Scenario())
    verdict = verify.verify_run(plan.layout.root)
    written = verify.write_outputs(verdict, plan.layout.root)
    launched = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, target.version, 0)
    text = terminal.run_outcome(runner.Outcome(plan, launched, verdict, None, written.picture_problem))
    assert "timeline.png not drawn: matplotlib is not installed" in text and "nvrx-qual[plot]" in text
    assert text.rstrip().splitlines()[-2].startswith("QUALIFIED")


def test_read_only_verify_does_not_sample_the_curve(tmp_path: Path, monkeypatch):
    """--no-write and `nvrx-qual report` draw nothing, so they skip the sampling."""
    run = rundirs.build(tmp_path / "run", Scenario()).run_dir
    sampled = []
    real = history.HistoryReader._progress
    monkeypatch.setattr(history.HistoryReader, "_progress", lambda self, tl: sampled.append(tl) or real(self, tl))
    assert cli_main(["verify", str(run), "--no-write", "--quiet"]) == 0
    assert verify.verify_run(run, picture=False).picture is None
    assert sampled == []
    assert verify.verify_run(run).picture is not None and len(sampled) == 1


def _panel(fig, title: str):
    """The axes whose left title starts with `title`."""
    return next(ax for ax in fig.axes if ax.get_title(loc="left").startswith(title))


def _legends(fig):
    return [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]


@pytest.mark.parametrize("scenario", [Scenario(), Scenario(fault="hang", nvrx="0.4.1"), Scenario(fault="none"),
                                      Scenario(restart_from_random=True)],
                         ids=["kill", "hang-0.4.1", "none", "restart-from-random"])
def test_no_legend_covers_a_panel(tmp_path: Path, scenario: Scenario):
    """Each legend stands beside the panels, so no curve, checkpoint or moment hides under it."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    run = rundirs.build(tmp_path / "run", scenario).run_dir
    fig = picture.render(verify.verify_run(run).picture)
    renderer = fig.canvas.get_renderer()
    legends = _legends(fig)
    assert legends
    for _owner, legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (ax.get_title(), box)
        assert box.x1 <= fig.bbox.x1 + 1  # and it is not cut off at the edge of the picture


def _pictures(tmp_path: Path, long_run: rundirs.Built):
    """A picture of each shape: a kill, a failed recovery (and one with three checks failed: a
    long legend entry, title and subtitle), no fault, a 5.5-hour run (and the same at a billion
    iterations: wide numbers on the iteration axes), a campaign."""
    import dataclasses

    for name, scenario in (("kill", Scenario()), ("random", Scenario(restart_from_random=True)),
                           ("none", Scenario(fault="none"))):
        p = verify.verify_run(rundirs.build(tmp_path / name, scenario).run_dir).picture
        yield name, p
        if name == "random":
            failed = ("optimizer_reload", "loss_continuity", "state_equivalence")
            yield "three failed", dataclasses.replace(p, did_not_hold=failed,
                                                      subtitle=f"{p.subtitle} · did not hold: {', '.join(failed)}")
    long = verify.verify_run(long_run.run_dir).picture
    yield "long", long
    scaled = tuple(dataclasses.replace(c, points=tuple(dataclasses.replace(q, iteration=q.iteration * 10_000)
                                                       for q in c.points)) for c in long.curves)
    yield "a billion iterations", dataclasses.replace(long, curves=scaled, checkpoints=tuple(
        dataclasses.replace(m, iteration=m.iteration * 10_000) for m in long.checkpoints))
    yield "campaign", _campaign_picture(tmp_path / "campaign")


def test_every_title_and_label_stays_inside_the_picture_and_off_the_other_panels(tmp_path: Path, long_run):
    """The titles and axis labels are wrapped to the room they have: none runs past the
    picture's edge (a label once lost both its ends there), and none lies on another panel."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    from matplotlib.text import Text

    for name, p in _pictures(tmp_path, long_run):
        fig = picture.render(p)
        renderer = fig.canvas.get_renderer()
        # each panel with everything drawn for it (title, tick labels, axis labels, legend), and the title
        boxes = [(ax.get_title(loc="left"), ax.get_tightbbox(renderer)) for ax in fig.axes]
        boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in fig.texts]
        for what, box in boxes:
            assert fig.bbox.x0 - 1 <= box.x0 and box.x1 <= fig.bbox.x1 + 1, (name, what, box)
            assert fig.bbox.y0 - 1 <= box.y0 and box.y1 <= fig.bbox.y1 + 1, (name, what, box)
        for ax in fig.axes:
            title = ax.get_title(loc="left")  # the panels' titles are set on the left
            for text in [t for t in ax.findobj(Text) if title and t.get_text() == title] + [ax.xaxis.label]:
                if not text.get_text():
                    continue
                box = text.get_window_extent(renderer)
                for other in fig.axes:
                    if other is not ax:
                        assert not box.overlaps(other.get_window_extent(renderer)), (name, text.get_text())


def _campaign_picture(tmp_path: Path, faults: int = 6):
    """A built kill's picture stretched into a campaign: `faults` faults, each starting a new
    cycle whose curve runs a few iterations past the last checkpoint (the shape of the 6-fault
    megatron-cpu campaign in CI, whose picture the legends squeezed to nothing)."""
    import dataclasses

    from harness.vocab.picture_data import Curve, Moment

    run = rundirs.build(tmp_path / "run", Scenario()).run_dir
    p = verify.verify_run(run).picture
    t0, points = p.t0, p.curves[0].points
    curves, marks = [], []
    for n in range(faults + 1):
        shift = 20.0 * n
        curves.append(Curve(n, tuple(dataclasses.replace(q, t=q.t + shift, iteration=q.iteration + 2 * n)
                                     for q in points[:8])))
        if n < faults:
            label = f"fault {n + 1} of {faults} ({('exception', 'segfault', 'gil', 'abort', 'term', 'kill')[n % 6]}, " \
                    f"{'in-save' if n % 3 == 2 else 'after-commit'})"
            marks.append(Moment("injected", label, t0 + shift + 5.0))
    # the recovery drawn is the last fault's: every moment and phase moves with it
    delta = marks[-1].t - next(m.t for m in p.moments if m.key == "injected")
    moments = tuple(dataclasses.replace(m, t=m.t + delta) for m in p.moments)
    segments = tuple(dataclasses.replace(g, start=g.start + delta, end=g.end + delta) for g in p.segments)
    return dataclasses.replace(p, curves=tuple(curves), faults=tuple(marks), moments=moments, segments=segments)


def test_a_campaign_picture_keeps_its_panels_and_numbers_its_faults_and_cycles(tmp_path: Path):
    """Six faults and seven cycles: one legend entry for the earlier faults and one for the
    cycles, numbers on the plot instead; matplotlib can lay it out (no collapsed axes) and
    every legend stays inside the picture, beside its panel."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "constrained_layout not applied because axes sizes collapsed"
        fig = picture.render(_campaign_picture(tmp_path))
    renderer = fig.canvas.get_renderer()
    top = fig.axes[0]
    labels = [t.get_text() for t in top.get_legend().get_texts()]
    assert "fault injected (numbered; 6 faults)" in labels, labels
    assert not any(label.startswith("cycle") and "failed" not in label for label in labels), labels  # on the curves
    assert max(map(len, labels)) < 90, labels
    from collections import Counter

    written = Counter(t.get_text() for t in top.texts)  # each fault's number, and each cycle's at its curve
    assert all(written[str(n)] == 2 for n in range(1, 7)) and written["0"] == 1, written
    for _owner, legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (ax.get_title(), box)
        assert box.x1 <= fig.bbox.x1 + 1
    assert top.get_window_extent(renderer).width > fig.bbox.width / 3  # the panel is not squeezed away


def test_failed_recovery_is_drawn_as_failed(tmp_path: Path):
    """A recovery that did not qualify is hatched and says FAILED; a good one is shaded."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")

    def top_spans(scenario: Scenario):
        run = rundirs.build(tmp_path / scenario_name(scenario), scenario).run_dir
        fig = picture.render(verify.verify_run(run).picture)
        top = fig.axes[0]
        labels = [" ".join(t.get_text().split()) for t in top.get_legend().get_texts()]  # a long one is wrapped
        return [(p.get_hatch(), p.get_facecolor()) for p in top.patches if p.get_hatch() or p.get_alpha()], labels, fig

    def scenario_name(s: Scenario) -> str:
        return "random" if s.restart_from_random else "good"

    spans, labels, fig = top_spans(Scenario(restart_from_random=True))
    assert [hatch for hatch, _ in spans] == ["//"], spans
    assert "recovery FAILED: optimizer_reload did not hold" in labels
    assert not any(label.startswith("recovery:") for label in labels)
    assert "FAILED" in _panel(fig, "recovery window").get_title(loc="left")
    spans, labels, _ = top_spans(Scenario())
    assert [hatch for hatch, _ in spans] == [None] and any(label.startswith("recovery:") for label in labels)


def test_the_whole_run_axis_starts_where_the_console_does(tmp_path: Path):
    """The console counts from the launch's start; so does the picture (launch.json's started_at),
    not from the first record a second later. Without launch.json: the first record."""
    run = rundirs.build(tmp_path / "run", Scenario()).run_dir
    started = history.parse_iso_utc(json.loads((run / "launch.json").read_text())["started_at"])
    p = verify.verify_run(run).picture
    first = min(pt.t for c in p.curves for pt in c.points)
    assert started is not None and started < first
    assert p.origin == started and p.t0 == started
    (run / "launch.json").unlink()
    q = verify.verify_run(run).picture
    assert q.origin is None and q.t0 == min(q._times())


def test_values_beyond_a_float_are_left_out_of_the_picture(tmp_path: Path):
    """History bounds what it parses; the picture keeps its own guard: a point whose iteration
    no float holds or whose time is not finite is not drawn (matplotlib would overflow)."""
    from harness.judge import criteria, metrics

    read = read_run(rundirs.build(tmp_path / "kill", Scenario()).run_dir)
    tl = read.timeline
    analysis = criteria.analyze(tl)
    results = criteria.evaluate(tl, analysis, None)
    t0 = read.progress[0][0].t
    odd = (ProgressPoint(10 ** 400, t0 + 1), ProgressPoint(12, float("inf")), ProgressPoint(13, float("nan")))
    progress = (tuple(read.progress[0]) + odd, *read.progress[1:])
    p = picture.build(tl, analysis, metrics.compute(tl, analysis), results, progress, criteria.qualified(results))
    assert [q.iteration for q in p.curves[0].points] == list(range(1, 12))
    picture.draw(p, tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 0


# ---------------------------------------------------------------- what the picture says (real runs)


REAL = ("reference-kill", "reference-hang", "reference-campaign")


@pytest.mark.parametrize("name", REAL)
def test_the_picture_says_what_it_shows(name):
    """Real recorded runs (recovery_tests/data/runs/): every cycle's start is marked, cycle 0's
    too; the fault and the launcher's record of the failure are told apart (colour, line and
    marker); the goodput is drawn as a share of the wall time whose first part is the productive
    training; the recovery window names the fault it zooms on; the legends stay small beside
    the panels."""
    pytest.importorskip("matplotlib", reason="timeline.png needs the plot extra: pip install -e '.[plot]'")
    from matplotlib.colors import to_hex

    from harness.judge import criteria
    from recovery_tests import recorded

    run = recorded.recorded(name)
    verdict = verify.verify_run(run)
    p, g = verdict.picture, verdict.goodput
    tl = history.read_run(run, inspect_checkpoints=False, progress=False).timeline
    a = criteria.analyze(tl)
    # the data
    assert [m.cycle for m in p.cycle_marks if m.kind == "started"] == sorted(a.workers_started)
    assert [m.cycle for m in p.cycle_marks if m.kind == "failed"] == sorted(a.failures)
    assert p.goodput is not None and p.goodput.parts[0] == ("productive", g.productive_s)
    assert sum(v for _, v in p.goodput.parts) == pytest.approx(g.wall_s, abs=0.01)
    assert p.goodput.label.startswith(f"goodput {100 * g.ratio:.1f} %: {g.productive_s:.2f} s of productive training")
    last = a.closing
    assert p.zoom == (f"fault 3 of 3: gil on rank 1, in-save" if name == "reference-campaign"
                      else f"{a.fault} on rank 1, after-commit")
    # what is drawn
    fig = picture.render(p)
    whole, bar, window = (_panel(fig, t) for t in ("whole run", "goodput", "recovery window"))

    def lines(ax, gid):
        return [ln for ln in ax.get_lines() if ln.get_gid() == gid and len(ln.get_xdata()) == 2]

    origin = p.t0
    started = sorted(round(ln.get_xdata()[0], 3) for ln in lines(whole, "cycle-started"))
    assert started == [round(m.t - origin, 3) for m in p.cycle_marks if m.kind == "started"]
    assert len(started) == len(a.workers_started) and started[0] < min(q.t for q in p.curves[0].points) - origin
    faults, failures = lines(whole, "fault"), lines(whole, "cycle-failed")
    assert len(faults) == len(a.episodes) and len(failures) == len(a.failures)
    fault, failure = faults[0], failures[0]
    assert to_hex(fault.get_color()) != to_hex(failure.get_color())
    assert fault.get_linestyle() == "-" and failure.get_linestyle() != "-"
    markers = {ln.get_gid(): ln.get_marker() for ln in whole.get_lines() if len(ln.get_xdata()) == 1}
    assert markers["fault"] != markers["cycle-failed"]
    productive = [r for r in bar.patches if r.get_gid() == "goodput-productive"]
    assert len(productive) == 1 and productive[0].get_x() == 0
    assert productive[0].get_width() == pytest.approx(100 * g.ratio, abs=0.1)
    assert not [r for r in whole.patches if r.get_gid() == "badput" and to_hex(r.get_facecolor()) == "#d9d9d9"]
    assert window.get_title(loc="left").startswith(f"recovery window of {p.zoom}: ")
    assert last is not None and p.zoom.endswith(last.marker.fault_at)
    renderer = fig.canvas.get_renderer()
    for _owner, legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        assert box.width < 0.25 * fig.bbox.width, (legend.get_texts()[0].get_text(), box.width)
        assert len(legend.get_texts()) <= 6
    assert whole.get_window_extent(renderer).width > 0.7 * fig.bbox.width
