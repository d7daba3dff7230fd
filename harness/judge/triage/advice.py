"""Advice: what to do about a triage's category, and the parallel-shape arithmetic."""

from __future__ import annotations

import signal

from harness.vocab.layout import MARKER_NAME
from harness.judge.triage.model import HANG, ParallelConfig
from harness.judge.triage.scan import _Event, _Traceback


# ============================================================================ advice


def _advice(category: str, rank: int | None, config: ParallelConfig, item: object | None, injected: bool) -> str:
    who = f"rank {rank}" if rank is not None else "the failing rank"
    if category == "oom":
        return (
            f"Out of memory on {who}: record the rank, phase, micro/global batch size, sequence length, "
            f"TP/DP/CP/PP ({config.describe()}) and the memory numbers above before changing anything; then "
            "lower the micro batch size or sequence length, raise TP/PP/CP, or enable activation recomputation "
            "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when much memory is reserved but unallocated)."
        )
    if category == "shape":
        return "Shape / divisibility error: " + _shape_check(config)
    if category == "import":
        return (
            "Import error: the wrong worktree, a missing `uv sync` (run `uv sync --extra training --extra dev` "
            "in the Megatron-LM worktree before submitting) or a stale PYTHONPATH; confirm the job does "
            "`cd <MEGATRON_WORKTREE>` before launch and that every node sees the same path."
        )
    if category == "collective" and config.backend == "gloo":
        return (
            "gloo failure without another Python traceback: a gloo 'Connection reset' or 'Connection closed by "
            "peer' means a peer process died or was stopped first; find that rank in the other logs. Otherwise "
            "check that MASTER_PORT is reachable from every node, that MASTER_ADDR resolves to the same host "
            "everywhere, and that every rank runs the identical command."
        )
    if category == "collective":
        return (
            "NCCL failure without a non-NCCL Python traceback: check the allocation (every node and GPU present), "
            "that MASTER_PORT is reachable from every node, that MASTER_ADDR resolves to the same host everywhere, "
            "and that every rank runs the identical command."
        )
    if category == "exit":
        base = (
            f"{who[0].upper()}{who[1:]} died without a Python traceback: look for the kernel OOM killer "
            "(dmesg, slurmstepd oom_kill), a node or GPU fault (Xid in dmesg), or a signal from outside; "
            "NCCL timeouts on the other ranks that follow are downstream."
        )
        stopped = isinstance(item, _Event) and (
            "cancelled" in item.what or item.exitcode in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP))
        if isinstance(item, _Traceback) or stopped:
            return (
                "The job was stopped from outside (scancel, the Slurm time limit, or a launcher tearing the "
                "workers down after a failure that left no other trace in these logs): check the scheduler's "
                "accounting (sacct -j JOBID) and the launcher log."
            )
        if injected:  # the harness's own SIGKILL: no hardware, OOM killer or outside signal to look for
            return (
                f"This is the fault the harness injected ({MARKER_NAME}); whether training recovered is what "
                "`nvrx-qual verify` decides: see its criteria, not this rank's death."
            )
        return base
    if category == HANG:
        base = (
            "A rank stopped making progress and no rank crashed: find the stuck rank (py-spy dump --pid on "
            "each rank, the last log line of each rank, NCCL's flight recorder) before raising the section "
            "timeouts; a collective waiting on a dead or stopped peer is the usual cause."
        )
        if injected:  # the harness's own SIGSTOP: nothing to find
            return (f"This is the hang the harness injected ({MARKER_NAME}, SIGSTOP), detected by the rank monitor; "
                    "whether training recovered is what `nvrx-qual verify` decides.")
        return base
    if category == "traceback":
        exception = item.exception if isinstance(item, _Traceback) else None
        b = config.backend
        text = (
            f"Start from this traceback on {who}: it is the first non-{b} error; {b} errors and timeouts on "
            "other ranks after it are downstream symptoms."
        )
        if exception and "CUDA_DEVICE_MAX_CONNECTIONS" in exception:
            text += (
                " CUDA_DEVICE_MAX_CONNECTIONS: set it to 1 on pre-Blackwell GPUs with TP>1 or CP>1 (non-FSDP), "
                "leave it unset or above 1 with Torch-FSDP2 / Megatron-FSDP, 32 with "
                "overlap_moe_expert_parallel_comm."
            )
        return text
    return "Nothing to triage: no traceback, NCCL error, rank exit or rank monitor timeout in the logs."


def _shape_check(config: ParallelConfig) -> str:
    tp, pp = config.tensor_model_parallel_size, config.pipeline_model_parallel_size
    cp, dp, world = config.context_parallel_size, config.data_parallel_size, config.world_size
    heads = config.num_attention_heads
    text = "check WORLD_SIZE = TP × DP × CP × PP and num_attention_heads % TP == 0"
    facts = []
    if world is not None and tp and pp:
        model = tp * pp * (cp or 1)
        if dp:
            verdict = "holds" if world == model * dp else "does NOT hold"
            product = f"TP {tp} × DP {dp} × CP {cp or 1} × PP {pp} = {model * dp}"
            facts.append(f"WORLD_SIZE {world} vs {product}: {verdict}")
        else:
            verdict = "divisible" if world % model == 0 else "NOT divisible"
            facts.append(f"WORLD_SIZE {world} by TP × CP × PP = {model}: {verdict}")
    if heads is not None and tp:
        facts.append(f"num_attention_heads {heads} % TP {tp} = {heads % tp}" + (" (must be 0)" if heads % tp else ""))
    if config.global_batch_size and config.micro_batch_size and dp:
        rem = config.global_batch_size % (config.micro_batch_size * dp)
        if rem:
            facts.append(
                f"global batch {config.global_batch_size} % (micro batch {config.micro_batch_size} × DP {dp}) "
                f"= {rem} (must be 0)"
            )
    if config.num_layers and pp and config.num_layers % pp:
        facts.append(f"num_layers {config.num_layers} % PP {pp} = {config.num_layers % pp} (must be 0)")
    return text + (" (" + "; ".join(facts) + ")." if facts else ".")
