"""Command line of the CPU reference workload (harness/workloads/reference.py).

Same shape as the Megatron command: the script path, then Megatron's flag names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.workloads import checkpoint_and_ft_args, model_args

if TYPE_CHECKING:
    from harness.spec import RunSpec

SCRIPT = Path(__file__).with_name("reference.py")

# Harness-owned flags, as for Megatron; the workload itself rejects flags it does not know.
OWNED_FLAGS = ("--save", "--load", "--save-interval", "--train-iters", "--num-layers", "--hidden-size",
               "--num-attention-heads", "--seq-length", "--micro-batch-size", "--global-batch-size",
               "--enable-ft-package", "--log-interval", "--step-time-ms", "--save-delay-ms")


# Megatron's other checkpoint tiers (harness.tiers): the reference workload writes the persistent
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


def argv(spec: "RunSpec") -> list[str]:
    args = [str(SCRIPT), *model_args(spec), "--vocab-size", str(spec.vocab_size), "--lr", "1e-3",
            *checkpoint_and_ft_args(spec)]
    if spec.step_time_ms is not None:
        args += ["--step-time-ms", str(spec.step_time_ms)]
    if spec.save_delay_ms:
        args += ["--save-delay-ms", str(spec.save_delay_ms)]
    return args + list(spec.extra_args)
