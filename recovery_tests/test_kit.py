"""`nvrx-qual kit` / tools/gpu-kit (harness/plan/kit.py): the offline GPU kit.

Fast tests assemble a kit with pip and git replaced by a recorder, and run the kit's own
Makefile and script where a CPU can (refusals before anything is installed). The e2e tests
download the real wheels from PyPI, check that pip resolves the kit offline for the target
(Python 3.12, manylinux_2_39), and that the runtime set is enough to import everything the
GPU tier imports (on this interpreter, with the same packages built for it). The script's GPU
run itself needs a GPU node.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plan import kit
from harness.plan.kit import KitError

ROOT = Path(__file__).resolve().parent.parent
MEGATRON_CPU = ROOT / ".megatron-cpu"


@pytest.fixture
def megatron_lm(tmp_path) -> Path:
    """A stand-in Megatron-LM checkout with the three files the kit takes."""
    root = tmp_path / "Megatron-LM"
    root.mkdir()
    for name in kit.MEGATRON_FILES:
        (root / name).write_text(f"# stand-in {name}\n")
    return root


class Recorder:
    """pip and git as the kit calls them: records the commands, writes what they would."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        argv = [a for i, a in enumerate(argv) if not (i == 1 and a == "-I")]  # python -I -m pip ...
        if argv[1:4] == ["-m", "pip", "download"]:
            dest = Path(argv[argv.index("-d") + 1])
            for req in argv[argv.index("-d") + 2:]:
                name = req.split("=")[0].split(">")[0].split("<")[0].replace("-", "_")
                (dest / f"{name}-0-py3-none-any.whl").write_bytes(name.encode())
        elif argv[1:4] == ["-m", "pip", "wheel"]:
            (Path(argv[argv.index("-w") + 1]) / "nvrx_qual-0.1.0-py3-none-any.whl").write_bytes(b"project")
        elif argv[0] == "git":
            Path(argv[argv.index("-o") + 1]).write_bytes(b"tar")


def test_assembly_lays_out_every_part_and_a_manifest_of_hashes(tmp_path, megatron_lm):
    rec = Recorder()
    built = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=rec)
    root = built.root
    for name in kit.MEGATRON_FILES:
        assert (root / "megatron-lm" / name).read_text() == f"# stand-in {name}\n"
    assert os.access(root / kit.SCRIPT_NAME, os.X_OK)
    assert (root / "requirements.txt").read_text().split() == list(kit.RUNTIME_REQUIREMENTS)
    assert {p.name for p in (root / "wheels" / "no-deps").iterdir()} == {
        "megatron_core-0-py3-none-any.whl", "nvidia_resiliency_ext-0-py3-none-any.whl",
        "nvrx_qual-0.1.0-py3-none-any.whl"}
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["pins"]["megatron_core"] == "megatron-core==0.19.2"
    assert manifest["pins"]["nvidia_resiliency_ext"] == "nvidia-resiliency-ext==0.7.0"
    for rel, sha in manifest["files"].items():
        assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == sha, rel
    assert set(manifest["files"]) == {p.relative_to(root).as_posix() for p in root.rglob("*")
                                      if p.is_file() and p.name != "MANIFEST.json"}
    downloads = [c for c in rec.calls if c[1:5] == ["-I", "-m", "pip", "download"]]
    assert all(["--python-version", "3.12"] == c[c.index("--python-version"):c.index("--python-version") + 2]
               and "--only-binary=:all:" in c and "manylinux_2_39_x86_64" in c for c in downloads)
    assert "--no-deps" in downloads[0] and "--no-deps" not in downloads[1]
    # every Python the assembly runs is isolated from the current directory (python -I)
    pythons = [c for c in rec.calls if c[0] != "git"]
    assert len(pythons) == 3 and all(c[1] == "-I" for c in pythons), pythons


