"""The megatron-cpu workload's CUDA->CPU shim and CPU-tier-only workarounds.

Every patch has a check (recovery_tests/shim_entrypoints/check_shim.py) that passes with the
shim and fails without it, both run in subprocesses because the shim patches torch for the
life of a process. The shim is loaded only where the workload's plan and the launcher say:
NVRX_QUAL_CUDA_CPU_SHIM=1 and LOCAL_RANK both set."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import struct
import sys
import types
from pathlib import Path

import pytest

from fixtures.processes import run_in_session
from harness.workloads.megatron_cpu import default_dir as default_megatron_cpu_dir
from harness.workloads import cuda_cpu_shim, megatron_cpu_workarounds, megatron_cpu_worker

CHECK = Path(__file__).parent / "shim_entrypoints" / "check_shim.py"
ROOT = Path(__file__).resolve().parents[1]


def _run_checks(mode: str) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(cuda_cpu_shim.ENV_FLAG, None)
    done = run_in_session([sys.executable, str(CHECK), mode], timeout_s=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def with_shim() -> dict[str, dict]:
    return _run_checks("with")


@pytest.fixture(scope="module")
def without_shim() -> dict[str, dict]:
    return _run_checks("without")


PATCH_NAMES = [p.name for p in cuda_cpu_shim.PATCHES]


def test_every_patch_has_a_check_and_a_one_line_reason(with_shim):
    assert sorted(with_shim) == sorted(PATCH_NAMES), "a patch without a check, or a check without a patch"
    for p in cuda_cpu_shim.PATCHES:
        assert p.reason.strip() and "\n" not in p.reason, p.name


@pytest.mark.parametrize("name", PATCH_NAMES)
def test_patch_maps_cuda_to_cpu(name, with_shim, without_shim):
    """With the shim the CUDA call works on CPU; without it the same call fails on this
    CPU build of torch (so each patch is needed and each check can fail)."""
    assert with_shim[name]["ok"], with_shim[name]["detail"]
    assert not without_shim[name]["ok"], f"{name} works without the shim: the patch is not needed"


def test_shim_refuses_a_machine_where_torch_sees_a_gpu():
    code = ("import torch; torch.cuda.is_available = lambda: True\n"
            "from harness.workloads import cuda_cpu_shim\n"
            "try:\n    cuda_cpu_shim.install()\nexcept cuda_cpu_shim.ShimError as e:\n    print('refused:', e)\n")
    done = run_in_session([sys.executable, "-c", code], timeout_s=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "refused: torch sees a CUDA device" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(("env", "wanted"), [
    ({cuda_cpu_shim.ENV_FLAG: "1", "LOCAL_RANK": "0"}, True),
    ({cuda_cpu_shim.ENV_FLAG: "1"}, False),  # the launcher itself: no LOCAL_RANK
    ({"LOCAL_RANK": "1"}, False),  # another workload's worker
    ({cuda_cpu_shim.ENV_FLAG: "0", "LOCAL_RANK": "0"}, False),
])
def test_only_the_workloads_workers_want_the_shim(env, wanted):
    assert cuda_cpu_shim.wanted(env) is wanted
    if not wanted:
        assert megatron_cpu_worker.install_for_worker(env) == []


@pytest.mark.parametrize(("argv", "wanted"), [
    (["python", "-u", "-m", "harness.nemesis", "--fault", "kill"], True),  # a worker
    (["python", "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=8, pipe_handle=14)",
      "--multiprocessing-fork"], True),  # the checkpoint worker a worker spawns
    (["python", "-B", "-c", "from multiprocessing.resource_tracker import main;main(7)"], False),
    (["python", "-c"], True),  # no code after -c: not the tracker
])
def test_the_resource_tracker_of_a_worker_does_not_load_the_shim(argv, wanted):
    """multiprocessing's resource tracker inherits the worker's environment but never touches
    torch: loading the shim there (torch's import) cost 1.4 s of CPU per tracker, two per cycle."""
    env = {cuda_cpu_shim.ENV_FLAG: "1", "LOCAL_RANK": "0"}
    assert cuda_cpu_shim.wanted(env, argv) is wanted


def _installed_megatron_cpu() -> Path:
    where = default_megatron_cpu_dir(ROOT)
    if not (where / "sitecustomize.py").is_file() or not (where / "megatron").is_dir():
        pytest.skip(f"Megatron for CPU is not installed in {where}: run tools/install-megatron-cpu.sh")
    return where


@pytest.mark.parametrize(("extra", "expected"), [
    ({cuda_cpu_shim.ENV_FLAG: "1", "LOCAL_RANK": "1"}, "True"),
    ({cuda_cpu_shim.ENV_FLAG: "1"}, "False"),
    ({"LOCAL_RANK": "1"}, "False"),
])
def test_the_installed_sitecustomize_loads_the_shim_into_workers_only(extra, expected):
    """The hook tools/install-megatron-cpu.sh writes: what a launcher, a worker of another
    workload and a megatron-cpu worker each get."""
    where = _installed_megatron_cpu()
    env = {k: v for k, v in os.environ.items() if k not in (cuda_cpu_shim.ENV_FLAG, "LOCAL_RANK")}
    env.update(extra, PYTHONPATH=f"{where}:{ROOT}")
    done = run_in_session([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], timeout_s=60,
                          env=env)
    assert done.stdout.strip().splitlines()[-1] == expected, done.stdout + done.stderr


def stale_bytecode(sources: list[Path]) -> list[str]:
    """The sources among `sources` whose bytecode Python would not use: missing, or not written
    for this interpreter and this source's mtime and size (the checks of a timestamp pyc)."""
    stale = []
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        try:
            header = cached.read_bytes()[:16]
        except FileNotFoundError:
            stale.append(f"{source}: no {cached.name}")
            continue
        st = source.stat()
        want = importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF,
                                                         st.st_size & 0xFFFFFFFF)
        if header != want:
            stale.append(f"{source}: {cached.name} is for another interpreter or another version of the file")
    return stale


