"""Goodput: productive training time over wall time, and where the rest went (pure; nothing
here reads files). The formula, each term's evidence and what it cannot see: docs/goodput.md.

    wall        = launch.json ended_at − started_at (the harness's UTC clock)
    step        = the price of one iteration: the uninterrupted baseline's measured step time
                  when a baseline was read, else this run's own
    useful      = the last iteration the run's last training start logged
                  − (the first iteration its first training start logged − 1)
    productive  = useful × step
    ratio       = productive / wall
    wall − productive = startup + detection + restart + restore + redone + save_stall + rest

    startup     launch started → the first training start's first iteration line − step
    detection   injected (marker) → the launcher's first record of the failed cycle's failure
    restart     failure detected → the launcher's record of the replacement workers' start
    restore     workers started → the replacement's first stamped line after its load (the
                model-built line of Megatron-LM, the dataloaders-built line of Megatron-Bridge;
                or the next fault's injection, when that fault cut the load)
    redone      (the last iteration the failed cycle logged − the iteration the next training
                start resumed at) × step
    save_stall  Σ over the save lines of every start: `saving checkpoint` → `scheduled an async
                checkpoint save` (async) or → `successfully saved` (synchronous); where the save
                lines carry no stamp (Megatron-Bridge), megatron-core's `save-checkpoint` timer
                printed after the save (the slowest rank's blocking time)
    rest        wall − productive − every known part above (an unknown part's time is in it)

A measured step time is the time between the first and the last iteration line of a start,
less the save stalls between them, over the iterations between them, summed over the starts.
A part whose evidence is missing or impossible (a negative span, a time outside any run) is
None with its reason; its time is then in `rest`, so the parts always add up to wall −
productive. Only the recoveries of injected faults (the episodes) are attributed: an
unplanned failure's costs are in `rest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness.vocab import events as ev
from harness.vocab.dialect import BOUNDS
from harness.judge.episodes import Episode
from harness.vocab.events import Timeline, plausible_time
from harness.judge.metrics import detection_event
from harness.vocab.verdict import EPISODE_GOODPUT_PARTS, GOODPUT_PARTS, EpisodeGoodput, Goodput

__all__ = ["StepTime", "compute", "step_time"]

MAX_WALL_S = 1e8  # about three years: a launch longer than that is damage, not a run
MAX_STEP_S = 1e5  # one iteration slower than a day is no training step
MAX_ITERATIONS = int(BOUNDS["iteration"][1])  # the one bound of an iteration number
MAX_STALL_S = 1e5


def _r(value: float) -> float:
    return round(value, 3)


@dataclass(frozen=True)
class StepTime:
    """A run's measured step time, or why it has none."""

    seconds: float | None
    iterations: int = 0  # the iterations it was measured over
    reason: str | None = None


def _training_starts(tl: Timeline) -> list[ev.AppStart]:
    """Starts that logged iterations, in cycle order."""
    starts = [s for s in tl.starts if s.first_iteration is not None and s.last_iteration is not None]
    return sorted(starts, key=lambda s: (s.cycle if s.cycle is not None else -1, s.index))


@dataclass(frozen=True)
class _Stall:
    """One save the training loop was blocked in: from `at` (UTC; None for a save whose lines
    carry no stamp, timed by megatron-core's `save-checkpoint` timer: Megatron-Bridge) for
    `seconds`, after the iteration line of `iteration`."""

    at: float | None
    iteration: int
    seconds: float

    def between(self, a: float, b: float, first: int, last: int) -> bool:
        """Whether it lies between two iteration lines (stamped a and b, iterations first and last)."""
        return a <= self.at < b if self.at is not None else first <= self.iteration < last


