"""`--workload megatron-cpu`: the plan (golden files), its refusals, and the project's own
pretrain module being importable without Megatron or side effects."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import cli
from harness.workloads import megatron_cpu
from recovery_tests.test_plan_golden import check_golden, normalise

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def megatron_cpu_dir(tmp_path: Path) -> Path:
    """A stand-in of what tools/install-megatron-cpu.sh installs (plans only look at it)."""
    root = tmp_path / "megatron-cpu"
    (root / "megatron" / "training").mkdir(parents=True)
    (root / "nvidia_resiliency_ext").mkdir()
    (root / "sitecustomize.py").write_text("# stand-in\n")
    return root


def plan_text(capsys, argv: list[str], work: Path, megatron: Path, cpu_dir: Path) -> str:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    return normalise(out, work, megatron).replace(str(cpu_dir), "<MEGATRON_CPU>").replace(str(ROOT), "<REPO>")


SCENARIOS = {
    "kill": [],
    "none": ["--fault", "none"],
    "hang-plain-optimizer": ["--fault", "hang", "--distributed-optimizer", "0"],
    # the seeds' shapes: CUDA_DEVICE_MAX_CONNECTIONS=1 with its reason, the own pretrain script
    "tp2": ["--tp", "2"],
    "tp2-pp2-fault-rank3": ["--gpus-per-node", "4", "--tp", "2", "--pp", "2", "--fault-rank", "3"],
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_megatron_cpu_plan_golden(name, tmp_path, megatron_cpu_dir, clean_spec_env, capsys):
    work = tmp_path / "work"
    argv = ["plan", "--workload", "megatron-cpu", "--megatron-cpu-dir", str(megatron_cpu_dir), "--work-dir", str(work),
            "--run-id", f"gold-{name}", "--nvrx-version", "0.7.0", *SCENARIOS[name]]
    text = plan_text(capsys, argv, work, tmp_path / "none", megatron_cpu_dir)
    check_golden(f"nvrx-0.7.0_megatron-cpu_{name}.txt", text)


def command_line(out: str) -> str:
    """The launcher's command of a printed plan (its one line that is not a comment)."""
    [line] = [line for line in out.splitlines() if not line.startswith("#")]
    return line


def test_megatron_cpu_plan_is_the_megatron_plan_plus_cpu_additions(tmp_path, megatron_cpu_dir, megatron_checkout,
                                                                   clean_spec_env, capsys):
    """With MEGATRON_PATH the checkout's unmodified pretrain_gpt.py runs, with exactly the
    megatron workload's arguments (no Transformer Engine) followed by the CPU additions."""
    work = tmp_path / "work"
    common = ["--megatron-path", str(megatron_checkout), "--nvrx-version", "0.7.0",
              "--gpus-per-node", "2", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
              "--seq-length", "32", "--vocab-size", "256", "--train-iters", "12", "--save-interval", "4"]
    cli.main(["plan", "--workload", "megatron", "--transformer-engine", "0", "--run-id", "m", "--work-dir", str(work),
              *common])
    gpu = command_line(capsys.readouterr().out)
    cli.main(["plan", "--workload", "megatron-cpu", "--megatron-cpu-dir", str(megatron_cpu_dir), "--run-id", "m",
              "--work-dir", str(tmp_path / "work2"), *common])
    cpu = command_line(capsys.readouterr().out)
    gpu_args = gpu.split(" -- ", 1)[1].replace(str(work), "W")
    cpu_args = cpu.split(" -- ", 1)[1].replace(str(tmp_path / "work2"), "W")
    assert cpu_args == gpu_args + " " + " ".join(megatron_cpu.cpu_args())
    assert cpu_args.startswith(str(megatron_checkout / "pretrain_gpt.py") + " ")
    assert "NVRX_QUAL_CUDA_CPU_SHIM=1" in cpu and "NVRX_QUAL_CUDA_CPU_SHIM" not in gpu


def refused(capsys, argv: list[str]) -> str:
    status = cli.main(["plan", "--workload", "megatron-cpu", "--nvrx-version", "0.7.0", *argv])
    err = capsys.readouterr().err
    assert status == 2, err
    return err


def test_missing_install_is_refused_naming_the_install_command(tmp_path, clean_spec_env, capsys):
    missing = tmp_path / "nowhere"
    err = refused(capsys, ["--megatron-cpu-dir", str(missing), "--work-dir", str(tmp_path / "w")])
    assert f"--megatron-cpu-dir={missing} holds no installed Megatron for CPU: run tools/install-megatron-cpu.sh " \
           f"{missing}" in err
    assert not (tmp_path / "w").exists()