def test_the_installed_megatron_carries_its_bytecode(tmp_path):
    """tools/install-megatron-cpu.sh unpacks megatron-core's wheel by hand, so it writes the
    bytecode pip would: without it every worker and checkpoint worker compiles Megatron from
    source where PYTHONDONTWRITEBYTECODE is set (CI images, many containers)."""
    where = _installed_megatron_cpu()
    sources = [where / "sitecustomize.py", *sorted((where / "megatron").rglob("*.py")),
               *sorted((where / "triton").rglob("*.py"))]
    assert len(sources) > 500, "megatron-core's modules are not where the install puts them"
    stale = stale_bytecode(sources)
    assert not stale, f"{len(stale)} of {len(sources)} installed modules compile from source at every import " \
                      f"(run tools/install-megatron-cpu.sh again); first: {stale[:3]}"
    # the check can fail: a file without bytecode, and one changed since it was compiled
    fresh = tmp_path / "fresh.py"
    fresh.write_text("x = 1\n")
    assert stale_bytecode([fresh])
    py_compile.compile(str(fresh))
    assert not stale_bytecode([fresh])
    fresh.write_text("x = 22\n")
    assert stale_bytecode([fresh])


# ---------------------------------------------------------------- CPU-tier-only workarounds


def _fake_distrib_optimizer_module() -> types.ModuleType:
    """The shape of megatron.core.optimizer.distrib_optimizer that the workaround touches:
    a state_dict() that asserts one common `step` across the torch Adam's parameter states."""
    import torch

    module = types.ModuleType("fake_distrib_optimizer")
    module.HAVE_APEX_OR_TE = False

    class DistributedOptimizer:
        optimizer_state_keys = ("exp_avg", "exp_avg_sq")

        def __init__(self) -> None:
            self.param = torch.nn.Parameter(torch.ones(3))
            self.optimizer = torch.optim.Adam([self.param])

        def _get_state_key_dtype(self, key: str) -> torch.dtype:
            return torch.float32

        def state_dict(self) -> dict:
            inner = self.optimizer.state_dict()
            steps = list({s["step"].item() for s in inner["state"].values()})
            assert len(steps) == 1
            return {"step": steps[0]}

    module.DistributedOptimizer = DistributedOptimizer
    return module


def test_never_stepped_adam_workaround_lets_the_load_template_build():
    module = _fake_distrib_optimizer_module()
    with pytest.raises(AssertionError):  # Megatron's own state_dict on a never-stepped torch Adam
        module.DistributedOptimizer().state_dict()
    (w,) = [w for w in megatron_cpu_workarounds.WORKAROUNDS if w.name == "never-stepped-adam-state-dict"]
    w.apply(module)
    opt = module.DistributedOptimizer()
    assert opt.state_dict() == {"step": 0.0}
    state = opt.optimizer.state[opt.param]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"} and not state["exp_avg"].any()
    # A stepped optimizer is left to Megatron's code untouched.
    opt.param.grad = opt.param.detach().clone()
    opt.optimizer.step()
    assert opt.state_dict() == {"step": 1.0}


def test_every_workaround_names_its_defect_and_upstream_reference():
    for w in megatron_cpu_workarounds.WORKAROUNDS:
        assert w.defect and w.upstream and w.module.startswith("megatron."), w.name


def test_workarounds_apply_when_megatron_imports_the_module(tmp_path):
    """The post-import hook patches the module right after its own code ran."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "target.py").write_text("VALUE = 1\n")
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from harness.workloads import megatron_cpu_workarounds as w\n"
            "sys.meta_path.insert(0, w._AfterImport('fakepkg.target', lambda m: setattr(m, 'VALUE', m.VALUE + 41)))\n"
            "import fakepkg.target\nprint(fakepkg.target.VALUE)\n") % str(tmp_path)
    done = run_in_session([sys.executable, "-c", code], timeout_s=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "42", done.stdout + done.stderr


def test_installed_megatron_gets_the_workaround_in_a_worker():
    where = _installed_megatron_cpu()
    env = {**os.environ, cuda_cpu_shim.ENV_FLAG: "1", "LOCAL_RANK": "0", "PYTHONPATH": f"{where}:{ROOT}"}
    code = ("from megatron.core.optimizer import distrib_optimizer as d\n"
            "print(getattr(d.DistributedOptimizer.state_dict, '__nvrx_qual_workaround__', False))\n")
    done = run_in_session([sys.executable, "-c", code], timeout_s=120, env=env)
    assert done.stdout.strip().splitlines()[-1] == "True", done.stdout + done.stderr[-2000:]
