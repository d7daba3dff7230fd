"""Megatron's checkpoint tiers: one model of "committed checkpoints" across them.

Megatron-LM (megatron/training/checkpointing.py, 0.17+ and the 0.19 the megatron-cpu tier
runs) writes up to three kinds of checkpoint, and `load_checkpoint` picks among them:

- persistent: `--save`/`--load`, every `--save-interval`; tracker `<save>/latest_checkpointed_iteration.txt`.
- non-persistent global: every `--non-persistent-save-interval` with `--non-persistent-ckpt-type
  global`, into `--non-persistent-global-ckpt-dir` or `<save>/non_persistent` (`_NON_PERSISTENT_CKPT_SUBDIR`),
  with its own tracker there; `cleanup_old_non_persistent_checkpoint(leave_ckpt_num=1)` deletes the
  older ones before each such save.
- local: `--non-persistent-ckpt-type local`, NVRx's LocalCheckpointManager under
  `--non-persistent-local-ckpt-dir` (per rank, replicated to peers); no tracker
  (`find_latest()` asks the manager).

At one iteration only one tier saves (training.py: `save_interval` first, `elif
non_persistent_save_interval`), so an iteration number names one checkpoint; the tier of a
committed checkpoint is told by the directory Megatron announced in `saving checkpoint at
iteration N to DIR` (the commit line `successfully saved checkpoint from iteration N to
{args.save}` prints --save for every tier), else by the directory holding `iter_N`.

`_load_base_checkpoint` loads the non-persistent checkpoint when its iteration is >= the
persistent tracker's ("Loading from a non-persistent checkpoint (non-persistent iter N)"),
else says "WARNING: non-persistent checkpoints are older than persistent checkpoint" and
loads the persistent one. Pure: nothing here reads files except `tier_dirs`'s callers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.vocab import events as ev
from harness.vocab.layout import TRACKER_NAME

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
LOCAL = "local"
NON_PERSISTENT_SUBDIR = "non_persistent"  # Megatron's _NON_PERSISTENT_CKPT_SUBDIR
NP_DIR_FLAG = "--non-persistent-global-ckpt-dir"
NP_DIR_ARG = "non_persistent_global_ckpt_dir"  # its name in Megatron's arguments table


@dataclass(frozen=True)
class Tier:
    """One kind of checkpoint Megatron writes: where, its tracker, and Megatron's own lines."""

    name: str
    flags: str  # the Megatron arguments that turn it on
    directory: str  # where it lives, relative to --save when it starts with <save>
    tracker: str | None  # the tracker file in that directory; None: the tier keeps none
    save_line: str  # Megatron's announcement of a save of this tier
    load_line: str  # Megatron's announcement of a load of this tier
    source: str  # where in Megatron-LM these come from


TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier(PERSISTENT, "--save DIR --save-interval N", "<save>", TRACKER_NAME,
         "saving checkpoint at iteration N to <save> in torch_dist format",
         "loading distributed checkpoint from <load> at iteration N",
         "megatron/training/checkpointing.py: save_checkpoint, _load_base_checkpoint"),
    Tier(NON_PERSISTENT, "--non-persistent-ckpt-type global --non-persistent-save-interval N",
         f"<save>/{NON_PERSISTENT_SUBDIR} (or --non-persistent-global-ckpt-dir)", TRACKER_NAME,
         f"saving checkpoint at iteration N to <save>/{NON_PERSISTENT_SUBDIR} in torch_dist format",
         "Loading from a non-persistent checkpoint (non-persistent iter N)",
         "megatron/training/checkpointing.py: save_checkpoint, cleanup_old_non_persistent_checkpoint, "
         "_get_non_persistent_iteration, _load_non_persistent_base_checkpoint"),
    Tier(LOCAL, "--non-persistent-ckpt-type local --non-persistent-local-ckpt-dir DIR --non-persistent-save-interval N",
         "--non-persistent-local-ckpt-dir (per rank, NVRx LocalCheckpointManager)", None,
         "saving checkpoint at iteration N to <local dir> in torch format",
         "(NVRx LocalCheckpointManager.load; Megatron prints no tier-specific line)",
         "megatron/training/checkpointing.py: save_checkpoint (CheckpointType.LOCAL); "
         "nvidia_resiliency_ext/checkpointing/local/ckpt_managers/local_manager.py"),
)}

