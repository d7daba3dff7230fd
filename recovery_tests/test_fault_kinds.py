"""The fault kinds beyond signals (harness.spec FAULT_KINDS, harness.inject): what each does to
the rank, how the criteria judge it, and one real launch per kind with its expected verdict.

- exception / segfault / abort: the rank dies of the kind's own cause (exit 1 with the
  InjectedFault traceback, SIGSEGV, SIGABRT); replacement_cycle checks the launcher's
  `failed (exitcode` line of that very worker (the marker's pid) when it has one;
- gil: the rank stays alive with the GIL held; only a rank monitor's timeout may count as its
  detection (replacement_cycle fails without one, whatever else ended the cycle);
- corrupt: bytes in the middle of a committed shard are inverted (size unchanged). DCP has no
  checksum, so the stack loads it silently: the suite must say the replacement loaded the
  damaged checkpoint (loop_stopped fails). The test passes when the suite catches it.
- disk-full, gpu-hang, gpu-error: planned, refused before launch with the reason.

How each guard is shown to fail: the unit tests below replay synthetic run directories
(recovery_tests.rundirs) with the kind's detection or death changed, and the e2e cases replay
their real runs with the rank monitor's timeout lines removed (gil) or the fault rank's exit
code changed (the crash kinds).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.runs import Scenario, explain
from harness import inject, verify
from harness import spec as specmod
from harness.criteria import CHECK_IDS, FAIL, LOOP_STOPPED, LOSS_CONTINUITY, NOT_APPLICABLE, OPTIMIZER_STATE, PASS
from harness.criteria import STATE_EQUIVALENCE
from harness.layout import MARKER_NAME, TRACKER_NAME
from harness.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.test_fault_moments import make_save
from recovery_tests.test_nemesis import await_true, launched, rank_env, write_tracker
from recovery_tests.test_recovery_megatron_cpu import megatron_cpu  # noqa: F401 (the fixture)
from recovery_tests.test_recovery_megatron_cpu import scenario as megatron_cpu_scenario

REPO = Path(__file__).resolve().parent.parent
CRASH_KINDS = ("exception", "segfault", "abort")
NEW_KINDS = (*CRASH_KINDS, "gil", "corrupt")
PLANNED = ("disk-full", "gpu-hang", "gpu-error")


def _python(code: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, **kw)


# ---------------------------------------------------------------- the actions, in a real process


@pytest.mark.parametrize("kind", CRASH_KINDS)
def test_each_crash_action_ends_the_process_as_its_row_says(kind: str) -> None:
    """Fired from a side thread, as the nemesis's poller does: the process ends with the row's exit code."""
    proc = _python("import threading, time\nfrom harness import inject\ntraining_started = threading.Event()\n"
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
        assert "in training" in text and text.rstrip().endswith("harness.inject.InjectedFault"), text


def test_gil_action_keeps_the_rank_alive_with_every_python_thread_and_handler_stopped(tmp_path: Path) -> None:
    beats = tmp_path / "beats"
    code = ("import os, signal, sys, threading, time\nfrom harness import inject\npath = sys.argv[1]\n"
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


@pytest.mark.parametrize("kind", PLANNED)
def test_planned_kinds_are_refused_before_launch_with_the_reason(tmp_path: Path, kind: str) -> None:
    row = specmod.FAULT_KINDS[kind]
    moment = (row.moments or ("after-commit",))[0]
    for workload in ("reference", "megatron-cpu"):
        with pytest.raises(specmod.SpecError) as err:
            specmod.validate(_spec(tmp_path, workload=workload, fault=kind, fault_at=moment,
                                   **({"train_iters": 30} if moment == "in-save" else {})))
        text = str(err.value)
        assert f"--fault {kind} is planned, not runnable: not implemented yet" in text, text
        assert ("needs a GPU" in text) == row.gpu_only, text


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


def test_gil_without_a_rank_monitor_timeout_fails_replacement_cycle(tmp_path: Path) -> None:
    """The process exiting is no detection of a held GIL: a rank monitor's timeout line must exist."""
    built = rundirs.build(tmp_path / "run", rundirs.Scenario(fault="gil", timeout_ranks=()))
    c = verify_run(built.run_dir).criterion("replacement_cycle")
    assert c.status == FAIL and "was not detected by a rank monitor" in c.detail, c.detail


# ---------------------------------------------------------------- e2e: one real launch per kind

