"""Recovery episodes: one per injection, derived from the Timeline (pure; nothing here reads files).

A run is a sequence of episodes plus what is true of the whole run. An episode is what one
injected fault set going: the injection (its marker), the checkpoint committed before it
(`expected_k`, in every tier the log and the marker show), the failed cycle and the launcher's
records of its failure (the detection), the restart (the first later cycle whose workers
started), the load and the continuation (the starts after the failed cycle, up to the cycle
the next episode's fault hit, or to the end of the run), and the end of the episode (the
next injection, or the end of the run).

A single-fault run is a run with one episode; a plan of several faults (in-restore's second
fault) gives one episode per marker, in marker order. The checkers (harness.judge.criteria) judge
an episode or the run; this module is the one place that decides which injection and which
failed cycle an episode is about, so no other module indexes "the" injection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from harness.vocab import events as ev
from harness.vocab import tiers
from harness.vocab.events import AppStart, Timeline, iso_utc
from harness.vocab.faults import hits_a_save


@dataclass(frozen=True)
class LauncherCycles:
    """What the launcher recorded per cycle, for the whole run: the failure records of each
    failed cycle and the record of each worker-group start."""

    failures: Mapping[int, tuple[ev.LauncherEvent, ...]]
    workers_started: Mapping[int, ev.LauncherEvent]


def launcher_cycles(timeline: Timeline) -> LauncherCycles:
    failures: dict[int, list[ev.LauncherEvent]] = {}
    started: dict[int, ev.LauncherEvent] = {}
    joined: dict[int, ev.LauncherEvent] = {}
    for e in timeline.launcher_events():
        if isinstance(e, ev.ProfilingEvent):
            if e.name == "failure_detected" and e.subject_cycle is not None:
                failures.setdefault(e.subject_cycle, []).append(e)
            elif e.name == "worker_start_completed" and e.cycle is not None:
                started.setdefault(e.cycle, e)
        elif isinstance(e, (ev.WorkerFailed, ev.WorkerGroupFailed, ev.RestartsExhausted)) and e.cycle is not None:
            failures.setdefault(e.cycle, []).append(e)
        elif isinstance(e, ev.RendezvousJoined):
            cycle = e.round if e.round is not None else e.cycle
            if cycle is not None:
                joined.setdefault(cycle, e)
    for cycle, e in joined.items():  # 0.4.1: joining round N is the start of cycle N's workers
        started.setdefault(cycle, e)
    return LauncherCycles({c: tuple(v) for c, v in sorted(failures.items())}, dict(sorted(started.items())))


@dataclass(frozen=True)
class Episode:
    """One injected fault and the recovery it set going."""

    number: int  # 1-based position in the run (the marker's fault_index order)
    of: int  # how many episodes the run has
    marker: ev.Injection  # the injection
    cycle: int  # the cycle the fault hit (the failed cycle)
    fault_start: AppStart | None  # the application start of that cycle
    failures: tuple[ev.LauncherEvent, ...]  # the launcher's records of that cycle's failure (the detection)
    replacement_cycle: int | None  # the first later cycle whose workers started (the restart)
    restart: ev.LauncherEvent | None  # the launcher's record of that start
    continuation: tuple[AppStart, ...]  # the starts after the failed cycle, up to the next episode's cycle
    expected_k: int | None  # the latest checkpoint committed at fault time
    expected_k_evidence: tuple[ev.Event, ...]
    next_cycle: int | None = None  # the cycle the next episode's fault hit (None: the last episode)
    notes: tuple[str, ...] = ()

    @property
    def last(self) -> bool:
        """The episode the run's recovery ends with: no later fault cut its continuation."""
        return self.number == self.of

    @property
    def replacement(self) -> AppStart | None:
        return self.continuation[0] if self.continuation else None

    @property
    def restarted(self) -> bool:
        """Any evidence that workers started again after the failed cycle."""
        return self.replacement is not None or self.replacement_cycle is not None

    @property
    def loaded(self) -> ev.CheckpointLoaded | None:
        """The replacement's checkpoint load (the load step of the episode)."""
        r = self.replacement
        return r.first(ev.CheckpointLoaded) if r is not None else None

    @property
    def cut_before_load(self) -> bool:
        """The next fault hit before this episode's replacement finished its load."""
        return not self.last and self.loaded is None