# --fault-after: which tier's commit arms the nemesis. any: the newest commit of any tier.
FAULT_AFTER = ("any", PERSISTENT, NON_PERSISTENT)
DEFAULT_FAULT_AFTER = "any"

# Megatron's lines the history reads for the tiers (checkpointing.py, 0.17..0.19).
NP_LOAD_RE = re.compile(r"Loading from a non-persistent checkpoint \(non-persistent iter (\d+)\)")
NP_OLDER_TEXT = "non-persistent checkpoints are older than persistent checkpoint"


def _option(args: Sequence[str], name: str) -> str | None:
    """The value of `--name V` / `--name=V` in an argument list (the last one wins, as argparse)."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            value = arg.partition("=")[2]
        elif arg == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def non_persistent_type(args: Sequence[str]) -> str | None:
    """`--non-persistent-ckpt-type` of a Megatron command line (global, local), or None."""
    return _option(args, "--non-persistent-ckpt-type")


def custom_non_persistent_dir(args: Sequence[str]) -> str | None:
    """`--non-persistent-global-ckpt-dir` of a command line (None: not given, or Megatron's "None")."""
    given = _option(args, NP_DIR_FLAG)
    return given if given and given != "None" else None


# Megatron's arguments that name a checkpoint directory, of every tier
DIR_FLAGS = ("--save", "--load", NP_DIR_FLAG, "--non-persistent-local-ckpt-dir")


def named_dirs(args: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, directory) of each checkpoint directory a command line names (DIR_FLAGS)."""
    return [(flag, value) for flag in DIR_FLAGS if (value := _option(args, flag))]


def non_persistent_dir(args: Sequence[str], save_dir: Path) -> Path | None:
    """Where Megatron writes non-persistent global checkpoints for this command line; None
    without `--non-persistent-ckpt-type global`."""
    if non_persistent_type(args) != "global":
        return None
    given = custom_non_persistent_dir(args)
    return Path(given) if given else save_dir / NON_PERSISTENT_SUBDIR


def watched_dirs(fault_after: str, args: Sequence[str], save_dir: Path) -> list[tuple[str, Path]]:
    """The (tier, directory) pairs whose trackers a fault `--fault-after` waits on. A tier the
    command line does not write is left out; ValueError when nothing would be watched."""
    np_dir = non_persistent_dir(args, save_dir)
    out: list[tuple[str, Path]] = []
    if fault_after in ("any", PERSISTENT):
        out.append((PERSISTENT, save_dir))
    if fault_after in ("any", NON_PERSISTENT) and np_dir is not None:
        out.append((NON_PERSISTENT, np_dir))
    if not out:
        raise ValueError(f"--fault-after {fault_after}: the workload writes no non-persistent global checkpoints; "
                         "pass -- --non-persistent-ckpt-type global --non-persistent-save-interval N, or use "
                         "--fault-after persistent|any")
    return out


def watched_tiers(fault_after: str) -> tuple[str, ...]:
    """The tiers whose commits an after-commit fault waits on, as `--fault-after` names them
    (watched_dirs, without the directories)."""
    return {PERSISTENT: (PERSISTENT,), NON_PERSISTENT: (NON_PERSISTENT,)}.get(fault_after, (PERSISTENT, NON_PERSISTENT))


def fault_after_problem(fault_after: str, workload_args: Sequence[str], name: str = "--fault-after") -> str | None:
    """Why `--fault-after` cannot be served by this workload command line (None: it can).
    `name`: the knob as the user gave it (the flag, or NVRX_FAULT_AFTER)."""
    if fault_after not in FAULT_AFTER:
        return f"{name}={fault_after}: use one of {', '.join(FAULT_AFTER)}"
    kind = non_persistent_type(workload_args)
    if fault_after == NON_PERSISTENT and kind != "global":
        return (f"{name}=non-persistent waits for a non-persistent global checkpoint, but the workload "
                f"arguments {'ask for ' + repr(kind) + ' ones' if kind else 'turn none on'}: pass -- "
                f"--non-persistent-ckpt-type global {NP_INTERVAL_FLAG} N, or use {name}=any")
    return None


# ---------------------------------------------------------------- where a training commits (planning)

NP_INTERVAL_FLAG = "--non-persistent-save-interval"
ENDLESS = 10 ** 12  # a final iteration no plan reaches: where the commits go when the training never ends


@dataclass(frozen=True)
class Commits:
    """Where a training loop commits checkpoints, as Megatron's does (training.py; the reference
    workload follows it): the persistent tier at every iteration that is a multiple of
    `save_interval`; at the other multiples of `non_persistent_interval` (with
    `--non-persistent-ckpt-type global`) the non-persistent global tier; and, when the last
    iteration `final` is no multiple of the save interval, a persistent save of it after the loop
    ('iteration % save_interval != 0'). The local tier is left out: no fault waits on it."""

    final: int
    save_interval: int
    non_persistent_interval: int | None = None

    @classmethod
    def of(cls, train_iters: int, save_interval: int, workload_args: Sequence[str] = ()) -> "Commits":
        """The commits of a plan: its train iterations, save interval and workload arguments."""
        interval = None
        if non_persistent_type(workload_args) == "global":
            given = _option(workload_args, NP_INTERVAL_FLAG) or ""
            interval = int(given) if given.isdigit() and int(given) > 0 else None
        return cls(train_iters, max(1, save_interval), interval)

    def next(self, after: int, tiers: Sequence[str] = (PERSISTENT, NON_PERSISTENT)) -> tuple[int, str] | None:
        """(iteration, tier) of the first commit above iteration `after` of one of `tiers`, up to
        the final iteration; None when there is none."""
        found: list[tuple[int, str]] = []
        s = self.save_interval
        if PERSISTENT in tiers and after < self.final:
            found.append((min((after // s + 1) * s, self.final), PERSISTENT))
        m = self.non_persistent_interval
        if NON_PERSISTENT in tiers and m is not None and m % s:  # every multiple of s is the persistent tier's
            n = (after // m + 1) * m
            while n % s == 0:  # at most s steps: m is no multiple of s
                n += m
            if n <= self.final:
                found.append((n, NON_PERSISTENT))
        return min(found) if found else None


def is_non_persistent_path(path: str, custom: str | None = None) -> bool:
    """A directory Megatron announced is the non-persistent global one: its default name, or
    the start's `--non-persistent-global-ckpt-dir` (`custom`)."""
    if custom and path.rstrip("/") == custom.rstrip("/"):
        return True
    return Path(path.rstrip("/")).name == NON_PERSISTENT_SUBDIR or f"/{NON_PERSISTENT_SUBDIR}/" in path


