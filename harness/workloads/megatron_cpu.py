"""Megatron's own training loop on CPU (`--workload megatron-cpu`): the megatron workload's
command line plus what a machine without a GPU needs.

The entrypoint is the unmodified `pretrain_gpt.py` of MEGATRON_PATH when given, else the
project's own small equivalent (harness/workloads/megatron_pretrain.py). Megatron comes from
the directory tools/install-megatron-cpu.sh filled (megatron-core 0.19.2 code, NVRx 0.7.0,
triton, the dataset helpers), put first on the workers' PYTHONPATH; its sitecustomize.py
loads the CUDA->CPU shim (harness/workloads/cuda_cpu_shim.py) into the workers only, when
NVRX_QUAL_CUDA_CPU_SHIM=1 is in their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness import tiers
from harness import topology
from harness.workloads import cuda_cpu_shim, megatron

if TYPE_CHECKING:
    from harness.spec import RunSpec

SCRIPT = Path(__file__).with_name("entrypoints") / "pretrain_gpt_cpu.py"
SHIM_ENV = (cuda_cpu_shim.ENV_FLAG, "1")

# What the CPU run adds to the megatron workload's argv (which already carries the no-TE/no-apex
# fallbacks, see megatron.fallback_args), each with its reason (docs/megatron-cpu.md).
CPU_ARGS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--distributed-backend", "gloo"), "no NCCL without GPUs"),
    (("--num-workers", "0"), "no data-loader processes beside the two ranks on a small CPU machine"),
    (("--hidden-dropout", "0", "--attention-dropout", "0"),
     "deterministic: loss continuity compares every loss after the restore with an uninterrupted run's"),
    (("--async-strategy", "nvrx"), "Megatron's default with --async-save, named so the arguments table shows it"),
)
OWNED_FLAGS = {flag: "set for the CPU run (see harness/workloads/megatron_cpu.py)"
               for words, _ in CPU_ARGS for flag in words if flag.startswith("--")}


# The compute capability the CUDA->CPU shim reports: Megatron reads it in validate_args, so on
# CPU it applies its pre-Blackwell rule for CUDA_DEVICE_MAX_CONNECTIONS as on an Ampere GPU.
SHIM_ARCH = "{}.{}".format(*cuda_cpu_shim.CAPABILITY)


def connections_policy(spec: "RunSpec") -> topology.ConnectionsPolicy:
    """The GPU plan's policy at the shim's compute capability: with TP > 1 or CP > 1 Megatron's
    validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 on every rank, CPU or not."""
    policy = topology.connections_policy(spec.tp, spec.cp, SHIM_ARCH, spec.extra_args)
    if policy.value is None:
        return topology.ConnectionsPolicy(None, f"megatron-cpu: {policy.reason}")
    return topology.ConnectionsPolicy(policy.value, f"TP={spec.tp}, CP={spec.cp} on megatron-cpu: the CUDA->CPU shim "
                                      f"reports compute capability {SHIM_ARCH}, so Megatron's validate_args asserts "
                                      "'Using tensor model parallelism or context parallelism require setting the "
                                      "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1' as on a pre-Blackwell GPU")


def entrypoint(spec: "RunSpec") -> str:
    if spec.megatron_path is not None:
        return str(Path(spec.megatron_path) / megatron.ENTRYPOINT)
    return str(SCRIPT)


def cpu_args() -> list[str]:
    return [word for words, _ in CPU_ARGS for word in words]


def extra_arg_problems(extra: tuple[str, ...]) -> list[str]:
    out = megatron.extra_arg_problems(extra) + tiers.cpu_problems(extra)  # harness.tiers: what CPU cannot run
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS and flag not in ("--hidden-dropout", "--attention-dropout", "--async-strategy"):
            out.append(f"workload argument {flag} is {OWNED_FLAGS[flag]}: remove it from the arguments after --")
    return out


def argv(spec: "RunSpec") -> list[str]:
    """The megatron workload's arguments with this entrypoint, the CPU additions before the
    user's own arguments (after `--`), which come last and so win where argparse allows."""
    args = megatron.argv(spec, entrypoint(spec))
    user = list(spec.extra_args)
    base = args[: len(args) - len(user)] if user else args
    return base + cpu_args() + user


def pythonpath(spec: "RunSpec") -> tuple[str, ...]:
    """The installed Megatron (with NVRx 0.7.0 and the shim hook) first; the project's own
    pretrain script imports `harness` from wherever this process found it."""
    assert spec.megatron_cpu_dir is not None
    harness_root = str(Path(__file__).resolve().parents[2])
    return (str(spec.megatron_cpu_dir), harness_root)
