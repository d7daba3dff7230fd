"""tools/slurm-local runs as root: what it signals, trusts and rewrites (issue 24, class 5).

The pure parts (who a PID is, which /etc/hosts lines are a cluster's, the replacement of a
file) are the script's own shell functions, sourced here without a cluster. `stop` itself
needs no Slurm: it is run against a directory planted with stale records. Starting a real
cluster over planted files needs root and Debian's Slurm (tools/slurm-local installs it): that
test runs where both are there, on the directory and port in NVRX_QUAL_SLURM_LOCAL_TEST_DIR and
NVRX_QUAL_SLURM_LOCAL_TEST_PORT (default: a new directory and a port the OS gives).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from fixtures.processes import run_in_session

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "slurm-local"


def sourced(script: str, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60.0):
    """Run `script` in bash after sourcing tools/slurm-local (which then runs nothing itself)."""
    return run_in_session(["bash", "-c", f'set -eu; source "{TOOL}"; {script}', "bash", *args],
                          timeout_s=timeout_s, env={**os.environ, **(env or {})})


@pytest.fixture
def bystander():
    """An unrelated process (a `sleep` in a process group of its own), killed at teardown."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


# ------------------------------------------------------------------ who a PID is


def test_the_start_time_read_is_field_22_of_proc_stat(bystander):
    out = sourced('proc_starttime "$1"', str(bystander.pid))
    assert out.returncode == 0, out.stderr
    stat = Path(f"/proc/{bystander.pid}/stat").read_text()
    assert out.stdout.strip() == stat.rsplit(")", 1)[1].split()[19]