@pytest.mark.parametrize("broken, words", [
    ("exists", "already exists"),
    ("no-checkout", "--megatron-path is required"),
    ("missing-file", "has no gpt_builders.py, model_provider.py"),
])
def test_bad_input_is_refused_before_anything_is_written(tmp_path, megatron_lm, broken, words):
    dest = tmp_path / "kit"
    checkout = megatron_lm
    if broken == "exists":
        dest.mkdir()
        (dest / "mine.txt").write_text("keep")
    elif broken == "no-checkout":
        checkout = None
    else:
        (megatron_lm / "gpt_builders.py").unlink()
        (megatron_lm / "model_provider.py").unlink()
    rec = Recorder()
    with pytest.raises(KitError, match=words):
        kit.assemble(dest, checkout, project=ROOT, run=rec)
    assert rec.calls == []
    assert (dest / "mine.txt").read_text() == "keep" if broken == "exists" else not dest.exists()


def test_a_failed_download_names_the_partial_kit(tmp_path, megatron_lm):
    def offline(argv):
        raise KitError("pip download ... failed with exit status 1:\nNo matching distribution")

    with pytest.raises(KitError, match="incomplete kit is left in"):
        kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=offline)


def test_the_cli_refuses_with_exit_2(tmp_path, capsys, megatron_lm):
    from harness import cli

    (tmp_path / "taken").mkdir()
    assert cli.main(["kit", str(tmp_path / "taken"), "--megatron-path", str(megatron_lm)]) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_datasets_makefile_passes_with_the_wheels_helpers_and_fails_without(tmp_path):
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    (datasets / "Makefile").write_text(kit.MAKEFILE)
    missing = subprocess.run(["make", "-C", str(datasets)], capture_output=True, text=True)
    assert missing.returncode != 0 and "helpers_cpp*.so is missing" in missing.stderr
    (datasets / "helpers_cpp.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    assert subprocess.run(["make", "--quiet", "-C", str(datasets)], capture_output=True).returncode == 0


def run_script(tmp_path, out: Path, python: str, kit_root: Path | None = None) -> subprocess.CompletedProcess:
    """The kit's script: in `kit_root` (an assembled kit), or alone in tmp_path."""
    if kit_root is None:
        script = tmp_path / kit.SCRIPT_NAME
        script.write_text(kit.RUN_SCRIPT)
        script.chmod(0o755)
    else:
        script = kit_root / kit.SCRIPT_NAME
    return subprocess.run([str(script), str(out)], capture_output=True, text=True, env={**os.environ, "PYTHON": python},
                          timeout=120, stdin=subprocess.DEVNULL, start_new_session=True)


def test_the_script_refuses_an_existing_output_directory(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_script(tmp_path, out, sys.executable)
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert list(out.iterdir()) == []


def test_the_script_refuses_a_node_it_cannot_run_on_before_installing(tmp_path, megatron_lm):
    """Python 3.11 here (or 3.12 without a GPU): refused, nothing created."""
    built = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=Recorder())
    proc = run_script(tmp_path, tmp_path / "out", sys.executable, built.root)
    assert proc.returncode == 2, proc.stderr
    assert ("the kit's wheels are for 3.12" in proc.stderr if sys.version_info[:2] != (3, 12)
            else "sees no GPU" in proc.stderr), proc.stderr
    assert not (tmp_path / "out").exists()


# A stand-in interpreter for the script: the node check passes (a GPU node, as far as these tests
# go), `-m venv` makes a venv whose python is this stand-in, `-m pip` only records its arguments,
# and anything else (the manifest check) runs on the real interpreter. Nothing is installed.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "__ALL__"
isolated=; if [ "${1:-}" = "-I" ]; then isolated=1; shift; fi
if [ "$1 $2" = "-m venv" ]; then mkdir -p "${@: -1}/bin" && ln -s "__SELF__" "${@: -1}/bin/python"; exit 0; fi
if [ "$1 $2" = "-m pip" ]; then echo "$*" >> "__LOG__"; exit 0; fi
if [ "$*" = "-" ]; then cat >/dev/null; exit 0; fi
if [ "$1" = "-c" ]; then
  case "$2" in  # with FAKE_DATASETS the run goes on to the tests (stood in for) and the summary
    *find_spec*) [ -n "${FAKE_DATASETS:-}" ] && { echo "$FAKE_DATASETS"; exit 0; } ;;
    *pytest*) [ -n "${FAKE_DATASETS:-}" ] && { echo "PASSED stand-in"; exit 0; } ;;
    *torch*) echo "3.12 | torch stand-in | CUDA stand-in"; exit 0 ;;
  esac
  exit 1  # the installed packages are asked for: the test ends here
