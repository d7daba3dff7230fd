"""fixtures.gpu.discover (what the GPU tier needs, and what to do about what is missing) and
the read-only probes of harness.machine.discovery, with every probe faked: no GPU needed."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from fixtures.gpu import GpuEnvironment, discover
from harness.machine import discovery
from harness.machine.discovery import Gpu, WorkerImports, parse_nvidia_smi
from harness.machine.slurm import Allocation

H100_X8 = "".join(f"{i}, NVIDIA H100 80GB HBM3, 9.0\n" for i in range(8))
B200_X1 = "0, NVIDIA B200, 10.0\n"


# ---------------------------------------------------------------- nvidia-smi


def test_parse_nvidia_smi():
    gpus = parse_nvidia_smi(H100_X8)
    assert len(gpus) == 8
    assert gpus[0] == Gpu(0, "NVIDIA H100 80GB HBM3", "9.0") and gpus[7].index == 7
    assert discovery.gpu_arch(gpus) == "9.0"


def test_parse_nvidia_smi_skips_what_is_not_a_gpu_row():
    text = "No devices were found\n\nindex, name, compute_cap\n1, NVIDIA A100-SXM4-80GB, 8.0\n2, broken\n"
    assert parse_nvidia_smi(text) == [Gpu(1, "NVIDIA A100-SXM4-80GB", "8.0")]
    assert discovery.gpu_arch([]) is None and discovery.gpu_arch(None) is None


def fake_smi(tmp_path: Path, body: str) -> str:
    """An executable nvidia-smi stand-in: a Python script with this body."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.e2e
def test_nvidia_smi_gpus_runs_the_query(tmp_path):
    args_file = tmp_path / "args"
    exe = fake_smi(tmp_path, f"open({str(args_file)!r}, 'w').write(' '.join(sys.argv[1:]))\n"
                             f"sys.stdout.write({H100_X8!r})\n")
    gpus = discovery.nvidia_smi_gpus(executable=exe)
    assert gpus == parse_nvidia_smi(H100_X8) and len(gpus) == 8
    assert args_file.read_text() == "--query-gpu=index,name,compute_cap --format=csv,noheader"


@pytest.mark.e2e
def test_nvidia_smi_gpus_is_none_when_nvidia_smi_fails(tmp_path):
    exe = fake_smi(tmp_path, "print('NVIDIA-SMI has failed because it could not communicate with the driver')\n"
                             "sys.exit(9)\n")
    assert discovery.nvidia_smi_gpus(executable=exe) is None


@pytest.mark.e2e  # the exec of a missing file is attempted
def test_nvidia_smi_gpus_is_none_when_absent(tmp_path, monkeypatch):
    assert discovery.nvidia_smi_gpus(executable=str(tmp_path / "no-such-nvidia-smi")) is None
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing named nvidia-smi there
    assert discovery.nvidia_smi_gpus() is None


# ---------------------------------------------------------------- uv


def test_uv_managed(tmp_path):
    project = tmp_path / "project"
    venv = project / ".venv"
    venv.mkdir(parents=True)
    assert not discovery.uv_managed(str(venv))  # no uv.lock yet
    (project / "uv.lock").write_text("version = 1\n")
    assert discovery.uv_managed(str(venv))
    other = project / "env"
    other.mkdir()
    assert not discovery.uv_managed(str(other))  # a lock beside it, but not a .venv


def test_uv_managed_defaults_to_this_interpreter(monkeypatch, tmp_path):
    venv = tmp_path / ".venv"
    venv.mkdir()
    (tmp_path / "uv.lock").write_text("")
    monkeypatch.setattr(sys, "prefix", str(venv))
    assert discovery.uv_managed()


# ---------------------------------------------------------------- discover()


@pytest.fixture
def megatron(megatron_checkout: Path) -> Path:
    return megatron_checkout


ALLOCATION = Allocation(job_id="4242", nodes=("gpu001", "gpu002"), gpus_per_node=4)


