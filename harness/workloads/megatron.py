"""Megatron-LM's unmodified pretrain_gpt.py: the argument set of the seed's default run.

docs/megatron.md, "Arguments of the GPU workload". `--load` equals `--save` because the
launcher re-runs the identical command after a failure.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.vocab import topology
from harness.workloads.base import NCCL, Workload
from harness.workloads.common import checkpoint_and_ft_args, model_args

if TYPE_CHECKING:
    from harness.machine.nvrx import NvrxTarget
    from harness.workloads.base import SpecView

ENTRYPOINT = "pretrain_gpt.py"

# Flags the harness sets from the RunSpec; passing them again after `--` would silently
# disagree with what the checks expect.
OWNED_FLAGS = {
    "--save": "the run's checkpoint dir (use --checkpoint-dir)",
    "--load": "the run's checkpoint dir (use --checkpoint-dir)",
    "--save-interval": "--save-interval",
    "--train-iters": "--train-iters",
    "--tensor-model-parallel-size": "--tp",
    "--pipeline-model-parallel-size": "--pp",
    "--context-parallel-size": "--cp",
    "--num-layers": "--num-layers",
    "--hidden-size": "--hidden-size",
    "--num-attention-heads": "--num-attention-heads",
    "--seq-length": "--seq-length",
    "--micro-batch-size": "--micro-batch-size",
    "--global-batch-size": "--global-batch-size",
    "--enable-ft-package": "always on",
    "--log-interval": "always 1: every committed iteration is evidence",
    "--use-distributed-optimizer": "--distributed-optimizer 1|0",
}
# Flags that defeat the qualification itself (docs/megatron.md, "Exit status is not evidence").
REFUSED_FLAGS = {
    "--exit-signal-handler": "it hangs when a peer rank is dead",
    "--calc-ft-timeouts": "it writes ft_state.json, which overrides the fixed deadlines of this run",
    "--exit-interval": "Megatron then exits 0 before the final iteration",
    "--exit-duration-in-mins": "Megatron then exits 0 before the final iteration",
    "--ckpt-step": "it loads a fixed iteration whatever the tracker says",
}


def extra_arg_problems(extra: tuple[str, ...]) -> list[str]:
    out = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            out.append(f"workload argument {flag} is set by the harness ({OWNED_FLAGS[flag]}): "
                       "remove it from the arguments after --")
        elif flag in REFUSED_FLAGS or flag.startswith("--fault-injector"):
            why = REFUSED_FLAGS.get(flag, "Megatron's injector re-arms after every restart")
            out.append(f"workload argument {flag} is refused: {why}; remove it from the arguments after --")
    return out


# The learning-rate warmup of every run; the decay runs over TRAIN_ITERS (--lr-decay-iters
# defaults to --train-iters).
LR_WARMUP_ITERS = 10


def schedule_problems(spec: "SpecView") -> list[str]:
    """Megatron's OptimizerParamScheduler asserts `lr_warmup_steps < lr_decay_steps` at
    setup, on every rank and in every cycle: a run that short never trains."""
    if any(a.split("=", 1)[0] in ("--lr-warmup-iters", "--lr-decay-iters", "--lr-warmup-fraction")
           for a in spec.extra_args):
        return []  # the user's schedule: Megatron judges it
    if spec.train_iters > LR_WARMUP_ITERS:
        return []
    return [f"{spec.say('train_iters')} is not above the learning-rate warmup of {LR_WARMUP_ITERS} iterations, "
            "and the decay runs over the train iterations (Megatron's OptimizerParamScheduler: "
            "'assert self.lr_warmup_steps < self.lr_decay_steps', on every rank before the first step): set "
            f"{spec.say('train_iters', LR_WARMUP_ITERS + 1)} or more, or give --lr-warmup-iters after --"]


def argv(spec: "SpecView", entrypoint: str | None = None) -> list[str]:
    """pretrain_gpt.py (or the given script with its flags) and its arguments for one
    qualification run."""
    if entrypoint is None:
        assert spec.megatron_path is not None
        entrypoint = str(Path(spec.megatron_path) / ENTRYPOINT)
    args = [
        entrypoint,
        "--tensor-model-parallel-size", str(spec.tp),
        "--pipeline-model-parallel-size", str(spec.pp),
    ]
    if spec.cp > 1:
        args += ["--context-parallel-size", str(spec.cp)]
    args += model_args(spec)
    args += [
        "--lr", "1e-4", "--min-lr", "1e-5", "--lr-decay-style", "cosine", "--lr-warmup-iters", str(LR_WARMUP_ITERS),
        "--bf16", *(["--use-distributed-optimizer"] if spec.distributed_optimizer else []),
        "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(spec.vocab_size),
    ]
    args += checkpoint_and_ft_args(spec)
    # --async-save is silently disabled without it (docs/megatron.md, "Checkpoint layout").
    args.append("--use-persistent-ckpt-worker")
    # Megatron 0.19 defaults --eval-interval to None, and pretrain() computes
    # train_iters // eval_interval before training even with --eval-iters 0 (TypeError).
    # With --eval-iters 0 nothing is evaluated; train_iters keeps it meaningful if a user adds
    # evaluation after `--`: one evaluation, at the end, outside every monitored step.
    args += ["--eval-interval", str(spec.train_iters)]
    return args + fallback_args(spec) + list(spec.extra_args)


# What the plan adds when Transformer Engine or apex is missing, and why (Megatron-core 0.19).
FALLBACKS = {
    "--transformer-impl local": "without Transformer Engine: Megatron's local layers instead of TE's",
    "--no-persist-layer-norm": "local layers without apex: the torch LayerNorm fallback asserts "
                               "'persist_layer_norm not supported by torch LayerNorm' at model build",
    "--no-masked-softmax-fusion": "local layers without apex: the bf16 core-attention softmax imports apex's "
                                  "scaled_masked_softmax_cuda (ModuleNotFoundError in the first step)",
    "--no-bias-dropout-fusion --no-bias-gelu-fusion": "without Transformer Engine (a bare node, not an NGC image): "
                                                      "both fusions go through torch.compile, which builds Triton "
                                                      "kernels with gcc and Python.h inside the first monitored "
                                                      "step of every cycle",
    "--no-gradient-accumulation-fusion": "without apex, with or without Transformer Engine: the output layer is "
                                         "Megatron's ColumnParallelLinear, which needs apex's "
                                         "fused_weight_gradient_mlp_cuda and raises at model build",
}


def fallback_args(spec: "SpecView") -> list[str]:
    """The flags FALLBACKS explains, for the spec's Transformer Engine and apex."""
    chosen: list[str] = []
    if not spec.transformer_engine:
        chosen.append("--transformer-impl local")
        if not spec.apex:
            chosen += ["--no-persist-layer-norm", "--no-masked-softmax-fusion"]
        chosen.append("--no-bias-dropout-fusion --no-bias-gelu-fusion")
    if not spec.apex:
        chosen.append("--no-gradient-accumulation-fusion")
    return [word for key in chosen for word in key.split()]


