"""`--workload megatron-bridge`: the plan (golden files), its refusals before launch, and what the
type says of it (harness/workloads/megatron_bridge.py). None of this needs Megatron-Bridge
installed: the install directories are stand-ins, as plans only look at them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from harness import cli, workloads
from harness.plan import spec as specmod
from harness.workloads import bridge_pretrain, megatron_bridge
from recovery_tests.test_plan_golden import check_golden, normalise

ROOT = Path(__file__).resolve().parents[1]
VERSION = "MAJOR = {}\nMINOR = {}\nPATCH = {}\n"


@pytest.fixture
def installs(tmp_path: Path) -> tuple[Path, Path]:
    """Stand-ins of what tools/install-megatron-cpu.sh and tools/install-megatron-bridge.sh install."""
    cpu = tmp_path / "megatron-cpu"
    (cpu / "megatron" / "training").mkdir(parents=True)
    (cpu / "megatron" / "core").mkdir()
    (cpu / "megatron" / "core" / "package_info.py").write_text(VERSION.format(0, 19, 2))
    (cpu / "nvidia_resiliency_ext").mkdir()
    (cpu / "sitecustomize.py").write_text("# stand-in\n")
    bridge = tmp_path / "megatron-bridge"
    (bridge / "megatron" / "bridge" / "training").mkdir(parents=True)
    (bridge / "megatron" / "bridge" / "package_info.py").write_text(VERSION.format(0, 6, 2))
    (bridge / megatron_bridge.STAMP).write_text("megatron-bridge 0.6.2, python 3.11, script 0\n")
    return cpu, bridge


def _argv(command: str, tmp_path: Path, cpu: Path, bridge: Path, *extra: str) -> list[str]:
    return [command, "--workload", "megatron-bridge", "--megatron-cpu-dir", str(cpu), "--megatron-bridge-dir",
            str(bridge), "--work-dir", str(tmp_path / "work"), "--nvrx-version", "0.7.0", *extra]


def plan_text(capsys, argv: list[str], tmp_path: Path, cpu: Path, bridge: Path) -> str:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    text = normalise(out, tmp_path / "work", tmp_path / "none")
    return text.replace(str(cpu), "<MEGATRON_CPU>").replace(str(bridge), "<MEGATRON_BRIDGE>").replace(str(ROOT), "<REPO>")


SCENARIOS = {
    "kill": [],  # the distributed optimizer (the suite's default): megatron-core 0.19's Adam-step defect is met
    "plain-optimizer": ["--distributed-optimizer", "0"],  # the configuration that qualifies
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_megatron_bridge_plan_golden(name, tmp_path, installs, clean_spec_env, capsys):
    cpu, bridge = installs
    argv = _argv("plan", tmp_path, cpu, bridge, "--run-id", f"gold-{name}", *SCENARIOS[name])
    check_golden(f"nvrx-0.7.0_megatron-bridge_{name}.txt", plan_text(capsys, argv, tmp_path, cpu, bridge))


def command_line(out: str) -> str:
    [line] = [line for line in out.splitlines() if not line.startswith("#")]
    return line


def test_the_workers_run_bridge_s_entrypoint_on_the_megatron_cpu_command_line(tmp_path, installs, clean_spec_env,
                                                                               capsys):
    """The argv is megatron-cpu's with Bridge's entrypoint in place of the pretrain script, and
    every flag of it is one the entrypoint reads; the workers are told where Bridge is, and get
    the CUDA->CPU shim and megatron-cpu's install as megatron-cpu's workers do."""
    cpu, bridge = installs
    common = ["--nvrx-version", "0.7.0", "--megatron-cpu-dir", str(cpu), "--seq-length", "64"]
    assert cli.main(["plan", "--workload", "megatron-cpu", "--work-dir", str(tmp_path / "a"), "--run-id", "x",
                     *common]) == 0
    cpu_line = command_line(capsys.readouterr().out)
    assert cli.main(["plan", "--workload", "megatron-bridge", "--megatron-bridge-dir", str(bridge), "--work-dir",
                     str(tmp_path / "b"), "--run-id", "x", *common]) == 0
    bridge_line = command_line(capsys.readouterr().out)
    cpu_args = shlex.split(cpu_line.split(" -- ", 1)[1].replace(str(tmp_path / "a"), "W"))
    bridge_args = shlex.split(bridge_line.split(" -- ", 1)[1].replace(str(tmp_path / "b"), "W"))
    assert bridge_args[0] == str(megatron_bridge.SCRIPT) and bridge_args[1:] == cpu_args[1:]
    bridge_pretrain.parse(bridge_args[1:])  # every flag read (an unknown one is argparse's exit 2)
    assert f"NVRX_QUAL_CUDA_CPU_SHIM=1 {megatron_bridge.DIR_ENV}={bridge} PYTHONPATH={cpu}:{ROOT}" in bridge_line


def refused(capsys, argv: list[str]) -> str:
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    return err


def test_a_missing_install_is_refused_naming_the_install_command(tmp_path, installs, clean_spec_env, capsys):
    cpu, _ = installs
    missing = tmp_path / "nowhere"
    err = refused(capsys, _argv("plan", tmp_path, cpu, missing, "--run-id", "m"))
    assert (f"--megatron-bridge-dir={missing}: {missing} holds no installed Megatron-Bridge: run "
            f"tools/install-megatron-bridge.sh {missing} (after tools/install-megatron-cpu.sh)") in err
    assert not (tmp_path / "work").exists()


def test_an_install_the_installer_did_not_finish_is_refused(tmp_path, installs, clean_spec_env, capsys):
    cpu, bridge = installs
    (bridge / megatron_bridge.STAMP).unlink()
    err = refused(capsys, _argv("plan", tmp_path, cpu, bridge, "--run-id", "m"))
    assert f"is an incomplete Megatron-Bridge install (no .installed" in err and \
        f"run tools/install-megatron-bridge.sh {bridge} again" in err


def test_the_install_directory_comes_from_the_environment_too(tmp_path, installs, clean_spec_env, capsys, monkeypatch):
    """NVRX_QUAL_MEGATRON_BRIDGE_DIR is the knob's environment name (and what the workers read):
    a refusal names it as the user gave it."""
    cpu, _ = installs
    monkeypatch.setenv(megatron_bridge.DIR_ENV, str(tmp_path / "elsewhere"))
    err = refused(capsys, ["plan", "--workload", "megatron-bridge", "--megatron-cpu-dir", str(cpu), "--work-dir",
                           str(tmp_path / "work"), "--nvrx-version", "0.7.0", "--run-id", "m"])
    assert f"{megatron_bridge.DIR_ENV}={tmp_path / 'elsewhere'}: " in err


@pytest.mark.parametrize(("extra", "said"), [
    (["--megatron-path", "/opt/Megatron-LM"], "the megatron-bridge workload runs Megatron-Bridge's own pretrain"),
    (["--fault-at", "in-save"], "the megatron-bridge workload cannot show this moment; use one of after-commit"),
    (["--", "--no-load-optim"], "workload argument --no-load-optim is not one the Megatron-Bridge entrypoint reads"),
    (["--", "--exit-interval", "3"], "workload argument --exit-interval is refused"),
])
def test_what_the_workload_refuses_before_launch(extra, said, tmp_path, installs, clean_spec_env, capsys):
    cpu, bridge = installs
    assert said in refused(capsys, _argv("run", tmp_path, cpu, bridge, "--run-id", "r", *extra))
    assert not (tmp_path / "work" / "runs").exists()


def test_its_install_knob_is_refused_to_another_workload(tmp_path, clean_spec_env):
    with pytest.raises(specmod.SpecError, match="--megatron-bridge-dir is a knob of the megatron-bridge workload only"):
        specmod.validate(specmod.from_sources({"workload": "reference", "work_dir": tmp_path, "run_id": "r",
                                               "megatron_bridge_dir": tmp_path}, {}))


def test_the_type_answers_for_it(tmp_path, installs, clean_spec_env):
    """Through the type only: its name is registered, its software version is megatron-core's
    (the known-defect table reads it), Bridge's own is in the plan's notes, a machine with
    GPUs is refused, and its defaults are megatron-cpu's at Bridge's sequence length."""
    cpu, bridge = installs
    spec = specmod.from_sources({"workload": "megatron-bridge", "work_dir": tmp_path, "run_id": "t",
                                 "megatron_cpu_dir": cpu, "megatron_bridge_dir": bridge}, {})
    kind = workloads.get("megatron-bridge")
    assert spec.workload_type is kind and "megatron-bridge" in workloads.names()
    assert kind.software_version(spec) == "0.19.2"
    assert "Megatron-Bridge 0.6.2's own pretrain" in kind.notes(spec)[0]
    assert kind.machine_problems(spec, ("gpu0",)) and not kind.machine_problems(spec, ())
    assert (spec.seq_length, spec.train_iters, spec.save_interval, spec.deadline_profile) == (64, 12, 4, "megatron-cpu")
    assert kind.entrypoint(spec) == megatron_bridge.SCRIPT and kind.entrypoint(spec).is_file()