def find(megatron_path: str | None, *, env: dict | None = None, smi: str | None = H100_X8, torch_gpus=(),
         nvrx: str | None = "0.7.0", python=(3, 12), allocation: Allocation | None = None, te: bool = True,
         apex: bool = False) -> GpuEnvironment:
    """discover() with every probe faked; smi=None: nvidia-smi absent."""
    return discover(megatron_path, env or {},
                    smi=lambda: None if smi is None else parse_nvidia_smi(smi),
                    torch_gpus=lambda: list(torch_gpus), imports=lambda: WorkerImports(te, apex),
                    nvrx_version=lambda: nvrx,
                    allocation=lambda e: allocation, python=python)


def problem_with(found: GpuEnvironment, fragment: str) -> str:
    matches = [p for p in found.problems if fragment in p]
    assert len(matches) == 1, f"expected one problem about {fragment!r}, got {found.problems}"
    return matches[0]


def test_ready_with_everything_present(megatron):
    found = find(str(megatron), allocation=ALLOCATION)
    assert found.ready and found.problems == ()
    assert found.arch == "9.0" and len(found.gpus) == 8
    assert (found.megatron_path, found.nvrx_version, found.transformer_engine) == (megatron, "0.7.0", True)
    assert found.allocation is ALLOCATION and found.python == (3, 12)


def test_no_gpu_says_where_to_run(megatron):
    found = find(str(megatron), smi=None)
    assert not found.ready and found.gpus == () and found.arch is None
    message = problem_with(found, "no GPU found")
    assert "GPU node" in message and "CUDA build of torch" in message


def test_torch_is_asked_when_nvidia_smi_is_absent(megatron):
    found = find(str(megatron), smi=None, torch_gpus=[Gpu(0, "NVIDIA B200", "10.0")])
    assert found.ready and found.arch == "10.0"


def test_nvidia_smi_listing_wins_over_torch(megatron):
    found = find(str(megatron), smi=B200_X1, torch_gpus=[Gpu(0, "other", "8.0")])
    assert found.gpus == (Gpu(0, "NVIDIA B200", "10.0"),)


def test_empty_nvidia_smi_listing_is_no_gpu(megatron):
    found = find(str(megatron), smi="")
    assert found.gpus == () and not found.ready
    problem_with(found, "no GPU found")


def test_missing_megatron_checkout_says_what_to_set():
    message = problem_with(find(None), "no Megatron-LM checkout")
    assert "--megatron-path" in message and "MEGATRON_PATH" in message and "git clone" in message


def test_megatron_path_from_the_environment(megatron):
    found = find(None, env={"MEGATRON_PATH": str(megatron)})
    assert found.ready and found.megatron_path == megatron


def test_megatron_path_without_pretrain_gpt(tmp_path):
    empty = tmp_path / "not-megatron"
    empty.mkdir()
    message = problem_with(find(str(empty)), "has no pretrain_gpt.py")
    assert message.startswith(f"--megatron-path={empty} ") and "root of a Megatron-LM checkout" in message
    message = problem_with(find(None, env={"MEGATRON_PATH": str(empty)}), "has no pretrain_gpt.py")
    assert message.startswith(f"MEGATRON_PATH={empty} "), message


def test_the_flag_wins_over_the_environment(megatron, tmp_path):
    found = find(str(megatron), env={"MEGATRON_PATH": str(tmp_path / "elsewhere")})
    assert found.ready and found.megatron_path == megatron


def test_python_311_needs_312(megatron):
    message = problem_with(find(str(megatron), python=(3, 11)), "Python 3.11")
    assert "Python >= 3.12" in message and "3.12 environment" in message
    assert find(str(megatron), python=(3, 13)).ready


@pytest.mark.parametrize(("minor", "needs_312"), [(19, True), (17, True), (15, False)])
def test_python_rule_follows_the_checkouts_megatron_core(megatron, minor, needs_312):
    info = megatron / "megatron" / "core" / "package_info.py"
    info.parent.mkdir(parents=True)
    info.write_text(f"MAJOR = 0\nMINOR = {minor}\nPATCH = 0\n")
    found = find(str(megatron), python=(3, 11))
    assert found.ready is not needs_312
    if needs_312:
        assert f"Megatron-LM's core 0.{minor} needs Python >= 3.12" in problem_with(found, "Python 3.11")


def test_missing_nvrx_says_what_to_install(megatron):
    found = find(str(megatron), nvrx=None)
    assert found.nvrx_version is None
    assert "pip install 'nvidia-resiliency-ext>=0.6.0'" in problem_with(found, "is not installed")


