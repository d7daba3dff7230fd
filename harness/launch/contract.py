"""The run's contract: what a run promised, written once into run.json before its launch.

Every reader (verify, report, the watcher, repeat, the pytest fixtures) judges a run against
this record, read back through harness.read.history's one run.json reader into the typed
events.RunConfig.contract (range-checked there: a run directory may come from a stranger):

- `faults`: every planned fault in marker order (kind, rank, moment, its place in the schedule,
  the checkpoint tier an after-commit fault waits on); one fault is a schedule of one,
  `--fault-at in-restore` plans two, a campaign N;
- `launcher`: the NVRx the plan imports (package directory, version, digest of its files:
  harness.nemesis.identity), as the plan's search path finds it, never a path that was not used;
- `baseline`: the uninterrupted run the baseline checks are judged against (how it came, its
  run ID, its configuration hash, the digest of its checkpoints as they were), or why none;
- `tiers` and `shape`: the checkpoint tiers and the job's nodes, ranks and parallel sizes.

docs/contracts.md ("run.json's contract") is the format; `VERSION` its version. Writing only:
nothing here reads a run directory except the baseline's (its configuration hash, the digest
of its checkpoints) at the moment the contract is written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.launch import baseline as baselinemod
from harness.read import evidence
from harness.nemesis import identity as nvrx_identity
from harness.vocab import tiers
from harness.plan.commands import Plan
from harness.vocab.faults import FAULT_MOMENTS

VERSION = 1
# How a baseline came (run.json contract.baseline.how; verdict.json's baseline.how).
RAN, REUSED, GIVEN, NONE, AUTO = "ran", "reused", "given", "none", "auto"
BASELINE_HOWS = (RAN, REUSED, GIVEN, NONE, AUTO)


@dataclass(frozen=True)
class BaselinePromise:
    """What the run is judged against (harness.launch.runner.BaselineUsed, in the words of the contract):
    how it came, its run directory, why none, and why it is unusable already (the twin failed)."""

    how: str
    path: Path | None = None
    why: str | None = None
    problem: str | None = None


def promise_of_choice(choice: baselinemod.Choice) -> BaselinePromise:
    """A plan's baseline before its launch (a dry run, a batch script): what --baseline chose."""
    if choice.mode == baselinemod.NONE:
        return BaselinePromise(NONE, why=choice.why)
    if choice.mode == "path":
        return BaselinePromise(GIVEN, choice.path)
    return BaselinePromise(AUTO, why="decided at launch: an earlier uninterrupted run of this configuration, or "
                                     "the twin run first")


def launcher(plan: Plan) -> dict:
    """The NVRx the plan's workers import: found along the plan's PYTHONPATH, then this
    interpreter's own path (the launcher inherits both), without importing it. Its path and
    digest only when what is there is the version planned (a dry run for another machine
    records the version alone)."""
    search = [*plan.launcher.pythonpath, *sys.path[1:]]
    try:
        found = nvrx_identity.locate(search)
    except Exception:  # noqa: BLE001 - an install that cannot be read is no identity, never a failed plan
        found = None
    if found is None or found.version != plan.nvrx.version:
        return {"package": nvrx_identity.PACKAGE, "path": None, "version": plan.nvrx.version, "sha256": None,
                "files": None}
    return found.to_json()


def baseline(promise: BaselinePromise | None) -> dict | None:
    if promise is None:
        return None
    out: dict[str, object] = {"how": promise.how, "run_id": None, "config_hash": None, "checkpoints": None,
                              "why": promise.why, "problem": promise.problem}
    if promise.path is not None:
        path = Path(promise.path)
        out["run_id"] = path.name
        out["config_hash"] = baselinemod.recorded_hash(path)[0]
        found = evidence.digest(path / "checkpoints")
        out["checkpoints"] = found.to_json() if found is not None else None
    return out


def build(plan: Plan, promise: BaselinePromise | None) -> dict:
    """run.json's `contract` for this plan and its baseline."""
    spec = plan.spec
    faults = [{**f.to_json(i), "fault_after": spec.fault_after if FAULT_MOMENTS[f.moment].watches_commits else None}
              for i, f in enumerate(spec.schedule, start=1)] if spec.fault != "none" else []
    return {
        "version": VERSION,
        "faults": faults,
        "launcher": launcher(plan),
        "baseline": baseline(promise),
        "tiers": {"save_interval": spec.save_interval, "fault_after": spec.fault_after,
                  "non_persistent_ckpt_type": tiers.non_persistent_type(spec.extra_args)},
        "shape": {"nnodes": spec.nnodes, "gpus_per_node": spec.gpus_per_node, "world": spec.world, "tp": spec.tp,
                  "pp": spec.pp, "cp": spec.cp,
                  "dp": spec.topology.dp if spec.world % spec.topology.model_parallel == 0 else None,
                  "hot_spares": spec.hot_spares, "min_nnodes": spec.min_nnodes},
    }
