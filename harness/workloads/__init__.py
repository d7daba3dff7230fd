"""The two workloads share Megatron's flag names for the parts the suite checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.spec import RunSpec


_VERSION_PART = re.compile(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d{1,4})\s*$", re.MULTILINE)


def megatron_version(spec: "RunSpec") -> str | None:
    """megatron-core's version (MAJOR.MINOR.PATCH of megatron/core/package_info.py) in the
    Megatron the plan runs: the megatron-cpu install, else the MEGATRON_PATH checkout; None when
    neither says. Recorded in run.json, where the known-defect table (harness.findings) reads it."""
    from harness import safeio

    for root in (spec.megatron_cpu_dir if spec.workload == "megatron-cpu" else None, spec.megatron_path):
        if root is None:
            continue
        try:
            text = safeio.read_text(Path(root) / "megatron" / "core" / "package_info.py", limit=64 << 10)
        except (OSError, ValueError):
            continue
        parts = dict(_VERSION_PART.findall(text))
        if {"MAJOR", "MINOR", "PATCH"} <= set(parts):
            return f"{int(parts['MAJOR'])}.{int(parts['MINOR'])}.{int(parts['PATCH'])}"
    return None


def model_args(spec: "RunSpec") -> list[str]:
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


def checkpoint_and_ft_args(spec: "RunSpec") -> list[str]:
    """--load equals --save (the launcher re-runs the identical command), async torch_dist
    saves, every iteration logged (each is evidence), FT sections from the first step."""
    ckpt = str(spec.layout.checkpoints)
    return [
        "--save", ckpt, "--load", ckpt, "--save-interval", str(spec.save_interval),
        "--ckpt-format", "torch_dist", "--async-save",
        "--log-interval", "1", "--eval-iters", "0",
        "--enable-ft-package", "--ft-num-warmup-iters", "0",
    ]
