"""The fault vocabulary: what a fault is (its kind) and when it fires (its moment).

One table per axis, at the bottom of the house: this module imports nothing of the harness,
so the spec, the planner, the nemesis (inside every training worker), the criteria and the
verdict all read the same rows without importing each other. A new kind or moment is one
row here; what the nemesis does for it is named by the row (`FaultKind.injects`,
`FaultKind.damage`, `FaultMoment.schedule`) and carried out by harness.nemesis.injector.

Stdlib only and nothing at import time but these tables: the nemesis imports it in every
training worker.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

# How the nemesis injects a kind (FaultKind.injects):
SIGNAL = "signal"  # the selected rank sends FaultKind.signal to its own process
NODE = "node"  # the rank's whole node is lost: its launcher and every process under it are stopped, then SIGKILLed
IN_PROCESS = "in-process"  # an action inside the worker itself (harness.nemesis.injector.IN_PROCESS_ACTIONS[kind.name])
# The nemesis fills the checkpoint filesystem (a size-limited tmpfs the harness mounts on the run's
# own checkpoints/ for this kind: harness.machine.tmpfs) with a filler file, and the rank runs on; the fault
# rank's next cycle removes the filler (space freed, as an operator would) before its entrypoint starts.
FILL = "fill-filesystem"
INJECTIONS = (SIGNAL, NODE, IN_PROCESS, FILL)

# What a kind does to the run's own newest committed checkpoint before it injects (FaultKind.damage):
TRUNCATE_DISTCP = "truncate-distcp"  # one `.distcp` file cut to half its size: every load of it fails
FLIP_DISTCP = "flip-distcp"  # 4 KiB inverted in the middle of one `.distcp`, size unchanged: only a checksum sees it
DAMAGES = (TRUNCATE_DISTCP, FLIP_DISTCP)



@dataclass(frozen=True)
class FaultKind:
    """What the nemesis does to the selected rank.

    `injects`: how (SIGNAL, NODE or IN_PROCESS); `signal`: the signal it sends its own process
    (SIGNAL), the one the node's processes die of (NODE: SIGKILL), or for IN_PROCESS the one the
    rank is expected to die of, if any, else None (the marker records it); `damage`: what it first does to the newest committed
    checkpoint (None: nothing; TRUNCATE_DISTCP: every replacement fails its load, a restart
    loop NVRx must stop; FLIP_DISTCP: a replacement that loads it loads garbage); `moments`: the
    moments it can fire at (None: every one).

    `monitor_detects`: the rank stays alive, so only a rank monitor's section or out-of-section
    timeout can detect it (replacement_cycle demands one); `exit_codes`: the codes the launcher's
    `failed (exitcode: N)` line may show for the fault rank's own worker (negative: the signal),
    when the kind fixes them; `recovery`: what a correct recovery is (docs/faults.md);
    `gpu_only` / `planned`: refused before launch on the CPU tiers / everywhere, `planned`
    saying why."""

    name: str
    signal: str | None
    help: str
    injects: str = SIGNAL
    damage: str | None = None
    moments: tuple[str, ...] | None = None
    monitor_detects: bool = False
    exit_codes: tuple[int, ...] = ()
    recovery: str = "the launcher restarts the group; the replacement loads the latest committed checkpoint and trains on"
    gpu_only: bool = False
    planned: str | None = None

    def __post_init__(self) -> None:
        if self.injects not in INJECTIONS:
            raise ValueError(f"fault kind {self.name}: injects={self.injects!r} is not one of {INJECTIONS}")
        if self.damage is not None and self.damage not in DAMAGES:
            raise ValueError(f"fault kind {self.name}: damage={self.damage!r} is not one of {DAMAGES}")
        if self.signal is not None and not (self.signal.startswith("SIG") and hasattr(_signal, self.signal)):
            raise ValueError(f"fault kind {self.name}: signal={self.signal!r} is no signal name of this platform")
        if self.injects in (SIGNAL, NODE) and self.signal is None:
            raise ValueError(f"fault kind {self.name}: a {self.injects} fault needs its signal")

    @property
    def poisons_checkpoint(self) -> bool:
        """It damages the checkpoint every replacement would load: no recovery is possible."""
        return self.damage is not None

    @property
    def fills_filesystem(self) -> bool:
        """It needs the run's checkpoints/ on a filesystem of its own (harness.machine.tmpfs)."""
        return self.injects == FILL

    @property
    def loses_node(self) -> bool:
        return self.injects == NODE

    @property
    def dies_at_once(self) -> bool:
        """The rank's process is SIGKILLed and nothing else happens: no handler runs, no
        checkpoint is damaged, no node is lost, so the cycle records alone (a cycle ended, the
        next began) show the whole failure and restart."""
        return self.injects == SIGNAL and self.signal == "SIGKILL" and self.damage is None

    def allows(self, moment: str) -> bool:
        return self.moments is None or moment in self.moments


