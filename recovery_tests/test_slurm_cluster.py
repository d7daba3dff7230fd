"""The Slurm paths against a real cluster (tools/slurm-local start: two slurmd "nodes" n1, n2 on
this host), with the CPU reference workload under NVRx 0.7.0:

- `nvrx-qual sbatch ... --nnodes 2` -> real `sbatch` -> a two-node job (one launcher per node
  through srun, rendezvous on the first host of `scontrol show hostnames`, ports asked there at
  start, Slurm's stdout/stderr in the run directory) with a kill or a hang on rank 1, which
  runs on the second node -> the script's own `nvrx-qual verify` and ours qualify it;
- the fixture path: pytest inside `salloc --nodes=3` (test_slurm_allocation.py) launches the
  multi-node scenarios with srun, qualifies them (a kill; a node loss with a hot spare), and
  stops a doomed run by scancel of its step;
- node loss with a hot spare (the standby is promoted) and without one (a failed recovery).

The local cluster's nodes share this host's disk, so its local work dir is shared storage by
construction: --assume-shared-storage 1 says so (a real cluster needs NFS, Lustre, GPFS, ...)."""

from __future__ import annotations

import json
import re
import secrets
import sys
import time
from pathlib import Path

import psutil
import pytest

from fixtures import budget
from fixtures.processes import run_in_session
from harness.machine.slurm import expand_hostlist
from recovery_tests.test_recovery_megatron_cpu import megatron_cpu  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.launch, pytest.mark.slurm(nodes=2)]

ROOT = Path(__file__).resolve().parent.parent


def scancel_name(name: str) -> None:
    run_in_session(["scancel", f"--name={name}"], timeout_s=30)