def fallback_notes(spec: "SpecView") -> list[str]:
    """One line per fallback flag group the plan adds, with its reason."""
    args = " ".join(fallback_args(spec))
    return [f"{key}: {why}" for key, why in FALLBACKS.items() if key in args]


_VERSION_PART = re.compile(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d{1,4})\s*$", re.MULTILINE)


def megatron_version(*roots: Path | None, package: str = "core") -> str | None:
    """megatron-core's version (MAJOR.MINOR.PATCH of megatron/core/package_info.py) in the first
    of `roots` that says; None when none does. Recorded in run.json, where the known-defect table
    (harness.judge.findings) reads it. `package="bridge"`: Megatron-Bridge's, from
    megatron/bridge/package_info.py (the same layout)."""
    from harness.safe import safeio

    for root in roots:
        if root is None:
            continue
        try:
            text = safeio.read_text(Path(root) / "megatron" / package / "package_info.py", limit=64 << 10)
        except (OSError, ValueError):
            continue
        parts = dict(_VERSION_PART.findall(text))
        if {"MAJOR", "MINOR", "PATCH"} <= set(parts):
            return f"{int(parts['MAJOR'])}.{int(parts['MINOR'])}.{int(parts['PATCH'])}"
    return None


def ft_problems(spec: "SpecView", nvrx: "NvrxTarget") -> list[str]:
    """Megatron's --enable-ft-package needs an NVRx that has it."""
    if nvrx.supports_megatron_ft:
        return []
    return [f"NVRx {nvrx.version} cannot run Megatron's --enable-ft-package (it needs >= 0.6.0): install "
            f"nvidia-resiliency-ext>=0.6.0 (Python >= 3.12, glibc >= 2.39) or pass {spec.knob('nvrx_version')} for "
            "the cluster's launcher"]


