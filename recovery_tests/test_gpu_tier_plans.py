"""The GPU kit's tier cases, planned and held to Megatron's own argument checks on any machine.

The local-checkpoint and in-process-restart cases of the GPU tier
(test_recovery_gpu.py::test_megatron_single_node_local_tier / _inprocess_restart, run by the
GPU kit's script) cannot run here: megatron-cpu refuses them with Megatron's and NVRx's own
errors (harness.vocab.tiers.CPU_REFUSALS). What can be checked without a GPU is checked here:

- the harness plans them (no refusal; the fault, its rank and the workload arguments reach the
  launcher command as the GPU test asks);
- the planned pretrain_gpt.py argv of each goes through Megatron-core 0.19.2's parse_args,
  validate_args and get_train_valid_test_num_samples (recovery_tests/megatron_accept.py, the
  acceptance script of the other GPU shapes), for one GPU (the kit's shape) and two;
- and Megatron refuses a broken variant with its own words (local without its directory,
  replication without local checkpoints), so the check is not vacuous.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_nvrx_qual.runs import SPEC_ENV_NAMES
from harness.plan import kit, resolve
from harness.plan import commands as planmod
from harness.vocab.faults import FAULT_KINDS
from recovery_tests.test_recovery_gpu import INPROCESS_ARGS, TIER_ARGS, local_tier_args

ROOT = Path(__file__).resolve().parent.parent
MEGATRON_DIR = Path(os.environ.get("NVRX_QUAL_MEGATRON_CPU", ROOT / ".megatron-cpu"))
SCRIPT = Path(__file__).parent / "megatron_accept.py"
LOCAL_DIR = "/local_nvme/nvrx-qual-local-ckpt"


def _planned(case: str, fault: str, gpus: int, extra: tuple[str, ...], work: Path, checkout: Path) -> dict:
    flags = {"workload": "megatron", "megatron_path": checkout, "work_dir": work, "run_id": f"tier-{case}",
             "nvrx_version": "0.7.0", "transformer_engine": True, "apex": True, "gpus_per_node": gpus,
             "fault_rank": 0 if gpus == 1 else 1, "fault": fault, "gpu_arch": "9.0"}
    env = {k: v for k, v in os.environ.items() if k not in SPEC_ENV_NAMES}
    spec, target, _ = resolve.resolve_spec(flags, extra, env)
    launcher = planmod.build(spec, target).launcher
    argv = list(launcher.argv)
    nemesis = argv.index(planmod.NEMESIS_MODULE)
    start = argv.index("--", nemesis)
    return {"id": case, "argv": argv[start + 2:], "nemesis": argv[nemesis:start], "world_size": spec.world,
            "env": dict(launcher.env), "device_major": 9, "components": []}


CASES = {
    "local-1gpu": ("kill", 1, local_tier_args(LOCAL_DIR, 1)),
    "local-2gpu-replicated": ("kill", 2, local_tier_args(LOCAL_DIR, 2)),
    "inprocess-1gpu": ("exception", 1, INPROCESS_ARGS),
    "inprocess-2gpu": ("exception", 2, INPROCESS_ARGS),
    "non-persistent-1gpu": ("kill", 1, TIER_ARGS),
    # broken on purpose: Megatron must refuse them in its own words
    "broken-local-without-dir": ("kill", 1, ("--non-persistent-ckpt-type", "local", "--non-persistent-save-interval", "3")),
    "broken-replication-without-local": ("kill", 2, ("--replication", "--replication-factor", "2", "--replication-jump", "1")),
}
BROKEN = {"broken-local-without-dir": "Tried to use local checkpointing without specifying --local-ckpt-dir",
          "broken-replication-without-local": "--replication requires args.non_persistent_ckpt_type == 'local'"}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    if not (MEGATRON_DIR / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip(f"megatron-core 0.19.2 is not installed in {MEGATRON_DIR}: run tools/install-megatron-cpu.sh")
    base = tmp_path_factory.mktemp("gpu-tier-plans")
    checkout = base / "Megatron-LM"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("# stand-in: only the argv is checked\n")
    cases = [_planned(case, fault, gpus, extra, base / "work", checkout) for case, (fault, gpus, extra) in CASES.items()]
    path = base / "cases.json"
    path.write_text(json.dumps([{k: v for k, v in c.items() if k != "nemesis"} for c in cases]))
    env = dict(os.environ, PYTHONPATH=f"{MEGATRON_DIR}:{ROOT}", TORCHDYNAMO_DISABLE="1")
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, env=env,
                          timeout=600, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines()) if r}
    for c in cases:
        out[c["id"]].update(argv=c["argv"], nemesis=c["nemesis"])
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c not in BROKEN])
def test_the_kits_tier_case_is_planned_and_passes_megatrons_own_checks(case, results):
    r = results[case]
    assert r["ok"], f"{case}: Megatron refused the planned command at {r['stage']}: {r['error']}\n{r['argv']}"
    fault, _gpus, extra = CASES[case]
    assert all(word in r["argv"] for word in extra), r["argv"]
    assert fault in r["nemesis"], r["nemesis"]


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_megatron_refuses_a_broken_tier_command_in_its_own_words(case, results):
    r = results[case]
    assert not r["ok"] and r["stage"] == "validate_args", r
    assert BROKEN[case] in r["error"], r["error"]


def test_the_kits_script_runs_the_tier_cases_and_its_limit_leaves_them_room():
    """The script's `-k test_megatron_single_node` selects every single-node test, the tier cases
    included, and the GPU-only fault kinds (gpu-hang, gpu-error); the limit gives each of the eight
    launches (kill, hang, none, non-persistent, local, in-process, gpu-hang, gpu-error) the three
    minutes the first three had."""
    assert "-k test_megatron_single_node " in kit.RUN_SCRIPT
    from recovery_tests import test_recovery_gpu as gpu
    single = [n for n in dir(gpu) if n.startswith("test_megatron_single_node")]
    assert sorted(single) == ["test_megatron_single_node", "test_megatron_single_node_gpu_kinds",
                              "test_megatron_single_node_inprocess_restart", "test_megatron_single_node_local_tier",
                              "test_megatron_single_node_non_persistent_tier"]
    assert set(gpu.GPU_KINDS) == {n for n, k in FAULT_KINDS.items() if k.gpu_only}
    assert kit.TIME_LIMIT_S >= 8 * 180
    assert f"NVRX_KIT_TIME_LIMIT_S:-{kit.TIME_LIMIT_S}" in kit.RUN_SCRIPT
