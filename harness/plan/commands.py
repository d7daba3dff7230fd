"""RunSpec -> Plan: the exact commands, environment and run layout. Pure: no I/O.

One launcher command per node: NVRx's ft_launcher (run as `python -m` of the interpreter
that has the packages, never a bare console script that may resolve to another Python),
wrapping the nemesis, wrapping the unmodified workload entrypoint:

    python -m nvidia_resiliency_ext.fault_tolerance.launcher <launcher flags> \
        -m harness.nemesis <fault flags> -- <entrypoint> <workload args>

With NVRx >= 0.6 the launcher itself writes the per-cycle application logs, the launcher
log and the cycle infos into the run directory; with older launchers the harness captures
the console (`--tee 3` prefixes worker lines with `[default<local rank>]:`) and writes the
same files. With more than one node the launcher command runs under
`srun --ntasks=NNODES --ntasks-per-node=1`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.plan import campaign
from harness.vocab import tiers
from harness.machine import slurm
from harness.vocab import topology
from harness.vocab.layout import RunLayout
from harness.machine.nvrx import LAUNCHER_MODULE, NvrxTarget
from harness.vocab.faults import CAMPAIGN, DEFAULT_FAULT_AT, FAULT_KINDS, schedule_text
from harness.plan.spec import KNOBS_BY_FIELD, RunSpec, SpecError

NEMESIS_MODULE = "harness.nemesis"
# NVRx 0.7.0's exit status when it decides not to restart (no-progress stop).
NO_RESTART_EXIT_CODE = 93
# Placeholder for values only the batch script knows at run time (rendered as "${NAME}").
_SHELL_VAR = "__NVRXQ_VAR_{}__"
PLACEHOLDER_PREFIX = "__NVRXQ_VAR_"


def placeholder_problems(values: list[tuple[str, object]]) -> list[str]:
    """A user's value holding the placeholder text would be expanded as a shell variable."""
    return [f"{name}={value!r} holds {PLACEHOLDER_PREFIX!r}, which the planner reserves for shell variables of "
            "the batch script: choose a value without it"
            for name, value in values if isinstance(value, (str, Path)) and PLACEHOLDER_PREFIX in str(value)]


def _spec_values(spec: RunSpec) -> list[tuple[str, object]]:
    """Every value of the spec with the knob that gave it, as the user gave it (the workload
    arguments after `--` by that name)."""
    out: list[tuple[str, object]] = []
    for f in dataclasses.fields(spec):
        if not f.compare:  # from_env: how the knobs were given
            continue
        value = getattr(spec, f.name)
        name = spec.knob(f.name) if f.name in KNOBS_BY_FIELD else "workload argument after --" if (
            f.name == "extra_args") else f"--{f.name.replace('_', '-')}"
        out += [(name, v) for v in value] if isinstance(value, tuple) else [(name, value)]
    return out


def shell_var(name: str) -> str:
    return _SHELL_VAR.format(name)


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...] = ()  # set in the child's environment
    pythonpath: tuple[str, ...] = ()  # prepended to the inherited PYTHONPATH

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        """The child's full environment, given the parent's."""
        env = dict(base)
        env.update(self.env)
        if self.pythonpath:
            env["PYTHONPATH"] = ":".join([*self.pythonpath, *filter(None, [base.get("PYTHONPATH")])])
        return env

    def shell(self) -> str:
        """Copy-pasteable: cd, environment, then the argv, every word quoted."""
        words = [f"{k}={shlex.quote(v)}" for k, v in self.env]
        if self.pythonpath:
            words.append(f"PYTHONPATH={shlex.quote(':'.join(self.pythonpath))}${{PYTHONPATH:+:$PYTHONPATH}}")
        line = join(self.argv)
        return f"cd {shlex.quote(str(self.cwd))} && " + (" ".join(words) + " " if words else "") + line

    def to_json(self, name: str) -> dict:
        return {"name": name, "argv": list(self.argv), "cwd": str(self.cwd), "env": dict(self.env),
                "pythonpath_prepend": list(self.pythonpath)}


def join(argv: tuple[str, ...] | list[str]) -> str:
    """shlex.join, then placeholders become shell variable references."""
    text = shlex.join(argv)
    while "__NVRXQ_VAR_" in text:
        start = text.index("__NVRXQ_VAR_")
        end = text.index("__", start + len("__NVRXQ_VAR_"))
        name = text[start + len("__NVRXQ_VAR_"):end]
        text = text[:start] + '"${' + name + '}"' + text[end + 2:]
    return text