def episodes(timeline: Timeline, cycles: LauncherCycles | None = None) -> tuple[tuple[Episode, ...], tuple[str, ...]]:
    """The run's episodes, in marker order, and the notes their derivation made."""
    cycles = cycles if cycles is not None else launcher_cycles(timeline)
    markers = tuple(sorted(timeline.injections, key=lambda i: i.fault_index))
    nemesis_lines = [e for s in timeline.starts for e in s.of(ev.NemesisInjected)]
    notes: list[str] = []
    hit: list[int] = []
    for marker in markers:
        cycle = marker.cycle
        if cycle is None:
            cycle = next((s.cycle for s in timeline.starts if s.of(ev.NemesisInjected)), 0)
            notes.append(f"the marker records no cycle; took cycle {cycle} as the injected one")
        hit.append(cycle)
    out: list[Episode] = []
    for n, (marker, cycle) in enumerate(zip(markers, hit), start=1):
        next_cycle = hit[n] if n < len(hit) else None
        same = [s for s in timeline.starts if s.cycle == cycle]
        later = sorted((s for s in timeline.starts if s.cycle is not None and s.cycle > cycle
                        and (next_cycle is None or s.cycle <= next_cycle)), key=lambda s: (s.cycle, s.index))
        started = sorted(c for c in cycles.workers_started if c > cycle)
        restarted_at: ev.Event | None = None  # an in-process restart: the fault cycle's lines end here
        if not later and not started and same:  # harness.vocab.tiers: an in-process restart keeps the cycle
            ip = tiers.inprocess(same[-1])
            if ip is not None and ip.restarted and tiers.fault_process_died(timeline, cycle, marker.pid) is None:
                later = [tiers.after_restart(same[-1], ip)]
                restarted_at = ip.restarted[0]
                notes.append(f"NVRx's in-process Wrapper restarted in cycle {cycle} (no new launcher cycle): the "
                             "lines after its first restart are judged as the replacement")
        k, k_evidence = _expected_k(timeline, marker, cycle, restarted_at, nemesis_lines, notes)
        k, k_evidence = _finished_in_flight(timeline, marker, cycle, restarted_at, later[0] if later else None,
                                            k, k_evidence, notes)
        out.append(Episode(
            number=n, of=len(markers), marker=marker, cycle=cycle, fault_start=same[-1] if same else None,
            failures=cycles.failures.get(cycle, ()), replacement_cycle=started[0] if started else None,
            restart=cycles.workers_started[started[0]] if started else None, continuation=tuple(later),
            expected_k=k, expected_k_evidence=k_evidence, next_cycle=next_cycle))
    return tuple(out), tuple(notes)


def committed_before(marker: ev.Injection) -> int | None:
    """The checkpoint the marker says was committed when the fault hit: in-save, `iteration`
    was in flight and `committed_iteration` is the committed one."""
    return marker.committed_iteration if hits_a_save(marker.fault_at) else marker.iteration


