"""timeline.png: the recovery as a picture, readable at a glance.

Top panel, the whole run: iteration against wall-clock time, one colour per cycle (worker
group start), committed checkpoints as diamonds on the curve, the injection as a red line
and the recovery as a shaded span. Bottom panel, the recovery window only (a second-long
recovery inside a day-long run is one pixel wide above): time since the injection, the five
moments as vertical lines (injected, failure detected, workers started, checkpoint loaded,
first committed step) and the latency split as labelled bars in seconds.

`build()` is pure (Timeline, Analysis, Metrics, sampled progress -> TimelinePicture) and
`draw()` renders it with matplotlib, an optional extra: without it `draw` raises
PictureUnavailable and everything else works.
"""

from __future__ import annotations

import math
import os
import textwrap
from bisect import bisect_left
from pathlib import Path
from typing import Sequence

from harness.safe import atomic
from harness.vocab import events as ev
from harness.judge.criteria import NOT_APPLICABLE, PASS, Analysis, CriterionResult, headline
from harness.vocab.events import ProgressPoint, Timeline, iso_utc
from harness.judge.metrics import Metrics
from harness.vocab.verdict import Goodput
from harness.vocab.picture_data import CheckpointMark, Curve, CycleMark, GoodputBand, Moment, Segment, TimelinePicture
from harness.vocab.layout import TIMELINE_NAME
from harness.vocab.faults import DEFAULT_FAULT_AT

__all__ = ["CheckpointMark", "Curve", "CycleMark", "Moment", "Segment", "TimelinePicture", "PictureUnavailable",
           "build", "draw", "render", "FILE_NAME"]

FILE_NAME = TIMELINE_NAME  # harness.vocab.layout: the run directory's file names
MAX_CHECKPOINT_MARKS = 60  # more diamonds than this is a smear: show an even selection
_DRAWABLE = 2.0 ** 53  # an iteration or a time beyond this cannot be a float exactly, nor a point of a run


def _drawable(*values: float | int | None) -> bool:
    """Every value a finite number a float holds exactly (what history parses is range-checked
    already; the picture keeps its own guard, as matplotlib would overflow on the rest)."""
    return all(v is not None and -_DRAWABLE <= v <= _DRAWABLE and (not isinstance(v, float) or math.isfinite(v))
               for v in values)
FIGSIZE_IN = (11.0, 7.5)
MAX_CYCLE_ENTRIES = 4  # more cycles (a campaign) get one legend entry, and their numbers on the curves
DPI = 110
INSTALL_HINT = "pip install 'nvrx-qual[plot]' (matplotlib)"


class PictureUnavailable(RuntimeError):
    """timeline.png cannot be drawn here (matplotlib missing); the message says what to install."""


# ---------------------------------------------------------------- the data (pure)

_MOMENTS = (("injected", "fault injected"), ("detected", "failure detected"), ("started", "workers started"),
            ("loaded", "checkpoint loaded"), ("first_step", "first committed step"))
_PHASES = (("detection", "injected", "detected"), ("restart", "detected", "started"),
           ("restore", "started", "loaded"), ("first step", "loaded", "first_step"))


def _time_at(points: Sequence[ProgressPoint], iteration: int) -> float | None:
    """When the curve passed `iteration` (linear between samples; clamped to its ends)."""
    if not points:
        return None
    its = [p.iteration for p in points]
    i = bisect_left(its, iteration)
    if i == 0:
        return points[0].t
    if i >= len(points):
        return points[-1].t
    a, b = points[i - 1], points[i]
    if b.iteration == a.iteration:
        return b.t
    return a.t + (b.t - a.t) * (iteration - a.iteration) / (b.iteration - a.iteration)