@pytest.fixture
def fake_slurmd(tmp_path):
    """A stand-in slurmd: a copy of `sleep` named slurmd, first on PATH (the tool finds a
    daemon's executable with `command -v`), running in a process group of its own; killed at
    teardown. (its Popen, the PATH to give the tool)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "slurmd"
    shutil.copyfile(os.path.realpath(shutil.which("sleep")), exe)
    exe.chmod(0o755)
    proc = subprocess.Popen([str(exe), "600"], start_new_session=True, stdin=subprocess.DEVNULL)
    yield proc, f"{bin_dir}:{os.environ['PATH']}"
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def identity(pid: int) -> str:
    """What start records of a process: PID, start time (field 22 of /proc/PID/stat), executable."""
    start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return f"{pid} {start} {os.readlink(f'/proc/{pid}/exe')}\n"


def test_a_recorded_daemon_is_stopped(tmp_path, fake_slurmd):
    proc, path = fake_slurmd
    pidfile, ident = tmp_path / "slurmd-n1.pid", tmp_path / "slurmd-n1.ident"
    pidfile.write_text(f"{proc.pid}\n")
    rec = sourced('ident_record "$1" "$2" "$(daemon_exe slurmd-n1)" && stop_ident "$2" slurmd-n1', str(pidfile),
                  str(ident), env={"PATH": path})
    assert rec.returncode == 0, rec.stderr
    assert proc.wait(timeout=15) == -signal.SIGTERM
    assert not ident.exists()


def test_a_record_naming_another_program_than_its_daemon_is_never_signalled(tmp_path, bystander, fake_slurmd):
    """A planted slurmd-n1.ident holding the exact live identity of an unrelated process (PID,
    start time, executable all match it): that process is not slurmd, so it is left alone."""
    _proc, path = fake_slurmd
    ident = tmp_path / "slurmd-n1.ident"
    ident.write_text(identity(bystander.pid))
    out = sourced('stop_ident "$1" slurmd-n1; ident_pid "$1" "$(daemon_exe slurmd-n1)" || echo not-ours', str(ident),
                  env={"PATH": path})
    assert out.returncode == 0 and out.stdout.strip() == "not-ours", out.stdout + out.stderr
    assert alive(bystander)


@pytest.mark.parametrize("which", ["start-time", "executable", "pid-file-only"])
def test_a_pid_that_names_another_process_now_is_never_signalled(tmp_path, bystander, which):
    """A record made before a reboot (same PID, another start time), one naming another
    executable, or a bare PID file: the process that holds the PID now is left alone."""
    start = Path(f"/proc/{bystander.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    exe = os.readlink(f"/proc/{bystander.pid}/exe")
    ident = tmp_path / "slurmd-n1.ident"
    if which == "start-time":
        ident.write_text(f"{bystander.pid} {int(start) - 100} {exe}\n")
    elif which == "executable":
        ident.write_text(f"{bystander.pid} {start} /usr/sbin/slurmd\n")
    out = sourced('stop_ident "$1" slurmd-n1; ident_pid "$1" "$(daemon_exe slurmd-n1)" || echo not-ours', str(ident))
    assert out.returncode == 0, out.stderr
    assert alive(bystander)


def test_a_pid_file_naming_another_executable_is_not_recorded(tmp_path, bystander):
    """start records a daemon only when its PID file names a live process of that daemon's
    executable: a planted PID file is not adopted."""
    pidfile, ident = tmp_path / "munged.pid", tmp_path / "munged.ident"
    pidfile.write_text(f"{bystander.pid}\n")
    out = sourced('ident_record "$1" "$2" /usr/sbin/munged || echo refused', str(pidfile), str(ident))
    assert out.stdout.strip() == "refused" and not ident.exists()


def planted_cluster_dir(tmp_path: Path, pid: int) -> Path:
    """A cluster directory whose PID files (and, for slurmd-n2, its record) name `pid`: what a
    stopped cluster leaves when the PIDs have since been given to other processes."""
    d = tmp_path / "cluster"
    (d / "run").mkdir(parents=True)
    (d / "run" / "shape").write_text("2 2 17817\n")
    for name in ("slurmctld", "slurmd-n1", "slurmd-n2"):
        (d / "run" / f"{name}.pid").write_text(f"{pid}\n")
    (d / "run" / "slurmd-n2.ident").write_text(f"{pid} 1 /usr/sbin/slurmd\n")
    return d


def test_stop_and_status_leave_a_process_named_by_stale_pid_files_alone(tmp_path, bystander):
    d = planted_cluster_dir(tmp_path, bystander.pid)
    status = run_in_session([str(TOOL), "status", "--dir", str(d)], timeout_s=60)
    assert status.returncode == 3 and "running" not in status.stdout.replace("not running", ""), status.stdout
    stop = run_in_session([str(TOOL), "stop", "--dir", str(d)], timeout_s=120)
    assert stop.returncode == 0, stop.stderr
    assert alive(bystander), stop.stderr
    assert f"pid {bystander.pid} left alone" in stop.stderr


# ------------------------------------------------------------------ every command checks its directory first


def cluster_dir(d: Path, slurmd_pid: int) -> Path:
    """A directory as a running one-node cluster leaves it: configuration, state, spool, PID
    file and the record of slurmd-n1 (naming `slurmd_pid` exactly); every folder 0755."""
    for sub in ("state", "run", "log", "spool/n1"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for folder in (d, d / "state", d / "run", d / "log", d / "spool", d / "spool" / "n1"):
        folder.chmod(0o755)
    (d / "slurm.conf").write_text("ClusterName=planted\n")
    (d / "state" / "job_state").write_text("state\n")
    (d / "spool" / "n1" / "cred_state").write_text("spool\n")
    (d / "run" / "shape").write_text("1 2 17817\n")
    (d / "run" / "slurmd-n1.pid").write_text(f"{slurmd_pid}\n")
    (d / "run" / "slurmd-n1.ident").write_text(identity(slurmd_pid))
    return d


KEPT = ("slurm.conf", "state/job_state", "spool/n1/cred_state", "run/shape", "run/slurmd-n1.pid",
        "run/slurmd-n1.ident")
UNTRUSTED = ("a-link", "a-link-above-it", "group-writable", "world-writable", "another-users", "run-a-link")


def untrusted_dir(tmp_path: Path, how: str, slurmd_pid: int) -> tuple[Path, Path, tuple[str, ...]]:
    """(the DIR to name, the folder whose files a command must leave alone, those files)."""
    if how == "a-link":
        real = cluster_dir(tmp_path / "real", slurmd_pid)
        (tmp_path / "cluster").symlink_to(real)
        return tmp_path / "cluster", real, KEPT
    if how == "a-link-above-it":
        real = cluster_dir(tmp_path / "elsewhere" / "cluster", slurmd_pid)
        (tmp_path / "parent").symlink_to(tmp_path / "elsewhere")
        return tmp_path / "parent" / "cluster", real, KEPT
    d = cluster_dir(tmp_path / "cluster", slurmd_pid)
    if how == "run-a-link":
        victim = tmp_path / "victim-run"
        shutil.move(str(d / "run"), str(victim))
        (d / "run").symlink_to(victim)
        return d, victim, ("shape", "slurmd-n1.pid", "slurmd-n1.ident")
    if how == "group-writable":
        d.chmod(0o775)
    elif how == "world-writable":
        d.chmod(0o757)
    elif how == "another-users":
        os.chown(d, 65534, 65534)
    return d, d, KEPT


@pytest.mark.parametrize("command", ["stop", "status", "env"])
@pytest.mark.parametrize("how", UNTRUSTED)
def test_every_command_refuses_an_untrusted_directory_before_touching_anything(tmp_path, fake_slurmd, how, command):
    """stop (which removes state/, spool/ and PID files and signals what run/*.ident records),
    status and env check DIR as start does before they read, remove or signal anything."""
    if how == "another-users" and os.geteuid() != 0:
        pytest.skip("making a directory of another user's needs root")
    proc, path = fake_slurmd
    d, files, kept = untrusted_dir(tmp_path, how, proc.pid)
    out = run_in_session([str(TOOL), command, "--dir", str(d)], timeout_s=120, env={**os.environ, "PATH": path})
    assert out.returncode == 2 and "slurm-local: error:" in out.stderr, (out.returncode, out.stdout, out.stderr)
    assert "export SLURM_CONF" not in out.stdout and "running" not in out.stdout, out.stdout
    assert alive(proc), f"{command} signalled the process a record in an untrusted directory names"
    missing = [rel for rel in kept if not (files / rel).exists()]
    assert missing == [], f"{command} removed {missing} through an untrusted directory"


def test_stop_still_stops_and_clears_a_trusted_directory(tmp_path, fake_slurmd):
    """The control of the test above: the same directory, trusted, is stopped and cleared."""
    proc, path = fake_slurmd
    d = cluster_dir(tmp_path / "cluster", proc.pid)
    status = run_in_session([str(TOOL), "status", "--dir", str(d)], timeout_s=60, env={**os.environ, "PATH": path})
    assert f"slurmd-n1: running (pid {proc.pid})" in status.stdout, status.stdout + status.stderr
    stop = run_in_session([str(TOOL), "stop", "--dir", str(d)], timeout_s=120, env={**os.environ, "PATH": path})
    assert stop.returncode == 0, stop.stderr
    assert proc.wait(timeout=15) == -signal.SIGTERM
    assert not (d / "state").exists() and not (d / "spool").exists() and not (d / "slurm.conf").exists()
    assert not list((d / "run").glob("*.pid")) and not list((d / "run").glob("*.ident"))


def test_a_planted_record_naming_an_unrelated_process_is_refused_by_stop_and_status(tmp_path, bystander,
                                                                                    fake_slurmd):
    """A trusted directory whose slurmd-n1.ident holds the exact live identity of a process
    that is not slurmd: status does not count it as running, stop does not signal it."""
    _proc, path = fake_slurmd
    d = cluster_dir(tmp_path / "cluster", bystander.pid)
    env = {**os.environ, "PATH": path}
    status = run_in_session([str(TOOL), "status", "--dir", str(d)], timeout_s=60, env=env)
    assert "slurmd-n1: not running" in status.stdout and status.returncode == 3, status.stdout + status.stderr
    stop = run_in_session([str(TOOL), "stop", "--dir", str(d)], timeout_s=120, env=env)
    assert stop.returncode == 0, stop.stderr
    assert alive(bystander), stop.stderr


def test_a_relative_directory_is_taken_below_the_physical_working_directory(tmp_path, fake_slurmd):
    """`--dir .slurm-local` from a checkout reached through a link: the directory is named by
    its physical path, which has no link on it, so it is not refused."""
    proc, path = fake_slurmd
    cluster_dir(tmp_path / "checkout" / ".slurm-local", proc.pid)
    (tmp_path / "checkout").chmod(0o755)
    (tmp_path / "via").symlink_to(tmp_path / "checkout")
    status = run_in_session([str(TOOL), "status", "--dir", ".slurm-local"], timeout_s=60, cwd=tmp_path / "via",
                            env={**os.environ, "PATH": path})
    assert f"slurmd-n1: running (pid {proc.pid})" in status.stdout, status.stdout + status.stderr


def test_a_missing_directory_is_nothing_to_stop_and_no_cluster(tmp_path):
    d = tmp_path / "never-made"
    stop = run_in_session([str(TOOL), "stop", "--dir", str(d)], timeout_s=60)
    assert stop.returncode == 0 and "nothing to stop" in stop.stderr, stop.stderr
    status = run_in_session([str(TOOL), "status", "--dir", str(d)], timeout_s=60)
    assert status.returncode == 3 and "no cluster started" in status.stderr
    assert not d.exists()


# ------------------------------------------------------------------ .ci/run and git


FAKE_TOOL = """#!/usr/bin/env bash
echo "$*" >> "__CALLS__"
if [ "$1" = start ]; then exit "${FAKE_START_STATUS:-0}"; fi
exit 0
"""


@pytest.mark.parametrize("start_status", [2, 0])
def test_ci_run_stops_the_cluster_only_after_a_start_that_succeeded(tmp_path, start_status):
    """.ci/run's exit trap stops the local Slurm only once `start` has succeeded: a refused
    start (say, an untrusted directory) is not followed by a root `stop` of that directory.
    .ci/run runs in a copy of the checkout's layout where bootstrap, slurm-local, python and
    pytest are stand-ins that record their calls."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", repo / ".ci" / "run")
    (repo / "tools").mkdir()
    calls = tmp_path / "slurm-local-calls.log"
    (repo / "tools" / "slurm-local").write_text(FAKE_TOOL.replace("__CALLS__", str(calls)))
    (repo / "tools" / "bootstrap").write_text("#!/usr/bin/env bash\nexit 0\n")
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "activate").write_text(f'PATH="{venv_bin}:$PATH"\n')
    for name in ("python", "pytest", "actionlint", "zizmor"):
        (venv_bin / name).write_text("#!/usr/bin/env bash\nexit 0\n")
    for script in (repo / ".ci" / "run", repo / "tools" / "slurm-local", repo / "tools" / "bootstrap",
                   *venv_bin.iterdir()):
        script.chmod(0o755)
    out = run_in_session([str(repo / ".ci" / "run")], timeout_s=120,
                         env={**os.environ, "NVRX_QUAL_VENV": str(tmp_path / "venv"),
                              "FAKE_START_STATUS": str(start_status)})
    kept = [line.split("kept ", 1)[1].split(" ", 1)[0] for line in out.stderr.splitlines() if "kept /tmp/" in line]
    for leftover in kept:  # .ci/run keeps its temporary directory when the run failed
        if Path(leftover).name.startswith("nvrx-qual-ci."):
            shutil.rmtree(leftover, ignore_errors=True)
    said = calls.read_text().splitlines()
    assert said[0] == "start --nodes 3 --dir .slurm-local", said
    if start_status:
        assert out.returncode != 0 and said == ["start --nodes 3 --dir .slurm-local"], (said, out.stderr)
    else:
        assert said == ["start --nodes 3 --dir .slurm-local", "stop --dir .slurm-local"], (said, out.stderr)


@pytest.mark.parametrize("kind", ["absent", "directory", "link"])
def test_git_ignores_the_local_slurm_directory_as_ci_run_names_it(tmp_path, kind):
    """.slurm-local at the checkout's root (.ci/run: --dir .slurm-local) is ignored by git,
    whether it exists yet, is a directory or a link to one."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shutil.copyfile(ROOT / ".gitignore", repo / ".gitignore")
    assert "--dir .slurm-local" in (ROOT / ".ci" / "run").read_text()
    if kind == "directory":
        (repo / ".slurm-local").mkdir()
        (repo / ".slurm-local" / "slurm.conf").write_text("x\n")
    elif kind == "link":
        (tmp_path / "elsewhere").mkdir()
        (repo / ".slurm-local").symlink_to(tmp_path / "elsewhere")
    paths = [".slurm-local"] + ([".slurm-local/slurm.conf"] if kind == "directory" else [])
    check = subprocess.run(["git", "-C", str(repo), "check-ignore", "--no-index", *paths], capture_output=True,
                           text=True)
    assert check.returncode == 0 and check.stdout.split() == paths, (check.stdout, check.stderr)


# ------------------------------------------------------------------ munged's directory


def test_stop_leaves_a_planted_munge_directory_and_what_its_links_name_alone(tmp_path, bystander):
    """A recorded /tmp directory re-created by someone else (after a reboot): not ours, so
    nothing in it is read, followed, signalled or removed."""
    planted = Path(f"/tmp/nvrx-qual-munge.{os.urandom(3).hex()}")
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    planted.mkdir(mode=0o755)
    try:
        (planted / "munged.log").symlink_to(victim)
        (planted / "munge.key").symlink_to(victim)
        (planted / "munged.pid").write_text(f"{bystander.pid}\n")
        os.chown(planted, 65534, 65534)  # nobody's
        d = planted_cluster_dir(tmp_path, bystander.pid)
        (d / "munge.path").write_text(f"{planted}\n")
        (d / "log").mkdir()
        stop = run_in_session([str(TOOL), "stop", "--dir", str(d)], timeout_s=120)
        assert stop.returncode == 0, stop.stderr
        assert planted.is_dir() and (planted / "munged.pid").exists(), "someone else's directory was removed"
        assert f"{planted} is not the directory start made for munged" in stop.stderr
        assert alive(bystander)
        assert victim.read_text() == "secret\n" and victim.stat().st_uid == os.getuid()
        assert not (d / "log" / "munged.log").exists()
    finally:
        shutil.rmtree(planted, ignore_errors=True)


def test_a_directory_is_trusted_only_with_its_owner_and_mode_and_never_through_a_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    real.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(real)
    uid = str(os.getuid())
    out = sourced('uid=$1; shift; for d in "$@"; do if dir_is "$d" "$uid" 755; then echo yes; else echo no; fi; done',
                  uid, str(real), str(link), str(tmp_path / "missing"))
    assert out.stdout.split() == ["yes", "no", "no"], out.stderr
    real.chmod(0o775)
    out = sourced('dir_is "$1" "$2" 755 && echo yes || echo no; dir_private "$1" && echo yes || echo no',
                  str(real), uid)
    assert out.stdout.split() == ["no", "no"]


# ------------------------------------------------------------------ /etc/hosts


HOSTS = """127.0.0.1 localhost
127.0.1.1 n1 # slurm-local /x/a
127.0.1.2 n2 # slurm-local /x/a
127.0.1.1 n1 # slurm-local /x/ab
127.0.1.1 n1 # slurm-local /x/a/b
10.0.0.1 nas # slurm-local /x/a and friends
10.0.0.2 other # slurm-local /y/x/a
"""


def test_a_tag_matches_whole_not_by_prefix(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    out = sourced('hosts_filtered "# slurm-local /x/a" "$1"', str(hosts))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "".join(line + "\n" for line in HOSTS.splitlines() if not line.endswith(" # slurm-local /x/a"))
    assert out.stdout.count("\n") == len(HOSTS.splitlines()) - 2


def test_hosts_are_replaced_atomically_keeping_mode_and_owner(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    hosts.chmod(0o640)
    before = hosts.stat()
    out = sourced('HOSTS_FILE=$1; hosts_edit "# slurm-local /x/ab" "127.0.1.1 n1 # slurm-local /x/ab" '
                  '"127.0.1.2 n2 # slurm-local /x/ab"', str(hosts))
    assert out.returncode == 0, out.stderr
    after = hosts.stat()
    assert after.st_ino != before.st_ino  # a new file renamed over the old, never a rewrite in place
    assert (after.st_mode & 0o777, after.st_uid, after.st_gid) == (0o640, before.st_uid, before.st_gid)
    lines = hosts.read_text().splitlines()
    assert lines[-2:] == ["127.0.1.1 n1 # slurm-local /x/ab", "127.0.1.2 n2 # slurm-local /x/ab"]
    assert lines.count("127.0.1.1 n1 # slurm-local /x/a") == 1 and len(lines) == len(HOSTS.splitlines()) + 1
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]  # no temporary file left beside it
    # removing /x/ab's lines leaves /x/a's
    out = sourced('HOSTS_FILE=$1; hosts_edit "# slurm-local /x/ab"', str(hosts))
    assert out.returncode == 0 and hosts.read_text() == HOSTS.replace("127.0.1.1 n1 # slurm-local /x/ab\n", "")


def test_a_hosts_file_that_is_a_mount_point_is_rewritten_in_place_and_it_is_said(tmp_path):
    """rename over a bind-mounted /etc/hosts fails with EBUSY (containers): only then the file
    is rewritten in place. `mv` is replaced by one that fails the way the kernel does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mv").write_text('#!/bin/sh\necho "mv: cannot move \'$3\' to \'$4\': Device or resource busy" >&2\n'
                                "exit 1\n")
    (bin_dir / "mv").chmod(0o755)
    etc = tmp_path / "etc"
    etc.mkdir()
    hosts = etc / "hosts"
    hosts.write_text(HOSTS)
    before = hosts.stat().st_ino
    out = sourced('HOSTS_FILE=$1; hosts_edit "# slurm-local /x/a"', str(hosts),
                  env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    assert "is a mount point (rename: Device or resource busy): rewritten in place" in out.stderr
    assert hosts.stat().st_ino == before
    assert hosts.read_text() == "".join(line + "\n" for line in HOSTS.splitlines()
                                        if not line.endswith(" # slurm-local /x/a"))
    assert [p.name for p in etc.iterdir()] == ["hosts"]


# ------------------------------------------------------------------ a real start over planted files


def _free_port_range(n: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + n < 65536 and all(_free(port + i) for i in range(1, n + 1)):
            return port
    raise RuntimeError("no free port range")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("slurmd") is None or shutil.which("munged") is None,
                    reason="needs root and Debian's Slurm and munge (tools/slurm-local start installs them)")
def test_start_over_a_planted_munge_directory_and_stale_pid_files(tmp_path, bystander):
    """A cluster directory whose recorded munge directory (under /tmp) was re-created by another
    user after a reboot, with a link where the key goes, a PID file naming an unrelated process,
    and stale PID files of the cluster's daemons: start makes a new directory for munged, changes
    the owner of nothing through the link, signals nothing, and the cluster comes up; stop stops
    it and removes its lines from /etc/hosts, leaving the planted directory alone."""
    d = Path(os.environ.get("NVRX_QUAL_SLURM_LOCAL_TEST_DIR") or tmp_path / "cluster")
    port = int(os.environ.get("NVRX_QUAL_SLURM_LOCAL_TEST_PORT") or _free_port_range(2))
    assert not (d / "slurm.conf").exists(), f"{d} holds a cluster already"
    planted = Path(f"/tmp/nvrx-qual-munge.{os.urandom(3).hex()}")
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    hosts_before = Path("/etc/hosts").read_text()
    planted.mkdir(mode=0o755)
    started = False
    try:
        (planted / "munge.key").symlink_to(victim)
        (planted / "munged.pid").write_text(f"{bystander.pid}\n")
        os.chown(planted, 65534, 65534)
        (d / "run").mkdir(parents=True, exist_ok=True)
        (d / "munge.path").write_text(f"{planted}\n")
        (d / "run" / "shape").write_text(f"2 2 {port}\n")
        for name in ("slurmctld", "slurmd-n1"):
            (d / "run" / f"{name}.pid").write_text(f"{bystander.pid}\n")
        start = run_in_session([str(TOOL), "start", "--nodes", "2", "--dir", str(d), "--port", str(port)],
                               timeout_s=300)
        started = True
        assert start.returncode == 0, start.stderr
        assert alive(bystander)
        assert victim.stat().st_uid == os.getuid() and victim.read_text() == "secret\n"
        munge_dir = (d / "munge.path").read_text().strip() if (d / "munge.path").exists() else str(d / "munge")
        assert munge_dir != str(planted)
        assert planted.stat().st_uid == 65534
        status = run_in_session([str(TOOL), "status", "--dir", str(d)], timeout_s=60)
        assert status.returncode == 0, status.stdout + status.stderr
        tagged = [line for line in Path("/etc/hosts").read_text().splitlines() if line.endswith(f" # slurm-local {d}")]
        assert tagged == ["127.0.1.1 n1 # slurm-local " + str(d), "127.0.1.2 n2 # slurm-local " + str(d)]
    finally:
        if started:
            stop = run_in_session([str(TOOL), "stop", "--dir", str(d)], timeout_s=180)
        shutil.rmtree(planted, ignore_errors=True)
        if Path("/etc/hosts").read_text() != hosts_before:  # restore what this test changed, whatever happened
            kept = [line for line in Path("/etc/hosts").read_text().splitlines()
                    if not line.endswith(f" # slurm-local {d}")]
            Path("/etc/hosts").write_text("\n".join(kept) + "\n")
    assert stop.returncode == 0, stop.stderr
    assert alive(bystander)
    assert not any(line.endswith(f" # slurm-local {d}") for line in Path("/etc/hosts").read_text().splitlines())