def _expected_k(timeline: Timeline, marker: ev.Injection, cycle: int, restarted_at: ev.Event | None,
                nemesis_lines: list[ev.NemesisInjected], notes: list[str]) -> tuple[int | None, tuple[ev.Event, ...]]:
    """The latest checkpoint committed at fault time, which the replacement must load.

    It starts from the marker's iteration (the tracker the nemesis read when it fired) and is
    raised by every commit line of the failed cycle and the cycles before it: a save in flight
    when the nemesis fired can still end before the fault takes effect (the nemesis stamps its
    marker, then acts; the training thread finishes the save's commit in between), and the
    surviving ranks can finish a save the fault rank had already taken part in. Megatron prints
    its commit line after the checkpoint and its tracker are complete, and every line of the
    failed cycle was written before its replacement started, so such a checkpoint is what the
    tracker named at the restart: loading it is right and loading the older one is not. The
    order of the lines decides, not their clocks. A load of a newer iteration than every commit
    line (a partial or foreign checkpoint, a stale tracker) still fails, unless the evidence of
    _finished_in_flight shows a save finished without its line. For an in-process
    restart, the fault cycle's lines end at the Wrapper's first restart."""
    k = committed_before(marker)
    evidence: list[ev.Event] = [marker]
    if k is None and nemesis_lines:
        k = nemesis_lines[0].iteration
        evidence = [nemesis_lines[0]]
    if k is None:
        return k, tuple(evidence)
    injected_at = timeline.utc(marker)
    for in_cycle, e in _before_the_restart(timeline, cycle, restarted_at):
        if not isinstance(e, ev.SaveCommitted) or e.iteration <= k:
            continue
        t = timeline.utc(e)
        when = (f" (stamped {iso_utc(t)}, the marker {iso_utc(injected_at)})"
                if t is not None and injected_at is not None and not timeline.offset_how.startswith("assumed")
                else "")
        notes.append(f"checkpoint {e.iteration} was committed in cycle {in_cycle}{when}, before the restart, "
                     f"although the marker names {k}: a save in flight when the nemesis fired, its commit logged "
                     f"before the restart; expecting {e.iteration}")
        k = e.iteration
        evidence.append(e)
    return k, tuple(evidence)


def _before_the_restart(timeline: Timeline, cycle: int, restarted_at: ev.Event | None):
    """(cycle, event) of every application line of the failed cycle and the cycles before it, in
    order; for an in-process restart the failed cycle's lines end at the Wrapper's first restart."""
    for start in timeline.starts:
        if start.cycle is None or start.cycle > cycle:
            continue
        for e in start.events:
            if e is restarted_at:
                break
            yield start.cycle, e


def _finished_in_flight(timeline: Timeline, marker: ev.Injection, cycle: int, restarted_at: ev.Event | None,
                        replacement: AppStart | None, k: int | None, evidence: tuple[ev.Event, ...],
                        notes: list[str]) -> tuple[int | None, tuple[ev.Event, ...]]:
    """A save that began before the restart and was finished without its commit line: the latest
    committed checkpoint is raised to the one the replacement loaded when the failed cycle (or one
    before it) logged the start of its save, the checkpoint is complete on disk (Megatron's
    metadata.json and torch's .metadata, which are written after every shard), the fault was not
    aimed inside a save, and the replacement's --ckpt-step does not pin it (so the tracker named
    it at the restart). Megatron finalizes an asynchronous save at a later step, so on a loaded
    machine the commit of K can come after the save of K' has begun: a fault after K's commit
    then lands while K' is finished, and the killed rank's last line (its commit line) can be cut.
    Without all of that evidence a newer load still fails (a partial, foreign or pinned checkpoint)."""
    if k is None or replacement is None or hits_a_save(marker.fault_at) or timeline.checkpoints is None:
        return k, evidence
    loaded = replacement.first(ev.CheckpointLoaded)
    if loaded is None or loaded.iteration <= k:
        return k, evidence
    args = replacement.arguments
    if args is not None and args.get("ckpt_step") not in (None, "None"):
        return k, evidence
    disk = timeline.checkpoints.get(loaded.iteration)
    if disk is None or not (disk.committed and disk.has_dcp_metadata):
        return k, evidence
    began_in, began = next(((c, e) for c, e in _before_the_restart(timeline, cycle, restarted_at)
                            if isinstance(e, (ev.SaveStarted, ev.SaveScheduled)) and e.iteration == loaded.iteration),
                           (cycle, None))
    if began is None:
        return k, evidence
    notes.append(f"the save of checkpoint {loaded.iteration} began before the restart (cycle {began_in}) and no commit "
                 f"line of it was logged, although the marker names {k}: the replacement loaded it complete ({disk.rel} "
                 f"holds metadata.json and .metadata), so it was finished before the restart; expecting {loaded.iteration}")
    return loaded.iteration, (*evidence, began)

