"""Recovery latency split and lost work: a pure function of the Timeline (and its Analysis).

    injected ──detection──► failure detected ──restart──► replacement workers started
             ──restore──► checkpoint loaded ──first step──► first committed iteration
    failure_to_first_step = first committed iteration − injected (the headline)
    lost_iterations = last iteration logged before the fault − K (the checkpoint reloaded)

Where the timestamps come from (docs/architecture.md, "Progress lines and the recovery moments"):
- injected: the marker's `injected_at` (UTC).
- failure detected: NVRx >= 0.6 `Cycle: c+1 Event: failure_detected` (UTC); otherwise the first
  launcher record of cycle c's failure (`failed (exitcode`, a rank timeout, `FT timeout
  elapsed`, `Worker group UNHEALTHY/FAILED`; local time).
- workers started: `Cycle: r Event: worker_start_completed` (UTC); 0.4.1: `has joined round r`.
- checkpoint loaded: Megatron prints no time on its load lines; the first stamped line of
  that start after the load is `[after model, optimizer, and learning rate scheduler are
  built] datetime: ...` (microseconds since Megatron 0.19; older versions print whole seconds,
  so their restore and first step are ±1 s, which the metrics notes say).
- first committed step: the stamp of the first iteration line of the replacement start.
A metric whose timestamps are missing is None: never guessed.

A wall-clock jump that the harness saw during the launch (launch.json `clock_jumps`: its
wall clock moved against its monotonic clock) becomes a warning naming every latency whose
span holds it: such a value is off by about the jump.
"""

from __future__ import annotations

import re

from harness.vocab import events as ev
from harness.vocab import tiers
from harness.judge.criteria import Analysis
from harness.vocab.events import Timeline, iso_utc
from harness.vocab.verdict import Metrics, Recovery

__all__ = ["Metrics", "Recovery", "compute"]

SECOND_RESOLUTION_NOTE = ("restore_s and first_step_s rest on the first '] datetime:' line after the load "
                          "(Megatron-LM's '[after model, optimizer, and learning rate scheduler are built]', "
                          "Megatron-Bridge's '[after dataloaders are built]'), printed in whole seconds by this "
                          "software (Megatron-LM 0.19 prints microseconds): they are exact to ±1 s")
_FRACTIONAL_DATETIME = re.compile(r"datetime: \S+ \d\d:\d\d:\d\d\.\d")


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)


def detection_event(tl: Timeline, c: int) -> ev.LauncherEvent | None:
    """The launcher's earliest record of cycle `c`'s failure (an episode's detection)."""
    launcher = list(tl.launcher_events())
    profiled = [e for e in launcher if isinstance(e, ev.ProfilingEvent) and e.name == "failure_detected"
                and e.subject_cycle == c and tl.utc(e) is not None]
    if profiled:
        return min(profiled, key=tl.utc)
    records = [e for e in launcher if isinstance(e, (ev.WorkerFailed, ev.WorkerGroupFailed, ev.RankTimeout, ev.FtTimeoutElapsed))
               and e.cycle == c and tl.utc(e) is not None]
    return min(records, key=tl.utc) if records else None


def clock_jump_warnings(tl: Timeline, spans: dict[str, tuple[float | None, float | None]]) -> tuple[str, ...]:
    """One sentence per wall-clock jump the harness recorded, naming the latencies it falls in."""
    jumps = tl.launch.clock_jumps if tl.launch is not None else ()
    out = []
    for before, after, jump in jumps:
        # Moments stamped up to `before` carry the old clock, later ones the new: a span that
        # starts by then and ends after it holds the jump.
        lo = min(before, after)
        hit = [name for name, (a, b) in spans.items() if a is not None and b is not None and a <= lo < b]
        where = (f"{', '.join(hit)} span{'s' if len(hit) == 1 else ''} it and may be off by that much" if hit
                 else "no measured latency spans it")
        out.append(f"The wall clock of the harness's host jumped {jump:+.2f} s between {iso_utc(before)} and "
                   f"{iso_utc(after)} (against its monotonic clock): {where}.")
    return tuple(out)


