"""harness.machine.slurm (the allocation, finding and cancelling our named job step), the srun
form of multi-node plans, and the step canceller the runner hands to launch().

Stand-ins for Slurm's commands remain only for what the local cluster of test_slurm_cluster.py
cannot show: node lists of real clusters (gpu[001-004]), GPUs per node, a step that is already
gone when the harness cancels it, malformed answers. Cancelling our named step for real, the
allocation's node list and the two-node srun launch run against the local cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plan import commands as planning
from harness.launch import runner
from harness.machine import slurm
from harness.machine.nvrx import NvrxTarget
from harness.machine.slurm import Allocation, cancel_step, find_step, list_steps_argv
from harness.plan.spec import RunSpec


class FakeRunner:
    """Stands in for subprocess: answers argv by its first word, records every call."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(list(argv))
        return self.answers.get(argv[0], "")


# ---------------------------------------------------------------- the allocation

ALLOC_ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[001-002]", "SLURM_GPUS_ON_NODE": "4"}


def test_allocation_expands_the_node_list_with_scontrol():
    run = FakeRunner({"scontrol": "gpu001\ngpu002\n"})
    alloc = Allocation.from_env(ALLOC_ENV, run)
    assert alloc == Allocation(job_id="4242", nodes=("gpu001", "gpu002"), gpus_per_node=4)
    assert (alloc.nnodes, alloc.first_host) == (2, "gpu001")
    assert run.calls == [["scontrol", "show", "hostnames", "gpu[001-002]"]]


def test_allocation_falls_back_to_slurm_nodelist():
    run = FakeRunner({"scontrol": "node7\n"})
    alloc = Allocation.from_env({"SLURM_JOB_ID": "9", "SLURM_NODELIST": "node7"}, run)
    assert alloc is not None and alloc.nodes == ("node7",) and alloc.gpus_per_node is None
    assert run.calls == [["scontrol", "show", "hostnames", "node7"]]


@pytest.mark.parametrize("env", [{}, {"SLURM_JOB_ID": "4242"}, {"SLURM_JOB_NODELIST": "gpu[001-002]"},
                                 {"SLURM_JOB_ID": "", "SLURM_JOB_NODELIST": "gpu001"}])
def test_no_allocation_outside_slurm_and_no_command_run(env):
    run = FakeRunner({"scontrol": "gpu001\n"})
    assert Allocation.from_env(env, run) is None
    assert run.calls == []


def test_allocation_propagates_a_failing_scontrol():
    def broken(argv: list[str]) -> str:
        raise FileNotFoundError(2, "No such file or directory", "scontrol")

    with pytest.raises(FileNotFoundError):
        Allocation.from_env(ALLOC_ENV, broken)


@pytest.mark.parametrize("env, expected", [
    ({"SLURM_GPUS_ON_NODE": "4"}, 4),
    ({"SLURM_GPUS_PER_NODE": "h100:4"}, 4),
    ({"SLURM_GPUS_PER_NODE": "4(x2)"}, 4),
    ({"SLURM_GPUS_PER_NODE": "8"}, 8),
    ({"SLURM_GPUS_ON_NODE": "2", "SLURM_GPUS_PER_NODE": "8"}, 2),  # what this node has wins
    ({"SLURM_GPUS_ON_NODE": "", "SLURM_GPUS_PER_NODE": "gpu:a100:8"}, 8),
    ({"SLURM_GPUS_PER_NODE": "h100"}, None),
    ({}, None),
])
def test_gpus_per_node(env, expected):
    assert slurm._gpus_per_node(env) == expected


# ---------------------------------------------------------------- our job step

SQUEUE = """\
4242.extern|extern
4242.batch|batch
4242.0|bash
4242.1|nvrx-qual-run-a
4242.2|nvrx-qual-run-ab
"""


def test_list_steps_argv():
    assert list_steps_argv("4242") == ["squeue", "--steps", "--noheader", "--format=%i|%j", "--jobs=4242"]


@pytest.mark.parametrize("name, step", [("nvrx-qual-run-a", "4242.1"), ("nvrx-qual-run-ab", "4242.2"),
                                        ("bash", "4242.0"), ("nvrx-qual-run", None), ("nvrx-qual-run-abc", None)])
def test_find_step_matches_the_whole_name(name, step):
    assert find_step(SQUEUE, name) == step


def test_find_step_tolerates_padding_and_blank_lines():
    assert find_step("\n  4242.3|nvrx-qual-x  \n\n", "nvrx-qual-x") == "4242.3"
    assert find_step("", "nvrx-qual-x") is None