def job_gone(name: str, timeout_s: float = 30.0) -> bool:
    """The job named `name` left squeue (running, completing, pending or suspended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = run_in_session(["squeue", "--noheader", f"--name={name}", "--states=PD,CF,R,S,CG",
                              "--format=%i %T"], timeout_s=30)
        if out.returncode == 0 and not out.stdout.strip():
            return True
        time.sleep(0.2)
    return False


def processes_under(path: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or ())
            if str(path) in line and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid}: {line[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def submit(launcher, work: Path, run_id: str, *flags: str, workload: tuple[str, ...] | None = None,
           timeout_s: float = 420) -> tuple[int, str, Path]:
    """nvrx-qual sbatch ... -> sbatch --wait: (the job's exit status, its id, the run directory).
    The job's status is its script's: the `nvrx-qual verify` at its end. `workload`: the
    workload's flags (default: the reference workload, one rank per node, fault on rank 1,
    under `launcher`)."""
    run_dir = work / "runs" / run_id
    if workload is None:
        workload = ("--workload", "reference", "--gpus-per-node", "1", "--fault-rank", "1",
                    "--nvrx-path", str(launcher.path))
    render = run_in_session(
        [sys.executable, "-m", "harness", "sbatch", *workload, "--work-dir", str(work), "--run-id", run_id,
         "--time", "00:10:00", "--assume-shared-storage", "1", *flags], timeout_s=60, cwd=ROOT)
    assert render.returncode == 0, render.stderr
    job_name = f"nvrx-qual-{run_id}"
    planned = json.loads((run_dir / "run.json").read_text())
    budget.record_job(run_id, planned["spec"]["workload"], planned["spec"]["fault"], str(planned["nvrx_version"]))
    try:
        job = run_in_session(["sbatch", "--wait", "--parsable", str(run_dir / "sbatch.sh")], timeout_s=timeout_s,
                             cwd=work)
    finally:
        scancel_name(job_name)  # nothing when it has ended
    job_id = job.stdout.strip().split(";")[0]
    assert job_id.isdigit(), job.stdout + job.stderr
    assert job_gone(job_name)
    assert processes_under(run_dir) == []
    return job.returncode, job_id, run_dir


def slurm_output(run_dir: Path, run_id: str, job_id: str) -> str:
    """Slurm's stdout/stderr went to the run directory; stdout ends with the script's verify."""
    logs = run_dir / "logs"
    out = logs / f"slurm-nvrx-qual-{run_id}-{job_id}.out"
    assert [p.name for p in logs.glob("slurm-*.out")] == [out.name]
    assert (logs / f"slurm-nvrx-qual-{run_id}-{job_id}.err").is_file()
    return out.read_text()


def our_verify(run_dir: Path) -> tuple[int, dict]:
    verify = run_in_session([sys.executable, "-m", "harness", "verify", str(run_dir), "--json", "-", "--no-write"],
                            timeout_s=120, cwd=ROOT)
    assert verify.returncode in (0, 1), verify.stdout[-3000:] + verify.stderr
    return verify.returncode, json.loads(verify.stdout)


def criteria(verdict: dict) -> dict[str, tuple[str, str]]:
    return {c["id"]: (c["status"], c["detail"]) for c in verdict["criteria"]}


def cycle_records(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "cycle_infos").glob("cycle_info.*"))
            if not p.name.endswith(".current")]


@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_sbatch_two_node_job_qualifies(fault, log_routing_launcher, fresh_run):
    work, run_id = fresh_run
    status, job_id, run_dir = submit(log_routing_launcher, work, run_id, "--nnodes", "2", "--fault", fault)
    shown = slurm_output(run_dir, run_id, job_id)
    assert status == 0, shown[-3000:]
    assert "QUALIFIED" in shown and "NOT QUALIFIED" not in shown, shown[-3000:]
    code, verdict = our_verify(run_dir)  # and so does a verify of our own, read-only
    assert code == 0 and verdict["qualified"] is True
    # two launchers, one per node, in one job; rank 1 ran (and was faulted) on the second node
    infos = cycle_records(run_dir)
    assert infos and all(i["active_nodes"] == "n[1-2]" and i["job_id"] == job_id for i in infos), infos
    log = (run_dir / "logs" / "launcher.log").read_text()
    assert "[n1]" in log and "[n2]" in log
    marker = json.loads((run_dir / "fault_injected.json").read_text())
    assert (marker["host"], marker["rank"], marker["fault"]) == ("n2", 1, fault)
    # the rendezvous host and its ports came from the first node at run time, not from the plan
    script = (run_dir / "sbatch.sh").read_text()
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in script
    assert '--rdzv-endpoint "${RDZV_ENDPOINT}"' in script


@pytest.mark.slurm(nodes=3)
def test_node_loss_with_a_hot_spare_qualifies(log_routing_launcher, fresh_run):
    """Three launchers for two active nodes (--nnodes 2:3): one joins as standby. The node of
    rank 1 is lost whole (launcher and workers SIGKILLed); the standby is promoted, training
    resumes from the latest checkpoint with its optimizer state, and every criterion passes."""
    work, run_id = fresh_run
    status, job_id, run_dir = submit(log_routing_launcher, work, run_id, "--nnodes", "2", "--hot-spares", "1",
                                     "--fault", "node")
    shown = slurm_output(run_dir, run_id, job_id)
    assert status == 0 and "QUALIFIED" in shown and "NOT QUALIFIED" not in shown, shown[-3000:]
    assert "--nnodes 2:3" in (run_dir / "sbatch.sh").read_text()
    code, verdict = our_verify(run_dir)
    assert code == 0 and verdict["qualified"] is True
    lost = json.loads((run_dir / "fault_injected.json").read_text())["host"]
    before, after = (i["active_nodes"] for i in cycle_records(run_dir)[:2])
    status_, detail = criteria(verdict)["replacement_cycle"]
    assert status_ == "pass" and f"node {lost} (rank 1) was lost" in detail and "took its place" in detail, detail
    assert criteria(verdict)["optimizer_reload"][0] == "pass"
    assert before != after, (before, after)
    # NVIDIA/nvidia-resiliency-ext#348: 0.6.0 closed the rendezvous for good when more agents than
    # max_nodes re-joined; 0.7.0 must not
    assert "Maximum number of nodes exceeded" not in (run_dir / "logs" / "launcher.log").read_text()


def test_node_loss_without_a_spare_is_a_failed_recovery(log_routing_launcher, fresh_run):
    """What NVRx 0.7.0 does when a node of a two-node job is lost and no spare exists: the
    surviving launcher sees its worker fail, announces a restart, waits in the rendezvous for a
    second node that never comes, and gives up when the join timeout passes (RendezvousTimeoutError,
    exit 1). The suite calls it what it is, a failed recovery: replacement_cycle fails."""
    work, run_id = fresh_run
    status, job_id, run_dir = submit(log_routing_launcher, work, run_id, "--nnodes", "2", "--fault", "node",
                                     "--rdzv-join-timeout", "20")
    shown = slurm_output(run_dir, run_id, job_id)
    assert status == 1 and "NOT QUALIFIED" in shown, shown[-3000:]
    log = (run_dir / "logs" / "launcher.log").read_text()
    assert "Worker group FAILED" in log and "will restart worker group" in log
    assert "rendezvous has timed out" in log and "RendezvousTimeoutError" in log
    code, verdict = our_verify(run_dir)
    assert code == 1 and verdict["qualified"] is False
    status_, detail = criteria(verdict)["replacement_cycle"]
    assert status_ == "fail" and "started no replacement workers" in detail, detail
    assert criteria(verdict)["pre_fault_checkpoint"][0] == "pass"


@pytest.mark.slurm(nodes=3)
def test_pytest_inside_salloc_runs_the_multi_node_scenarios(fresh_run):
    """pytest once, inside `salloc --nodes=3`: the scenario fixture launches with srun on two of
    them (a kill on rank 1 qualifies; a doomed --no-load-optim run is stopped by scancel of its
    step; Megatron's loop at TP2 x PP2 qualifies after a kill on the second node) and on all
    three for the loss of a node with a hot spare."""
    work, run_id = fresh_run
    inner_work = work / "runs" / run_id
    inner_work.mkdir(parents=True)
    job_name = f"nvrx-qual-salloc-{secrets.token_hex(3)}"
    argv = ["salloc", "--nodes=3", "--ntasks-per-node=1", "--time=20", f"--job-name={job_name}",
            sys.executable, "-m", "pytest", "recovery_tests/test_slurm_allocation.py", "-p", "no:cacheprovider",
            "-q", "-rA", "--require-slurm", "--work-dir", str(inner_work),
            "--launch-slots", "1"]  # one at a time, in the launch slot this test holds
    try:
        # three reference runs and one of Megatron's loop (4 ranks on 2 cores: 2-3 minutes)
        inner = run_in_session(argv, timeout_s=840, cwd=ROOT)
    finally:
        scancel_name(job_name)
    tail = (inner.stdout + inner.stderr)[-6000:]
    assert inner.returncode == 0, tail
    assert "4 passed" in inner.stdout and "skipped" not in inner.stdout, tail
    assert job_gone(job_name)
    assert processes_under(inner_work) == []


# Megatron's own loop across the nodes: 2 ranks per node, TP2 x PP2 (the walkthrough's 2 x 4
# TP2 PP2 at half width), the plain optimizer (which restores correctly; the distributed one's
# step reset is test_megatron_cpu_shapes.py's), a checkpoint every 4 of 12 iterations.
MEGATRON_CPU_TP2_PP2 = ("--workload", "megatron-cpu", "--gpus-per-node", "2", "--tp", "2", "--pp", "2",
                        "--distributed-optimizer", "0")


def megatron_layouts(run_dir: Path) -> list[tuple[int, ...]]:
    """(world, DP, TP, PP) from Megatron's own arguments line, one per cycle log."""
    found = []
    for log in sorted((run_dir / "logs").glob("train_cycle*.log")):
        m = re.search(r"using world size: (\d+), data-parallel size: (\d+), .*tensor-model-parallel size: (\d+), "
                      r"pipeline-model-parallel size: (\d+)", log.read_text(errors="replace"))
        if m:
            found.append(tuple(int(g) for g in m.groups()))
    return found


def test_sbatch_megatron_cpu_tp2_pp2_across_two_nodes_qualifies(megatron_cpu, fresh_run):
    """`nvrx-qual sbatch --workload megatron-cpu --nnodes 2`: one launcher per node through srun,
    Megatron's loop at TP2 x PP2 over 4 ranks on two nodes, rank 3 (the last pipeline stage, on
    the second node) killed after checkpoint 4; the batch script's own verify and ours qualify."""
    work, run_id = fresh_run
    status, job_id, run_dir = submit(megatron_cpu, work, run_id, "--nnodes", "2", "--fault-rank", "3",
                                     workload=MEGATRON_CPU_TP2_PP2, timeout_s=540)
    shown = slurm_output(run_dir, run_id, job_id)
    assert status == 0, shown[-3000:]
    assert "QUALIFIED" in shown and "NOT QUALIFIED" not in shown, shown[-3000:]
    code, verdict = our_verify(run_dir)
    assert code == 0 and verdict["qualified"] is True, criteria(verdict)
    infos = cycle_records(run_dir)
    assert len(infos) >= 2 and all(i["active_nodes"] == "n[1-2]" and i["job_id"] == job_id for i in infos), infos
    marker = json.loads((run_dir / "fault_injected.json").read_text())
    assert (marker["host"], marker["rank"], marker["fault"]) == ("n2", 3, "kill")
    assert megatron_layouts(run_dir) == [(4, 1, 2, 2), (4, 1, 2, 2)]
    script = (run_dir / "sbatch.sh").read_text()
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script and "--nproc-per-node 2" in script


@pytest.mark.slurm(nodes=3)
def test_megatron_cpu_node_loss_with_a_hot_spare_qualifies(megatron_cpu, fresh_run):
    """Megatron's loop at TP2 x PP2 on two active nodes and a standby: the second node (ranks 2
    and 3, the last pipeline stage) is lost whole; NVRx promotes the standby, Megatron restores
    its sharded checkpoint there and trains to the end."""
    work, run_id = fresh_run
    status, job_id, run_dir = submit(megatron_cpu, work, run_id, "--nnodes", "2", "--hot-spares", "1", "--fault",
                                     "node", "--fault-rank", "2", workload=MEGATRON_CPU_TP2_PP2, timeout_s=540)
    shown = slurm_output(run_dir, run_id, job_id)
    assert status == 0 and "QUALIFIED" in shown and "NOT QUALIFIED" not in shown, shown[-3000:]
    code, verdict = our_verify(run_dir)
    assert code == 0 and verdict["qualified"] is True, criteria(verdict)
    lost = json.loads((run_dir / "fault_injected.json").read_text())["host"]
    before, after = (i["active_nodes"] for i in cycle_records(run_dir)[:2])
    status_, detail = criteria(verdict)["replacement_cycle"]
    assert status_ == "pass" and f"node {lost} (rank 2) was lost" in detail and "took its place" in detail, detail
    # the standby is whichever launcher joined last: the lost node is not n1 (the rendezvous host)
    # and the replacement runs on n1 and the node that was standby in cycle 0
    spare = ({"n1", "n2", "n3"} - set(expand_hostlist(before))).pop()
    assert lost != "n1" and lost in expand_hostlist(before) and sorted(expand_hostlist(after)) == sorted({"n1", spare}), \
        (before, after, lost)
    status_, detail = criteria(verdict)["optimizer_reload"]
    assert status_ == "pass" and "with optimizer state" in detail, detail
    assert megatron_layouts(run_dir) == [(4, 1, 2, 2), (4, 1, 2, 2)]


def test_min_max_nodes_on_nvrx_070_is_active_plus_standby_not_a_job_that_shrinks(megatron_cpu, fresh_run):
    """What `--nnodes 1:2` is under NVRx 0.7.0 (the plan renders it for --nnodes 1 --hot-spares 1;
    it refuses --nnodes 1:2 itself): the rendezvous closes as soon as MIN nodes joined and runs
    them alone, the other launcher waits as standby; Megatron runs a world of 1 node's ranks, not
    2 nodes'. A kill on rank 1 recovers on the same node, the standby stays standby."""
    work, run_id = fresh_run
    status, job_id, run_dir = submit(megatron_cpu, work, run_id, "--nnodes", "1", "--hot-spares", "1",
                                     "--fault-rank", "1", timeout_s=420,
                                     workload=("--workload", "megatron-cpu", "--gpus-per-node", "2",
                                               "--distributed-optimizer", "0"))
    shown = slurm_output(run_dir, run_id, job_id)
    assert status == 0 and "QUALIFIED" in shown and "NOT QUALIFIED" not in shown, shown[-3000:]
    assert "--nnodes 1:2" in (run_dir / "sbatch.sh").read_text()
    log = (run_dir / "logs" / "launcher.log").read_text()
    assert "1 active segs and 1 standby ranks [1]" in log, run_dir
    assert re.search(r"Standby \(rank=1\) for round \d+", log), run_dir
    assert all(i["active_nodes"] == "n[1]" for i in cycle_records(run_dir)), cycle_records(run_dir)
    assert megatron_layouts(run_dir) == [(2, 2, 1, 1), (2, 2, 1, 1)]  # world 2 (DP 2), never 4
