"""A stand-in for `triton`, copied to DIR/triton/__init__.py by tools/install-megatron-cpu.sh.

megatron-core 0.19 imports triton at module level (its MoE paged stash, inference and SSM
kernels) and decorates kernels with `triton.jit`; on CPU nothing runs them, and the real
package is about 1 GB. This module lets those imports, decorations and module-level values
(`triton.Config(...)`, `tl.constexpr(...)`) happen as inert stubs, and refuses what would run:
launching or calling a kernel that `triton.jit` decorated raises RuntimeError naming it. Any
`triton.*` submodule imports as a stub module (a finder on sys.meta_path, limited to this
package's names). CamelCase attributes are classes, so that `class X(FileCacheManager)` defines.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+nvrx-qual-stub"  # compares below every real triton: version-gated features stay off
NVRX_QUAL_STUB = True


def _refuse(name: str):
    raise RuntimeError(f"{name}: triton is a stub in this Megatron-for-CPU install (tools/install-megatron-cpu.sh); "
                       "nothing may run a triton kernel on CPU")


class _Stub:
    """An attribute, decorator or kernel of the stub: decorates, indexes and nests; never runs."""

    def __init__(self, name: str, fn=None):
        self._name, self._fn = name, fn
        if fn is not None:
            self.__name__ = getattr(fn, "__name__", name)
            self.__doc__ = getattr(fn, "__doc__", None)

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _attribute(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        if self._fn is not None:  # a decorated kernel, launched or called: this is running triton
            _refuse(self._name)
        if len(args) == 1 and callable(args[0]) and not kwargs and not isinstance(args[0], _Stub):
            return _Stub(f"{self._name}({getattr(args[0], '__name__', '?')})", args[0])  # @triton.jit
        if len(args) == 1 and isinstance(args[0], _Stub) and args[0]._fn is not None:
            return _Stub(f"{self._name}({args[0]._name})", args[0]._fn)  # @triton.autotune(...) over @triton.jit
        return _Stub(f"{self._name}(...)")  # a decorator factory or a module-level value: inert

    def __getitem__(self, item):
        return _Stub(f"{self._name}[...]", self._fn) if self._fn is not None else self

    def __repr__(self) -> str:
        return f"<triton stub {self._name}>"


def _attribute(name: str):
    last = name.rsplit(".", 1)[-1]
    if last[:1].isupper() and not last.isupper():
        def init(self, *args, **kwargs):
            _Stub.__init__(self, f"{name}(...)")
        return type(last, (_Stub,), {"__init__": init, "__module__": name.rsplit(".", 1)[0]})
    return _Stub(name)


def __getattr__(item: str):
    if item.startswith("__"):
        raise AttributeError(item)
    return _attribute(f"triton.{item}")


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import triton.language`, `from triton.runtime.cache import X`: stub modules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda item, _n=spec.name: (_ for _ in ()).throw(AttributeError(item)) \
            if item.startswith("__") else _attribute(f"{_n}.{item}")
        return module

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.append(_Submodules())
