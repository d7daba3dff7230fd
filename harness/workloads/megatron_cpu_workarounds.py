"""CPU-tier-only workarounds for Megatron defects that stop the megatron-cpu run from
starting at all. Nothing here touches what a restore restores: a defect in the restored
state (such as the Adam `step` reset of the DistributedOptimizer, docs/megatron-cpu.md) is left alone
for the suite to catch. Each workaround is listed in docs/megatron-cpu.md with its upstream reference.

Applied, like the CUDA->CPU shim, only in the megatron-cpu workload's workers (see
harness/workloads/megatron_cpu_worker.py), by a post-import hook on the Megatron module it
concerns, so the workers import Megatron exactly when they would anyway.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable


@dataclass(frozen=True)
class Workaround:
    name: str
    module: str  # applied right after this Megatron module is imported
    defect: str  # what fails without it
    upstream: str  # where the defect is described upstream
    apply: Callable[[ModuleType], None]


def _never_stepped_adam_state_dict(module: ModuleType) -> None:
    """Give a never-stepped torch Adam the state it would hold after zero steps (zero moments,
    step 0) before DistributedOptimizer.state_dict() reads it; the load template is built
    from that state dict. Megatron's own code runs unchanged afterwards."""
    import torch

    cls = module.DistributedOptimizer
    original = cls.state_dict
    if getattr(original, "__nvrx_qual_workaround__", False):
        return

    def state_dict(self: Any) -> Any:
        if not module.HAVE_APEX_OR_TE and len(self.optimizer.state) == 0:
            for group in self.optimizer.param_groups:
                for param in group["params"]:
                    self.optimizer.state[param] = {
                        "step": torch.tensor(0.0),
                        **{key: torch.zeros_like(param, dtype=self._get_state_key_dtype(key))
                           for key in self.optimizer_state_keys},
                    }
        return original(self)

    state_dict.__nvrx_qual_workaround__ = True  # type: ignore[attr-defined]
    state_dict.__wrapped__ = original  # type: ignore[attr-defined]
    cls.state_dict = state_dict


WORKAROUNDS: tuple[Workaround, ...] = (
    Workaround(
        name="never-stepped-adam-state-dict",
        module="megatron.core.optimizer.distrib_optimizer",
        defect="without apex and Transformer Engine, DistributedOptimizer.state_dict() asserts len(steps) == 1 on a "
               "torch Adam that has not stepped yet, which is what every restart builds its load template from: "
               "no restart can load a checkpoint",
        upstream="megatron-core 0.19.2 megatron/core/optimizer/distrib_optimizer.py DistributedOptimizer.state_dict "
                 "(`steps = list(set(s['step'].item() ...)); assert len(steps) == 1`); the same load path is "
                 "discussed in radixark/Megatron-LM PR #69 (grafting NVIDIA/Megatron-LM PR #2874)",
        apply=_never_stepped_adam_state_dict,
    ),
)


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `apply` on a module right after its own code ran, wherever it is imported from."""

    def __init__(self, name: str, apply: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.apply_fn = apply
        self.inner: importlib.abc.Loader | None = None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                self.inner = spec.loader
                spec.loader = self
                return spec
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        assert self.inner is not None
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert self.inner is not None
        self.inner.exec_module(module)
        self.apply_fn(module)


def install() -> list[str]:
    """Arm every workaround (applied now if its module is already imported)."""
    names = []
    for w in WORKAROUNDS:
        if w.module in sys.modules:
            w.apply(sys.modules[w.module])
        elif not any(isinstance(f, _AfterImport) and f.name == w.module for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(w.module, w.apply))
        names.append(w.name)
    return names
