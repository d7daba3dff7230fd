"""Node loss: `--fault node` makes the nemesis lose its whole node, i.e. its launcher (the
worker's parent) and every process under it, all SIGKILLed together once frozen, and never
anything above it; `--hot-spares` and `--local-nodes` plan the launchers; replacement_cycle
names the lost node and the standby that took its place; and, for real, N+1 launchers on this
machine without Slurm recover from the loss of a node (the Slurm runs are in
test_slurm_cluster.py)."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import uuid

import psutil
import pytest

from fixtures.processes import run_in_session
from harness.nemesis import injector as nemesis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from harness.nemesis import injector as nemesis
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])  # a ckpt worker
    time.sleep(0.3)
    pids = nemesis.node_processes(os.getpid())
    print(json.dumps({"pids": pids, "me": os.getpid(), "helper": helper.pid}), flush=True)
    nemesis.kill_node(pids)
    print("survived", flush=True)
""")

LAUNCHER = textwrap.dedent("""
    import subprocess, sys, time
    token = sys.argv[2]  # on every command line of this tree, to find survivors (PIDs get reused)
    monitor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", token])  # a rank monitor
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], token], start_new_session=True)  # as torch does
    worker.wait()
    time.sleep(60)
""")


def test_node_fault_kills_the_launcher_and_everything_under_it(tmp_path):
    # The "launcher" names itself like NVRx's (the nemesis refuses any other parent).
    token = f"nvrx-qual-node-test-{uuid.uuid4().hex}"
    argv = [sys.executable, "-c", LAUNCHER, WORKER, token, "nvidia_resiliency_ext.fault_tolerance.launcher"]
    done = run_in_session(argv, timeout_s=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == -9, done.stderr  # the launcher itself was SIGKILLed
    assert "survived" not in done.stdout
    seen = json.loads(done.stdout.splitlines()[0])
    launcher = seen["pids"][0]
    assert seen["me"] in seen["pids"] and seen["helper"] in seen["pids"] and len(seen["pids"]) >= 4
    assert os.getpid() not in seen["pids"]  # nothing above the launcher
    assert launcher in seen["pids"]
    survivors = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if token in (proc.info["cmdline"] or ()) and proc.status() != psutil.STATUS_ZOMBIE:
                survivors.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    assert survivors == []


def test_a_worker_without_a_launcher_parent_loses_nothing():
    with pytest.raises(nemesis.NodeError, match="not a launcher"):
        nemesis.node_processes(os.getpid())  # pytest is no launcher


def test_node_fault_marker_says_node(tmp_path):
    config, _ = nemesis.parse_command_line(["--fault", "node", "--run-dir", str(tmp_path), "--", "x.py"],
                                           {"RANK": "1", "WORLD_SIZE": "2"})
    assert config.selected and config.fault == "node"
    injector = nemesis.Injector(config, config.layout, 0, watch="after-commit")
    record = json.loads(injector._record(5, None, None).to_json())
    assert (record["fault"], record["signal"], record["rank"]) == ("node", "SIGKILL", 1)


# ---------------------------------------------------------------- replacement_cycle names the nodes

from recovery_tests import rundirs  # noqa: E402
from harness.judge.criteria import FAIL, PASS, UNKNOWN  # noqa: E402
from harness.report.verify import verify_run  # noqa: E402


def node_loss_run(root, before: str | None, after: str | None, host: str = "n3"):
    """A recovered kill run from the synthetic builder, re-labelled as the loss of `host`,
    with the cycle records naming the active nodes of cycles 0 and 1 (None: no record)."""
    run_dir = rundirs.build(root, rundirs.Scenario()).run_dir
    data = json.loads((run_dir / "fault_injected.json").read_text())
    data.update({"fault": "node", "host": host})
    (run_dir / "fault_injected.json").write_text(json.dumps(data))
    rundirs.replan(run_dir, "node")
    for path in sorted((run_dir / "cycle_infos").glob("cycle_info..0.*")):
        data = json.loads(path.read_text())
        nodes = before if data["cycle_number"] == 0 else after
        if nodes is None:
            path.unlink()
        else:
            data["active_nodes"] = nodes
            path.write_text(json.dumps(data))
    return run_dir


@pytest.mark.parametrize("before, after, host, status, said", [
    ("n[1,3]", "n[1-2]", "n3", PASS, "node n3 (rank 1) was lost and cycle 1 runs on n1, n2: standby n2 took its place"),
    ("n[1-2]", "n[1-2]", "n2", FAIL, "the lost node n2 is still active in cycle 1"),
    ("n[1,3]", "n1", "n3", FAIL, "no standby node replaced n3"),
    ("n[1-2]", "n[1,3]", "n4", FAIL, "is not among the nodes of cycle 0"),
    ("n[1,3]", None, "n3", UNKNOWN, "no cycle record"),
    ("n[1,3]", "n[1-", "n3", UNKNOWN, "not host lists"),
])
def test_replacement_cycle_of_a_node_loss_names_the_lost_and_the_promoted_node(tmp_path, before, after, host,
                                                                               status, said):
    verdict = verify_run(node_loss_run(tmp_path / "run", before, after, host), picture=False)
    c = verdict.criterion("replacement_cycle")
    assert verdict.fault == "node"
    assert c.status == status and said in c.detail, c.detail


@pytest.mark.parametrize("fault, code, status", [("node", 137, PASS), ("node", 1, FAIL), ("kill", 137, FAIL)])
def test_srun_status_of_the_lost_nodes_task_is_the_fault_not_a_failed_finish(tmp_path, fault, code, status):
    """srun reports its SIGKILLed task (137) after a node loss; every surviving launcher
    reported success, so clean_finish holds, and only for a node fault."""
    run_dir = node_loss_run(tmp_path / "run", "n[1,3]", "n[1-2]")
    if fault == "kill":
        rundirs.replan(run_dir, "kill")
    launch = json.loads((run_dir / "launch.json").read_text())
    launch["launcher_exit_code"] = code
    (run_dir / "launch.json").write_text(json.dumps(launch))
    c = verify_run(run_dir, picture=False).criterion("clean_finish")
    assert c.status == status, c.detail
    if status == FAIL:
        assert f"the launcher exited with status {code}" in c.detail


# ---------------------------------------------------------------- planning the launchers

from harness.plan.resolve import resolve_spec  # noqa: E402
from harness.plan import commands as planmod  # noqa: E402
from harness.launch.job import _combined  # noqa: E402
from harness.plan.spec import SpecError  # noqa: E402

LOCAL = ["--workload", "reference", "--nvrx-version", "0.7.0", "--nnodes", "2", "--gpus-per-node", "1",
         "--fault", "node"]


def resolve(tmp_path, *extra: str):
    flags = {}
    args = [*LOCAL, *extra]
    for flag, value in zip(args[::2], args[1::2]):
        flags[flag[2:].replace("-", "_")] = value
    spec, target, _ = resolve_spec({**flags, "work_dir": str(tmp_path), "run_id": "r"}, (), {})
    return planmod.build(spec, target)


def test_local_nodes_plan_one_launcher_per_node_and_spare_the_first_hosting(tmp_path):
    p = resolve(tmp_path, "--hot-spares", "1", "--local-nodes", "1", "--rdzv-join-timeout", "20")
    assert p.srun is None and len(p.local) == 3 and [n for n, _ in p.commands] == ["launcher0", "launcher1",
                                                                                    "launcher2"]
    for i, command in enumerate(p.local):
        argv = list(command.argv)
        assert argv[argv.index("--nnodes") + 1] == "2:3"
        assert argv[argv.index("--rdzv-conf") + 1] == f"is_host={int(i == 0)},join_timeout=20"
        assert argv[argv.index("--rdzv-endpoint") + 1].startswith("127.0.0.1:")
        assert ("NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE", "1") in command.env
    assert p.command is p.local[0]


def test_hot_spares_under_srun_start_one_more_task(tmp_path):
    p = resolve(tmp_path, "--hot-spares", "1", "--rdzv-endpoint", "n1:29400", "--assume-shared-storage", "1")
    assert p.command.argv[:2] == ("srun", "--ntasks=3") and "2:3" in p.command.argv


@pytest.mark.parametrize("extra, said", [
    (("--nnodes", "1"), "losing the only node ends the job"),
    (("--fault-rank", "0", "--local-nodes", "1"), "would lose node 0"),
    (("--hot-spares", "-1", "--local-nodes", "1"), "--hot-spares=-1"),
    (("--rdzv-join-timeout", "0", "--local-nodes", "1"), "--rdzv-join-timeout=0 must be"),
])
def test_node_loss_input_is_checked_before_launch(tmp_path, extra, said):
    with pytest.raises(SpecError, match=re.escape(said)):
        resolve(tmp_path, *extra)


def test_several_launchers_report_the_worst_status_a_signal_as_srun_does():
    assert _combined([0, 0, 0]) == 0
    assert _combined([0, -9, 0]) == 137
    assert _combined([1, -9]) == 137 and _combined([1, 0]) == 1
    assert _combined([-9]) == -9 and _combined([0, None]) is None


# ---------------------------------------------------------------- for real: N+1 launchers on this machine

from pytest_nvrx_qual.runs import Scenario  # noqa: E402
from fixtures.launching import launches  # noqa: E402


def local_node_loss(target, **knobs) -> Scenario:
    base = dict(nnodes=2, gpus_per_node=1, fault_rank=1, local_nodes=True, **knobs)
    return Scenario("node", target, name=f"local-node-loss-{knobs.get('hot_spares', 0)}-spare",
                    knobs=tuple(sorted(base.items())))


@pytest.mark.e2e
@launches(lambda log_routing_launcher: local_node_loss(log_routing_launcher, hot_spares=1))
def test_local_node_loss_with_a_hot_spare_qualifies(log_routing_launcher, scenarios):
    """Three launchers on this machine for two nodes: rank 1's node is lost whole, the standby is
    promoted, training resumes from the latest checkpoint with optimizer state."""
    outcome = scenarios.outcome(local_node_loss(log_routing_launcher, hot_spares=1))
    failed = [f"{c.id}: {c.status}: {c.detail}" for c in outcome.verdict.criteria if c.status != PASS]
    assert outcome.verdict.qualified, (outcome.run_dir, failed)
    marker = json.loads((outcome.run_dir / "fault_injected.json").read_text())
    detail = outcome.verdict.criterion("replacement_cycle").detail
    assert f"_{marker['launcher_pid']}_0 (rank 1's launcher) was lost" in detail and "took its place" in detail, detail
    assert outcome.launch.launcher_exit_code == 137  # the lost launcher's SIGKILL, as srun reports it
    assert not psutil.pid_exists(marker["launcher_pid"])


@pytest.mark.e2e
@launches(lambda log_routing_launcher: local_node_loss(log_routing_launcher, rdzv_join_timeout=20.0))
def test_local_node_loss_without_a_spare_is_a_failed_recovery(log_routing_launcher, scenarios):
    """No spare: NVRx 0.7.0's surviving launcher waits in the rendezvous for the lost node until
    the join timeout, then exits 1; replacement_cycle fails and the run is not qualified."""
    outcome = scenarios.outcome(local_node_loss(log_routing_launcher, rdzv_join_timeout=20.0))
    c = outcome.verdict.criterion("replacement_cycle")
    assert c.status == FAIL and "started no replacement workers" in c.detail, (outcome.run_dir, c.detail)
    log = (outcome.run_dir / "logs" / "launcher.log").read_text()
    assert "will restart worker group" in log and "rendezvous has timed out" in log, outcome.run_dir
    # the watcher may stop the job once the launcher has logged that it gave up
    assert outcome.launch.stopped_early is None or "gave up" in outcome.launch.stopped_early, outcome.launch
    assert not outcome.verdict.qualified
