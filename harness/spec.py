"""RunSpec: one frozen, typed description of a qualification run.

Every knob is read from the seed's environment names (MEGATRON_PATH, NVRX_WORK_DIR,
NVRX_RUN_ID, GPUS_PER_NODE, NNODES, TP, PP, TRAIN_ITERS, NVRX_DEMO_FAULT,
NVRX_FAULT_RANK, NVRX_CHECKPOINT_DIR, RDZV_ENDPOINT, NVRX_DRY_RUN) and from the equal
CLI flags; a flag wins over the environment, the environment over the workload's
default. `validate` then checks everything that can be checked before a process
starts, without creating or deleting anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import secrets
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from harness import safeio, topology
from harness.layout import FT_STATE_NAME, MARKER_NAME, RUN_ID_PATTERN, TRACKER_NAME, RunLayout, is_valid_run_id

FAULTS = ("kill", "hang", "none")
WORKLOADS = ("megatron", "reference")
SECTIONS = ("setup", "step", "checkpointing")


class SpecError(ValueError):
    """Input refused before anything starts. str() is one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class RunSpec:
    workload: str
    work_dir: Path
    run_id: str
    megatron_path: Path | None = None
    nnodes: int = 1
    gpus_per_node: int = 2
    tp: int = 1
    pp: int = 1
    cp: int = 1
    num_layers: int = 4
    hidden_size: int = 512
    num_attention_heads: int = 8
    seq_length: int = 1024
    vocab_size: int = 32000
    micro_batch_size: int = 1
    global_batch_size: int | None = None  # None: the active GPU count
    train_iters: int = 100
    save_interval: int = 5
    fault: str = "kill"
    fault_rank: int = 1
    checkpoint_dir: Path | None = None
    rdzv_endpoint: str | None = None
    dry_run: bool = False
    section_timeouts: tuple[tuple[str, float], ...] = (("setup", 900.0), ("step", 120.0), ("checkpointing", 600.0))
    out_of_section_timeout: float = 180.0
    max_restarts: int = 2
    monitor_interval: float | None = None
    workload_check_interval: float | None = None
    poll_interval: float | None = None  # nemesis tracker poll; None: its default
    step_time_ms: int | None = None  # reference workload only
    nvrx_version: str | None = None  # declared; None: detect the installed one
    nvrx_path: Path | None = None  # extra directory holding the NVRx to use
    log_server_port: int | None = None  # NVRx >= 0.6 gRPC log funnel; chosen from the OS
    gpu_arch: str | None = None
    transformer_engine: bool = True
    uv: bool = False
    python: str = sys.executable
    assume_shared_storage: bool = False
    extra_args: tuple[str, ...] = ()

    @property
    def topology(self) -> topology.Topology:
        return topology.Topology(self.nnodes, self.gpus_per_node, self.tp, self.pp, self.cp,
                                 self.micro_batch_size, self.global_batch_size)

    @property
    def world(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def layout(self) -> RunLayout:
        return RunLayout.for_run(self.work_dir, self.run_id, self.checkpoint_dir)

    @property
    def section_timeouts_arg(self) -> str:
        return ",".join(f"{name}:{_num(sec)}" for name, sec in self.section_timeouts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif f.name == "section_timeouts":
                value = {name: sec for name, sec in value}
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        out["world"] = self.world
        out["global_batch_size_effective"] = self.topology.effective_global_batch
        out["dp"] = self.topology.dp if self.world % self.topology.model_parallel == 0 else None
        out["checkpoint_dir"] = str(self.layout.checkpoints)
        return out


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# Workload defaults. Megatron: the seed's default run. Reference: the CPU workload, sized to
# finish kill + hang + none in a few minutes on two cores (hang detection = step timeout +
# one workload check interval).
DEFAULTS: dict[str, dict[str, Any]] = {
    "megatron": {},
    "reference": dict(
        gpus_per_node=2, num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=256,
        train_iters=30, save_interval=5,
        # step, checkpointing and out-of-section alike: whichever of them a SIGSTOP lands in,
        # the stopped rank's own monitor fires about when its blocked peers' do, so the
        # timeout message names the injected rank (what replacement_cycle checks for a hang).
        section_timeouts=(("setup", 60.0), ("step", 10.0), ("checkpointing", 10.0)),
        out_of_section_timeout=10.0, monitor_interval=0.3, workload_check_interval=1.0, step_time_ms=100,
    ),
}


# ---- parsing of single values -------------------------------------------------------------


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_float(text: str) -> float:
    return float(text.strip())


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _parse_choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip() not in choices:
            raise ValueError(text)
        return text.strip()
    return parse


def parse_section_timeouts(text: str) -> tuple[tuple[str, float], ...]:
    """'setup:900,step:120,checkpointing:600' -> (('setup', 900.0), ...)."""
    out = []
    for part in text.split(","):
        name, sep, value = part.partition(":")
        if not sep or name.strip() not in SECTIONS or float(value) <= 0:
            raise ValueError(text)
        out.append((name.strip(), float(value)))
    if {n for n, _ in out} != set(SECTIONS):
        raise ValueError(text)
    return tuple(out)


@dataclass(frozen=True)
class Knob:
    """One RunSpec field: its flag, its environment name, how to parse it, what it means."""

    field: str
    flag: str
    parse: Callable[[str], Any]
    help: str
    env: str | None = None
    fix: str = ""  # what a valid value looks like, for the error message


KNOBS: tuple[Knob, ...] = (
    Knob("workload", "--workload", _parse_choice(WORKLOADS), "megatron (GPU) or reference (CPU, no GPU needed)",
         "NVRX_QUAL_WORKLOAD", "megatron or reference"),
    Knob("megatron_path", "--megatron-path", Path, "Megatron-LM checkout holding pretrain_gpt.py", "MEGATRON_PATH"),
    Knob("work_dir", "--work-dir", Path, "runs go to WORK_DIR/runs/RUN_ID (default: current directory)",
         "NVRX_WORK_DIR"),
    Knob("run_id", "--run-id", str, "fresh ID for every test (default: generated)", "NVRX_RUN_ID"),
    Knob("nnodes", "--nnodes", _parse_int, "number of nodes", "NNODES", "a positive integer"),
    Knob("gpus_per_node", "--gpus-per-node", _parse_int, "GPUs (ranks) per node", "GPUS_PER_NODE",
         "a positive integer"),
    Knob("tp", "--tp", _parse_int, "tensor parallel size", "TP", "a positive integer"),
    Knob("pp", "--pp", _parse_int, "pipeline parallel size", "PP", "a positive integer"),
    Knob("cp", "--cp", _parse_int, "context parallel size", "CP", "a positive integer"),
    Knob("num_layers", "--num-layers", _parse_int, "model layers", None, "a positive integer"),
    Knob("hidden_size", "--hidden-size", _parse_int, "hidden size", None, "a positive integer"),
    Knob("num_attention_heads", "--num-attention-heads", _parse_int, "attention heads", None, "a positive integer"),
    Knob("seq_length", "--seq-length", _parse_int, "sequence length", None, "a positive integer"),
    Knob("vocab_size", "--vocab-size", _parse_int, "vocabulary size", None, "a positive integer"),
    Knob("micro_batch_size", "--micro-batch-size", _parse_int, "micro batch size", None, "a positive integer"),
    Knob("global_batch_size", "--global-batch-size", _parse_int, "global batch (default: active GPU count)", None,
         "a positive integer"),
    Knob("train_iters", "--train-iters", _parse_int, "final iteration", "TRAIN_ITERS", "a positive integer"),
    Knob("save_interval", "--save-interval", _parse_int, "checkpoint every N iterations", "SAVE_INTERVAL",
         "a positive integer"),
    Knob("fault", "--fault", _parse_choice(FAULTS), "kill (SIGKILL), hang (SIGSTOP) or none", "NVRX_DEMO_FAULT",
         "kill, hang or none"),
    Knob("fault_rank", "--fault-rank", _parse_int, "global rank that injects the fault", "NVRX_FAULT_RANK",
         "a rank number such as 0 or 1"),
    Knob("checkpoint_dir", "--checkpoint-dir", Path, "existing checkpoint dir to resume into (default: the run's)",
         "NVRX_CHECKPOINT_DIR"),
    Knob("rdzv_endpoint", "--rdzv-endpoint", str, "HOST:PORT every node reaches (needed with NNODES>1)",
         "RDZV_ENDPOINT"),
    Knob("dry_run", "--dry-run", _parse_bool, "validate and print the commands only", "NVRX_DRY_RUN", "1 or 0"),
    Knob("section_timeouts", "--section-timeouts", parse_section_timeouts,
         "ft_launcher section deadlines, seconds", None, "setup:900,step:120,checkpointing:600"),
    Knob("out_of_section_timeout", "--out-of-section-timeout", _parse_float, "seconds out of any section", None,
         "a number of seconds"),
    Knob("max_restarts", "--max-restarts", _parse_int, "worker-group restarts the launcher may do", None,
         "a non-negative integer"),
    Knob("monitor_interval", "--monitor-interval", _parse_float, "launcher monitor interval, seconds", None,
         "a number of seconds"),
    Knob("workload_check_interval", "--workload-check-interval", _parse_float,
         "rank monitor check interval, seconds", None, "a number of seconds"),
    Knob("poll_interval", "--poll-interval", _parse_float, "nemesis tracker poll interval, seconds",
         "NVRX_POLL_INTERVAL", "a number of seconds"),
    Knob("step_time_ms", "--step-time-ms", _parse_int, "reference workload: minimum step time", None,
         "a non-negative integer"),
    Knob("nvrx_version", "--nvrx-version", str, "NVRx version the commands are for (default: installed)",
         "NVRX_VERSION", "e.g. 0.7.0"),
    Knob("nvrx_path", "--nvrx-path", Path, "directory holding the NVRx to use (a pip --target install)",
         "NVRX_QUAL_NVRX_PATH"),
    Knob("gpu_arch", "--gpu-arch", str, "GPU architecture (hopper, blackwell, 9.0, ...; default: detected)",
         "NVRX_GPU_ARCH"),
    Knob("transformer_engine", "--transformer-engine", _parse_bool,
         "1: use Transformer Engine; 0: --transformer-impl local (default: detected)", None, "1 or 0"),
    Knob("python", "--python", str, "interpreter that runs the launcher on the nodes (default: this one)",
         "NVRX_QUAL_PYTHON"),
    Knob("uv", "--uv", _parse_bool, "1: launch through `uv run python` (default: detected)", None, "1 or 0"),
    Knob("assume_shared_storage", "--assume-shared-storage", _parse_bool,
         "1: trust that work/checkpoint paths are shared across nodes", None, "1 or 0"),
)
KNOBS_BY_FIELD = {k.field: k for k in KNOBS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The RunSpec flags; each defaults to None so that 'not given' falls through to the environment."""
    group = parser.add_argument_group("run specification (flags win over the environment names shown)")
    for knob in KNOBS:
        helptext = knob.help + (f" [env {knob.env}]" if knob.env else "")
        group.add_argument(knob.flag, dest=knob.field, default=None, metavar=knob.field.upper(), help=helptext)


def generated_run_id(workload: str, fault: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{workload}-{fault}-{stamp}-{secrets.token_hex(2)}"


def from_sources(flags: Mapping[str, Any], env: Mapping[str, str], extra_args: tuple[str, ...] = (),
                 detected: Mapping[str, Any] | None = None) -> RunSpec:
    """Build a RunSpec: flag > environment > detected (GPU arch, TE, uv) > workload default.

    Raises SpecError naming every value that cannot be parsed.
    """
    problems: list[str] = []
    raw: dict[str, Any] = {}
    for knob in KNOBS:
        given = flags.get(knob.field)
        source = knob.flag
        if given is None and knob.env and env.get(knob.env, "") != "":
            given, source = env[knob.env], knob.env
        if given is None:
            continue
        if not isinstance(given, str):  # already typed (pytest fixtures, library callers)
            raw[knob.field] = given
            continue
        try:
            raw[knob.field] = knob.parse(given)
        except (ValueError, TypeError):
            fix = f": use {knob.fix}" if knob.fix else ""
            problems.append(f"{source}={given!r} is not valid{fix}")
    if problems:
        raise SpecError(problems)

    workload = raw.get("workload", "megatron")
    values: dict[str, Any] = dict(DEFAULTS[workload])
    values.update({k: v for k, v in (detected or {}).items() if v is not None})
    values.update(raw)
    values["workload"] = workload
    values.setdefault("work_dir", Path.cwd())
    values["work_dir"] = Path(values["work_dir"]).expanduser().absolute()
    for key in ("megatron_path", "checkpoint_dir", "nvrx_path"):
        if values.get(key) is not None:
            values[key] = Path(values[key]).expanduser().absolute()
    if not values.get("run_id"):
        values["run_id"] = generated_run_id(workload, values.get("fault", "kill"))
    values["extra_args"] = tuple(extra_args)
    return RunSpec(**values)


# ---- validation ---------------------------------------------------------------------------


class Probe(Protocol):
    """The read-only facts about this machine that validation needs (faked in tests)."""

    def fs_type(self, path: Path) -> str | None: ...


# Filesystems every node of a cluster can see. Anything else (ext4, xfs, tmpfs, overlay, ...)
# is treated as node-local.
SHARED_FS_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "cephfs", "glusterfs",
    "fuse.glusterfs", "wekafs", "fuse.wekafs", "pvfs2", "orangefs", "panfs", "dvs", "afs", "fuse.juicefs",
    "fuse.ceph", "fuse.lustre", "fuse.gcsfuse", "fuse.s3fs", "9p",
})
NODE_LOCAL_PREFIXES = (Path("/tmp"), Path("/dev/shm"), Path("/var/tmp"))


class SystemProbe:
    """Filesystem type of a path from /proc/mounts (the longest mount point that contains it)."""

    def fs_type(self, path: Path) -> str | None:
        target = _nearest_existing(path).resolve()
        best: tuple[int, str] | None = None
        try:
            with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
                for line in mounts:
                    parts = line.split()
                    if len(parts) < 3:
                        continue
                    mount_point = Path(parts[1].replace("\\040", " "))
                    if target == mount_point or mount_point in target.parents:
                        depth = len(mount_point.parts)
                        if best is None or depth >= best[0]:
                            best = (depth, parts[2])
        except OSError:
            return None
        return best[1] if best else None


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def read_tracker(path: Path) -> int | None:
    """Megatron's tracker as the seed reads it: absent -> None (fresh run). Raises SpecError otherwise."""
    try:
        text = safeio.read_text(path, limit=4096, errors="strict")  # never a FIFO, a device or a link
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"tracker {path} is unreadable ({exc}): fix its permissions or restore it; "
                         "an unreadable tracker is never treated as iteration 0"]) from exc
    if not text.strip():
        raise SpecError([f"tracker {path} is empty: restore the iteration number, or use a fresh checkpoint dir; "
                         "only an absent tracker means a fresh run"])
    stripped = text.strip()
    if not (stripped.isascii() and stripped.isdigit()):  # what the nemesis accepts in the workers: "+7" is not
        raise SpecError([f"tracker {path} holds {stripped[:40]!r}, not an iteration number (bare digits): restore "
                         "it, or use a fresh checkpoint dir"])
    value = int(stripped)
    if value < 0:
        raise SpecError([f"tracker {path} holds a negative iteration {value}: restore it"])
    return value


MAX_RUN_ID_LEN = 128
MAX_SECONDS = 7 * 24 * 3600.0  # any timeout or interval of a qualification run is far below a week


def seconds_problems(spec: RunSpec) -> list[str]:
    """Timeouts and intervals that the launcher, the rank monitors or the nemesis would choke on
    (nan, inf, 1e308, zero or negative): refused here, not in the workers."""
    values = [(f"--section-timeouts {name}", sec) for name, sec in spec.section_timeouts]
    values += [("--out-of-section-timeout", spec.out_of_section_timeout), ("--monitor-interval", spec.monitor_interval),
               ("--workload-check-interval", spec.workload_check_interval),
               ("--poll-interval / NVRX_POLL_INTERVAL", spec.poll_interval)]
    return [f"{name}={value!r} must be a number of seconds above 0 and at most {MAX_SECONDS:g}"
            for name, value in values if value is not None and not seconds_ok(value)]


def seconds_ok(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value <= MAX_SECONDS)


def iterations_after(checkpoint_dir: Path, iteration: int) -> list[tuple[int, str]]:
    """(iteration, name) of every `iter_<digits>` entry (whatever its type) newer than
    `iteration`, oldest first: what a run resuming from `iteration` would save over."""
    found = []
    try:
        with os.scandir(checkpoint_dir) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith("iter_") and name[5:].isascii() and name[5:].isdigit() and int(name[5:]) > iteration:
                    found.append((int(name[5:]), name))
    except OSError:
        return []
    return sorted(found)


def validate(spec: RunSpec, probe: Probe | None = None, *, needs_endpoint: bool = True) -> int:
    """Check everything that can be checked before launch. Returns the restored iteration
    (0 for a fresh run). Raises SpecError with one line per problem. Creates nothing.
    needs_endpoint=False: an sbatch script computes the rendezvous endpoint at run time."""
    probe = probe or SystemProbe()
    problems: list[str] = []
    layout = spec.layout

    if len(spec.run_id) > MAX_RUN_ID_LEN:
        problems.append(f"NVRX_RUN_ID={spec.run_id[:40]!r}... is {len(spec.run_id)} characters long: use at most "
                        f"{MAX_RUN_ID_LEN} (it names a directory, a Slurm step and the launch tag)")
    elif not is_valid_run_id(spec.run_id):
        problems.append(f"NVRX_RUN_ID={spec.run_id!r} must match {RUN_ID_PATTERN}: "
                        "use letters, digits, '.', '_' and '-', starting with a letter or digit")
    elif layout.marker.exists() or layout.marker.is_symlink():
        problems.append(f"run directory {layout.root} already holds {MARKER_NAME} from an earlier run: "
                        "use a new NVRX_RUN_ID for every test")
    elif layout.launch_json.exists():
        problems.append(f"run directory {layout.root} already holds a launched run (launch.json): "
                        "use a new NVRX_RUN_ID for every test; old runs are never overwritten")

    blocker = next((p for p in (spec.work_dir, *spec.work_dir.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        problems.append(f"NVRX_WORK_DIR={spec.work_dir}: {blocker} is not a directory: point NVRX_WORK_DIR / "
                        "--work-dir at a directory (it is created when missing)")

    problems += topology.problems(spec.topology, spec.num_layers, spec.num_attention_heads)
    if spec.fault != "none":
        if not 0 <= spec.fault_rank < spec.world:
            if spec.world == 1:
                hint = "with one GPU set NVRX_FAULT_RANK=0"
            else:
                hint = f"choose a rank in 0..{spec.world - 1}"
            problems.append(f"NVRX_FAULT_RANK={spec.fault_rank} is outside the active world of {spec.world} "
                            f"rank(s): {hint}")
    for name, value in (("TRAIN_ITERS", spec.train_iters), ("save interval", spec.save_interval)):
        if value < 1:
            problems.append(f"{name}={value} must be a positive integer")
    problems += seconds_problems(spec)
    if spec.max_restarts < 0:
        problems.append(f"--max-restarts={spec.max_restarts} must be 0 or more")
    if spec.fault != "none" and spec.max_restarts < 1:
        problems.append(f"--max-restarts={spec.max_restarts} leaves no restart to recover from the {spec.fault} "
                        "fault: use 1 or more")

    if spec.workload == "megatron":
        if spec.megatron_path is None:
            problems.append("MEGATRON_PATH is not set: point it at a Megatron-LM checkout "
                            "(or use --workload reference for the CPU reference run)")
        elif not (spec.megatron_path / "pretrain_gpt.py").is_file():
            problems.append(f"MEGATRON_PATH={spec.megatron_path} has no pretrain_gpt.py: "
                            "point it at the root of a Megatron-LM checkout")

    restored = 0
    if spec.checkpoint_dir is not None:
        ckpt = spec.checkpoint_dir
        if not ckpt.is_dir():
            problems.append(f"NVRX_CHECKPOINT_DIR={ckpt} is not a directory: point it at an existing "
                            "checkpoint directory, or unset it for a fresh run")
        else:
            if (ckpt / FT_STATE_NAME).exists():
                problems.append(f"NVRX_CHECKPOINT_DIR={ckpt} holds {FT_STATE_NAME} (calculated timeouts that "
                                "override the fixed ones): archive it deliberately, e.g. "
                                f"mv {ckpt / FT_STATE_NAME} {ckpt / FT_STATE_NAME}.archived")
            try:
                restored = read_tracker(ckpt / TRACKER_NAME) or 0
            except SpecError as exc:
                problems += exc.problems
            else:
                newer = iterations_after(ckpt, restored)
                if newer:
                    shown = ", ".join(name for _, name in newer[:8]) + (f" and {len(newer) - 8} more"
                                                                         if len(newer) > 8 else "")
                    tracked = (f"newer than its tracker's iteration {restored}" if restored
                               else "but no tracker (the run would start afresh)")
                    problems.append(
                        f"NVRX_CHECKPOINT_DIR={ckpt} holds {shown}, {tracked}: the run would save over "
                        f"them and delete their files; they are yours, so nothing is touched: move them out (e.g. "
                        f"mkdir {ckpt}.newer && mv {ckpt}/{newer[0][1]} ... {ckpt}.newer/), or point "
                        f"NVRX_CHECKPOINT_DIR at a copy, or write the newest complete one into {TRACKER_NAME}")
                need = restored + 2 * spec.save_interval
                if restored and spec.train_iters < need:
                    problems.append(
                        f"TRAIN_ITERS={spec.train_iters} must exceed the restored iteration {restored} by at least "
                        f"two save intervals (2 x {spec.save_interval}): set TRAIN_ITERS={need} or more")

    if spec.nnodes > 1:
        if needs_endpoint and not spec.rdzv_endpoint:
            problems.append(f"NNODES={spec.nnodes} needs RDZV_ENDPOINT, a HOST:PORT every node reaches: inside the "
                            "allocation use the first host, e.g. export RDZV_ENDPOINT=\"$(scontrol show hostnames "
                            "\"$SLURM_JOB_NODELIST\" | head -n 1):<free port>\"")
        if not spec.assume_shared_storage:
            for name, path in (("NVRX_WORK_DIR", spec.work_dir), ("NVRX_CHECKPOINT_DIR", spec.checkpoint_dir)):
                if path is not None:
                    problem = _node_local(name, path, spec.nnodes, probe)
                    if problem:
                        problems.append(problem)
    if spec.rdzv_endpoint and not _valid_endpoint(spec.rdzv_endpoint):
        problems.append(f"RDZV_ENDPOINT={spec.rdzv_endpoint!r} is not HOST:PORT: use e.g. node001:29400")

    if problems:
        raise SpecError(problems)
    return restored


def _valid_endpoint(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def _node_local(name: str, path: Path, nnodes: int, probe: Probe) -> str | None:
    resolved = _nearest_existing(path).resolve()
    for prefix in NODE_LOCAL_PREFIXES:
        if resolved == prefix or prefix in resolved.parents:
            why = f"node-local storage ({prefix})"
            break
    else:
        fstype = probe.fs_type(path)
        if fstype in SHARED_FS_TYPES:
            return None
        why = f"a {fstype or 'unknown'} filesystem, not a network or parallel one"
    return (f"{name}={path} is on {why}; with NNODES={nnodes} every node must see it: use a path on shared "
            "storage (NFS, Lustre, GPFS, ...), or pass --assume-shared-storage 1 if it is shared")


def environment_view(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment names RunSpec reads, for run.json and error reports."""
    env = os.environ if env is None else env
    return {k.env: env[k.env] for k in KNOBS if k.env and k.env in env}