def test_cancel_step_does_nothing_when_the_step_is_gone():
    run = FakeRunner({"squeue": "4242.batch|batch\n"})
    assert cancel_step("4242", "nvrx-qual-run-a", run) is None
    assert run.calls == [list_steps_argv("4242")]


def test_step_name():
    assert slurm.step_name("megatron-kill-20261129T163200Z-ab12") == "nvrx-qual-megatron-kill-20261129T163200Z-ab12"


# ---------------------------------------------------------------- the srun form of a plan


def spec(tmp_path: Path, **kwargs) -> RunSpec:
    values = dict(workload="reference", work_dir=tmp_path / "work", run_id="two-nodes", nnodes=2, gpus_per_node=4,
                  rdzv_endpoint="node001:29400", log_server_port=29555)
    values.update(kwargs)
    return RunSpec(**values)


def test_two_node_megatron_plan_runs_the_launcher_under_a_named_srun_step(tmp_path, megatron_checkout):
    p = planning.build(spec(tmp_path, workload="megatron", megatron_path=megatron_checkout), NvrxTarget("0.7.0"))
    assert p.srun is not None and p.command is p.srun
    n = len(p.launcher.argv)
    assert list(p.command.argv[:-n]) == ["srun", "--ntasks=2", "--ntasks-per-node=1", "--nodes=2",
                                         "--nodelist=node001", "--gpus-per-node=4", "--job-name=nvrx-qual-two-nodes"]
    assert p.command.argv[-n:] == p.launcher.argv
    assert (p.command.cwd, p.command.env) == (p.launcher.cwd, p.launcher.env)
    assert "--label" not in p.command.argv  # NVRx >= 0.6 routes its own logs
    assert not p.captures_console


def test_two_node_plan_for_an_old_launcher_labels_every_line(tmp_path):
    # Megatron needs NVRx >= 0.6, so the old launcher is planned with the reference workload
    # (which asks srun for no GPUs).
    p = planning.build(spec(tmp_path), NvrxTarget("0.4.1"))
    assert p.srun is not None and p.captures_console
    n = len(p.launcher.argv)
    assert list(p.command.argv[:-n]) == ["srun", "--ntasks=2", "--ntasks-per-node=1", "--nodes=2",
                                         "--nodelist=node001", "--job-name=nvrx-qual-two-nodes", "--label"]


def test_the_srun_step_includes_the_node_that_hosts_the_rendezvous_store(tmp_path):
    """The launcher on the endpoint's node hosts the store: srun, left to itself in a larger
    allocation, placed a step on n2 and n3 with the endpoint on n1, and both launchers waited
    for a store nobody hosted (local Slurm, 2026-12-05). An address names no node: no pin."""
    with_spare = planning.build(spec(tmp_path, hot_spares=1), NvrxTarget("0.7.0")).command.argv
    assert "--nodes=3" in with_spare and "--nodelist=node001" in with_spare
    by_address = planning.build(spec(tmp_path, rdzv_endpoint="10.0.0.7:29400"), NvrxTarget("0.7.0")).command.argv
    assert not any(a.startswith(("--nodes=", "--nodelist=")) for a in by_address)
    assert [planning.store_node(e) for e in ("n1:29400", "10.1.2.3:1", "[fe80::1]:29400", "${RDZV_ENDPOINT}", None)] \
        == ["n1", None, None, None, None]


def test_one_node_plan_has_no_srun(tmp_path):
    p = planning.build(spec(tmp_path, nnodes=1), NvrxTarget("0.7.0"))
    assert p.srun is None and p.command is p.launcher and p.command.argv[0] != "srun"


# ---------------------------------------------------------------- the runner's step canceller