fi
exec "__REAL__" ${isolated:+-I} "$@"
"""


@pytest.fixture
def fake_node(tmp_path):
    """(stand-in interpreter, the file where its pip calls land)."""
    log = tmp_path / "pip-calls.log"
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON.replace("__SELF__", str(fake)).replace("__LOG__", str(log))
                    .replace("__ALL__", str(tmp_path / "python-calls.log")).replace("__REAL__", sys.executable))
    fake.chmod(0o755)
    return fake, log


def pip_calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_an_intact_kit_passes_the_manifest_check_and_installs_and_prints_the_manifest_hash(tmp_path, megatron_lm,
                                                                                           fake_node):
    fake, log = fake_node
    built = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=Recorder())
    assert built.manifest_sha256 == hashlib.sha256((built.root / "MANIFEST.json").read_bytes()).hexdigest()
    proc = run_script(tmp_path, tmp_path / "out", str(fake), built.root)
    assert f"MANIFEST.json sha256 {built.manifest_sha256}" in proc.stdout, proc.stdout + proc.stderr
    assert f"all {len(built.files)} files match the manifest" in proc.stdout, proc.stdout + proc.stderr
    calls = pip_calls(log)
    assert len(calls) == 2 and calls[0].startswith("-m pip install --no-index --no-deps"), calls
    assert "nvidia_resiliency_ext-0-py3-none-any.whl" in calls[0]


@pytest.mark.parametrize("tamper, words", [
    ("changed-wheel", "wheels/no-deps/nvidia_resiliency_ext-0-py3-none-any.whl differs from its manifest entry"),
    ("extra-wheel", "wheels/deps/evil-1.0-py3-none-any.whl is not in the manifest"),
    ("extra-anywhere", "megatron-lm/sitecustomize.py is not in the manifest"),
    ("link", "wheels/deps/numpy_link.whl is a link or a special file"),
    ("missing", "requirements.txt is in the manifest but missing"),
    ("changed-requirements", "requirements.txt differs from its manifest entry"),
])
def test_a_kit_that_does_not_match_its_manifest_is_refused_before_anything_is_installed(
        tmp_path, megatron_lm, fake_node, tamper, words):
    fake, log = fake_node
    root = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=Recorder()).root
    if tamper == "changed-wheel":
        wheel = root / "wheels" / "no-deps" / "nvidia_resiliency_ext-0-py3-none-any.whl"
        wheel.write_bytes(wheel.read_bytes() + b"\0")
    elif tamper == "extra-wheel":
        (root / "wheels" / "deps" / "evil-1.0-py3-none-any.whl").write_bytes(b"evil")
    elif tamper == "extra-anywhere":
        (root / "megatron-lm" / "sitecustomize.py").write_text("import os\n")
    elif tamper == "link":
        (root / "wheels" / "deps" / "numpy_link.whl").symlink_to(root / "wheels" / "deps" / "numpy-0-py3-none-any.whl")
    elif tamper == "missing":
        (root / "requirements.txt").unlink()
    else:
        (root / "requirements.txt").write_text("numpy\nevil-package\n")
    proc = run_script(tmp_path, tmp_path / "out", str(fake), root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"refused: {words}" in proc.stderr and "does not match its manifest" in proc.stderr, proc.stderr
    assert "MANIFEST.json sha256 " in proc.stdout  # printed even when refused, to compare out of band
    assert pip_calls(log) == [] and not (tmp_path / "out").exists()


def test_the_script_never_writes_its_output_inside_the_kit(tmp_path, megatron_lm, fake_node):
    """A run from inside the kit puts its output beside it (a later run would find an unlisted
    directory otherwise); an OUT_DIR named inside it is refused."""
    fake, log = fake_node
    root = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=Recorder()).root
    proc = run_script(tmp_path, root / "out", str(fake), root)
    assert proc.returncode == 2 and "lies inside the kit" in proc.stderr, proc.stderr
    beside = subprocess.run([str(root / kit.SCRIPT_NAME)], cwd=root, capture_output=True, text=True,
                            env={**os.environ, "PYTHON": str(fake)}, timeout=120, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    assert "all" in beside.stdout and "files match the manifest" in beside.stdout, beside.stdout + beside.stderr
    made = [p.name for p in tmp_path.iterdir() if p.name.startswith("nvrx-qual-gpu-")]
    assert len(made) == 1 and not any(p.name.startswith("nvrx-qual-gpu-") for p in root.iterdir()), made


def test_the_cli_prints_the_manifest_hash(tmp_path, capsys, megatron_lm, monkeypatch):
    from harness import cli
    from harness.cli import kit as kit_cli

    real = kit.assemble

    def offline(dest, megatron_path, *, project):
        return real(dest, megatron_path, project=project, run=Recorder())

    monkeypatch.setattr(kit_cli, "assemble", offline)
    assert cli.main(["kit", str(tmp_path / "kit"), "--megatron-path", str(megatron_lm)]) == 0
    digest = hashlib.sha256((tmp_path / "kit" / "MANIFEST.json").read_bytes()).hexdigest()
    assert f"MANIFEST.json sha256 {digest}" in capsys.readouterr().out


# ---------------------------------------------------------------- isolated from the current directory


def test_the_scripts_node_check_never_imports_a_torch_py_from_the_current_directory(tmp_path, megatron_lm):
    """The node check imports torch: run from a folder holding a torch.py (a shared scratch
    directory, a download folder), that file must not be what is imported. The script's
    Python version pin is set to this interpreter's (and its manifest entry with it) so that
    the check reaches `import torch` here; everything else is the kit as assembled."""
    root = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=Recorder()).root
    script = root / kit.SCRIPT_NAME
    here = f"!= {tuple(sys.version_info[:2])}"
    script.write_text(script.read_text().replace("!= (3, 12)", here))
    assert here in script.read_text()
    manifest = json.loads((root / kit.MANIFEST_NAME).read_text())
    manifest["files"][kit.SCRIPT_NAME] = hashlib.sha256(script.read_bytes()).hexdigest()
    (root / kit.MANIFEST_NAME).write_text(json.dumps(manifest))
    cwd = tmp_path / "scratch"
    cwd.mkdir()
    imported = tmp_path / "planted-torch-imported"
    (cwd / "torch.py").write_text(f"open({str(imported)!r}, 'w').write('yes')\nraise SystemExit('planted torch')\n")
    proc = subprocess.run([str(script), str(tmp_path / "out")], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}, timeout=120,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert not imported.exists(), "the kit's node check imported ./torch.py: " + proc.stderr
    assert proc.returncode == 2 and "sees no GPU" in proc.stderr, proc.stderr  # the installed torch answered
    assert not (tmp_path / "out").exists()


class ArchivingRecorder(Recorder):
    """As Recorder, with a real source archive (one file under nvrx-qual/) for the script to unpack."""

    def __call__(self, argv):
        super().__call__(argv)
        if argv[0] == "git":
            import tarfile
            out = Path(argv[argv.index("-o") + 1])
            readme = out.parent / "README.md"
            readme.write_text("stand-in source\n")
            with tarfile.open(out, "w:gz") as tar:
                tar.add(readme, arcname="nvrx-qual/README.md")
            readme.unlink()


def test_every_python_the_script_runs_is_isolated_from_the_current_directory(tmp_path, megatron_lm, fake_node):
    """The whole script, with a stand-in interpreter that records its arguments: the manifest
    check, the node check, the venv, both installs, the datasets lookup, the tests and the
    summary each run `python -I` (no current directory, PYTHONPATH or user site on sys.path)."""
    fake, _log = fake_node
    root = kit.assemble(tmp_path / "kit", megatron_lm, project=ROOT, run=ArchivingRecorder()).root
    datasets = tmp_path / "site" / "megatron" / "core" / "datasets"
    datasets.mkdir(parents=True)
    (datasets / "helpers_cpp.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    cwd = tmp_path / "scratch"
    cwd.mkdir()
    out = tmp_path / "out"
    proc = subprocess.run([str(root / kit.SCRIPT_NAME), str(out)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHON": str(fake), "FAKE_DATASETS": str(datasets)}, timeout=120,
                          stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (tmp_path / "python-calls.log").read_text().splitlines()
    assert len(calls) == 8, calls  # manifest, node, venv, two installs, datasets, tests, summary
    assert all(c.startswith("-I ") for c in calls), [c for c in calls if not c.startswith("-I ")]
    tests = next(c for c in calls if "pytest.main" in c)
    assert f"-I -c {kit.ISOLATED_PYTEST} {out}/nvrx-qual -m gpu" in tests, tests
    assert "stand-in" in (out / "SUMMARY.md").read_text()


def test_the_isolated_pytest_imports_the_kits_source_not_the_current_directory(tmp_path):
    """kit.ISOLATED_PYTEST, the way the script starts the tests: the kit's unpacked source
    (named explicitly) first on sys.path, the current directory nowhere."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "kit_module.py").write_text("WHERE = 'source'\n")
    (source / "test_where.py").write_text("import kit_module\n\n\ndef test_where():\n"
                                          "    assert kit_module.WHERE == 'source'\n")
    cwd = tmp_path / "scratch"
    cwd.mkdir()
    (cwd / "kit_module.py").write_text("WHERE = 'scratch'\n")
    proc = subprocess.run([sys.executable, "-I", "-c", kit.ISOLATED_PYTEST, str(source), "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(source), str(source / "test_where.py")],
                          capture_output=True, text=True, cwd=cwd, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def test_tools_gpu_kit_runs_python_isolated(tmp_path):
    calls = tmp_path / "calls.log"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    proc = subprocess.run([str(ROOT / "tools" / "gpu-kit"), "--help"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHON": str(fake)}, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "--megatron-path" in proc.stdout, proc.stdout + proc.stderr
    assert calls.read_text().startswith("-I "), calls.read_text()


# ---------------------------------------------------------------- from PyPI


@pytest.fixture(scope="module")
def real_kit(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("kit")
    checkout = base / "Megatron-LM"
    checkout.mkdir()
    for name in kit.MEGATRON_FILES:
        (checkout / name).write_text(f"# stand-in {name}\n")
    return kit.assemble(base / "kit", checkout, project=ROOT).root


def resolve_for_target(dest: Path, *args: str) -> subprocess.CompletedProcess:
    """pip resolving from the kit alone (--no-index) for Python 3.12 on manylinux_2_39; `pip
    download` because `pip install` holds Requires-Python to the running interpreter."""
    platforms = [w for tag in kit.PLATFORMS for w in ("--platform", tag)]
    return subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-index", "--only-binary=:all:",
                           *platforms, "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
                           "-d", str(dest), *args],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.e2e
@pytest.mark.slow  # builds the real kit and resolves it: out of the quick tier
def test_the_real_kit_installs_offline_for_python_312(real_kit, tmp_path):
    no_deps_dir = real_kit / "wheels" / "no-deps"
    wheels = sorted(p.name for p in no_deps_dir.iterdir())
    assert [w.split("-")[:2] for w in wheels] == [["megatron_core", "0.19.2"], ["nvidia_resiliency_ext", "0.7.0"],
                                                  ["nvrx_qual", "0.1.0"]]
    no_deps = resolve_for_target(tmp_path / "a", "--no-deps", "--find-links", str(no_deps_dir),
                                 kit.MEGATRON_CORE, kit.NVRX, "nvrx-qual")
    assert no_deps.returncode == 0, no_deps.stderr
    deps = resolve_for_target(tmp_path / "b", "--find-links", str(real_kit / "wheels" / "deps"),
                              "-r", str(real_kit / "requirements.txt"))
    assert deps.returncode == 0, deps.stderr
    protobuf = [p.name for p in (real_kit / "wheels" / "deps").glob("protobuf-*.whl")]
    assert len(protobuf) == 1 and protobuf[0].startswith("protobuf-6."), protobuf
    size = sum(p.stat().st_size for p in real_kit.rglob("*") if p.is_file())
    assert size < 60e6, f"the kit grew to {size / 1e6:.0f} MB"


IMPORTS = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
"""
# What the GPU tier's processes import: the launcher and its rank monitors, NVRx's async
# checkpointing (Megatron's default strategy with --async-save), Megatron's training loop, the
# harness (launcher side, nemesis, pytest plugin).
GPU_TIER_MODULES = (
    "nvidia_resiliency_ext.fault_tolerance.launcher", "nvidia_resiliency_ext.checkpointing.async_ckpt.core",
    "megatron.training", "megatron.training.training", "megatron.training.ft_integration",
    "megatron.core.models.gpt", "megatron.core.datasets.gpt_dataset", "harness.cli", "harness.nemesis",
    "fixtures.plugin",
)


def _link_distributions(names: tuple[str, ...], into: Path) -> list[str]:
    """Symlinks in `into` to what the installed distributions `names` and everything they require
    (extras left out) put in site-packages: their top-level packages and modules and their
    dist-info. The distributions linked, in order."""
    import importlib.metadata as md
    import re

    into.mkdir(parents=True)
    todo, done = list(names), []
    while todo:
        name = re.split(r"[ ;<>=!~\[]", todo.pop(0), maxsplit=1)[0]
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        if dist.metadata["Name"] in done:
            continue
        done.append(dist.metadata["Name"])
        todo += [r for r in (dist.requires or []) if "extra ==" not in r]
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] not in ("..", "__pycache__")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)
    return done


@pytest.mark.e2e
@pytest.mark.slow  # a fresh venv and the GPU tier's imports: out of the quick tier
def test_the_runtime_set_imports_everything_the_gpu_tier_imports(tmp_path):
    """A fresh venv with torch and RUNTIME_REQUIREMENTS only (built for this interpreter),
    NVRx 0.7.0 and megatron-core 0.19.2 from .megatron-cpu: every module imports."""
    if not (MEGATRON_CPU / "megatron").is_dir():
        pytest.skip(f"{MEGATRON_CPU} is missing: run tools/install-megatron-cpu.sh (CI does)")
    import torch

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    # torch as the kit's node has it (installed first, by the cluster's image or pip), linked from
    # this environment with its own requirements instead of unpacking 700 MB again (minutes of CI);
    # pip sees it installed through its dist-info and installs RUNTIME_REQUIREMENTS around it
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    linked = tmp_path / "torch-as-installed"
    _link_distributions(("torch",), linked)
    (site / "torch-as-installed.pth").write_text(f"{linked}\n")
    subprocess.run([py, "-m", "pip", "install", "--quiet", *kit.RUNTIME_REQUIREMENTS], check=True, timeout=900,
                   capture_output=True, stdin=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=f"{MEGATRON_CPU}:{ROOT}", PYTHONNOUSERSITE="1")
    proc = subprocess.run([py, "-c", IMPORTS, *GPU_TIER_MODULES], capture_output=True, text=True, env=env,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
