"""Golden files of the exact commands `nvrx-qual plan` / `sbatch` print, for both NVRx flag
sets. Only what is random (ports chosen by the OS) and machine-specific (temp paths, the
interpreter) is normalised. Regenerate with NVRX_QUAL_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.workloads import reference_args

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("NVRX_QUAL_UPDATE_GOLDEN") == "1"


def normalise(text: str, work: Path, megatron: Path) -> str:
    text = text.replace(str(work), "<WORK>").replace(str(megatron), "<MEGATRON>")
    text = text.replace(str(reference_args.SCRIPT.parent), "<HARNESS_WORKLOADS>")
    text = text.replace(sys.executable, "<PYTHON>")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<PORT>", text)
    text = re.sub(r"--ft-log-server-port \d+", "--ft-log-server-port <PORT>", text)
    text = re.sub(r"config hash [0-9a-f]{12}", "config hash <HASH>", text)  # covers the interpreter's path
    return text


def plan_output(capsys, argv: list[str], work: Path, megatron: Path) -> str:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    return normalise(out, work, megatron)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}: run with NVRX_QUAL_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"output differs from {path}; if intended, regenerate and review the diff"


MEGATRON_SCENARIOS = {
    "single-node-defaults": ["--gpus-per-node", "2"],
    "one-gpu-fault-rank0": ["--gpus-per-node", "1", "--fault-rank", "0"],
    "two-nodes-tp2-pp2": ["--nnodes", "2", "--gpus-per-node", "4", "--tp", "2", "--pp", "2",
                          "--rdzv-endpoint", "node001:29400", "--gpu-arch", "9.0", "--assume-shared-storage", "1"],
    "hang-no-te": ["--fault", "hang", "--transformer-engine", "0"],
    "with-apex-short-deadlines": ["--apex", "1", "--deadline-profile", "short"],
    # the GPU-only kinds as the GPU kit runs them (one GPU, fault rank 0, short deadlines)
    "gpu-hang-one-gpu": ["--fault", "gpu-hang", "--gpus-per-node", "1", "--fault-rank", "0",
                         "--deadline-profile", "short"],
    "gpu-error-one-gpu": ["--fault", "gpu-error", "--gpus-per-node", "1", "--fault-rank", "0",
                          "--deadline-profile", "short"],
}


@pytest.mark.parametrize("name", sorted(MEGATRON_SCENARIOS))
def test_megatron_plan_golden_070(name, tmp_path, megatron_checkout, clean_spec_env, capsys):
    work = tmp_path / "work"
    argv = ["plan", "--megatron-path", str(megatron_checkout), "--work-dir", str(work), "--run-id", f"gold-{name}",
            "--nvrx-version", "0.7.0", "--transformer-engine", "1", "--apex", "0", *MEGATRON_SCENARIOS[name]]
    check_golden(f"nvrx-0.7.0_megatron_{name}.txt", plan_output(capsys, argv, work, megatron_checkout))


def test_megatron_resume_golden_070(tmp_path, megatron_checkout, clean_spec_env, capsys):
    work, ckpt = tmp_path / "work", tmp_path / "old-checkpoints"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("20")
    argv = ["plan", "--megatron-path", str(megatron_checkout), "--work-dir", str(work), "--run-id", "gold-resume",
            "--nvrx-version", "0.7.0", "--transformer-engine", "1", "--apex", "0", "--checkpoint-dir", str(ckpt)]
    text = plan_output(capsys, argv, work, megatron_checkout).replace(str(ckpt), "<CKPT>")
    assert "# resuming: checkpoint iteration 20" in text
    check_golden("nvrx-0.7.0_megatron_resume.txt", text)


REFERENCE_SCENARIOS = {
    "single-node-defaults": [],
    "one-rank-fault-rank0": ["--gpus-per-node", "1", "--fault-rank", "0"],
    "none": ["--fault", "none"],
    "two-nodes": ["--nnodes", "2", "--rdzv-endpoint", "node001:29400", "--assume-shared-storage", "1"],
    # a small campaign: its seed, every planned fault, the sized run and restart budget, the nemesis's --schedule
    "campaign-4-seed-7": ["--faults", "4", "--seed", "7"],
}


@pytest.mark.parametrize("version", ["0.4.1", "0.7.0"])
@pytest.mark.parametrize("name", sorted(REFERENCE_SCENARIOS))
def test_reference_plan_golden(name, version, tmp_path, clean_spec_env, capsys):
    work = tmp_path / "work"
    argv = ["plan", "--workload", "reference", "--work-dir", str(work), "--run-id", f"gold-{name}",
            "--nvrx-version", version, *REFERENCE_SCENARIOS[name]]
    check_golden(f"nvrx-{version}_reference_{name}.txt", plan_output(capsys, argv, work, tmp_path / "none"))


def test_sbatch_golden_070(tmp_path, megatron_checkout, clean_spec_env, capsys):
    work = tmp_path / "work"
    argv = ["sbatch", "--megatron-path", str(megatron_checkout), "--work-dir", str(work), "--run-id", "gold-sbatch",
            "--nvrx-version", "0.7.0", "--transformer-engine", "1", "--apex", "0", "--nnodes", "2", "--gpus-per-node", "4",
            "--tp", "2", "--pp", "2", "--gpu-arch", "hopper", "--assume-shared-storage", "1",
            "--account", "acct", "--partition", "batch", "--time", "00:30:00",
            "--container-image", "nvcr.io/nvidia/pytorch:25.09-py3", "--container-mounts", "/lustre:/lustre"]
    text = plan_output(capsys, argv, work, megatron_checkout)
    check_golden("nvrx-0.7.0_sbatch_two-nodes-tp2-pp2.sh", text)
    written = (work / "runs" / "gold-sbatch" / "sbatch.sh").read_text()
    assert normalise(written, work, megatron_checkout) == text



def test_sbatch_in_a_uv_environment_runs_uv_run_python(tmp_path, megatron_checkout, clean_spec_env, capsys):
    """The Slurm guide: `uv run python -m ...`, never a bare launcher, where uv manages the env."""
    argv = ["sbatch", "--megatron-path", str(megatron_checkout), "--work-dir", str(tmp_path / "w"),
            "--run-id", "uv-1", "--nvrx-version", "0.7.0", "--nnodes", "2", "--gpus-per-node", "4",
            "--assume-shared-storage", "1", "--uv", "1", "--transformer-engine", "1", "--apex", "0"]
    assert cli.main(argv) == 0
    script = capsys.readouterr().out
    assert "    uv run python \\\n    -m nvidia_resiliency_ext.fault_tolerance.launcher \\\n" in script
    assert 'uv run python -m harness verify "$RUN_DIR"' in script
    assert "ft_launcher" not in script
