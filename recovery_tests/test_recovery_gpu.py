"""The GPU tier: Megatron-LM's unmodified pretrain_gpt.py under ft_launcher on this node
(and across the nodes of a Slurm allocation), one real kill / hang / none per scenario,
judged by the same verdict code as `nvrx-qual verify`.

Run on a GPU node:   pytest -m gpu --megatron-path /path/to/Megatron-LM
Short deadlines:     add --deadline-profile short (a hang is detected within about a minute)
Workload arguments:  --workload-args='--seed 1234' (appended to pretrain_gpt.py)
In CI GPU runners:   pytest -m gpu --require-gpu --junitxml=gpu.xml
Multi-node (inside `salloc --nodes=2 --gpus-per-node=4`): add --work-dir on shared storage.

Missing prerequisites skip these tests with what to install or set; --require-gpu turns
that into failures. A CPU run or a dry run is not evidence of GPU training recovery.
"""

from __future__ import annotations

import re
import sys

import pytest

from pytest_nvrx_qual.runs import Scenario, explain
from harness.machine import slurm
from harness.judge.criteria import CRITERIA_IDS, NOT_APPLICABLE, PASS
from harness.machine.nvrx import NvrxTarget, installed_version
from harness.plan.spec import SHARED_FS_TYPES, SystemProbe

# each scenario follows from the GPUs and the Megatron checkout found when the test runs
pytestmark = [pytest.mark.gpu, pytest.mark.e2e,
              pytest.mark.launches(undeclarable="its scenario follows from the GPUs found when it runs")]

FAULTS = ("kill", "hang", "none")
FAULT_SPECIFIC = {"pre_fault_checkpoint", "replacement_cycle", "optimizer_reload"}


def megatron_scenario(gpu_env, fault: str, options: tuple[dict, tuple[str, ...]] = ({}, ()), **knobs) -> Scenario:
    """The seed's default run on this node: two GPUs and fault rank 1, or one GPU and rank 0.
    `options`: the RunSpec fields and workload arguments of the pytest options
    (--deadline-profile, --workload-args)."""
    gpus = knobs.pop("gpus_per_node", min(2, len(gpu_env.gpus)))
    rank, _why = gpu_env.fault_rank_for(gpus * knobs.get("nnodes", 1))
    base = {"megatron_path": gpu_env.megatron_path, "gpus_per_node": gpus, "fault_rank": rank,
            "transformer_engine": gpu_env.transformer_engine, "apex": gpu_env.apex, "gpu_arch": gpu_env.arch}
    base.update(options[0])
    base.update(knobs)
    name = f"megatron-{fault}-{knobs.get('nnodes', 1)}x{gpus}"
    return Scenario(fault, NvrxTarget(installed_version() or "0"), workload="megatron", name=name,
                    knobs=tuple(sorted(base.items())), workload_args=tuple(options[1]))


@pytest.fixture(scope="session")
def gpu_options(gpu_knobs, gpu_workload_args) -> tuple[dict, tuple[str, ...]]:
    return gpu_knobs, gpu_workload_args



def record_latency(record_property, outcome) -> None:
    """Latency split into the JUnit XML (one property per metric)."""
    for key, value in outcome.verdict.metrics.to_json().items():
        if isinstance(value, (int, float)) or value is None:
            record_property(key, value)
    record_property("run_dir", str(outcome.run_dir))


@pytest.mark.parametrize("check", CRITERIA_IDS)
@pytest.mark.parametrize("fault", FAULTS)
def test_megatron_single_node(fault, check, gpu_env, gpu_options, scenarios, record_property):
    outcome = scenarios.outcome(megatron_scenario(gpu_env, fault, gpu_options))
    record_latency(record_property, outcome)
    expected = NOT_APPLICABLE if fault == "none" and check in FAULT_SPECIFIC else PASS
    assert outcome.verdict.criterion(check).status == expected, explain(outcome, check)


MULTINODE = {"tp2-pp2-dp2": dict(nnodes=2, gpus_per_node=4, tp=2, pp=2)}


@pytest.fixture
def allocation_scenario(request, gpu_env, gpu_options, work_dir, pytestconfig):
    """The seed's TP=2 PP=2 DP=2 example on 2x4 GPUs, inside the current allocation: one
    launcher per node via srun, rendezvous on the allocation's first host, shared storage."""
    fault, shape = request.param
    knobs = dict(MULTINODE[shape])
    problem = gpu_env.multinode_problem(knobs["nnodes"], knobs["gpus_per_node"])
    fstype = SystemProbe().fs_type(work_dir)
    if problem is None and fstype not in SHARED_FS_TYPES:
        problem = (f"--work-dir {work_dir} is on {fstype or 'an unknown filesystem'}, which other nodes cannot see: "
                   "pass --work-dir on shared storage (NFS, Lustre, GPFS, ...)")
    if problem:
        if pytestconfig.getoption("--require-gpu"):
            pytest.fail(f"--require-gpu: {problem}", pytrace=False)
        pytest.skip(problem)
    endpoint, log_port = slurm.rendezvous_ports(gpu_env.allocation, sys.executable)
    return megatron_scenario(gpu_env, fault, gpu_options, rdzv_endpoint=endpoint, log_server_port=log_port, **knobs)


@pytest.mark.parametrize("allocation_scenario", [(f, s) for f in FAULTS for s in MULTINODE],
                         ids=[f"{f}-{s}" for f in FAULTS for s in MULTINODE], indirect=True)
