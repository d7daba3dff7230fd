"""The fixture path inside a real Slurm allocation: pytest runs once in `salloc --nodes=3`, the
scenario fixture launches one ft_launcher per node with `srun`, and the verdict is read from the
shared run directory. test_slurm_cluster.py starts these tests in `salloc` on the local cluster
(tools/slurm-local); outside an allocation they skip.

The local cluster's "nodes" are one host: its disk is shared by construction, hence
--assume-shared-storage (a real cluster needs --work-dir on NFS/Lustre/GPFS)."""

from __future__ import annotations

import dataclasses
import os
import sys

import psutil
import pytest

from pytest_nvrx_qual.runs import Scenario
from recovery_tests.test_recovery_megatron_cpu import megatron_cpu  # noqa: F401  (the fixture)
from harness.machine import slurm
from harness.judge.criteria import FAIL, PASS

# the scenarios' rendezvous ports are asked of the allocation's first host as each test runs
pytestmark = [pytest.mark.e2e, pytest.mark.slurm(nodes=2),
              pytest.mark.launches(undeclarable="its ports are asked of the allocation when the test runs")]

NNODES = 2


@pytest.fixture(scope="module")
def allocation() -> slurm.Allocation:
    alloc = slurm.Allocation.from_env(os.environ)
    if alloc is None or alloc.nnodes < NNODES:
        pytest.skip(f"runs inside a Slurm allocation of {NNODES} or more nodes (recovery_tests/test_slurm_cluster.py "
                    f"starts it in `salloc --nodes={NNODES + 1}`)")
    return alloc


def two_node_scenario(alloc: slurm.Allocation, target, fault: str, **kw) -> Scenario:
    # Both ports are asked from the first host's OS now, at start (never the submitting host's).
    endpoint, log_port = slurm.rendezvous_ports(alloc, sys.executable)
    knobs = dict(nnodes=NNODES, gpus_per_node=1, fault_rank=1, assume_shared_storage=True,
                 rdzv_endpoint=endpoint, log_server_port=log_port)
    return Scenario(fault, target, name=kw.pop("name", f"srun-{fault}"), knobs=tuple(sorted(knobs.items())), **kw)


def test_srun_node_loss_with_a_hot_spare_qualifies(allocation, log_routing_launcher, scenarios):
    """Three launchers for two active nodes: the node of rank 1 is lost whole, the standby is
    promoted, and the run qualifies although srun's status is the lost task's SIGKILL (137)."""
    if allocation.nnodes < NNODES + 1:
        pytest.skip(f"needs a hot spare: run inside `salloc --nodes={NNODES + 1}`")
    scenario = two_node_scenario(allocation, log_routing_launcher, "node", name="srun-node-spare")
    scenario = dataclasses.replace(scenario, knobs=tuple(sorted({**dict(scenario.knobs), "hot_spares": 1}.items())))
    outcome = scenarios.outcome(scenario)
    assert outcome.plan.command.argv[:2] == ("srun", "--ntasks=3")
    failed = [f"{c.id}: {c.status}: {c.detail}" for c in outcome.verdict.criteria if c.status != PASS]
    assert outcome.verdict.qualified, (outcome.run_dir, failed, outcome.launch)
    assert outcome.launch.launcher_exit_code == 137 and outcome.launch.stopped_early is None
    detail = outcome.verdict.criterion("replacement_cycle").detail
    assert "was lost and cycle 1 runs on" in detail and "took its place" in detail, detail
    assert processes_of(outcome.run_dir) == []


