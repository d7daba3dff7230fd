"""The Workload type: everything that differs between the workloads the suite qualifies.

The rest of the house asks a workload instead of comparing its name: the planner for its argv,
environment and connection policy, the spec for its defaults, the knobs it accepts and its own
constraints, the fault vocabulary for the moments and kinds it can show, the runner for what the
machine must offer, the criteria for whether its training is bitwise deterministic, the triage
for the backend its ranks talk through. A new workload is one module with one subclass,
registered in harness.workloads (or by `register`, for a workload defined outside the package),
plus its tests and its page in docs/.

Nothing here imports the spec at run time (the spec asks the workloads), and nothing heavy:
the training workers import this package too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from harness.vocab.faults import FAULT_MOMENTS

if TYPE_CHECKING:
    from harness.vocab.events import Timeline
    from harness.vocab.layout import RunLayout
    from harness.machine.nvrx import NvrxTarget
    from harness.vocab.topology import ConnectionsPolicy, Topology

GLOO, NCCL = "gloo", "NCCL"


class SpecView(Protocol):
    """What a workload reads of a run's spec (harness.plan.spec.RunSpec is one). The workloads sit
    below the spec, which asks them; naming the fields here keeps that one way."""

    workload: str
    megatron_path: Path | None
    megatron_cpu_dir: Path | None
    megatron_bridge_dir: Path | None
    nnodes: int
    gpus_per_node: int
    tp: int
    pp: int
    cp: int
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    vocab_size: int
    micro_batch_size: int
    train_iters: int
    save_interval: int
    step_time_ms: int | None
    save_delay_ms: int | None
    gpu_arch: str | None
    transformer_engine: bool
    apex: bool
    distributed_optimizer: bool
    extra_args: tuple[str, ...]

    @property
    def topology(self) -> "Topology": ...

    def knob(self, field: str) -> str:
        """A knob as the user gave it, for a message (its flag, or the environment name its value came from)."""
        ...

    def say(self, field: str, value: object = None) -> str:
        """`NAME=VALUE` of a knob as the user gave it, for a message (this spec's value unless given)."""
        ...

    @property
    def layout(self) -> "RunLayout": ...


@dataclass(frozen=True)
class Determinism:
    """Whether a run's training is bitwise deterministic, so that loss continuity and the end
    state can be compared exactly with an uninterrupted run's: `reason` is a key of
    state_equivalence's sentences (harness.judge.sentences) with its `facts`; `evidence`, the
    lines that show it (a start's arguments table)."""

    exact: bool
    reason: str
    facts: Mapping[str, object] = field(default_factory=dict)
    evidence: tuple[Any, ...] = ()


class Workload:
    """One workload. Subclasses set the class attributes and override the methods that differ;
    the defaults describe a CPU workload that needs nothing but its own script."""

    name: str = ""
    summary: str = ""  # one clause for --workload's help
    # Its ranks run on GPUs: GPU-only fault kinds are allowed, the node must list GPUs, Slurm
    # asks for them (--gpus-per-node).
    on_gpu: bool = False
    backend: str = GLOO  # what its ranks talk through when the command line does not say
    # RunSpec defaults (a deadline profile by name among them).
    defaults: Mapping[str, Any] = {}
    # The fault moments it can show (harness.vocab.faults.FAULT_MOMENTS names). Every workload of the
    # suite shows every moment: all save asynchronously and load through Python's open(), which is
    # what the nemesis watches (iter_N/ contents; the audit hook of the load); Megatron's
    # persistent checkpoint worker leaves iter_N/ uncommitted until a later iteration finalizes it
    # (recovery_tests/test_recovery_megatron_cpu.py).
    moments: tuple[str, ...] = tuple(FAULT_MOMENTS)
    # RunSpec knobs only this workload reads (others refuse them when given).
    own_knobs: frozenset[str] = frozenset()
    # Hold every asynchronous save open this long (ms) when a fault must land inside one and
    # nobody said otherwise; None: its saves stay open long enough by themselves.
    in_save_delay_ms: int | None = None
    # What a qualified run of it proves, printed under the verdict.
    scope_note: str = ""
    # Its ranks mostly wait between steps (a paced step time) once they have started, so the
    # automatic twin beside its fault run starts when the fault run's workers have started: the
    # two start-ups (imports, process groups), the CPU-heavy part of a launch, do not compete.
    # False (ranks that compute through the whole run): both launch at once, which is sooner.
    # harness.launch.baseline.twin_start; figures in docs/figures.md (bench/harness_overhead.py).
    steps_wait: bool = False

    # ---- planning

    def argv(self, spec: "SpecView") -> list[str]:
        """The entrypoint and its arguments (after the launcher's and the nemesis')."""
        raise NotImplementedError

    def entrypoint(self, spec: "SpecView") -> Path | None:
        """The script the workers run (its digest is part of the configuration hash)."""
        return None

    def extra_arg_problems(self, extra: tuple[str, ...]) -> list[str]:
        """Workload arguments after `--` that it refuses, one sentence each."""
        return []

    def problems(self, spec: "SpecView") -> list[str]:
        """Its own constraints on a whole RunSpec (install directories, shape rules), before launch."""
        return []

    def plan_problems(self, spec: "SpecView", nvrx: "NvrxTarget") -> list[str]:
        """What it refuses with this launcher, or its arguments (at plan time)."""
        return self.extra_arg_problems(spec.extra_args)

    def resolve(self, values: dict[str, Any]) -> dict[str, Any]:
        """RunSpec values as given and defaulted -> with what this workload fills in itself (an
        install directory found, the launcher it brings)."""
        return values

    def connections_policy(self, spec: "SpecView") -> "ConnectionsPolicy":
        from harness.vocab.topology import ConnectionsPolicy

        return ConnectionsPolicy(None, f"CPU {self.name} workload: not applicable")

    def environment(self, spec: "SpecView") -> list[tuple[str, str]]:
        """Environment variables its workers need beyond the plan's own."""
        return []

    def pythonpath(self, spec: "SpecView") -> tuple[str, ...]:
        """Directories its workers need first on PYTHONPATH."""
        return ()

    def cwd(self, spec: "SpecView") -> Path:
        return spec.layout.root

    def notes(self, spec: "SpecView") -> list[str]:
        """Lines `plan` prints about what it chose for this workload."""
        return []

    def software_version(self, spec: "SpecView") -> str | None:
        """The version of the training software it runs (run.json's megatron_version)."""
        return None

    # ---- the machine

    def machine_problems(self, spec: "SpecView", gpus: tuple[Any, ...]) -> list[str]:
        """What this machine must offer, given the GPUs nvidia-smi lists (preflight)."""
        if self.on_gpu and not gpus:
            return [f"the {self.name} workload needs NVIDIA GPUs and nvidia-smi lists none here: run on a GPU node, "
                    "or use --workload reference for the CPU reference run"]
        return []

    # ---- judging

    def determinism(self, timeline: "Timeline") -> Determinism:
        """Whether this run trained bitwise deterministically (the end state and every loss
        compare exactly with an uninterrupted twin's)."""
        return Determinism(False, "not_deterministic", {"workload": self.name})


_REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    """Make `workload` known by its name (planning, validation, judging). Refuses a second
    workload of a name already taken."""
    if not workload.name:
        raise ValueError("a workload needs a name")
    held = _REGISTRY.get(workload.name)
    if held is not None and held is not workload:
        raise ValueError(f"a workload named {workload.name!r} is registered already")
    _REGISTRY[workload.name] = workload
    return workload


def unregister(name: str) -> None:
    """Forget a workload registered by `register` (tests that define their own)."""
    _REGISTRY.pop(name, None)