@dataclass(frozen=True)
class Plan:
    spec: RunSpec
    nvrx: NvrxTarget
    launcher: Command  # what runs on every node
    srun: Command | None  # the multi-node wrapper, or None on one node
    connections: topology.ConnectionsPolicy
    notes: tuple[str, ...] = field(default_factory=tuple)
    # --local-nodes: one launcher per node, all on this machine (the first hosts the rendezvous)
    local: tuple[Command, ...] = ()

    @property
    def layout(self) -> RunLayout:
        return self.spec.layout

    @property
    def command(self) -> Command:
        """The command the harness executes (the first of them with --local-nodes)."""
        return self.local[0] if self.local else (self.srun or self.launcher)

    @property
    def own_dirs(self) -> tuple[Path, ...]:
        """The checkpoint directories this plan itself names (NVRX_CHECKPOINT_DIR or the run's own,
        and those the workload arguments name, a relative one from the launch's working
        directory): the runner reads them wherever they are, as the user gave them."""
        named = [self.layout.checkpoints]
        for _flag, value in tiers.named_dirs(self.spec.extra_args):
            named.append(Path(value) if os.path.isabs(value) else self.launcher.cwd / value)
        return tuple(dict.fromkeys(named))

    @property
    def commands(self) -> tuple[tuple[str, Command], ...]:
        """Every command the harness starts, named."""
        if self.local:
            return tuple((f"launcher{i}", c) for i, c in enumerate(self.local))
        return (("srun" if self.srun else "launcher", self.command),)

    @property
    def captures_console(self) -> bool:
        """The harness, not the launcher, writes logs/launcher.log and the per-cycle logs."""
        return not self.nvrx.routes_logs

    def render(self) -> str:
        at = "" if self.spec.fault_at == DEFAULT_FAULT_AT else f" at {self.spec.fault_at}"
        what = (f"fault {self.spec.fault}{'' if self.spec.fault == 'none' else f' on rank {self.spec.fault_rank}{at}'}"
                if self.spec.fault != CAMPAIGN else f"campaign of {self.spec.faults} faults, seed {self.spec.seed}")
        lines = [f"# nvrx-qual plan: run {self.spec.run_id} ({self.spec.workload}, {what}, NVRx {self.nvrx.version})",
                 *(f"# {line}" for line in campaign_lines(self.spec)),
                 f"# run directory: {self.layout.root}",
                 f"# checkpoints:   {self.layout.checkpoints}",
                 f"# CUDA_DEVICE_MAX_CONNECTIONS: {self.connections.value or 'unset'} ({self.connections.reason})"]
        lines += [f"# note: {n}" for n in self.notes]
        lines += [c.shell() for _, c in self.commands]
        return "\n".join(lines) + "\n"


def campaign_lines(spec: RunSpec) -> list[str]:
    """What `plan` says of a campaign: the seed to replay it, every planned fault, and why the
    run trains this long and allows this many restarts (harness.plan.campaign.sizing); of a single
    in-save fault, why it trains this long (it is sized as a campaign of one)."""
    if spec.fault != CAMPAIGN and not spec.hits_a_save:
        return []
    size = campaign.sizing(spec.schedule, spec.save_interval)
    if spec.fault != CAMPAIGN:
        return [f"train iterations {spec.train_iters} (an in-save fault trains at least {size.train_iters} unless --train-iters is given: {size.train_reason})"]
    lines = [f"campaign: seed {spec.seed} (replay: --faults {spec.faults} --seed {spec.seed}"
             + (f" --fault-kinds {','.join(spec.fault_kinds)}" if spec.fault_kinds else "")
             + f"), drawn from {', '.join(spec.campaign_kinds)}",
             *campaign.describe(spec.schedule),
             f"train iterations {spec.train_iters} (at least {size.train_iters}: {size.train_reason})"]
    # fewer restarts than faults is refused before planning (spec._check_max_restarts)
    lines.append(size.restarts_reason if spec.max_restarts == size.max_restarts else
                 f"--max-restarts {spec.max_restarts}: {spec.faults} needed, one restart per fault")
    return lines


def check(spec: RunSpec, nvrx: NvrxTarget) -> None:
    """Plan-level refusals (they depend on the launcher version or the workload)."""
    problems = placeholder_problems(_spec_values(spec)) + spec.workload_type.plan_problems(spec, nvrx)
    if spec.min_nnodes is not None and spec.min_nnodes < spec.nnodes and nvrx.min_nodes_are_active:
        low, high = spec.min_nnodes, spec.nnodes
        problems.append(
            f"{spec.say('nnodes', f'{low}:{high}')} asks for a job of {high} nodes that may shrink to {low}; NVRx "
            f"{nvrx.version} has no such job: its rendezvous makes the first MIN nodes active and the other MAX-MIN "
            f"standby (hot spares), so the launcher would run {low * spec.gpus_per_node} ranks on {low} node(s), never "
            f"{spec.world}, and a lost node is replaced by a standby or ends the job (docs/slurm.md, 'A job that "
            f"shrinks'): for {low} active node(s) and {high - low} spare(s) use {spec.say('nnodes', low)} "
            f"{spec.say('hot_spares', high - low)}; for {high} active nodes use {spec.say('nnodes', high)}")
    kind = FAULT_KINDS.get(spec.fault)
    if kind is not None and kind.poisons_checkpoint and not nvrx.has_no_restart_exit_code:
        problems.append(f"{spec.say('fault')} makes a restart loop that only NVRx's no-progress rule stops (with exit "
                        f"{NO_RESTART_EXIT_CODE}); NVRx {nvrx.version} has no such rule (0.7.0 adds it), so the run "
                        f"could only loop until {spec.knob('max_restarts')}: use NVRx >= 0.7.0 or another fault")
    if spec.max_no_progress_cycles is not None and not nvrx.has_no_restart_exit_code:
        problems.append(f"{spec.say('max_no_progress_cycles')}: NVRx {nvrx.version} has no no-progress rule (0.7.0 "
                        "adds --ft-max-no-progress-cycles): drop it or use NVRx >= 0.7.0")
    if problems:
        raise SpecError(problems)


