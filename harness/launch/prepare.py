"""Create a planned run's artifact directories and write run.json, without touching
anything the user already owns."""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from harness import __version__
from harness.safe import atomic, safeio
from harness.launch import baseline
from harness.launch import contract as contractmod
from harness.vocab.layout import CLAIM_NAME, RunLayout, marker_index
from harness.plan.commands import Plan
from harness.plan.spec import RunSpec, SpecError, knob_name, leftovers_problem


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_utc_offset_s() -> int:
    """Local time minus UTC on this host, so verify can convert local-time log stamps."""
    return -time.altzone if time.localtime().tm_isdst > 0 else -time.timezone


def run_record(plan: Plan, dry_run: bool, promise: contractmod.BaselinePromise | None = None) -> dict:
    return {
        "schema": 1,
        "created_at": utc_now_iso(),
        "utc_offset_s": local_utc_offset_s(),
        "harness_version": __version__,
        "dry_run": dry_run,
        "nvrx_version": plan.nvrx.version,
        "megatron_version": plan.spec.workload_type.software_version(plan.spec),
        "spec": plan.spec.to_json(),
        # what determines the training trajectory, hashed (harness.launch.baseline): a later run of the
        # same configuration finds this run as its baseline by it
        "config_hash": baseline.config_hash(plan.spec),
        "cuda_device_max_connections": {"value": plan.connections.value, "reason": plan.connections.reason},
        "captures_console": plan.captures_console,
        "notes": list(plan.notes),
        "commands": [command.to_json(name) for name, command in plan.commands],
        # what the run promised, once (harness.launch.contract; docs/contracts.md): every reader judges against it
        "contract": contractmod.build(plan, promise),
    }


_CLAIMS: dict[Path, int] = {}  # run root -> the descriptor holding its lock, in this process