def _stalls(tl: Timeline, start: ev.AppStart) -> tuple[list[_Stall], str | None]:
    """Each save the training loop of `start` was blocked in, or why they cannot all be told
    (save lines not all kept, a stall that cannot be true)."""
    kept = start.of(ev.SaveCommitted)
    if start.saves_committed > len(kept):
        return [], (f"{start.source}: {start.saves_committed} saves, of which the history kept the lines of "
                    f"{len(kept)} only")
    ends: dict[int, list[ev.AppEvent]] = {}
    for e in start.events:
        if isinstance(e, (ev.SaveScheduled, ev.SaveCommitted)):
            ends.setdefault(e.iteration, []).append(e)
    started = start.of(ev.SaveStarted)
    timers = start.of(ev.SaveTimed)
    out: list[_Stall] = []
    for i, began in enumerate(started):
        t0 = tl.utc(began)
        if t0 is None:
            # the timer line between this save line and the next save's (or the start's end)
            until = started[i + 1].src.line if i + 1 < len(started) else None
            timer = next((x for x in timers if x.src.line > began.src.line and (until is None or x.src.line < until)),
                         None)
            if timer is None:
                if not any(e.src.line > began.src.line for e in ends.get(began.iteration, ())):
                    continue  # a save the fault cut: its time is in the episode's parts or the rest
                return [], (f"{began.src}: a save line without a time stamp, and no save-checkpoint timer after it "
                            "(megatron-core prints one per save)")
            if not 0.0 <= timer.seconds <= MAX_STALL_S:
                return [], f"{timer.src}: the save's stall would be {timer.seconds:.3f} s, which no save takes"
            out.append(_Stall(None, began.iteration, timer.seconds))
            continue
        after = [e for e in ends.get(began.iteration, ()) if e.src.line > began.src.line]
        scheduled = [e for e in after if isinstance(e, ev.SaveScheduled)]
        end = scheduled[0] if scheduled else (after[0] if after else None)
        if end is None:
            continue  # a save the fault cut: its time is in the episode's parts or the rest
        t1 = tl.utc(end)
        if t1 is None:
            return [], f"{end.src}: a save line without a time stamp"
        if not 0.0 <= t1 - t0 <= MAX_STALL_S:
            return [], f"{end.src}: the save's stall would be {t1 - t0:.3f} s, which no save takes"
        out.append(_Stall(t0, began.iteration, t1 - t0))
    return out, None


def step_time(tl: Timeline) -> StepTime:
    """The run's measured step time: first to last iteration line of each start, less the save
    stalls between them, over the iterations between them, summed over the starts."""
    span = 0.0
    iterations = 0
    why: list[str] = []
    for start in _training_starts(tl):
        first, last = start.first_iteration, start.last_iteration
        a, b = tl.utc(first), tl.utc(last)
        n = last.iteration - first.iteration
        if a is None or b is None or n <= 0:
            continue
        stalls, problem = _stalls(tl, start)
        if problem is not None:
            why.append(problem)
            continue
        blocked = sum(s.seconds for s in stalls if s.between(a, b, first.iteration, last.iteration))
        if b - a - blocked < 0:
            why.append(f"{start.source}: its iteration lines are stamped out of order")
            continue
        span += b - a - blocked
        iterations += n
    if iterations == 0:
        return StepTime(None, 0, "; ".join(why) or "no start logged two stamped iteration lines")
    seconds = span / iterations
    if not 0.0 < seconds <= MAX_STEP_S:
        return StepTime(None, iterations, f"the measured step time {seconds:.6g} s is not one a training step takes")
    return StepTime(seconds, iterations)


def _wall(tl: Timeline) -> tuple[float | None, float | None, str | None, tuple[str, ...]]:
    """(start, end, why unknown, notes): the launch's own record, else the span of the stamps."""
    launch = tl.launch
    if launch is not None and launch.started_at is not None and launch.ended_at is not None:
        a, b = launch.started_at, launch.ended_at
        if not (plausible_time(a) and plausible_time(b)):
            return None, None, "launch.json's started_at or ended_at is no time of a run", ()
        if not 0.0 < b - a <= MAX_WALL_S:
            return None, None, f"launch.json's launch lasted {b - a:.3f} s, which no launch does", ()
        return a, b, None, ()
    what = "no launch.json" if launch is None else "launch.json records no usable started_at and ended_at"
    stamps = [t for t in (tl.utc(e) for e in tl.events) if plausible_time(t)]
    if len(stamps) < 2 or not 0.0 < max(stamps) - min(stamps) <= MAX_WALL_S:
        return None, None, f"{what}, and too few stamped lines to tell the wall time", ()
    return min(stamps), max(stamps), None, (
        f"{what}: the wall time is the span of the run's own stamped lines, shorter than the job by its "
        "first and last unstamped moments",)


def _span(a: float | None, b: float | None, what: str, reasons: dict[str, str]) -> float | None:
    if a is None or b is None:
        reasons.setdefault(what, "a time stamp it starts or ends at is missing")
        return None
    if b - a < 0:
        reasons.setdefault(what, f"it would be {b - a:.3f} s: the clocks or the UTC offset do not match")
        return None
    return _r(b - a)