def workload_argv(spec: RunSpec) -> list[str]:
    return spec.workload_type.argv(spec)


def nemesis_argv(spec: RunSpec) -> list[str]:
    args = ["-m", NEMESIS_MODULE, "--fault", spec.fault]
    if spec.fault == CAMPAIGN:  # every planned fault, in marker order (harness.vocab.faults.PlannedFault)
        args += ["--schedule", schedule_text(spec.schedule)]
    elif spec.fault != "none":
        args += ["--fault-rank", str(spec.fault_rank)]
        if spec.fault_at != DEFAULT_FAULT_AT:
            args += ["--fault-at", spec.fault_at]
        if spec.fault_after != tiers.DEFAULT_FAULT_AFTER:  # harness.vocab.tiers
            args += ["--fault-after", spec.fault_after]
    args += ["--run-dir", str(spec.layout.root), "--checkpoint-dir", str(spec.layout.checkpoints)]
    if spec.poll_interval is not None:
        args += ["--poll-interval", _num(spec.poll_interval)]
    return args + ["--"]


def launcher_argv(spec: RunSpec, nvrx: NvrxTarget, rdzv_endpoint: str, log_server_port: str | None,
                  is_host: bool | None = None) -> list[str]:
    layout = spec.layout
    python = ["uv", "run", "python"] if spec.uv else [spec.python]
    args = python + ["-m", LAUNCHER_MODULE,
                     "--nnodes", nnodes_arg(spec),
                     "--nproc-per-node", str(spec.gpus_per_node),
                     "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", rdzv_endpoint,
                     "--rdzv-id", spec.run_id,
                     "--max-restarts", str(spec.max_restarts),
                     "--ft-rank-section-timeouts", spec.section_timeouts_arg,
                     "--ft-rank-out-of-section-timeout", _num(spec.out_of_section_timeout)]
    rdzv_conf = [] if is_host is None else [f"is_host={int(is_host)}"]
    if spec.rdzv_join_timeout is not None:
        rdzv_conf.append(f"join_timeout={_num(spec.rdzv_join_timeout)}")
    if rdzv_conf:
        args += ["--rdzv-conf", ",".join(rdzv_conf)]
    if spec.monitor_interval is not None:
        args += ["--monitor-interval", _num(spec.monitor_interval)]
    if spec.workload_check_interval is not None:
        args += ["--ft-workload-check-interval", _num(spec.workload_check_interval)]
    if nvrx.routes_logs:
        args += ["--ft-per-cycle-applog-prefix", str(layout.train_log_prefix),
                 "--ft-nvrx-logfile", str(layout.launcher_log)]
        if log_server_port is not None:
            # Without it NVRx binds 0.0.0.0:50051 and two launchers on one host lose lines.
            args += ["--ft-log-server-port", log_server_port]
        args += ["--ft-cycle-info-dir", str(layout.cycle_infos),
                 "--ft-checkpoint-iteration-file", str(layout.tracker)]
    else:
        # Worker lines reach the console prefixed with [default<local rank>]: for the harness to split.
        args += ["--tee", "3", "--log-dir", str(layout.elastic_log_dir)]
    if nvrx.has_no_restart_exit_code:
        args += ["--ft-no-restart-exit-code", str(NO_RESTART_EXIT_CODE)]
        if spec.max_no_progress_cycles is not None:
            args += ["--ft-max-no-progress-cycles", str(spec.max_no_progress_cycles)]
    return args + nemesis_argv(spec) + workload_argv(spec)


