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
    bin_dir.mkdir(parents=True, exist_ok=True)
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
    assert lines[-2] == "bootstrap: everything is ready" and lines[-1].startswith("bootstrap: next: ")


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
    assert proc.stdout.splitlines()[-2] == \
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
    assert proc.stdout.splitlines()[-2] == f"stand-in nvrx-qual: {expected}"


INSTALL_TORCH = REPO / "tools" / "install-torch-cpu.sh"
# numpy is installed before torch is first imported: `import torch` without numpy warns "Failed to
# initialize NumPy" (torch's wheel does not depend on it; the project's dependencies bring it later).
NUMPY_FIRST = "-m pip install --quiet numpy"
TORCH_IMPORT = "import: import torch; print(torch.__version__, torch.version.cuda or \"cpu\")"


def fake_python(root: Path, cuda: str | None) -> Path:
    """An interpreter stand-in: runs the index probe for real (this python), records every pip
    call instead of installing and every `-c` (the torch import), and reports the torch build given."""
    log = root / "pip.log"
    script = root / "python"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -m) echo "$*" >> "{log}"; exit 0 ;;
  -c) echo "import: $2" >> "{log}"; echo "2.13.0{'+cpu' if cuda is None else ''} {cuda or 'cpu'}"; exit 0 ;;
  *) exec "{sys.executable}" "$@" ;;
esac
""")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("cuda", [None, "12.8"])
def test_an_unreachable_torch_index_falls_back_to_plain_pip_and_says_which_build(tmp_path, cuda):
    """This machine reaches only PyPI; a closed local port stands for download.pytorch.org."""
    from harness.machine.ports import free_port

    index = f"http://127.0.0.1:{free_port()}/whl/cpu"
    python = fake_python(tmp_path, cuda)
    proc = run_in_session([str(INSTALL_TORCH), "2.13.0"], timeout_s=60,
                          env={**os.environ, "PYTHON": str(python), "NVRX_QUAL_TORCH_INDEX": index})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{index} cannot be reached: falling back to plain pip install torch==2.13.0" in proc.stdout
    assert (tmp_path / "pip.log").read_text().splitlines() == [NUMPY_FIRST, "-m pip install --quiet torch==2.13.0",
                                                               TORCH_IMPORT]
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
        NUMPY_FIRST, f"-m pip install --quiet torch==2.13.0 --index-url {index}", TORCH_IMPORT]


def test_an_empty_torch_index_means_plain_pip(tmp_path):
    python = fake_python(tmp_path, None)
    proc = run_in_session([str(INSTALL_TORCH)], timeout_s=60,
                          env={**os.environ, "PYTHON": str(python), "NVRX_QUAL_TORCH_INDEX": ""})
    assert proc.returncode == 0 and "NVRX_QUAL_TORCH_INDEX is empty" in proc.stdout
    assert (tmp_path / "pip.log").read_text().splitlines() == [NUMPY_FIRST, "-m pip install --quiet torch==2.13.0",
                                                               TORCH_IMPORT]


def test_check_names_the_installed_torch_build(tmp_path):
    proc = bootstrap("--check", env=stand_ins(tmp_path))
    assert "bootstrap:   torch " in proc.stdout and ("(the CPU build)" in proc.stdout or "CUDA" in proc.stdout)


def test_check_names_a_cuda_build_from_its_version_file_without_importing_torch(tmp_path):
    """The build line comes from torch/version.py (what torch.version is), not from `import torch`
    (1.4 s on every bootstrap call): a torch whose import fails still has its build named."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('imported')\n")
    (fake / "version.py").write_text("from typing import Optional\n__version__ = '2.13.0'\n"
                                     "cuda: Optional[str] = '12.8'\n")
    env = {**stand_ins(tmp_path), "PYTHONPATH": str(tmp_path / "site")}
    proc = bootstrap("--check", env=env)
    assert "bootstrap:   torch 2.13.0 (a CUDA 12.8 build)" in proc.stdout.splitlines(), proc.stdout + proc.stderr


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


# ---------------------------------------------------------------- the next command, --help, signals


def _next_commands(stdout: str) -> list[str]:
    """The commands in backticks on bootstrap's last line, which must name the next command."""
    last = stdout.splitlines()[-1]
    assert last.startswith("bootstrap: next: "), stdout
    return re.findall(r"`([^`]+)`", last)


def real_venv(root: Path) -> dict[str, str]:
    """Stand-ins as above, in a real virtual environment (its own bin/activate), no pip in it."""
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(root / "venv")
    (root / "venv" / "bin" / "nvrx-qual").unlink(missing_ok=True)
    (root / "venv" / "bin" / "python").unlink()
    return stand_ins(root)


