"""Transformer Engine and apex as the workers' interpreter imports them (harness.machine.discovery),
and how the planner uses what it finds (resolve.detected_defaults)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.machine import discovery
from harness.plan import resolve
from harness.machine.discovery import APEX_MODULES, WorkerImports
from harness.plan.spec import SpecError


def fake_site(root: Path, modules: dict[str, str]) -> Path:
    """A directory of importable modules: dotted name -> source."""
    for name, source in modules.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            pkg = root.joinpath(*parts[:i])
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").touch()
        path = root.joinpath(*parts[:-1]) / f"{parts[-1]}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


def probe(site: Path) -> WorkerImports:
    # A fresh interpreter with only `site` added: what the workers would see.
    return discovery.worker_imports(["env", f"PYTHONPATH={site}", sys.executable])


def test_everything_importable_is_found(tmp_path):
    site = fake_site(tmp_path, {"transformer_engine.pytorch": "", **{m: "" for m in APEX_MODULES}})
    assert probe(site) == WorkerImports(True, True)


def test_apex_without_its_cuda_extensions_is_absent(tmp_path):
    """A Python-only apex (no --cuda_ext) gives Megatron nothing: the fallbacks are needed."""
    site = fake_site(tmp_path, {"apex": "", "transformer_engine.pytorch": ""})
    assert probe(site) == WorkerImports(True, False)


def test_a_package_that_is_found_but_fails_to_import_is_absent(tmp_path):
    """find_spec would say yes; the import (what Megatron does) says no."""
    site = fake_site(tmp_path, {"transformer_engine.pytorch": "raise OSError('libcudnn.so.9: cannot open')",
                                **{m: "" for m in APEX_MODULES}})
    assert probe(site) == WorkerImports(False, True)


def test_an_interpreter_that_does_not_run_is_a_problem_not_a_guess(tmp_path):
    found = discovery.worker_imports([str(tmp_path / "no-such-python")])
    assert (found.transformer_engine, found.apex) == (None, None) and "could not run" in found.problem


def test_declared_values_skip_the_probe():
    def never(python):
        raise AssertionError("probed although both were declared")

    found = resolve.detected_defaults({"workload": "megatron", "transformer_engine": "0", "apex": "1", "uv": "0"}, {},
                                  probe=never)
    assert "transformer_engine" not in found and "apex" not in found


def test_the_probe_runs_in_the_workers_interpreter():
    seen = []

    def fake(python):
        seen.append(python)
        return WorkerImports(False, True)

    found = resolve.detected_defaults({"workload": "megatron", "python": "/opt/venv/bin/python", "uv": "0"}, {},
                                  probe=fake)
    assert seen == [["/opt/venv/bin/python"]] and (found["transformer_engine"], found["apex"]) == (False, True)
    resolve.detected_defaults({"workload": "megatron", "uv": "1", "transformer_engine": "1"}, {}, probe=fake)
    assert seen[-1] == ["uv", "run", "--no-sync", "python"]


def test_an_interpreter_that_cannot_tell_refuses_the_plan():
    with pytest.raises(SpecError, match="--transformer-engine 0\\|1 --apex 0\\|1"):
        resolve.detected_defaults({"workload": "megatron", "uv": "0"}, {},
                              probe=lambda python: WorkerImports(None, None, "cannot import torch"))