ALL_PASS = {**{c: PASS for c in CHECK_IDS}, LOSS_CONTINUITY: PASS, STATE_EQUIVALENCE: PASS}
NA = NOT_APPLICABLE
# corrupt: the replacement loads the damaged checkpoint (DCP has no checksum) and trains on: the suite
# must catch it; nothing else is judged for a plan whose checkpoint is damaged (as for poison)
CORRUPT_CAUGHT = {"pre_fault_checkpoint": PASS, "replacement_cycle": PASS, "optimizer_reload": NA,
                  "later_checkpoint": NA, "clean_finish": NA, OPTIMIZER_STATE: PASS, LOOP_STOPPED: FAIL}
REFERENCE = {k: ALL_PASS for k in (*CRASH_KINDS, "gil")} | {"corrupt": CORRUPT_CAUGHT}
# Megatron's own loop on CPU, kept to two launches for CI time: a native crash and the held GIL.
MEGATRON_CPU = ("segfault", "gil")


def _scenario(kind: str, target) -> Scenario:
    qualified = all(s in (PASS, NA) for s in REFERENCE[kind].values())
    return Scenario(kind, target, name=f"kinds-reference-{kind}-nvrx{target.version}",
                    fail_fast=kind != "corrupt", expect_qualified=qualified,
                    knobs=(("max_restarts", 2),) if kind == "corrupt" else ())


def _ids(kind: str) -> str:
    return kind if all(s in (PASS, NA) for s in REFERENCE[kind].values()) else f"{kind}[expected-negative]"


@pytest.mark.e2e
@pytest.mark.parametrize("kind", list(REFERENCE), ids=[_ids(k) for k in REFERENCE])
def test_reference_workload_verdict_per_kind(kind, newest_launcher, scenarios):
    outcome = scenarios.outcome(_scenario(kind, newest_launcher))
    expected = REFERENCE[kind]
    got = {c.id: c.status for c in outcome.verdict.criteria}
    assert {k: got.get(k) for k in expected} == expected, "\n\n".join(explain(outcome, k) for k in expected)
    marker = json.loads((outcome.run_dir / MARKER_NAME).read_text())
    assert (marker["fault"], marker["signal"]) == (kind, specmod.FAULT_KINDS[kind].signal), marker
    if kind == "gil":
        # detected by a rank monitor's timeout line, not by the process exiting
        detail = outcome.verdict.criterion("replacement_cycle").detail
        assert re.search(r"after a (section|out-of-section) timeout", detail), detail
    if kind == "corrupt":
        detail = outcome.verdict.criterion(LOOP_STOPPED).detail
        assert "loaded or trained from the damaged checkpoint" in detail, detail


@pytest.mark.e2e
def test_gil_run_without_its_timeout_lines_fails(newest_launcher, scenarios, tmp_path):
    """Replay of the real gil run with every rank-monitor timeout line removed: what is left (the
    SIGKILLed workers, the restart) must not count as detecting a held GIL."""
    outcome = scenarios.outcome(_scenario("gil", newest_launcher))
    replay = tmp_path / "replay"
    shutil.copytree(outcome.run_dir, replay, symlinks=True)
    cut = 0
    for log in (replay / "logs").glob("*.log"):
        lines = log.read_text(errors="replace").splitlines(keepends=True)
        kept = [line for line in lines if "has been open for" not in line and "out-of-section" not in line.lower()]
        cut += len(lines) - len(kept)
        log.write_text("".join(kept))
    assert cut, "the real gil run had no timeout line to remove"
    c = verify.verify_run(replay, picture=False).criterion("replacement_cycle")
    assert c.status == FAIL and "not detected by a rank monitor" in c.detail, c.detail


@pytest.mark.e2e
@pytest.mark.parametrize("kind", MEGATRON_CPU)
def test_megatron_cpu_recovers_from_kind(kind, megatron_cpu, scenarios):
    """Megatron's own loop with the plain optimizer (the distributed one's step reset is
    test_recovery_megatron_cpu's finding), judged against the shared uninterrupted baseline."""
    outcome = scenarios.outcome(megatron_cpu_scenario(kind, megatron_cpu, plain=True))
    failed = [c for c in outcome.verdict.criteria if c.status not in (PASS, NA)]
    assert outcome.verdict.qualified and not failed, "\n\n".join(explain(outcome, c.id) for c in failed)
    if kind == "gil":
        detail = outcome.verdict.criterion("replacement_cycle").detail
        assert re.search(r"after a (section|out-of-section) timeout", detail), detail


@pytest.mark.e2e
def test_corrupt_run_judged_as_a_fallback_when_the_replacement_loaded_an_earlier_checkpoint(
        newest_launcher, scenarios, tmp_path):
    """Replay of the real corrupt run whose replacement loaded checkpoint 3 (as if one had been
    committed before the damaged 5) instead of the damaged one: loop_stopped passes, naming the
    fallback; the real run (it loaded the damaged checkpoint) fails."""
    outcome = scenarios.outcome(_scenario("corrupt", newest_launcher))
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