def recoveries(tl: Timeline, a: Analysis) -> tuple[Recovery, ...]:
    """The split of every episode's recovery: from its marker to the next cycle's first step."""
    out = []
    for episode in a.episodes:
        inj = episode.marker
        c = inj.cycle
        injected = tl.utc(inj)
        detected = tl.utc(detection_event(tl, c)) if c is not None else None
        later = sorted(k for k in a.workers_started if c is not None and k > c)
        started = tl.utc(a.workers_started[later[0]]) if later else None
        starts = sorted((s for s in tl.starts if s.cycle is not None and c is not None and s.cycle > c),
                        key=lambda s: (s.cycle, s.index))
        r = starts[0] if starts else None
        loaded = tl.utc(r.restored) if r is not None else None
        first = tl.utc(r.first_iteration) if r is not None else None
        if episode.replacement_cycle is None and (ip := tiers.inprocess_milestones(episode.fault_start)) is not None:
            detected, started, loaded, first = tl.utc(ip.caught), tl.utc(ip.restarted), tl.utc(ip.built), None
        out.append(Recovery(inj.fault_index, inj.fault_at, c, injected, _span(injected, detected),
                            _span(detected, started), _span(started, loaded), _span(loaded, first)))
    return tuple(out)


def compute(tl: Timeline, a: Analysis) -> Metrics:
    """The headline split is the recovery the run ends with (its last episode); `recoveries`
    splits every episode's."""
    ep = a.closing
    if ep is None:
        return Metrics(notes=("no injection: there is no recovery to time",) if a.is_fault_run else (),
                       warnings=clock_jump_warnings(tl, {}))
    notes: list[str] = []
    evidence: dict[str, str] = {"injected_at": str(ep.marker.src)}
    injected = tl.utc(ep.marker)
    if injected is None:
        notes.append("the marker has no injected_at: latencies from the injection are unknown")

    detected_ev = detection_event(tl, ep.cycle)
    detected = tl.utc(detected_ev)
    started_ev = ep.restart
    started = tl.utc(started_ev)

    r = ep.replacement
    built_ev = r.restored if r is not None else None  # the first stamped line after the load
    inproc = tiers.inprocess_milestones(ep.fault_start) if ep.replacement_cycle is None else None
    if inproc is not None:  # an in-process restart: the Wrapper's own stamps (harness.vocab.tiers)
        detected_ev, started_ev, built_ev = inproc.caught, inproc.restarted, inproc.built
        detected, started = tl.utc(inproc.caught), tl.utc(inproc.restarted)
        notes.append("an in-process restart (NVRx's Wrapper, same processes): detection ends at its 'fn_ex' line, "
                     "restart at its 'restart_ex' line; the restarted function's first step and the last step "
                     "before the fault are not told apart in the start's iteration summary")
    loaded_ev = r.first(ev.CheckpointLoaded) if r is not None else None
    loaded = tl.utc(built_ev) if loaded_ev is not None else None
    first_ev = r.first_iteration if r is not None else None
    first = tl.utc(first_ev)
    if loaded is not None or first is not None:
        if loaded is None:
            notes.append("no stamped line (model-built or dataloaders-built) after the load: restore_s unknown")
        elif built_ev is not None and not _FRACTIONAL_DATETIME.search(built_ev.src.text):
            notes.append(SECOND_RESOLUTION_NOTE)

    for name, e in (("failure_detected_at", detected_ev), ("workers_started_at", started_ev),
                    ("checkpoint_loaded_at", built_ev if loaded is not None else None), ("first_step_at", first_ev)):
        if e is not None:
            evidence[name] = str(e.src)

    last_before = ep.fault_start.last_iteration if ep.fault_start is not None and inproc is None else None
    if r is not None and r.first(ev.StartedFromRandom) is not None:
        k: int | None = 0  # a replacement that started from random lost everything
    else:
        k = loaded_ev.iteration if loaded_ev is not None else ep.expected_k
    lost = last_before.iteration - k if last_before is not None and k is not None else None
    if last_before is not None:
        evidence["last_iteration_before_fault"] = str(last_before.src)

    values = {"detection_s": _span(injected, detected), "restart_s": _span(detected, started),
              "restore_s": _span(started, loaded), "first_step_s": _span(loaded, first)}
    negative = [k_ for k_, v in values.items() if v is not None and v < -1.0]
    if negative:
        notes.append(f"{', '.join(negative)} came out negative: the clocks or the UTC offset "
                     f"({tl.utc_offset_s:+d} s, {tl.offset_how}) do not match")
    spans = {"detection_s": (injected, detected), "restart_s": (detected, started), "restore_s": (started, loaded),
             "first_step_s": (loaded, first), "failure_to_first_step_s": (injected, first)}
    return Metrics(
        warnings=clock_jump_warnings(tl, spans),
        **values, failure_to_first_step_s=_span(injected, first), lost_iterations=lost,
        injected_at=injected, detected_at=detected, workers_started_at=started, checkpoint_loaded_at=loaded,
        first_step_at=first, restored_iteration=k, last_iteration_before_fault=last_before.iteration if last_before else None,
        first_step_iteration=first_ev.iteration if first_ev is not None else None, evidence=evidence, notes=tuple(notes),
        recoveries=recoveries(tl, a),
    )