# Which checkpoint a moment waits for, counted from the iteration its cycle restored (R; 0 at a
# fresh start) (FaultMoment.fires; harness.plan.campaign.reach walks a schedule with them):
FIRST_COMMIT = "first-commit"  # the first commit above R of a tier --fault-after watches, below the final iteration
SAVE_IN_FLIGHT = "save-in-flight"  # a persistent commit above R, then the next persistent save in flight, below the final
LOAD = "load"  # the replacement's load of the persistent checkpoint R (the files it reads: iter_* under checkpoints/)
FINAL = "final"  # the final iteration's checkpoint committed, the entrypoint returning
FIRES = (FIRST_COMMIT, SAVE_IN_FLIGHT, LOAD, FINAL)


@dataclass(frozen=True)
class FaultMoment:
    """When the fault fires. `schedule`: the moment of each planned fault, in marker order
    (schedule[i - 1] is the moment of fault i, which claims marker i; empty: just this moment);
    `needs_async_save`: the moment exists only while an async save is in flight; `fires`: which
    checkpoint it waits for (FIRES), from which validation tells whether a save interval and
    train iterations give it one."""

    name: str
    help: str
    schedule: tuple[str, ...] = ()
    needs_async_save: bool = False
    fires: str = FIRST_COMMIT

    def __post_init__(self) -> None:
        if self.fires not in FIRES:
            raise ValueError(f"fault moment {self.name}: fires={self.fires!r} is not one of {FIRES}")

    @property
    def moments(self) -> tuple[str, ...]:
        """The moment of every planned fault, fault 1 first (index + 1 = the marker number)."""
        return self.schedule or (self.name,)

    @property
    def faults(self) -> int:
        """How many faults the plan holds (each claims its own marker)."""
        return len(self.moments)

    @property
    def hits_a_save(self) -> bool:
        """It fires while a save is in flight: the marker's `iteration` is that save's, its
        `committed_iteration` the checkpoint committed before it."""
        return self.fires == SAVE_IN_FLIGHT

    @property
    def watches_commits(self) -> bool:
        """It fires at the first commit of a tier --fault-after watches (the plan's fault_after applies)."""
        return self.fires == FIRST_COMMIT


AFTER_COMMIT = "after-commit"
IN_SAVE = "in-save"
IN_RESTORE = "in-restore"
LAST_ITERATION = "last-iteration"
# The names of the kinds, for the few tables that are keyed by kind (the nemesis's in-process
# actions) and the default a plan or a reader falls back to; everything else asks a kind's row.
KILL = "kill"
HANG = "hang"
TERM = "term"
POISON = "poison"
LOST_NODE = "node"
EXCEPTION = "exception"
SEGFAULT = "segfault"
ABORT = "abort"
GIL = "gil"
CORRUPT = "corrupt"
DISK_FULL = "disk-full"
GPU_HANG = "gpu-hang"
GPU_ERROR = "gpu-error"
DEFAULT_KIND = KILL  # --fault's default, and the kind a nemesis line names by SIGKILL alone
_LOOP = ("no replacement loads the damaged checkpoint: each fails its load loudly and NVRx's no-progress rule "
         "stops the loop (exit 93), or the stack falls back to an earlier checkpoint")
_MONITOR = "a rank monitor's section or out-of-section timeout detects it, SIGKILLs the rank, the group restarts"