def test_megatron_multinode(allocation_scenario, scenarios, record_property):
    outcome = scenarios.outcome(allocation_scenario)
    record_latency(record_property, outcome)
    failed = [c for c in outcome.verdict.criteria if c.status not in (PASS, NOT_APPLICABLE)]
    assert not failed, "\n\n".join(explain(outcome, c.id) for c in failed)


# Megatron's non-persistent global tier on GPUs (harness.vocab.tiers, docs/tiers.md): the fault after
# the newest commit of any tier (non-persistent 2 before persistent 5), restored from that tier.
# In the GPU kit's script beside the single-node cases, with the local tier and the in-process
# restart below. Those two are refused on megatron-cpu (tiers.CPU_REFUSALS, with Megatron's and
# NVRx's own error); recovery_tests/test_gpu_tier_plans.py holds their planned commands to
# Megatron's own argument checks on any machine.
TIER_ARGS = ("--non-persistent-ckpt-type", "global", "--non-persistent-save-interval", "2")


def local_tier_args(local_dir: str, gpus: int) -> tuple[str, ...]:
    """Megatron's local checkpoints every 3 iterations (persistent every 5) in NVRx's
    LocalCheckpointManager; with two GPUs or more each rank's shard is replicated to a peer
    (CliqueReplicationStrategy, factor 2), and NVRx's DEBUG lines say which copy each rank read."""
    args = ("--non-persistent-ckpt-type", "local", "--non-persistent-local-ckpt-dir", local_dir,
            "--non-persistent-save-interval", "3")
    if gpus >= 2:
        args += ("--replication", "--replication-factor", "2", "--replication-jump", "1", "--logging-level", "10")
    return args


# Megatron's wrapper around NVRx's inprocess.Wrapper (megatron/training/inprocess_restart.py);
# the fault: an exception raised in the fault rank's training step, recovered in the same processes.
INPROCESS_ARGS = ("--inprocess-restart", "--inprocess-max-iterations", "3")


@pytest.mark.parametrize("check", CRITERIA_IDS)
def test_megatron_single_node_non_persistent_tier(check, gpu_env, gpu_options, scenarios, record_property):
    knobs, args = gpu_options
    outcome = scenarios.outcome(megatron_scenario(gpu_env, "kill", (knobs, (*args, *TIER_ARGS))))
    record_latency(record_property, outcome)
    assert outcome.verdict.criterion(check).status == PASS, explain(outcome, check)
    if check == "optimizer_reload":
        assert "loaded non-persistent checkpoint 2" in outcome.verdict.criterion(check).detail


@pytest.mark.parametrize("check", CRITERIA_IDS)
def test_megatron_single_node_local_tier(check, gpu_env, gpu_options, scenarios, record_property, tmp_path_factory):
    """A kill after persistent 5 (local every 3): Megatron restores the newest validated checkpoint
    of either tier (local 6 when NVRx validated it before the kill), judged by optimizer_reload's
    local rows (which copy each rank read, from whose local directory)."""
    knobs, args = gpu_options
    gpus = min(2, len(gpu_env.gpus))
    local_dir = str(tmp_path_factory.getbasetemp() / "local-ckpt")
    outcome = scenarios.outcome(megatron_scenario(gpu_env, "kill", (knobs, (*args, *local_tier_args(local_dir, gpus)))))
    record_latency(record_property, outcome)
    assert outcome.verdict.criterion(check).status == PASS, explain(outcome, check)


@pytest.mark.parametrize("check", ("pre_fault_checkpoint", "replacement_cycle", "optimizer_reload"))
def test_megatron_single_node_inprocess_restart(check, gpu_env, gpu_options, scenarios, record_property):
    """An exception in the fault rank's step after checkpoint 5, recovered by NVRx's Wrapper in
    the same processes (no new launcher cycle, the injected pid never reported failed), from
    checkpoint 5, within --inprocess-max-iterations."""
    knobs, args = gpu_options
    outcome = scenarios.outcome(megatron_scenario(gpu_env, "exception", (knobs, (*args, *INPROCESS_ARGS))))
    record_latency(record_property, outcome)
    result = outcome.verdict.criterion(check)
    assert result.status == PASS, explain(outcome, check)
    if check == "replacement_cycle":
        assert "in-process restart, not a launcher restart" in result.detail, explain(outcome, check)
    assert outcome.verdict.qualified, explain(outcome, check)


# The GPU-only fault kinds (harness.nemesis.inject: torch's own kernels, nothing compiled), refused on the
# CPU tiers before launch. gpu-hang: a never-ending kernel on the fault rank's GPU; the step's next
# synchronize blocks with the rank alive, so only a rank monitor's timeout may count as its
# detection (replacement_cycle fails without the timeout line). gpu-error: an illegal memory
# access, a sticky CUDA error; the rank dies (how is what this run shows: the kind fixes no exit
# code) and the group restarts. Both must qualify. In the GPU kit's script (-k test_megatron_single_node).
GPU_KINDS = ("gpu-hang", "gpu-error")


@pytest.mark.parametrize("check", CRITERIA_IDS)
@pytest.mark.parametrize("kind", GPU_KINDS)
def test_megatron_single_node_gpu_kinds(kind, check, gpu_env, gpu_options, scenarios, record_property):
    outcome = scenarios.outcome(megatron_scenario(gpu_env, kind, gpu_options))
    record_latency(record_property, outcome)
    result = outcome.verdict.criterion(check)
    assert result.status == PASS, explain(outcome, check)
    if check == "replacement_cycle" and kind == "gpu-hang":
        assert re.search(r"after a (section|out-of-section) timeout", result.detail), explain(outcome, check)
    assert outcome.verdict.qualified, explain(outcome, check)
