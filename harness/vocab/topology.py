"""Parallel layout arithmetic and the CUDA_DEVICE_MAX_CONNECTIONS policy.

Megatron's rules (docs/megatron.md): world % (TP*PP*CP) == 0, DP = world / (TP*PP*CP),
global_batch % (micro_batch*DP) == 0, heads % TP == 0, layers % PP == 0, hidden % heads == 0,
and with CP > 1 seq_length % (2*CP) == 0. Each refusal quotes the check of Megatron 0.19
that would stop every rank (megatron/training/arguments.py `validate_args`,
megatron/core/transformer/transformer_config.py `__post_init__`), so the user reads Megatron's
reason before launch instead of in N ranks' tracebacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

FSDP_FLAGS = ("--use-torch-fsdp2", "--use-megatron-fsdp")
MOE_OVERLAP_FLAG = "--overlap-moe-expert-parallel-comm"

# Compute capability major >= 10 is Blackwell (B200/GB200: 10.0, RTX Blackwell: 12.0).
_ARCH_NAMES = {"volta": 7, "turing": 7, "ampere": 8, "ada": 8, "hopper": 9, "blackwell": 10}


@dataclass(frozen=True)
class Topology:
    nnodes: int
    gpus_per_node: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    micro_batch: int = 1
    global_batch: int | None = None  # None: the active GPU count, as the seed does

    @property
    def world(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        return self.world // self.model_parallel

    @property
    def effective_global_batch(self) -> int:
        return self.global_batch if self.global_batch is not None else self.world


Say = Callable[[str, object], str]


def _flag(field: str, value: object) -> str:
    """A layout knob named by its flag (the RunSpec field with dashes): `--tp=2`."""
    return f"--{field.replace('_', '-')}={value}"


def problems(topo: Topology, num_layers: int, num_heads: int, say: Say = _flag) -> list[str]:
    """Every divisibility rule the layout breaks, each one actionable line. `say(field, value)`
    names a RunSpec knob as the user gave it (RunSpec.say; default: its flag)."""
    out: list[str] = []
    for field, value in (("nnodes", topo.nnodes), ("gpus_per_node", topo.gpus_per_node), ("tp", topo.tp),
                         ("pp", topo.pp), ("cp", topo.cp), ("micro_batch_size", topo.micro_batch)):
        if value < 1:
            out.append(f"{say(field, value)} must be a positive integer: set it to 1 or more")
    if out:
        return out
    tp, pp, cp = say("tp", topo.tp), say("pp", topo.pp), say("cp", topo.cp)
    if topo.world % topo.model_parallel:
        out.append(
            f"world size {topo.world} ({say('nnodes', topo.nnodes)} x {say('gpus_per_node', topo.gpus_per_node)}) "
            f"is not divisible by the model-parallel size {topo.model_parallel} ({tp} x {pp} x {cp}): "
            f"make the world a multiple of {topo.model_parallel} or change the parallel sizes (Megatron's "
            f"validate_args: 'world size ({topo.world}) is not divisible by total_model_size')"
        )
        return out
    if num_heads % topo.tp:
        out.append(f"{say('num_attention_heads', num_heads)} is not divisible by {tp}: choose a tensor-parallel size "
                   f"that divides {num_heads} (Megatron's TransformerConfig: 'num_attention_heads ({num_heads}) must "
                   f"be a multiple of tensor_model_parallel_size ({topo.tp})')")
    if num_layers % topo.pp:
        out.append(f"{say('num_layers', num_layers)} is not divisible by {pp}: choose a pipeline-parallel size that "
                   f"divides {num_layers} (Megatron's validate_args: 'Number of layers should be divisible by the "
                   "pipeline-model-parallel size')")
    gb, per_step = topo.effective_global_batch, topo.micro_batch * topo.dp
    if gb < 1 or gb % per_step:
        out.append(
            f"global batch size {gb} is not divisible by micro batch {topo.micro_batch} x DP {topo.dp} = {per_step}: "
            f"set {say('global_batch_size', per_step)} or another multiple of {per_step}"
        )
    return out


def megatron_problems(cp: int, hidden_size: int, num_heads: int, seq_length: int,
                      transformer_engine: bool, say: Say = _flag) -> list[str]:
    """Megatron's rules of a model shape that the layout rules of `problems` do not cover
    (the Megatron workloads only: the reference workload has no attention to split)."""
    out: list[str] = []
    if num_heads >= 1 and hidden_size % num_heads:
        out.append(f"{say('hidden_size', hidden_size)} is not divisible by {say('num_attention_heads', num_heads)}: "
                   f"choose a hidden size that is a multiple of {num_heads} (Megatron's validate_args: "
                   "'assert args.hidden_size % args.num_attention_heads == 0')")
    if cp > 1 and not transformer_engine:
        out.append(f"{say('cp', cp)}: Megatron's local attention (no Transformer Engine, as on CPU) has no context "
                   "parallelism (DotProductAttention: 'Context parallelism is only supported by "
                   f"TEDotProductAttention!'): set {say('cp', 1)}")
    if cp > 1 and seq_length % (2 * cp):
        out.append(f"{say('seq_length', seq_length)} is not a multiple of 2 x {say('cp', cp)} (Megatron's "
                   "validate_args: 'seq-length should be a multiple of 2 * context-parallel-size if "
                   f"context-parallel-size > 1'): choose a sequence length that is a multiple of {2 * cp}")
    return out


def arch_major(arch: str | None) -> int | None:
    """'hopper' -> 9, 'sm_90'/'sm90' -> 9, '9.0' -> 9, '10.0' -> 10; None when unknown."""
    if not arch:
        return None
    text = arch.strip().lower()
    if text in _ARCH_NAMES:
        return _ARCH_NAMES[text]
    m = re.fullmatch(r"(?:sm_?)?(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    digits = m.group(1)
    if m.group(2) is None and len(digits) >= 2:  # sm90, sm100, sm120: all but the last digit
        return int(digits[:-1])
    return int(digits)


@dataclass(frozen=True)
class ConnectionsPolicy:
    """What CUDA_DEVICE_MAX_CONNECTIONS must be, and why (the Slurm guide's policy)."""

    value: str | None  # None: leave the variable unset
    reason: str


def connections_policy(tp: int, cp: int, arch: str | None, extra_args: tuple[str, ...] = ()) -> ConnectionsPolicy:
    fsdp = any(flag in extra_args for flag in FSDP_FLAGS)
    if MOE_OVERLAP_FLAG in extra_args:
        return ConnectionsPolicy("32", "overlap_moe_expert_parallel_comm is on: it needs 32")
    if fsdp:
        return ConnectionsPolicy(None, "Torch-FSDP2 / Megatron-FSDP must not run with 1: left unset")
    if tp <= 1 and cp <= 1:
        return ConnectionsPolicy(None, "TP=1 and CP=1: not required, left unset")
    major = arch_major(arch)
    if major is not None and major >= 10:
        return ConnectionsPolicy(None, f"Blackwell GPU ({arch}): no effect, left unset")
    if major is None:
        # Unknown arch: 1 is required on pre-Blackwell and has no effect on Blackwell, so it is safe.
        return ConnectionsPolicy("1", f"TP={tp}, CP={cp} without FSDP on an unknown GPU architecture: "
                                      "1 is required before Blackwell and harmless on it")
    return ConnectionsPolicy("1", f"TP={tp}, CP={cp} without FSDP on pre-Blackwell ({arch}): Megatron asserts it is 1")