FAULT_KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind(KILL, "SIGKILL", "SIGKILL the rank's process (a crash)"),
    FaultKind(HANG, "SIGSTOP", "SIGSTOP the rank's process (a hang the rank monitor must detect)",
              monitor_detects=True, recovery=_MONITOR),
    FaultKind(TERM, "SIGTERM", "SIGTERM the rank's process (a preemption or an operator's kill)"),
    FaultKind(POISON, "SIGKILL", "truncate one .distcp of the newest committed checkpoint, then SIGKILL: every "
              "replacement fails its load, a restart loop NVRx's no-progress rule must stop", damage=TRUNCATE_DISTCP,
              moments=(AFTER_COMMIT,), recovery=_LOOP),
    FaultKind(LOST_NODE, "SIGKILL", "SIGKILL of the fault rank's whole node: its launcher and every process under it "
              "(the failure a large job meets most; --hot-spares gives the launcher a standby node)", injects=NODE,
              moments=(AFTER_COMMIT,)),
    FaultKind(EXCEPTION, None, "raise a Python exception (harness.nemesis.inject.InjectedFault) in the rank's training "
              "thread: the worker exits 1 with its traceback", injects=IN_PROCESS, exit_codes=(1,)),
    FaultKind(SEGFAULT, "SIGSEGV", "a native crash: dereference an unmapped pointer through ctypes (SIGSEGV)",
              injects=IN_PROCESS, exit_codes=(-11,)),
    FaultKind(ABORT, "SIGABRT", "a native crash: libc abort() (SIGABRT)", injects=IN_PROCESS, exit_codes=(-6,)),
    # NVRx's rank monitor ends a detected rank with SIGCONT, then rank_termination_signal (SIGKILL
    # in 0.4.1 and 0.7.0); a rank holding the GIL never runs a Python SIGTERM handler.
    FaultKind(GIL, None, "block in a native call with the GIL held: the rank stays alive, its Python threads, "
              "heartbeats and signal handlers stop (a hang the rank monitor must detect; not a SIGSTOP)",
              injects=IN_PROCESS, moments=(AFTER_COMMIT, IN_SAVE), monitor_detects=True, exit_codes=(-9,),
              recovery=_MONITOR),
    FaultKind(CORRUPT, "SIGKILL", "invert 4 KiB in the middle of one .distcp of the newest committed checkpoint "
              "(size unchanged), then SIGKILL: a replacement that loads it loads garbage", damage=FLIP_DISTCP,
              moments=(AFTER_COMMIT,), recovery=_LOOP),
    FaultKind(DISK_FULL, None, "fill the run's checkpoint filesystem (a size-limited tmpfs the harness mounts on "
              "its checkpoints/, as root) while an async save is in flight: the save meets ENOSPC; the fault rank's "
              "next cycle frees the space", injects=FILL, moments=(IN_SAVE,),
              recovery="no partial checkpoint is committed or loaded: the replacement resumes from the previous "
              "committed checkpoint and trains on, or the job stops with the filesystem's error named"),
    # The GPU tier only (torch's own kernels, harness.nemesis.inject): refused before launch on the CPU tiers.
    FaultKind(GPU_HANG, None, "a never-ending CUDA kernel on the rank's GPU (torch's spin kernel): the step's next "
              "synchronize blocks, the rank stays alive (a hang the rank monitor must detect)", injects=IN_PROCESS,
              gpu_only=True, monitor_detects=True, recovery=_MONITOR),
    FaultKind(GPU_ERROR, None, "an illegal memory access in a CUDA kernel (a write far past an allocation): a "
              "sticky CUDA error, the rank's next CUDA call fails", injects=IN_PROCESS, gpu_only=True),
)}
FAULT_MOMENTS: dict[str, FaultMoment] = {m.name: m for m in (
    FaultMoment(AFTER_COMMIT, "right after the first checkpoint of the run is committed (the walkthrough's)"),
    FaultMoment(IN_SAVE, "while an async save is in flight: iter_N/ holds data, metadata.json and the tracker "
                "are not written yet (after one committed checkpoint)", needs_async_save=True, fires=SAVE_IN_FLIGHT),
    FaultMoment(IN_RESTORE, "a second fault in the replacement cycle, after its checkpoint load started and "
                "before its first step (the run needs two restarts)", schedule=(AFTER_COMMIT, IN_RESTORE),
                fires=LOAD),
    FaultMoment(LAST_ITERATION, "after the final checkpoint is committed, before the clean exit", fires=FINAL),
)}
DEFAULT_FAULT_AT = AFTER_COMMIT


def hits_a_save(moment: str | None) -> bool:
    """The moment (as a marker or a plan names it, maybe no moment at all) fires while a save
    is in flight (FaultMoment.hits_a_save)."""
    m = FAULT_MOMENTS.get(moment) if moment is not None else None
    return m is not None and m.hits_a_save


