"""The CPU reference workload: a small GPT trained data-parallel over gloo that behaves like
Megatron-LM wherever the recovery suite looks (see docs/megatron.md).

- NVRx section API (`setup`, `step`, `checkpointing`) as Megatron's ft_integration uses it,
  including the warmup-iterations rule, so ft_launcher's section timeouts catch a real hang.
- Asynchronous torch.distributed.checkpoint saves into Megatron's layout
  (`iter_%07d/` with `.metadata`, `__<rank>_0.distcp`, `metadata.json`), committed by a later
  iteration or at the end; the tracker file is written only after the save is complete.
- Resume from the tracker's iteration with model *and* optimizer state (`--no-load-optim`
  and `--finetune` skip the optimizer, as in Megatron).
- Megatron's exact log lines for save, load, optimizer load, iterations and the end.
- Bitwise deterministic on CPU: a run resumed from checkpoint K prints, for every iteration
  after K, the same `lm loss` as an uninterrupted run.

Run as a script (ft_launcher runs it, usually through `python -m harness.nemesis ... --`):

    reference.py --train-iters 20 --save CKPT --load CKPT --save-interval 5 --log-interval 1 \
        --async-save --ckpt-format torch_dist --enable-ft-package --ft-num-warmup-iters 0

Importing this module has no side effects beyond importing torch.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn

TRACKER_NAME = "latest_checkpointed_iteration.txt"
COMMIT_MARKER_NAME = "metadata.json"
COMMIT_MARKER = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
CHECKPOINT_VERSION = 3.0
# Megatron's DCP key prefix of a distributed optimizer's flat buffers (docs/megatron.md, "Optimizer state").
OPTIMIZER_KEY_PREFIX = (
    "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0"
)
COMMON_STATE_KEY = "common_state"
# Megatron's DistributedOptimizer keeps its param groups (with Adam's `step`) in this DCP
# object: a pickled sequence of {"param_groups": [...]} (what the optimizer_state check reads).
OPTIMIZER_GROUPS_KEY = "optimizer.distributed.dp_group_idx_0.optimizer"
# What Megatron's load reports as the sharded_state_dict content metadata of such a checkpoint.
CONTENT_METADATA = {
    "distrib_optim_sharding_type": "dp_reshardable",
    "singleton_local_shards": False,
    "chained_optim_avoid_prefix": True,
}
PARALLEL_RANKS = "[ t 1/1, gtp_remat 1/1, p 1/1 ]"
FT_SOCKET_ENV = "FT_RANK_MONITOR_IPC_SOCKET"
FT_SECTIONS = ("setup", "step", "checkpointing")


class UsageError(Exception):
    """Bad command line or environment: one line naming the value and the fix."""


# --------------------------------------------------------------------------- arguments


def build_parser() -> argparse.ArgumentParser:
    """Megatron's flag names and meanings, for the subset this workload implements."""
    p = argparse.ArgumentParser(
        prog="reference.py",
        description="CPU reference workload of the NVRx recovery suite (Megatron-compatible flags).",
        allow_abbrev=False,
    )
    model = p.add_argument_group("model")
    model.add_argument("--num-layers", type=int, default=2)
    model.add_argument("--hidden-size", type=int, default=64)
    model.add_argument("--num-attention-heads", type=int, default=4)
    model.add_argument("--seq-length", type=int, default=32)
    model.add_argument("--max-position-embeddings", type=int, default=None, help="default: --seq-length")
    model.add_argument("--vocab-size", type=int, default=256)

    train = p.add_argument_group("training")
    train.add_argument("--micro-batch-size", type=int, default=1)
    train.add_argument("--global-batch-size", type=int, default=None, help="default: micro batch x world size")
    train.add_argument("--train-iters", type=int, required=True)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--min-lr", type=float, default=0.0)
    # Megatron's default is linear decay over --train-iters; constant keeps the loss of
    # iteration i independent of --train-iters, so runs of different lengths can be compared.
    train.add_argument("--lr-decay-style", choices=("constant", "linear", "cosine"), default="constant")
    train.add_argument("--lr-warmup-iters", type=int, default=0)
    train.add_argument("--lr-decay-iters", type=int, default=None, help="default: --train-iters")
    train.add_argument("--weight-decay", type=float, default=0.01)
    train.add_argument("--clip-grad", type=float, default=1.0)
    train.add_argument("--seed", type=int, default=1234)
    train.add_argument("--eval-iters", type=int, default=0, help="only 0: there is no evaluation")
    train.add_argument("--mock-data", action="store_true", help="accepted: data is always synthetic")
    train.add_argument(
        "--step-time-ms",
        type=float,
        default=100.0,
        help="pad every training step to at least this long inside the FT 'step' section (emulated compute)",
    )

    ckpt = p.add_argument_group("checkpointing")
    ckpt.add_argument("--save", default=None)
    ckpt.add_argument("--load", default=None)
    ckpt.add_argument("--save-interval", type=int, default=None)
    ckpt.add_argument("--no-load-optim", action="store_true")
    ckpt.add_argument(
        "--drop-on-restore",
        choices=("data-position", "optimizer-step"),
        default=None,
        help="a deliberately broken restore, for the suite's negative controls: forget the data position (the "
        "replacement reads the samples from the first again) or Adam's step counter (bias correction restarts, "
        "Megatron 0.19.2's distributed-optimizer defect); every load line is printed as usual",
    )
    ckpt.add_argument("--finetune", action="store_true")
    ckpt.add_argument("--async-save", action="store_true")
    ckpt.add_argument("--use-persistent-ckpt-worker", action="store_true", help="accepted for Megatron parity")
    ckpt.add_argument("--ckpt-format", choices=("torch_dist",), default="torch_dist")
    ckpt.add_argument(
        "--save-delay-ms",
        type=float,
        default=0.0,
        help="hold every save open this long after its .distcp data is written and before its DCP .metadata "
        "(emulated slow storage: a fault can land while the save is in flight); the commit order is unchanged",
    )
    ckpt.add_argument(
        "--use-distributed-optimizer",
        action="store_true",
        help="accepted: optimizer state is always kept in the distributed optimizer's checkpoint layout",
    )

    log = p.add_argument_group("logging")
    log.add_argument("--log-interval", type=int, default=100)

    ft = p.add_argument_group("fault tolerance")
    ft.add_argument("--enable-ft-package", action="store_true")
    ft.add_argument("--ft-num-warmup-iters", type=int, default=5)
    return p