def _thin(marks: list[CheckpointMark], keep: set[int], limit: int) -> list[CheckpointMark]:
    """Every k-th mark (k the smallest stride that shows at most `limit`), plus those whose
    iteration is in `keep` (the checkpoint the recovery was judged by)."""
    stride = -(-len(marks) // limit)
    return [m for i, m in enumerate(marks) if i % stride == 0 or m.iteration in keep]


def build(timeline: Timeline, analysis: Analysis, metrics: Metrics, criteria: Sequence[CriterionResult],
          progress: Sequence[Sequence[ProgressPoint]], qualified: bool, goodput: "Goodput | None" = None) -> TimelinePicture:
    curves: list[Curve] = []
    marks: list[CheckpointMark] = []
    for start, points in zip(timeline.starts, progress):
        points = [p for p in points if _drawable(p.iteration, p.t)]
        ordered = tuple(sorted(points, key=lambda p: (p.iteration, p.t)))
        if ordered:
            curves.append(Curve(start.cycle, tuple(sorted(points, key=lambda p: p.t))))
        for save in start.of(ev.SaveCommitted):
            t = timeline.utc(save)
            if t is None:  # Megatron prints no time on its save lines
                t = _time_at(ordered, save.iteration)
            if t is not None and _drawable(save.iteration, t):
                marks.append(CheckpointMark(save.iteration, t, start.cycle))
    cycle_marks = [CycleMark("started", c, t) for c, e in analysis.workers_started.items()
                   if (t := timeline.utc(e)) is not None]
    for c, records in analysis.failures.items():
        times = [t for e in records if (t := timeline.utc(e)) is not None]
        if times:
            cycle_marks.append(CycleMark("failed", c, min(times)))
    expected = analysis.closing.expected_k if analysis.closing is not None else None
    keep = {k for k in (metrics.restored_iteration, expected) if k is not None}
    shown = _thin(marks, keep, MAX_CHECKPOINT_MARKS)

    stamps = {"injected": metrics.injected_at, "detected": metrics.detected_at, "started": metrics.workers_started_at,
              "loaded": metrics.checkpoint_loaded_at, "first_step": metrics.first_step_at}
    moments = tuple(Moment(key, label, stamps[key]) for key, label in _MOMENTS if stamps[key] is not None)
    segments = tuple(Segment(name, stamps[a], stamps[b]) for name, a, b in _PHASES  # type: ignore[arg-type]
                     if stamps[a] is not None and stamps[b] is not None)

    verdict = headline(qualified, analysis.fault)
    total = len(analysis.episodes)
    faults = tuple(Moment("injected", f"fault {i.fault_index} of {total} ("
                          + (f"{i.fault}, " if analysis.fault == "campaign" else "") + f"{i.fault_at})", t)
                   for i in analysis.markers if (t := timeline.utc(i)) is not None)
    inj = analysis.opening.marker if analysis.opening is not None else None
    if inj is not None:
        how = f" ({inj.signal})" if inj.signal else ""  # an in-process kind (exception, gil) sends no signal
        fault = f"{inj.fault}{how} on rank {inj.rank if inj.rank is not None else '?'} " \
                f"after checkpoint {inj.iteration if inj.iteration is not None else '?'}"
        if analysis.fault == "campaign":  # every fault's kind is on its own mark
            fault = f"campaign of {total} faults ({', '.join(i.fault for i in analysis.markers)})"
        elif analysis.fault_at != DEFAULT_FAULT_AT:
            fault += f", {analysis.fault_at}" + (f" ({total} faults)" if total > 1 else "")
    elif analysis.is_fault_run:
        fault = f"{analysis.fault} requested, never injected"
    else:
        fault = "no fault (uninterrupted run)"
    last = analysis.closing
    zoom = None
    if last is not None:
        rank = "?" if last.marker.rank is None else last.marker.rank
        zoom = (f"fault {last.number} of {total}: " if total > 1 else "") + \
            f"{analysis.kind_name(last)} on rank {rank}, {last.marker.fault_at}"
    nvrx = timeline.run.nvrx_version or (timeline.launch.nvrx_version if timeline.launch else None)
    title = f"{timeline.run_dir.name}: {verdict}"
    failed = [c.id for c in criteria if c.status not in (PASS, NOT_APPLICABLE)]
    parts = [fault, f"NVRx {nvrx}" if nvrx else None,
             f"did not hold: {', '.join(failed)}" if failed else None]
    return TimelinePicture(
        title=title, subtitle=" · ".join(p for p in parts if p), curves=tuple(curves), checkpoints=tuple(shown),
        checkpoints_committed=sum(s.saves_committed for s in timeline.starts), cycle_marks=tuple(sorted(cycle_marks, key=lambda m: m.t)),
        moments=moments, segments=segments, recovery_s=metrics.failure_to_first_step_s, faults=faults,
        qualified=qualified, did_not_hold=tuple(failed),
        origin=timeline.launch.started_at if timeline.launch is not None else None,
        goodput=_band(goodput), zoom=zoom,
    )


MAX_BAND_SEGMENTS = 400  # save stalls beyond this are a smear at any width: an even selection


def _band(g: Goodput | None) -> GoodputBand | None:
    """The goodput band: the launch's wall time and the badput parts that are intervals of it."""
    if g is None or g.launch is None or not _drawable(*g.launch):
        return None
    segments = [Segment(part, a, b) for part, a, b in g.spans if _drawable(a, b) and b >= a]
    stalls = [s for s in segments if s.label == "save_stall"]
    if len(stalls) > MAX_BAND_SEGMENTS:
        stride = -(-len(stalls) // MAX_BAND_SEGMENTS)
        keep = set(map(id, stalls[::stride]))
        segments = [s for s in segments if s.label != "save_stall" or id(s) in keep]
    parts: list[tuple[str, float]] = []
    if g.ratio is None or g.productive_s is None:
        label = f"goodput unknown ({g.reason})" if g.reason else "goodput unknown"
    else:
        label = (f"goodput {100 * g.ratio:.1f} %: {g.productive_s:.2f} s of productive training in "
                 f"{g.launch[1] - g.launch[0]:.2f} s of wall time")
        parts = [("productive", g.productive_s)] + [(p, v) for p, v in g.badput_s if v is not None and v > 0
                                                    and _drawable(v)]
    return GoodputBand(g.ratio, g.launch[0], g.launch[1], tuple(segments), label, tuple(parts))


# ---------------------------------------------------------------- drawing (matplotlib)

_CYCLE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
# One look per kind of mark, the same in every panel: the fault (what the nemesis did) a solid
# red line under a red triangle; the failure (the launcher's record of it) a dashed black line
# under a black cross; a worker group's start a dotted teal line over a teal triangle.
FAULT_STYLE = dict(color="#d62728", ls="-", lw=2.0)
FAILURE_STYLE = dict(color="#111111", ls=(0, (4, 2)), lw=1.4)
START_STYLE = dict(color="#01665e", ls=(0, (1, 2)), lw=1.2)
_MARKERS = {"fault": ("v", FAULT_STYLE["color"], 1.0), "failure": ("X", FAILURE_STYLE["color"], 1.0),
            "start": ("^", START_STYLE["color"], 0.0)}
_MOMENT_STYLE = {"injected": FAULT_STYLE, "detected": FAILURE_STYLE, "started": START_STYLE,
                 "loaded": dict(color="#33a02c", ls="--", lw=1.4), "first_step": dict(color="#777777", ls=":", lw=1.6)}
_PHASE_COLOURS = {"detection": "#f4a582", "restart": "#b2abd2", "restore": "#a6dba0", "first step": "#92c5de"}
# The goodput bar and the badput band: productive training, then each badput part (harness.judge.goodput)
_PART_COLOURS = {"productive": "#1b7837", "startup": "#fdb863", "detection": "#f4a582", "restart": "#b2abd2",
                 "restore": "#a6dba0", "redone": "#d6604d", "save_stall": "#8c510a", "rest": "#d9d9d9"}
_PART_WORDS = {"productive": "productive", "startup": "start-up", "detection": "detection", "restart": "restart",
               "restore": "restore", "redone": "re-done", "save_stall": "save stall", "rest": "rest"}
LEGEND_FONT = 8


def _unit(span_s: float) -> tuple[float, str]:
    if span_s < 300:
        return 1.0, "s"
    if span_s < 3 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def _plain_integer_axis(ax) -> None:
    """Iterations as written in the logs: whole numbers, no '+5e4' offset."""
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)


def _colour(cycle: int | None) -> str:
    return _CYCLE_COLOURS[(cycle or 0) % len(_CYCLE_COLOURS)]


def draw(picture: TimelinePicture, path: str | os.PathLike) -> Path:
    """Render the picture to a PNG at path (atomically). PictureUnavailable without matplotlib.
    The panels are placed by `_place`, so savefig draws the figure once (a layout engine would
    draw it a second time, without output, to measure it: bench/timeline_picture.py)."""
    fig = render(picture, laid_out=False)
    with atomic.replacing_file(path, binary=True) as f:  # never through a link at path
        fig.savefig(f, dpi=DPI, format="png")
    return Path(path)


def render(picture: TimelinePicture, *, laid_out: bool = True):
    """The matplotlib Figure of the picture (placed; drawn unless laid_out=False; not saved): the
    whole run, its goodput bar, and the recovery window with its latency split. Every legend
    stands beside its panel, never on the data, and names only marks it cannot write on them."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise PictureUnavailable(f"matplotlib is not installed ({exc}): {INSTALL_HINT}") from exc

    # Figure + Agg canvas, not pyplot: no global state, no display backend, safe in any process.
    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI)
    FigureCanvasAgg(fig)
    zoom = picture.has_recovery and len(picture.moments) > 1
    suptitle = fig.suptitle(f"{picture.title}\n{picture.subtitle}", fontsize=TITLE_FONT,
                            y=1 - _EDGE_IN / FIGSIZE_IN[1], va="top")
    rows = [("whole", 3.0)] + ([("goodput", 0.45)] if picture.goodput is not None else []) + (
        [("window", 2.0), ("bars", 0.5)] if zoom else [])
    axes = {name: fig.add_axes((0.0, 0.0, 1.0, 1.0)) for name, _ in rows}  # placed by _place, below
    _whole_run(picture, axes["whole"], Line2D, Patch)
    if picture.goodput is not None:
        _goodput_bar(picture.goodput, axes["goodput"])
    if zoom:
        axes["bars"].sharex(axes["window"])
        _recovery_window(picture, axes["window"], axes["bars"], Line2D)
    _place(fig, suptitle, [(axes[name], weight) for name, weight in rows])
    if laid_out:
        fig.canvas.draw()  # draw now, so that callers (and tests) see the final positions
    return fig


TITLE_FONT = 12
_EDGE_IN = 0.08  # between the picture's edge and anything on it
_LEFT_IN = 0.8  # at least, for the iteration axis's label and numbers (and the latency bar's name)
_YLABEL_IN = 0.36  # the iteration axis's label, rotated, and the ticks beside its numbers
TICK_FONT = 10  # matplotlib's default, which the numbers on the axes keep
_LINE_IN = 0.19  # one line of a panel's title or axis label (9-10 pt)
_TICKS_IN = 0.24  # a row of tick labels under a panel
_GAP_IN = 0.12  # between a panel's axis label and the next panel's title
_MIN_PANEL_SHARE = 0.6  # of the picture's width: a wide legend never squeezes the panels below it
LEGEND_CHARS = 48  # a legend entry longer than this is wrapped: the legends' column stays narrow
PANEL_TITLE_FONT = 10


def _place(fig, suptitle, rows) -> None:
    """Place the panels (axes, weight) top to bottom under the suptitle: each panel's title above
    it and its tick labels and axis label below it, every long title and label wrapped to the
    room it has, and the legends in a column on the right as wide as the widest. The weights share
    the height left over. Sizes in inches; only text is measured (the legends, and the lines that
    are wrapped), never the whole figure, so that it is drawn once."""
    from matplotlib.font_manager import FontProperties

    width_in, height_in = fig.get_size_inches()
    renderer = fig.canvas.get_renderer()

    def width(text: str, size: float) -> float:
        return renderer.get_text_width_height_descent(text, FontProperties(size=size), ismath=False)[0] / fig.dpi

    # the iteration axes' numbers: as wide as the largest iteration (or below zero, with its sign)
    numbers = max((f"{round(v):d}" for ax, _ in rows for v in ax.get_ylim() if math.isfinite(v)), key=len, default="")
    left_in = max(_LEFT_IN, width(numbers, TICK_FONT) + _YLABEL_IN)
    legends = [ax.get_legend() for ax, _ in rows if ax.get_legend() is not None]
    column_in = max((legend.get_window_extent(renderer).width / fig.dpi for legend in legends), default=0.0)
    right_in = min(column_in + 0.12 + _EDGE_IN, width_in * (1 - _MIN_PANEL_SHARE) - left_in) if legends \
        else _LEFT_IN / 2
    panel_in = width_in - left_in - right_in

    def wrapped(text: str, size: float, room_in: float) -> str:
        """text broken at spaces into lines that each fit room_in inches at font size `size`."""

        def fits(line: str) -> bool:
            return width(line, size) <= room_in

        lines = []
        for line in text.split("\n"):
            if fits(line):  # most do: one measurement
                lines.append(line)
                continue
            current = ""
            for word in line.split(" "):
                joined = f"{current} {word}" if current else word
                if current and not fits(joined):
                    lines.append(current)
                    joined = word
                current = joined
            lines.append(current)
        return "\n".join(lines)

    suptitle.set_text(wrapped(suptitle.get_text(), TITLE_FONT, width_in - 2 * _EDGE_IN))
    above, below = [], []
    for ax, _ in rows:
        title = wrapped(ax.get_title(loc="left"), PANEL_TITLE_FONT, width_in - left_in - _EDGE_IN)
        ax.set_title(title, fontsize=PANEL_TITLE_FONT, loc="left")
        label = ax.xaxis.label
        label.set_text(wrapped(label.get_text(), label.get_fontsize(), panel_in))
        above.append(_lines(title) * _LINE_IN)
        ticks = _TICKS_IN if ax.xaxis.get_tick_params().get("labelbottom", True) else 0.06
        below.append(ticks + _lines(label.get_text()) * _LINE_IN)
    top_in = _EDGE_IN + _lines(suptitle.get_text()) * TITLE_FONT * 1.25 / 72 + 0.08
    gaps = sum(above) + sum(below) + _GAP_IN * (len(rows) - 1)
    free_in = max(height_in - top_in - _EDGE_IN - gaps, 0.5 * len(rows))
    total = sum(weight for _, weight in rows)
    y = height_in - top_in
    for (ax, weight), room_above, room_below in zip(rows, above, below):
        h = free_in * weight / total
        y -= room_above + h
        ax.set_position((left_in / width_in, y / height_in, panel_in / width_in, h / height_in))
        y -= room_below + _GAP_IN


def _lines(text: str) -> int:
    return len(text.split("\n")) if text else 0


def warm_up() -> None:
    """Import what draw() needs (matplotlib's Figure and Agg canvas: about a second of CPU)
    ahead of time, e.g. while a launch is running; nothing without matplotlib."""
    try:
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401
        import matplotlib.lines  # noqa: F401
        import matplotlib.patches  # noqa: F401
    except ImportError:
        pass


_FAILED_SPAN = dict(facecolor="none", edgecolor="#8b0000", hatch="//", alpha=0.5, lw=0)


def _vline(ax, x: float, style: dict, mark: str | None = None, gid: str | None = None) -> None:
    """A vertical mark across the panel, with its kind's marker at the top or the foot."""
    ax.axvline(x, gid=gid, **style)
    if mark is not None:
        marker, colour, y = _MARKERS[mark]
        ax.plot([x], [y], transform=ax.get_xaxis_transform(), marker=marker, color=colour, ms=7, ls="",
                clip_on=False, zorder=4, gid=gid)


def _legend(ax, handles) -> None:
    if handles:
        for handle in handles:  # a long entry on two lines rather than a column that squeezes the panels
            handle.set_label("\n".join(textwrap.wrap(handle.get_label(), LEGEND_CHARS)))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=LEGEND_FONT,
                  borderaxespad=0, handlelength=1.8, labelspacing=0.35, frameon=False)


def _whole_run(p: TimelinePicture, ax, Line2D, Patch) -> None:
    t0, end = p.t0, p.t_end
    if t0 is None or end is None:
        ax.text(0.5, 0.5, "no iteration or recovery timestamps in this run's logs", ha="center", va="center",
                transform=ax.transAxes, fontsize=12)
        ax.set_axis_off()
        return
    scale, unit = _unit(end - t0)

    def x(t: float) -> float:
        return (t - t0) / scale

    handles = []
    cycles = {c.cycle: c for c in p.curves}
    for c in p.curves:
        ax.plot([x(q.t) for q in c.points], [q.iteration for q in c.points], color=_colour(c.cycle), lw=1.8,
                marker="." if len(c.points) <= 60 else None, ms=4)
    for c in cycles.values():  # each curve says its cycle where it starts: no legend entry per cycle
        first = c.points[0]
        name = c.label if len(cycles) <= MAX_CYCLE_ENTRIES else str(c.cycle if c.cycle is not None else "?")
        ax.annotate(name, (x(first.t), first.iteration), color=_colour(c.cycle), fontsize=8, xytext=(-3, 3),
                    textcoords="offset points", ha="right", va="bottom", gid="cycle-label")
    if p.checkpoints:
        ax.scatter([x(m.t) for m in p.checkpoints], [m.iteration for m in p.checkpoints], marker="D", s=28, zorder=3,
                   c=[_colour(m.cycle) for m in p.checkpoints], edgecolors="black", linewidths=0.6)
        shown = len(p.checkpoints)
        label = "committed checkpoint" + (f" ({shown} of {p.checkpoints_committed} shown)"
                                          if shown < p.checkpoints_committed else "")
        handles.append(Line2D([], [], marker="D", ls="", color="white", markeredgecolor="black", label=label))
    # the launcher's view of every cycle (cycle 0's start too): a second failure or an unexplained restart shows here
    for kind, style, mark, text in (("started", START_STYLE, "start", "workers started (launcher record)"),
                                    ("failed", FAILURE_STYLE, "failure", "cycle failed (launcher record)")):
        marks = [m for m in p.cycle_marks if m.kind == kind]
        for m in marks:
            _vline(ax, x(m.t), style, mark, gid=f"cycle-{kind}")
        if marks:
            marker, colour, _ = _MARKERS[mark]
            handles.append(Line2D([], [], marker=marker, markersize=6, label=text, **style))
    for n, f in enumerate(p.faults, start=1):
        _vline(ax, x(f.t), FAULT_STYLE, "fault", gid="fault")
        if len(p.faults) > 1:  # each fault's number beside its mark: the legend cannot name six faults
            ax.annotate(str(n), (x(f.t), 1.0), xycoords=("data", "axes fraction"), color=FAULT_STYLE["color"],
                        fontsize=8, xytext=(4, -2), textcoords="offset points", ha="left", va="top")
    moments = {m.key: m for m in p.moments}
    if p.faults or "injected" in moments:
        if not p.faults:  # a marker without a time of its own in the fault list: the recovery's
            _vline(ax, x(moments["injected"].t), FAULT_STYLE, "fault", gid="fault")
        handles.append(Line2D([], [], marker="v", markersize=6, label="fault injected" + (
            f" (numbered; {len(p.faults)} faults)" if len(p.faults) > 1 else ""), **FAULT_STYLE))
    if "injected" in moments:
        which = f" of fault {len(p.faults)}" if len(p.faults) > 1 else ""
        if p.qualified and "first_step" in moments:
            ax.axvspan(x(moments["injected"].t), x(moments["first_step"].t), color="#d62728", alpha=0.10, lw=0,
                       gid="recovery")
            handles.append(Patch(color="#d62728", alpha=0.25, lw=0, label=f"recovery{which}: {p.recovery_s:.2f} s"
                                 if p.recovery_s is not None else f"recovery{which}"))
        elif not p.qualified:
            # A failed recovery is hatched, from the injection to its first step or to the end.
            span_end = moments["first_step"].t if "first_step" in moments else end
            ax.axvspan(x(moments["injected"].t), x(span_end), gid="recovery", **_FAILED_SPAN)
            why = f": {', '.join(p.did_not_hold)} did not hold" if p.did_not_hold else ""
            handles.append(Patch(**_FAILED_SPAN, label=f"recovery{which} FAILED{why}"))
    if p.goodput is not None:  # where the badput lay in time, coloured as in the goodput bar below
        for seg in p.goodput.segments:
            ax.axvspan(x(seg.start), x(max(seg.end, seg.start)), ymin=0, ymax=_BAND_HEIGHT,
                       color=_PART_COLOURS.get(seg.label, "#777777"), lw=0, gid="badput")
    since = "the launch started, as on the console" if p.origin is not None and t0 == p.origin else iso_utc(t0)
    ax.set_xlabel(f"time ({unit}) since {since}" + (f" ({iso_utc(t0)})" if since != iso_utc(t0) else "")
                  + ("\nthe coloured foot: where the badput lay" if p.goodput is not None and p.goodput.segments else ""),
                  fontsize=9)
    ax.set_ylabel("iteration")
    _plain_integer_axis(ax)
    ax.set_title("whole run", fontsize=PANEL_TITLE_FONT, loc="left")
    ax.grid(True, alpha=0.3)
    _legend(ax, handles)


_BAND_HEIGHT = 0.04  # of the whole-run panel, at its foot


def _goodput_bar(band: GoodputBand, ax) -> None:
    """The goodput as a share of the wall time: one bar, 100 % = the launch's wall time, split
    into the productive training (first) and each badput part; each part's name and seconds on
    it where they fit, else listed below."""
    ax.set_title(band.label, fontsize=PANEL_TITLE_FONT, loc="left")
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    total = sum(v for _, v in band.parts)
    if not band.parts or total <= 0:
        ax.barh(0.5, 100, height=0.8, color=_PART_COLOURS["rest"], gid="goodput-unknown")
        ax.set_xlabel("% of the wall time", fontsize=9)
        return
    left, unlabelled = 0.0, []
    for part, seconds in band.parts:
        width = 100 * seconds / total
        ax.barh(0.5, width, left=left, height=0.8, color=_PART_COLOURS.get(part, "#777777"), edgecolor="white",
                linewidth=0.6, gid=f"goodput-{part}")
        word = _PART_WORDS.get(part, part)
        # its name and seconds where they fit (a character is about 0.6 % of the bar), else its
        # name alone (the productive part: its share), and the seconds below
        fitting = [t for t in (f"{word} {seconds:.1f} s", f"{100 * seconds / total:.1f} %" if part == "productive"
                               else word) if width > 0.7 * len(t)]
        if fitting:
            ax.text(left + width / 2, 0.5, fitting[0], ha="center", va="center", fontsize=8,
                    color="white" if part in ("productive", "save_stall") else "black")
        if not fitting or fitting[0] != f"{word} {seconds:.1f} s":
            unlabelled.append(f"{word} {seconds:.2f} s")
        left += width
    ax.set_xlabel("% of the wall time" + (f"; {', '.join(unlabelled)}" if unlabelled else ""), fontsize=9)


def _recovery_window(p: TimelinePicture, ax, bars, Line2D) -> None:
    """The recovery of the fault named in the title: curves and moments above, the latency split
    as bars below, each phase named on its bar or in the axis label."""
    moments = {m.key: m for m in p.moments}
    t_inj = moments["injected"].t
    last = max(m.t for m in p.moments)
    span = max(last - t_inj, 0.5)
    pad = max(0.15 * span, 0.5)
    lo, hi = -pad, span + pad
    iters = []
    for c in p.curves:
        xs = [q.t - t_inj for q in c.points]
        ys = [q.iteration for q in c.points]
        ax.plot(xs, ys, color=_colour(c.cycle), lw=1.8, marker=".", ms=5)
        iters += [y for xv, y in zip(xs, ys) if lo <= xv <= hi]
    for m in p.checkpoints:
        if lo <= m.t - t_inj <= hi:
            ax.scatter([m.t - t_inj], [m.iteration], marker="D", s=36, zorder=3, c=_colour(m.cycle),
                       edgecolors="black", linewidths=0.6)
            iters.append(m.iteration)
    if iters:
        y_lo, y_hi = min(iters), max(iters)
        margin = max(1.0, 0.1 * (y_hi - y_lo))
        ax.set_ylim(y_lo - margin, y_hi + margin)
    ax.set_xlim(lo, hi)

    handles = []
    marks = {"injected": "fault", "detected": "failure", "started": "start"}
    for m in p.moments:
        style = _MOMENT_STYLE[m.key]
        _vline(ax, m.t - t_inj, style, marks.get(m.key), gid=f"moment-{m.key}")
        bars.axvline(m.t - t_inj, **style)
        mark = _MARKERS.get(marks.get(m.key, ""))
        handles.append(Line2D([], [], marker=mark[0] if mark else None, markersize=6,
                              label=f"{m.label}  {m.t - t_inj:+.2f} s", **style))
    width = hi - lo
    split = []
    for seg in p.segments:
        colour = _PHASE_COLOURS.get(seg.label, "#cccccc")
        bars.broken_barh([(seg.start - t_inj, seg.end - seg.start)], (0.15, 0.7), color=colour, edgecolor="black",
                         linewidth=0.5, gid=f"phase-{seg.label}")
        text = f"{seg.label} {seg.seconds:.2f} s"
        split.append(text)
        if (seg.end - seg.start) / width > 0.011 * len(text):  # fits inside its bar; the axis label has them all
            bars.text((seg.start + seg.end) / 2 - t_inj, 0.5, text, ha="center", va="center", fontsize=8)
    title = "recovery window" + (f" of {p.zoom}" if p.zoom else "")
    if p.recovery_s is not None:
        title += f": failure → first committed step {p.recovery_s:.2f} s"
    if not p.qualified:
        title += " — FAILED" + (f" ({', '.join(p.did_not_hold)})" if p.did_not_hold else "")
    ax.set_title(title, fontsize=PANEL_TITLE_FONT, loc="left")
    ax.set_ylabel("iteration")
    _plain_integer_axis(ax)
    ax.tick_params(labelbottom=False)
    ax.grid(True, alpha=0.3)
    bars.set_ylim(0, 1)
    bars.set_yticks([0.5], ["latency"])
    bars.set_xlabel("seconds since the fault was injected" + (f": {' | '.join(split)}" if split else ""), fontsize=9)
    bars.grid(True, axis="x", alpha=0.3)
    _legend(ax, handles)
