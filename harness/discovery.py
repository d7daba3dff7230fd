"""What this machine has: GPUs and their architecture, Transformer Engine, a uv-managed
environment. Read-only probes; each returns None/empty when it cannot tell."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_cap: str  # "9.0"


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Output of `nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        gpus.append(Gpu(int(parts[0]), parts[1], parts[2]))
    return gpus


def nvidia_smi_gpus(executable: str | None = None, timeout_s: float = 20.0) -> list[Gpu] | None:
    """GPUs as nvidia-smi lists them; None when nvidia-smi is absent or fails."""
    exe = executable or shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return parse_nvidia_smi(proc.stdout)


def gpu_arch(gpus: list[Gpu] | None) -> str | None:
    """The compute capability of the first GPU ("9.0"), the input of the connections policy."""
    return gpus[0].compute_cap if gpus else None


def has_transformer_engine() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def uv_managed(prefix: str | None = None) -> bool:
    """A uv project environment: <project>/.venv with uv.lock beside it (the Slurm guide's setup)."""
    env = Path(prefix or sys.prefix)
    return env.name == ".venv" and (env.parent / "uv.lock").is_file()
