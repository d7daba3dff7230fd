"""Megatron-Bridge's own pretraining on CPU (`--workload megatron-bridge`): NVIDIA's training
library on top of Megatron core (PyPI `megatron-bridge`), its `pretrain` loop, GPT step,
checkpoint save and load and its own NVRx integration, training a tiny GPT on gloo under the
launcher (docs/megatron-bridge.md).

The workers run harness/workloads/entrypoints/pretrain_bridge_cpu.py, which reads the
megatron-cpu workload's command line (Megatron-LM's flag names: the same argv, every flag
understood or refused, harness/workloads/bridge_pretrain.py) and calls Bridge's `pretrain`
with a recipe written from it. Bridge comes from the directory tools/install-megatron-bridge.sh
filled (MEGATRON_BRIDGE_DIR, named to the workers by NVRX_QUAL_MEGATRON_BRIDGE_DIR);
megatron-core, NVRx 0.7.0, the triton stub and the CUDA->CPU shim from the megatron-cpu
install, exactly as for `--workload megatron-cpu` (this class is that one's, with Bridge's
entrypoint, install, defaults and moments).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import HOME
from harness.vocab import topology
from harness.vocab.faults import AFTER_COMMIT
from harness.workloads import bridge_pretrain, megatron, megatron_cpu
from harness.workloads.base import Determinism

if TYPE_CHECKING:
    from harness.vocab.events import Timeline
    from harness.workloads.base import SpecView

NAME = "megatron-bridge"
# Where tools/install-megatron-bridge.sh installs by default (relative to the working
# directory, else to this checkout's root), and the environment name that tells the workers.
DEFAULT_DIR = ".megatron-bridge"
INSTALL = "tools/install-megatron-bridge.sh"
DIR_ENV = bridge_pretrain.DIR_ENV
STAMP = ".installed"  # what the installer writes last, after its smoke import passed

SCRIPT = Path(__file__).with_name("entrypoints") / "pretrain_bridge_cpu.py"


def default_dir(cwd: Path | None = None) -> Path:
    """.megatron-bridge in the working directory if there, else in this checkout's root (where
    CI installs it when asked), else the working directory's (validation says it is missing)."""
    here = (cwd or Path.cwd()) / DEFAULT_DIR
    for candidate in (here, HOME / DEFAULT_DIR):
        if candidate.is_dir():
            return candidate
    return here


def install_problem(where: Path) -> str | None:
    """What is missing from an install directory (None: Bridge's training code and the
    installer's stamp are there), in words that end with the command that fixes it."""
    if not (where / "megatron" / "bridge" / "training").is_dir():
        return f"{where} holds no installed Megatron-Bridge: run {INSTALL} {where} (after {megatron_cpu.INSTALL})"
    if not (where / STAMP).is_file():
        return (f"{where} is an incomplete Megatron-Bridge install (no {STAMP}: the installer's smoke import did not "
                f"pass): run {INSTALL} {where} again")
    return None


def install_problems(spec: "SpecView") -> list[str]:
    where = spec.megatron_bridge_dir
    knob = spec.knob("megatron_bridge_dir")
    if where is None:
        return [f"{knob} {DEFAULT_DIR}/ (here or in the nvrx-qual checkout) holds no installed Megatron-Bridge: run "
                f"{INSTALL} (after {megatron_cpu.INSTALL}; or point {knob} at where it installed)"]
    problem = install_problem(where)
    if problem is None:
        return []
    return [f"{spec.say('megatron_bridge_dir')}: {problem} (or point {knob} at where it installed)"]


def extra_arg_problems(extra: tuple[str, ...]) -> list[str]:
    """megatron-cpu's refusals, and every flag the Bridge entrypoint does not read (it would
    stop every rank with argparse's exit 2 at start)."""
    out = megatron_cpu.extra_arg_problems(extra)
    known = bridge_pretrain.flags()
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag not in known and not any(flag in problem for problem in out):
            out.append(f"workload argument {flag} is not one the Megatron-Bridge entrypoint reads "
                       "(harness/workloads/bridge_pretrain.py turns Megatron-LM's flags into Bridge's configuration, "
                       "each one it knows): remove it from the arguments after --")
    return out


def bridge_version(spec: "SpecView") -> str | None:
    return megatron.megatron_version(spec.megatron_bridge_dir, package="bridge")