# ---------------------------------------------------------------- committed checkpoints of a run


@dataclass(frozen=True)
class Commit:
    """One committed checkpoint: its iteration, tier, the launcher cycle that saved it, and Megatron's lines."""

    iteration: int
    tier: str
    cycle: int | None
    line: ev.AppEvent  # SaveCommitted; LocalSaveCommitted for the local tier
    how: str  # how the tier was told (the save announcement, the directory on disk)
    disk: ev.CheckpointOnDisk | None = None


def tier_of_disk(disk: ev.CheckpointOnDisk | None, ck: ev.CheckpointState | None = None) -> str | None:
    """The tier of an `iter_N` directory: the non-persistent one's when it lies in that tier's
    directory (a custom one as history found it, else `non_persistent/`)."""
    if disk is None:
        return None
    custom = ck.non_persistent_path if ck is not None else None
    if custom and disk.rel.startswith(custom.rstrip("/") + "/"):
        return NON_PERSISTENT
    return NON_PERSISTENT if f"/{NON_PERSISTENT_SUBDIR}/" in f"/{disk.rel}" else PERSISTENT


def _tier_of(start: ev.AppStart, iteration: int, ck: ev.CheckpointState | None) -> tuple[str, str, ev.CheckpointOnDisk | None]:
    disk = on_disk(ck, iteration)
    custom = start.arguments.get(NP_DIR_ARG) if start.arguments else None
    for e in start.events:
        if isinstance(e, (ev.SaveStarted, ev.SaveScheduled)) and e.iteration == iteration:
            tier = NON_PERSISTENT if is_non_persistent_path(e.path, custom) else PERSISTENT
            return tier, f"{e.src}", disk
    found = tier_of_disk(disk, ck)
    if found is not None:
        return found, f"{disk.rel} on disk", disk
    return PERSISTENT, "no save announcement or directory tells otherwise", disk


