"""The fault kinds beyond signals (harness.plan.spec FAULT_KINDS, harness.nemesis.inject): what each does to
the rank, how the criteria judge it, and real launches with their expected verdicts: the kinds a
job recovers from (exception, segfault, abort, gil) as the episodes of one campaign per workload,
corrupt and disk-full in launches of their own.

- exception / segfault / abort: the rank dies of the kind's own cause (exit 1 with the
  InjectedFault traceback, SIGSEGV, SIGABRT); replacement_cycle checks the launcher's
  `failed (exitcode` line of that very worker (the marker's pid) when it has one;
- gil: the rank stays alive with the GIL held; only a rank monitor's timeout may count as its
  detection (replacement_cycle fails without one, whatever else ended the cycle);
- corrupt: bytes in the middle of a committed shard are inverted (size unchanged). DCP has no
  checksum, so the stack loads it silently: the suite must say the replacement loaded the
  damaged checkpoint (loop_stopped fails). The test passes when the suite catches it.
- disk-full: the run's checkpoints/ is a size-limited tmpfs the harness mounts (as root) for the
  launch; the nemesis fills it while an async save is in flight (the save meets ENOSPC) and the
  fault rank's next cycle frees it. disk_full_handled fails any run that committed, named in the
  tracker or loaded the save that met the full filesystem, and says whether the stack recovered
  from the previous checkpoint or stopped with the error. The mount is refused before launch
  without root or a working mount, and released (contents copied back) on every exit path.
- gpu-hang, gpu-error (the GPU tier only: torch's spin kernel, an out-of-bounds write): refused
  before launch on the CPU tiers with the fix named; their actions import torch only when they
  fire; the GPU kit runs them (test_recovery_gpu.py::test_megatron_single_node_gpu_kinds).

How each guard is shown to fail: the unit tests below replay synthetic run directories
(recovery_tests.rundirs) with the kind's detection or death changed, and the e2e cases replay
their real runs with the rank monitor's timeout lines removed (gil) or the fault rank's exit
code changed (the crash kinds).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pytest_nvrx_qual.runs import Scenario, explain
from fixtures.launching import launches
from recovery_tests.rundirs import replay_without_monitor_timeouts
from harness.vocab import faults
from harness.nemesis import inject
from harness.machine import tmpfs
from harness.report import verify
from harness.plan import spec as specmod
from harness.judge.criteria import (CHECK_IDS, DISK_FULL_HANDLED, FAIL, LOOP_STOPPED, LOSS_CONTINUITY, NOT_APPLICABLE,
                              OPTIMIZER_STATE, PASS)
from harness.judge.criteria import STATE_EQUIVALENCE, UNDETECTED_HANG
from harness.vocab.layout import MARKER_NAME, TRACKER_NAME, marker_name
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.test_fault_moments import make_save
from recovery_tests.test_nemesis import await_true, launched, rank_env, write_tracker
from recovery_tests.test_campaign_e2e import megatron_cpu_campaign
from recovery_tests.test_recovery_megatron_cpu import megatron_cpu  # noqa: F401 (the fixture)
from recovery_tests.test_recovery_megatron_cpu import scenario as megatron_cpu_scenario

REPO = Path(__file__).resolve().parent.parent
CRASH_KINDS = ("exception", "segfault", "abort")
NEW_KINDS = (*CRASH_KINDS, "gil", "corrupt")
GPU_KINDS = ("gpu-hang", "gpu-error")


def _python(code: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), **kw.pop("env", {})}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, **kw)


# ---------------------------------------------------------------- the actions, in a real process


@pytest.mark.parametrize("kind", CRASH_KINDS)
def test_each_crash_action_ends_the_process_as_its_row_says(kind: str) -> None:
    """Fired from a side thread, as the nemesis's poller does: the process ends with the row's exit code."""
    proc = _python("import threading, time\nfrom harness.nemesis import inject\ntraining_started = threading.Event()\n"
                   f"threading.Thread(target=lambda: (training_started.wait(), inject.ACTIONS[{kind!r}]()), "
                   "daemon=True).start()\n"
                   "def training():\n    training_started.set()\n    while True:\n        time.sleep(0.01)\n"
                   "training()\n")
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert (proc.returncode,) == specmod.FAULT_KINDS[kind].exit_codes, err.decode()
    if kind == "exception":  # raised in the training (main) thread, not the one that fired it
        text = err.decode()
        assert "in training" in text and text.rstrip().endswith("harness.nemesis.inject.InjectedFault"), text


def test_gil_action_keeps_the_rank_alive_with_every_python_thread_and_handler_stopped(tmp_path: Path) -> None:
    beats = tmp_path / "beats"
    code = ("import os, signal, sys, threading, time\nfrom harness.nemesis import inject\npath = sys.argv[1]\n"
            "signal.signal(signal.SIGTERM, lambda *a: (open(path + '.term', 'w').close(), sys.exit(0)))\n"
            "def heartbeat():\n    n = 0\n    while True:\n        n += 1\n"
            "        with open(path + '.tmp', 'w') as f:\n            f.write(str(n))\n"
            "        os.replace(path + '.tmp', path)\n        time.sleep(0.02)\n"
            "threading.Thread(target=heartbeat, daemon=True).start()\n"
            "while not os.path.exists(path):\n    time.sleep(0.01)\n"
            "threading.Thread(target=inject.hold_gil_forever, daemon=True).start()\n"
            "while True:\n    time.sleep(0.01)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(beats)], env=env, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        await_true(beats.exists, "the first heartbeat")
        # The GIL is taken at once; the beat count must then freeze. A window of 50 beat periods
        # in which a live heartbeat thread would have written about 50 more:
        await_true(lambda: _frozen(beats, window_s=1.0), "the heartbeat to freeze")
        os.kill(proc.pid, signal.SIGTERM)  # its Python handler would write .term and exit 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"exited {proc.returncode}: SIGTERM was handled"
            time.sleep(0.05)
        assert not Path(str(beats) + ".term").exists()
        os.kill(proc.pid, signal.SIGKILL)  # what NVRx's rank monitor sends (rank_termination_signal)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _frozen(beats: Path, window_s: float) -> bool:
    before = beats.read_text()
    time.sleep(window_s)
    return beats.read_text() == before


def test_corrupt_flips_the_middle_of_the_largest_shard_and_keeps_its_size(tmp_path: Path) -> None:
    d = make_save(tmp_path, 5, committed=True)
    big = d / "__0_0.distcp"
    big.write_bytes(bytes(range(256)) * 64)
    before = big.read_bytes()
    assert inject.damage_checkpoint(d, "flip") == big
    after = big.read_bytes()
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert changed and min(changed) > 0 and max(changed) < len(before) - 1, changed[:3]
    assert all(after[i] == before[i] ^ 0xFF for i in changed)
    assert (d / "__1_0.distcp").read_bytes() == b"y" * 10
    assert inject.damage_checkpoint(d, "truncate") == big and big.stat().st_size == len(before) // 2


def test_dcp_loads_a_flipped_shard_without_a_word(tmp_path: Path) -> None:
    """Why corrupt is judged on the load, not left to the stack: torch's DCP has no checksum."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    state = {"w": torch.arange(50000, dtype=torch.float32)}
    with pytest.warns(UserWarning):
        dcp.save(state, checkpoint_id=str(tmp_path))
    inject.damage_checkpoint(tmp_path, "flip")
    loaded = {"w": torch.zeros(50000)}
    with pytest.warns(UserWarning):
        dcp.load(loaded, checkpoint_id=str(tmp_path))
    assert not torch.equal(loaded["w"], state["w"])