@pytest.mark.parametrize("mode", [(), ("--prepare-only",), ("--check",)], ids=["run", "prepare-only", "check"])
def test_the_last_line_names_the_next_command_and_both_forms_run(tmp_path, mode):
    """After bootstrap the venv is not active in the caller's shell, so a bare `nvrx-qual` is not
    found there: the last line says to activate it, or to call the venv's own nvrx-qual, and both
    forms run in a fresh shell (a real venv's bin/activate; nvrx-qual a stand-in)."""
    env = real_venv(tmp_path)
    proc = bootstrap(*mode, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    activate, after, direct = _next_commands(proc.stdout)
    assert activate == f". {env['NVRX_QUAL_VENV']}/bin/activate" and direct.startswith(env["NVRX_QUAL_VENV"])
    clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    clean["PATH"] = "/usr/bin:/bin"  # the caller's shell: no venv on PATH
    bare = run_in_session(["bash", "-c", after], timeout_s=30, env=clean)
    assert bare.returncode == 127  # what the README's next command did before
    for command in (f"{activate} && {after}", direct):
        ran = run_in_session(["bash", "-c", command], timeout_s=30, env=clean, cwd=str(tmp_path))
        assert ran.returncode == 0 and ran.stdout == "stand-in nvrx-qual: run --help\n", (command, ran)


def test_the_next_command_is_relative_when_called_from_the_checkout(tmp_path):
    """Called from the checkout with the default .venv (README's way), the venv is named as
    `.venv`; called from elsewhere, by its absolute path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_QUAL_")}
    here = run_in_session([str(BOOTSTRAP), "--check"], timeout_s=120, env=env, cwd=str(REPO))
    if here.returncode == 0:  # a prepared checkout (CI prepares before the tests): the next command
        assert _next_commands(here.stdout)[0] == ". .venv/bin/activate"
        ran = run_in_session(["bash", "-c", _next_commands(here.stdout)[2]], timeout_s=120, env=env, cwd=str(REPO))
        assert ran.returncode == 0 and "usage: nvrx-qual run" in ran.stdout, ran
    else:  # an unprepared one: the next command is bootstrap itself
        assert here.stdout.splitlines()[-1].endswith("run tools/bootstrap to do them")
    elsewhere = run_in_session([str(BOOTSTRAP), "--check"], timeout_s=120, env=env, cwd=str(tmp_path))
    if elsewhere.returncode == 0:
        assert _next_commands(elsewhere.stdout)[0] == f". {REPO}/.venv/bin/activate"


def test_help_shows_every_location_with_its_default():
    proc = run_in_session([str(BOOTSTRAP), "--help"], timeout_s=30)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    script = BOOTSTRAP.read_text()
    defaults = dict(re.findall(r"=\$\{(NVRX_QUAL_\w+|PYTHON):-([^}]+)\}", script))
    assert set(defaults) == {"NVRX_QUAL_VENV", "NVRX_QUAL_NVRX_DIR", "NVRX_QUAL_MEGATRON_DIR", "PYTHON"}
    for name, default in defaults.items():
        assert re.search(rf"{name} .*?\(default: {re.escape(default)}\)", text), (name, default)
    assert "set -euo" not in proc.stdout and "defaults below" not in proc.stdout


def _job_stand_in(root: Path) -> dict[str, str]:
    """A stand-in nvrx-qual that runs until a signal and says which one it got."""
    env = stand_ins(root)
    (root / "venv" / "bin" / "nvrx-qual").write_text(
        '#!/bin/sh\ntrap \'echo "job got TERM"; exit 143\' TERM\ntrap \'echo "job got INT"; exit 130\' INT\n'
        'echo "job started"\nwhile :; do sleep 0.1; done\n')
    return env


def _until_started(proc) -> list[str]:
    lines = []
    for line in proc.stdout:  # the pipe ends when the group dies; the test's timeout bounds the rest
        lines.append(line)
        if line == "job started\n":
            return lines
    raise AssertionError("".join(lines) + proc.stderr.read())


@pytest.mark.parametrize("how, status", [("TERM to bootstrap alone", 143), ("INT to the group (Ctrl-C)", 130),
                                         ("TERM to the group", 143)])
def test_a_stop_signal_reaches_the_job_and_its_status_is_bootstraps(tmp_path, how, status):
    """bootstrap no longer execs the job (its last line comes after it): a SIGTERM sent to it
    alone is passed on at once, and Ctrl-C, which the terminal sends to the whole group, reaches
    the job although it runs in the background; bootstrap exits with the job's status, also when
    the job ends while bootstrap's own trap runs (bash then loses the job's status)."""
    import signal
    import subprocess

    # as a terminal starts it: SIGINT at its default. A test run whose own SIGINT is ignored (started
    # as a background job of a script, as `cmd &` does) would hand bootstrap an ignored SIGINT,
    # which bash can then neither trap nor reset for its job: Ctrl-C could not be tested at all.
    proc = subprocess.Popen([str(BOOTSTRAP)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **_job_stand_in(tmp_path)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        lines = _until_started(proc)
        if how == "TERM to bootstrap alone":
            proc.send_signal(signal.SIGTERM)
        else:  # both get it: the job directly, bootstrap too (it ignores SIGINT, passes SIGTERM on)
            os.killpg(proc.pid, getattr(signal, f"SIG{how.split()[0]}"))
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines += out.splitlines(keepends=True)
    assert proc.returncode == status, "".join(lines) + err
    assert f"job got {how.split()[0]}\n" in lines
    assert lines[-1].startswith("bootstrap: next: ")


def test_the_readme_says_how_to_reach_nvrx_qual_before_its_first_nvrx_qual_command(tmp_path):
    """The README's next command after its set-up command works as written: the activation (or
    the venv's own path) bootstrap's last line names comes before the first `nvrx-qual` command
    the README asks the user to type (its code blocks after "Two commands"; the job bootstrap
    itself runs is the exception)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    proc = bootstrap("--check", env=stand_ins(tmp_path))
    activate = _next_commands(proc.stdout)[0].replace(f"{tmp_path}/venv", ".venv")
    after = readme[readme.index("## Two commands"):]
    blocks = re.findall(r"```bash\n(.*?)```", after, flags=re.S)
    typed = [(i, line) for i, block in enumerate(blocks) for line in block.splitlines()
             if line.startswith(("nvrx-qual ", ". ")) and line.split("#")[0].strip() !=
             "nvrx-qual run --workload reference --fault kill"]
    assert typed and typed[0][1].startswith(activate), typed[:2]
