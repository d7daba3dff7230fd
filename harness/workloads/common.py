"""What the Megatron workloads and the reference workload share: Megatron's flag names for the
parts the suite checks (the model shape, the batch, the checkpoints and the FT client)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.workloads.base import SpecView


def model_args(spec: "SpecView") -> list[str]:
    """Model shape and batch sizes; the global batch defaults to the active GPU count."""
    return [
        "--num-layers", str(spec.num_layers),
        "--hidden-size", str(spec.hidden_size),
        "--num-attention-heads", str(spec.num_attention_heads),
        "--seq-length", str(spec.seq_length),
        "--max-position-embeddings", str(spec.seq_length),
        "--micro-batch-size", str(spec.micro_batch_size),
        "--global-batch-size", str(spec.topology.effective_global_batch),
        "--train-iters", str(spec.train_iters),
    ]


def checkpoint_and_ft_args(spec: "SpecView") -> list[str]:
    """--load equals --save (the launcher re-runs the identical command), async torch_dist
    saves, every iteration logged (each is evidence), FT sections from the first step."""
    ckpt = str(spec.layout.checkpoints)
    return [
        "--save", ckpt, "--load", ckpt, "--save-interval", str(spec.save_interval),
        "--ckpt-format", "torch_dist", "--async-save",
        "--log-interval", "1", "--eval-iters", "0",
        "--enable-ft-package", "--ft-num-warmup-iters", "0",
    ]