def commits(tl: ev.Timeline, upto_cycle: int | None = None) -> list[Commit]:
    """Every committed checkpoint of the run's logs (cycles <= upto_cycle), in log order, with its tier."""
    out = []
    for start in tl.starts:
        if upto_cycle is not None and (start.cycle is None or start.cycle > upto_cycle):
            continue
        for e in start.events:
            if isinstance(e, ev.SaveCommitted):
                tier, how, disk = _tier_of(start, e.iteration, tl.checkpoints)
                out.append(Commit(e.iteration, tier, start.cycle, e, how, disk))
            elif isinstance(e, ev.LocalSaveCommitted):
                out.append(Commit(e.iteration, LOCAL, start.cycle, e, f"{e.src}"))
    return out


def on_disk(ck: ev.CheckpointState | None, iteration: int, tier: str | None = None) -> ev.CheckpointOnDisk | None:
    """The `iter_N` directory of a tier (any tier when None; the persistent one first)."""
    if ck is None:
        return None
    found = [c for c in ck.iterations if c.iteration == iteration and (tier is None or tier_of_disk(c, ck) == tier)]
    found.sort(key=lambda c: tier_of_disk(c, ck) != PERSISTENT)
    return found[0] if found else None


def tier_of_iteration(tl: ev.Timeline, iteration: int, upto_cycle: int | None = None) -> str:
    """The tier of the checkpoint of this iteration: the newest commit line naming it, else the disk."""
    named = [c for c in commits(tl, upto_cycle) if c.iteration == iteration]
    if named:
        return named[-1].tier
    return tier_of_disk(on_disk(tl.checkpoints, iteration), tl.checkpoints) or PERSISTENT


@dataclass(frozen=True)
class Load:
    """Which tier a start restored, from Megatron's own load lines."""

    tier: str
    iteration: int | None
    evidence: tuple[ev.AppEvent, ...]
    np_older: ev.AppEvent | None  # Megatron's "non-persistent checkpoints are older" warning


def local_type(start: ev.AppStart) -> bool:
    """The start ran with `--non-persistent-ckpt-type local` (its arguments table says so)."""
    args = start.arguments
    return args is not None and args.get("non_persistent_ckpt_type") == "local"


def loaded(start: ev.AppStart) -> Load | None:
    """The tier and iteration a start loaded (None: no load line). A local load prints no
    announcement of its own: with `--non-persistent-ckpt-type local`, a `successfully loaded`
    line without `loading distributed checkpoint` before it is the manager's load."""
    np_older = start.first(ev.NonPersistentOlder)
    began = start.first(ev.LoadStarted)
    done = start.first(ev.CheckpointLoaded)
    if began is None and done is None:
        return None
    tier = NON_PERSISTENT if isinstance(began, ev.NonPersistentLoadStarted) else PERSISTENT
    if began is None and local_type(start):
        tier = LOCAL
    iteration = done.iteration if done is not None else began.iteration
    return Load(tier, iteration, tuple(e for e in (began, done, np_older) if e is not None), np_older)


def tracker_of(ck: ev.CheckpointState, tier: str) -> tuple[str | None, ev.Src]:
    """The tracker text of a tier's directory and the evidence line naming it."""
    if tier == NON_PERSISTENT:
        path = f"{ck.non_persistent_path or f'{ck.path}/{NON_PERSISTENT_SUBDIR}'}/{TRACKER_NAME}"
        text = ck.non_persistent_tracker
        return text, ev.Src(path, 0, text if text is not None else "missing")
    return ck.tracker, ck.tracker_src()


def describe(tier: str, iteration: int, disk: ev.CheckpointOnDisk | None = None) -> str:
    where = f" ({disk.rel})" if disk is not None else ""
    return f"{tier} checkpoint {iteration}{where}"


