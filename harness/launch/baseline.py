"""Baselines without manual steps: the uninterrupted twin of a run, found or planned.

`loss_continuity` and `state_equivalence` judge a recovered run against an uninterrupted run
of the same configuration. `--baseline auto` (the default on the CPU tiers, opt-in on GPUs)
reuses such a run from the work directory when one with the same configuration hash
qualified there, else runs the twin (fault none, everything else as planned): beside the
fault run where both can share the machine, else first (harness.launch.runner.Twin).

The configuration hash covers exactly what determines the training trajectory and the end
state the checks compare: the software that trains (workload, entrypoint script and its
digest, Megatron install or checkout, interpreter), the model shape, the parallel layout and
batch, the iterations and the save interval, the optimizer kind, the Transformer Engine /
apex choice, the GPU architecture, and the workload arguments given after `--` except those
that act only when a checkpoint is loaded (an uninterrupted run never loads). It leaves out
what only the recovery or the harness sees: the fault, its rank and moment, deadlines,
launcher version and path, ports, run ID, work directory, step padding and save delay.
It cannot see a change inside an installed package (torch, megatron-core) whose path stays
the same: use a fresh work directory after upgrading one, or `--baseline PATH`.

Planning here is pure except for reading the entrypoint's digest and the work directory's
run.json files (to find a reusable baseline); running the twin is harness.launch.runner's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness import __version__
from harness.read import evidence
from harness.machine import ports
from harness.safe import safeio
from harness.plan import spec as specmod
from harness.vocab.layout import (MARKER_NAME, RUN_ID_PATTERN, TRACKER_NAME, checkpoint_iter_dir, is_valid_run_id,
                            read_tracker_file)
from harness.plan.spec import RunSpec, SpecError
from harness.vocab.verdict import EvidenceDigest

if TYPE_CHECKING:
    from harness.plan.commands import Plan

AUTO, NONE = "auto", "none"
HASH_SCHEME = "nvrx-qual trajectory v1"
# RunSpec fields that shape the training trajectory (see the module's docstring).
TRAJECTORY_FIELDS = ("workload", "megatron_path", "megatron_cpu_dir", "megatron_bridge_dir", "python", "uv", "nnodes",
                     "gpus_per_node", "tp", "pp", "cp", "num_layers", "hidden_size", "num_attention_heads", "seq_length",
                     "vocab_size", "micro_batch_size", "train_iters", "save_interval", "transformer_engine", "apex",
                     "distributed_optimizer", "gpu_arch")
# Fields only one workload sets (None for every other): hashed only when set.
ONE_WORKLOAD_FIELDS = frozenset({"megatron_bridge_dir"})
# Workload arguments that act only when a checkpoint is loaded (flag -> how many values follow
# it): the uninterrupted twin never loads, so they leave its trajectory as it is.
RESTORE_ONLY_ARGS = {"--no-load-optim": 0, "--no-load-rng": 0, "--finetune": 0, "--drop-on-restore": 1}
MAX_SCRIPT_BYTES = 16 << 20
MAX_CANDIDATES = 10_000  # run directories looked at for a reusable baseline


def trajectory_args(extra: tuple[str, ...]) -> tuple[str, ...]:
    """The workload arguments without those that act only on a load (RESTORE_ONLY_ARGS)."""
    out: list[str] = []
    skip = 0
    for arg in extra:
        if skip:
            skip -= 1
            continue
        flag, eq, _value = arg.partition("=")
        if flag in RESTORE_ONLY_ARGS:
            skip = 0 if eq else RESTORE_ONLY_ARGS[flag]
            continue
        out.append(arg)
    return tuple(out)


def _digest(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(safeio.read_bytes(path, limit=MAX_SCRIPT_BYTES)).hexdigest()
    except OSError:
        return None


def trajectory(spec: RunSpec) -> dict:
    """What the configuration hash covers, as JSON values."""
    values: dict[str, object] = {"scheme": HASH_SCHEME, "harness_version": __version__}
    for name in TRAJECTORY_FIELDS:
        value = getattr(spec, name)
        if value is None and name in ONE_WORKLOAD_FIELDS:
            continue  # the other workloads' hashes stay what they were before the field
        values[name] = str(value) if isinstance(value, Path) else value
    values["global_batch_size"] = spec.topology.effective_global_batch
    values["workload_args"] = list(trajectory_args(spec.extra_args))
    script = spec.workload_type.entrypoint(spec)
    values["entrypoint"] = str(script) if script is not None else None
    values["entrypoint_sha256"] = _digest(script)
    return values


def config_hash(spec: RunSpec) -> str:
    """sha256 of the canonical JSON of trajectory(spec), in hex."""
    text = json.dumps(trajectory(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def short(digest: str) -> str:
    return digest[:12]


@dataclass(frozen=True)
class Choice:
    """What a run does for its baseline. mode: auto (reuse or run the twin), path (the one
    given) or none (`why` says why: asked, fault none, a restart-loop plan, a resumed run)."""

    mode: str
    config_hash: str
    path: Path | None = None
    why: str | None = None


def choose(spec: RunSpec) -> Choice:
    """The baseline the run's knob asks for; SpecError for a --baseline PATH that is not the
    run directory of an uninterrupted run (checked before anything is launched)."""
    digest = config_hash(spec)
    asked = spec.baseline
    if spec.fault == "none":
        return Choice(NONE, digest, why="fault none: this run is itself a baseline")
    if asked == NONE:
        return Choice(NONE, digest, why="--baseline none")
    kind = specmod.FAULT_KINDS.get(spec.fault)
    if kind is not None and kind.poisons_checkpoint:
        return Choice(NONE, digest, why=f"--fault {spec.fault} plans a restart loop, not a recovery: nothing to compare")
    if asked != AUTO:
        from harness.report.verify import RunDirError, check_baseline

        path = Path(asked).expanduser().absolute()
        try:
            check_baseline(path)
        except RunDirError as exc:
            raise SpecError([f"{exc} (--baseline takes auto, none or such a run directory)"]) from None
        return Choice("path", digest, path=path)
    if spec.checkpoint_dir is not None:
        return Choice(NONE, digest, why=f"the run resumes from {spec.say('checkpoint_dir')}, which has no "
                                        "uninterrupted twin here: give --baseline RUN_DIR")
    return Choice(AUTO, digest)


def recorded_hash(run_dir: Path) -> tuple[str | None, dict]:
    """The configuration hash run_dir's run.json records (None: none, or unreadable) and the record."""
    try:
        record = safeio.read_json(run_dir / "run.json")
    except (OSError, ValueError, RecursionError):
        return None, {}
    if not isinstance(record, dict):
        return None, {}
    digest = record.get("config_hash")
    return (digest if isinstance(digest, str) else None), record