# ---------------------------------------------------------------- the nemesis fires each kind


@pytest.mark.parametrize("kind", CRASH_KINDS)
def test_the_nemesis_fires_each_crash_kind_after_the_commit(tmp_path: Path, kind: str) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    with launched(tmp_path, rank_env(1, run_dir, NVRX_DEMO_FAULT=kind)) as wrapper:
        wrapper.ready()
        write_tracker(run_dir / "checkpoints" / TRACKER_NAME, "5")
        assert (wrapper.await_exit(),) == specmod.FAULT_KINDS[kind].exit_codes, wrapper.stderr()
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert (marker["fault"], marker["signal"], marker["iteration"]) == (kind, specmod.FAULT_KINDS[kind].signal, 5)
    assert f"rank 1 injecting {kind} after checkpoint iteration 5" in wrapper.stderr()


def test_the_nemesis_corrupts_then_kills(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    d = make_save(run_dir / "checkpoints", 5, committed=True)
    with launched(tmp_path, rank_env(1, run_dir, NVRX_DEMO_FAULT="corrupt")) as wrapper:
        wrapper.ready()
        write_tracker(run_dir / "checkpoints" / TRACKER_NAME, "5")
        assert wrapper.await_exit() == -signal.SIGKILL, wrapper.stderr()
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert marker["poisoned"] == str(d / "__0_0.distcp") and marker["signal"] == "SIGKILL"
    assert (d / "__0_0.distcp").stat().st_size == 100 and (d / "__0_0.distcp").read_bytes() != b"x" * 100
    assert "corrupted" in wrapper.stderr()


# ---------------------------------------------------------------- the vocabulary, before launch


def _spec(tmp_path: Path, **flags) -> specmod.RunSpec:
    base = {"workload": "reference", "work_dir": tmp_path, "run_id": "r1", "rdzv_endpoint": "localhost:29500"}
    return specmod.from_sources({**base, **flags}, {})


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gpu_kinds_are_refused_on_the_cpu_tiers_with_the_fix(tmp_path: Path, kind: str) -> None:
    """Runnable (no longer planned) and GPU-only: each CPU workload refuses them before launch,
    naming the GPU and the fix; the megatron (GPU) workload accepts them."""
    row = specmod.FAULT_KINDS[kind]
    assert row.planned is None and row.gpu_only and row.injects == faults.IN_PROCESS
    for workload in ("reference", "megatron-cpu"):
        with pytest.raises(specmod.SpecError) as err:
            specmod.validate(_spec(tmp_path, workload=workload, fault=kind))
        text = str(err.value)
        assert f"--fault={kind} needs a GPU" in text and f"the {workload} workload runs on CPU" in text, text
        assert "use --workload megatron on a GPU machine (the GPU kit)" in text, text
        assert "planned" not in text, text
    gpu = _spec(tmp_path, workload="megatron", fault=kind, megatron_path=str(tmp_path))
    assert specmod.fault_problems(gpu) == [], specmod.fault_problems(gpu)


def test_gpu_hang_is_a_hang_the_monitor_must_detect_and_gpu_error_a_crash(tmp_path: Path) -> None:
    hang, error = specmod.FAULT_KINDS["gpu-hang"], specmod.FAULT_KINDS["gpu-error"]
    assert hang.monitor_detects and "rank monitor" in hang.recovery
    assert not error.monitor_detects and error.exit_codes == ()  # how the rank dies is the kit's to show
    # judged like their CPU twins on a replayed run: gpu-hang detected by the monitor, gpu-error a crash
    for kind, timeouts in (("gpu-hang", (1,)), ("gpu-error", ())):
        built = rundirs.build(tmp_path / kind, rundirs.Scenario(fault=kind, timeout_ranks=timeouts))
        c = verify_run(built.run_dir).criterion("replacement_cycle")
        assert c.status == PASS, (kind, c.detail)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_gpu_actions_exist_and_import_torch_only_when_they_fire(kind: str) -> None:
    """The nemesis imports harness.nemesis.inject in every worker, stdlib only: importing it (and the
    nemesis) loads no torch; the action itself imports it, and without a CUDA GPU it says the
    fault did not happen (InjectError) instead of crashing the rank (CUDA_VISIBLE_DEVICES is emptied:
    on a GPU node too the action must not fire here)."""
    code = ("import sys\nfrom harness.nemesis import inject, injector as nemesis\n"
            f"assert 'torch' not in sys.modules, 'torch imported at import time'\n"
            f"action = nemesis.IN_PROCESS_ACTIONS[{kind!r}]\nassert action is inject.ACTIONS[{kind!r}]\n"
            "try:\n    action()\nexcept inject.InjectError as exc:\n    print('refused:', exc)\n"
            "print('torch' in sys.modules)\n")
    proc = _python(code, env={"CUDA_VISIBLE_DEVICES": ""})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode(errors="replace")
    text = out.decode()
    assert text.splitlines()[-1] == "True", text  # the action did import torch
    assert "torch sees no CUDA GPU: the GPU kinds run on the GPU tier only" in text.splitlines()[0], text


def test_every_runnable_new_kind_is_valid_on_both_cpu_workloads(tmp_path: Path) -> None:
    for kind in NEW_KINDS:
        for workload in ("reference", "megatron-cpu"):
            spec = _spec(tmp_path, workload=workload, fault=kind)
            assert specmod.fault_problems(spec) == [], (kind, workload)


# ---------------------------------------------------------------- the judgement (synthetic runs)


@pytest.mark.parametrize("kind", (*CRASH_KINDS, "gil"))
def test_each_kind_qualifies_when_the_rank_dies_its_way(tmp_path: Path, kind: str) -> None:
    built = rundirs.build(tmp_path / "run", rundirs.Scenario(fault=kind))
    verdict = verify_run(built.run_dir)
    c = verdict.criterion("replacement_cycle")
    assert (c.status, verdict.qualified) == (PASS, True), c.detail
    assert f"as {kind} does" in c.detail, c.detail


@pytest.mark.parametrize(("kind", "other"), [("exception", -9), ("segfault", 1), ("abort", -11), ("gil", -15)])
def test_a_rank_that_died_of_something_else_fails_replacement_cycle(tmp_path: Path, kind: str, other: int) -> None:
    built = rundirs.build(tmp_path / "run", rundirs.Scenario(fault=kind, fault_exitcode=other))
    c = verify_run(built.run_dir).criterion("replacement_cycle")
    assert c.status == FAIL and f"ended with exitcode {other}" in c.detail and "died of something else" in c.detail, c


@pytest.mark.parametrize("kind", ("gil", "gpu-hang"))
def test_gil_without_a_rank_monitor_timeout_fails_replacement_cycle(tmp_path: Path, kind: str) -> None:
    """The process exiting is no detection of a held GIL or a hung kernel: a rank monitor's
    timeout line must exist (what the GPU kit's gpu-hang case relies on)."""
    built = rundirs.build(tmp_path / "run", rundirs.Scenario(fault=kind, timeout_ranks=()))
    c = verify_run(built.run_dir).criterion("replacement_cycle")
    assert c.status == FAIL and "was not detected by a rank monitor" in c.detail, c.detail


# ---------------------------------------------------------------- disk-full: the mount, the filler, the refusal


def _can_mount() -> None:
    why = tmpfs.problems()
    if why:
        pytest.skip(f"needs root and a working tmpfs mount: {why[0]}")


def _mounts_under(root: Path) -> list[str]:
    real = os.path.realpath(root)
    with open("/proc/self/mounts", encoding="utf-8") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(real + os.sep)]


