"""RunSpec: one frozen, typed description of a qualification run.

Every knob is read from the seed's environment names (MEGATRON_PATH, NVRX_WORK_DIR,
NVRX_RUN_ID, GPUS_PER_NODE, NNODES, TP, PP, TRAIN_ITERS, NVRX_DEMO_FAULT,
NVRX_FAULT_RANK, NVRX_CHECKPOINT_DIR, RDZV_ENDPOINT, NVRX_DRY_RUN) and from the equal
CLI flags; a flag wins over the environment, the environment over the workload's
default. `validate` then checks everything that can be checked before a process
starts, without creating or deleting anything.

Every message names a knob the way the user gave it (`RunSpec.say`, through `knob_name`):
its environment name when its value came from there (`from_sources` records which), else its
flag (a flag, a typed value of the pytest fixtures or a library caller, a default).
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from harness.plan import campaign
from harness.vocab import tiers, topology
from harness import workloads
from harness.workloads import megatron_bridge, megatron_cpu
from harness.vocab.faults import (AFTER_COMMIT, CAMPAIGN, CAMPAIGN_MOMENTS, DEFAULT_FAULT_AT, DEFAULT_KIND, FAULT_KINDS,  # noqa: F401
                            FAULT_MOMENTS, FAULTS, FIRST_COMMIT, IN_SAVE, MAX_PLANNED_FAULTS, PlannedFault,
                            single_schedule)
from harness.vocab.layout import (FT_STATE_NAME, MARKER_NAME, RUN_ID_PATTERN, TRACKER_ABSENT, TRACKER_EMPTY, TRACKER_NAME,
                            TRACKER_UNREADABLE, RunLayout, is_valid_run_id, parse_iter_name, read_tracker_file)

SECTIONS = ("setup", "step", "checkpointing")


class SpecError(ValueError):
    """Input refused before anything starts. str() is one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# Deadline profiles: the ft_launcher deadlines of a run, chosen by name (--deadline-profile);
# an explicit --section-timeouts / --out-of-section-timeout / --workload-check-interval wins
# and makes the profile "custom". run.json, verdict.json and report.md name the one that ran.
# - walkthrough: the NVRx walkthrough's deadlines (the Megatron default);
# - short: GPU qualification inside minutes; a hang is detected 60-61 s after the stop whichever
#   section it lands in (setup stays long: Megatron's start on a cold node can take minutes);
# - reference: the CPU reference workload's (hang detection = 10 s + one check interval);
# - megatron-cpu: Megatron's own loop on CPU; setup covers Megatron's init and, on a restart,
#   the load (about 12 s on an idle 2-core machine; Megatron-Bridge's about 20 s).
# Step, checkpointing and out-of-section deadlines are equal in short and reference, so the
# stopped rank's own monitor fires about when its blocked peers' do; replacement_cycle does
# not depend on that (a peer's timeout counts when the marker proves which rank was stopped).
DEADLINE_PROFILES: dict[str, dict[str, Any]] = {
    "walkthrough": dict(section_timeouts=(("setup", 900.0), ("step", 120.0), ("checkpointing", 600.0)),
                        out_of_section_timeout=180.0, workload_check_interval=None),
    "short": dict(section_timeouts=(("setup", 600.0), ("step", 60.0), ("checkpointing", 60.0)),
                  out_of_section_timeout=60.0, workload_check_interval=1.0),
    "reference": dict(section_timeouts=(("setup", 60.0), ("step", 10.0), ("checkpointing", 10.0)),
                      out_of_section_timeout=10.0, workload_check_interval=1.0),
    "megatron-cpu": dict(section_timeouts=(("setup", 90.0), ("step", 15.0), ("checkpointing", 15.0)),
                         out_of_section_timeout=15.0, workload_check_interval=1.0),
}
# The deadlines a RunSpec has when nothing chose others (Megatron's default): the numbers are
# stated once, in DEADLINE_PROFILES; RunSpec's defaults, the --section-timeouts example, the
# --help texts (profile_text) and pytest's --deadline-profile help are derived from them, and
# test_knobs.py holds docs/usage.md's table to them.
DEFAULT_DEADLINE_PROFILE = "walkthrough"
_DEFAULT_DEADLINES = DEADLINE_PROFILES[DEFAULT_DEADLINE_PROFILE]