NO_FAULT = "none"
# A run of several faults (--faults N): its kinds, ranks and moments come from a seeded schedule
# (harness.plan.campaign, docs/campaigns.md), not from --fault / --fault-rank / --fault-at.
CAMPAIGN = "campaign"
FAULTS = (*FAULT_KINDS, NO_FAULT, CAMPAIGN)
# The moments a campaign draws from (each kind's own FaultKind.moments permitting): the ones a
# fault of any position in the run can meet; in-restore is the second fault of its own plan and
# last-iteration the end of the run.
CAMPAIGN_MOMENTS = (AFTER_COMMIT, IN_SAVE)

# ---------------------------------------------------------------- the schedule


@dataclass(frozen=True)
class PlannedFault:
    """Fault i of a plan, i = its position + 1 = the number of the marker it claims: its kind, the
    global rank that injects it and its moment. A plan's schedule is the tuple of them, fault 1
    first: one fault (--fault K --fault-rank R --fault-at M, `single_schedule`; in-restore holds
    two) or a campaign's draw (harness.plan.campaign)."""

    kind: str
    rank: int
    moment: str

    def text(self) -> str:
        """`kind@rank:moment`, the nemesis's --schedule word (parse_schedule reads it back)."""
        return f"{self.kind}@{self.rank}:{self.moment}"

    def to_json(self, index: int) -> dict:
        return {"fault_index": index, "kind": self.kind, "rank": self.rank, "moment": self.moment}


MAX_PLANNED_FAULTS = 99  # the markers a run directory may hold (fault_injected.json .. fault_injected.99.json)


def single_schedule(fault: str, rank: int, fault_at: str) -> tuple[PlannedFault, ...]:
    """The schedule of a one-fault plan: its kind and rank at each moment of FAULT_MOMENTS[fault_at]
    (in-restore: after-commit, then in-restore); () without a fault."""
    if fault not in FAULT_KINDS or fault_at not in FAULT_MOMENTS:
        return ()
    return tuple(PlannedFault(fault, rank, m) for m in FAULT_MOMENTS[fault_at].moments)


def schedule_text(schedule: tuple[PlannedFault, ...]) -> str:
    return ",".join(f.text() for f in schedule)


def parse_planned(kind: object, rank: object, moment: object) -> PlannedFault:
    """One planned fault from its parts, checked: a kind of FAULT_KINDS, a rank 0..2^24, a moment
    of FAULT_MOMENTS the kind allows. ValueError names what is wrong."""
    if not isinstance(kind, str) or kind not in FAULT_KINDS:
        raise ValueError(f"fault kind {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 2 ** 24:
        raise ValueError(f"rank {rank!r} is not a global rank (0 .. 2^24)")
    if not isinstance(moment, str) or moment not in FAULT_MOMENTS:
        raise ValueError(f"moment {moment!r} is not one of {', '.join(FAULT_MOMENTS)}")
    if not FAULT_KINDS[kind].allows(moment):
        raise ValueError(f"{kind} fires only at {', '.join(FAULT_KINDS[kind].moments or ())}, not {moment}")
    return PlannedFault(kind, rank, moment)


def parse_schedule(text: str) -> tuple[PlannedFault, ...]:
    """`kind@rank:moment,...` (PlannedFault.text joined by commas) -> the schedule. ValueError
    names the first bad entry."""
    out = []
    for n, word in enumerate(text.split(","), start=1):
        kind, at, rest = word.strip().partition("@")
        rank, colon, moment = rest.partition(":")
        if not at or not colon or not rank.isdigit() or len(rank) > 8:
            raise ValueError(f"fault {n} {word!r} is not KIND@RANK:MOMENT (e.g. kill@1:after-commit)")
        try:
            out.append(parse_planned(kind, int(rank), moment))
        except ValueError as exc:
            raise ValueError(f"fault {n} {word!r}: {exc}") from None
    if len(out) > MAX_PLANNED_FAULTS:
        raise ValueError(f"{len(out)} faults: a run holds at most {MAX_PLANNED_FAULTS}")
    return tuple(out)


def schedule_from_json(value: object) -> tuple[PlannedFault, ...] | None:
    """run.json's `spec.schedule` (a list of PlannedFault.to_json) read back; None when absent or
    not such a list (a run directory from a stranger: every entry checked)."""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_PLANNED_FAULTS:
        return None
    out = []
    for entry in value:
        if not isinstance(entry, dict):
            return None
        try:
            out.append(parse_planned(entry.get("kind"), entry.get("rank"), entry.get("moment")))
        except ValueError:
            return None
    return tuple(out)
