"""Megatron-LM's unmodified pretrain_gpt.py: the argument set of the seed's default run.

docs/megatron.md, "Arguments of the GPU workload". `--load` equals `--save` because the
launcher re-runs the identical command after a failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.workloads import checkpoint_and_ft_args, model_args

if TYPE_CHECKING:
    from harness.spec import RunSpec

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


def schedule_problems(spec: "RunSpec") -> list[str]:
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


def argv(spec: "RunSpec", entrypoint: str | None = None) -> list[str]:
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


def fallback_args(spec: "RunSpec") -> list[str]:
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


def fallback_notes(spec: "RunSpec") -> list[str]:
    """One line per fallback flag group the plan adds, with its reason."""
    args = " ".join(fallback_args(spec))
    return [f"{key}: {why}" for key, why in FALLBACKS.items() if key in args]
