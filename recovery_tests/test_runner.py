"""What `nvrx-qual run` refuses before launching, and how it bounds a run's duration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.machine import discovery, ports
from harness.launch import runner
from harness.cli import run as cmd_run
from harness.plan import commands as planmod
from harness.machine.nvrx import NvrxTarget, installed_version
from harness.plan.spec import RunSpec, SpecError


def make_plan(tmp_path: Path, version: str | None = None, **fields) -> planmod.Plan:
    # a port free here: the preflight refuses a taken rendezvous port (29500, torch's default, may be)
    values = dict(workload="reference", work_dir=tmp_path, run_id="pre-1",
                  rdzv_endpoint=f"127.0.0.1:{ports.free_port()}", log_server_port=50071)
    values.update(fields)
    return planmod.build(RunSpec(**values), NvrxTarget(version or installed_version()))


def refusal(plan, env) -> str:
    with pytest.raises(SpecError) as info:
        runner.preflight(plan, env)
    return str(info.value)


def test_the_installed_launcher_passes(tmp_path):
    runner.preflight(make_plan(tmp_path), {})


def test_a_declared_version_that_is_not_installed_is_refused(tmp_path):
    message = refusal(make_plan(tmp_path, "9.9.0"), {})
    assert f"the plan is for NVRx 9.9.0 but {installed_version()} is installed" in message
    assert "--nvrx-version is for dry runs" in message


def test_several_nodes_need_an_allocation(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    message = refusal(make_plan(tmp_path, nnodes=2, rdzv_endpoint="n1:29400"), {})
    assert "--nnodes=2 runs srun inside a Slurm allocation" in message and "srun is not on PATH" in message


def test_nvrx_07_single_node_inside_an_allocation_without_procid(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.nvrx, "installed_version", lambda path=None: "0.7.0")
    plan = make_plan(tmp_path, "0.7.0")
    assert "exits at once when SLURM_JOB_ID is set without SLURM_PROCID" in refusal(plan, {"SLURM_JOB_ID": "42"})
    runner.preflight(plan, {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0"})


def test_megatron_needs_gpus(tmp_path, monkeypatch, megatron_checkout):
    monkeypatch.setattr(runner.nvrx, "installed_version", lambda path=None: "0.7.0")
    plan = make_plan(tmp_path, "0.7.0", workload="megatron", megatron_path=megatron_checkout, gpus_per_node=4)
    monkeypatch.setattr(runner.discovery, "nvidia_smi_gpus", lambda: None)
    assert "the megatron workload needs NVIDIA GPUs" in refusal(plan, {})
    monkeypatch.setattr(runner.discovery, "nvidia_smi_gpus", lambda: [discovery.Gpu(0, "H100", "9.0")] * 2)
    assert "--gpus-per-node=4 but this node has 2 GPU(s): set --gpus-per-node=2 or less" in refusal(plan, {})


def test_execute_refuses_before_creating_anything(tmp_path):
    plan = make_plan(tmp_path, "9.9.0")
    with pytest.raises(SpecError):
        runner.execute(plan, out=None)
    assert not plan.layout.root.exists()


def _listening(port: int):
    import socket

    sock = socket.socket()
    sock.bind(("", port))
    sock.listen()
    return sock


def test_a_port_the_harness_picked_and_found_taken_at_launch_is_picked_again(tmp_path, monkeypatch):
    """A free port is free when picked, not reserved: a launch that waited (a slot of the suite's
    pool, a twin run first) may find it taken. The harness picks again, says so, and launches the
    new one; the plan it records and launches is the new one (CI: a pool launch was refused
    with advice meant for a port the user gave)."""
    import io
    import json

    from harness.launch import job as launch
    from harness.plan import resolve

    spec, target, _ = resolve.resolve_spec({"workload": "reference", "work_dir": tmp_path, "run_id": "taken"}, env={})
    plan = planmod.build(spec, target)
    old = ports.local_port(spec.rdzv_endpoint)
    launched = []

    def fake_launch(plan, **kwargs):
        launched.append(plan)
        raise RuntimeError("stop here: nothing is launched in this test")

    monkeypatch.setattr(launch, "launch", fake_launch)
    out = io.StringIO()
    with _listening(old):
        runner.preflight(plan, {})  # not refused: the harness picked it, the harness picks again
        with pytest.raises(RuntimeError, match="stop here"):
            runner.execute(plan, out=out)
    [used] = launched
    new = ports.local_port(used.spec.rdzv_endpoint)
    assert new not in (None, old) and f"127.0.0.1:{new}" in used.launcher.argv
    assert f"the rendezvous port {old} picked for this run was taken meanwhile" in out.getvalue()
    recorded = json.loads((plan.layout.root / "run.json").read_text())
    assert f"127.0.0.1:{old}" not in json.dumps(recorded) and f"127.0.0.1:{new}" in json.dumps(recorded)


def test_a_taken_port_the_user_gave_is_refused_even_where_the_harness_had_picked_another(tmp_path):
    from harness.plan import resolve

    spec, target, _ = resolve.resolve_spec({"workload": "reference", "work_dir": tmp_path, "run_id": "given"}, env={})
    with _listening(0) as sock:
        given = f"127.0.0.1:{sock.getsockname()[1]}"
        plan = planmod.build(dataclasses.replace(spec, rdzv_endpoint=given), target)
        assert not plan.spec.was_picked("rdzv_endpoint")
        assert "address already in use" in refusal(plan, {})
        assert runner.repicked(plan) == (plan, None)


def test_default_deadline_bounds_every_cycle_and_step():
    spec = RunSpec(workload="reference", work_dir=Path("/w"), run_id="d", max_restarts=2, train_iters=30,
                   section_timeouts=(("setup", 60.0), ("step", 10.0), ("checkpointing", 10.0)),
                   out_of_section_timeout=10.0)
    assert runner.default_deadline(spec) == 3 * (60 + 10 + 10) + 30 * 10


def test_run_says_launching_before_the_launcher_starts(tmp_path, monkeypatch, capsys):
    """No silence while ft_launcher and the workers start: `nvrx-qual run` has printed what it
    launches, and that the next line waits for the launcher's record, before launching."""
    from harness.launch import job as launch

    seen_before_launch = []

    def fake_launch(plan, **kwargs):
        seen_before_launch.append(capsys.readouterr().out)
        raise RuntimeError("stop here: nothing is launched in this test")

    monkeypatch.setattr(launch, "launch", fake_launch)
    with pytest.raises(RuntimeError, match="stop here"):
        cmd_run.one_run(make_plan(tmp_path), progress=True)
    [out] = seen_before_launch
    lines = out.splitlines()
    assert lines[0].startswith("nvrx-qual: run pre-1: reference workload, kill on rank 1")
    assert "launching ft_launcher: 2 ranks on 1 node(s)" in lines[-1]


