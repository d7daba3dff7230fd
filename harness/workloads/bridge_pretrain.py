"""Megatron-Bridge's own pretraining loop for a tiny GPT, in the workers: the worker side of
`--workload megatron-bridge` (harness/workloads/megatron_bridge.py, docs/megatron-bridge.md).

Run by harness/workloads/entrypoints/pretrain_bridge_cpu.py, which ft_launcher (or the
nemesis) starts like any training script. It reads the command line the megatron workloads
write (Megatron-LM's flag names: harness.workloads.megatron.argv and megatron_cpu.argv), builds
Bridge's `ConfigContainer` from it (the tiny GPT recipe: `recipe`), and calls Bridge's own
`pretrain(config, forward_step)` with Bridge's own GPT step. Everything after that is
Bridge's: its training loop, its iteration lines, its checkpoint save and load
(`megatron.bridge.training.checkpointing`), its NVRx integration
(`megatron.bridge.training.fault_tolerance`: the rank monitor client and its setup, step
and checkpointing sections).

Where Bridge comes from: the directory tools/install-megatron-bridge.sh filled
(NVRX_QUAL_MEGATRON_BRIDGE_DIR, which the workload's plan sets from --megatron-bridge-dir;
default `.megatron-bridge` in this checkout): Bridge's code
(`megatron/bridge`, first on sys.path) and the libraries its import of the training path needs
that this environment lacks (`site/`, appended after the environment's own site-packages, so
the environment's versions win). Megatron-core, NVRx 0.7.0, the triton stub and the CUDA->CPU
shim come from the megatron-cpu install, as for `--workload megatron-cpu`.

Transformer Engine has no CPU build, and one Bridge module imports it without a guard on the
way to `import megatron.bridge` (TE_UNGUARDED_IMPORTERS). `TeStandIn` gives exactly those
modules an object that raises on any use, without putting anything into sys.modules: every
other importer (megatron.core's `try: import transformer_engine` guards included) still gets
ImportError, so nothing else believes TE is present.

Importing this module has no side effect and imports neither torch nor Bridge.
"""

from __future__ import annotations

import argparse
import builtins
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

DIR_ENV = "NVRX_QUAL_MEGATRON_BRIDGE_DIR"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".megatron-bridge"
SITE_SUBDIR = "site"

# Bridge modules that import Transformer Engine without a try/except on the import path of
# `megatron.bridge` (0.6.2): megatron/bridge/__init__.py -> models -> conversion.peft_bridge ->
# peft.canonical_lora -> peft.lora_layers (line 20, `import transformer_engine.pytorch as te`;
# used only by LoRA adapters, never by pretraining).
TE_UNGUARDED_IMPORTERS = frozenset({"megatron.bridge.peft.lora_layers"})


class Absent:
    """What a TE_UNGUARDED_IMPORTERS module gets for Transformer Engine: any attribute is
    another Absent (so annotations such as `te.ops.Sequential` evaluate), and calling one
    raises; nothing in a pretraining run touches it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "Absent":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Absent(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name}: Transformer Engine is not installed (nvrx-qual's stand-in for "
                           "Megatron-Bridge's unguarded import; docs/megatron-bridge.md)")

    def __repr__(self) -> str:
        return f"<absent {self._name}>"


class TeStandIn:
    """A wrapper of builtins.__import__: a `transformer_engine` import that fails with
    ImportError in one of `importers` returns an Absent instead; every other import, and
    every import that succeeds (a real TE), is untouched. Nothing enters sys.modules."""

    def __init__(self, importers: frozenset[str] = TE_UNGUARDED_IMPORTERS,
                 real_import: Callable[..., Any] | None = None) -> None:
        self.importers = importers
        self.real_import = real_import if real_import is not None else builtins.__import__
        self.served: list[str] = []

    def __call__(self, name: str, globals: dict | None = None, locals: dict | None = None,
                 fromlist: Sequence[str] | None = (), level: int = 0) -> Any:
        try:
            return self.real_import(name, globals, locals, fromlist, level)
        except ImportError:
            importer = (globals or {}).get("__name__")
            if level != 0 or name.partition(".")[0] != "transformer_engine" or importer not in self.importers:
                raise
            self.served.append(str(importer))
            return Absent(name if fromlist else "transformer_engine")

    def install(self) -> "TeStandIn":
        builtins.__import__ = self
        return self

    def uninstall(self) -> None:
        if builtins.__import__ is self:
            builtins.__import__ = self.real_import


def bridge_dir(env: "os._Environ[str] | dict[str, str]" = os.environ) -> Path:
    return Path(env.get(DIR_ENV) or DEFAULT_DIR)


def add_to_path(directory: Path, path: list[str] = sys.path) -> None:
    """Bridge's code first; the libraries the install added after site-packages."""
    if str(directory) not in path:
        path.insert(0, str(directory))
    site = str(directory / SITE_SUBDIR)
    if site not in path:
        path.append(site)


