"""The CPU reference workload as the planner sees it (the workload itself, which imports torch,
is harness/workloads/reference.py, run as a script by the workers).

Same command shape as Megatron's: the script path, then Megatron's flag names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.workloads.base import Determinism, Workload
from harness.workloads.common import checkpoint_and_ft_args, model_args

if TYPE_CHECKING:
    from harness.vocab.events import Timeline
    from harness.workloads.base import SpecView

SCRIPT = Path(__file__).with_name("reference.py")

# Harness-owned flags, as for Megatron; the workload itself rejects flags it does not know.
OWNED_FLAGS = ("--save", "--load", "--save-interval", "--train-iters", "--num-layers", "--hidden-size",
               "--num-attention-heads", "--seq-length", "--micro-batch-size", "--global-batch-size",
               "--enable-ft-package", "--log-interval", "--step-time-ms", "--save-delay-ms")

# Its saves of a tiny model take milliseconds: an in-save fault needs each one held open for a
# few polls of the nemesis.
IN_SAVE_DELAY_MS = 400


# Megatron's other checkpoint tiers (harness.vocab.tiers): the reference workload writes the persistent
# one only, so a fault waiting on another could never fire (and its parser would refuse the flags
# in every worker, after the launch).
OTHER_TIER_PREFIX = "--non-persistent-"


def extra_arg_problems(extra: tuple[str, ...]) -> list[str]:
    out = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            out.append(f"workload argument {flag} is set by the harness: remove it from the arguments after --")
        elif flag.startswith(OTHER_TIER_PREFIX):
            out.append(f"workload argument {flag} asks for one of Megatron's non-persistent checkpoint tiers, and the "
                       "reference workload saves persistent checkpoints only: use --workload megatron-cpu (or "
                       "megatron) for the tiers, or remove it from the arguments after --")
    return out


def argv(spec: "SpecView") -> list[str]:
    args = [str(SCRIPT), *model_args(spec), "--vocab-size", str(spec.vocab_size), "--lr", "1e-3",
            *checkpoint_and_ft_args(spec)]
    if spec.step_time_ms is not None:
        args += ["--step-time-ms", str(spec.step_time_ms)]
    if spec.save_delay_ms:
        args += ["--save-delay-ms", str(spec.save_delay_ms)]
    return args + list(spec.extra_args)


class Reference(Workload):
    """A small GPT in plain PyTorch on gloo, Megatron's checkpoint layout and log lines, bitwise
    deterministic (docs/architecture.md, "The workloads")."""

    name = "reference"
    summary = "reference (CPU, no GPU needed)"
    # Sized to finish kill + hang + none in a few minutes on two cores.
    defaults = dict(gpus_per_node=2, num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
                    vocab_size=256, train_iters=30, save_interval=5, deadline_profile="reference",
                    monitor_interval=0.3, step_time_ms=100, baseline="auto")
    own_knobs = frozenset({"step_time_ms", "save_delay_ms"})
    in_save_delay_ms = IN_SAVE_DELAY_MS
    scope_note = "the CPU reference run qualifies this harness and launcher, not GPU training recovery."
    steps_wait = True  # --step-time-ms paces each step; the model's own compute is a few ms

    def argv(self, spec: "SpecView") -> list[str]:
        return argv(spec)

    def entrypoint(self, spec: "SpecView") -> Path:
        return SCRIPT

    def extra_arg_problems(self, extra: tuple[str, ...]) -> list[str]:
        return extra_arg_problems(extra)

    def determinism(self, timeline: "Timeline") -> Determinism:
        # deterministic algorithms, one thread, data a pure function of the sample index
        return Determinism(True, "deterministic_reference")
