"""tools/bootstrap: prepares only what is missing, then runs the main job. Checked against
stand-in installs in a temp directory (--check changes nothing; a prepared machine goes
straight to the job), so nothing is downloaded or installed here."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

import pytest

from fixtures.processes import run_in_session

REPO = Path(__file__).resolve().parent.parent
BOOTSTRAP = REPO / "tools" / "bootstrap"
STEPS = ("virtual environment", "PyTorch, CPU build first", "nvrx-qual with the plot extra",
         "second launcher NVRx 0.7.0", "Megatron for the CPU tier")


def stand_ins(root: Path) -> dict[str, str]:
    """A prepared machine: a venv whose python is this interpreter (torch, harness and
    matplotlib importable) and whose nvrx-qual echoes its arguments, NVRx 0.7.0 and
    Megatron directories as the installers leave them."""
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "nvrx-qual").write_text('#!/bin/sh\necho "stand-in nvrx-qual: $*"\n')
    for script in ("python", "nvrx-qual"):
        (bin_dir / script).chmod(0o755)
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
    (root / "venv" / ".nvrx-qual-pyproject.sha256").write_text(digest + "\n")
    (root / "nvrx" / "nvidia_resiliency_ext").mkdir(parents=True)
    (root / "megatron" / "megatron").mkdir(parents=True)
    (root / "megatron" / ".installed").write_text("megatron-core 0.19.2, ...\n")
    return locations(root)


def locations(root: Path) -> dict[str, str]:
    return {"NVRX_QUAL_VENV": str(root / "venv"), "NVRX_QUAL_NVRX_DIR": str(root / "nvrx"),
            "NVRX_QUAL_MEGATRON_DIR": str(root / "megatron")}


def bootstrap(*args: str, env: dict[str, str]):
    return run_in_session([str(BOOTSTRAP), *args], timeout_s=120, env={**os.environ, **env})


def test_check_on_a_prepared_machine_says_ready(tmp_path):
    proc = bootstrap("--check", env=stand_ins(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("bootstrap:   ")]  # no detail lines
    assert [line.split(": ", 2)[1] for line in lines[:5]] == ["ready"] * 5, lines
    assert lines[-1] == "bootstrap: everything is ready"


def test_check_on_a_fresh_machine_lists_every_step_and_creates_nothing(tmp_path):
    proc = bootstrap("--check", env=locations(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    missing = [line for line in proc.stdout.splitlines() if line.startswith("bootstrap: missing: ")]
    assert len(missing) == 5 and all(step in line for step, line in zip(STEPS, missing)), missing
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu, else plain pip" in missing[1]
    assert "would run: tools/install-nvrx-target.sh 0.7.0" in missing[3]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("remove, step", [
    ("venv/bin/nvrx-qual", "nvrx-qual with the plot extra"),
    ("venv/.nvrx-qual-pyproject.sha256", "nvrx-qual with the plot extra"),  # installed from another pyproject.toml
    ("nvrx/nvidia_resiliency_ext", "second launcher NVRx 0.7.0"),
    ("megatron/.installed", "Megatron for the CPU tier"),
])
def test_check_names_exactly_the_missing_step(tmp_path, remove, step):
    env = stand_ins(tmp_path)
    target = tmp_path / remove
    target.rmdir() if target.is_dir() else target.unlink()
    proc = bootstrap("--check", env=env)
    assert proc.returncode == 1
    missing = [line for line in proc.stdout.splitlines() if "missing: " in line]
    assert len(missing) == 1 and step in missing[0], proc.stdout


def test_a_prepared_machine_goes_straight_to_the_main_job_with_the_arguments(tmp_path):
    proc = bootstrap("--fault", "hang", "--", "--no-load-optim", env=stand_ins(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "preparing" not in proc.stdout
    assert proc.stdout.splitlines()[-1] == \
        "stand-in nvrx-qual: run --workload reference --fault hang -- --no-load-optim"


@pytest.mark.parametrize("args, expected", [
    ((), "run --workload reference --fault kill"),
    (("--fault=term",), "run --workload reference --fault=term"),
    (("--workload", "megatron-cpu", "--fault", "hang"), "run --workload megatron-cpu --fault hang"),
    (("--", "--fault", "x"), "run --workload reference --fault kill -- --fault x"),  # workload args are not ours
])
def test_the_users_workload_and_fault_replace_the_defaults(tmp_path, args, expected):
    proc = bootstrap(*args, env=stand_ins(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == f"stand-in nvrx-qual: {expected}"


INSTALL_TORCH = REPO / "tools" / "install-torch-cpu.sh"


def fake_python(root: Path, cuda: str | None) -> Path:
    """An interpreter stand-in: runs the index probe for real (this python), records every pip
    call instead of installing, and reports the torch build given."""
    log = root / "pip.log"
    script = root / "python"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -m) echo "$*" >> "{log}"; exit 0 ;;
  -c) echo "2.13.0{'+cpu' if cuda is None else ''} {cuda or 'cpu'}"; exit 0 ;;
  *) exec "{sys.executable}" "$@" ;;
esac
""")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("cuda", [None, "12.8"])
def test_an_unreachable_torch_index_falls_back_to_plain_pip_and_says_which_build(tmp_path, cuda):
    """This machine reaches only PyPI; a closed local port stands for download.pytorch.org."""
    from harness.ports import free_port

    index = f"http://127.0.0.1:{free_port()}/whl/cpu"
    python = fake_python(tmp_path, cuda)
    proc = run_in_session([str(INSTALL_TORCH), "2.13.0"], timeout_s=60,
                          env={**os.environ, "PYTHON": str(python), "NVRX_QUAL_TORCH_INDEX": index})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{index} cannot be reached: falling back to plain pip install torch==2.13.0" in proc.stdout
    assert (tmp_path / "pip.log").read_text().splitlines() == ["-m pip install --quiet torch==2.13.0"]
    if cuda is None:
        assert "installed torch 2.13.0+cpu, the CPU build" in proc.stdout
    else:
        assert "WARNING: installed torch 2.13.0, a CUDA 12.8 build" in proc.stdout


