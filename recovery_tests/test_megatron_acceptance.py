"""Every planned pretrain_gpt.py command held against Megatron-core 0.19.2's own code.

For each shape the GPU tier plans (1 GPU, 2 GPUs, 2x4 TP2 PP2; with and without Transformer
Engine; with and without apex) the exact workload argv of the plan goes through Megatron's
parse_args, validate_args and get_train_valid_test_num_samples, and, for the shapes that
run Megatron's local layers without apex (this interpreter has neither TE nor apex), through
the components the plan's fallback flags exist for (recovery_tests/megatron_accept.py). Then
each fallback flag is removed once, to show that Megatron itself then refuses the command,
with its own error text.

Megatron runs in a subprocess with PYTHONPATH=.megatron-cpu (tools/install-megatron-cpu.sh,
which CI runs); it mutates module globals, so it stays out of pytest's process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_nvrx_qual.runs import SPEC_ENV_NAMES
from harness.plan import resolve
from harness.plan import commands as planmod

ROOT = Path(__file__).resolve().parent.parent
MEGATRON_DIR = Path(os.environ.get("NVRX_QUAL_MEGATRON_CPU", ROOT / ".megatron-cpu"))
SCRIPT = Path(__file__).parent / "megatron_accept.py"

SHAPES = {
    "1gpu": dict(gpus_per_node=1, fault_rank=0),
    "2gpu": dict(gpus_per_node=2),
    "2x4-tp2-pp2": dict(nnodes=2, gpus_per_node=4, tp=2, pp=2, rdzv_endpoint="node001:29400",
                        assume_shared_storage=True, gpu_arch="9.0"),
}
STACKS = {"te-apex": (True, True), "te-noapex": (True, False), "local-apex": (False, True),
          "local-noapex": (False, False)}
# The components this interpreter (no TE, no apex) can hold a plan to: the local layers only
# for local-noapex plans; an apex plan is meant for a machine with apex, so only its arguments.
COMPONENTS = {"local-noapex": ["layernorm", "softmax", "grad_accum_fusion", "fusions"],
              "te-noapex": ["grad_accum_fusion"]}

# The GPT model built by the project's pretrain equivalent (Megatron's own GPTModelBuilder) and
# one bf16 forward pass, with the megatron-cpu workload's CUDA->CPU shim: the 1-GPU local-noapex
# plan (TP=PP=1). Those modules come with the megatron-cpu workload (issue 12).
MODEL_MODULES = ("harness.workloads.megatron_pretrain", "harness.workloads.cuda_cpu_shim")
HAVE_MODEL_BUILDER = all(importlib.util.find_spec(m) is not None for m in MODEL_MODULES)
NO_BUILDER = (f"needs {' and '.join(MODEL_MODULES)} (build_gpt_model, the CUDA->CPU shim) of the megatron-cpu "
              "workload, not on this branch")
# flag removed -> (Megatron's stage that refuses, Megatron's words), in the model and forward pass
MODEL_REMOVALS = {
    "--no-persist-layer-norm": ("model_build", "persist_layer_norm not supported by torch LayerNorm"),
    "--no-masked-softmax-fusion": ("forward", "No module named 'scaled_masked_softmax_cuda'"),
    "--no-gradient-accumulation-fusion": ("model_build", "custom CUDA extension fused_weight_gradient_mlp_cuda "
                                                         "module is not found"),
}

# flag removed -> (stack it is removed from, Megatron's stage that refuses, Megatron's words)
REMOVALS = {
    "--eval-interval": ("te-apex", "num_samples", "unsupported operand type(s) for //: 'int' and 'NoneType'"),
    "--no-persist-layer-norm": ("local-noapex", "layernorm", "persist_layer_norm not supported by torch LayerNorm"),
    "--no-masked-softmax-fusion": ("local-noapex", "softmax", "No module named 'scaled_masked_softmax_cuda'"),
    "--no-bias-dropout-fusion": ("local-noapex", "fusions", "bias_dropout_fusion on"),
    "--no-bias-gelu-fusion": ("local-noapex", "fusions", "bias_activation_fusion on"),
    "--no-gradient-accumulation-fusion": ("te-noapex", "grad_accum_fusion", "fused_weight_gradient_mlp_cuda"),
}
VALUED = {"--eval-interval"}

CASES = [f"{shape}-{stack}" for shape in SHAPES for stack in STACKS]


def planned_case(shape: str, stack: str, work: Path, checkout: Path) -> dict:
    """The workload words of the plan's launcher command (after the nemesis's `--` and the
    entrypoint), the world size, the plan's environment and GPU architecture."""
    te, apex = STACKS[stack]
    flags = {"workload": "megatron", "megatron_path": checkout, "work_dir": work, "run_id": f"acc-{shape}-{stack}",
             "nvrx_version": "0.7.0", "transformer_engine": te, "apex": apex, **SHAPES[shape]}
    env = {k: v for k, v in os.environ.items() if k not in SPEC_ENV_NAMES}  # only the shape decides
    spec, target, _ = resolve.resolve_spec(flags, (), env)
    launcher = planmod.build(spec, target).launcher
    argv = list(launcher.argv)
    start = argv.index("--", argv.index(planmod.NEMESIS_MODULE))
    assert argv[start + 1].endswith("pretrain_gpt.py")
    major = int(spec.gpu_arch.split(".")[0]) if spec.gpu_arch else None
    return {"id": f"{shape}-{stack}", "argv": argv[start + 2:], "world_size": spec.world, "env": dict(launcher.env),
            "device_major": major, "components": COMPONENTS.get(stack, [])}