def test_the_verdict_reuses_the_watchers_reader(tmp_path, monkeypatch):
    """After the watch ended, the verdict takes the watcher's reader's last read: every log
    byte of the run is read once, not once by the watcher and again by verify."""
    import shutil

    from harness.read import history
    from harness.launch import job as launch
    from recovery_tests import rundirs
    from recovery_tests.rundirs import Scenario

    built = rundirs.build(tmp_path / "made", Scenario(checkpoints=False))
    read_bytes: list[int] = []
    real_read = history._TrackedFile.read

    def counting_read(self, chunk_size, final):
        before = self.offset
        real_read(self, chunk_size, final)
        read_bytes.append(self.offset - before if self.offset >= before else self.offset)

    monkeypatch.setattr(history._TrackedFile, "read", counting_read)

    def fake_launch(plan, *, watch, **kwargs):
        shutil.copytree(built.run_dir / "logs", plan.layout.root / "logs", dirs_exist_ok=True)
        for name in ("fault_injected.json", "launch.json"):
            if (built.run_dir / name).exists():
                shutil.copy(built.run_dir / name, plan.layout.root / name)
        watch()
        watch()
        return launch.LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, "0.7.0", 0)

    monkeypatch.setattr(launch, "launch", fake_launch)
    outcome = runner.execute(make_plan(tmp_path), out=None)
    logs = sum(p.stat().st_size for p in (built.run_dir / "logs").iterdir())
    assert outcome.verdict.run_dir == str(outcome.run_dir)
    assert outcome.verdict.criterion("replacement_cycle").status == "pass"
    assert sum(read_bytes) == logs  # read once; a second full read would double it


class _Threads:
    """Stands in for runner.threading: records the threads the ticks would start."""

    def __init__(self):
        self.started: list[str] = []

    def Thread(self, *, target, name, daemon):  # noqa: N802 - threading.Thread's name
        started = self.started

        class _Thread:
            def start(self):
                started.append(name)

        return _Thread()


class _Watcher:
    def __init__(self):
        self.compute_over = False
        self.workers_started = False
        self.reason = None

    def __call__(self):
        return self.reason


@pytest.mark.parametrize(("steps_wait", "ticks_before"), [(True, 0), (False, 2)])
def test_the_warm_up_waits_until_ranks_that_compute_through_the_run_are_done(monkeypatch, steps_wait, ticks_before):
    """The verdict's imports (matplotlib) start in the background at the first tick where the
    workload's ranks mostly wait between steps (the reference), else only once the workers are
    done computing: on two cores they would take CPU from megatron-cpu's ranks."""
    threads = _Threads()
    monkeypatch.setattr(runner, "threading", threads)
    watcher = _Watcher()
    tick = runner._warming(watcher, steps_wait=steps_wait)
    for _ in range(ticks_before):
        assert tick() is None
    assert threads.started == []
    watcher.compute_over = True
    for _ in range(2):
        tick()
    assert threads.started == ["nvrx-qual-warm-up"]  # once


def test_the_warm_up_starts_when_the_job_is_being_stopped(monkeypatch):
    threads = _Threads()
    monkeypatch.setattr(runner, "threading", threads)
    watcher = _Watcher()
    tick = runner._warming(watcher, steps_wait=False)
    tick()
    watcher.reason = "no progress for 90 s"
    assert tick() == "no progress for 90 s"
    assert threads.started == ["nvrx-qual-warm-up"]
