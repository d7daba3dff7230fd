"""Latency split and lost work: exact against the true times of the built runs, null where
a timestamp is missing, right across UTC offsets, and on the real launcher samples."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness.vocab import events as ev
from harness.judge import metrics
from harness.judge.criteria import analyze
from harness.read.history import read_history
from harness.report.verify import verify_run, verify_timeline
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

SAMPLES = Path(__file__).parent / "data" / "samples"
KEYS = ("detection_s", "restart_s", "restore_s", "first_step_s", "failure_to_first_step_s", "lost_iterations")


def _metrics(run_dir: Path) -> dict:
    return {k: verify_run(run_dir).metrics.to_json()[k] for k in KEYS}


@pytest.mark.parametrize("scenario", [
    Scenario(), Scenario(nvrx="0.4.1"), Scenario(fault="hang"), Scenario(fault="hang", nvrx="0.4.1"),
    Scenario(utc_offset_s=-7 * 3600), Scenario(world=16, fault_rank=9, utc_offset_s=19800),
    Scenario(run_json=False, utc_offset_s=-18000),  # 0.7.0: offset derived from "Time: ... UTC" lines
    Scenario(nvrx="0.4.1", run_json=False, console_log=True, utc_offset_s=5400),  # from the console capture
], ids=["kill-0.7.0", "kill-0.4.1", "hang-0.7.0", "hang-0.4.1", "utc-7", "16-ranks-utc+5:30", "derived-offset",
        "console-offset"])
def test_latency_split_matches_the_true_times(tmp_path, scenario):
    built = rundirs.build(tmp_path / "run", scenario)
    expected = rundirs.expected_metrics(built)
    assert _metrics(built.run_dir) == expected
    assert expected["detection_s"] is not None and expected["failure_to_first_step_s"] > expected["detection_s"]


def test_hang_detection_is_the_timeout(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(fault="hang", nvrx="0.4.1", step_timeout_s=10.0))
    m = verify_run(built.run_dir).metrics
    assert m.detection_s == pytest.approx(10.5)
    assert "Section 'step' has been open" in m.evidence["failure_detected_at"]


def test_assumed_offset_is_said_in_the_notes(tmp_path):
    here = int(time.localtime(rundirs.BASE_UTC_MS / 1000).tm_gmtoff)  # the verifying machine's offset then
    built = rundirs.build(tmp_path / "run", Scenario(nvrx="0.4.1", run_json=False, utc_offset_s=here))
    verdict = verify_run(built.run_dir)
    assert {k: verdict.metrics.to_json()[k] for k in KEYS} == rundirs.expected_metrics(built)
    assert any("assumed this machine's" in n for n in verdict.notes)
    assert verdict.launcher.utc_offset_source == "assumed: the verifying machine's local offset"


def test_restore_and_first_step_have_whole_second_resolution_noted(tmp_path):
    verdict = verify_run(rundirs.build(tmp_path / "run", Scenario()).run_dir)
    assert metrics.SECOND_RESOLUTION_NOTE in verdict.metrics.notes
    stamps = verdict.metrics.to_json()["timestamps"]
    assert stamps["checkpoint_loaded_at"].endswith(":08.000Z")  # a whole second, as Megatron printed it
    assert set(stamps) == {"injected_at", "failure_detected_at", "workers_started_at", "checkpoint_loaded_at", "first_step_at"}


def test_started_from_random_lost_everything_and_restores_nothing(tmp_path):
    m = _metrics(rundirs.build(tmp_path / "run", Scenario(restart_from_random=True)).run_dir)
    assert (m["restore_s"], m["first_step_s"], m["lost_iterations"]) == (None, None, 11)
    assert m["failure_to_first_step_s"] is not None  # the first step after the fault still happened


def test_no_replacement_leaves_later_phases_null(tmp_path):
    m = _metrics(rundirs.build(tmp_path / "run", Scenario(restarts_exhausted=True)).run_dir)
    assert m == {"detection_s": pytest.approx(0.09), "restart_s": None, "restore_s": None, "first_step_s": None,
                 "failure_to_first_step_s": None, "lost_iterations": 1}


def test_no_fault_no_metrics(tmp_path):
    verdict = verify_run(rundirs.build(tmp_path / "run", Scenario(fault="none")).run_dir)
    assert all(v is None for v in verdict.metrics.to_json().values() if not isinstance(v, (dict, list)))


def test_missing_stamps_are_null_never_guessed(tmp_path):
    tl = read_history(rundirs.build(tmp_path / "run", Scenario(checkpoints=False)).run_dir)
    no_time = dataclasses.replace(tl, injections=(dataclasses.replace(tl.injections[0], ts=None),))
    m = metrics.compute(no_time, analyze(no_time))
    assert (m.detection_s, m.failure_to_first_step_s) == (None, None)
    assert m.restart_s is not None and "the marker has no injected_at" in " ".join(m.notes)
    replacement = tl.starts[1]
    unbuilt = dataclasses.replace(replacement, events=tuple(e for e in replacement.events if not isinstance(e, ev.ModelBuilt)))
    tl2 = dataclasses.replace(tl, starts=(tl.starts[0], unbuilt))
    m2 = metrics.compute(tl2, analyze(tl2))
    assert (m2.restore_s, m2.first_step_s) == (None, None) and m2.restart_s is not None


# ---------------------------------------------------------------- real launcher samples + Megatron logs


def _utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)


def _megatron_cycles(run: Path, fault_cycle_end: datetime, replacement_built: datetime, k: int = 10,
                     train_iters: int = 20) -> None:
    """Per-cycle Megatron logs around a real launcher log's times (the node's offset is 0)."""
    def stamp(t: datetime) -> str:
        return t.strftime("[%Y-%m-%d %H:%M:%S.%f]")

    def it_line(t: datetime, i: int) -> str:
        return (f"1:  {stamp(t)} iteration {i:8d}/{train_iters:8d} | consumed samples: {i * 2:12d} | lm loss: "
                f"{9 - i / 10:.6E} | number of skipped iterations:   0 | number of nan iterations:   0 |")

    def saved(t: datetime, i: int) -> str:
        return f"0:   {stamp(t)} successfully saved checkpoint from iteration {i:7d} to /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ]"

    head = ["0: ------------------------ arguments ------------------------",
            "0:   save_interval ................................... 5",
            f"0:   train_iters ..................................... {train_iters}",
            "0: -------------------- end of arguments ---------------------", "0: FT: initialized. Timeouts=..."]
    c0 = head + ["0: WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt"]
    t = fault_cycle_end - timedelta(milliseconds=250 * (k + 1))
    for i in range(1, k + 2):
        c0.append(it_line(t, i))
        if i > 1 and (i - 1) % 5 == 0:
            c0.append(saved(t + timedelta(milliseconds=20), i - 1))
        t += timedelta(milliseconds=250)
    c1 = head + [f"0:  loading distributed checkpoint from /ckpt at iteration {k}",
                 "0: INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type x",
                 f"0:   successfully loaded checkpoint from /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ] at iteration {k}",
                 f"0: [after model, optimizer, and learning rate scheduler are built] datetime: {replacement_built:%Y-%m-%d %H:%M:%S}"]
    t = replacement_built + timedelta(milliseconds=600)
    for i in range(k + 1, train_iters + 1):
        c1.append(it_line(t, i))
        if (i - 1) % 5 == 0:
            c1.append(saved(t + timedelta(milliseconds=20), i - 1))
        t += timedelta(milliseconds=250)
    c1 += [saved(t, train_iters), f"0: [after training is done] datetime: {t:%Y-%m-%d %H:%M:%S}"]
    for n, lines in enumerate((c0, c1)):
        (run / "logs" / f"train_cycle_cycle{n}.log").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("sample, name, injected, built_at, expected", [
    # NVRx 0.7.0: failure_detected 17:09:18.543 UTC, cycle 1 worker_start_completed 17:09:20.881 UTC
    ("nvrx-0.7.0-kill", "launcher.log", "2026-11-29 17:09:18.450", "2026-11-29 17:09:22.000",
     dict(detection_s=0.093, restart_s=2.338, restore_s=1.119, first_step_s=0.6, failure_to_first_step_s=4.15)),
    # NVRx 0.4.1: failed (exitcode: -9) at 17:05:47,701, joined round 1 at 17:05:47,798 (local = UTC here)
    ("nvrx-0.4.1-kill", "launcher-console.log", "2026-11-29 17:05:47.650", "2026-11-29 17:05:50.000",
     dict(detection_s=0.051, restart_s=0.097, restore_s=2.202, first_step_s=0.6, failure_to_first_step_s=2.95)),
    # NVRx 0.4.1 hang: the rank-0 monitor's timeout at 16:34:20,870 is the first sign
    ("nvrx-0.4.1-hang", "launcher-console.log", "2026-11-29 16:34:06.300", "2026-11-29 16:34:24.000",
     dict(detection_s=14.57, restart_s=0.297, restore_s=2.833, first_step_s=0.6, failure_to_first_step_s=18.3)),
])
def test_real_launcher_samples_with_megatron_logs(tmp_path, sample, name, injected, built_at, expected):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    shutil.copy(SAMPLES / sample / name, run / "logs" / "launcher.log")
    if (SAMPLES / sample / "cycle_infos").is_dir():
        shutil.copytree(SAMPLES / sample / "cycle_infos", run / "cycle_infos")
    fault = "hang" if "hang" in sample else "kill"
    t_inj = _utc(injected)
    (run / "fault_injected.json").write_text(json.dumps({
        "fault": fault, "signal": "SIGSTOP" if fault == "hang" else "SIGKILL", "rank": 1, "local_rank": 1, "cycle": 0,
        "iteration": 10, "baseline_iteration": 0, "host": "vm", "pid": 1,
        "injected_at": t_inj.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}))
    (run / "run.json").write_text(json.dumps({"schema": 1, "utc_offset_s": 0, "spec": {"fault": fault, "fault_rank": 1}}))
    _megatron_cycles(run, t_inj - timedelta(milliseconds=150), _utc(built_at))
    verdict = verify_run(run)
    # no checkpoints/ with these samples: the optimizer's own record cannot be read; a run.json without a
    # contract plans no launcher to compare the workers' with
    assert [c.status for c in verdict.criteria] == ["pass"] * 5 + ["not_applicable"] * 2, \
        [c.detail for c in verdict.criteria]
    got = verdict.metrics.to_json()
    assert {k: got[k] for k in expected} == pytest.approx(expected)
    assert got["lost_iterations"] == 1


def test_metrics_are_computed_from_the_timeline_alone(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(checkpoints=False))
    tl = read_history(built.run_dir)
    shutil.rmtree(built.run_dir)  # nothing may be read again
    assert {k: verify_timeline(tl).metrics.to_json()[k] for k in KEYS} == rundirs.expected_metrics(built)


def _with_clock_jump(run_dir: Path, before: float, after: float, jump: float) -> None:
    path = run_dir / "launch.json"
    doc = json.loads(path.read_text())
    iso = lambda t: datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")  # noqa: E731
    doc["clock_jumps"] = [{"before": iso(before), "after": iso(after), "jump_s": jump}]
    path.write_text(json.dumps(doc))


def test_a_wall_clock_jump_during_the_restore_is_flagged(tmp_path):
    """The harness saw its wall clock step by +54 s while the replacement was loading: the
    values that span it are named in a warning, in verdict.json and at the top of report.md."""
    built = rundirs.build(tmp_path / "run", Scenario())
    t = built.times
    mid = (t["workers_started_at"] + t["checkpoint_loaded_at"]) / 2
    _with_clock_jump(built.run_dir, mid, mid + 54.0, 54.0)
    verdict = verify_run(built.run_dir, write=True)
    [warning] = verdict.metrics.warnings
    assert "jumped +54.00 s" in warning
    assert "restore_s, failure_to_first_step_s span it" in warning and "detection_s" not in warning
    assert json.loads((built.run_dir / "verdict.json").read_text())["metrics"]["warnings"] == [warning]
    head = (built.run_dir / "report.md").read_text().split("## Criteria")[0]
    assert f"> ⚠️ **Clock:** {warning}" in head


def test_a_clock_jump_outside_the_recovery_is_still_said_and_bad_records_are_ignored(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario())
    early = built.times["injected_at"] - 3.0
    _with_clock_jump(built.run_dir, early, early + 2.0, 2.0)
    [warning] = verify_run(built.run_dir).metrics.warnings
    assert "no measured latency spans it" in warning
    doc = json.loads((built.run_dir / "launch.json").read_text())
    doc["clock_jumps"] = [{"before": "yesterday", "after": "2026-11-29T16:32:00Z", "jump_s": 1.5},
                          {"before": "2026-11-29T16:32:00Z", "after": "2026-11-29T16:32:01Z", "jump_s": float("nan")},
                          {"before": "2026-11-29T16:32:00Z", "after": "2026-11-29T16:32:01Z", "jump_s": 1e12}, "junk"]
    (built.run_dir / "launch.json").write_text(json.dumps(doc))
    assert verify_run(built.run_dir).metrics.warnings == ()


def test_megatron_019_microsecond_datetimes_are_kept(tmp_path):
    """Megatron 0.19 prints `datetime: 2026-12-01 07:52:49.308941`: restore and first step
    keep the microseconds, the metrics agree with the true split, and no ±1 s note is made."""
    built = rundirs.build(tmp_path / "run", Scenario(microsecond_datetimes=True))
    verdict = verify_run(built.run_dir)
    assert {k: verdict.metrics.to_json()[k] for k in KEYS} == rundirs.expected_metrics(built)
    assert metrics.SECOND_RESOLUTION_NOTE not in verdict.metrics.notes
    loaded = verdict.metrics.to_json()["timestamps"]["checkpoint_loaded_at"]
    assert not loaded.endswith(".000Z"), loaded  # the built line's own milliseconds, not a whole second