def shape_problems(spec: "SpecView") -> list[str]:
    """Megatron's own rules for the parallel layout (context parallelism, heads, sequence)."""
    return topology.megatron_problems(spec.cp, spec.hidden_size, spec.num_attention_heads, spec.seq_length,
                                      spec.transformer_engine, say=spec.say)


class Megatron(Workload):
    """Megatron-LM's unmodified pretrain_gpt.py from the user's checkout, on GPUs."""

    name = "megatron"
    summary = "megatron (GPU)"
    on_gpu = True
    backend = NCCL
    defaults = dict(deadline_profile="walkthrough")
    own_knobs = frozenset({"distributed_optimizer"})

    def argv(self, spec: "SpecView") -> list[str]:
        return argv(spec)

    def entrypoint(self, spec: "SpecView") -> Path | None:
        return Path(spec.megatron_path) / ENTRYPOINT if spec.megatron_path is not None else None

    def extra_arg_problems(self, extra: tuple[str, ...]) -> list[str]:
        return extra_arg_problems(extra)

    def problems(self, spec: "SpecView") -> list[str]:
        problems = shape_problems(spec)
        if spec.megatron_path is None:
            problems.append(f"{spec.knob('megatron_path')} is not given: point it at a Megatron-LM checkout (or use "
                            "--workload reference for the CPU reference run)")
        elif not (spec.megatron_path / ENTRYPOINT).is_file():
            problems.append(f"{spec.say('megatron_path')} has no {ENTRYPOINT}: point it at the root of a "
                            "Megatron-LM checkout")
        return problems

    def plan_problems(self, spec: "SpecView", nvrx: "NvrxTarget") -> list[str]:
        return ft_problems(spec, nvrx) + self.extra_arg_problems(spec.extra_args) + schedule_problems(spec)

    def connections_policy(self, spec: "SpecView") -> topology.ConnectionsPolicy:
        return topology.connections_policy(spec.tp, spec.cp, spec.gpu_arch, spec.extra_args)

    def cwd(self, spec: "SpecView") -> Path:
        return spec.megatron_path or spec.layout.root

    def notes(self, spec: "SpecView") -> list[str]:
        return fallback_notes(spec)

    def software_version(self, spec: "SpecView") -> str | None:
        return megatron_version(spec.megatron_path)

    def machine_problems(self, spec: "SpecView", gpus: tuple[Any, ...]) -> list[str]:
        problems = super().machine_problems(spec, gpus)
        if gpus and spec.nnodes == 1 and len(gpus) < spec.gpus_per_node:
            problems.append(f"{spec.say('gpus_per_node')} but this node has {len(gpus)} GPU(s): "
                            f"set {spec.say('gpus_per_node', len(gpus))} or less")
        return problems