def parse_args(argv: Sequence[str], world_size: int, rank: int = 0) -> argparse.Namespace:
    """Parse and validate; raises UsageError on anything this workload cannot honour."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(list(argv))
    if unknown:
        raise UsageError(
            f"unsupported argument(s) {' '.join(unknown)}: the CPU reference workload implements only "
            "the Megatron flags listed by --help; drop them, or run them with the megatron workload"
        )
    args.use_distributed_optimizer = True  # what the checkpoint layout and the load lines emulate
    args.world_size = world_size
    args.rank = rank
    args.data_parallel_size = world_size
    args.tensor_model_parallel_size = 1
    args.pipeline_model_parallel_size = 1
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * world_size
    if args.lr_decay_iters is None:
        args.lr_decay_iters = args.train_iters
    _validate(args)
    return args


def _validate(args: argparse.Namespace) -> None:
    positive = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size",
                "micro_batch_size", "global_batch_size", "train_iters", "log_interval")
    for name in positive:
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} must be > 0")
    if args.save_interval is not None and args.save_interval <= 0:
        raise UsageError(f"--save-interval {args.save_interval} must be > 0 (or omit it: save only at the end)")
    if args.hidden_size % args.num_attention_heads:
        raise UsageError(
            f"--hidden-size {args.hidden_size} is not divisible by --num-attention-heads "
            f"{args.num_attention_heads}; pick a head count that divides it"
        )
    if args.max_position_embeddings < args.seq_length:
        raise UsageError(
            f"--max-position-embeddings {args.max_position_embeddings} is below --seq-length "
            f"{args.seq_length}; raise it to at least {args.seq_length}"
        )
    per_step = args.micro_batch_size * args.data_parallel_size
    if args.global_batch_size % per_step:
        raise UsageError(
            f"--global-batch-size {args.global_batch_size} is not a multiple of micro batch size x "
            f"data-parallel size = {per_step}; pass a multiple of {per_step}"
        )
    if args.eval_iters != 0:
        raise UsageError(f"--eval-iters {args.eval_iters}: the reference workload has no evaluation; pass 0")
    for name in ("ft_num_warmup_iters", "lr_warmup_iters", "step_time_ms", "save_delay_ms"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 0")
    if args.lr_decay_iters <= args.lr_warmup_iters and args.lr_decay_style != "constant":
        raise UsageError(
            f"--lr-decay-iters {args.lr_decay_iters} must exceed --lr-warmup-iters {args.lr_warmup_iters}"
        )
    if args.enable_ft_package and not args.save:
        raise UsageError("--enable-ft-package needs --save DIR (Megatron requires a checkpoint dir for FT)")


def format_args_table(args: argparse.Namespace) -> list[str]:
    """Megatron's `_print_args`: every argument, sorted case-insensitively, dot-padded to 48."""
    rows = ["  {} {} {}".format(name, "." * (48 - len(name)), value) for name, value in vars(args).items()]
    return [
        "------------------------ arguments ------------------------",
        *sorted(rows, key=lambda row: row.lower()),
        "-------------------- end of arguments ---------------------",
    ]


