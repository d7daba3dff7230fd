#!/usr/bin/env bash
# Install Megatron-Bridge's training code for `--workload megatron-bridge` (docs/megatron-bridge.md),
# from PyPI only, into one directory that the Bridge entrypoint
# (harness/workloads/entrypoints/pretrain_bridge_cpu.py) puts on sys.path. Idempotent: a second
# call with everything in place does nothing. Nothing goes into the current environment.
# .ci/run calls it only under NVRX_QUAL_CI_BRIDGE=1 (docs/testing.md, "The Megatron-Bridge tier").
#
#   tools/install-megatron-bridge.sh [DIR]        (default: .megatron-bridge)
#
# Needs the megatron-cpu install first (tools/install-megatron-cpu.sh): Bridge trains with the
# megatron-core 0.19.2, NVRx 0.7.0, triton stub and CUDA->CPU shim found there
# (MEGATRON_CPU_DIR, default .megatron-cpu), which the smoke import at the end uses.
#
# What goes into DIR:
#   megatron/bridge/   megatron-bridge 0.6.2, unpacked from its py3 wheel (it asks for Python
#                      3.12; its code compiles and its training path runs on 3.11)
#   site/              what `import megatron.bridge.training.pretrain` and `.gpt_step` import
#                      and this environment lacks (pip --target; the entrypoint appends it
#                      after site-packages, so the environment's own versions win). Bridge's
#                      package __init__ imports every model bridge, so transformers, datasets,
#                      megatron-energon and nvidia-modelopt are imported by pretraining too;
#                      energon and modelopt come without their declared dependencies (both
#                      require torch, which would pull the multi-GB CUDA build), with the few
#                      of theirs the import needs named below.
# Not installed (Bridge's declared dependencies its pretraining import does not need):
# diffusers, peft, accelerate, wandb, mlflow, comet-ml, flashinfer, timm, open-clip-torch,
# qwen-vl-utils, mistral-common, flash-linear-attention, fast-hadamard-transform, hydra-core,
# transformer-engine (no CPU build: the entrypoint gives its one unguarded importer a stand-in).
set -euo pipefail
dir=${1:-.megatron-bridge}
python=${PYTHON:-python}
megatron_cpu_dir=${MEGATRON_CPU_DIR:-.megatron-cpu}
bridge_version=0.6.2
# pinned to the versions probed (docs/megatron-bridge.md); the ranges are Bridge's own
site_requirements=(
  "transformers==5.12.1"      # Bridge: >=5.8,<=5.12.1; imported by every model bridge
  "datasets==5.2.0"           # megatron/bridge/data/datasets/gpt_sft.py, module level
  "omegaconf==2.4.0"          # megatron/bridge/models/config.py
  "einops==0.8.2"             # megatron/bridge/models/llama/llama4_utils.py, module level
  "tensorboard==2.21.0"       # megatron/bridge/training/state.py
  "scipy==1.17.1"             # nvidia-modelopt: modelopt/torch/nas/algorithms.py
  "requests==2.34.2"          # nvidia-modelopt: modelopt/torch/utils/dataset_utils.py
  "pulp==3.3.2"               # nvidia-modelopt
  "multi-storage-client==1.3.1" "braceexpand==0.1.7" "rapidyaml==0.15.2" "filetype==1.2.0"
  "webdataset==1.0.2"         # megatron-energon, imported by megatron/bridge/data/builders
)
no_deps=(
  "megatron-energon==7.4.1"   # megatron/bridge/data/energon; declares torch
  "nvidia-modelopt==0.47.0"   # megatron/bridge/training/{checkpointing,eval,gpt_step,train}.py; declares torch
)

if [ ! -f "$megatron_cpu_dir/megatron/core/package_info.py" ]; then
  echo "error: no megatron-core in MEGATRON_CPU_DIR=$megatron_cpu_dir: run tools/install-megatron-cpu.sh first" >&2
  exit 2
fi
megatron_cpu_dir=$(cd "$megatron_cpu_dir" && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
stamp="$dir/.installed"
script_sum=$(sha256sum "$0" | cut -c1-12)
py_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
want="megatron-bridge $bridge_version, python $py_version, script $script_sum"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir already holds $want"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. Bridge's code: its py3 wheel, which declares Python >=3.12.
"$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 -d "$tmp/wheels" \
  "megatron-bridge==$bridge_version"
"$python" -m zipfile -e "$tmp"/wheels/megatron_bridge-*.whl "$tmp/bridge"
rm -rf "$dir/megatron"
mkdir -p "$dir/megatron"
cp -r "$tmp/bridge/megatron/bridge" "$dir/megatron/bridge"

# 2. The libraries its training path imports, then those this environment already has removed
#    again from site/ (the environment's copy is the one imported: site/ comes after it), each
#    one whose version differs named.
rm -rf "$dir/site"
"$python" -m pip install --quiet --target "$dir/site" "${site_requirements[@]}"
"$python" -m pip install --quiet --target "$dir/site" --no-deps "${no_deps[@]}"
"$python" - "$dir/site" <<'EOF'
import importlib.metadata as md
import shutil
import sys
from pathlib import Path


def key(dist):
    return dist.metadata["Name"].lower().replace("_", "-")


site = Path(sys.argv[1]).resolve()
env = {key(d): d.version for d in md.distributions() if Path(d._path).resolve().parent != site}
removed, differ = [], []
for dist in md.distributions(path=[str(site)]):
    name = key(dist)
    if name not in env:
        continue
    if env[name] != dist.version:
        differ.append(f"{name} {env[name]} (site/ had {dist.version})")
    for f in dist.files or ():
        p = (site / f).resolve()
        if p.is_relative_to(site) and p.is_file():
            p.unlink()
    shutil.rmtree(dist._path, ignore_errors=True)
    removed.append(name)
for d in sorted(site.rglob("*"), reverse=True):  # folders left empty
    if d.is_dir() and not any(d.iterdir()):
        d.rmdir()
print(f"site/: left out {len(removed)} distributions this environment has")
if differ:
    print("  at the environment's version, not the one pip chose for site/: " + ", ".join(differ))
EOF
rm -rf "$dir/site/bin"

# 3. Smoke import of the training path, as the entrypoint does it.
NVRX_QUAL_MEGATRON_BRIDGE_DIR="$dir" PYTHONPATH="$megatron_cpu_dir:$(cd "$(dirname "$0")/.." && pwd)" \
  "$python" -W ignore -c '
from harness.workloads import bridge_pretrain as b
b.add_to_path(b.bridge_dir())
b.TeStandIn().install()
import megatron.bridge.training.pretrain, megatron.bridge.training.gpt_step
' > "$tmp/smoke.log" 2>&1 || { tail -20 "$tmp/smoke.log" >&2; echo "error: Bridge's training path does not import" >&2; exit 1; }

echo "$want" > "$stamp"
echo "Megatron-Bridge installed in $dir ($want; $(du -sh "$dir" | cut -f1))"
