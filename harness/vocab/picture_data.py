"""What timeline.png shows, as pure values: the curves of the run, the checkpoint and cycle
marks, the recovery moments and the latency split (`TimelinePicture`).

The vocabulary sits at the bottom of the import graph: `verdict.Verdict` carries a
`TimelinePicture`, and `picture.build()` (which reads criteria and metrics, which read
verdict) makes one, so these types import nothing of ours but `events`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.vocab.events import ProgressPoint


@dataclass(frozen=True)
class Curve:
    cycle: int | None
    points: tuple[ProgressPoint, ...]

    @property
    def label(self) -> str:
        return "cycle ?" if self.cycle is None else f"cycle {self.cycle}"


@dataclass(frozen=True)
class CheckpointMark:
    iteration: int
    t: float
    cycle: int | None


@dataclass(frozen=True)
class CycleMark:
    """What the launcher recorded of one cycle: its workers started, or it failed."""

    kind: str  # "started" | "failed"
    cycle: int
    t: float


@dataclass(frozen=True)
class Moment:
    key: str
    label: str
    t: float


@dataclass(frozen=True)
class Segment:
    label: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return round(self.end - self.start, 3)


@dataclass(frozen=True)
class GoodputBand:
    """The goodput as what it is, a share of the launch's wall time (harness.judge.goodput):
    `parts` splits the wall time into the productive training and each known badput part, in
    seconds, in that order (the picture's goodput bar, 100 % = the wall time); `segments` are
    the badput parts that are intervals of it (start-up, every recovery's detection, restart
    and restore, the save stalls), each a Segment labelled with its part, drawn where they lie
    in time at the foot of the whole-run panel, coloured as in the bar."""

    ratio: float | None
    start: float
    end: float
    segments: tuple[Segment, ...]
    label: str  # the bar's title: the ratio, productive of wall seconds (or why it is unknown)
    parts: tuple[tuple[str, float], ...] = ()  # ("productive", s), then GOODPUT_PARTS with a known, positive time

    @property
    def wall_s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class TimelinePicture:
    title: str
    subtitle: str
    curves: tuple[Curve, ...]
    checkpoints: tuple[CheckpointMark, ...]  # the marks drawn (at most MAX_CHECKPOINT_MARKS + the key ones)
    checkpoints_committed: int  # all committed saves seen in the logs
    cycle_marks: tuple[CycleMark, ...]  # every cycle's start and failure, as the launcher logged them
    moments: tuple[Moment, ...]  # in recovery order, only those with a timestamp
    segments: tuple[Segment, ...]  # the latency split, only the measured phases
    recovery_s: float | None  # failure -> first committed step
    qualified: bool = True  # False: the recovery is drawn as failed, not shaded like a good one
    did_not_hold: tuple[str, ...] = ()
    faults: tuple[Moment, ...] = ()  # every injected fault (a multi-fault plan has several), in fault order
    # The launch's start (launch.json's started_at): the zero of the console's progress lines,
    # and so of the whole-run axis; None for a run directory without launch.json.
    origin: float | None = None
    goodput: GoodputBand | None = None
    # the fault whose recovery the recovery window zooms on (the run's last), in words
    zoom: str | None = None

    def _times(self) -> list[float]:
        return [p.t for c in self.curves for p in c.points] + [m.t for m in (*self.moments, *self.cycle_marks)]

    @property
    def t0(self) -> float | None:
        """Origin of the whole-run axis: the launch's start, the console's zero (`origin`), else the
        first record (worker start, iteration, ...)."""
        first = min(self._times(), default=None)
        if self.origin is not None and (first is None or self.origin <= first):
            return self.origin
        return first

    @property
    def t_end(self) -> float | None:
        return max(self._times(), default=None)

    @property
    def has_recovery(self) -> bool:
        return any(m.key == "injected" for m in self.moments)