def test_tp_or_cp_sets_cuda_device_max_connections_with_megatrons_reason(tmp_path, megatron_cpu_dir, clean_spec_env,
                                                                         capsys):
    """Megatron's validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP > 1 on the shim's
    Ampere capability; the plan sets it (the environment of the launcher, inherited by the
    workers) and says why, and leaves it unset at TP=1."""
    base = ["plan", "--workload", "megatron-cpu", "--megatron-cpu-dir", str(megatron_cpu_dir), "--nvrx-version", "0.7.0"]
    assert cli.main([*base, "--work-dir", str(tmp_path / "a"), "--run-id", "a", "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "# CUDA_DEVICE_MAX_CONNECTIONS: 1 (TP=2, CP=1 on megatron-cpu: the CUDA->CPU shim reports compute " \
           "capability 8.0, so Megatron's validate_args asserts" in out
    assert " CUDA_DEVICE_MAX_CONNECTIONS=1 " in command_line(out)
    assert cli.main([*base, "--work-dir", str(tmp_path / "b"), "--run-id", "b", "--pp", "2"]) == 0
    out = capsys.readouterr().out
    assert "# CUDA_DEVICE_MAX_CONNECTIONS: unset (megatron-cpu: TP=1 and CP=1: not required, left unset)" in out
    assert "CUDA_DEVICE_MAX_CONNECTIONS=" not in command_line(out)


IMPOSSIBLE = {
    "tp3-on-2-ranks": (["--tp", "3"], "world size 2 (--nnodes=1 x --gpus-per-node=2) is not divisible by the "
                       "model-parallel size 3 (--tp=3 x --pp=1 x --cp=1): make the world a multiple of 3 or change the "
                       "parallel sizes (Megatron's validate_args: 'world size (2) is not divisible by total_model_size')"),
    "world-not-divisible-by-tp-pp": (["--gpus-per-node", "6", "--tp", "2", "--pp", "2"],
                                     "world size 6 (--nnodes=1 x --gpus-per-node=6) is not divisible by the "
                                     "model-parallel size 4"),
    "heads-not-divisible-by-tp": (["--tp", "2", "--num-attention-heads", "3", "--hidden-size", "63"],
                                  "--num-attention-heads=3 is not divisible by --tp=2: choose a tensor-parallel size "
                                  "that divides 3 (Megatron's TransformerConfig: 'num_attention_heads (3) must be a "
                                  "multiple of tensor_model_parallel_size (2)')"),
    "layers-not-divisible-by-pp": (["--pp", "2", "--num-layers", "3"],
                                   "--num-layers=3 is not divisible by --pp=2: choose a pipeline-parallel size that "
                                   "divides 3 (Megatron's validate_args: 'Number of layers should be divisible by the "
                                   "pipeline-model-parallel size')"),
    "hidden-not-divisible-by-heads": (["--hidden-size", "66"],
                                      "--hidden-size=66 is not divisible by --num-attention-heads=4: choose a hidden "
                                      "size that is a multiple of 4 (Megatron's validate_args"),
    "cp-without-te": (["--cp", "2"], "--cp=2: Megatron's local attention (no Transformer Engine, as on CPU) has no "
                      "context parallelism"),
    "train-iters-within-the-warmup": (["--train-iters", "8"],
                                      "--train-iters=8 is not above the learning-rate warmup of 10 iterations, and the "
                                      "decay runs over the train iterations (Megatron's OptimizerParamScheduler: "
                                      "'assert self.lr_warmup_steps < self.lr_decay_steps'"),
    "global-batch-not-divisible-by-dp": (["--gpus-per-node", "4", "--tp", "2", "--global-batch-size", "3"],
                                         "global batch size 3 is not divisible by micro batch 1 x DP 2 = 2"),
}


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_impossible_shapes_are_refused_before_launch_with_megatrons_reason(name, tmp_path, megatron_cpu_dir,
                                                                          clean_spec_env, capsys):
    """A shape Megatron's validate_args (or its TransformerConfig) would stop on every rank is
    refused by `plan` and `run` with exit 2, Megatron's reason and the fix; nothing is created."""
    flags, reason = IMPOSSIBLE[name]
    for command in ("plan", "run"):
        work = tmp_path / command
        status = cli.main([command, "--workload", "megatron-cpu", "--nvrx-version", "0.7.0", "--megatron-cpu-dir",
                           str(megatron_cpu_dir), "--work-dir", str(work), "--run-id", name, *flags])
        err = capsys.readouterr().err
        assert status == 2 and reason in err, err
        assert not work.exists()


def test_cpu_flags_owned_by_the_workload_are_refused_after_the_separator(tmp_path, megatron_cpu_dir, clean_spec_env,
                                                                          capsys):
    err = refused(capsys, ["--megatron-cpu-dir", str(megatron_cpu_dir), "--work-dir", str(tmp_path / "w"),
                           "--", "--distributed-backend", "nccl"])
    assert "workload argument --distributed-backend is set for the CPU run" in err


def test_pretrain_module_imports_without_megatron_or_side_effects():
    """The GPU tier imports the GPT builder from here: importing must not pull Megatron or
    torch in, nor parse arguments."""
    code = ("import sys\nimport harness.workloads.megatron_pretrain as m\n"
            "assert callable(m.build_gpt_model) and callable(m.gpt_model_config)\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('megatron', 'torch')))\n")
    from fixtures.processes import run_in_session

    done = run_in_session([sys.executable, "-c", code], timeout_s=60, cwd=str(ROOT))
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
