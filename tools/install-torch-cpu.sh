#!/usr/bin/env bash
# Install PyTorch's CPU build into the current environment, from PyTorch's CPU wheel index
# when it can be reached, else with plain pip (which follows your pip configuration: an
# index-url, find-links to a wheel directory), and say which build it got.
#
#   tools/install-torch-cpu.sh [VERSION]        (default 2.13.0; PYTHON names the interpreter)
#   NVRX_QUAL_TORCH_INDEX=URL                   a mirror of https://download.pytorch.org/whl/cpu;
#                                               empty: skip the index, plain pip only
#
# pip install torch from PyPI resolves the CUDA build on Linux x86-64 (hundreds of MB plus the
# nvidia-* wheels); the CPU tier never needs it. A CUDA build that arrives anyway (the fallback)
# still works, and is announced with a WARNING.
#
# numpy comes first, with plain pip: torch imports it when it is there, and an `import torch`
# without it warns "Failed to initialize NumPy" (this script imports torch to name the build).
set -euo pipefail
version=${1:-2.13.0}
python=${PYTHON:-python}
default_index=https://download.pytorch.org/whl/cpu
index=${NVRX_QUAL_TORCH_INDEX-$default_index}

say() { echo "install-torch: $*"; }

reachable() {  # the index answers for torch within 10 s
  "$python" - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10).close()
PY
}

say "pip install numpy (before torch, which imports it)"
"$python" -m pip install --quiet numpy
if [ -z "$index" ]; then
  say "NVRX_QUAL_TORCH_INDEX is empty: plain pip install torch==$version (your pip configuration decides the build)"
  "$python" -m pip install --quiet "torch==$version"
elif reachable "$index"; then
  say "pip install torch==$version --index-url $index (the CPU build)"
  "$python" -m pip install --quiet "torch==$version" --index-url "$index"
else
  say "$index cannot be reached: falling back to plain pip install torch==$version" \
      "(your pip configuration decides the build; set NVRX_QUAL_TORCH_INDEX to a mirror of $default_index)"
  "$python" -m pip install --quiet "torch==$version"
fi

build=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda or "cpu")')
read -r got cuda <<<"$build"
if [ "$cuda" = cpu ]; then
  say "installed torch $got, the CPU build"
else
  say "WARNING: installed torch $got, a CUDA $cuda build (large; the CPU tier does not need it)." \
      "For the CPU build: pip uninstall torch, then rerun with NVRX_QUAL_TORCH_INDEX=<a mirror of $default_index>"
fi