def test_old_nvrx_is_too_old_for_megatron(megatron):
    message = problem_with(find(str(megatron), nvrx="0.4.1"), "0.4.1 is too old")
    assert "--enable-ft-package" in message and "pip install 'nvidia-resiliency-ext>=0.6.0'" in message
    assert find(str(megatron), nvrx="0.6.0").ready


def test_every_problem_is_reported_at_once():
    found = find(None, smi=None, nvrx="0.4.1", python=(3, 11))
    assert len(found.problems) == 4 and not found.ready


def test_transformer_engine_is_recorded_not_required(megatron):
    found = find(str(megatron), te=False)
    assert found.ready and found.transformer_engine is False


def test_apex_is_recorded_not_required(megatron):
    assert find(str(megatron), apex=True).apex is True
    found = find(str(megatron), apex=False)
    assert found.ready and found.apex is False


def test_an_interpreter_that_cannot_tell_is_a_problem(megatron):
    found = discover(str(megatron), {}, smi=lambda: parse_nvidia_smi(H100_X8), torch_gpus=list,
                     imports=lambda: WorkerImports(None, None, "python3 cannot import torch: ModuleNotFoundError"),
                     nvrx_version=lambda: "0.7.0", allocation=lambda e: None, python=(3, 12))
    assert "cannot import torch" in problem_with(found, "Transformer Engine and apex")


def test_a_failing_scontrol_is_a_problem_not_a_crash(megatron):
    def broken(env):
        raise FileNotFoundError(2, "No such file or directory", "scontrol")

    found = discover(str(megatron), {"SLURM_JOB_ID": "4242"}, smi=lambda: parse_nvidia_smi(H100_X8),
                     torch_gpus=list, imports=lambda: WorkerImports(True, False), nvrx_version=lambda: "0.7.0", allocation=broken,
                     python=(3, 12))
    assert found.allocation is None
    message = problem_with(found, "could not be listed")
    assert "scontrol" in message and "inside the allocation" in message


def test_allocation_from_the_environment_is_passed_through(megatron):
    seen = []

    def allocation(env):
        seen.append(dict(env))
        return ALLOCATION

    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[001-002]"}
    found = discover(str(megatron), env, smi=lambda: parse_nvidia_smi(H100_X8), torch_gpus=list,
                     imports=lambda: WorkerImports(True, False), nvrx_version=lambda: "0.7.0", allocation=allocation, python=(3, 12))
    assert found.allocation is ALLOCATION and seen == [env]


# ---------------------------------------------------------------- what a scenario can run


def test_fault_rank_for_one_gpu_is_rank_0_and_said(megatron):
    found = find(str(megatron), smi=B200_X1)
    rank, note = found.fault_rank_for(1)
    assert rank == 0 and "NVRX_FAULT_RANK=0" in note
    assert found.fault_rank_for(2) == (1, None)
    assert found.fault_rank_for(8) == (1, None)


def test_multinode_outside_an_allocation_says_how_to_get_one(megatron):
    message = find(str(megatron)).multinode_problem(2, 4)
    assert "not inside a Slurm allocation" in message and "salloc --nodes=2 --gpus-per-node=4" in message


@pytest.mark.parametrize("nnodes, gpus, fragment", [
    (2, 4, None),
    (1, 2, None),
    (3, 4, "the allocation has 2 node(s); this scenario needs 3"),
    (2, 8, "the allocation has 4 GPU(s) per node; this scenario needs 8"),
])
def test_multinode_inside_an_allocation(megatron, nnodes, gpus, fragment):
    problem = find(str(megatron), allocation=ALLOCATION).multinode_problem(nnodes, gpus)
    assert problem == fragment


def test_multinode_with_unknown_gpus_per_node_trusts_the_allocation(megatron):
    alloc = Allocation(job_id="1", nodes=("a", "b"), gpus_per_node=None)
    assert find(str(megatron), allocation=alloc).multinode_problem(2, 8) is None


def test_discovery_does_not_read_the_real_environment(megatron, monkeypatch):
    monkeypatch.setenv("MEGATRON_PATH", str(megatron))
    assert not find(None).ready  # only the env mapping passed in counts
    assert os.environ["MEGATRON_PATH"] == str(megatron)
