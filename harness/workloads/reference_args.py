"""Command line of the CPU reference workload (harness/workloads/reference.py).

Same shape as the Megatron command: the script path, then Megatron's flag names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.spec import RunSpec

SCRIPT = Path(__file__).with_name("reference.py")

# Harness-owned flags, as for Megatron; the workload itself rejects flags it does not know.
OWNED_FLAGS = ("--save", "--load", "--save-interval", "--train-iters", "--num-layers", "--hidden-size",
               "--num-attention-heads", "--seq-length", "--micro-batch-size", "--global-batch-size",
               "--enable-ft-package", "--log-interval", "--step-time-ms")


def extra_arg_problems(extra: tuple[str, ...]) -> list[str]:
    return [f"workload argument {arg.split('=', 1)[0]} is set by the harness: remove it from the arguments after --"
            for arg in extra if arg.split("=", 1)[0] in OWNED_FLAGS]


def argv(spec: "RunSpec") -> list[str]:
    ckpt = str(spec.layout.checkpoints)
    args = [
        str(SCRIPT),
        "--num-layers", str(spec.num_layers),
        "--hidden-size", str(spec.hidden_size),
        "--num-attention-heads", str(spec.num_attention_heads),
        "--seq-length", str(spec.seq_length),
        "--max-position-embeddings", str(spec.seq_length),
        "--vocab-size", str(spec.vocab_size),
        "--micro-batch-size", str(spec.micro_batch_size),
        "--global-batch-size", str(spec.topology.effective_global_batch),
        "--train-iters", str(spec.train_iters),
        "--lr", "1e-3",
        "--save", ckpt, "--load", ckpt, "--save-interval", str(spec.save_interval),
        "--ckpt-format", "torch_dist", "--async-save",
        "--log-interval", "1", "--eval-iters", "0",
        "--enable-ft-package", "--ft-num-warmup-iters", "0",
    ]
    if spec.step_time_ms is not None:
        args += ["--step-time-ms", str(spec.step_time_ms)]
    return args + list(spec.extra_args)