# ---------------------------------------------------------------- the command line


@dataclass(frozen=True)
class TinyGpt:
    """What the command line asks of the run, in Megatron-LM's terms."""

    save: str
    load: str | None
    save_interval: int
    train_iters: int
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    micro_batch_size: int
    global_batch_size: int
    vocab_size: int
    lr: float
    min_lr: float
    lr_decay_style: str
    lr_warmup_iters: int
    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int
    context_parallel_size: int
    bf16: bool
    use_distributed_optimizer: bool
    ckpt_format: str
    async_save: bool
    async_strategy: str
    log_interval: int
    eval_iters: int
    eval_interval: int | None
    enable_ft_package: bool
    distributed_backend: str
    num_workers: int
    hidden_dropout: float
    attention_dropout: float
    transformer_impl: str
    persist_layer_norm: bool
    masked_softmax_fusion: bool
    bias_dropout_fusion: bool
    bias_activation_fusion: bool
    gradient_accumulation_fusion: bool
    seed: int


# Flags Bridge has no setting for, accepted so the megatron workloads' command line runs
# unchanged, each with what Bridge does instead (printed by rank 0 at start).
NOT_BRIDGE_SETTINGS = {
    "--ft-num-warmup-iters": "Bridge opens the FT 'step' section from the second iteration of every start "
                             "(megatron.bridge.training.fault_tolerance._NUM_WARMUP_ITERS = 1, not configurable)",
    "--use-persistent-ckpt-worker": "Bridge's CheckpointConfig.use_persistent_ckpt_worker is True by default "
                                    "(and async_save asserts it)",
    "--mock-data": "the recipe always uses Bridge's MockGPTDatasetConfig",
    "--max-position-embeddings": "Bridge's GPTModelProvider sizes the learned position table by seq_length",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pretrain_bridge_cpu.py", allow_abbrev=False,
                                description="Megatron-Bridge pretraining of a tiny GPT, from Megatron-LM's flag names")
    a = p.add_argument
    a("--save", required=True)
    a("--load")
    a("--save-interval", type=int, default=4)
    a("--train-iters", type=int, required=True)
    a("--num-layers", type=int, default=2)
    a("--hidden-size", type=int, default=64)
    a("--num-attention-heads", type=int, default=4)
    a("--seq-length", type=int, default=64)
    a("--micro-batch-size", type=int, default=1)
    a("--global-batch-size", type=int, required=True)
    a("--vocab-size", type=int, default=256)
    a("--tokenizer-type", choices=["NullTokenizer"], default="NullTokenizer")
    a("--lr", type=float, default=1e-4)
    a("--min-lr", type=float, default=1e-5)
    a("--lr-decay-style", default="cosine")
    a("--lr-warmup-iters", type=int, default=10)
    a("--tensor-model-parallel-size", type=int, default=1)
    a("--pipeline-model-parallel-size", type=int, default=1)
    a("--context-parallel-size", type=int, default=1)
    a("--bf16", action="store_true")
    a("--use-distributed-optimizer", action="store_true")
    a("--ckpt-format", choices=["torch_dist"], default="torch_dist")
    a("--async-save", action="store_true")
    a("--async-strategy", choices=["nvrx", "mcore"], default="nvrx")
    a("--log-interval", type=int, default=1)
    a("--eval-iters", type=int, default=0)
    a("--eval-interval", type=int)
    a("--enable-ft-package", action="store_true")
    a("--distributed-backend", choices=["gloo", "nccl"], default="nccl")
    a("--num-workers", type=int, default=2)
    a("--hidden-dropout", type=float, default=0.1)
    a("--attention-dropout", type=float, default=0.1)
    a("--transformer-impl", choices=["local", "transformer_engine"], default="transformer_engine")
    a("--no-persist-layer-norm", dest="persist_layer_norm", action="store_false")
    a("--no-masked-softmax-fusion", dest="masked_softmax_fusion", action="store_false")
    a("--no-bias-dropout-fusion", dest="bias_dropout_fusion", action="store_false")
    a("--no-bias-gelu-fusion", dest="bias_activation_fusion", action="store_false")
    a("--no-gradient-accumulation-fusion", dest="gradient_accumulation_fusion", action="store_false")
    a("--seed", type=int, default=1234)
    for flag in NOT_BRIDGE_SETTINGS:
        a(flag, nargs="?", const=True, dest="ignored_" + flag.lstrip("-").replace("-", "_"))
    return p


def flags() -> frozenset[str]:
    """Every flag the entrypoint reads (the workload refuses others before launch)."""
    return frozenset(o for action in parser()._actions for o in action.option_strings if o.startswith("--"))


