"""The workloads the suite qualifies, each one `Workload` (harness.workloads.base) asked by
name: `get(name)`, `names()`. The built-in ones (megatron, megatron-cpu, megatron-bridge, reference) are loaded on
first use, so a training worker that imports a module of this package pays for none of them;
`register` adds one defined elsewhere (recovery_tests/test_workload_type.py defines one in a
single file)."""

from __future__ import annotations

from harness.workloads.base import Determinism, Workload, register, unregister, _REGISTRY

__all__ = ["Determinism", "Workload", "find", "get", "names", "register", "unregister"]

# The built-in workloads, in the order --help lists them: module and class.
BUILTIN = (("harness.workloads.megatron", "Megatron"), ("harness.workloads.megatron_cpu", "MegatronCpu"),
           ("harness.workloads.megatron_bridge", "MegatronBridge"), ("harness.workloads.reference_args", "Reference"))
_loaded = False
DEFAULT = "megatron"  # the workload of a run that names none (the seed's GPU run)


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    import importlib

    for module, name in BUILTIN:
        register(getattr(importlib.import_module(module), name)())
    _loaded = True


def names() -> tuple[str, ...]:
    """Every known workload's name, the built-in ones first."""
    _load_builtin()
    return tuple(_REGISTRY)


def find(name: object) -> Workload | None:
    """The workload of this name, or None (a run.json from elsewhere may name anything)."""
    _load_builtin()
    return _REGISTRY.get(name) if isinstance(name, str) else None


def get(name: str) -> Workload:
    """The workload of this name; KeyError naming the known ones when there is none."""
    found = find(name)
    if found is None:
        raise KeyError(f"no workload {name!r}: one of {', '.join(names())}")
    return found