@pytest.fixture
def mounted_checkpoints(tmp_path: Path):
    """A run directory whose checkpoints/ is a 4 MiB tmpfs; never left mounted."""
    _can_mount()
    ck = tmp_path / "run" / "checkpoints"
    ck.mkdir(parents=True)
    tmpfs.mount(ck, 4 << 20)
    try:
        yield ck
    finally:
        tmpfs.release(ck)
        assert _mounts_under(tmp_path) == []


def test_disk_full_is_refused_before_launch_without_root(monkeypatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    (text,) = tmpfs.problems()
    assert "--fault disk-full mounts a size-limited tmpfs" in text and "needs root (euid 1000)" in text, text
    assert "run nvrx-qual as root" in text, text


def test_disk_full_is_refused_before_launch_when_the_trial_mount_is(monkeypatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(tmpfs, "_run", lambda argv: "mount: permission denied" if argv[0] == "mount" else None)
    (text,) = tmpfs.problems()
    assert "a trial tmpfs mount was refused (mount: permission denied)" in text and "unprivileged container" in text


def test_disk_full_refuses_a_checkpoint_dir_of_the_users(tmp_path: Path) -> None:
    spec = _spec(tmp_path, fault="disk-full", fault_at="in-save", train_iters=30, checkpoint_dir=tmp_path / "mine")
    assert any("--checkpoint-dir=" in p and "is yours" in p for p in specmod.fault_problems(spec))
    ok = _spec(tmp_path, fault="disk-full", fault_at="in-save", train_iters=30)
    assert specmod.fault_problems(ok) == []


def test_the_filler_never_fills_a_real_disk(tmp_path: Path) -> None:
    with pytest.raises(inject.InjectError, match="is not a tmpfs mount point"):
        inject.fill_filesystem(tmp_path)
    assert not (tmp_path / inject.FILLER_NAME).exists()


def test_fill_then_release_keeps_the_checkpoints_and_drops_the_filler(mounted_checkpoints: Path) -> None:
    ck = mounted_checkpoints
    make_save(ck, 5, committed=True)
    filler, written, size = inject.fill_filesystem(ck)
    assert size == 4 << 20 and written > size - (64 << 10), (written, size)
    with pytest.raises(OSError) as err:
        (ck / "iter_0000005" / "more").write_bytes(b"z" * 4096)
    assert err.value.errno == 28
    assert tmpfs.release(ck) is None and not tmpfs.mounted(ck)
    assert (ck / "iter_0000005" / "__0_0.distcp").read_bytes() == b"x" * 100
    assert not filler.exists()


def test_the_watchdog_releases_the_mount_when_the_harness_dies(mounted_checkpoints: Path) -> None:
    ck = mounted_checkpoints
    make_save(ck, 5, committed=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "harness.launch.watchdog", "no-such-launch-tag", "--unmount", str(ck)],
                            stdin=subprocess.PIPE, env=env, start_new_session=True)
    proc.stdin.close()  # EOF without "done": the harness died
    assert proc.wait(timeout=60) == 0
    assert not tmpfs.mounted(ck) and (ck / "iter_0000005" / "metadata.json").exists()


def test_the_nemesis_fills_during_the_save_and_the_next_cycle_frees_it(mounted_checkpoints: Path,
                                                                       tmp_path: Path) -> None:
    ck = mounted_checkpoints
    run_dir = ck.parent
    env = rank_env(1, run_dir, NVRX_DEMO_FAULT="disk-full", NVRX_FAULT_AT="in-save")
    with launched(tmp_path, env) as wrapper:
        wrapper.ready()
        make_save(ck, 5, committed=True)  # committed after the nemesis's startup baseline
        write_tracker(ck / TRACKER_NAME, "5")
        make_save(ck, 10)  # data, no commit: a save in flight
        await_true(lambda: (run_dir / MARKER_NAME).exists(), "the disk-full marker")
        assert wrapper.proc.poll() is None, "the rank must run on after filling"
        assert wrapper.finish() == 0, wrapper.stderr()
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert (marker["iteration"], marker["committed_iteration"], marker["signal"]) == (10, 5, None), marker
    assert marker["filler"] == str(ck / inject.FILLER_NAME) and marker["filesystem_bytes"] == 4 << 20, marker
    assert os.statvfs(ck).f_bavail == 0
    assert "filled the checkpoint filesystem with" in wrapper.stderr()
    with launched(tmp_path, {**env, "TORCHELASTIC_RESTART_COUNT": "1"}, name="replacement") as again:
        again.ready()
        assert not (ck / inject.FILLER_NAME).exists() and os.statvfs(ck).f_bavail > 0
        assert again.finish() == 0, again.stderr()
    assert "freed the checkpoint filesystem: removed" in again.stderr()


# ---------------------------------------------------------------- e2e: the kinds launched

ALL_PASS = {**{c: PASS for c in CHECK_IDS}, LOSS_CONTINUITY: PASS, STATE_EQUIVALENCE: PASS}
NA = NOT_APPLICABLE
# corrupt: the replacement loads the damaged checkpoint (DCP has no checksum) and trains on: the suite
# must catch it; nothing else is judged for a plan whose checkpoint is damaged (as for poison)
CORRUPT_CAUGHT = {"pre_fault_checkpoint": PASS, "replacement_cycle": PASS, "optimizer_reload": NA,
                  "later_checkpoint": NA, "clean_finish": NA, OPTIMIZER_STATE: PASS, LOOP_STOPPED: FAIL}
# The kinds that recover: on each workload one campaign holds them all, each fault its own recovery
# episode judged by the same checks as a run of that kind alone (docs/campaigns.md), instead of a launch
# per kind (docs/testing.md, the launch budget). The reference workload's: the four kinds in a fixed
# schedule (seed 7 draws each once, all after a commit, in a job of the workload's own 30 iterations, so
# it shares the default configuration's uninterrupted baseline); Megatron's: test_campaign_e2e's seeded
# campaign of six, which holds the same four.
RECOVERING_KINDS = (*CRASH_KINDS, "gil")
KINDS_SEED = 7


def kinds_campaign(target) -> Scenario:
    return Scenario("campaign", target, name=f"kinds-reference-campaign-nvrx{target.version}",
                    knobs=(("faults", len(RECOVERING_KINDS)), ("seed", KINDS_SEED), ("fault_kinds", RECOVERING_KINDS)))


def _corrupt(target) -> Scenario:
    return Scenario("corrupt", target, name=f"kinds-reference-corrupt-nvrx{target.version}", fail_fast=False,
                    expect_qualified=False, knobs=(("max_restarts", 2),))


def _episode_of(outcome, kind: str):
    """The campaign's episode of `kind` and the marker its fault wrote."""
    found = [e for e in outcome.verdict.episodes if e.fault == kind]
    assert len(found) == 1, (kind, [e.fault for e in outcome.verdict.episodes], outcome.run_dir)
    (episode,) = found
    schedule = json.loads((outcome.run_dir / "run.json").read_text())["spec"]["schedule"]
    planned = schedule[episode.number - 1]
    assert (planned["kind"], planned["rank"], planned["moment"]) == (kind, episode.rank, episode.fault_at), planned
    return episode, json.loads((outcome.run_dir / marker_name(planned["fault_index"])).read_text())


def _assert_episode_recovered(outcome, episode) -> None:
    own = {c.id: c for c in episode.criteria if c.id not in episode.superseded}
    failed = [c for c in own.values() if c.status != PASS]
    assert {"pre_fault_checkpoint", "replacement_cycle", "optimizer_reload"} <= set(own), own
    assert not failed, "\n\n".join(f"episode {episode.number} ({episode.fault}): {c.id}: {c.status}: {c.detail}"
                                     for c in failed) + f"\nrun directory: {outcome.run_dir}"


@pytest.mark.e2e
@launches(lambda newest_launcher: kinds_campaign(newest_launcher))
def test_reference_kinds_campaign_qualifies_against_its_baseline(newest_launcher, scenarios):
    outcome = scenarios.outcome(kinds_campaign(newest_launcher))
    got = {c.id: c.status for c in outcome.verdict.criteria}
    assert {k: got.get(k) for k in ALL_PASS} == ALL_PASS, "\n\n".join(explain(outcome, k) for k in ALL_PASS)
    assert sorted(e.fault for e in outcome.verdict.episodes) == sorted(RECOVERING_KINDS), outcome.run_dir


@pytest.mark.e2e
@pytest.mark.parametrize("kind", RECOVERING_KINDS)
@launches(lambda newest_launcher: kinds_campaign(newest_launcher))
def test_reference_workload_recovers_from_kind(kind, newest_launcher, scenarios):
    outcome = scenarios.outcome(kinds_campaign(newest_launcher))
    episode, marker = _episode_of(outcome, kind)
    _assert_episode_recovered(outcome, episode)
    assert (marker["fault"], marker["signal"]) == (kind, specmod.FAULT_KINDS[kind].signal), marker
    detail = {c.id: c for c in episode.criteria}["replacement_cycle"].detail
    if kind == "gil":  # detected by a rank monitor's timeout line, not by the process exiting
        assert re.search(r"after a (section|out-of-section) timeout", detail), detail


@pytest.mark.e2e
@launches(lambda newest_launcher: _corrupt(newest_launcher))
def test_reference_workload_corrupt_checkpoint_is_caught(newest_launcher, scenarios):
    outcome = scenarios.outcome(_corrupt(newest_launcher))
    got = {c.id: c.status for c in outcome.verdict.criteria}
    assert {k: got.get(k) for k in CORRUPT_CAUGHT} == CORRUPT_CAUGHT, \
        "\n\n".join(explain(outcome, k) for k in CORRUPT_CAUGHT)
    marker = json.loads((outcome.run_dir / MARKER_NAME).read_text())
    assert (marker["fault"], marker["signal"]) == ("corrupt", specmod.FAULT_KINDS["corrupt"].signal), marker
    detail = outcome.verdict.criterion(LOOP_STOPPED).detail
    assert "loaded or trained from the damaged checkpoint" in detail, detail


@pytest.mark.e2e
@launches(lambda newest_launcher: kinds_campaign(newest_launcher))
def test_gil_run_without_its_timeout_lines_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real campaign with every rank-monitor timeout line removed: what is left of
    its gil fault (the SIGKILLed workers, the restart) must not count as detecting a held GIL."""
    outcome = scenarios.outcome(kinds_campaign(newest_launcher))
    replay = tmp_path / "replay"
    assert replay_without_monitor_timeouts(outcome.run_dir, replay), "the real gil run had no timeout line to remove"
    gil = next(e for e in verify.verify_run(replay, picture=False).episodes if e.fault == "gil")
    c = {c.id: c for c in gil.criteria}["replacement_cycle"]
    assert c.status == FAIL and "not detected by a rank monitor" in c.detail, c.detail


@pytest.mark.e2e
@pytest.mark.parametrize("kind", RECOVERING_KINDS)
@launches(lambda megatron_cpu: megatron_cpu_campaign(megatron_cpu))
def test_megatron_cpu_recovers_from_kind(kind, megatron_cpu, scenarios):
    """Megatron's own loop with the plain optimizer (the distributed one's step reset is
    test_recovery_megatron_cpu's finding): the campaign's episode of this kind recovered."""
    outcome = scenarios.outcome(megatron_cpu_campaign(megatron_cpu))
    episode, marker = _episode_of(outcome, kind)
    _assert_episode_recovered(outcome, episode)
    detail = {c.id: c for c in episode.criteria}["replacement_cycle"].detail
    if kind == "gil":
        assert re.search(r"after a (section|out-of-section) timeout", detail), detail
    elif kind == "exception":
        # The InjectedFault often lands inside a gloo collective (`work.wait()` of the grad all-reduce);
        # the rank then prints its traceback but does not exit before its peer's step timeout (15 s),
        # and the launcher records the peer's SIGKILL first: the exit code decides nothing then.
        log = (outcome.run_dir / "logs" / f"train_cycle_cycle{marker['cycle']}.log").read_text(errors="replace")
        assert f"[rank{marker['rank']}]: harness.nemesis.inject.InjectedFault" in log
        launcher = (outcome.run_dir / "logs" / "launcher.log").read_text(errors="replace")
        own_exit = re.search(rf"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: {marker['pid']}\)", launcher)
        assert (f"as {kind} does" in detail) == (own_exit is not None), (detail, own_exit)
    else:  # a native crash ends the rank at once: the launcher's exitcode line of that very worker names it
        assert f"as {kind} does" in detail, detail


def _megatron_cpu_corrupt(target) -> Scenario:
    plain = megatron_cpu_scenario("corrupt", target, plain=True)
    return dataclasses.replace(plain, knobs=(*plain.knobs, ("max_restarts", 2)), expect_qualified=False)


@pytest.mark.e2e
@launches(lambda megatron_cpu: _megatron_cpu_corrupt(megatron_cpu))
def test_megatron_cpu_loads_a_corrupted_checkpoint_without_a_word(megatron_cpu, scenarios):
    """Megatron's torch_dist load goes through DCP, which has no checksum: the replacement loads
    the shard with 4 KiB inverted and trains on. A finding about the stack, caught by loop_stopped
    (as on the reference workload): the run is NOT QUALIFIED."""
    outcome = scenarios.outcome(_megatron_cpu_corrupt(megatron_cpu))
    got = {c.id: c.status for c in outcome.verdict.criteria}
    assert {k: got.get(k) for k in CORRUPT_CAUGHT} == CORRUPT_CAUGHT, \
        "\n\n".join(explain(outcome, k) for k in CORRUPT_CAUGHT)
    detail = outcome.verdict.criterion(LOOP_STOPPED).detail
    marker = json.loads((outcome.run_dir / MARKER_NAME).read_text())
    assert f"loaded or trained from the damaged checkpoint {marker['iteration']}" in detail, detail
    assert not outcome.verdict.qualified


@pytest.mark.e2e
@launches(lambda newest_launcher: _corrupt(newest_launcher))
def test_corrupt_run_judged_as_a_fallback_when_the_replacement_loaded_an_earlier_checkpoint(
        newest_launcher, scenarios, tmp_path):
    """Replay of the real corrupt run whose replacement loaded checkpoint 3 (as if one had been
    committed before the damaged 5) instead of the damaged one: loop_stopped passes, naming the
    fallback; the real run (it loaded the damaged checkpoint) fails."""
    outcome = scenarios.outcome(_corrupt(newest_launcher))
    marker = json.loads((outcome.run_dir / MARKER_NAME).read_text())
    damaged = marker["iteration"]
    replay = tmp_path / "replay"
    shutil.copytree(outcome.run_dir, replay, symlinks=True)
    changed = 0
    for log in (replay / "logs").glob("train_cycle_cycle*.log"):
        if log.name == f"train_cycle_cycle{marker['cycle']}.log":
            continue
        text = log.read_text(errors="replace")
        fallback = re.sub(rf"(loading distributed checkpoint from .* at iteration |successfully loaded checkpoint from .* "
                          rf"at iteration ){damaged}\b", rf"\g<1>{damaged - 2}", text)
        changed += fallback != text
        log.write_text(fallback)
    assert changed, "the real corrupt run's replacement logged no load of the damaged checkpoint"
    c = verify.verify_run(replay, picture=False).criterion(LOOP_STOPPED)
    assert c.status == PASS and f"fell back to checkpoint {damaged - 2}" in c.detail, c.detail
    assert outcome.verdict.criterion(LOOP_STOPPED).status == FAIL


# ---------------------------------------------------------------- e2e: disk-full

# Both CPU stacks meet ENOSPC in rank 0's write of DCP's `.metadata` (the save's finish), raise it
# in the training thread and die; the replacement loads the previous checkpoint.
DISK_FULL_RECOVERED = {**ALL_PASS, DISK_FULL_HANDLED: PASS}


def _disk_full(target) -> Scenario:
    return Scenario("disk-full", target, name=f"kinds-reference-disk-full-nvrx{target.version}",
                    knobs=(("fault_at", "in-save"),))


def _assert_names_what_the_logs_hold(detail: str, run_dir: Path) -> None:
    """A recovered disk-full run's sentence says whether ENOSPC was logged, and the run's own logs
    decide which: torch's zip writer reports the full filesystem as ENOSPC in some runs and as
    `unexpected pos N vs M` in others (docs/faults.md), so the test cannot ask for the words, only
    that the verdict tells the truth about them."""
    logged = any(b"No space left on device" in p.read_bytes() for p in (run_dir / "logs").glob("train_cycle*.log"))
    said = "ENOSPC was logged" if logged else "no ENOSPC line was logged"
    assert detail.startswith("Recovered from the previous checkpoint") and said in detail, (logged, detail)


def _assert_released(outcome) -> None:
    """The mount went with the launch, its checkpoints were copied back onto the disk (without
    the filler), and `nvrx-qual verify` of the run directory gives the same verdict."""
    run_dir = outcome.run_dir
    assert _mounts_under(run_dir) == [], _mounts_under(run_dir)
    launch_record = json.loads((run_dir / "launch.json").read_text())
    assert launch_record["checkpoint_tmpfs"] and launch_record["checkpoint_tmpfs_left"] is None, launch_record
    assert not (run_dir / "checkpoints" / inject.FILLER_NAME).exists()
    assert not list(run_dir.glob(tmpfs.STAGING_PREFIX + "*"))
    base = json.loads((run_dir / "verdict.json").read_text()).get("baseline") or {}
    baseline = base.get("run_dir") if isinstance(base, dict) else None
    again = verify.verify_run(run_dir, picture=False, baseline=baseline)
    judged = [(c.id, c.status) for c in outcome.verdict.criteria]
    assert [(c.id, c.status) for c in again.criteria] == judged, (baseline, judged)


@pytest.mark.e2e
@launches(lambda newest_launcher: _disk_full(newest_launcher))
def test_reference_workload_disk_full_recovers_from_the_previous_checkpoint(newest_launcher, scenarios):
    _can_mount()
    outcome = scenarios.outcome(_disk_full(newest_launcher))
    got = {c.id: c.status for c in outcome.verdict.criteria}
    expected = DISK_FULL_RECOVERED
    assert {k: got.get(k) for k in expected} == expected, "\n\n".join(explain(outcome, k) for k in expected)
    detail = outcome.verdict.criterion(DISK_FULL_HANDLED).detail
    _assert_names_what_the_logs_hold(detail, outcome.run_dir)
    _assert_released(outcome)


# The stack's two real endings on megatron-cpu (docs/faults.md, disk-full): the launcher restarts
# the group and the replacement loads K; or (1 run of 3 seen) both ranks raise the ENOSPC in the
# async save's finalize and then hang alive, disconnected from their rank monitors, and nothing in
# the stack notices. The watcher's stall rule stops that run (harness.launch.watch.stall_budget, 211 s
# here) and the verdict names the hang; nothing partial may be committed or loaded either way.
HUNG_FAILS = {"replacement_cycle", "clean_finish"}


def _megatron_cpu_disk_full(target) -> Scenario:
    # fail-fast on: the plain optimizer needs no finished run to be judged
    return dataclasses.replace(megatron_cpu_scenario("disk-full", target, plain=True, fault_at="in-save"),
                               fail_fast=True)


@pytest.mark.e2e
@launches(lambda megatron_cpu: _megatron_cpu_disk_full(megatron_cpu))
def test_megatron_cpu_disk_full_recovers_from_the_previous_checkpoint(megatron_cpu, scenarios):
    _can_mount()
    outcome = scenarios.outcome(_megatron_cpu_disk_full(megatron_cpu))
    failed = [c for c in outcome.verdict.criteria if c.status not in (PASS, NA)]
    detail = outcome.verdict.criterion(DISK_FULL_HANDLED).detail
    stopped = outcome.launch.stopped_early or ""
    if UNDETECTED_HANG in stopped:  # the stack hung after the ENOSPC: caught, and named
        assert not outcome.verdict.qualified and outcome.launch.ended_by == "watch", outcome.launch
        assert stopped.startswith("no progress for "), stopped
        assert {c.id for c in failed} - {DISK_FULL_HANDLED} == HUNG_FAILS, \
            "\n\n".join(explain(outcome, c.id) for c in failed)
        for c in failed:
            assert c.id == DISK_FULL_HANDLED or UNDETECTED_HANG in c.detail, c.detail
        # nothing partial committed or loaded; the error itself either names ENOSPC (PASS, "hung") or,
        # as torch's zip writer says it (`unexpected pos 704 vs 598`, 1 hung run of 2), does not: "silent"
        assert "was used as a checkpoint" not in detail, detail
        if outcome.verdict.criterion(DISK_FULL_HANDLED).status == PASS:
            assert detail.startswith("Nothing partial was used") and "it hung until the harness stopped it" in detail
        else:
            assert detail.startswith("The full filesystem went unreported"), detail
    else:
        assert outcome.verdict.qualified and not failed, "\n\n".join(explain(outcome, c.id) for c in failed)
        _assert_names_what_the_logs_hold(detail, outcome.run_dir)
    _assert_released(outcome)


def _replay(run_dir: Path, into: Path, edit) -> int:
    shutil.copytree(run_dir, into, symlinks=True)
    changed = 0
    for log in sorted((into / "logs").glob("train_cycle_cycle*.log")):
        text = log.read_text(errors="replace")
        new = edit(log.name, text)
        changed += new != text
        log.write_text(new)
    return changed


@pytest.mark.e2e
@launches(lambda newest_launcher: _disk_full(newest_launcher))
def test_disk_full_run_that_loaded_the_partial_save_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real disk-full run with its replacement loading the save that met the full
    filesystem (the tracker advanced past the last complete checkpoint): disk_full_handled fails."""
    _can_mount()
    outcome = scenarios.outcome(_disk_full(newest_launcher))
    marker = json.loads((outcome.run_dir / MARKER_NAME).read_text())
    n, k = marker["iteration"], marker["committed_iteration"]

    def load_the_partial(name: str, text: str) -> str:
        if name == f"train_cycle_cycle{marker['cycle']}.log":
            return text
        return re.sub(rf"((?:loading distributed checkpoint from|successfully loaded checkpoint from) .* at "
                      rf"iteration ){k}\b", rf"\g<1>{n}", text)

    assert _replay(outcome.run_dir, tmp_path / "loaded", load_the_partial)
    c = verify.verify_run(tmp_path / "loaded", picture=False).criterion(DISK_FULL_HANDLED)
    assert c.status == FAIL and f"loaded checkpoint {n}, the save of iteration {n} that met the full" in c.detail, c


@pytest.mark.e2e
@launches(lambda newest_launcher: _disk_full(newest_launcher))
def test_disk_full_run_that_committed_the_partial_save_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real disk-full run with the save that met ENOSPC committed in the fault's
    cycle (its `successfully saved` line): disk_full_handled fails."""
    _can_mount()
    outcome = scenarios.outcome(_disk_full(newest_launcher))
    marker = json.loads((outcome.run_dir / MARKER_NAME).read_text())
    n, k = marker["iteration"], marker["committed_iteration"]

    def commit_the_partial(name: str, text: str) -> str:
        if name != f"train_cycle_cycle{marker['cycle']}.log":
            return text
        saved = next(line for line in text.splitlines(keepends=True)
                     if re.search(rf"successfully saved checkpoint from iteration +{k} ", line))
        # stamped 0.2 s after the fill, in the local time the workload writes
        after = datetime.fromisoformat(marker["injected_at"].replace("Z", "+00:00")) + timedelta(seconds=0.2)
        saved = re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\]",
                       f"[{after.astimezone().strftime('%Y-%m-%d %H:%M:%S.%f')}]", saved)
        return text + re.sub(rf"iteration +{k} ", f"iteration {n} ", saved)

    assert _replay(outcome.run_dir, tmp_path / "committed", commit_the_partial)
    c = verify.verify_run(tmp_path / "committed", picture=False).criterion(DISK_FULL_HANDLED)
    assert c.status == FAIL and f"the save of iteration {n}, in flight when the filesystem filled, was committed" \
        in c.detail, c
