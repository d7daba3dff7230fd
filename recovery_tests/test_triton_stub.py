"""tools/triton_stub.py, the `triton` of the Megatron-for-CPU install: what megatron.core does
with triton at import time works (imports, @triton.jit, @triton.autotune([triton.Config(...)]),
tl.constexpr annotations, subclassing a triton class); running a kernel is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STUB = Path(__file__).resolve().parent.parent / "tools" / "triton_stub.py"

PROBE = r'''
import triton
import triton.language as tl
from triton.runtime.cache import FileCacheManager
from triton import __version__

class Patched(FileCacheManager):  # megatron/core/ssm/triton_cache_manager.py
    pass

@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"])
@triton.jit
def kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass

VALUE: tl.constexpr = tl.constexpr(2.0)  # torch/_inductor/runtime/triton_helpers.py does this at import
print("version", __version__)
print("stub", triton.NVRX_QUAL_STUB)
for launch in (lambda: kernel[(1,)](0, 1), lambda: kernel(0, 1)):
    try:
        launch()
        print("ran")
    except RuntimeError as exc:
        print("refused", "stub" in str(exc))
'''


def test_megatron_import_time_uses_work_and_running_a_kernel_is_refused(tmp_path):
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text(STUB.read_text())
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["version 0.0.0+nvrx-qual-stub", "stub True", "refused True", "refused True"]