@dataclass(frozen=True)
class RunSpec:
    workload: str
    work_dir: Path
    run_id: str
    megatron_path: Path | None = None
    megatron_cpu_dir: Path | None = None  # megatron-cpu: tools/install-megatron-cpu.sh's directory
    megatron_bridge_dir: Path | None = None  # megatron-bridge: tools/install-megatron-bridge.sh's directory
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
    fault: str = DEFAULT_KIND
    fault_rank: int = 1
    hot_spares: int = 0  # launchers beyond NNODES that join as standby (--nnodes N:N+H)
    # elastic: after losing nodes the launcher may go on with as few as MIN_NNODES (--nnodes MIN:MAX,
    # MAX = NNODES + hot spares); None: exactly NNODES, never fewer
    min_nnodes: int | None = None
    rdzv_join_timeout: float | None = None  # launcher --rdzv-conf join_timeout; None: NVRx's default
    local_nodes: bool = False  # every node's launcher on this machine, no Slurm (testing)
    fault_at: str = DEFAULT_FAULT_AT
    # A campaign (fault "campaign", docs/campaigns.md): this many faults, drawn by harness.plan.campaign
    # from the seed out of fault_kinds (empty: campaign.default_kinds); 1: the single fault above.
    faults: int = 1
    seed: int | None = None
    fault_kinds: tuple[str, ...] = ()
    fault_after: str = tiers.DEFAULT_FAULT_AFTER  # harness.vocab.tiers: the checkpoint tier whose commit arms after-commit
    max_no_progress_cycles: int | None = None  # NVRx >= 0.7 --ft-max-no-progress-cycles; None: its default (3)
    save_delay_ms: int | None = None  # reference workload only: hold every async save open this long
    checkpoint_dir: Path | None = None
    rdzv_endpoint: str | None = None
    dry_run: bool = False
    section_timeouts: tuple[tuple[str, float], ...] = _DEFAULT_DEADLINES["section_timeouts"]
    out_of_section_timeout: float = _DEFAULT_DEADLINES["out_of_section_timeout"]
    max_restarts: int = 2
    monitor_interval: float | None = None
    workload_check_interval: float | None = _DEFAULT_DEADLINES["workload_check_interval"]
    poll_interval: float | None = None  # nemesis tracker poll; None: its default
    step_time_ms: int | None = None  # reference workload only
    nvrx_version: str | None = None  # declared; None: detect the installed one
    nvrx_path: Path | None = None  # extra directory holding the NVRx to use
    log_server_port: int | None = None  # NVRx >= 0.6 gRPC log funnel; chosen from the OS
    gpu_arch: str | None = None
    transformer_engine: bool = True
    apex: bool = False  # apex with the CUDA extensions Megatron's fused paths import
    deadline_profile: str = DEFAULT_DEADLINE_PROFILE  # DEADLINE_PROFILES name, or "custom" when a deadline was overridden
    distributed_optimizer: bool = True  # Megatron workloads: --use-distributed-optimizer
    baseline: str = "none"  # auto | none | the run directory of an uninterrupted run (harness.launch.baseline)
    uv: bool = False
    python: str = sys.executable
    assume_shared_storage: bool = False
    extra_args: tuple[str, ...] = ()
    # The knobs whose value came from the environment (from_sources): messages name those by
    # their environment name, every other knob by its flag (say). Not part of the plan: left out
    # of run.json, of equality and of the configuration hash.
    from_env: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False)
    # (knob, value) of each value the harness picked on this machine rather than the user gave (a
    # free local port: resolve_spec, the twin's): one found taken at launch is picked again
    # (harness.launch.runner.repicked), where a value the user gave is refused. A value changed
    # since no longer counts as picked. Not part of the plan, like from_env.
    picked: frozenset[tuple[str, object]] = dataclasses.field(default=frozenset(), compare=False, repr=False)

    def knob(self, field: str) -> str:
        """The knob as the user gave it: its environment name if its value came from there, else its flag."""
        return knob_name(field, env=field in self.from_env)

    def say(self, field: str, value: object = None) -> str:
        """`NAME=VALUE` for a message: the knob as the user gave it (knob) and its value, this
        spec's own unless `value` is given (the value a fix suggests)."""
        return f"{self.knob(field)}={shown_value(getattr(self, field) if value is None else value)}"

    def was_picked(self, field: str) -> bool:
        """The knob's value is one the harness picked here (a free port), not one the user gave."""
        return (field, getattr(self, field)) in self.picked

    def with_picked(self, **values: object) -> "RunSpec":
        """This spec with `values`, picked by the harness here (free ports), set and recorded as
        picked (was_picked)."""
        return dataclasses.replace(self, **values, picked=self.picked | frozenset(values.items()))

    @property
    def workload_type(self) -> workloads.Workload:
        """What this workload is (harness.workloads): asked instead of comparing its name."""
        return workloads.get(self.workload)

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
    def campaign_kinds(self) -> tuple[str, ...]:
        """The kinds a campaign draws from: --fault-kinds, else the workload's default pool."""
        return self.fault_kinds or campaign.default_kinds(self.workload, nnodes=self.nnodes,
                                                          slurm=self.nnodes > 1 and not self.local_nodes)

    @property
    def schedule(self) -> tuple[PlannedFault, ...]:
        """Every planned fault, fault 1 first (index + 1 = its marker): a campaign's seeded draw,
        else the one fault at each moment of its --fault-at (harness.vocab.faults.single_schedule)."""
        if self.fault == CAMPAIGN:
            return campaign.draw(self.faults, self.seed or 0, self.campaign_kinds, self.world, self.workload,
                                 gpus_per_node=self.gpus_per_node)
        return single_schedule(self.fault, self.fault_rank, self.fault_at)

    @property
    def hits_a_save(self) -> bool:
        """A planned fault lands while a save is in flight (FaultMoment.hits_a_save): the plan
        sizes the run to give it a save to hit, and one of slack (campaign.sizing)."""
        return any(FAULT_MOMENTS[f.moment].hits_a_save for f in self.schedule)

    @property
    def section_timeouts_arg(self) -> str:
        return ",".join(f"{name}:{_num(sec)}" for name, sec in self.section_timeouts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if not f.compare:  # from_env: how the knobs were given, not what the run is
                continue
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
        # every planned fault (docs/contracts.md, run.json): what the nemesis injects, in marker order
        out["schedule"] = [f.to_json(i) for i, f in enumerate(self.schedule, start=1)]
        return out


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


DEADLINE_PROFILE_USE = {
    "walkthrough": "the NVRx walkthrough's, Megatron's default",
    "short": "a GPU qualification inside minutes",
    "reference": "the CPU reference workload's default",
    "megatron-cpu": "Megatron's own loop on CPU, its default (and megatron-bridge's)",
}


def sections_text(name: str) -> str:
    """A profile's section deadlines as --section-timeouts takes them: 'setup:900,step:120,...'."""
    return ",".join(f"{s}:{_num(v)}" for s, v in DEADLINE_PROFILES[name]["section_timeouts"])


def profile_text(name: str) -> str:
    """One profile's deadlines in words, for --help and the docs: 'setup:60,step:10,... ; use'."""
    p = DEADLINE_PROFILES[name]
    sections = sections_text(name)
    check = p["workload_check_interval"]
    check_text = "NVRx's check interval" if check is None else f"check interval {_num(check)}"
    use = DEADLINE_PROFILE_USE.get(name)
    return f"{sections}, out of section {_num(p['out_of_section_timeout'])}, {check_text}" + (f": {use}" if use else "")


DEADLINE_FIELDS = ("section_timeouts", "out_of_section_timeout", "workload_check_interval")
CUSTOM_PROFILE = "custom"
# ---- parsing of single values -------------------------------------------------------------


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_nnodes(text: str) -> int | tuple[int, int]:
    """`N`, or `MIN:MAX` (the launcher's elastic range: the job may shrink to MIN nodes)."""
    low, sep, high = text.strip().partition(":")
    if not sep:
        return int(low)
    return int(low), int(high)


def _parse_float(text: str) -> float:
    return float(text.strip())


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _parse_optional_path(text: str) -> Path | None:
    """A path; the empty string is None (`--nvrx-path ''`: the one pip installed)."""
    return Path(text) if text.strip() else None


def _parse_choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip() not in choices:
            raise ValueError(text)
        return text.strip()
    return parse


def _parse_baseline(text: str) -> str:
    value = text.strip()
    if not value:
        raise ValueError(text)
    return value


def _either(words: Iterable[str]) -> str:
    """'a, b or c'."""
    items = list(words)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _parse_workload(text: str) -> str:
    name = text.strip()
    if workloads.find(name) is None:
        raise ValueError(text)
    return name


def _parse_kinds(text: str) -> tuple[str, ...]:
    """'kill,hang,exception' -> ('kill', 'hang', 'exception'); '' or 'auto': the default pool."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if words == ["auto"]:
        return ()
    if any(w not in FAULT_KINDS for w in words):
        raise ValueError(text)
    return tuple(dict.fromkeys(words))


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
    group: str = ""  # its --help group (HELP_GROUPS); empty: the group HELP_GROUPS lists it in
    # Its constraints once parsed, beside its declaration: the problems of a whole RunSpec that
    # this knob's value causes (it may read the other fields it depends on), for validate().
    check: Callable[[RunSpec], list[str]] | None = None


# ---- the knobs' constraints (Knob.check), used by validate() in the order of KNOBS
# Each names the knobs through spec.knob / spec.say: the flag, or the environment name the value came from.


def _at_least(low: int, field: str, *, word: str = "", why: str = "") -> Callable[[RunSpec], list[str]]:
    word = word or f"{low} or more"

    def check(spec: RunSpec) -> list[str]:
        value = getattr(spec, field)
        return [f"{spec.say(field)} must be {word}{why}"] if value is not None and value < low else []
    return check


def _seconds(field: str) -> Callable[[RunSpec], list[str]]:
    """Timeouts and intervals that the launcher, the rank monitors or the nemesis would choke on
    (nan, inf, 1e308, zero or negative): refused here, not in the workers."""
    def check(spec: RunSpec) -> list[str]:
        value = getattr(spec, field)
        if field == "section_timeouts":
            said = [(f"{spec.knob(field)} {n}={v!r}", v) for n, v in value]
        else:
            said = [(spec.say(field), value)]
        return [f"{text} must be a number of seconds above 0 and at most {MAX_SECONDS:g}"
                for text, v in said if v is not None and not seconds_ok(v)]
    return check


def _check_workload(spec: RunSpec) -> list[str]:
    """The parallel layout's rules, then the workload's own (its install, its shape rules)."""
    return (topology.problems(spec.topology, spec.num_layers, spec.num_attention_heads, say=spec.say)
            + spec.workload_type.problems(spec))


def _check_fault(spec: RunSpec) -> list[str]:
    problems = []
    if (kind := FAULT_KINDS.get(spec.fault)) is not None and kind.loses_node:
        if spec.nnodes < 2:
            problems.append(f"{spec.say('fault')} with {spec.say('nnodes')}: losing the only node ends the job; "
                            f"use {spec.say('nnodes', 2)} or more")
        elif 0 <= spec.fault_rank < spec.world and spec.fault_rank // spec.gpus_per_node == 0:
            problems.append(f"{spec.say('fault')} on rank {spec.fault_rank} would lose node 0, which hosts the "
                            "rendezvous store every launcher depends on: choose a rank on another node, e.g. "
                            f"{spec.say('fault_rank', spec.gpus_per_node)}")
    return problems + fault_problems(spec)


def _check_fault_rank(spec: RunSpec) -> list[str]:
    if spec.fault in ("none", CAMPAIGN) or 0 <= spec.fault_rank < spec.world:
        return []
    hint = (f"with one GPU use {spec.say('fault_rank', 0)}" if spec.world == 1
            else f"choose a rank in 0..{spec.world - 1}")
    return [f"{spec.say('fault_rank')} is outside the active world of {spec.world} rank(s): {hint}"]


def _check_rdzv_join_timeout(spec: RunSpec) -> list[str]:
    value = spec.rdzv_join_timeout
    return [f"{spec.say('rdzv_join_timeout')} must be a positive number of seconds"] if (
        value is not None and not (0 < value < 1e6)) else []


def _check_local_nodes(spec: RunSpec) -> list[str]:
    return ([f"{spec.say('local_nodes')} starts one launcher per node on this machine: use "
             f"{spec.say('nnodes', 2)} or more"]
            if spec.local_nodes and spec.nnodes + spec.hot_spares < 2 else [])


def _check_rdzv_endpoint(spec: RunSpec) -> list[str]:
    return ([f"{spec.say('rdzv_endpoint')} is not HOST:PORT: use e.g. {spec.say('rdzv_endpoint', 'node001:29400')}"]
            if spec.rdzv_endpoint and not _valid_endpoint(spec.rdzv_endpoint) else [])


def _check_max_restarts(spec: RunSpec) -> list[str]:
    """Every planned fault fails one cycle, and only a restart recovers from it: a plan of N
    faults needs --max-restarts N or more (a campaign is sized so unless told otherwise)."""
    if spec.max_restarts < 0:
        return [f"{spec.say('max_restarts')} must be 0 or more"]
    if spec.fault == "none":
        return []
    planned = len(spec.schedule)
    if planned <= 1:
        return ([f"{spec.say('max_restarts')} leaves no restart to recover from the {spec.fault} fault: use "
                 f"{spec.say('max_restarts', 1)} or more"] if spec.max_restarts < 1 else [])
    if spec.max_restarts >= planned:
        return []
    moments = ", then ".join(f.moment for f in spec.schedule)
    what = "" if spec.fault == CAMPAIGN else f" ({spec.say('fault_at')}: {moments})"
    sized = f", or leave {spec.knob('max_restarts')} out (the campaign sizes it)" if spec.fault == CAMPAIGN else ""
    return [f"{spec.say('max_restarts')} allows {spec.max_restarts} restart{'s' if spec.max_restarts != 1 else ''} "
            f"and this plan injects {planned} faults{what}, each recovered by a restart of its own: the budget "
            f"would run out at fault {spec.max_restarts + 1} and the run could not qualify; use "
            f"{spec.say('max_restarts', planned)} or more{sized}"]


def _check_faults(spec: RunSpec) -> list[str]:
    """--faults N: 1 (one fault) or a campaign of 2..99 with fault `campaign`, trained long enough
    for every fault to find a checkpoint committed after the previous recovery."""
    n = spec.faults
    if not 1 <= n <= MAX_PLANNED_FAULTS:
        return [f"{spec.say('faults')} must be between 1 and {MAX_PLANNED_FAULTS} (a run directory holds at most "
                f"{MAX_PLANNED_FAULTS} injection markers)"]
    if n == 1 and spec.fault == CAMPAIGN:
        return [f"{spec.say('fault')} needs {spec.say('faults', 2)} or more: give the number of faults, or choose "
                f"one kind with {spec.say('fault', 'KIND')}"]
    if n == 1:
        return []
    if spec.fault != CAMPAIGN:
        return [f"{spec.say('faults')} with {spec.say('fault')}: a campaign draws its kinds from "
                f"{spec.knob('fault_kinds')}; drop {spec.knob('fault')}, or for a campaign of one kind use "
                f"{spec.say('fault_kinds', spec.fault)}"]
    schedule = spec.schedule
    if not schedule:
        return []  # _check_fault_kinds names why nothing can be drawn
    need = campaign.sizing(schedule, spec.save_interval).train_iters
    if spec.train_iters < need:
        return [f"{spec.say('train_iters')} is too short for a campaign of {n} faults with "
                f"{spec.say('save_interval')}: each fault waits for a checkpoint committed after the previous "
                f"recovery; set {spec.say('train_iters', need)} or more, or leave it out (the campaign sizes it)"]
    return []


def _check_seed(spec: RunSpec) -> list[str]:
    if spec.seed is None:
        return []
    if not 0 <= spec.seed <= campaign.MAX_SEED:
        return [f"{spec.say('seed')} must be between 0 and {campaign.MAX_SEED}"]
    if spec.fault != CAMPAIGN:
        return [f"{spec.say('seed')} draws a campaign's schedule, and this run plans one fault: add "
                f"{spec.say('faults', 'N')} (2 or more), or drop {spec.knob('seed')}"]
    return []


def _check_fault_kinds(spec: RunSpec) -> list[str]:
    if spec.fault != CAMPAIGN:
        return ([f"{spec.say('fault_kinds')} is the pool of a campaign, and this run plans one fault: add "
                 f"{spec.say('faults', 'N')} (2 or more), or use {spec.say('fault', 'KIND')}"] if spec.fault_kinds
                else [])
    problems = [f"{spec.say('fault_kinds')}: {why}: drop {k} from the list" for k in spec.fault_kinds
                if (why := campaign.kind_problem(k, spec.workload, nnodes=spec.nnodes,
                                                 nnodes_name=spec.knob('nnodes'))) is not None]
    if not problems and not spec.campaign_kinds:
        problems.append(f"no fault kind can be drawn on the {spec.workload} workload: give {spec.knob('fault_kinds')}")
    return problems


def _check_fault_at(spec: RunSpec) -> list[str]:
    """A campaign draws its moments (harness.plan.campaign): a --fault-at of its own would be ignored."""
    if spec.fault == CAMPAIGN and spec.fault_at != DEFAULT_FAULT_AT:
        return [f"{spec.say('fault_at')} times one fault, and a campaign draws the moment of each of its faults "
                f"from {spec.knob('seed')} ({', '.join(CAMPAIGN_MOMENTS)}): drop {spec.knob('fault_at')}"]
    return []


def _check_fault_after(spec: RunSpec) -> list[str]:
    problem = tiers.fault_after_problem(spec.fault_after, spec.extra_args, name=spec.knob("fault_after"))
    if problem is not None:
        return [problem]
    if spec.fault_after == tiers.DEFAULT_FAULT_AFTER or spec.fault == "none":
        return []
    if spec.fault == CAMPAIGN:  # its after-commit faults wait for any tier's commit (the nemesis's default)
        return [f"{spec.say('fault_after')} arms one fault, and a campaign's faults wait for the newest commit of "
                f"any tier: drop {spec.knob('fault_after')}"]
    if not any(FAULT_MOMENTS[f.moment].fires == FIRST_COMMIT for f in spec.schedule):
        return [f"{spec.say('fault_after')} names the checkpoint tier whose commit arms an {AFTER_COMMIT} fault, and "
                f"{spec.say('fault_at')} waits for no such commit: drop {spec.knob('fault_after')}, or use "
                f"{spec.say('fault_at', AFTER_COMMIT)}"]
    return []


def _check_save_delay_ms(spec: RunSpec) -> list[str]:
    if spec.save_delay_ms is not None and spec.save_delay_ms < 0:
        return [f"{spec.say('save_delay_ms')} must be 0 or more"]
    return _own_knob_problems(spec, "save_delay_ms", bool(spec.save_delay_ms))


def _own_knob_problems(spec: RunSpec, field: str, given: bool) -> list[str]:
    """A knob only some workloads read (Workload.own_knobs), given to another: refused, not ignored."""
    if not given or field in spec.workload_type.own_knobs:
        return []
    owners = [name for name in workloads.names() if field in workloads.get(name).own_knobs]
    return [f"{spec.knob(field)} is a knob of the {' and '.join(owners) or 'no'} workload only: drop it"]


def knob_problems(spec: RunSpec) -> list[str]:
    """Every knob's own constraints (Knob.check), in the order of KNOBS."""
    return [problem for knob in KNOBS if knob.check is not None for problem in knob.check(spec)]


KNOBS: tuple[Knob, ...] = (
    Knob("workload", "--workload", _parse_workload, _either(workloads.get(n).summary for n in workloads.names()),
         "NVRX_QUAL_WORKLOAD", _either(workloads.names()), check=_check_workload),
    Knob("megatron_path", "--megatron-path", Path, "Megatron-LM checkout holding pretrain_gpt.py", "MEGATRON_PATH"),
    Knob("megatron_cpu_dir", "--megatron-cpu-dir", Path,
         f"megatron-cpu: the directory {megatron_cpu.INSTALL} installed (default: {megatron_cpu.DEFAULT_DIR})",
         "NVRX_QUAL_MEGATRON_CPU_DIR"),
    Knob("megatron_bridge_dir", "--megatron-bridge-dir", Path,
         f"megatron-bridge: the directory {megatron_bridge.INSTALL} installed (default: {megatron_bridge.DEFAULT_DIR})",
         megatron_bridge.DIR_ENV,
         check=lambda spec: _own_knob_problems(spec, "megatron_bridge_dir", spec.megatron_bridge_dir is not None)),
    Knob("work_dir", "--work-dir", Path, "runs go to WORK_DIR/runs/RUN_ID (default: current directory)",
         "NVRX_WORK_DIR"),
    Knob("run_id", "--run-id", str, "fresh ID for every test (default: generated)", "NVRX_RUN_ID"),
    Knob("nnodes", "--nnodes", _parse_nnodes,
         "number of nodes, or MIN:MAX: start MAX, and after losing nodes (with no standby left) go on with as few as "
         "MIN (the launcher's elastic --nnodes MIN:MAX; the world size shrinks with them)", "NNODES",
         "a positive integer, or MIN:MAX such as 1:2", check=lambda spec: shrink_problems(spec)),
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
    Knob("train_iters", "--train-iters", _parse_int, "final iteration", "TRAIN_ITERS", "a positive integer",
         check=_at_least(1, "train_iters", word="a positive integer")),
    Knob("save_interval", "--save-interval", _parse_int, "checkpoint every N iterations", "SAVE_INTERVAL",
         "a positive integer", check=_at_least(1, "save_interval", word="a positive integer")),
    Knob("fault", "--fault", _parse_choice(FAULTS),
         f"what to inject: {', '.join(FAULT_KINDS)}; none (an uninterrupted run); campaign (with --faults 2 or "
         "more); what each kind does: docs/faults.md", "NVRX_DEMO_FAULT",
         ", ".join(FAULTS), check=_check_fault),
    Knob("fault_at", "--fault-at", _parse_choice(tuple(FAULT_MOMENTS)),
         f"when: {', '.join(FAULT_MOMENTS)}; each moment: docs/faults.md", "NVRX_FAULT_AT",
         ", ".join(FAULT_MOMENTS), check=_check_fault_at),
    Knob("fault_after", "--fault-after", _parse_choice(tiers.FAULT_AFTER),
         "after-commit: the checkpoint tier whose commit fires the fault: persistent (--save), non-persistent "
         "(Megatron's --non-persistent-ckpt-type global, under <save>/non_persistent) or any (the newest commit of "
         "either; docs/tiers.md)", "NVRX_FAULT_AFTER", ", ".join(tiers.FAULT_AFTER), check=_check_fault_after),
    Knob("fault_rank", "--fault-rank", _parse_int, "global rank that injects the fault", "NVRX_FAULT_RANK",
         "a rank number such as 0 or 1", check=_check_fault_rank),
    Knob("faults", "--faults", _parse_int,
         "faults in one job: 1 is the one --fault; 2 or more is a campaign (fault 'campaign'), its kinds, ranks and "
         "moments drawn from --seed; TRAIN_ITERS and --max-restarts are sized from it unless given "
         "(docs/campaigns.md)",
         "NVRX_QUAL_FAULTS", f"an integer from 1 to {MAX_PLANNED_FAULTS}", check=_check_faults),
    Knob("seed", "--seed", _parse_int,
         "a campaign's seed: the same seed gives the same schedule (replay); default: drawn, printed and recorded "
         "in run.json and verdict.json", "NVRX_QUAL_SEED", "a non-negative integer", check=_check_seed),
    Knob("fault_kinds", "--fault-kinds", _parse_kinds,
         "a campaign's kinds, comma-separated (default: every kind this workload runs that the job recovers from: "
         "not poison, corrupt or disk-full; node only on a multi-node job under Slurm)", "NVRX_QUAL_FAULT_KINDS",
         "kinds separated by commas, e.g. kill,hang,exception", check=_check_fault_kinds),
    Knob("hot_spares", "--hot-spares", _parse_int,
         "extra launchers (nodes) that join as standby and replace a lost node (launcher --nnodes N:N+H)", None,
         "0 or a positive integer", check=_at_least(0, "hot_spares")),
    Knob("rdzv_join_timeout", "--rdzv-join-timeout", _parse_float,
         "seconds a launcher waits for enough nodes to rejoin the rendezvous (default: NVRx's)", None,
         "a number of seconds", check=_check_rdzv_join_timeout),
    Knob("local_nodes", "--local-nodes", parse_bool,
         "1: start every node's launcher (NNODES + hot spares) on this machine, without Slurm, to test multi-node "
         "recovery such as node loss", None, "1 or 0", check=_check_local_nodes),
    Knob("checkpoint_dir", "--checkpoint-dir", Path, "existing checkpoint dir to resume into (default: the run's)",
         "NVRX_CHECKPOINT_DIR"),
    Knob("rdzv_endpoint", "--rdzv-endpoint", str, "HOST:PORT every node reaches (needed with NNODES>1)",
         "RDZV_ENDPOINT", check=_check_rdzv_endpoint),
    Knob("dry_run", "--dry-run", parse_bool, "validate, create the run directory and print the exact commands; "
         "launch nothing (a flag; --dry-run 1 / 0 work too)", "NVRX_DRY_RUN", "1 or 0"),
    Knob("deadline_profile", "--deadline-profile", _parse_choice(tuple(DEADLINE_PROFILES)),
         "ft_launcher deadlines by name: " + "; ".join(
             f"{name} ({profile_text(name)})" for name in DEADLINE_PROFILES),
         "NVRX_DEADLINE_PROFILE", ", ".join(DEADLINE_PROFILES)),
    Knob("section_timeouts", "--section-timeouts", parse_section_timeouts,
         "ft_launcher section deadlines, seconds (overrides the profile's)", None,
         sections_text(DEFAULT_DEADLINE_PROFILE), check=_seconds("section_timeouts")),
    Knob("out_of_section_timeout", "--out-of-section-timeout", _parse_float, "seconds out of any section", None,
         "a number of seconds", check=_seconds("out_of_section_timeout")),
    Knob("max_restarts", "--max-restarts", _parse_int, "worker-group restarts the launcher may do", None,
         "a non-negative integer", check=_check_max_restarts),
    Knob("max_no_progress_cycles", "--max-no-progress-cycles", _parse_int,
         "NVRx >= 0.7: cycles without checkpoint progress before the launcher stops the job with exit 93 "
         "(--ft-max-no-progress-cycles; default: NVRx's 3)", None, "a positive integer",
         check=_at_least(1, "max_no_progress_cycles", why=" (the suite never disables NVRx's progress tracker)")),
    Knob("monitor_interval", "--monitor-interval", _parse_float, "launcher monitor interval, seconds", None,
         "a number of seconds", check=_seconds("monitor_interval")),
    Knob("workload_check_interval", "--workload-check-interval", _parse_float,
         "rank monitor check interval, seconds", None, "a number of seconds",
         check=_seconds("workload_check_interval")),
    Knob("poll_interval", "--poll-interval", _parse_float, "nemesis tracker poll interval, seconds",
         "NVRX_POLL_INTERVAL", "a number of seconds",
         check=_seconds("poll_interval")),
    Knob("step_time_ms", "--step-time-ms", _parse_int, "reference workload: minimum step time", None,
         "a non-negative integer"),
    Knob("save_delay_ms", "--save-delay-ms", _parse_int,
         "reference workload: hold every async save open this long before its metadata is written, so a fault "
         "can land inside it (default: 400 with --fault-at in-save, else none)", None, "a non-negative integer",
         check=_check_save_delay_ms),
    Knob("nvrx_version", "--nvrx-version", str, "NVRx version the commands are for (default: installed)",
         "NVRX_VERSION", "e.g. 0.7.0"),
    Knob("nvrx_path", "--nvrx-path", _parse_optional_path,
         "directory holding the NVRx to use (a pip --target install); '' for the one pip installed (default: the "
         "newest installed, pip's or .nvrx/VERSION in the working directory or this checkout)", "NVRX_QUAL_NVRX_PATH"),
    Knob("gpu_arch", "--gpu-arch", str, "GPU architecture (hopper, blackwell, 9.0, ...; default: detected)",
         "NVRX_GPU_ARCH"),
    Knob("transformer_engine", "--transformer-engine", parse_bool,
         "1: use Transformer Engine; 0: --transformer-impl local (default: imported in the workers' interpreter)",
         None, "1 or 0"),
    Knob("apex", "--apex", parse_bool,
         "1: apex and its CUDA extensions import in the workers' interpreter; 0: plan Megatron's non-apex "
         "fallbacks (default: imported in the workers' interpreter)", None, "1 or 0"),
    Knob("distributed_optimizer", "--distributed-optimizer", parse_bool,
         "1: Megatron's --use-distributed-optimizer (default); 0: its plain optimizer", None, "1 or 0"),
    Knob("baseline", "--baseline", _parse_baseline,
         "what loss_continuity and state_equivalence compare with: auto (reuse an uninterrupted run of the same "
         "configuration hash from WORK_DIR/runs, else run that twin beside the fault run (first on GPUs or "
         "through srun): one extra run of TRAIN_ITERS), none, or "
         "the run directory of an uninterrupted run", "NVRX_QUAL_BASELINE", "auto, none or a run directory"),
    Knob("python", "--python", str, "interpreter that runs the launcher on the nodes (default: this one)",
         "NVRX_QUAL_PYTHON"),
    Knob("uv", "--uv", parse_bool, "1: launch through `uv run python` (default: detected)", None, "1 or 0"),
    Knob("assume_shared_storage", "--assume-shared-storage", parse_bool,
         "1: trust that work/checkpoint paths are shared across nodes", None, "1 or 0"),
)
KNOBS_BY_FIELD = {k.field: k for k in KNOBS}


def knob_name(field: str, *, env: bool = False) -> str:
    """The one way a message names a knob of KNOBS: its environment name when its value came
    from the environment (env=True, and the knob has one), else its flag."""
    knob = KNOBS_BY_FIELD[field]
    return knob.env if env and knob.env else knob.flag


def shown_value(value: object) -> str:
    """A knob's value as one would type it: 1/0, 900 (not 900.0), a path or word quoted for the
    shell only when it needs it, a tuple comma-separated (section deadlines as name:seconds)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, (str, Path)):
        return shlex.quote(str(value))
    if isinstance(value, tuple):
        if all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return ",".join(f"{k}:{shown_value(v)}" for k, v in value)
        return ",".join(shown_value(v) for v in value)
    return str(value)

# The --help groups of `nvrx-qual plan | run | sbatch`, in the order shown, and the knobs in
# each (a knob can also name its group itself: Knob.group). The command layer adds its own
# options to these groups by title (run's --repeat and --deadline, sbatch's Slurm options).
HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "what to run": ("workload", "megatron_path", "megatron_cpu_dir", "megatron_bridge_dir", "nvrx_path", "nvrx_version",
                    "python", "uv", "train_iters", "save_interval", "num_layers", "hidden_size", "num_attention_heads",
                    "seq_length", "vocab_size", "micro_batch_size", "global_batch_size", "distributed_optimizer",
                    "transformer_engine", "apex", "step_time_ms", "save_delay_ms", "checkpoint_dir", "dry_run"),
    "faults": ("fault", "fault_at", "fault_after", "fault_rank", "faults", "seed", "fault_kinds", "max_restarts", "max_no_progress_cycles", "poll_interval",
               "baseline"),
    "deadlines": ("deadline_profile", "section_timeouts", "out_of_section_timeout", "workload_check_interval",
                  "monitor_interval"),
    "GPU and cluster": ("nnodes", "gpus_per_node", "tp", "pp", "cp", "gpu_arch", "hot_spares", "local_nodes",
                        "rdzv_endpoint", "rdzv_join_timeout", "assume_shared_storage"),
    "Slurm": (),
    "output": ("work_dir", "run_id"),
}
OTHER_GROUP = "other options"


def knob_group(knob: Knob) -> str:
    """The --help group of a knob: its own, else the one HELP_GROUPS lists it in, else OTHER_GROUP."""
    if knob.group:
        return knob.group
    return next((title for title, fields in HELP_GROUPS.items() if knob.field in fields), OTHER_GROUP)


def generated_run_id(workload: str, fault: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{workload}-{fault}-{stamp}-{secrets.token_hex(2)}"


def from_sources(flags: Mapping[str, Any], env: Mapping[str, str], extra_args: tuple[str, ...] = (),
                 detected: Mapping[str, Any] | None = None) -> RunSpec:
    """Build a RunSpec: flag > environment > detected (GPU arch, TE, uv) > workload default.

    Raises SpecError naming every value that cannot be parsed. The spec remembers which knobs
    came from the environment (RunSpec.from_env), so that every later message names those by
    their environment name and the others by their flags.
    """
    problems: list[str] = []
    raw: dict[str, Any] = {}
    from_env: set[str] = set()
    for knob in KNOBS:
        given = flags.get(knob.field)
        if given is None and knob.env and env.get(knob.env, "") != "":
            given = env[knob.env]
            from_env.add(knob.field)
        if given is None:
            continue
        if not isinstance(given, str):  # already typed (pytest fixtures, library callers)
            raw[knob.field] = given
            continue
        try:
            raw[knob.field] = knob.parse(given)
        except (ValueError, TypeError):
            fix = f": use {knob.fix}" if knob.fix else ""
            problems.append(f"{knob_name(knob.field, env=knob.field in from_env)}={given!r} is not valid{fix}")
    if problems:
        raise SpecError(problems)

    if isinstance(raw.get("nnodes"), tuple):  # MIN:MAX
        raw["min_nnodes"], raw["nnodes"] = raw["nnodes"]
    workload = raw.get("workload", workloads.DEFAULT)
    kind = workloads.find(workload)
    if kind is None:
        raise SpecError([f"--workload {workload!r} is not valid: use {_either(workloads.names())}"])
    values: dict[str, Any] = dict(kind.defaults)
    # Deadlines: a chosen profile over the workload's defaults, explicit knobs over both. The
    # name follows the deadlines in force: a profile's when they are exactly its, else custom.
    if "deadline_profile" in raw:
        values.update(DEADLINE_PROFILES[raw["deadline_profile"]])
    elif values.get("deadline_profile") in DEADLINE_PROFILES:
        values = {**DEADLINE_PROFILES[values["deadline_profile"]], **values}
    values.update({k: v for k, v in (detected or {}).items() if v is not None})
    values.update(raw)
    values["deadline_profile"] = deadline_profile_of(values)
    values["workload"] = workload
    values.setdefault("work_dir", Path.cwd())
    values["work_dir"] = Path(values["work_dir"]).expanduser().absolute()
    for key in ("megatron_path", "checkpoint_dir", "nvrx_path", "megatron_cpu_dir", "megatron_bridge_dir"):
        if values.get(key) is not None:
            values[key] = Path(values[key]).expanduser().absolute()
    values = kind.resolve(values)
    if values.get("faults", 1) > 1 and "fault" not in raw:
        values["fault"] = CAMPAIGN  # --faults N: a campaign, unless --fault says otherwise (refused)
    if values.get("fault") == CAMPAIGN and values.get("seed") is None:
        values["seed"] = secrets.randbelow(2 ** 31)  # printed and recorded: the campaign replays from it
    if not values.get("run_id"):
        fault = values.get("fault", DEFAULT_KIND)
        moment = values.get("fault_at", DEFAULT_FAULT_AT)
        values["run_id"] = generated_run_id(workload, fault if moment == DEFAULT_FAULT_AT else f"{fault}-{moment}")
    if values.get("fault_at") == IN_SAVE and values.get("save_delay_ms") is None:
        values["save_delay_ms"] = kind.in_save_delay_ms  # None: its saves stay open long enough by themselves
    values["extra_args"] = tuple(extra_args)
    values["from_env"] = frozenset(from_env)
    spec = RunSpec(**values)
    if spec.fault == CAMPAIGN and spec.schedule:
        return sized_campaign(spec, given=raw)
    if "train_iters" not in raw and spec.hits_a_save:
        # One in-save fault is sized as a campaign of one: its save and one of slack (a save that
        # finishes between two of the nemesis's polls on a loaded machine is missed; the next one
        # is hit). The restart budget stays the user's.
        size = campaign.sizing(spec.schedule, spec.save_interval)
        return dataclasses.replace(spec, train_iters=max(spec.train_iters, size.train_iters))
    return spec


def sized_campaign(spec: RunSpec, given: Mapping[str, Any]) -> RunSpec:
    """A campaign's knobs nobody gave, sized from its schedule (harness.plan.campaign.sizing): the
    train iterations, the restart budget, and for the reference workload's in-save faults the
    save delay."""
    changes: dict[str, Any] = {}
    size = campaign.sizing(spec.schedule, spec.save_interval)
    if "train_iters" not in given:
        changes["train_iters"] = max(spec.train_iters, size.train_iters)
    if "max_restarts" not in given:
        changes["max_restarts"] = size.max_restarts
    delay = spec.workload_type.in_save_delay_ms
    if delay is not None and "save_delay_ms" not in given and any(f.moment == IN_SAVE for f in spec.schedule):
        changes["save_delay_ms"] = delay
    return dataclasses.replace(spec, **changes)


def deadline_profile_of(values: Mapping[str, Any]) -> str:
    """The DEADLINE_PROFILES name whose deadlines `values` (RunSpec fields; absent ones take
    RunSpec's defaults) has exactly, else "custom"."""
    defaults = {f.name: f.default for f in dataclasses.fields(RunSpec) if f.name in DEADLINE_FIELDS}
    effective = {name: values.get(name, defaults[name]) for name in DEADLINE_FIELDS}
    effective["section_timeouts"] = tuple((n, float(v)) for n, v in effective["section_timeouts"])
    return next((name for name, deadlines in DEADLINE_PROFILES.items() if deadlines == effective), CUSTOM_PROFILE)
def fault_problems(spec: RunSpec) -> list[str]:
    """The fault vocabulary's own rules: a moment the workload can show, the knobs it needs.
    (Whether the save interval and the train iterations give each moment its checkpoints is
    validate's reach_problems: it needs the restored iteration.)"""
    problems: list[str] = []
    if spec.fault in ("none", CAMPAIGN):  # a campaign's kinds and moments: _check_fault_kinds
        return problems
    moment = FAULT_MOMENTS.get(spec.fault_at)
    kind = FAULT_KINDS.get(spec.fault)
    fault, fault_at = spec.say("fault"), spec.say("fault_at")
    if moment is None or kind is None:  # typed callers bypass the parser
        return [f"{fault} {fault_at}: use a kind of {', '.join(FAULT_KINDS)} and a moment of "
                f"{', '.join(FAULT_MOMENTS)}"]
    if spec.fault_at not in spec.workload_type.moments:
        problems.append(f"{fault_at}: the {spec.workload} workload cannot show this moment; use one "
                        f"of {', '.join(spec.workload_type.moments) or 'none'}")
    if not kind.allows(spec.fault_at):
        problems.append(f"{fault} {fault_at}: this kind fires only at {', '.join(kind.moments or ())}; use "
                        f"{spec.say('fault_at', (kind.moments or (AFTER_COMMIT,))[0])}")
    if kind.gpu_only and not spec.workload_type.on_gpu:
        problems.append(f"{fault} needs a GPU ({kind.help}): the {spec.workload} workload runs on CPU; "
                        "use --workload megatron on a GPU machine (the GPU kit) or a CPU fault kind")
    if kind.planned is not None:
        problems.append(f"{fault} is planned, not runnable: {kind.planned}")
    if kind.fills_filesystem and spec.checkpoint_dir is not None:
        problems.append(f"{fault} mounts a size-limited tmpfs on the run's own checkpoints/, and "
                        f"{spec.say('checkpoint_dir')} is yours: leave {spec.knob('checkpoint_dir')} out")
    if kind.poisons_checkpoint and spec.checkpoint_dir is not None:
        problems.append(f"{fault} damages a checkpoint file, and {spec.say('checkpoint_dir')} is yours: leave "
                        f"{spec.knob('checkpoint_dir')} out so the run poisons only its own checkpoints")
    return problems


def reach_problems(spec: RunSpec, restored: int = 0) -> list[str]:
    """Whether the plan's save interval and train iterations give every planned fault the
    checkpoint its moment waits for, before the final iteration, and so one committed after its
    recovery (harness.plan.campaign.reach over the commits of harness.vocab.tiers.Commits, for every moment
    of harness.vocab.faults and the tiers --fault-after watches). One sentence for the first fault that
    cannot fire (the later ones wait on it), naming the knobs and the train iterations that would do."""
    schedule = spec.schedule
    if (not schedule or spec.save_interval < 1 or spec.train_iters < 1
            or tiers.fault_after_problem(spec.fault_after, spec.extra_args) is not None):  # that one says why
        return []
    watched = tiers.watched_tiers(spec.fault_after)
    commits = tiers.Commits.of(spec.train_iters, spec.save_interval, spec.extra_args)
    miss = next((r for r in campaign.reach(schedule, commits, restored, watched) if r.missing is not None), None)
    if miss is None:
        return []
    f = miss.fault
    which = (f"fault {miss.index} of {len(schedule)} ({f.kind} at {f.moment})" if len(schedule) > 1
             else f"the {f.kind} fault at {f.moment}")
    since = f"the restored iteration {miss.after}" if miss.after else "the start"
    intervals = spec.say("save_interval")
    if commits.non_persistent_interval is not None:
        intervals += f" (and {tiers.NP_INTERVAL_FLAG} {commits.non_persistent_interval} after --)"
    iters = spec.say("train_iters")
    if miss.missing == campaign.NO_LOAD:
        restored = ("a non-persistent one, whose files it does not watch (it watches iter_* under checkpoints/)"
                    if miss.after else "none (nothing was committed yet)")
        return [f"{which} fires while the replacement loads the checkpoint its cycle restored, and that is "
                f"{restored}: use {spec.say('fault_after', tiers.PERSISTENT)} so the first fault waits for a "
                "persistent commit"]
    if miss.missing == campaign.NO_COMMIT:
        why = f"{intervals} and {iters} commit no checkpoint after {since} before the final iteration"
    elif miss.missing == campaign.FINAL_COMMIT:
        why = (f"with {intervals} and {iters} the first checkpoint after {since} that it waits for is the final one "
               f"(iteration {miss.found}): a fault there leaves nothing to recover and no checkpoint after it")
    elif miss.missing == campaign.NO_SAVE_IN_FLIGHT:
        nxt = (f"is the final iteration's (iteration {miss.found}), which is not one to hit in flight"
               if miss.found is not None else "never comes")
        why = (f"it fires while the save after the first checkpoint committed after {since} is in flight, and with "
               f"{intervals} and {iters} that save {nxt}")
    else:  # NOTHING_TO_TRAIN
        why = f"{iters} leaves nothing to train after {since}"
    need = _shortest_train_iters(spec, restored, watched)
    fix = (f"set {spec.say('train_iters', need)} or more, or a smaller {spec.knob('save_interval')}" if need
           else f"use a smaller {spec.knob('save_interval')}")
    return [f"{which} cannot happen: {why}; {fix}"]


def _shortest_train_iters(spec: RunSpec, restored: int, watched: tuple[str, ...]) -> int | None:
    """The fewest train iterations with which every planned fault reaches its moment: one more
    than the last iteration a fault fires at when the training never ends (the commits below
    the final iteration do not depend on it); None when more iterations do not help."""
    endless = tiers.Commits.of(tiers.ENDLESS, spec.save_interval, spec.extra_args)
    reached = campaign.reach(spec.schedule, endless, restored, watched)
    if any(r.missing is not None for r in reached):
        return None
    need = max((r.after if r.at == tiers.ENDLESS else r.at) + 1 for r in reached)
    commits = tiers.Commits.of(need, spec.save_interval, spec.extra_args)
    if any(r.missing is not None for r in campaign.reach(spec.schedule, commits, restored, watched)):
        return None
    return need


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
    read = read_tracker_file(path)  # never a FIFO, a device or a link
    if read.state == TRACKER_ABSENT:
        return None
    if read.state == TRACKER_UNREADABLE:
        raise SpecError([f"tracker {path} is unreadable ({read.error}): fix its permissions or restore it; "
                         "an unreadable tracker is never treated as iteration 0"])
    if read.state == TRACKER_EMPTY:
        raise SpecError([f"tracker {path} is empty: restore the iteration number, or use a fresh checkpoint dir; "
                         "only an absent tracker means a fresh run"])
    if read.value is None:  # what the nemesis accepts in the workers: "+7" is not
        raise SpecError([f"tracker {path} holds {(read.text or '').strip()[:40]!r}, not an iteration number (bare "
                         "digits): restore it, or use a fresh checkpoint dir"])
    return read.value


MAX_RUN_ID_LEN = 128
MAX_SECONDS = 7 * 24 * 3600.0  # any timeout or interval of a qualification run is far below a week


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
                number = parse_iter_name(entry.name)
                if number is not None and number > iteration:
                    found.append((number, entry.name))
    except OSError:
        return []
    return sorted(found)


def leftovers_problem(root: Path, leftovers: Sequence[str], *, run_id: str = "--run-id",
                      checkpoint_dir: str = "--checkpoint-dir") -> str:
    """The refusal of a run directory holding an earlier run's logs or checkpoints without its
    records (no launch.json, no marker): a launch would resume from them and write over them.
    `run_id`, `checkpoint_dir`: those knobs as the user gave them (RunSpec.knob)."""
    return (f"run directory {root} already holds {', '.join(leftovers)} from an earlier run that left no launch.json "
            "or run.json of its own: a launch there would resume from those checkpoints and write over those logs, "
            f"and they are yours, so nothing is touched: use a new {run_id}, or move the directory away (mv "
            f"{root} {root}.old); to resume from those checkpoints deliberately, copy them elsewhere and pass "
            f"{checkpoint_dir}=<the copy>")


def validate(spec: RunSpec, probe: Probe | None = None, *, needs_endpoint: bool = True) -> int:
    """Check everything that can be checked before launch. Returns the restored iteration
    (0 for a fresh run). Raises SpecError with one line per problem. Creates nothing.
    needs_endpoint=False: an sbatch script computes the rendezvous endpoint at run time."""
    probe = probe or SystemProbe()
    problems: list[str] = []
    layout = spec.layout
    run_id = spec.knob("run_id")

    if len(spec.run_id) > MAX_RUN_ID_LEN:
        problems.append(f"{spec.say('run_id', spec.run_id[:40])}... is {len(spec.run_id)} characters long: use at "
                        f"most {MAX_RUN_ID_LEN} (it names a directory, a Slurm step and the launch tag)")
    elif not is_valid_run_id(spec.run_id):
        problems.append(f"{spec.say('run_id')} must match {RUN_ID_PATTERN}: "
                        "use letters, digits, '.', '_' and '-', starting with a letter or digit")
    elif layout.marker.exists() or layout.marker.is_symlink():
        problems.append(f"run directory {layout.root} already holds {MARKER_NAME} from an earlier run: "
                        f"use a new {run_id} for every test")
    elif layout.launch_json.exists():
        problems.append(f"run directory {layout.root} already holds a launched run (launch.json): "
                        f"use a new {run_id} for every test; old runs are never overwritten")
    elif leftovers := layout.leftovers():
        problems.append(leftovers_problem(layout.root, leftovers, run_id=run_id,
                                          checkpoint_dir=spec.knob("checkpoint_dir")))

    blocker = next((p for p in (spec.work_dir, *spec.work_dir.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        problems.append(f"{spec.say('work_dir')}: {blocker} is not a directory: point {spec.knob('work_dir')} at a "
                        "directory (it is created when missing)")

    problems += knob_problems(spec)  # every knob's own constraints, declared beside it in KNOBS

    restored = 0
    too_short = False  # the train iterations are refused already: the schedule's reach would say it again
    if spec.checkpoint_dir is not None:
        ckpt, named = spec.checkpoint_dir, spec.say("checkpoint_dir")
        if not ckpt.is_dir():
            problems.append(f"{named} is not a directory: point it at an existing checkpoint directory, or leave "
                            f"{spec.knob('checkpoint_dir')} out for a fresh run")
        else:
            if (ckpt / FT_STATE_NAME).exists():
                problems.append(f"{named} holds {FT_STATE_NAME} (calculated timeouts that "
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
                        f"{named} holds {shown}, {tracked}: the run would save over "
                        f"them and delete their files; they are yours, so nothing is touched: move them out (e.g. "
                        f"mkdir {ckpt}.newer && mv {ckpt}/{newer[0][1]} ... {ckpt}.newer/), or point "
                        f"{spec.knob('checkpoint_dir')} at a copy, or write the newest complete one into "
                        f"{TRACKER_NAME}")
                need = restored + 2 * spec.save_interval
                if restored and spec.train_iters < need:
                    too_short = True
                    problems.append(
                        f"{spec.say('train_iters')} must exceed the restored iteration {restored} by at least "
                        f"two save intervals (2 x {spec.say('save_interval')}): set {spec.say('train_iters', need)} "
                        "or more")
    if spec.fault == CAMPAIGN and spec.schedule:
        too_short = too_short or spec.train_iters < campaign.sizing(spec.schedule, spec.save_interval).train_iters
    if not too_short:
        problems += reach_problems(spec, restored)

    if spec.nnodes > 1 and not spec.local_nodes:
        if needs_endpoint and not spec.rdzv_endpoint:
            endpoint = spec.knob("rdzv_endpoint")
            problems.append(f"{spec.say('nnodes')} needs {endpoint}, a HOST:PORT every node reaches: inside the "
                            f"allocation use the first host, e.g. {endpoint}=\"$(scontrol show hostnames "
                            "\"$SLURM_JOB_NODELIST\" | head -n 1):<free port>\"")
        if not spec.assume_shared_storage:
            for field in ("work_dir", "checkpoint_dir"):
                if getattr(spec, field) is not None:
                    problem = _node_local(spec, field, probe)
                    if problem:
                        problems.append(problem)
    if problems:
        raise SpecError(problems)
    return restored


def shrink_problems(spec: RunSpec) -> list[str]:
    """--nnodes MIN:MAX: a range the launcher accepts, and a smaller world Megatron can run."""
    if spec.min_nnodes is None:
        return []
    low, high = spec.min_nnodes, spec.nnodes
    given = spec.say("nnodes", f"{low}:{high}")
    if not 1 <= low <= high:
        return [f"{given}: MIN must be at least 1 and at most MAX: e.g. {spec.say('nnodes', f'1:{max(high, 1)}')}"]
    if low == high:
        return []
    problems = []
    smaller = topology.Topology(low, spec.gpus_per_node, spec.tp, spec.pp, spec.cp, spec.micro_batch_size,
                                spec.global_batch_size if spec.global_batch_size is not None else spec.world)
    for problem in topology.problems(smaller, spec.num_layers, spec.num_attention_heads, say=spec.say):
        problems.append(f"{given}: after a shrink to {low} node(s) the job runs a world of "
                        f"{smaller.world}, and then {problem}; choose a MIN whose world keeps the layout valid")
    return problems


def _valid_endpoint(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def _node_local(spec: RunSpec, field: str, probe: Probe) -> str | None:
    path = getattr(spec, field)
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
    return (f"{spec.say(field)} is on {why}; with {spec.say('nnodes')} every node must see it: use a path on shared "
            f"storage (NFS, Lustre, GPFS, ...), or pass {spec.say('assume_shared_storage', True)} if it is shared")


def environment_view(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment names RunSpec reads, for run.json and error reports."""
    env = os.environ if env is None else env
    return {k.env: env[k.env] for k in KNOBS if k.env and k.env in env}