def claim(layout: RunLayout, spec: RunSpec | None = None) -> None:
    """Create the run directory (refusing a link or a file on the way) and lock it for this
    process, so that two `plan` / `run` with the same run ID at the same instant cannot both
    pass the checks and write into one directory: exactly one wins, the other is refused.
    The lock is held until `release` or the end of the process. `spec`: the plan's, whose
    knobs a refusal names as the user gave them (RunSpec.knob; without it, by their flags)."""
    work_dir, run_id = _knob(spec, "work_dir"), _knob(spec, "run_id")
    root = layout.root
    if root in _CLAIMS:
        return
    try:
        safeio.make_dirs(root, below=root.parent.parent)  # WORK_DIR is the user's; runs/<id> must be real dirs
        fd = os.open(root / CLAIM_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise SpecError([f"cannot create the run directory {root} ({exc.strerror or exc}"
                         f"{': ' + str(exc.filename) if exc.filename else ''}): set {work_dir} to a "
                         f"writable directory (not a file) and {run_id} to a short name"]) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        st, now = os.fstat(fd), os.lstat(root / CLAIM_NAME)  # the holder before us may have removed it meanwhile
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
            raise BlockingIOError(11, "the lock file was replaced")
    except OSError as exc:
        holder = os.read(fd, 64).decode("ascii", "replace").strip() or "another process"
        os.close(fd)
        raise SpecError([f"run ID {layout.run_id} is being planned or run right now by nvrx-qual (pid {holder}) in "
                         f"{root}: use a new {run_id} for every run"]) from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _CLAIMS[root] = fd


def release(layout: RunLayout) -> None:
    """Give up this process's claim on the run directory: the lock file goes, then the lock."""
    fd = _CLAIMS.pop(layout.root, None)
    if fd is not None:
        try:
            os.unlink(layout.root / CLAIM_NAME)  # while still locked: a waiter then sees a replaced file
        except OSError:
            pass
        os.close(fd)


def _knob(spec: RunSpec | None, field: str) -> str:
    return spec.knob(field) if spec is not None else knob_name(field)


def _make_dir(directory: Path, layout: RunLayout, spec: RunSpec | None = None) -> None:
    if directory == layout.root or layout.root in directory.parents:
        safeio.make_dirs(directory, below=layout.root)
    elif not directory.is_dir():  # the user's NVRX_CHECKPOINT_DIR: validated to exist, never created here
        knob = _knob(spec, "checkpoint_dir")
        raise SpecError([f"{directory} is not a directory: point {knob} at an existing checkpoint "
                         f"directory, or leave {knob} out"])


def prepare(plan: Plan, dry_run: bool, baseline_promise: contractmod.BaselinePromise | None = None) -> Path:
    """Claim the run directory (see `claim`), mkdir its directories and write run.json. A
    run.json of an earlier *dry run* of the same ID is replaced (that is the seed's flow:
    dry run, then the real run); any other existing run.json, a marker or a launch.json is
    refused. The checks run under the claim, so they cannot race another process.
    `baseline_promise`: the baseline the run will be judged against (harness.launch.runner); None:
    what --baseline chose (a dry run's `auto` is decided at launch; a batch script runs none)."""
    layout = plan.layout
    claim(layout, plan.spec)
    try:
        _check_fresh(layout, plan.spec)
        for directory in layout.artifact_dirs():
            _make_dir(directory, layout, plan.spec)
        promise = baseline_promise if baseline_promise is not None else _promise_of_plan(plan, dry_run)
        atomic.write_text(layout.run_json, json.dumps(run_record(plan, dry_run, promise), indent=2) + "\n")
    except OSError as exc:
        release(layout)
        raise SpecError([f"cannot write the run directory {layout.root} ({exc.strerror or exc}"
                         f"{': ' + str(exc.filename) if exc.filename else ''}): free space or fix its "
                         f"permissions, or choose another {plan.spec.knob('work_dir')}"]) from exc
    except SpecError:
        release(layout)
        raise
    return layout.run_json


def settle_baseline(plan: Plan, promise: contractmod.BaselinePromise) -> None:
    """Record in run.json's contract how the twin that ran beside the run ended (`promise`: the
    baseline the run is judged against, its checkpoints digested now), in place of what the
    contract said while it ran (contract.beside_problem). Only that entry changes, once, after
    both launches ended and before the verdict, in the run directory this process claimed and
    wrote; never through a link."""
    record = safeio.read_json(plan.layout.run_json)  # our own, written by prepare() of this process
    if not isinstance(record, dict) or not isinstance(record.get("contract"), dict):
        raise ValueError(f"{plan.layout.run_json} holds no contract to settle")
    record["contract"]["baseline"] = contractmod.baseline(promise)
    atomic.write_text(plan.layout.run_json, json.dumps(record, indent=2) + "\n")


def _promise_of_plan(plan: Plan, dry_run: bool) -> contractmod.BaselinePromise:
    promise = contractmod.promise_of_choice(baseline.choose(plan.spec))
    if promise.how == contractmod.AUTO and not dry_run:  # a batch script: nothing runs a twin for it
        return contractmod.BaselinePromise(contractmod.NONE, why="a batch script runs no baseline twin: judge it with "
                                                                 "verify --baseline RUN_DIR of an uninterrupted run")
    return promise


def _check_fresh(layout: RunLayout, spec: RunSpec | None = None) -> None:
    run_id = _knob(spec, "run_id")
    if os.path.lexists(layout.run_json):
        try:
            earlier = safeio.read_json(layout.run_json)
        except (OSError, ValueError, RecursionError):
            earlier = {}
        earlier = earlier if isinstance(earlier, dict) else {}
        if not earlier.get("dry_run"):
            raise SpecError([f"run directory {layout.root} already holds run.json of a planned run: "
                             f"use a new {run_id} for every test; old runs are never overwritten"])
    try:  # every planned fault's marker (fault_injected.json, fault_injected.2.json, ...), not only the first
        markers = sorted(layout.root / e.name for e in os.scandir(layout.root) if marker_index(e.name) is not None)
    except OSError:
        markers = []
    for path, what in ((layout.marker, "an injection marker"), *((m, "an injection marker") for m in markers),
                       (layout.launch_json, "launch.json of a launched run")):
        if os.path.lexists(path):
            raise SpecError([f"run directory {layout.root} already holds {what} ({path.name}): use a new "
                             f"{run_id} for every run; old runs are never overwritten"])
    leftovers = layout.leftovers()
    if leftovers:
        raise SpecError([leftovers_problem(layout.root, leftovers, run_id=run_id,
                                           checkpoint_dir=_knob(spec, "checkpoint_dir"))])