def pruned(tl: ev.Timeline, iteration: int) -> Commit | None:
    """The later non-persistent commit whose save made Megatron delete non-persistent checkpoint
    `iteration` (cleanup_old_non_persistent_checkpoint keeps one before each save, so the one
    two saves later), or None when nothing in the log explains its absence."""
    later = sorted({c.iteration: c for c in commits(tl) if c.tier == NON_PERSISTENT and c.iteration > iteration}.values(),
                   key=lambda c: c.iteration)
    return later[1] if len(later) >= 2 else None


def first_kept(tl: ev.Timeline, saves: Sequence[ev.SaveCommitted]) -> Commit | None:
    """The first of these commits (sorted by iteration) still on disk, passing over only
    non-persistent ones that Megatron itself deleted since (`pruned`)."""
    for save in saves:
        tier = tier_of_iteration(tl, save.iteration)
        disk = on_disk(tl.checkpoints, save.iteration, tier)
        if disk is not None:
            return Commit(save.iteration, tier, None, save, "on disk", disk)
        if tier != NON_PERSISTENT or pruned(tl, save.iteration) is None:
            return None
    return None


@dataclass(frozen=True)
class OlderTier:
    """A restore of another tier's checkpoint, older than the newest committed at fault time."""

    restored: str  # e.g. "persistent checkpoint 5 (checkpoints/iter_0000005)"
    newest: str
    said: str  # Megatron's own warning, quoted, or ""
    evidence: tuple[object, ...]


def older_tier(tl: ev.Timeline, upto: int | None, start: ev.AppStart, k: int) -> OlderTier | None:
    """A restore that loaded another tier's checkpoint, older than K, the newest committed at
    fault time (commits of cycles <= `upto`, the episode's failed cycle), or None when the load
    was of K's own tier (then it is an ordinary stale load, not a tier mix-up)."""
    got = loaded(start)
    if got is None or got.iteration is None or got.iteration >= k:
        return None
    want_tier = tier_of_iteration(tl, k, upto)
    if got.tier == want_tier:
        return None
    newest = describe(want_tier, k, on_disk(tl.checkpoints, k, want_tier))
    old = describe(got.tier, got.iteration, on_disk(tl.checkpoints, got.iteration, got.tier))
    said = f" (Megatron said: {NP_OLDER_TEXT!r})" if got.np_older is not None else ""
    named = [c.line for c in commits(tl, upto) if c.iteration == k][-1:]
    return OlderTier(old, newest, said, (*got.evidence, *named))


def naming(tl: ev.Timeline, tier: str) -> str:
    """How a sentence names a checkpoint of `tier`: plain "checkpoint" in a run that wrote only
    persistent ones (every verdict before tiers), "<tier> checkpoint" where tiers mix."""
    mixed = any(c.tier != PERSISTENT for c in commits(tl)) or tier != PERSISTENT
    return f"{tier} checkpoint" if mixed else "checkpoint"


# ---------------------------------------------------------------- local checkpoints (NVRx LocalCheckpointManager)


@dataclass(frozen=True)
class LocalSaves:
    """What the logs say about local checkpoints up to a cycle: the iterations whose save
    was validated (NVRx's `Successfully saved local checkpoint`, or Megatron's own line,
    which it prints only after NVRx's finalize passed), the failed ones, and who holds
    which shard (NVRx's `Renaming ... to <dir>/iter_N_R_local.pt`, by the writing rank)."""

    validated: dict[int, ev.AppEvent]
    failed: dict[int, ev.LocalSaveFailed]
    holders: dict[tuple[int, int], tuple[int, ...]]  # (iteration, owner) -> the ranks whose local dir holds it

    @property
    def newest(self) -> int | None:
        return max(self.validated) if self.validated else None


def local_saves(tl: ev.Timeline, upto_cycle: int | None = None) -> LocalSaves:
    validated: dict[int, ev.AppEvent] = {}
    failed: dict[int, ev.LocalSaveFailed] = {}
    holders: dict[tuple[int, int], set[int]] = {}
    for start in tl.starts:
        if upto_cycle is not None and (start.cycle is None or start.cycle > upto_cycle):
            continue
        for e in start.events:
            if isinstance(e, (ev.LocalSaveValidated, ev.LocalSaveCommitted)):
                validated.setdefault(e.iteration, e)
            elif isinstance(e, ev.LocalSaveFailed):
                failed.setdefault(e.iteration, e)
            elif isinstance(e, ev.LocalCopyWritten) and e.rank is not None:
                holders.setdefault((e.iteration, e.owner), set()).add(e.rank)
    for it in failed:  # a failed finalize is no validation, whatever else was printed
        validated.pop(it, None)
    return LocalSaves(validated, failed, {k: tuple(sorted(v)) for k, v in holders.items()})