def reuse_problem(run_dir: Path, digest: str) -> str | None:
    """Why the uninterrupted run in `run_dir` cannot be reused as the baseline of a run of this
    configuration hash (None: it can). Evidence, not flags: its run.json records the hash and
    fault none, no marker, a verdict.json that qualified it as a baseline and recorded the
    digest of its evidence (harness.read.evidence), that evidence unchanged since (the same names,
    kinds and sizes at least: a copy may change the times), and its final checkpoint there
    (the tracker at its --train-iters, that iter_N a real directory with DCP's .metadata)."""
    found, record = recorded_hash(run_dir)
    spec = record.get("spec") if isinstance(record.get("spec"), dict) else {}
    if found != digest or record.get("dry_run") or spec.get("fault") != "none":
        return "it is not an uninterrupted run of this configuration"
    if os.path.lexists(run_dir / MARKER_NAME):
        return f"it had a fault ({MARKER_NAME} is there)"
    try:
        verdict = safeio.read_json(run_dir / "verdict.json")
    except (OSError, ValueError, RecursionError):
        return "it has no readable verdict.json"
    if not isinstance(verdict, dict) or verdict.get("qualified") is not True or verdict.get("fault") != "none":
        return "its verdict.json does not qualify it as a baseline"
    then = EvidenceDigest.from_json(verdict.get("evidence_digest"))
    if then is None:
        return "its verdict.json records no digest of its evidence (judged by an earlier release)"
    now = evidence.digest(run_dir)
    if now is None or (then.sha256 != now.sha256 and (then.method != now.method or then.sizes_sha256 != now.sizes_sha256)):
        changed = then.compare(now) if now is not None else "it is not a directory any more"
        return f"its evidence changed since its verdict ({changed})"
    final = spec.get("train_iters")
    checkpoints = run_dir / "checkpoints"
    tracked = read_tracker_file(checkpoints / TRACKER_NAME)
    if tracked.value is None or (isinstance(final, int) and not isinstance(final, bool) and tracked.value != final):
        said = tracked.value if tracked.value is not None else tracked.state
        return f"its final checkpoint is gone (the tracker in checkpoints/ says {said}, not iteration {final})"
    iter_dir = checkpoint_iter_dir(checkpoints, tracked.value)
    if not safeio.is_real_dir(iter_dir) or not safeio.is_regular(iter_dir / ".metadata"):
        return f"its final checkpoint is gone (no checkpoints/{iter_dir.name}/.metadata)"
    return None


