#!/usr/bin/env bash
# Install an NVRx release side by side with the one pip resolves here, for the launcher
# version matrix: `pip install nvidia-resiliency-ext` gives 0.4.1 on glibc < 2.39 or
# Python 3.11, while clusters run 0.6/0.7. NVRx 0.7.0's Python code runs on 3.11 (only its
# CUPTI straggler module is compiled), so its manylinux_2_39/cp312 wheel is unpacked into
# DIR with --target, and its dependencies are installed normally into the current env.
# The test suite finds DIR under .nvrx/ (ini option nvrx_launcher_dirs).
#
#   tools/install-nvrx-target.sh 0.7.0 .nvrx/0.7.0
set -euo pipefail
version=${1:?usage: $0 VERSION DIR}
dir=${2:?usage: $0 VERSION DIR}
python=${PYTHON:-python}
if [ -e "$dir/nvidia_resiliency_ext" ]; then
  echo "$dir already holds nvidia_resiliency_ext; remove it first to reinstall" >&2
  exit 0
fi
"$python" -m pip install --quiet --target "$dir" --platform manylinux_2_39_x86_64 \
  --python-version 3.12 --only-binary=:all: --no-deps "nvidia-resiliency-ext==$version"
# Its dependencies (without extras, without torch: the CPU build is already installed).
mapfile -t deps < <("$python" - "$dir" <<'PY'
import importlib.metadata as md, sys
dist = next(d for d in md.distributions(path=[sys.argv[1]]) if d.metadata["Name"] == "nvidia-resiliency-ext")
for req in dist.requires or []:
    spec, _, marker = req.partition(";")
    if "extra" in marker or spec.split("(")[0].split(">")[0].split("=")[0].strip() == "torch":
        continue
    print(spec.replace(" (", "").replace(")", "").strip())
PY
)
"$python" -m pip install --quiet "${deps[@]}"
echo "NVRx $version installed in $dir"