def has_local(tl: ev.Timeline) -> bool:
    return any(local_type(s) or s.first(ev.LocalSaveCommitted) or s.first(ev.LocalSaveValidated) for s in tl.starts)


def copies(start: ev.AppStart, iteration: int) -> list[tuple[int, int, ev.LocalCopyRead]]:
    """(owner, reader, line) of every shard of `iteration` a start read from a local
    directory (NVRx's DEBUG `Finish loading`): reader == owner is the rank's own copy; else
    the reader held owner's replica and sent it (the retrieve plan)."""
    return [(e.owner, e.rank, e) for e in start.of(ev.LocalCopyRead) if e.iteration == iteration and e.rank is not None]


def describe_copies(found: list[tuple[int, int, ev.LocalCopyRead]]) -> str:
    parts = []
    for owner, reader, _e in sorted(found, key=lambda x: (x[0], x[1])):
        parts.append(f"rank {owner}'s shard from its own copy" if owner == reader
                     else f"rank {owner}'s shard from rank {reader}'s replica")
    return "; ".join(parts)


# ---------------------------------------------------------------- in-process restart (NVRx inprocess.Wrapper)

INPROCESS_RESTARTED = "restart_ex"  # HealthCheckPassed: the Wrapper restarts the function in the same process
INPROCESS_CAUGHT = "fn_ex"  # the wrapped function raised
INPROCESS_GAVE_UP = ("exit_ex", "finalize_ex", "health_ex", "terminate_ex", "other_ex")


@dataclass(frozen=True)
class Inprocess:
    """NVRx's in-process restarts in one start (a launcher cycle's processes): the Wrapper's
    own lines, and Megatron's reload after the first restart."""

    caught: tuple[ev.InprocessEvent, ...]
    restarted: tuple[ev.InprocessEvent, ...]
    gave_up: tuple[ev.InprocessEvent, ...]
    reload: ev.CheckpointLoaded | None  # the first load after the first restart
    reload_began: ev.LoadStarted | None
    from_random: ev.StartedFromRandom | None  # Megatron found nothing to load after the restart
    max_iterations: int | None  # --inprocess-max-iterations, from the arguments table

    @property
    def restarts(self) -> int:
        """Restarts of the most restarted rank (the Wrapper's iteration count)."""
        per: dict[int | None, int] = {}
        for e in self.restarted:
            per[e.wrapped_rank] = per.get(e.wrapped_rank, 0) + 1
        return max(per.values(), default=0)


def inprocess(start: ev.AppStart | None) -> Inprocess | None:
    """The in-process restarts of a start, None when the Wrapper printed none of its lines."""
    if start is None:
        return None
    lines = start.of(ev.InprocessEvent)
    if not lines:
        return None
    restarted = [e for e in lines if e.name == INPROCESS_RESTARTED]
    reload = began = random = None
    if restarted:
        after = False
        for e in start.events:
            if e is restarted[0]:
                after = True
            elif after and isinstance(e, ev.LoadStarted) and began is None:
                began = e
            elif after and isinstance(e, ev.StartedFromRandom) and random is None:
                random = e
            elif after and isinstance(e, ev.CheckpointLoaded):
                reload = e
                break
    args = start.arguments
    limit = args.get("inprocess_max_iterations") if args is not None else None
    return Inprocess(tuple(e for e in lines if e.name == INPROCESS_CAUGHT), tuple(restarted),
                     tuple(e for e in lines if e.name in INPROCESS_GAVE_UP), reload, began, random,
                     int(limit) if limit is not None and str(limit).isdigit() else None)