def processes_of(run_dir) -> list[str]:
    """Processes still running with this run directory on their command line."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if str(run_dir) in " ".join(proc.info["cmdline"] or ()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'])[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def our_steps(alloc: slurm.Allocation, run_id: str) -> str | None:
    return slurm.find_step(slurm.run_command(slurm.list_steps_argv(alloc.job_id)), slurm.step_name(run_id))


def test_srun_two_node_kill_qualifies(allocation, log_routing_launcher, scenarios):
    outcome = scenarios.outcome(two_node_scenario(allocation, log_routing_launcher, "kill"))
    plan = outcome.plan
    assert plan.srun is not None and plan.command.argv[:3] == ("srun", "--ntasks=2", "--ntasks-per-node=1")
    failed = [f"{c.id}: {c.status}: {c.detail}" for c in outcome.verdict.criteria if c.status != PASS]
    assert outcome.verdict.qualified, (outcome.run_dir, failed)
    # one launcher per node, rank 1 on the second node, the fault injected there
    log = (outcome.run_dir / "logs" / "launcher.log").read_text()
    assert all(f"[{node}]" in log for node in allocation.nodes[:NNODES]), outcome.run_dir
    marker = (outcome.run_dir / "fault_injected.json").read_text()
    assert f'"host": "{allocation.nodes[1]}"' in marker, marker
    assert plan.spec.rdzv_endpoint.startswith(f"{allocation.first_host}:")
    assert f"--nodelist={allocation.first_host}" in plan.command.argv  # the store's node is in the step
    assert our_steps(allocation, plan.spec.run_id) is None
    assert processes_of(outcome.run_dir) == []


def test_doomed_run_is_stopped_by_scancel_of_its_step(allocation, log_routing_launcher, scenarios):
    """--no-load-optim: the replacement workers cannot pass optimizer_reload; the watcher stops
    the job at once by cancelling its srun step, and the report says the harness stopped it."""
    outcome = scenarios.outcome(two_node_scenario(allocation, log_routing_launcher, "kill", name="srun-doomed",
                                                  workload_args=("--no-load-optim",)))
    stopped = outcome.launch.stopped_early
    assert stopped and "--no-load-optim" in stopped and f"(scancel {allocation.job_id}." in stopped, stopped
    assert outcome.verdict.criterion("optimizer_reload").status == FAIL
    clean = outcome.verdict.criterion("clean_finish")
    assert clean.status == FAIL and "the harness stopped the launch early" in clean.detail, clean.detail
    assert "stopped the launch early" in (outcome.run_dir / "report.md").read_text()
    # Slurm itself cancelled the step (slurmstepd says so on srun's stderr), and nothing is left
    console = (outcome.run_dir / "logs" / "console.log").read_text()
    assert "CANCELLED" in console, outcome.run_dir
    assert our_steps(allocation, outcome.plan.spec.run_id) is None
    assert outcome.launch.leftover_processes_killed == 0  # the final sweep found nothing: scancel stopped it all
    assert processes_of(outcome.run_dir) == []
    assert not outcome.verdict.qualified


def test_srun_megatron_cpu_tp2_pp2_kill_on_the_second_node_qualifies(allocation, megatron_cpu, scenarios):  # noqa: F811
    """Megatron's own loop through the fixtures' srun path: 2 ranks per node, TP2 x PP2, the
    plain optimizer; rank 3 (last pipeline stage, second node) is killed and the run qualifies."""
    scenario = two_node_scenario(allocation, megatron_cpu, "kill", name="srun-megatron-cpu-tp2-pp2")
    knobs = {**dict(scenario.knobs), "gpus_per_node": 2, "tp": 2, "pp": 2, "fault_rank": 3,
             "distributed_optimizer": False}
    scenario = dataclasses.replace(scenario, workload="megatron-cpu", knobs=tuple(sorted(knobs.items())),
                                   fail_fast=False)
    outcome = scenarios.outcome(scenario)
    assert outcome.plan.command.argv[:3] == ("srun", "--ntasks=2", "--ntasks-per-node=1")
    failed = [f"{c.id}: {c.status}: {c.detail}" for c in outcome.verdict.criteria if c.status not in (PASS, "not_applicable")]
    assert outcome.verdict.qualified, (outcome.run_dir, failed)
    marker = (outcome.run_dir / "fault_injected.json").read_text()
    assert f'"host": "{allocation.nodes[1]}"' in marker and '"rank": 3,' in marker, marker
    assert processes_of(outcome.run_dir) == []