def _resumed(tl: Timeline, cycle: int) -> ev.Iteration | None:
    """The first iteration line of the first start after `cycle` that trained."""
    for start in _training_starts(tl):
        if start.cycle is not None and start.cycle > cycle:
            return start.first_iteration
    return None


def _moments(tl: Timeline, ep: Episode, nxt: Episode | None) -> tuple[float | None, ...]:
    """(injected, failure detected, workers started, checkpoint loaded) of an episode; a load
    the next fault cut ends at that fault's injection."""
    r = ep.replacement
    loaded = tl.utc(r.restored) if r is not None else None
    if loaded is None and nxt is not None and ep.cut_before_load:
        loaded = tl.utc(nxt.marker)  # the next fault cut the load: the restore lasted until it
    return tl.utc(ep.marker), tl.utc(detection_event(tl, ep.cycle)), tl.utc(ep.restart), loaded


def _episode(tl: Timeline, ep: Episode, nxt: Episode | None, step: float | None) -> EpisodeGoodput:
    reasons: dict[str, str] = {}
    injected, detected, started, loaded = _moments(tl, ep, nxt)
    r = ep.replacement
    if loaded is None and r is not None and r.first(ev.StartedFromRandom) is not None:
        reasons["restore"] = "the replacement loaded no checkpoint (it started from random)"
    parts = {"detection": _span(injected, detected, "detection", reasons),
             "restart": _span(detected, started, "restart", reasons),
             "restore": _span(started, loaded, "restore", reasons)}
    redone: int | None = None
    before = ep.fault_start.last_iteration if ep.fault_start is not None else None
    resumed = _resumed(tl, ep.cycle)
    if before is None:
        redone = 0  # the failed cycle trained nothing: nothing to train again
    elif resumed is None:
        reasons["redone"] = (f"no start trained after the fault: iterations up to {before.iteration} were lost, "
                             "never trained again (their time is in rest)")
    elif before.iteration - (resumed.iteration - 1) < 0:
        reasons["redone"] = (f"the training resumed at iteration {resumed.iteration}, beyond the last iteration "
                             f"{before.iteration} logged before the fault: iterations were skipped, not re-done")
    else:
        redone = before.iteration - (resumed.iteration - 1)
    if redone is not None and step is None:
        reasons["redone"] = "the step time is unknown, so re-done iterations cannot be priced"
    parts["redone"] = _r(redone * step) if redone is not None and step is not None else None
    why = "; ".join(f"{p}: {reasons[p]}" for p in EPISODE_GOODPUT_PARTS if p in reasons and parts.get(p) is None)
    return EpisodeGoodput(ep.marker.fault_index, ep.marker.fault_at, ep.cycle, injected,
                          tuple((p, parts.get(p)) for p in EPISODE_GOODPUT_PARTS), redone,
                          _r(step) if step is not None else None, why or None)


