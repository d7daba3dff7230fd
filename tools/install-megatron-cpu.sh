#!/usr/bin/env bash
# Install Megatron's own training code for the CPU tier (`--workload megatron-cpu`) and for
# the Megatron-acceptance tests of the plan, from PyPI only, into one directory that the
# workers get on PYTHONPATH. Idempotent: a second call with everything in place does nothing.
#
#   tools/install-megatron-cpu.sh [DIR]        (default: .megatron-cpu)
#
# What goes into DIR (see docs/megatron-cpu.md):
#   megatron/                 megatron-core 0.19.2, unpacked from its cp312 wheel; its code runs on 3.11
#   nvidia_resiliency_ext/    NVRx 0.7.0 (Megatron's --enable-ft-package and async strategy `nvrx`)
#   triton/                   a stub (tools/triton_stub.py): megatron.core imports triton and decorates
#                             kernels with it at module level, and nothing runs them on CPU; the real
#                             package is about 1 GB
#   sitecustomize.py          the one Python 3.11 alias Megatron needs (typing.override), and the hook
#                             that loads the CUDA->CPU shim (harness/workloads/megatron_cpu_worker.py)
#                             into megatron-cpu workers
#   megatron/core/datasets/   dataset helpers compiled for the running Python, and the Makefile that
#                             Megatron's initialize runs `make` on (the wheel ships neither)
#   __pycache__/              the bytecode of megatron/, triton/ and sitecustomize.py, as pip writes
#                             it for the wheels it installs
# NVRx's runtime dependencies (and pyyaml, which its config imports) go into the current
# environment. Nothing from the CUDA stack is installed: the workers get a CUDA->CPU shim.
set -euo pipefail
dir=${1:-.megatron-cpu}
python=${PYTHON:-python}
megatron_version=0.19.2
nvrx_version=0.7.0
triton_stub="$(cd "$(dirname "$0")" && pwd)/triton_stub.py"
triton_sum=$(sha256sum "$triton_stub" | cut -c1-12)

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
stamp="$dir/.installed"
ext_suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
script_sum=$(sha256sum "$0" | cut -c1-12)
want="megatron-core $megatron_version, nvidia-resiliency-ext $nvrx_version, triton stub $triton_sum, helpers$ext_suffix, script $script_sum"
# Written every time (cheap, and an older install gets the current hook).
# Python 3.11: megatron/training/models/{gpt,hybrid}.py import typing.override (3.12); and
#    the hook that loads nvrx-qual's CUDA->CPU shim into the megatron-cpu workload's workers.
cat > "$dir/sitecustomize.py" <<'EOF'
# Written by tools/install-megatron-cpu.sh. Megatron-core 0.19 imports typing.override, new in
# Python 3.12; on 3.11 the same decorator comes from typing_extensions.
import sys
import typing

if sys.version_info < (3, 12) and not hasattr(typing, "override"):
    from typing_extensions import override as _override

    typing.override = _override

# The megatron-cpu workload's workers (and the checkpoint worker each spawns) get nvrx-qual's
# CUDA->CPU shim: only when its plan set NVRX_QUAL_CUDA_CPU_SHIM=1 and the launcher set
# LOCAL_RANK (never in the launcher itself, never elsewhere; it refuses on a real GPU), with
# the CPU-tier-only workarounds of harness/workloads/megatron_cpu_workarounds.py.
import os

if os.environ.get("NVRX_QUAL_CUDA_CPU_SHIM") == "1" and "LOCAL_RANK" in os.environ:
    from harness.workloads import megatron_cpu_worker

    megatron_cpu_worker.install_for_worker()
EOF
"$python" -m py_compile "$dir/sitecustomize.py"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir already holds $want"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. megatron-core: the cp312 wheel is pure Python apart from its dataset helpers.
"$python" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  --python-version 3.12 -d "$tmp/wheels" "megatron-core==$megatron_version"
"$python" -m zipfile -e "$tmp"/wheels/megatron_core-*.whl "$tmp/megatron-core"
rm -rf "$dir/megatron"
cp -r "$tmp/megatron-core/megatron" "$dir/megatron"

# 2. NVRx 0.7.0 beside it (its Python code runs on 3.11), with its dependencies in this env.
if [ ! -e "$dir/nvidia_resiliency_ext" ]; then
  PYTHON="$python" "$(dirname "$0")/install-nvrx-target.sh" "$nvrx_version" "$dir"
fi
# NVRx's fault_tolerance/config.py imports yaml.
"$python" -m pip install --quiet pyyaml
# megatron.core imports triton at module level (moe/paged_stash, inference and SSM kernels) and
# decorates kernels with triton.jit; nothing runs them on CPU. A stub that allows exactly that (and
# raises when anything would run) goes into DIR, not the environment, so only the workers of this
# workload see it; a real triton of an earlier install is removed (about 1 GB).
rm -rf "$dir/triton" "$dir"/triton-*.dist-info
mkdir -p "$dir/triton"
cp "$triton_stub" "$dir/triton/__init__.py"

# 3. The dataset helpers for this interpreter, and the Makefile initialize runs `make` on.
"$python" -m pip install --quiet --upgrade --target "$dir/.build/pybind11" pybind11
pybind11_include=$(PYTHONPATH="$dir/.build/pybind11" "$python" -c 'import pybind11; print(pybind11.get_include())')
python_include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
datasets="$dir/megatron/core/datasets"
cat > "$datasets/Makefile" <<EOF
# Written by tools/install-megatron-cpu.sh: Megatron's initialize runs \`make\` here (the wheel
# ships no Makefile). The helpers are built at install time, so this finds them up to date.
OUT := helpers_cpp$ext_suffix
default: \$(OUT)
\$(OUT): helpers.cpp
	\$(CXX) -O3 -Wall -shared -std=c++11 -fPIC -I$pybind11_include -I$python_include \$< -o \$@
EOF
rm -f "$datasets"/helpers_cpp*.so
make --quiet -C "$datasets"

# 4. Bytecode, as pip writes it for every wheel it installs: megatron/ and triton/ were unpacked
# by hand above, so without this every worker (and every checkpoint worker it spawns) compiles
# Megatron's ~550 modules from source where PYTHONDONTWRITEBYTECODE is set (CI images, many
# containers): about 0.6 s of CPU per process (docs/figures.md).
"$python" -m compileall -q -j 0 "$dir/megatron" "$dir/triton" >/dev/null

echo "$want" > "$stamp"
echo "Megatron for CPU installed in $dir ($want)"