def parse(argv: Sequence[str]) -> tuple[TinyGpt, list[str]]:
    """The run's settings and a note per accepted flag that Bridge has no setting for.
    An unknown flag is an argparse error (exit 2): a flag silently dropped would be a lie."""
    ns = vars(parser().parse_args(list(argv)))
    notes = [f"{flag}: {why}" for flag, why in NOT_BRIDGE_SETTINGS.items()
             if ns.pop("ignored_" + flag.lstrip("-").replace("-", "_")) is not None]
    ns.pop("tokenizer_type")
    return TinyGpt(**ns), notes


# ---------------------------------------------------------------- the recipe


def recipe(t: TinyGpt) -> Any:
    """Bridge's ConfigContainer for `t`: the shape of Bridge's vanilla GPT recipe
    (megatron.bridge.recipes.gpt.vanilla_gpt, which mirrors pretrain_gpt.py's defaults), written
    out here because importing megatron.bridge.recipes imports every recipe, diffusion ones
    (diffusers) included."""
    import torch
    from megatron.core.distributed import DistributedDataParallelConfig

    from megatron.bridge.models.gpt_provider import GPTModelProvider, default_layer_spec, local_layer_spec
    from megatron.bridge.training.config import (CheckpointConfig, ConfigContainer, DistributedInitConfig,
                                                 FaultToleranceConfig, LoggerConfig, MockGPTDatasetConfig,
                                                 OptimizerConfig, RNGConfig, SchedulerConfig, TokenizerConfig,
                                                 TrainingConfig, ValidationConfig)

    dtype = torch.bfloat16 if t.bf16 else torch.float32
    model = GPTModelProvider(
        num_layers=t.num_layers, hidden_size=t.hidden_size, num_attention_heads=t.num_attention_heads,
        ffn_hidden_size=4 * t.hidden_size, seq_length=t.seq_length,
        tensor_model_parallel_size=t.tensor_model_parallel_size,
        pipeline_model_parallel_size=t.pipeline_model_parallel_size, context_parallel_size=t.context_parallel_size,
        transformer_impl=t.transformer_impl,
        transformer_layer_spec=local_layer_spec if t.transformer_impl == "local" else default_layer_spec,
        hidden_dropout=t.hidden_dropout, attention_dropout=t.attention_dropout,
        persist_layer_norm=t.persist_layer_norm, masked_softmax_fusion=t.masked_softmax_fusion,
        bias_dropout_fusion=t.bias_dropout_fusion, bias_activation_fusion=t.bias_activation_fusion,
        gradient_accumulation_fusion=t.gradient_accumulation_fusion,
        bf16=t.bf16, params_dtype=dtype, pipeline_dtype=dtype,
    )
    optimizer = OptimizerConfig(optimizer="adam", lr=t.lr, min_lr=t.min_lr, weight_decay=0.1, bf16=t.bf16,
                                use_distributed_optimizer=t.use_distributed_optimizer, clip_grad=1.0)
    scheduler = SchedulerConfig(lr_decay_style=t.lr_decay_style, lr_warmup_iters=t.lr_warmup_iters,
                                lr_warmup_init=0.0, start_weight_decay=0.1, end_weight_decay=0.1,
                                weight_decay_incr_style="constant")
    return ConfigContainer(
        model=model,
        train=TrainingConfig(train_iters=t.train_iters, global_batch_size=t.global_batch_size,
                             micro_batch_size=t.micro_batch_size),
        validation=ValidationConfig(eval_interval=t.eval_interval or t.train_iters, eval_iters=t.eval_iters),
        optimizer=optimizer,
        scheduler=scheduler,
        ddp=DistributedDataParallelConfig(use_distributed_optimizer=t.use_distributed_optimizer,
                                          grad_reduce_in_fp32=True, check_for_nan_in_grad=True),
        dataset=MockGPTDatasetConfig(seq_length=t.seq_length, random_seed=t.seed, reset_position_ids=False,
                                     reset_attention_mask=False, eod_mask_loss=False, num_dataset_builder_threads=1,
                                     split="9999,8,2", dataloader_type="single", num_workers=t.num_workers),
        logger=LoggerConfig(log_interval=t.log_interval),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=t.vocab_size),
        checkpoint=CheckpointConfig(save_interval=t.save_interval, save=t.save, load=t.load,
                                    ckpt_format=t.ckpt_format, async_save=t.async_save,
                                    async_strategy=t.async_strategy),
        rng=RNGConfig(seed=t.seed),
        dist=DistributedInitConfig(distributed_backend=t.distributed_backend),
        ft=FaultToleranceConfig(enable_ft_package=True) if t.enable_ft_package else None,
        mixed_precision="bf16_mixed" if t.bf16 else None,
    )


def main(argv: Sequence[str] | None = None) -> None:
    settings, notes = parse(sys.argv[1:] if argv is None else argv)
    add_to_path(bridge_dir())
    TeStandIn().install()
    if os.environ.get("RANK", "0") == "0":
        for note in notes:
            print(f"nvrx-qual bridge entrypoint: accepted {note}", flush=True)
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    pretrain(recipe(settings), forward_step)
