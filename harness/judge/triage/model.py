"""The values a triage returns (Triage, Symptom, ParallelConfig, OomMemory) and its vocabulary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence



# A rank monitor's timeout fired and no rank crashed: triage's own category, not the fault kind of
# the same name (harness.vocab.faults), which a triage reads from the marker's row instead.
HANG = "hang"
CATEGORIES = ("oom", "shape", "import", "collective", "traceback", "exit", HANG, "none")
ROOT_TRACEBACK_KINDS = ("oom", "shape", "import", "traceback")



# ============================================================================ public values


@dataclass(frozen=True)
class ParallelConfig:
    """The shape of the job, from Megatron's arguments table (or run.json as a fallback)."""

    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_length: int | None = None
    tensor_model_parallel_size: int | None = None
    pipeline_model_parallel_size: int | None = None
    context_parallel_size: int | None = None
    data_parallel_size: int | None = None
    world_size: int | None = None
    num_attention_heads: int | None = None
    num_layers: int | None = None
    source: str | None = None  # where the values were read, "file:line" or "run.json"
    backend: str = "NCCL"  # the collective backend the run used ("gloo" on CPU), from the run's own facts

    def describe(self) -> str:
        parts = [
            (label, value)
            for label, value in (
                ("micro batch", self.micro_batch_size),
                ("global batch", self.global_batch_size),
                ("seq", self.seq_length),
                ("TP", self.tensor_model_parallel_size),
                ("PP", self.pipeline_model_parallel_size),
                ("CP", self.context_parallel_size),
                ("DP", self.data_parallel_size),
                ("world", self.world_size),
                ("heads", self.num_attention_heads),
                ("layers", self.num_layers),
            )
            if value is not None
        ]
        return ", ".join(f"{label} {value}" for label, value in parts) if parts else "unknown"


@dataclass(frozen=True)
class OomMemory:
    """The numbers of a CUDA OOM message, as printed (units kept), before any adjustment."""

    tried_to_allocate: str | None = None
    gpu: int | None = None
    total_capacity: str | None = None
    free: str | None = None
    process_in_use: str | None = None
    allocated_by_pytorch: str | None = None
    reserved_unallocated: str | None = None
    reserved_total: str | None = None
    peak: str | None = None  # Megatron's last memory report of that rank (max allocated/reserved)

    def describe(self) -> str:
        parts = []
        if self.tried_to_allocate:
            parts.append(f"tried to allocate {self.tried_to_allocate}")
        if self.total_capacity:
            gpu = f"GPU {self.gpu}" if self.gpu is not None else "GPU"
            free = f", {self.free} free" if self.free else ""
            parts.append(f"{gpu} capacity {self.total_capacity}{free}")
        if self.process_in_use:
            parts.append(f"process in use {self.process_in_use}")
        if self.allocated_by_pytorch:
            parts.append(f"allocated by PyTorch {self.allocated_by_pytorch}")
        if self.reserved_unallocated:
            parts.append(f"reserved but unallocated {self.reserved_unallocated}")
        if self.reserved_total:
            parts.append(f"reserved in total {self.reserved_total}")
        if self.peak:
            parts.append(f"peak {self.peak}")
        return "; ".join(parts) if parts else "not printed"


@dataclass(frozen=True)
class Symptom:
    """A failure on another rank than the root cause's: usually downstream of it."""

    rank: int | None
    local_rank: int | None
    kind: str  # collective | hang | exit | teardown | oom | shape | import | traceback
    what: str
    evidence: str  # "relative/file:lineno: text" of its first line

    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.local_rank is not None:
            return f"local rank {self.local_rank}"
        return "unattributed"


@dataclass(frozen=True)
class Triage:
    run_dir: str
    category: str  # one of CATEGORIES
    summary: str  # one sentence
    rank: int | None = None
    local_rank: int | None = None
    cycle: int | None = None
    phase: str | None = None  # OOM only: forward | backward | optimizer
    exception: str | None = None
    location: str | None = None  # innermost frame "path:line in function"
    excerpt: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    config: ParallelConfig = field(default_factory=ParallelConfig)
    memory: OomMemory | None = None
    advice: str = ""
    injected: bool = False  # the root cause is the fault the harness injected (fault_injected.json)
    symptoms: tuple[Symptom, ...] = ()
    files_scanned: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.category != "none"

    def to_json(self) -> dict:
        out = asdict(self)
        out["failed"] = self.failed
        return out

# ============================================================================ text helpers

def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _rank_ranges(ranks: Sequence[int]) -> str:
    ranks = sorted(set(ranks))
    out: list[str] = []
    start = prev = None
    for r in ranks + [None]:  # type: ignore[operator]
        if start is None:
            start = prev = r
        elif r is not None and r == prev + 1:
            prev = r
        else:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = r
    return ",".join(out)