def reusable(run_dir: Path, digest: str) -> bool:
    """reuse_problem finds nothing against it."""
    return reuse_problem(run_dir, digest) is None


@dataclass(frozen=True)
class Candidate:
    """An uninterrupted run of this configuration in the work directory: its run directory and
    why it is not reused (None: it is reusable)."""

    path: Path
    problem: str | None


def candidates(work_dir: Path, digest: str, *, exclude: tuple[str, ...] = ()) -> list[Candidate]:
    """Every earlier uninterrupted run of this configuration hash under WORK_DIR/runs/, newest
    first, each with why it cannot be reused (reuse_problem). Only real directories whose names
    are run IDs are looked at; nothing is followed through a link."""
    runs = work_dir / "runs"
    found: list[tuple[float, str, Candidate]] = []
    try:
        with os.scandir(runs) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_CANDIDATES:
                    break
                if entry.name in exclude or not is_valid_run_id(entry.name) or not entry.is_dir(follow_symlinks=False):
                    continue
                path = Path(entry.path)
                hashed, record = recorded_hash(path)
                spec = record.get("spec") if isinstance(record.get("spec"), dict) else {}
                if hashed != digest or record.get("dry_run") or spec.get("fault") != "none":
                    continue
                try:
                    mtime = os.lstat(path / "verdict.json").st_mtime
                except OSError:
                    try:
                        mtime = os.lstat(path / "run.json").st_mtime
                    except OSError:
                        continue
                found.append((mtime, entry.name, Candidate(path, reuse_problem(path, digest))))
    except OSError:
        return []
    return [c for _m, _n, c in sorted(found, key=lambda f: (f[0], f[1]), reverse=True)]


def find_reusable(work_dir: Path, digest: str, *, exclude: tuple[str, ...] = ()) -> Path | None:
    """The newest reusable baseline (reuse_problem finds nothing) under WORK_DIR/runs/, or None."""
    return next((c.path for c in candidates(work_dir, digest, exclude=exclude) if c.problem is None), None)


def twin_run_id(spec: RunSpec) -> str:
    """`<run id>-baseline`, or with a random tail when that directory exists already."""
    base = f"{spec.run_id[: specmod.MAX_RUN_ID_LEN - len('-baseline') - 5]}-baseline"
    run_id = base
    while os.path.lexists(spec.work_dir / "runs" / run_id):
        run_id = f"{base}-{secrets.token_hex(2)}"
    assert is_valid_run_id(run_id), RUN_ID_PATTERN
    return run_id


def twin_spec(spec: RunSpec, *, lowered: bool = False) -> RunSpec:
    """The uninterrupted twin: fault none, a fresh run ID and fresh local ports, no baseline of
    its own, everything else as planned; `lowered` (a twin at a lower CPU priority, twin_nice):
    with patient deadlines. Validated (SpecError)."""
    changes: dict[str, object] = {"fault": "none", "fault_at": specmod.DEFAULT_FAULT_AT, "run_id": twin_run_id(spec),
                                  "baseline": NONE, "faults": 1, "seed": None, "fault_kinds": ()}
    rdzv, log_port = ports.free_ports(2)
    picked: dict[str, object] = {}
    if (spec.nnodes == 1 or spec.local_nodes) and (spec.rdzv_endpoint or "").startswith("127.0.0.1:"):
        picked["rdzv_endpoint"] = f"127.0.0.1:{rdzv}"
    if spec.log_server_port is not None:
        picked["log_server_port"] = log_port
    twin = dataclasses.replace(spec, **changes).with_picked(**picked)
    if lowered:
        twin = patient(twin)
    specmod.validate(twin)
    return twin


