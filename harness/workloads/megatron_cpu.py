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
from typing import TYPE_CHECKING, Any

from harness import HOME
from harness.vocab import tiers
from harness.vocab import topology
from harness.workloads import cuda_cpu_shim, megatron
from harness.workloads.base import GLOO, Determinism

if TYPE_CHECKING:
    from harness.vocab.events import AppStart, Timeline
    from harness.machine.nvrx import NvrxTarget
    from harness.workloads.base import SpecView

# Where tools/install-megatron-cpu.sh installs by default (relative to the working directory,
# else to this checkout's root).
DEFAULT_DIR = ".megatron-cpu"
INSTALL = "tools/install-megatron-cpu.sh"

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


def connections_policy(spec: "SpecView") -> topology.ConnectionsPolicy:
    """The GPU plan's policy at the shim's compute capability: with TP > 1 or CP > 1 Megatron's
    validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 on every rank, CPU or not."""
    policy = topology.connections_policy(spec.tp, spec.cp, SHIM_ARCH, spec.extra_args)
    if policy.value is None:
        return topology.ConnectionsPolicy(None, f"megatron-cpu: {policy.reason}")
    return topology.ConnectionsPolicy(policy.value, f"TP={spec.tp}, CP={spec.cp} on megatron-cpu: the CUDA->CPU shim "
                                      f"reports compute capability {SHIM_ARCH}, so Megatron's validate_args asserts "
                                      "'Using tensor model parallelism or context parallelism require setting the "
                                      "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1' as on a pre-Blackwell GPU")


def entrypoint(spec: "SpecView") -> str:
    if spec.megatron_path is not None:
        return str(Path(spec.megatron_path) / megatron.ENTRYPOINT)
    return str(SCRIPT)


def cpu_args() -> list[str]:
    return [word for words, _ in CPU_ARGS for word in words]


def extra_arg_problems(extra: tuple[str, ...]) -> list[str]:
    out = megatron.extra_arg_problems(extra) + tiers.cpu_problems(extra)  # harness.vocab.tiers: what CPU cannot run
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS and flag not in ("--hidden-dropout", "--attention-dropout", "--async-strategy"):
            out.append(f"workload argument {flag} is {OWNED_FLAGS[flag]}: remove it from the arguments after --")
    return out


def argv(spec: "SpecView", script: str | None = None) -> list[str]:
    """The megatron workload's arguments with this entrypoint (or `script`), the CPU additions
    before the user's own arguments (after `--`), which come last and so win where argparse allows."""
    args = megatron.argv(spec, script or entrypoint(spec))
    user = list(spec.extra_args)
    base = args[: len(args) - len(user)] if user else args
    return base + cpu_args() + user


def pythonpath(spec: "SpecView") -> tuple[str, ...]:
    """The installed Megatron (with NVRx 0.7.0 and the shim hook) first; the project's own
    pretrain script imports `harness` from wherever this process found it."""
    assert spec.megatron_cpu_dir is not None
    harness_root = str(HOME)
    return (str(spec.megatron_cpu_dir), harness_root)


def default_dir(cwd: Path | None = None) -> Path:
    """.megatron-cpu in the working directory if there, else in this checkout's root (where
    CI and the README install it), else the working directory's (validation says it is missing)."""
    here = (cwd or Path.cwd()) / DEFAULT_DIR
    checkout = HOME / DEFAULT_DIR
    for candidate in (here, checkout):
        if candidate.is_dir():
            return candidate
    return here


def install_problems(spec: "SpecView", checkout: bool = True) -> list[str]:
    """What the megatron-cpu workload needs before launch: the installed Megatron, and (with
    `checkout`) a MEGATRON_PATH that holds pretrain_gpt.py when one is given."""
    problems = []
    where = spec.megatron_cpu_dir
    knob = spec.knob("megatron_cpu_dir")
    install = f"{INSTALL} {where}" if where is not None else INSTALL
    if where is None or not (where / "megatron" / "training").is_dir():
        shown = (spec.say("megatron_cpu_dir") if where is not None
                 else f"{knob} {DEFAULT_DIR}/ (here or in the nvrx-qual checkout)")
        problems.append(f"{shown} holds no installed Megatron for CPU: run {install} "
                        f"(or point {knob} at where it installed)")
    elif not (where / "sitecustomize.py").is_file() or not (where / "nvidia_resiliency_ext").is_dir():
        problems.append(f"{spec.say('megatron_cpu_dir')} is an incomplete install (no sitecustomize.py or NVRx): "
                        f"run {install} again")
    if checkout and spec.megatron_path is not None:
        if not (spec.megatron_path / megatron.ENTRYPOINT).is_file():
            problems.append(f"{spec.say('megatron_path')} has no {megatron.ENTRYPOINT}: point it at the root "
                            f"of a Megatron-LM checkout, or leave {spec.knob('megatron_path')} out to run nvrx-qual's "
                            "own pretrain script")
    return problems