# --------------------------------------------------------------------------- log lines


def _now_us() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")


def _now_s() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def iteration_line(
    *,
    iteration: int,
    train_iters: int,
    consumed_samples: int,
    elapsed_ms: float,
    learning_rate: float,
    global_batch_size: int,
    lm_loss: float,
    grad_norm: float,
    nan_iterations: int,
) -> str:
    """Megatron's training_log line (docs/megatron.md, "Iteration lines"), printed by the last rank."""
    return (
        f" [{_now_us()}]"
        + " iteration {:8d}/{:8d} |".format(iteration, train_iters)
        + " consumed samples: {:12d} |".format(consumed_samples)
        + " elapsed time per iteration (ms): {:.1f} |".format(elapsed_ms)
        + f" learning rate: {learning_rate:.6E} |"
        + " global batch size: {:5d} |".format(global_batch_size)
        + " lm loss: {:.6E} |".format(lm_loss)
        + " loss scale: {:.1f} |".format(1.0)
        + " grad norm: {:.3f} |".format(grad_norm)
        + " number of skipped iterations: {:3d} |".format(0)
        + " number of nan iterations: {:3d} |".format(nan_iterations)
    )


class Console:
    """Megatron's print_rank_0 / print_rank_last / print_datetime, always flushed so a killed
    process loses no line."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    def rank0(self, message: str) -> None:
        if self.rank == 0:
            print(message, flush=True)

    def last(self, message: str) -> None:
        if self.rank == self.world_size - 1:
            print(message, flush=True)

    def datetime(self, what: str) -> None:
        dist.barrier()
        self.rank0(f"[{what}] datetime: {_now_s()} ")


# --------------------------------------------------------------------------- fault tolerance


class FaultTolerance:
    """Megatron's ft_integration in miniature: `setup` from init to the first step, `step`
    around each step after the warmup steps of this process, `checkpointing` around saves and
    async finalization. A no-op when the client is None (--enable-ft-package absent)."""

    def __init__(self, client: object | None, num_warmup_iters: int) -> None:
        self._client = client
        self._num_warmup_iters = num_warmup_iters
        self._setup_open = client is not None
        self._steps_seen = 0

    @classmethod
    def start(cls, args: argparse.Namespace, rank: int, console: Console) -> "FaultTolerance":
        if not args.enable_ft_package:
            return cls(None, args.ft_num_warmup_iters)
        if not os.environ.get(FT_SOCKET_ENV):
            raise UsageError(
                f"--enable-ft-package but {FT_SOCKET_ENV} is not set: this process was not started by "
                "ft_launcher; launch it with ft_launcher or drop --enable-ft-package"
            )
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

        console.rank0("FT: initializing...")
        Path(args.save).mkdir(parents=True, exist_ok=True)
        client = RankMonitorClient()
        # NVRx >= 0.6 takes the warmup count; 0.4.1 has no such parameter.
        if "num_warmup_iters" in inspect.signature(client.init_workload_monitoring).parameters:
            client.init_workload_monitoring(num_warmup_iters=args.ft_num_warmup_iters)
        else:
            client.init_workload_monitoring()
        console.rank0(f"FT: initialized. Timeouts={client.section_timeouts}")
        client.start_section("setup")
        return cls(client, args.ft_num_warmup_iters)

    def on_step_start(self) -> None:
        if self._client is None:
            return
        if self._setup_open:
            self._client.end_section("setup")
            self._setup_open = False
        if self._steps_seen >= self._num_warmup_iters:
            self._client.start_section("step")

    def on_step_end(self) -> None:
        if self._client is None:
            return
        if self._steps_seen >= self._num_warmup_iters:
            self._client.end_section("step")
        self._steps_seen += 1

    @contextlib.contextmanager
    def checkpointing(self) -> Iterator[None]:
        if self._client is not None:
            self._client.start_section("checkpointing")
        yield
        if self._client is not None:
            self._client.end_section("checkpointing")

    def shutdown(self, console: Console) -> None:
        if self._client is None:
            return
        console.rank0("FT: closing...")
        self._client.shutdown_workload_monitoring()
        console.rank0("FT: closed.")
        self._client = None


# --------------------------------------------------------------------------- model and data


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.linear_qkv = nn.Linear(hidden, 3 * hidden)
        self.linear_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.linear_qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
        return self.linear_proj((probs @ v).transpose(1, 2).reshape(b, s, h))


class Mlp(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(hidden, 4 * hidden)
        self.linear_fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden)
        self.self_attention = SelfAttention(hidden, heads)
        self.pre_mlp_layernorm = nn.LayerNorm(hidden)
        self.mlp = Mlp(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attention(self.input_layernorm(x))
        return x + self.mlp(self.pre_mlp_layernorm(x))


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, positions: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(positions, hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings(tokens) + self.position_embeddings(torch.arange(tokens.shape[1]))


class Decoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(hidden, heads) for _ in range(layers))
        self.final_layernorm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final_layernorm(x)


class TinyGPT(nn.Module):
    """Pre-LN GPT decoder; submodule names follow Megatron's so checkpoint keys read alike
    (`embedding.word_embeddings.weight`, `decoder.layers.0.self_attention.linear_qkv.weight`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.embedding = Embedding(args.vocab_size, args.hidden_size, args.max_position_embeddings)
        self.decoder = Decoder(args.num_layers, args.hidden_size, args.num_attention_heads)
        self.output_layer = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.output_layer(self.decoder(self.embedding(tokens)))


def synthetic_sample(seed: int, sample_index: int, seq_length: int, vocab_size: int) -> torch.Tensor:
    """seq_length+1 tokens of global sample `sample_index`: an arithmetic progression mod vocab
    with a per-sample start and stride. A pure function of its arguments, so a resumed run
    sees exactly the data an uninterrupted one does; learnable, so the loss (and Adam's state)
    matters."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + sample_index) % (2**63))
    start = torch.randint(vocab_size, (1,), generator=generator)
    stride = torch.randint(1, 8, (1,), generator=generator)
    return (start + stride * torch.arange(seq_length + 1)) % vocab_size


def micro_batch(args: argparse.Namespace, consumed: int, micro: int, rank: int) -> torch.Tensor:
    """[micro_batch_size, seq_length+1] tokens of one rank's micro-batch within one global batch."""
    first = consumed + micro * args.micro_batch_size * args.data_parallel_size + rank * args.micro_batch_size
    return torch.stack(
        [synthetic_sample(args.seed, first + j, args.seq_length, args.vocab_size) for j in range(args.micro_batch_size)]
    )


def learning_rate(args: argparse.Namespace, steps_done: int) -> float:
    """Megatron's OptimizerParamScheduler.get_lr, counted in iterations (warmup, then decay)."""
    if args.lr_warmup_iters > 0 and steps_done <= args.lr_warmup_iters:
        return args.lr * steps_done / args.lr_warmup_iters
    if args.lr_decay_style == "constant":
        return args.lr
    if steps_done > args.lr_decay_iters:
        return args.min_lr
    ratio = (steps_done - args.lr_warmup_iters) / (args.lr_decay_iters - args.lr_warmup_iters)
    coeff = 1.0 - ratio if args.lr_decay_style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return args.min_lr + coeff * (args.lr - args.min_lr)


# --------------------------------------------------------------------------- training step


@dataclass(frozen=True)
class StepResult:
    lm_loss: float
    grad_norm: float
    learning_rate: float


def train_step(
    args: argparse.Namespace, model: TinyGPT, optimizer: torch.optim.Optimizer, consumed: int, steps_done: int
) -> StepResult:
    """One global batch: local micro-batches, gradients averaged over all ranks, clip, AdamW."""
    lr = learning_rate(args, steps_done)
    for group in optimizer.param_groups:
        group["lr"] = lr
    params = list(model.parameters())
    optimizer.zero_grad(set_to_none=False)
    num_micro = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
    local_loss = torch.zeros(())
    for micro in range(num_micro):
        tokens = micro_batch(args, consumed, micro, args.rank)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab_size), tokens[:, 1:].reshape(-1)) / num_micro
        loss.backward()
        local_loss += loss.detach()
    # One all-reduce for all gradients and the loss: every rank ends with identical values.
    flat = torch.cat([p.grad.reshape(-1) for p in params] + [local_loss.reshape(1)])
    dist.all_reduce(flat)
    flat /= args.data_parallel_size
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()
    grad_norm = nn.utils.clip_grad_norm_(params, args.clip_grad, foreach=False)
    optimizer.step()
    return StepResult(lm_loss=float(flat[-1]), grad_norm=float(grad_norm), learning_rate=lr)