@pytest.fixture
def cancels(monkeypatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def fake_cancel(job_id: str, name: str, runner=None) -> str:
        calls.append((job_id, name))
        return f"{job_id}.7"

    monkeypatch.setattr(slurm, "cancel_step", fake_cancel)
    return calls


def test_step_canceller_reads_the_job_from_the_process_environment(tmp_path, cancels, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    cancel = runner._step_canceller(planning.build(spec(tmp_path), NvrxTarget("0.7.0")), None)
    assert cancel is not None
    cancel()
    assert cancels == [("777", "nvrx-qual-two-nodes")]


def test_no_step_canceller_for_one_node_or_outside_an_allocation(tmp_path, cancels, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    one_node = planning.build(spec(tmp_path, nnodes=1), NvrxTarget("0.7.0"))
    assert runner._step_canceller(one_node, {"SLURM_JOB_ID": "4242"}) is None
    two_nodes = planning.build(spec(tmp_path), NvrxTarget("0.7.0"))
    assert runner._step_canceller(two_nodes, {}) is None
    assert runner._step_canceller(two_nodes, None) is None
    assert cancels == []


# ---------------------------------------------------------------- ports asked from the first host


def test_rendezvous_ports_are_asked_from_the_first_hosts_os():
    run = FakeRunner({"srun": "40001 40002\n"})
    alloc = Allocation(job_id="4242", nodes=("gpu001", "gpu002"), gpus_per_node=4)
    assert slurm.rendezvous_ports(alloc, "/py", run) == ("gpu001:40001", 40002)
    (argv,) = run.calls
    assert argv[:5] == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=gpu001", "--overlap"]
    assert argv[5:7] == ["/py", "-c"] and argv[-1] == "2"


@pytest.mark.parametrize("answer", ["", "40001\n", "40001 40001\n", "40001 x\n", "40001 70000\n"])
def test_an_unusable_port_answer_is_an_error_not_a_port(answer):
    alloc = Allocation(job_id="1", nodes=("a",), gpus_per_node=None)
    with pytest.raises(RuntimeError, match="free port"):
        slurm.rendezvous_ports(alloc, "/py", FakeRunner({"srun": answer}))


# ---------------------------------------------------------------- finding the cluster (fixtures.slurm)

from fixtures import slurm as cluster  # noqa: E402


def fake_sinfo(bin_dir: Path, body: str) -> dict[str, str]:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "sinfo"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return {"PATH": str(bin_dir)}


@pytest.fixture
def no_system_conf(monkeypatch, tmp_path):
    monkeypatch.setattr(cluster, "SYSTEM_CONF", tmp_path / "absent" / "slurm.conf")


def test_slurm_conf_wins_then_the_system_then_the_local_cluster(tmp_path, no_system_conf, monkeypatch):
    root = tmp_path / "repo"
    assert cluster.conf_path(root, {}) is None
    (root / ".slurm-local").mkdir(parents=True)
    (root / ".slurm-local" / "slurm.conf").write_text("ClusterName=x\n")
    assert cluster.conf_path(root, {}) == root / ".slurm-local" / "slurm.conf"
    assert cluster.conf_path(root, {"SLURM_CONF": "/etc/other.conf"}) == Path("/etc/other.conf")
    system = tmp_path / "etc-slurm.conf"
    system.write_text("ClusterName=y\n")
    monkeypatch.setattr(cluster, "SYSTEM_CONF", system)
    assert cluster.conf_path(root, {}) is None  # Slurm's own default applies


def test_a_cluster_answering_sinfo_is_ready_and_its_local_conf_exported(tmp_path, no_system_conf):
    root = tmp_path / "repo"
    (root / ".slurm-local").mkdir(parents=True)
    (root / ".slurm-local" / "slurm.conf").write_text("ClusterName=x\n")
    env = fake_sinfo(tmp_path / "bin", 'echo "n1 idle"; echo "n2 idle"')
    found = cluster.discover(root, env)
    assert found.ready and found.nodes == (("n1", "idle"), ("n2", "idle"))
    assert found.env == {"SLURM_CONF": str(root / ".slurm-local" / "slurm.conf")}
    assert found.too_small(2) is None
    assert "tools/slurm-local start --nodes 3" in found.too_small(3)


@pytest.mark.parametrize("body, said", [("echo 'slurm_load_partitions: Unable to contact' >&2; exit 1",
                                         "Unable to contact"),
                                        ("exit 0", "lists no node")])
def test_a_cluster_that_does_not_answer_is_a_reason_to_skip(tmp_path, no_system_conf, body, said):
    conf = tmp_path / "slurm.conf"
    conf.write_text("x\n")
    found = cluster.discover(tmp_path, {**fake_sinfo(tmp_path / "bin", body), "SLURM_CONF": str(conf)})
    assert not found.ready and said in found.problem and "tools/slurm-local start" in found.problem
    assert found.env == {}  # SLURM_CONF was the caller's own


def test_no_sinfo_no_conf_and_a_missing_conf_are_reasons_to_skip(tmp_path, no_system_conf):
    assert "sinfo is not on PATH" in cluster.discover(tmp_path, {"PATH": str(tmp_path / "empty")}).problem
    env = fake_sinfo(tmp_path / "bin", 'echo "n1 idle"')
    assert "no Slurm configuration" in cluster.discover(tmp_path, env).problem
    missing = cluster.discover(tmp_path, {**env, "SLURM_CONF": str(tmp_path / "nope.conf")})
    assert "is not a file" in missing.problem