DROPOUT_ARGS = ("hidden_dropout", "attention_dropout")


def _is_zero(value: str | None) -> bool:
    try:
        return value is not None and float(value) == 0.0
    except ValueError:
        return False


class MegatronCpu(megatron.Megatron):
    """Megatron's own loop on CPU (gloo), with the CUDA->CPU shim in the workers only."""

    name = "megatron-cpu"
    summary = "megatron-cpu (Megatron's own loop on CPU)"
    on_gpu = False
    backend = GLOO
    # A tiny GPT, a checkpoint every 4 iterations (the fault fires after checkpoint 4 is committed;
    # 8 and 12 follow). Setup covers Megatron's init and, on a restart, the load (about 12 s on an
    # idle 2-core machine). Step, checkpointing and out of section alike, with a 1 s check
    # interval, for the same reason as the reference's.
    defaults = dict(gpus_per_node=2, num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
                    vocab_size=256, train_iters=12, save_interval=4, transformer_engine=False,
                    deadline_profile="megatron-cpu", monitor_interval=0.3, baseline="auto")
    scope_note = ("the megatron-cpu run qualifies Megatron's own loop and restore on CPU under this launcher, not GPU "
                  "training recovery.")

    def argv(self, spec: "SpecView") -> list[str]:
        return argv(spec)

    def entrypoint(self, spec: "SpecView") -> Path:
        return Path(entrypoint(spec))

    def extra_arg_problems(self, extra: tuple[str, ...]) -> list[str]:
        return extra_arg_problems(extra)

    def problems(self, spec: "SpecView") -> list[str]:
        return megatron.shape_problems(spec) + install_problems(spec)

    def resolve(self, values: dict[str, Any]) -> dict[str, Any]:
        # Its directory also holds the NVRx 0.7.0 its workers and launcher run.
        where = values.get("megatron_cpu_dir") or default_dir()
        values["megatron_cpu_dir"] = where
        if values.get("nvrx_path") is None and (where / "nvidia_resiliency_ext").is_dir():
            values["nvrx_path"] = where
        return values

    def connections_policy(self, spec: "SpecView") -> topology.ConnectionsPolicy:
        return connections_policy(spec)

    def environment(self, spec: "SpecView") -> list[tuple[str, str]]:
        return [SHIM_ENV]  # the workers' sitecustomize loads the CUDA->CPU shim

    def pythonpath(self, spec: "SpecView") -> tuple[str, ...]:
        return pythonpath(spec)

    def notes(self, spec: "SpecView") -> list[str]:
        return ["megatron-cpu: Megatron's own loop on CPU (gloo) with the CUDA->CPU shim in the workers only; "
                + ("the checkout's pretrain_gpt.py" if spec.megatron_path else "nvrx-qual's own pretrain script"),
                *megatron.fallback_notes(spec)]

    def software_version(self, spec: "SpecView") -> str | None:
        return megatron.megatron_version(spec.megatron_cpu_dir, spec.megatron_path)

    def machine_problems(self, spec: "SpecView", gpus: tuple[Any, ...]) -> list[str]:
        if gpus:
            return ["the megatron-cpu workload runs Megatron on CPU through a CUDA->CPU shim, which refuses a machine "
                    "with GPUs: use --workload megatron on this GPU node"]
        return []

    def determinism(self, timeline: "Timeline") -> Determinism:
        """Deterministic when every start's arguments table has hidden_dropout and attention_dropout
        0 (the plan's default, which arguments after -- may change)."""
        return dropout_determinism([s for s in timeline.starts if s.arguments is not None])


def dropout_determinism(starts: "list[AppStart]") -> Determinism:
    """Megatron on CPU is bitwise deterministic when each of `starts` shows hidden_dropout and
    attention_dropout 0 (AppStart.setting: its arguments table, else the lines that name them)."""
    seen = [(name, *(s.setting(name) or (None, None))) for s in starts for name in DROPOUT_ARGS]
    srcs = tuple(src for _, _, src in seen if src is not None)[:2]
    if starts and all(_is_zero(value) for _, value, _ in seen):
        return Determinism(True, "deterministic_cpu", evidence=srcs)
    nonzero = next(((n, v) for n, v, _ in seen if not _is_zero(v)), None)
    why = (("dropout_is", {"name": nonzero[0], "value": nonzero[1]})
           if nonzero is not None and nonzero[1] is not None else ("dropout_unseen", {}))
    return Determinism(False, "not_deterministic_cpu", {"why": why}, srcs)
