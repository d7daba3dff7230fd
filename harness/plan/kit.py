"""`nvrx-qual kit DIR --megatron-path CHECKOUT`: everything a bare GPU node with Python 3.12
and a CUDA build of torch needs to run the GPU tier offline, in one new directory.

    DIR/
      run-gpu-qualification.sh   installs the kit offline into a venv of its own (which sees the
                                 node's torch) and runs kill, hang and none on one GPU, fault
                                 rank 0, and the checkpoint-tier cases (a non-persistent global
                                 restore, a local-checkpoint restore, an in-process restart after
                                 an exception) and the GPU-only fault kinds (gpu-hang, gpu-error),
                                 short deadline profile, within a time limit;
                                 writes OUT/SUMMARY.md
      wheels/no-deps/            megatron-core, nvidia-resiliency-ext, nvrx-qual: installed
                                 without their declared dependencies (NVRx declares a service
                                 stack - fastapi, uvicorn, pydantic, grpcio-tools, ... - that
                                 the launcher never imports; torch is the node's own)
      wheels/deps/               what those import at run time, resolved by pip for the target
                                 (RUNTIME_REQUIREMENTS), and the test runner
      requirements.txt           RUNTIME_REQUIREMENTS, installed from wheels/deps only
      megatron-lm/               pretrain_gpt.py, gpt_builders.py, model_provider.py from the
                                 checkout (the wheel has none of them)
      megatron-datasets.Makefile the Makefile megatron-core's wheel lacks: Megatron's initialize
                                 runs `make` in megatron/core/datasets and rank 0 exits when it
                                 fails; the wheel ships the compiled helpers, so it only checks
      nvrx-qual-src.tar.gz       this project's tests (pytest -m gpu runs from them)
      MANIFEST.json              every file with its sha256 and where it came from

Downloads come from PyPI through pip; nothing else is fetched. An existing DIR is refused.

The manifest is checked where the kit is used: before it creates or installs anything, the
script prints the sha256 of MANIFEST.json (to be compared, out of band, with the one `nvrx-qual
kit` printed when the kit was made) and refuses a kit in which any file differs from its
manifest entry, a listed file is missing, or a file, link or other entry is not listed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from harness import HOME
from harness.safe import atomic

PROJECT = HOME  # the checkout the kit copies nvrx-qual from

MEGATRON_CORE = "megatron-core==0.19.2"
NVRX = "nvidia-resiliency-ext==0.7.0"
MEGATRON_FILES = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")
# The target: a current NGC-like node (Python 3.12, glibc >= 2.39 for NVRx 0.7.0's wheel). pip
# takes a --platform literally, so every older manylinux tag such a node accepts is listed too.
PYTHON_VERSION = "3.12"
PLATFORM = "manylinux_2_39_x86_64"
PLATFORMS = (PLATFORM, *(f"manylinux_2_{minor}_x86_64" for minor in range(38, 16, -1)), "manylinux2014_x86_64",
             "linux_x86_64")
# What the GPU tier imports at run time beyond torch (checked against the sources):
# - NVRx 0.7.0's launcher, rank monitors and async checkpointing: grpc + google.protobuf (its
#   log aggregation service), httpx (and with it httpcore, h11, anyio, certifi, idna), defusedxml,
#   yaml (fault_tolerance/config.py), psutil, packaging, numpy;
# - megatron-core 0.19.2: numpy, packaging>=24.2 (its declared dependencies besides torch);
# - nvrx-qual: numpy, psutil, filelock, ahocorasick-rs (the history reader's screen), pytest, pytest-timeout.
RUNTIME_REQUIREMENTS = (
    "grpcio>=1.76,<2", "protobuf>=6,<7", "httpx>=0.24", "defusedxml", "pyyaml", "psutil>=6.0", "packaging>=24.2",
    "numpy>=1.26", "filelock>=3.12", "ahocorasick-rs>=1.0", "pytest>=8", "pytest-timeout>=2.3",
)
SCRIPT_NAME = "run-gpu-qualification.sh"
MANIFEST_NAME = "MANIFEST.json"
# 24 minutes: kill, hang, none, the three tier cases (non-persistent, local, in-process) and the two
# GPU-only kinds (gpu-hang, gpu-error), 3 each (18 minutes before the GPU kinds joined)
TIME_LIMIT_S = 1440
MAKEFILE = """\
# Written by nvrx-qual kit. megatron-core's wheel ships the dataset helpers compiled
# (helpers_cpp*.so) but no Makefile, and Megatron's initialize runs `make` here: rank 0 exits
# when make fails. Nothing to build; this only checks that the helpers are there.
HELPERS := $(wildcard helpers_cpp*.so)
default:
\t@test -n "$(HELPERS)" || { echo "megatron/core/datasets: helpers_cpp*.so is missing: reinstall megatron-core" >&2; exit 1; }
"""


class KitError(ValueError):
    """Input refused before anything is written; str() is one line per problem."""


Runner = Callable[[Sequence[str]], None]


def _run(argv: Sequence[str]) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise KitError(f"{' '.join(argv[:4])} ... failed with exit status {proc.returncode}:\n{tail}")


@dataclass(frozen=True)
class Kit:
    root: Path
    files: tuple[tuple[str, str], ...]  # (path relative to root, sha256)
    manifest_sha256: str  # of MANIFEST.json itself: the value to compare out of band on the node


def problems(dest: Path, megatron_path: Path | None, project: Path) -> list[str]:
    out = []
    if dest.exists() or dest.is_symlink():
        out.append(f"{dest} already exists: name a new directory; an existing kit or anything else is never "
                   "overwritten")
    if megatron_path is None:
        out.append("--megatron-path is required: a Megatron-LM checkout (core_r0.19.0, matching megatron-core 0.19.2) "
                   f"holding {', '.join(MEGATRON_FILES)}")
    else:
        missing = [name for name in MEGATRON_FILES if not (megatron_path / name).is_file()]
        if missing:
            out.append(f"--megatron-path {megatron_path} has no {', '.join(missing)}: point it at the root of a "
                       "Megatron-LM checkout (git clone -b core_r0.19.0 https://github.com/NVIDIA/Megatron-LM)")
    if not (project / "pyproject.toml").is_file() or not (project / "recovery_tests").is_dir():
        out.append(f"{project} is not an nvrx-qual source checkout (no pyproject.toml and recovery_tests/): run the "
                   "kit command from one")
    return out


def assemble(dest: Path, megatron_path: Path | None, *, project: Path, run: Runner = _run,
             python: str = sys.executable) -> Kit:
    """Build the kit in `dest` (a new directory). Raises KitError, before writing anything,
    for bad input; a failed download leaves the partial directory (named in the error)."""
    found = problems(dest, megatron_path, project)
    if found:
        raise KitError("\n".join(found))
    assert megatron_path is not None
    dest.mkdir(parents=True)
    try:
        _fill(dest, megatron_path, project, run, python)
    except KitError as exc:
        raise KitError(f"{exc}\nthe incomplete kit is left in {dest}: remove it before trying again") from None
    return _manifest(dest, megatron_path, project)


def _fill(dest: Path, megatron_path: Path, project: Path, run: Runner, python: str) -> None:
    target = ["--only-binary=:all:", *(w for tag in PLATFORMS for w in ("--platform", tag)),
              "--python-version", PYTHON_VERSION,
              "--implementation", "cp", "--abi", f"cp{PYTHON_VERSION.replace('.', '')}"]
    no_deps, deps = dest / "wheels" / "no-deps", dest / "wheels" / "deps"
    no_deps.mkdir(parents=True)
    deps.mkdir(parents=True)
    # python -I: nothing on sys.path from the current directory, PYTHONPATH or the user's site-packages
    run([python, "-I", "-m", "pip", "download", "--quiet", "--no-deps", *target, "-d", str(no_deps), MEGATRON_CORE,
         NVRX])
    run([python, "-I", "-m", "pip", "download", "--quiet", *target, "-d", str(deps), *RUNTIME_REQUIREMENTS])
    run([python, "-I", "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(no_deps), str(project)])
    (dest / "requirements.txt").write_text("\n".join(RUNTIME_REQUIREMENTS) + "\n")
    (dest / "megatron-lm").mkdir()
    for name in MEGATRON_FILES:
        shutil.copyfile(megatron_path / name, dest / "megatron-lm" / name)
    (dest / "megatron-datasets.Makefile").write_text(MAKEFILE)
    _source_archive(project, dest / "nvrx-qual-src.tar.gz", run)
    script = dest / SCRIPT_NAME
    script.write_text(RUN_SCRIPT)
    script.chmod(0o755)


def _source_archive(project: Path, out: Path, run: Runner) -> None:
    """The committed tree of this checkout (tests, conftest, pyproject), as git has it."""
    run(["git", "-C", str(project), "archive", "--format=tar.gz", "--prefix=nvrx-qual/", "-o", str(out), "HEAD"])


def _git(path: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest(dest: Path, megatron_path: Path, project: Path) -> Kit:
    files = tuple((p.relative_to(dest).as_posix(), _sha256(p))
                  for p in sorted(dest.rglob("*")) if p.is_file() and not p.is_symlink())
    version = re.search(r"^MINOR\s*=\s*(\d+)", _read(megatron_path / "megatron" / "core" / "package_info.py"), re.M)
    record = {
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "target": {"python": PYTHON_VERSION, "platform": PLATFORM, "torch": "the node's own CUDA build"},
        "pins": {"megatron_core": MEGATRON_CORE, "nvidia_resiliency_ext": NVRX, "runtime": list(RUNTIME_REQUIREMENTS)},
        "megatron_lm": {"path": str(megatron_path), "commit": _git(megatron_path, "rev-parse", "HEAD"),
                        "core_minor": int(version.group(1)) if version else None, "files": list(MEGATRON_FILES)},
        "nvrx_qual": {"commit": _git(project, "rev-parse", "HEAD"),
                      "uncommitted_changes": bool(_git(project, "status", "--porcelain", "--untracked-files=no"))},
        "files": {rel: sha for rel, sha in files},
    }
    atomic.write_text(dest / MANIFEST_NAME, json.dumps(record, indent=2) + "\n")
    return Kit(dest, files, _sha256(dest / MANIFEST_NAME))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# How the script starts the tests: `python -I -c ISOLATED_PYTEST SOURCE ARGS...`, i.e. `python -m
# pytest ARGS...` with the kit's unpacked source SOURCE first on sys.path and neither the current
# directory, PYTHONPATH nor the user's site-packages on it. Every other Python the script runs is
# `python -I` too: a torch.py (or pip, venv, megatron) in the folder it is run from is never imported.
ISOLATED_PYTEST = "import sys; sys.path.insert(0, sys.argv.pop(1)); import pytest; sys.exit(pytest.main())"

RUN_SCRIPT = r"""#!/usr/bin/env bash
# nvrx-qual GPU kit: install offline, then qualify kill, hang and none on one GPU (fault rank 0)
# with the short deadline profile, inside a time limit, and Megatron's other recovery layers
# (docs/tiers.md): a kill restored from a non-persistent global checkpoint, a kill restored from
# a local checkpoint (NVRx's LocalCheckpointManager; replicated to a peer with two GPUs or more),
# and an exception in the fault rank's step recovered by an in-process restart (--inprocess-restart).
# (On a node with two or more GPUs the same tests use two GPUs and fault rank 1, the
# walkthrough's default.) Then the GPU-only fault kinds, which the CPU tiers refuse: gpu-hang (a
# never-ending kernel, detected by the rank monitor's timeout) and gpu-error (an illegal memory
# access, a sticky CUDA error: the rank dies, the group restarts) (docs/faults.md).
#
#   ./run-gpu-qualification.sh [OUT_DIR]      (default: ./nvrx-qual-gpu-<UTC time>; beside the kit when
#                                             run from inside it, which must stay as its manifest lists)
#
# Needs: Python 3.12 with a CUDA build of torch (PYTHON, default python3), an NVIDIA GPU,
# make and tar. Changes nothing outside OUT_DIR: the packages go into OUT_DIR/venv, a venv that
# sees the interpreter's own torch. Every Python it runs is `python -I`: nothing is imported from
# the folder it is run from (a torch.py there is not torch). Writes OUT_DIR/SUMMARY.md; exit status is pytest's (0: all
# qualified), 2 for a kit that does not match its MANIFEST.json or a node that cannot run it
# (before anything is installed), 124 when the time limit
# (NVRX_KIT_TIME_LIMIT_S, default __LIMIT__ s) ran out.
set -euo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
limit=${NVRX_KIT_TIME_LIMIT_S:-__LIMIT__}
default_base=$PWD
case "$PWD/" in "$kit"/*) default_base=$(dirname "$kit") ;; esac  # never inside the kit: it must stay as listed
out=${1:-$default_base/nvrx-qual-gpu-$(date -u +%Y%m%dT%H%M%SZ)}
if [ -e "$out" ]; then
  echo "nvrx-qual kit: $out already exists: name a new directory (nothing is overwritten)" >&2
  exit 2
fi
case "$(cd "$(dirname "$out")" 2>/dev/null && pwd)/" in
  "$kit"/*) echo "nvrx-qual kit: $out lies inside the kit $kit: name a directory outside it" >&2; exit 2 ;;
esac
# Every file of the kit against MANIFEST.json, before anything is created or installed: a
# changed, missing or unlisted file (or a link, or anything not a plain file) refuses the kit.
# The manifest's own sha256 is printed first, to be compared with the one `nvrx-qual kit`
# printed where the kit was made (this script checks the files; only that comparison, made
# out of band, vouches for the manifest and this script themselves).
"$python" -I - "$kit" <<'EOF' || exit 2
import hashlib, json, os, stat, sys

kit = sys.argv[1]


def digest(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a plain file")
        h = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
        return h.hexdigest()


manifest = os.path.join(kit, "__MANIFEST__")
try:
    print(f"nvrx-qual kit: {manifest} sha256 {digest(manifest)} (compare it with the one printed where the kit was "
          "made)", flush=True)
    with open(manifest, "rb") as f:
        listed = json.loads(f.read()).get("files")
except (OSError, ValueError, AttributeError) as exc:
    sys.exit(f"nvrx-qual kit: {manifest} cannot be read as the kit's manifest ({exc}): copy the kit again")
if not isinstance(listed, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in listed.items()):
    sys.exit(f"nvrx-qual kit: {manifest} has no table of files and hashes: copy the kit again")
problems = []
seen = set()
for top, dirs, files in os.walk(kit, onerror=lambda exc: problems.append(f"{exc.filename} cannot be listed")):
    for name in sorted(dirs + files):
        path = os.path.join(top, name)
        rel = os.path.relpath(path, kit)
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode) or rel == "__MANIFEST__":
            continue
        seen.add(rel)
        if not stat.S_ISREG(mode):
            problems.append(f"{rel} is a link or a special file, not a file of the kit")
        elif rel not in listed:
            problems.append(f"{rel} is not in the manifest")
        else:
            try:
                if digest(path) != listed[rel]:
                    problems.append(f"{rel} differs from its manifest entry (sha256)")
            except OSError as exc:
                problems.append(f"{rel} cannot be read ({exc})")
problems += [f"{rel} is in the manifest but missing" for rel in sorted(set(listed) - seen)]
if problems:
    for problem in problems:
        print(f"nvrx-qual kit: refused: {problem}", file=sys.stderr)
    sys.exit(f"nvrx-qual kit: the kit in {kit} does not match its manifest ({len(problems)} problem(s)); nothing "
             "was installed: copy the kit again from where it was made")
print(f"nvrx-qual kit: all {len(seen)} files match the manifest", flush=True)
EOF
"$python" -I - <<'EOF' || exit 2
import sys
if sys.version_info[:2] != (3, 12):
    sys.exit(f"nvrx-qual kit: Python {sys.version.split()[0]}: the kit's wheels are for 3.12; set PYTHON to a 3.12 interpreter")
try:
    import torch
except ImportError:
    sys.exit("nvrx-qual kit: torch is not installed for this interpreter: install a CUDA build of torch first")
if not torch.cuda.is_available():
    sys.exit(f"nvrx-qual kit: torch {torch.__version__} sees no GPU: install a CUDA build and check the driver")
EOF
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/install.log"
echo "nvrx-qual kit: installing into $out/venv (offline; log: $log)"
"$python" -I -m venv --system-site-packages "$out/venv"
venv_python="$out/venv/bin/python"
{
  "$venv_python" -I -m pip install --no-index --no-deps "$kit"/wheels/no-deps/*.whl
  "$venv_python" -I -m pip install --no-index --find-links "$kit/wheels/deps" -r "$kit/requirements.txt"
} >"$log" 2>&1 || { echo "nvrx-qual kit: offline install failed; see $log" >&2; exit 2; }
datasets=$("$venv_python" -I -c 'import importlib.util as u; print(u.find_spec("megatron.core.datasets").submodule_search_locations[0])')
if [ ! -e "$datasets/Makefile" ]; then
  cp "$kit/megatron-datasets.Makefile" "$datasets/Makefile"
fi
make --quiet -C "$datasets" || { echo "nvrx-qual kit: megatron/core/datasets is incomplete" >&2; exit 2; }
tar -xzf "$kit/nvrx-qual-src.tar.gz" -C "$out"
cd "$out/nvrx-qual"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
set +e
timeout -s INT -k 60 "$limit" \
  "$venv_python" -I -c '__PYTEST__' "$out/nvrx-qual" -m gpu -k test_megatron_single_node --require-gpu -p no:cacheprovider \
  --megatron-path "$kit/megatron-lm" --deadline-profile short --work-dir "$out/work" \
  --junitxml "$out/junit.xml" -rA 2>&1 | tee "$out/pytest.log"
status=${PIPESTATUS[0]}
set -e
ended=$(date -u +%Y-%m-%dT%H:%M:%SZ)
{
  echo "# nvrx-qual GPU kit run"
  echo
  echo "- Started: $started, ended: $ended (limit $limit s)"
  echo "- GPUs: $(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null | paste -sd ';' - || echo unknown)"
  echo "- Python: $("$venv_python" -I -c 'import sys, torch; print(sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda)')"
  echo "- pytest exit status: $status$([ "$status" = 124 ] && echo ' (time limit reached)')"
  echo "- Run directories: $out/work/runs; JUnit XML: $out/junit.xml"
  echo
  echo "## Outcome per test"
  echo
  echo '```'
  grep -E '^(PASSED|FAILED|ERROR|SKIPPED)|^=+ .* (passed|failed|error)' "$out/pytest.log" || true
  echo '```'
  for summary in "$out"/work/repeats/pytest-*/summary.md; do
    [ -f "$summary" ] && { echo; cat "$summary"; }
  done
} >"$out/SUMMARY.md"
echo "nvrx-qual kit: summary in $out/SUMMARY.md"
exit "$status"
""".replace("__LIMIT__", str(TIME_LIMIT_S)).replace("__MANIFEST__", MANIFEST_NAME).replace("__PYTEST__", ISOLATED_PYTEST)