def patient(spec: RunSpec) -> RunSpec:
    """`spec` with each section deadline and the out-of-section deadline at least the default
    profile's (Megatron's own, minutes), its workload check interval kept: a twin at a lower CPU
    priority may wait behind other work for a while, and no deadline may take that for a hang.
    Deadlines are not part of the configuration hash; the twin has no fault to detect."""
    floor = specmod.DEADLINE_PROFILES[specmod.DEFAULT_DEADLINE_PROFILE]
    floor_sections = dict(floor["section_timeouts"])
    values: dict[str, object] = {
        "section_timeouts": tuple((name, max(sec, floor_sections.get(name, sec))) for name, sec in spec.section_timeouts),
        "out_of_section_timeout": max(spec.out_of_section_timeout, floor["out_of_section_timeout"]),
        "workload_check_interval": spec.workload_check_interval}
    return dataclasses.replace(spec, **values, deadline_profile=specmod.deadline_profile_of(values))


def twin_beside(plan: "Plan") -> bool:
    """Whether the twin can run beside the fault run of `plan` on this machine: ranks on CPUs (a
    GPU's memory and compute are not shared) and launchers started here (a launch through srun
    waits for the allocation's resources). Elsewhere it runs first."""
    return not plan.spec.workload_type.on_gpu and plan.srun is None


# When the twin beside the fault run launches (twin_start).
AT_ONCE = "with the fault run"
AFTER_START = "once the fault run's workers have started"


# The nice value of a twin that launches with the fault run (twin_nice): the lowest, so that where
# both want a CPU the run's processes get it (Linux's weights: 15 against 1024) and the twin takes
# what the run leaves idle. bench/harness_overhead.py measured 10 too: the twin then still slowed
# the run (docs/figures.md).
TWIN_NICE = 19


def twin_nice(plan: "Plan") -> int:
    """The CPU priority, as a nice value, of the twin of `plan`: TWIN_NICE for a twin beside the
    fault run that launches with it (twin_start AT_ONCE: ranks that compute through the run), so
    that the run under test, and the recovery latencies it measures, keep the CPUs and the twin
    takes what they leave idle (the launcher's start, the restart, the shutdown's waits); 0 for a
    twin run first or launched once the run's workers started, which mostly waits. Only the twin's
    share of the CPUs changes, never what it computes; its deadlines are patient ones (patient:
    where other work keeps the CPUs busy, a twin at the lowest priority is slow, not hung)."""
    return TWIN_NICE if twin_beside(plan) and twin_start(plan) == AT_ONCE else 0


def twin_start(plan: "Plan") -> str:
    """When the twin beside the fault run of `plan` launches: AFTER_START for a workload whose
    ranks mostly wait once started (Workload.steps_wait: the two start-ups would compete for the
    CPUs, and the twin still ends first), else AT_ONCE. The fault run's launch ending first
    launches it too."""
    return AFTER_START if plan.spec.workload_type.steps_wait else AT_ONCE


def cost(plan: "Plan", choice: Choice) -> str:
    """One line for `plan`: what the baseline choice adds to the run."""
    spec = plan.spec
    h = short(choice.config_hash)
    when = "beside the fault run" if twin_beside(plan) else "before the fault run"
    if choice.mode == "path":
        return f"baseline: {choice.path} (config hash of this run {h}); loss_continuity and state_equivalence are judged against it"
    if choice.mode == NONE:
        if choice.why == "--baseline none":
            return (f"baseline: none: loss_continuity and state_equivalence are not judged; opt in with --baseline "
                    f"auto: one extra uninterrupted run of {spec.train_iters} iterations (about this run's length "
                    f"again) {when}, reused by later runs of the same configuration")
        return f"baseline: none ({choice.why})"
    found = find_reusable(spec.work_dir, choice.config_hash)
    if found is not None:
        return f"baseline: auto: reuses {found.name} (config hash {h}): no extra run"
    nice = twin_nice(plan)
    adds = (f"one more launch of the job on this machine, {twin_start(plan)}"
            + (f" at a lower CPU priority (nice {nice})" if nice else "") if twin_beside(plan)
            else "one extra run of the job's length before it")
    return (f"baseline: auto: runs the uninterrupted twin {when} (fault none, {spec.train_iters} iterations, "
            f"config hash {h}): {adds}; later runs of this configuration in {spec.work_dir} reuse it")
