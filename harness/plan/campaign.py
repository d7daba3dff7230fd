"""Campaigns: one job, many faults, drawn by a seeded schedule (docs/campaigns.md). Pure.

`draw` turns (count, seed, kinds, ranks, workload) into the schedule of harness.vocab.faults
(`PlannedFault`s, fault 1 first: index + 1 is the marker each claims), with its own
`random.Random(seed)` and nothing global, so the same inputs give the same schedule on every
machine: a campaign is replayed from its seed. Kinds come out of a shuffled bag (every kind of the
pool once before any twice), so a campaign of at least as many faults as kinds meets every kind.

`sizing` says how long the job must train and how many restarts NVRx must allow so that every
fault finds a checkpoint committed after the previous recovery and a restart to recover with;
the reasons are the plan's own words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from harness.vocab import tiers
from harness import workloads
from harness.vocab.dialect import BOUNDS
from harness.vocab.faults import (CAMPAIGN_MOMENTS, FAULT_KINDS, FAULT_MOMENTS, FINAL, FIRST_COMMIT, LOAD, NODE,
                            SAVE_IN_FLIGHT, PlannedFault)

MAX_SEED = int(BOUNDS["record"][1])  # the largest whole number run.json and verdict.json keep exactly


def moments_of(kind: str, workload: str) -> tuple[str, ...]:
    """The campaign moments a kind can fire at on this workload (CAMPAIGN_MOMENTS, in order)."""
    k, shown = FAULT_KINDS[kind], workloads.find(workload)
    return tuple(m for m in CAMPAIGN_MOMENTS if k.allows(m) and shown is not None and m in shown.moments)


def kind_problem(kind: str, workload: str, *, nnodes: int = 1, nnodes_name: str = "--nnodes") -> str | None:
    """Why a campaign cannot draw `kind` on this workload (one clause), or None. `nnodes_name`:
    the node count's knob as the user gave it (the flag, or NNODES)."""
    k = FAULT_KINDS.get(kind)
    if k is None:
        return f"{kind!r} is no fault kind (one of {', '.join(FAULT_KINDS)})"
    if k.poisons_checkpoint:  # the loop it starts ends the job: the later faults would never fire
        return f"{kind} ends the job instead of being recovered from ({k.recovery})"
    if k.fills_filesystem:  # the launch mounts that filesystem for a run of this one fault only
        return (f"{kind} needs the run's checkpoints on a filesystem of its own, which only a run of this one "
                f"fault mounts (--fault {kind})")
    if k.planned is not None:
        return f"{kind} is planned, not runnable: {k.planned}"
    if k.gpu_only and not getattr(workloads.find(workload), "on_gpu", False):
        return f"{kind} needs a GPU and the {workload} workload runs on CPU"
    if k.injects == NODE and nnodes < 2:
        return f"{kind} loses a whole node and the job has {nnodes_name}={nnodes}: use {nnodes_name}=2 or more"
    if not moments_of(kind, workload):
        return f"{kind} fires at none of the campaign moments ({', '.join(CAMPAIGN_MOMENTS)}) on {workload}"
    return None


def default_kinds(workload: str, *, nnodes: int = 1, slurm: bool = False) -> tuple[str, ...]:
    """The kinds a campaign draws when --fault-kinds is not given: every kind of the vocabulary
    this workload can run that the job recovers from on its own (not poison, corrupt or
    disk-full: they end the job or need root), node only on a multi-node job under Slurm."""
    return tuple(name for name, k in FAULT_KINDS.items()
                 if kind_problem(name, workload, nnodes=nnodes) is None and (k.injects != NODE or slurm))


def draw(count: int, seed: int, kinds: Sequence[str], world: int, workload: str, *,
         gpus_per_node: int = 1) -> tuple[PlannedFault, ...]:
    """The schedule of a campaign: `count` faults, each a kind from a shuffled bag of `kinds`, a
    moment the kind can fire at on `workload`, a rank of the world (a node loss: a rank off
    node 0, whose launcher hosts the rendezvous). Kinds it cannot draw are left out (validation
    names them); () when none is left."""
    pool = [k for k in dict.fromkeys(kinds) if k in FAULT_KINDS and moments_of(k, workload)]
    if not pool or count < 1 or world < 1:
        return ()
    rng = random.Random(seed)
    bag: list[str] = []
    out = []
    for _ in range(count):
        if not bag:
            bag = list(pool)
            rng.shuffle(bag)
        kind = bag.pop()
        moment = rng.choice(moments_of(kind, workload))
        ranks = range(gpus_per_node, world) if FAULT_KINDS[kind].injects == NODE else range(world)
        rank = rng.choice(ranks) if ranks else 0
        out.append(PlannedFault(kind, rank, moment))
    return tuple(out)


@dataclass(frozen=True)
class Sizing:
    """What a schedule needs of the job: `train_iters` at least (the last fault's trigger before
    the final iteration, and a checkpoint after the last recovery) and `max_restarts` (one per
    fault), with the reasons the plan prints."""

    train_iters: int
    max_restarts: int
    train_reason: str
    restarts_reason: str


