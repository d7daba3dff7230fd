"""`--fault node`: the nemesis loses its whole node, i.e. its launcher (the worker's parent) and
every process under it, all SIGKILLed together once frozen, and never anything above it."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import psutil
import pytest

from fixtures.processes import run_in_session
from harness import nemesis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from harness import nemesis
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # e.g. a checkpoint worker
    time.sleep(0.3)
    pids = nemesis.node_processes(os.getpid())
    print(json.dumps({"pids": pids, "me": os.getpid(), "helper": helper.pid}), flush=True)
    nemesis.kill_node(pids)
    print("survived", flush=True)
""")

LAUNCHER = textwrap.dedent("""
    import subprocess, sys, time
    monitor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a rank monitor
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True)  # as torch elastic does
    worker.wait()
    time.sleep(60)
""")


def test_node_fault_kills_the_launcher_and_everything_under_it(tmp_path):
    # The "launcher" names itself like NVRx's (the nemesis refuses any other parent).
    argv = [sys.executable, "-c", LAUNCHER, WORKER, "nvidia_resiliency_ext.fault_tolerance.launcher"]
    done = run_in_session(argv, timeout_s=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == -9, done.stderr  # the launcher itself was SIGKILLed
    assert "survived" not in done.stdout
    seen = json.loads(done.stdout.splitlines()[0])
    launcher = seen["pids"][0]
    assert seen["me"] in seen["pids"] and seen["helper"] in seen["pids"] and len(seen["pids"]) >= 4
    assert os.getpid() not in seen["pids"]  # nothing above the launcher
    for pid in seen["pids"]:
        if pid == launcher:
            continue  # reaped by run_in_session
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid


def test_a_worker_without_a_launcher_parent_loses_nothing():
    with pytest.raises(nemesis.NodeError, match="not a launcher"):
        nemesis.node_processes(os.getpid())  # pytest is no launcher


def test_node_fault_marker_says_node(tmp_path):
    config, _ = nemesis.parse_command_line(["--fault", "node", "--run-dir", str(tmp_path), "--", "x.py"],
                                           {"RANK": "1", "WORLD_SIZE": "2"})
    assert config.selected and config.fault == "node"
    injector = nemesis.Injector(config, config.layout, 0)
    record = json.loads(injector._record(5).to_json())
    assert (record["fault"], record["signal"], record["rank"]) == ("node", "SIGKILL", 1)


# ---------------------------------------------------------------- replacement_cycle names the nodes

from recovery_tests import rundirs  # noqa: E402
from harness.criteria import FAIL, PASS, UNKNOWN  # noqa: E402
from harness.verify import verify_run  # noqa: E402


def node_loss_run(root, before: str | None, after: str | None, host: str = "n3"):
    """A recovered kill run from the synthetic builder, re-labelled as the loss of `host`,
    with the cycle records naming the active nodes of cycles 0 and 1 (None: no record)."""
    run_dir = rundirs.build(root, rundirs.Scenario()).run_dir
    for name, patch in (("fault_injected.json", {"fault": "node", "host": host}), ("run.json", None)):
        data = json.loads((run_dir / name).read_text())
        if patch:
            data.update(patch)
        else:
            data["spec"]["fault"] = "node"
        (run_dir / name).write_text(json.dumps(data))
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
        data = json.loads((run_dir / "run.json").read_text())
        data["spec"]["fault"] = "kill"
        (run_dir / "run.json").write_text(json.dumps(data))
    launch = json.loads((run_dir / "launch.json").read_text())
    launch["launcher_exit_code"] = code
    (run_dir / "launch.json").write_text(json.dumps(launch))
    c = verify_run(run_dir, picture=False).criterion("clean_finish")
    assert c.status == status, c.detail
    if status == FAIL:
        assert f"the launcher exited with status {code}" in c.detail
