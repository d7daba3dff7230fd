"""What the megatron-cpu workload loads into its workers, and only there: the CUDA->CPU shim
and the CPU-tier-only workarounds. Called by the `sitecustomize.py` that
tools/install-megatron-cpu.sh writes into the Megatron directory on the workers' PYTHONPATH;
acts only when that workload's plan set NVRX_QUAL_CUDA_CPU_SHIM=1 and the launcher set
LOCAL_RANK (so never in the launcher or the harness)."""

from __future__ import annotations

import os

from harness.workloads import cuda_cpu_shim, megatron_cpu_workarounds


def install_for_worker(env: "os._Environ[str] | dict[str, str]" = os.environ) -> list[str]:
    if not cuda_cpu_shim.wanted(env):
        return []
    return cuda_cpu_shim.install_for_worker() + megatron_cpu_workarounds.install()