class MegatronBridge(megatron_cpu.MegatronCpu):
    """Megatron-Bridge's own pretrain on CPU (gloo), with the CUDA->CPU shim in the workers only."""

    name = NAME
    summary = "megatron-bridge (Megatron-Bridge's own pretrain on CPU)"
    # megatron-cpu's tiny GPT at the sequence length the study probed (docs/megatron-bridge.md), a
    # checkpoint every 4 iterations, its deadlines: Bridge's setup (imports, init and, on a restart,
    # the load) took about 20 s on the 2-core machine, within the profile's 90 s.
    defaults = {**megatron_cpu.MegatronCpu.defaults, "seq_length": 64}
    # A kill after a committed checkpoint is what has been run (docs/megatron-bridge.md); the other
    # moments depend on Bridge's own commit order and load path (its tracker before run_config.yaml,
    # its load reading latest_train_state.pt first), which no run has shown yet.
    moments = (AFTER_COMMIT,)
    own_knobs = megatron_cpu.MegatronCpu.own_knobs | {"megatron_bridge_dir"}
    scope_note = ("the megatron-bridge run qualifies Megatron-Bridge's own pretrain loop, checkpoint save and restore "
                  "(a tiny GPT recipe) on CPU under this launcher, not GPU training recovery.")

    def argv(self, spec: "SpecView") -> list[str]:
        return megatron_cpu.argv(spec, str(SCRIPT))

    def entrypoint(self, spec: "SpecView") -> Path:
        return SCRIPT

    def extra_arg_problems(self, extra: tuple[str, ...]) -> list[str]:
        return extra_arg_problems(extra)

    def problems(self, spec: "SpecView") -> list[str]:
        problems = (megatron.shape_problems(spec) + megatron_cpu.install_problems(spec, checkout=False)
                    + install_problems(spec))
        if spec.megatron_path is not None:
            problems.append(f"{spec.say('megatron_path')}: the megatron-bridge workload runs Megatron-Bridge's own "
                            "pretrain (harness/workloads/entrypoints/pretrain_bridge_cpu.py), not a checkout's "
                            f"{megatron.ENTRYPOINT}: drop {spec.knob('megatron_path')}")
        return problems

    def resolve(self, values: dict[str, Any]) -> dict[str, Any]:
        values = super().resolve(values)
        values["megatron_bridge_dir"] = values.get("megatron_bridge_dir") or default_dir()
        return values

    def connections_policy(self, spec: "SpecView") -> topology.ConnectionsPolicy:
        # Bridge's ConfigContainer asserts nothing about CUDA_DEVICE_MAX_CONNECTIONS for TP or CP (only its
        # Megatron-FSDP path asserts it is not 1), and Megatron-LM's validate_args does not run.
        return topology.ConnectionsPolicy(None, f"{NAME}: Megatron-Bridge's configuration does not require it "
                                                "(Megatron-LM's validate_args does not run): left unset")

    def environment(self, spec: "SpecView") -> list[tuple[str, str]]:
        return [*super().environment(spec), (DIR_ENV, str(spec.megatron_bridge_dir))]

    def notes(self, spec: "SpecView") -> list[str]:
        version = bridge_version(spec)
        core = megatron.megatron_version(spec.megatron_cpu_dir)
        return [f"{NAME}: Megatron-Bridge {version or '(version unknown)'}'s own pretrain and GPT step on "
                f"megatron-core {core or '(version unknown)'}, on CPU (gloo) with the CUDA->CPU shim in the workers "
                "only; the recipe is a tiny GPT written from the command line below (harness/workloads/bridge_pretrain.py)",
                *megatron.fallback_notes(spec)]

    def software_version(self, spec: "SpecView") -> str | None:
        # megatron-core's (run.json's megatron_version, which the known-defect table reads): Bridge restores
        # through megatron-core's optimizer and checkpoint code. Bridge's own version is in the plan's notes.
        return megatron.megatron_version(spec.megatron_cpu_dir)

    def machine_problems(self, spec: "SpecView", gpus: tuple[Any, ...]) -> list[str]:
        if gpus:
            return [f"the {NAME} workload runs Megatron-Bridge on CPU through a CUDA->CPU shim, which refuses a "
                    "machine with GPUs: on a GPU node Bridge needs its own installation (docs/megatron-bridge.md, "
                    "'What a GPU node would need')"]
        return []

    def determinism(self, timeline: "Timeline") -> Determinism:
        """Deterministic when every start's configuration summary shows hidden_dropout and
        attention_dropout 0: Bridge prints no arguments table, and its summary names a setting
        only where it differs from megatron-core's default (0.1), so a dropout it does not name is 0.1."""
        starts = [s for s in timeline.starts if any(s.setting(n) is not None for n in megatron_cpu.DROPOUT_ARGS)]
        return megatron_cpu.dropout_determinism(starts)