def sizing(schedule: Sequence[PlannedFault], save_interval: int) -> Sizing:
    """Each fault waits for a checkpoint committed after the previous recovery: after-commit
    fires at the first commit above the restored iteration R (R + S), in-save while the save
    after it is in flight (R + 2S); either way the next recovery restores R + S. The last fault
    must fire before the final iteration and the last recovery must commit one more
    checkpoint; the final iteration is rounded up to a save."""
    s = max(1, save_interval)
    restored, need = 0, 1
    for f in schedule:
        trigger = restored + (2 * s if FAULT_MOMENTS[f.moment].hits_a_save else s)
        need = max(need, trigger + 1)
        restored += s
    need = max(need, restored + s)
    in_save = sum(1 for f in schedule if FAULT_MOMENTS[f.moment].hits_a_save)
    # An in-save fault whose save finished between two polls of the nemesis fires during the next
    # save instead, and every later fault shifts by one save: one save of slack per in-save fault
    # (seen on megatron-cpu under load: the last fault never happened and the budget ran out).
    iters = -(-need // s) * s + in_save * s
    n = len(schedule)
    if n == 1 and in_save:  # a single in-save fault, sized as a campaign of one (spec.from_sources)
        train = (f"the {schedule[0].moment} fault waits for a committed checkpoint and the save after it (save "
                 f"interval {s}: during the save at {2 * s}), the recovery commits one more checkpoint, and one save "
                 "of slack (a save can finish between two of the nemesis's polls)")
    else:
        train = (f"each of the {n} faults waits for a checkpoint committed after the previous "
                 f"recovery (save interval {s}: after-commit at the restored iteration + {s}"
                 + (f", in-save during the save at + {2 * s} ({in_save} of them)" if in_save else "")
                 + f"), and the last recovery commits one more checkpoint"
                 + (f"; one save of slack per in-save fault (a save can finish between two polls)" if in_save else ""))
    restarts = f"--max-restarts {n}: one restart per fault; fewer is refused (the restart budget would run out)"
    return Sizing(iters, n, train, restarts)


# Why a planned fault cannot reach its moment (Reach.missing):
NO_COMMIT = "no-commit"  # no checkpoint of a tier it waits on is committed above the restored iteration
FINAL_COMMIT = "final-commit"  # the first such checkpoint is the final iteration's: nothing left to recover
NO_SAVE_IN_FLIGHT = "no-save-in-flight"  # in-save: no persistent save starts after the committed one before the end
NO_LOAD = "no-load"  # in-restore: the restored checkpoint is none, or not a persistent one the load watch sees
NOTHING_TO_TRAIN = "nothing-to-train"  # last-iteration: the cycle restored the final iteration already


@dataclass(frozen=True)
class Reach:
    """Planned fault `index` (its marker) on a training that commits at `Commits`: `after` the
    iteration its cycle restored (the start's for fault 1), `at` the iteration it fires at,
    `restores` the one its recovery restores; or `missing`, why it cannot fire (`found`: the
    iteration that would have been the one, when there is one)."""

    index: int
    fault: PlannedFault
    after: int
    at: int | None = None
    restores: int | None = None
    missing: str | None = None
    found: int | None = None


def reach(schedule: Sequence[PlannedFault], commits: tiers.Commits, start: int = 0,
          watched: Sequence[str] = (tiers.PERSISTENT, tiers.NON_PERSISTENT)) -> list[Reach]:
    """Where each planned fault fires (harness.vocab.faults.FaultMoment.fires) and what its recovery
    restores, fault 1 first, up to the first that cannot fire (the later ones wait on it).
    `start`: the iteration the run restores at its start (a persistent checkpoint; 0: none);
    `watched`: the tiers whose commits arm an after-commit fault (--fault-after). An in-save
    fault's recovery restores the persistent commit before the save it hit (a non-persistent one
    committed between the two is not counted). Pure: what validation refuses a plan on."""
    out: list[Reach] = []
    restored, tier = start, (tiers.PERSISTENT if start else None)
    final = commits.final
    for index, fault in enumerate(schedule, start=1):
        rule = FAULT_MOMENTS[fault.moment].fires
        here = Reach(index, fault, restored)
        if rule == FIRST_COMMIT:
            nxt = commits.next(restored, watched)
            if nxt is None or nxt[0] >= final:
                here = Reach(index, fault, restored, missing=NO_COMMIT if nxt is None else FINAL_COMMIT,
                             found=nxt[0] if nxt else None)
            else:
                here = Reach(index, fault, restored, at=nxt[0], restores=nxt[0])
                restored, tier = nxt
        elif rule == SAVE_IN_FLIGHT:
            first = commits.next(restored, (tiers.PERSISTENT,))
            second = commits.next(first[0], (tiers.PERSISTENT,)) if first is not None and first[0] < final else None
            if first is None or first[0] >= final:
                here = Reach(index, fault, restored, missing=NO_COMMIT if first is None else FINAL_COMMIT,
                             found=first[0] if first else None)
            elif second is None or second[0] >= final:
                here = Reach(index, fault, restored, missing=NO_SAVE_IN_FLIGHT, found=second[0] if second else None)
            else:
                here = Reach(index, fault, restored, at=second[0], restores=first[0])
                restored, tier = first
        elif rule == LOAD:
            if tier != tiers.PERSISTENT:
                here = Reach(index, fault, restored, missing=NO_LOAD)
            else:
                here = Reach(index, fault, restored, at=restored, restores=restored)
        elif rule == FINAL:
            if restored >= final:
                here = Reach(index, fault, restored, missing=NOTHING_TO_TRAIN)
            else:
                here = Reach(index, fault, restored, at=final, restores=final)
                restored, tier = final, tiers.PERSISTENT
        out.append(here)
        if here.missing is not None:
            break
    return out


def describe(schedule: Sequence[PlannedFault]) -> list[str]:
    """One line per planned fault: `fault 1 of 6: kill on rank 1, after-commit`."""
    n = len(schedule)
    return [f"fault {i} of {n}: {f.kind} on rank {f.rank}, {f.moment}" for i, f in enumerate(schedule, start=1)]