def after_restart(start: ev.AppStart, ip: Inprocess) -> ev.AppStart:
    """The part of a start after the Wrapper's first restart, as a start of its own: what the
    restarted function did (its reload, its saves, its end), in the same launcher cycle. Its
    iteration summary is the start's last iteration (the restarted function's, since the start
    ends with it); the first is unknown to the summary, so it is left unset."""
    first = ip.restarted[0]
    at = next(i for i, e in enumerate(start.events) if e is first)
    events = start.events[at + 1:]
    return ev.AppStart(index=start.index, cycle=start.cycle, source=start.source, events=tuple(events),
                       first_iteration=None, last_iteration=start.last_iteration,
                       bad_iterations=tuple(b for b in start.bad_iterations if first.ts is None or b.ts is None
                                            or b.ts >= first.ts),
                       saves_committed=sum(isinstance(e, ev.SaveCommitted) for e in events))


@dataclass(frozen=True)
class InprocessMilestones:
    """The latency split's moments of an in-process restart, from the Wrapper's own UTC stamps:
    the fault caught (`fn_ex`, the detection), the restart approved (`restart_ex`, the
    processes are ready again: no launcher, no new workers), then the restarted function's
    model built after its reload (the restore)."""

    caught: ev.InprocessEvent | None
    restarted: ev.InprocessEvent
    built: ev.ModelBuilt | None


def inprocess_milestones(start: ev.AppStart | None) -> InprocessMilestones | None:
    ip = inprocess(start)
    if start is None or ip is None or not ip.restarted:
        return None
    after = after_restart(start, ip)
    return InprocessMilestones(ip.caught[0] if ip.caught else None, ip.restarted[0], after.first(ev.ModelBuilt))


def fault_process_died(tl: ev.Timeline, cycle: int, pid: int | None) -> ev.LauncherEvent | None:
    """The launcher's record that the injected process (its pid, from the marker) exited in
    `cycle`: then whatever followed was a launcher restart, with new processes."""
    if pid is None:
        return None
    return next((e for e in tl.launcher_events() if isinstance(e, ev.WorkerFailed) and e.pid == pid
                 and e.cycle in (cycle, None)), None)


# ---------------------------------------------------------------- what megatron-cpu cannot run

# Probed on megatron-cpu (megatron-core 0.19.2, NVRx 0.7.0, gloo, the CUDA->CPU shim), with
# Megatron's and NVRx's own first error; docs/tiers.md "On CPU". The GPU tier runs them.
CPU_REFUSALS: tuple[tuple[str, str | None, str], ...] = (
    ("--non-persistent-ckpt-type", "local",
     "Megatron's local checkpoints cannot be saved on CPU: MCoreTensorAwareStateDict.copy_tensors_to_cpu "
     "(megatron/core/dist_checkpointing/tensor_aware_state_dict.py) clones a tensor already on the CPU without "
     "detaching it, and NVRx's async save then fails with \"RuntimeError: Cowardly refusing to serialize non-leaf "
     "tensor which requires_grad\" and \"CheckpointingException: Failure during saving local checkpoint from "
     "iteration 2 (last valid iteration is -1)\" (nvidia_resiliency_ext/checkpointing/local/ckpt_managers/"
     "base_manager.py); qualify local checkpoints on GPUs (--workload megatron, the GPU kit)"),
    ("--inprocess-restart", None,
     "Megatron's in-process restart cannot restart on CPU: its wrapper runs, but at the first restart NVRx's "
     "inprocess.finalize.ThreadedFinalize raises \"RuntimeError: CUDA is not initialized\" "
     "(nvidia_resiliency_ext/inprocess/finalize.py) and then, past that check, torch.device(LOCAL_RANK) \"Cannot "
     "access accelerator device when none is available.\"; qualify in-process restart on GPUs (--workload megatron, "
     "the GPU kit)"),
)


def cpu_problems(workload_args: Sequence[str]) -> list[str]:
    """Why the megatron-cpu workload refuses these workload arguments (one sentence each)."""
    out = []
    for flag, value, why in CPU_REFUSALS:
        given = _option(workload_args, flag) if value is not None else (
            flag if any(a == flag or a.startswith(flag + "=") for a in workload_args) else None)
        if given is not None and (value is None or given == value):
            out.append(f"workload argument {flag}{' ' + value if value else ''}: {why}")
    return out