def test_a_reachable_torch_index_is_used(tmp_path):
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    (tmp_path / "torch").mkdir()
    server.RequestHandlerClass = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/"
        python = fake_python(tmp_path, None)
        proc = run_in_session([str(INSTALL_TORCH)], timeout_s=60,
                              env={**os.environ, "PYTHON": str(python), "NVRX_QUAL_TORCH_INDEX": index})
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "pip.log").read_text().splitlines() == [
        f"-m pip install --quiet torch==2.13.0 --index-url {index}"]


def test_an_empty_torch_index_means_plain_pip(tmp_path):
    python = fake_python(tmp_path, None)
    proc = run_in_session([str(INSTALL_TORCH)], timeout_s=60,
                          env={**os.environ, "PYTHON": str(python), "NVRX_QUAL_TORCH_INDEX": ""})
    assert proc.returncode == 0 and "NVRX_QUAL_TORCH_INDEX is empty" in proc.stdout
    assert (tmp_path / "pip.log").read_text().splitlines() == ["-m pip install --quiet torch==2.13.0"]


def test_check_names_the_installed_torch_build(tmp_path):
    proc = bootstrap("--check", env=stand_ins(tmp_path))
    assert "bootstrap:   torch " in proc.stdout and ("(the CPU build)" in proc.stdout or "CUDA" in proc.stdout)


def check_report(env: dict[str, str]) -> list[tuple[str, str]]:
    """(step, what it would run) of each step line `tools/bootstrap --check` prints."""
    proc = run_in_session([str(BOOTSTRAP), "--check"], timeout_s=120, env=env)
    found = [re.match(r"bootstrap: (?:ready|missing): (.*?)(?: \(would run: (.*)\))?$", line)
             for line in proc.stdout.splitlines()]
    return [(m.group(1), m.group(2) or "") for m in found if m]


def readme_disagreements(readme: str, steps: list[tuple[str, str]]) -> list[str]:
    """What --check names (its directories, versions, the plot extra, the torch index) that the README does not."""
    text = " ".join(readme.split())
    missing = []
    for step, would_run in steps:
        named = re.findall(r"(?<![\w/])\.[a-z][\w.-]*(?:/[\d.]+)?", step)  # .venv, .nvrx/0.7.0, .megatron-cpu
        named += re.findall(r"NVRx \d+\.\d+\.\d+", step) + re.findall(r"plot extra|CPU tier", step)
        named += re.findall(r"https://\S+?(?=[,\s)]|$)", would_run)
        if step.startswith("PyTorch, CPU build"):
            named.append("CPU build of PyTorch")
        missing += [n for n in named if n not in text]
    return missing


def test_the_readme_names_what_bootstrap_check_reports(tmp_path):
    """tools/bootstrap --check on this machine (its default locations, prepared or not) and the
    README agree on what is installed and where; on a fresh machine also on what it would run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_QUAL_")}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    steps = check_report(env)
    assert len(steps) == len(STEPS) and all(step.startswith(name) for name, (step, _) in zip(STEPS, steps)), steps
    assert readme_disagreements(readme, steps) == []
    fresh = check_report({**env, **locations(tmp_path)})
    assert any("https://" in would_run for _, would_run in fresh)
    assert readme_disagreements(readme, [(step, would_run) for step, would_run in fresh]) == []
    assert "NVRX_QUAL_TORCH_INDEX" in readme  # how to point it at a mirror
    assert readme_disagreements("CPU build of PyTorch in `.venv`", steps)  # the check can fail


def test_check_takes_no_run_arguments(tmp_path):
    proc = bootstrap("--check", "--fault", "hang", env=stand_ins(tmp_path))
    assert proc.returncode == 2 and "takes no further arguments" in proc.stderr