def without(argv: list[str], flag: str) -> list[str] | None:
    if flag not in argv:
        return None  # the removal test says so; the shapes still go through Megatron
    i = argv.index(flag)
    return argv[:i] + argv[i + (2 if flag in VALUED else 1):]


@pytest.fixture(scope="module")
def megatron_results(tmp_path_factory) -> dict[str, dict]:
    if not (MEGATRON_DIR / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip(f"megatron-core 0.19.2 is not installed in {MEGATRON_DIR}: run tools/install-megatron-cpu.sh "
                    "(CI does)")
    base = tmp_path_factory.mktemp("megatron-acceptance")
    checkout = base / "Megatron-LM"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("# stand-in: only the argv is checked\n")
    planned = {(shape, stack): planned_case(shape, stack, base / "work", checkout)
               for shape in SHAPES for stack in STACKS}
    cases = list(planned.values())
    for flag, (stack, _, _) in REMOVALS.items():
        case = planned[("1gpu", stack)]
        if (argv := without(case["argv"], flag)) is not None:
            cases.append({**case, "id": f"minus{flag}", "argv": argv})
    if HAVE_MODEL_BUILDER:
        one = planned[("1gpu", "local-noapex")]
        cases.append({**one, "id": "model", "components": ["model"]})
        for flag in MODEL_REMOVALS:
            cases.append({**one, "id": f"model-minus{flag}", "argv": without(one["argv"], flag) or one["argv"],
                          "components": ["model"]})
    tp2 = planned[("2x4-tp2-pp2", "te-apex")]
    assert tp2["env"].get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", tp2["env"]
    cases.append({**tp2, "id": "minus-CUDA_DEVICE_MAX_CONNECTIONS",
                  "env": {k: v for k, v in tp2["env"].items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}})
    path = base / "cases.json"
    path.write_text(json.dumps(cases))
    env = dict(os.environ, PYTHONPATH=f"{MEGATRON_DIR}:{ROOT}", TORCHDYNAMO_DISABLE="1")
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)  # only the plan's own setting counts
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, env=env,
                          timeout=600, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines()) if r}
    assert set(results) == {c["id"] for c in cases}, proc.stderr[-3000:]
    for r in results.values():
        r["argv"] = next(c["argv"] for c in cases if c["id"] == r["id"])
    return results


@pytest.mark.parametrize("case", CASES)
def test_planned_command_passes_megatrons_own_checks(case, megatron_results):
    r = megatron_results[case]
    assert r["ok"], (f"Megatron-core 0.19.2 refuses the planned command at {r['stage']}: {r['error']}\n"
                     f"argv: {' '.join(r['argv'])}")


def test_tp2_without_the_planned_connections_setting_fails_in_megatron(megatron_results):
    """TP=2 on Hopper: the plan's CUDA_DEVICE_MAX_CONNECTIONS=1 is what validate_args asserts."""
    r = megatron_results["minus-CUDA_DEVICE_MAX_CONNECTIONS"]
    assert (r["ok"], r["stage"]) == (False, "validate_args") and "CUDA_DEVICE_MAX_CONNECTIONS to 1" in r["error"], r


@pytest.mark.parametrize("flag", sorted(REMOVALS))
def test_removing_a_planned_flag_fails_with_megatrons_own_error(flag, megatron_results):
    stack, stage, words = REMOVALS[flag]
    assert f"minus{flag}" in megatron_results, f"the 1gpu-{stack} plan no longer has {flag}"
    r = megatron_results[f"minus{flag}"]
    assert not r["ok"], f"without {flag} Megatron still accepts the command: the flag is not needed, or the check " \
                        "does not reach the code that needs it"
    assert (r["stage"], words in r["error"]) == (stage, True), r


@pytest.mark.skipif(not HAVE_MODEL_BUILDER, reason=NO_BUILDER)
def test_the_1gpu_plan_builds_megatrons_gpt_model_and_runs_a_bf16_forward(megatron_results):
    r = megatron_results["model"]
    assert r["ok"], f"Megatron-core 0.19.2 fails the planned 1-GPU command at {r['stage']}: {r['error']}"


@pytest.mark.skipif(not HAVE_MODEL_BUILDER, reason=NO_BUILDER)
@pytest.mark.parametrize("flag", sorted(MODEL_REMOVALS))
def test_removing_a_planned_flag_breaks_megatrons_model_or_forward(flag, megatron_results):
    stage, words = MODEL_REMOVALS[flag]
    r = megatron_results[f"model-minus{flag}"]
    assert (r["ok"], r["stage"]) == (False, stage) and words in r["error"], r