def build(spec: RunSpec, nvrx: NvrxTarget, *, sbatch: bool = False) -> Plan:
    """The plan for a validated spec. With sbatch=True the rendezvous endpoint is the batch
    script's ${RDZV_ENDPOINT}, computed on the first node at run time."""
    check(spec, nvrx)
    notes = []
    if sbatch:  # both ports are picked on the first node when the job starts
        endpoint, log_port = shell_var("RDZV_ENDPOINT"), shell_var("NVRX_LOG_SERVER_PORT")
    elif spec.rdzv_endpoint:
        endpoint = spec.rdzv_endpoint
        log_port = None if spec.log_server_port is None else str(spec.log_server_port)
    else:
        raise SpecError(["internal: a rendezvous endpoint must be chosen before planning"])

    workload = spec.workload_type
    policy = workload.connections_policy(spec)
    env = [("PYTHONUNBUFFERED", "1")]  # a killed worker must not take buffered lines with it
    if policy.value is not None:
        env.append(("CUDA_DEVICE_MAX_CONNECTIONS", policy.value))
    env += workload.environment(spec)
    # a --nvrx-path NVRx first, then what the workload's workers need
    pythonpath = tuple(dict.fromkeys(((str(nvrx.path),) if nvrx.path else ()) + workload.pythonpath(spec)))
    notes += workload.notes(spec)
    cwd = workload.cwd(spec)
    if spec.min_nnodes is not None and spec.min_nnodes < spec.nnodes:
        notes.append(f"--nnodes {spec.min_nnodes}:{spec.nnodes}: NVRx {nvrx.version}'s torch elastic rendezvous starts "
                     f"with up to {spec.nnodes} nodes and may go on with as few as {spec.min_nnodes}; the criteria "
                     "name a shrink (Megatron's world_size per cycle)")
    if spec.fault != "none" and spec.world == 1:
        notes.append("one rank: the fault is injected on rank 0")
    launcher = Command(tuple(launcher_argv(spec, nvrx, endpoint, log_port)), Path(cwd), tuple(env), pythonpath)

    srun, local = None, ()
    if spec.local_nodes and not sbatch:
        # Every launcher on this machine: say which one hosts the rendezvous (the address test
        # would pick all of them), and allow several launchers per host in NVRx's rendezvous.
        env_local = (*env, ("NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE", "1"))
        local = tuple(Command(tuple(launcher_argv(spec, nvrx, endpoint, log_port, is_host=(i == 0))), Path(cwd),
                              env_local, pythonpath) for i in range(launchers(spec)))
        notes.append(f"{launchers(spec)} launchers on this machine (--local-nodes): a test of the launcher's "
                     "multi-node recovery, not of a cluster")
    elif launchers(spec) > 1 and not sbatch:
        srun = Command(tuple(srun_prefix(spec, nvrx) + list(launcher.argv)), launcher.cwd, launcher.env,
                       launcher.pythonpath)
    return Plan(spec=spec, nvrx=nvrx, launcher=launcher, srun=srun, connections=policy, notes=tuple(notes),
                local=local)


def nnodes_arg(spec: RunSpec) -> str:
    """`N`; `N:N+H` with H hot spares (the extra launchers join the rendezvous as standby);
    `MIN:MAX` when the job may shrink to MIN nodes (--nnodes MIN:MAX)."""
    low, high = (spec.min_nnodes if spec.min_nnodes is not None else spec.nnodes), spec.nnodes + spec.hot_spares
    return str(high) if low == high else f"{low}:{high}"


def launchers(spec: RunSpec) -> int:
    """Launchers (nodes) started: the active ones and the hot spares."""
    return spec.nnodes + spec.hot_spares


def store_node(endpoint: str | None) -> str | None:
    """The node name of a rendezvous endpoint (`n1:29400` -> `n1`); None for an address (an IP
    is no Slurm node name), a shell variable, or no endpoint."""
    if not endpoint or "$" in endpoint:
        return None
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        return host or None


def srun_prefix(spec: RunSpec, nvrx: NvrxTarget, container: tuple[str, ...] = ()) -> list[str]:
    prefix = ["srun", f"--ntasks={launchers(spec)}", "--ntasks-per-node=1"]
    node = store_node(spec.rdzv_endpoint)
    if node is not None:
        # The launcher on the endpoint's node hosts the rendezvous store: the step must run there.
        # Left to itself, srun may place the tasks on other nodes of a larger allocation (or
        # while that node's previous step still ends), and every launcher waits for a store
        # nobody hosts until the setup deadline (local Slurm, 2026-12-05: a step on n2 and n3
        # with the endpoint on n1).
        prefix += [f"--nodes={launchers(spec)}", f"--nodelist={node}"]
    if spec.workload_type.on_gpu:  # a CPU workload asks for no GPUs
        prefix.append(f"--gpus-per-node={spec.gpus_per_node}")
    # A named step can be cancelled by name when the harness stops the job early.
    prefix.append(f"--job-name={slurm.step_name(spec.run_id)}")
    if not nvrx.routes_logs:
        prefix.append("--label")  # node index on every line, to map [default<local>] to global ranks
    return prefix + list(container)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
