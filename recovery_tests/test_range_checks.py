"""Every number and time read from a run directory is range-checked: an impossible one makes a
criterion unknown or fails it with the reason, never a traceback and never a pass; values that
would pass `plan` but break the workers are refused by validation; a taken rendezvous port is
named as "address already in use"."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from fixtures.processes import run_in_session
from harness.launch import job as launch
from harness.cli import main
from harness.report.verify import verify_run

from . import rundirs
from .test_launch import fake_plan, record  # noqa: F401

CYCLE1 = "logs/train_cycle_cycle1.log"


@pytest.fixture
def good(tmp_path) -> rundirs.Built:
    return rundirs.build(tmp_path / "work" / "runs" / "r1", rundirs.Scenario())


def edit_marker(run_dir: Path, **changes: object) -> None:
    path = run_dir / "fault_injected.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def status_of(verdict, cid: str) -> tuple[str, str]:
    c = verdict.criterion(cid)
    return c.status, c.detail


def test_the_good_run_qualifies(good):  # the baseline every case below damages
    assert verify_run(good.run_dir).qualified


@pytest.mark.parametrize("stamp", ["2026-13-45 25:61:00", "2026-02-30 10:00:00", "0001-01-01 00:00:00",
                                   "2026-11-29 16:32:10.99999999999999999999999999999999999"])
def test_an_invalid_date_in_a_log_line_is_no_time_not_a_traceback(good, capsys, stamp):
    with open(good.run_dir / CYCLE1, "a") as f:
        f.write(f"[{stamp}] saving checkpoint at iteration 25 to /ckpt in torch_dist format\n")
        f.write(f"1: [{stamp}] iteration 26/ 30 | consumed samples: 52 | lm loss: 1.0 |\n")
    assert main(["verify", str(good.run_dir), "--no-write", "--quiet"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("changes,why", [
    ({"injected_at": "0001-01-01T00:00:00.000Z"}, "is not a possible time"),
    ({"injected_at": "9999-12-31T23:59:59.999+14:00"}, "is not a possible time"),
    ({"iteration": -10}, "iteration -10 is not a non-negative integer"),
    ({"iteration": "1" * 5000}, "iteration"),
    ({"rank": "abc"}, "rank 'abc' is not a non-negative integer"),
    ({"iteration": 1e300}, "iteration 1e+300 is not"),
])
def test_odd_values_in_the_marker_fail_the_criterion_with_the_reason(good, changes, why):
    edit_marker(good.run_dir, **changes)
    verdict = verify_run(good.run_dir)
    status, detail = status_of(verdict, "pre_fault_checkpoint")
    assert status == "fail" and why in detail and not verdict.qualified


def test_an_injection_before_the_launch_fails(good):
    edit_marker(good.run_dir, injected_at="2026-11-29T15:00:00.000Z")  # the launch began 16:31:59.900
    status, detail = status_of(verify_run(good.run_dir), "pre_fault_checkpoint")
    assert status == "fail" and "before the launch started" in detail


def test_a_recovery_stamped_before_its_injection_is_unknown(good):
    later = good.times["first_step_at"] + 5.0  # still inside the launch, but after the whole recovery
    from harness.vocab.events import iso_utc

    edit_marker(good.run_dir, injected_at=iso_utc(later))
    verdict = verify_run(good.run_dir)
    status, detail = status_of(verdict, "replacement_cycle")
    assert status == "unknown" and "before the injection" in detail and not verdict.qualified
    assert verdict.metrics.detection_s is not None and verdict.metrics.detection_s < 0  # what used to pass


def test_a_dir_that_merely_looks_like_iter_7d_does_not_stand_in_for_the_checkpoint(good):
    ckpt = good.run_dir / "checkpoints"
    (ckpt / "iter_0000010").rename(ckpt / "iter_00000010")  # 8 digits: Megatron never reads it as iteration 10
    verdict = verify_run(good.run_dir)
    status, detail = status_of(verdict, "pre_fault_checkpoint")
    assert status == "fail" and "has no iter_0000010" in detail
    assert any("iter_00000010" in n and "not Megatron's iter_%07d name" in n for n in verdict.notes)


def test_symlink_loops_among_checkpoint_dirs_are_no_traceback(good, capsys):
    ckpt = good.run_dir / "checkpoints"
    shutil.rmtree(ckpt / "iter_0000015")
    (ckpt / "iter_0000015").symlink_to(ckpt / "iter_0000015")  # a loop onto itself
    (ckpt / "iter_0000040").symlink_to(ckpt / "iter_0000045")  # a loop of two
    (ckpt / "iter_0000045").symlink_to(ckpt / "iter_0000040")
    assert main(["verify", str(good.run_dir), "--no-write", "--quiet"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err
    os.rename(ckpt, good.run_dir / "real-checkpoints")
    (good.run_dir / "checkpoints").symlink_to(good.run_dir / "checkpoints")
    assert main(["verify", str(good.run_dir), "--no-write", "--quiet"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_a_copied_run_dir_is_judged_against_its_own_checkpoints(good, tmp_path):
    run_json = good.run_dir / "run.json"
    doc = json.loads(run_json.read_text())
    doc["spec"]["work_dir"] = str(tmp_path / "work")  # where the run was written: work/runs/r1
    run_json.write_text(json.dumps(doc))
    copy = tmp_path / "received" / "r1"
    shutil.copytree(good.run_dir, copy, symlinks=True)
    shutil.rmtree(copy / "checkpoints" / "iter_0000010")  # the copy lacks the checkpoint; the original has it
    status, detail = status_of(verify_run(copy), "pre_fault_checkpoint")
    assert status == "fail" and "no iter_0000010" in detail
    assert verify_run(good.run_dir).qualified  # the original still qualifies against its own


def test_baseline_that_had_a_fault_or_is_missing_is_refused(good, tmp_path, capsys):
    faulty = rundirs.build(tmp_path / "faulty", rundirs.Scenario())
    assert main(["verify", str(good.run_dir), "--no-write", "--baseline", str(faulty.run_dir)]) == 2
    assert "had a fault" in capsys.readouterr().err
    assert main(["verify", str(good.run_dir), "--no-write", "--baseline", str(tmp_path / "nope")]) == 2
    assert "--baseline" in capsys.readouterr().err and "does not exist" in capsys.readouterr().err + "does not exist"


def test_report_counts_the_evidence_not_the_stored_flag(good, capsys):
    verdict = verify_run(good.run_dir, write=True)
    doc = json.loads((good.run_dir / "verdict.json").read_text())
    doc["criteria"][1]["status"] = "fail"
    assert verdict.qualified and doc["qualified"] is True  # the flag now lies
    (good.run_dir / "verdict.json").write_text(json.dumps(doc))
    assert main(["report", str(good.run_dir)]) == 0  # the evidence, judged again, qualifies
    captured = capsys.readouterr()
    assert "1 of 1 run" in captured.out and "replacement_cycle fail → pass" in captured.out
    assert "its own criteria say otherwise" in captured.err


# ---------------------------------------------------------------- values that pass plan, fail in the workers


def plan_argv(tmp_path: Path, *more: str) -> list[str]:
    return ["plan", "--workload", "reference", "--work-dir", str(tmp_path / "work"), "--run-id", "v1", *more]


@pytest.mark.parametrize("flags,named", [
    (["--poll-interval", "nan"], "--poll-interval"),
    (["--poll-interval", "1e308"], "--poll-interval"),
    (["--out-of-section-timeout", "-5"], "--out-of-section-timeout"),
    (["--out-of-section-timeout", "inf"], "--out-of-section-timeout"),
    (["--section-timeouts", "setup:nan,step:10,checkpointing:10"], "--section-timeouts setup"),
    (["--monitor-interval", "0"], "--monitor-interval"),
    (["--workload-check-interval", "-1"], "--workload-check-interval"),
])
def test_timeouts_and_intervals_the_workers_would_choke_on_are_refused(tmp_path, capsys, flags, named):
    assert main(plan_argv(tmp_path, *flags)) == 2
    err = capsys.readouterr().err
    assert named in err and "must be a number of seconds above 0" in err
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("text", ["+7", " 7_0", "٧"])
def test_a_tracker_the_nemesis_would_refuse_is_refused_by_plan(tmp_path, capsys, text):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text(text)
    assert main(plan_argv(tmp_path, "--checkpoint-dir", str(ckpt))) == 2
    assert "not an iteration number" in capsys.readouterr().err


@pytest.mark.parametrize("deadline", ["nan", "-1", "inf"])
def test_a_deadline_that_disables_the_deadline_is_refused(tmp_path, deadline):
    argv = [sys.executable, "-m", "harness", *plan_argv(tmp_path)[:-2], "--run-id", "d1", "--deadline", deadline]
    argv[3] = "run"
    done = run_in_session(argv, timeout_s=120)
    assert done.returncode == 2 and "--deadline" in done.stderr, done.stderr


# ---------------------------------------------------------------- a taken rendezvous port


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_run_refuses_a_taken_rendezvous_port_before_launch(tmp_path, taken_port):
    argv = [sys.executable, "-m", "harness", "run", "--workload", "reference", "--work-dir", str(tmp_path / "work"),
            "--run-id", "port", "--rdzv-endpoint", f"127.0.0.1:{taken_port}"]
    done = run_in_session(argv, timeout_s=120)
    assert done.returncode == 2, done.stderr
    assert "address already in use" in done.stderr and str(taken_port) in done.stderr


@pytest.mark.e2e
def test_a_launch_stalled_on_a_taken_port_says_address_already_in_use(tmp_path, taken_port, record):
    import dataclasses

    plan = fake_plan(tmp_path, "--forever", "--record", str(record))
    plan = dataclasses.replace(plan, spec=dataclasses.replace(plan.spec, rdzv_endpoint=f"127.0.0.1:{taken_port}"))
    result = launch.launch(plan, deadline_s=1.0, tick_s=0.05)
    assert "address already in use" in result.stopped_early and str(taken_port) in result.stopped_early


def test_diagnose_refuses_an_offset_that_is_no_time_zone(good, capsys):
    assert main(["diagnose", str(good.run_dir), "--utc-offset", str(10 ** 12)]) == 2
    assert "no time zone" in capsys.readouterr().err