def compute(tl: Timeline, episodes: Sequence[Episode], baseline: Timeline | None = None,
            baseline_problem: str | None = None) -> Goodput:
    """The run's goodput and badput split (docs/goodput.md). With the baseline's Timeline, an
    iteration is priced at the baseline's measured step time, else at this run's own."""
    notes: list[str] = []
    own = step_time(tl)
    step, source = own.seconds, "this run's own iteration lines"
    base_ratio = base_startup = None
    if baseline is not None:
        theirs = step_time(baseline)
        if theirs.seconds is not None:
            step, source = theirs.seconds, f"the baseline {baseline.run_dir.name}'s iteration lines"
            base = compute(baseline, (), None)
            base_ratio, base_startup = base.ratio, base.part("startup")
        else:
            notes.append(f"the baseline's step time is unknown ({theirs.reason}): priced at this run's own")
    elif baseline_problem:
        notes.append(f"no usable baseline ({baseline_problem}): priced at this run's own step time")
    else:
        notes.append("no baseline: an iteration is priced at this run's own measured step time, so a slowdown of "
                     "its steps after a recovery is not seen as badput")
    if step is not None and own.seconds is not None and source != "this run's own iteration lines":
        if not 0.8 <= own.seconds / step <= 1.25:  # more than a quarter apart
            notes.append(f"this run's steps took {own.seconds:.3f} s, the baseline's {step:.3f} s: the machine was "
                         "not equally loaded, and the difference is in rest")

    per_episode = tuple(_episode(tl, ep, episodes[i + 1] if i + 1 < len(episodes) else None, step)
                        for i, ep in enumerate(episodes))
    w0, w1, wall_why, wall_notes = _wall(tl)
    notes.extend(wall_notes)
    common = dict(per_episode=per_episode, step_s=_r(step) if step is not None else None, step_source=source,
                  baseline_ratio=base_ratio, baseline_startup_s=base_startup)
    if w0 is None or w1 is None:
        return Goodput(reason=wall_why, notes=tuple(notes), **common)
    wall = _r(w1 - w0)
    if step is None:
        return Goodput(wall_s=wall, reason=f"the step time is unknown: {own.reason}", notes=tuple(notes), **common)
    trained = _training_starts(tl)
    if not trained:
        return Goodput(wall_s=wall, reason="no start logged an iteration line: nothing was trained",
                       notes=tuple(notes), **common)
    first_start, last_start = trained[0], trained[-1]
    useful = last_start.last_iteration.iteration - (first_start.first_iteration.iteration - 1)
    if not 0 <= useful <= MAX_ITERATIONS:
        return Goodput(wall_s=wall, reason=f"the run's iteration lines give {useful} useful iterations, which no run "
                                           "trains", notes=tuple(notes), **common)
    productive = _r(useful * step)
    if productive > wall:
        return Goodput(wall_s=wall, reason=(f"{useful} iterations at {step:.3f} s ({source}) take {productive:.3f} s, "
                                            f"longer than the whole launch ({wall:.3f} s): the step price does not "
                                            "fit this run"), notes=tuple(notes), **common)

    reasons: dict[str, str] = {}
    parts: dict[str, float | None] = {}
    first_line = tl.utc(first_start.first_iteration)
    if first_line is not None and any((t := tl.utc(e.marker)) is not None and t < first_line for e in episodes):
        reasons["startup"] = "a fault hit before the first iteration: its time is the episode's"
        parts["startup"] = None
    else:
        parts["startup"] = _span(w0, first_line - step if first_line is not None else None, "startup", reasons)
    for name in EPISODE_GOODPUT_PARTS:
        values = [e.part(name) for e in per_episode]
        if any(v is None for v in values):
            parts[name] = None
            reasons[name] = "unknown for episode " + ", ".join(str(e.number) for e in per_episode if e.part(name) is None)
        else:
            parts[name] = _r(sum(values)) if values else 0.0
    stall_total = 0.0
    for start in tl.starts:
        stalls, problem = _stalls(tl, start)
        if problem is not None:
            reasons["save_stall"] = problem
            stall_total = None
            break
        stall_total += sum(s.seconds for s in stalls)
    parts["save_stall"] = _r(stall_total) if stall_total is not None else None
    spans: list[tuple[str, float, float]] = []
    if parts["startup"] is not None and first_line is not None:
        spans.append(("startup", w0, first_line - step))
    for i, ep in enumerate(episodes):
        spans.extend(_episode_spans(tl, ep, episodes[i + 1] if i + 1 < len(episodes) else None))
    if parts["save_stall"] is not None:
        # a stall timed by megatron-core's timer alone has a length but no place on the clock: not drawn
        spans.extend(("save_stall", s.at, s.at + s.seconds) for start in tl.starts for s in _stalls(tl, start)[0]
                     if s.at is not None)
    known = sum(v for v in parts.values() if v is not None)
    parts["rest"] = _r(wall - productive - known)
    if parts["rest"] < -0.5:
        notes.append(f"rest is {parts['rest']:.3f} s: the parts overlap or the step price exceeds this run's steps")
    part_reasons = tuple((p, f"{reasons[p]} (its time is in rest)") for p in GOODPUT_PARTS if p in reasons and parts.get(p) is None)
    return Goodput(ratio=round(productive / wall, 4), wall_s=wall, productive_s=productive,
                   badput_s=tuple((p, parts.get(p)) for p in GOODPUT_PARTS), useful_iterations=useful,
                   part_reasons=part_reasons, notes=tuple(notes), spans=tuple(spans), launch=(w0, w1), **common)


def _episode_spans(tl: Timeline, ep: Episode, nxt: Episode | None) -> list[tuple[str, float, float]]:
    """The episode's detection, restart and restore as intervals (those with both ends)."""
    moments = _moments(tl, ep, nxt)
    out = []
    for name, a, b in zip(("detection", "restart", "restore"), moments, moments[1:]):
        if a is not None and b is not None and b >= a:
            out.append((name, a, b))
    return out
