"""What this machine has: GPUs and their architecture, Transformer Engine, a uv-managed
environment. Read-only probes; each returns None/empty when it cannot tell."""

from __future__ import annotations

import functools
import json
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


# What the workers' interpreter can import, asked by importing it there (a find_spec in this
# interpreter says nothing about the --python / uv environment that runs the workers, and a
# package that is present but fails to import is absent to Megatron too). Megatron-core 0.19:
# - Transformer Engine: `transformer_engine.pytorch` (the default --transformer-impl);
# - apex: `apex` plus the CUDA extensions Megatron imports from it when its fused paths are on:
#   fused_weight_gradient_mlp_cuda (gradient accumulation fusion, tensor_parallel/layers.py),
#   fused_layer_norm_cuda (FusedLayerNorm), scaled_masked_softmax_cuda and
#   scaled_upper_triang_masked_softmax_cuda (FusedScaleMaskSoftmax, fusions/fused_softmax.py).
APEX_MODULES = ("apex", "fused_weight_gradient_mlp_cuda", "fused_layer_norm_cuda", "scaled_masked_softmax_cuda",
                "scaled_upper_triang_masked_softmax_cuda")
TE_MODULES = ("transformer_engine.pytorch",)
_IMPORT_PROBE = """\
import importlib, json, sys
found = {}
try:
    import torch  # the CUDA extensions need torch's libraries loaded first
except Exception as exc:
    found["torch"] = repr(exc)
for group, names in json.loads(sys.argv[1]).items():
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            found[group] = f"{name}: {exc!r}"[:300]
            break
        found.setdefault(group, None)
print(json.dumps(found))
"""


@dataclass(frozen=True)
class WorkerImports:
    """What the interpreter that runs the workers imports. None: could not tell (`problem` says why)."""

    transformer_engine: bool | None
    apex: bool | None
    problem: str | None = None


def worker_imports(python: list[str], timeout_s: float = 180.0) -> WorkerImports:
    """Import Transformer Engine and apex's CUDA extensions in `python` (e.g. [sys.executable]
    or ["uv", "run", "python"]) in a subprocess; never in this interpreter. Asked once per
    interpreter and process (importing torch and TE takes seconds)."""
    return _worker_imports(tuple(python), timeout_s)


@functools.lru_cache(maxsize=8)
def _worker_imports(python: tuple[str, ...], timeout_s: float) -> WorkerImports:
    groups = {"transformer_engine": list(TE_MODULES), "apex": list(APEX_MODULES)}
    try:
        proc = subprocess.run([*python, "-c", _IMPORT_PROBE, json.dumps(groups)], capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return WorkerImports(None, None, f"could not run {' '.join(python)}: {exc}")
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return WorkerImports(None, None, f"{' '.join(python)} exited {proc.returncode}: {tail[:200]}")
    if "torch" in found:
        return WorkerImports(None, None, f"{' '.join(python)} cannot import torch: {found['torch']}")
    return WorkerImports(found.get("transformer_engine", "absent") is None, found.get("apex", "absent") is None)


def uv_managed(prefix: str | None = None) -> bool:
    """A uv project environment: <project>/.venv with uv.lock beside it (the Slurm guide's setup)."""
    env = Path(prefix or sys.prefix)
    return env.name == ".venv" and (env.parent / "uv.lock").is_file()