def make_optimizer(args: argparse.Namespace, model: TinyGPT) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        model.parameters(), lr=args.lr, weight_decay=args.weight_decay, foreach=False, fused=False
    )


# --------------------------------------------------------------------------- checkpoint state


def optimizer_tensors(model: TinyGPT, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Adam state as Megatron's distributed optimizer stores it: flat fp32 buffers over all
    parameters, keys `optimizer.distributed....{param,exp_avg,exp_avg_sq}`."""
    params = list(model.parameters())

    def flat(key: str) -> torch.Tensor:
        return torch.cat(
            [
                optimizer.state[p][key].reshape(-1) if key in optimizer.state[p] else torch.zeros(p.numel())
                for p in params
            ]
        )

    return {
        f"{OPTIMIZER_KEY_PREFIX}.param": torch.cat([p.detach().reshape(-1) for p in params]),
        f"{OPTIMIZER_KEY_PREFIX}.exp_avg": flat("exp_avg"),
        f"{OPTIMIZER_KEY_PREFIX}.exp_avg_sq": flat("exp_avg_sq"),
    }


def optimizer_step_count(model: TinyGPT, optimizer: torch.optim.Optimizer) -> int:
    state = optimizer.state[next(model.parameters())]
    return int(state["step"]) if "step" in state else 0


def restore_optimizer(
    model: TinyGPT, optimizer: torch.optim.Optimizer, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int
) -> None:
    offset = 0
    for p in model.parameters():
        n = p.numel()
        optimizer.state[p] = {
            "step": torch.tensor(float(step), dtype=torch.float32),
            "exp_avg": exp_avg[offset : offset + n].view_as(p).clone(),
            "exp_avg_sq": exp_avg_sq[offset : offset + n].view_as(p).clone(),
        }
        offset += n


def scheduler_state(args: argparse.Namespace, iteration: int) -> dict[str, object]:
    return {
        "max_lr": args.lr,
        "min_lr": args.min_lr,
        "lr_warmup_steps": args.lr_warmup_iters * args.global_batch_size,
        "lr_decay_steps": args.lr_decay_iters * args.global_batch_size,
        "lr_decay_style": args.lr_decay_style,
        "num_steps": iteration * args.global_batch_size,
    }


def checkpoint_state(
    args: argparse.Namespace, model: TinyGPT, optimizer: torch.optim.Optimizer, iteration: int, consumed: int
) -> dict[str, object]:
    """A private copy (cloned tensors) of everything a resume needs: training may go on
    while a background thread writes it."""
    common = {
        "iteration": iteration,
        "consumed_train_samples": consumed,
        "checkpoint_version": CHECKPOINT_VERSION,
        "optimizer_step": optimizer_step_count(model, optimizer),
        "opt_param_scheduler": scheduler_state(args, iteration),
        "content_metadata": CONTENT_METADATA,
        "world_size": args.world_size,
        "seed": args.seed,
    }
    state: dict[str, object] = {name: t.detach().clone() for name, t in model.state_dict().items()}
    state.update({k: v.clone() for k, v in optimizer_tensors(model, optimizer).items()})
    # A string leaf keeps the non-tensor state in one DCP key, as Megatron 0.19's `common_state`.
    state[COMMON_STATE_KEY] = json.dumps(common, sort_keys=True)
    # A tuple is a leaf to DCP (a list of dicts would be flattened into keys): one pickled object.
    state[OPTIMIZER_GROUPS_KEY] = ({"param_groups": [{"lr": group["lr"], "step": float(common["optimizer_step"])}
                                                     for group in optimizer.param_groups]},)
    return state


def checkpoint_dir(root: str | Path, iteration: int) -> Path:
    return Path(root) / f"iter_{iteration:07d}"


def _write_atomically(path: Path, text: str) -> None:
    """Readers see the old content or the new, never a torn one. The temporary has an
    unpredictable name created with O_EXCL (mkstemp), so a link planted in the checkpoint
    directory is never written through."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- save


class SlowFileSystemWriter(dcp.FileSystemWriter):
    """DCP's file writer with slow storage emulated: `finish` (the coordinator writing the global
    `.metadata`, which every rank's save waits for) starts `delay_s` after the data files are
    written. Nothing else changes: `.metadata`, then metadata.json, then the tracker."""

    def __init__(self, path: str, delay_s: float) -> None:
        super().__init__(path)
        self._delay_s = delay_s

    def finish(self, metadata, results) -> None:  # type: ignore[no-untyped-def]
        time.sleep(self._delay_s)
        return super().finish(metadata, results)


def _storage_writer(args: argparse.Namespace, target: Path) -> dcp.FileSystemWriter | None:
    return SlowFileSystemWriter(str(target), args.save_delay_ms / 1000.0) if args.save_delay_ms > 0 else None


@dataclass(frozen=True)
class PendingSave:
    iteration: int
    future: Future


class Checkpointer:
    """Saves like Megatron's torch_dist + async path: all ranks write their DCP shard in a
    background thread; the save is committed (metadata.json, then tracker, then the
    `successfully saved` line, all by rank 0) only when every rank has finished."""

    def __init__(self, args: argparse.Namespace, console: Console, group: dist.ProcessGroup) -> None:
        self.args = args
        self.console = console
        self.group = group  # a gloo group of its own: the writer thread's collectives never meet the training ones
        self.pending: PendingSave | None = None

    def save(self, iteration: int, state: dict[str, object]) -> None:
        if self.pending is not None:
            self.console.rank0(
                "WARNING: Starting a checkpoint save before previous has finished. "
                "Consider increasing the checkpoint interval."
            )
            self.finalize(blocking=True)
        save_dir = self.args.save
        target = checkpoint_dir(save_dir, iteration)
        self.console.rank0(
            f"[{_now_us()}] saving checkpoint at iteration {iteration:7d} to {save_dir} in {self.args.ckpt_format} format"
        )
        if self.console.rank == 0:
            self._prepare_dir(target)
        # Other ranks write only after the plan exchange with rank 0, so after the cleanup above.
        target.mkdir(parents=True, exist_ok=True)
        if self.args.async_save:
            response = dcp.async_save(state, checkpoint_id=str(target), process_group=self.group,
                                      storage_writer=_storage_writer(self.args, target))
            future = getattr(response, "upload_completion", response)
            self.pending = PendingSave(iteration, future)
            self.console.rank0(
                f"  [{_now_us()}] scheduled an async checkpoint save at iteration {iteration:7d} to {save_dir}"
            )
        else:
            dcp.save(state, checkpoint_id=str(target), process_group=self.group,
                     storage_writer=_storage_writer(self.args, target))
            done: Future = Future()
            done.set_result(None)
            self.pending = PendingSave(iteration, done)
            self.finalize(blocking=True)

    def _prepare_dir(self, target: Path) -> None:
        """An earlier save of this iteration left files (a fault mid-save): say so, as Megatron's
        dist_checkpointing does, and clear them so a stale metadata.json cannot mark the new,
        unfinished save as complete."""
        if not target.is_dir() or next(target.iterdir(), None) is None:
            return
        self.console.rank0(
            "WARNING:megatron.core.dist_checkpointing.serialization:Overwriting old incomplete / corrupted checkpoint..."
        )
        for entry in target.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def finalize(self, blocking: bool) -> None:
        """Commit the pending save if every rank's writer is done (or wait for it when blocking).
        Collective: every rank calls it at the same points."""
        pending = self.pending
        if pending is None:
            return
        if not blocking:
            done = torch.tensor([1 if pending.future.done() else 0])
            dist.all_reduce(done, op=dist.ReduceOp.MIN)
            if not int(done):
                return
        pending.future.result()  # re-raises a writer's failure here, with its traceback
        self.pending = None
        if self.console.rank != 0:
            return
        save_dir = Path(self.args.save)
        _write_atomically(checkpoint_dir(save_dir, pending.iteration) / COMMIT_MARKER_NAME, json.dumps(COMMIT_MARKER))
        _write_atomically(save_dir / TRACKER_NAME, str(pending.iteration))
        self.console.rank0(
            f"  [{_now_us()}] successfully saved checkpoint from iteration {pending.iteration:7d} "
            f"to {self.args.save} {PARALLEL_RANKS}"
        )


# --------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Progress:
    iteration: int
    consumed_samples: int


class InvalidTracker(Exception):
    """Megatron prints `ERROR: Invalid metadata file ... Exiting` and exits 0 on this."""


def read_tracker(load_dir: Path) -> int | None:
    tracker = load_dir / TRACKER_NAME
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    try:
        iteration = int(text)
    except ValueError:
        if text == "release":
            raise UsageError(f"{tracker} says 'release': the reference workload has no release checkpoints")
        raise InvalidTracker(str(tracker)) from None
    if iteration <= 0:
        raise AssertionError(f"error parsing metadata file {tracker}")
    return iteration


def load_checkpoint(
    args: argparse.Namespace, model: TinyGPT, optimizer: torch.optim.Optimizer, console: Console
) -> Progress:
    """Megatron's load_checkpoint for a torch_dist checkpoint, with its log lines in order."""
    if not args.load:
        return Progress(0, 0)
    load_dir = Path(args.load)
    iteration = read_tracker(load_dir)
    if iteration is None:
        console.rank0(f"WARNING: could not find the metadata file {load_dir / TRACKER_NAME} ")
        console.rank0("    will not load any checkpoints and will start from random")
        return Progress(0, 0)
    console.rank0(f" loading distributed checkpoint from {args.load} at iteration {iteration}")
    load_optim = not (args.no_load_optim or args.finetune)
    numel = sum(p.numel() for p in model.parameters())
    state: dict[str, object] = dict(model.state_dict())  # loaded in place into the parameters
    state[COMMON_STATE_KEY] = ""
    if load_optim:
        state[f"{OPTIMIZER_KEY_PREFIX}.exp_avg"] = torch.zeros(numel)
        state[f"{OPTIMIZER_KEY_PREFIX}.exp_avg_sq"] = torch.zeros(numel)
    dcp.load(state, checkpoint_id=str(checkpoint_dir(load_dir, iteration)))
    common = json.loads(state[COMMON_STATE_KEY])
    console.rank0(f"sharded_state_dict metadata loaded from the checkpoint: {common['content_metadata']}")
    console.rank0(f" checkpoint version {common['checkpoint_version']}")
    if load_optim:
        console.rank0(
            "INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type "
            + common["content_metadata"]["distrib_optim_sharding_type"]
        )
        restore_optimizer(
            model,
            optimizer,
            state[f"{OPTIMIZER_KEY_PREFIX}.exp_avg"],
            state[f"{OPTIMIZER_KEY_PREFIX}.exp_avg_sq"],
            0 if args.drop_on_restore == "optimizer-step" else common["optimizer_step"],
        )
        checkpoint_lr = common["opt_param_scheduler"]["max_lr"]
        if checkpoint_lr != args.lr:
            raise AssertionError(
                f"OptimizerParamScheduler: class input value {args.lr} and checkpoint value "
                f"{checkpoint_lr} for learning rate do not match"
            )
        console.rank0(
            f"INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value {checkpoint_lr} for learning rate"
        )
    console.rank0(f"  successfully loaded checkpoint from {args.load} {PARALLEL_RANKS} at iteration {iteration}")
    if args.finetune:
        return Progress(0, 0)
    if args.drop_on_restore == "data-position":
        return Progress(iteration, 0)
    return Progress(iteration, common["consumed_train_samples"])


# --------------------------------------------------------------------------- training loop


class LogWindow:
    """Megatron averages the loss over the iterations since the last printed line."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started = time.monotonic()
        self.iterations = 0
        self.loss_sum = 0.0
        self.nan_iterations = 0

    def add(self, loss: float) -> None:
        self.iterations += 1
        if math.isnan(loss):
            self.nan_iterations += 1
        else:
            self.loss_sum += loss


def train(
    args: argparse.Namespace,
    model: TinyGPT,
    optimizer: torch.optim.Optimizer,
    start: Progress,
    ft: FaultTolerance,
    checkpointer: Checkpointer,
    console: Console,
) -> Progress:
    iteration, consumed = start.iteration, start.consumed_samples
    window = LogWindow()
    step_time_s = args.step_time_ms / 1000.0
    while iteration < args.train_iters:
        if checkpointer.pending is not None:
            with ft.checkpointing():
                checkpointer.finalize(blocking=False)
        ft.on_step_start()
        began = time.monotonic()
        result = train_step(args, model, optimizer, consumed, iteration)
        # Emulated compute, inside `step`: a fault lands mid-training, a SIGSTOP inside `step`.
        time.sleep(max(0.0, step_time_s - (time.monotonic() - began)))
        ft.on_step_end()
        iteration += 1
        consumed += args.global_batch_size
        window.add(result.lm_loss)
        if iteration % args.log_interval == 0 or iteration == start.iteration + 1:
            advanced = max(1, window.iterations - window.nan_iterations)
            console.last(
                iteration_line(
                    iteration=iteration,
                    train_iters=args.train_iters,
                    consumed_samples=consumed,
                    elapsed_ms=(time.monotonic() - window.started) * 1000.0 / window.iterations,
                    learning_rate=result.learning_rate,
                    global_batch_size=args.global_batch_size,
                    lm_loss=window.loss_sum / advanced,
                    grad_norm=result.grad_norm,
                    nan_iterations=window.nan_iterations,
                )
            )
            window.reset()
        if args.save and args.save_interval and iteration % args.save_interval == 0:
            with ft.checkpointing():
                checkpointer.save(iteration, checkpoint_state(args, model, optimizer, iteration, consumed))
    with ft.checkpointing():
        checkpointer.finalize(blocking=True)
    return Progress(iteration, consumed)


def _world_from_env() -> tuple[int, int]:
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise UsageError(f"RANK/WORLD_SIZE must be integers ({exc}); launch with ft_launcher or torchrun") from None


def _init_process_group(rank: int, world_size: int) -> None:
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    elif world_size == 1:  # started directly, without a launcher: a one-process group
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        raise UsageError(f"WORLD_SIZE={world_size} but MASTER_ADDR is not set; launch with ft_launcher or torchrun")


def run(argv: Sequence[str]) -> int:
    rank, world_size = _world_from_env()
    args = parse_args(argv, world_size, rank)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    console = Console(rank, world_size)
    ft = FaultTolerance.start(args, rank, console)
    _init_process_group(rank, world_size)
    checkpoint_group = dist.new_group(backend="gloo")
    for line in format_args_table(args):
        console.rank0(line)

    torch.manual_seed(args.seed)  # identical initial parameters on every rank
    model = TinyGPT(args)
    optimizer = make_optimizer(args, model)
    try:
        start = load_checkpoint(args, model, optimizer, console)
    except InvalidTracker as exc:
        # Megatron's behaviour, kept on purpose: the suite must not trust the exit status.
        console.rank0(f"ERROR: Invalid metadata file {exc}. Exiting")
        return 0
    console.datetime("after model, optimizer, and learning rate scheduler are built")
    console.datetime("before the start of training step")

    checkpointer = Checkpointer(args, console, checkpoint_group)
    end = train(args, model, optimizer, start, ft, checkpointer, console)
    console.datetime("after training is done")
    saved_in_loop = args.save_interval is not None and end.iteration % args.save_interval == 0
    if args.save and end.iteration > start.iteration and not saved_in_loop:
        # Megatron's final save when train_iters is not a multiple of the save interval.
        with ft.checkpointing():
            state = checkpoint_state(args, model, optimizer, end.iteration, end.consumed_samples)
            checkpointer.save(end.iteration, state)
        with ft.checkpointing():
            checkpointer.finalize(blocking=True)
    ft.shutdown(console)
    dist.destroy_process_group()
    return 0


def _writer_threads_alive() -> bool:
    return any(t.is_alive() and t is not threading.main_thread() and not t.daemon for t in threading.enumerate())


def _crash_hook(kind: type[BaseException], exc: BaseException, tb) -> None:
    """An uncaught error of the training process: its traceback goes to the log (where a
    triage finds it) and the process exits 1, as Megatron's would."""
    traceback.print_exception(kind, exc, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    if _writer_threads_alive():
        # A checkpoint writer blocked on a dead peer would keep the interpreter from exiting.
        os._exit(1)


def main(argv: Sequence[str] | None = None) -> int:
    sys.excepthook = _crash_hook
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"reference workload: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    # Run as a file, Python puts this directory first on sys.path, where a sibling module
    # (workloads/megatron.py) would shadow the real `megatron` package for anything importing it.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.exit(main())
