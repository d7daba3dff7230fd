"""Triage takes the value history already made: the run's facts (run.json, launch.json, the
markers) come from the Timeline; only the log lines are scanned again, for tracebacks."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.safe import safeio
from harness.report import verify
from harness.read.history import read_run
from harness.vocab.layout import marker_index
from harness.judge.triage import diagnose, triage_run
from recovery_tests import rundirs

SAMPLES = Path(__file__).parent / "data" / "samples"

SCENARIOS = {
    "kill-0.7.0": rundirs.Scenario(),
    "kill-0.4.1": rundirs.Scenario(nvrx="0.4.1"),
    "hang-0.7.0": rundirs.Scenario(fault="hang"),
    "hang-0.4.1": rundirs.Scenario(fault="hang", nvrx="0.4.1"),
    "none": rundirs.Scenario(fault="none", marker=False),
    "never-fired": rundirs.Scenario(marker=False, never_fired_exit3=True),
    "restarts-exhausted": rundirs.Scenario(restarts_exhausted=True),
    "second-failure": rundirs.Scenario(second_failure_at=14),
    "second-marker": rundirs.Scenario(second_failure_at=14, second_injection=True, second_marker=True,
                                      moment="in-restore"),
    "sbatch-log": rundirs.Scenario(per_cycle_logs=False, console_log=True),
    "no-json": rundirs.Scenario(run_json=False, launch_json=False),
}


def _same_triage(run_dir: Path) -> None:
    from_path = diagnose(run_dir)
    read = read_run(run_dir, inspect_checkpoints=False, progress=False)
    assert triage_run(read) == from_path
    assert diagnose(run_dir, history=read.timeline) == from_path


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_triage_from_the_timeline_is_the_triage_from_the_files(tmp_path: Path, name: str) -> None:
    _same_triage(rundirs.build(tmp_path / "run", SCENARIOS[name]).run_dir)


@pytest.mark.parametrize("sample", ["nvrx-0.4.1-hang", "nvrx-0.4.1-kill", "nvrx-0.7.0-kill"])
def test_triage_from_the_timeline_is_the_triage_from_the_files_on_real_launcher_output(tmp_path: Path,
                                                                                       sample: str) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLES / sample, run_dir / "logs")
    _same_triage(run_dir)


def _run_facts_opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of run.json, launch.json and marker files opened from now on (every read of a
    run directory's file goes through safeio.open_regular)."""
    opened: list[str] = []
    real = safeio.open_regular

    def counting(path: str | os.PathLike) -> int:
        name = Path(path).name
        if name in ("run.json", "launch.json") or marker_index(name) is not None:
            opened.append(name)
        return real(path)

    monkeypatch.setattr(safeio, "open_regular", counting)
    return opened


def test_verify_triage_does_not_open_the_run_facts_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario(restarts_exhausted=True)).run_dir
    read = read_run(run_dir, inspect_checkpoints=False, progress=False)
    verdict = verify.verify_read(read)
    assert not verdict.qualified
    opened = _run_facts_opened(monkeypatch)
    found, sections = verify.triage(verdict, read)
    assert found is not None and found.failed and sections
    assert opened == []
    found_again, _ = verify.triage(verdict)  # without the read: triage reads the files itself
    assert found_again == found
    assert "run.json" in opened and "launch.json" in opened


def test_triage_takes_the_timelines_facts_over_the_files(tmp_path: Path) -> None:
    """What history read is what triage uses: a Timeline whose launch record says the harness
    stopped the job, and whose markers are gone, gives that triage although the files say neither."""
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    launch = json.loads((run_dir / "launch.json").read_text())
    assert not launch.get("stopped_early")
    from_files = diagnose(run_dir)
    assert from_files.injected

    tl = read_run(run_dir, inspect_checkpoints=False, progress=False).timeline
    stopped = dataclasses.replace(tl, launch=dataclasses.replace(tl.launch, stopped_early="a test reason"))
    told = diagnose(run_dir, history=stopped)
    assert "The harness stopped the job early: a test reason." in told.summary
    assert "a test reason" not in from_files.summary

    no_markers = dataclasses.replace(tl, injections=())
    assert not diagnose(run_dir, history=no_markers).injected


def test_the_runner_triages_with_the_read_its_verdict_came_from(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner hands triage the watcher's reader's last read (the verdict's), so triage does
    not read run.json, launch.json and the markers again."""
    from harness.launch import job as launch, runner
    from recovery_tests.test_runner import make_plan

    built = rundirs.build(tmp_path / "made", rundirs.Scenario(restarts_exhausted=True, checkpoints=False))

    def fake_launch(plan, *, watch, **kwargs):
        shutil.copytree(built.run_dir / "logs", plan.layout.root / "logs", dirs_exist_ok=True)
        for name in ("fault_injected.json", "launch.json"):
            shutil.copy(built.run_dir / name, plan.layout.root / name)
        watch()
        return launch.LaunchResult(1, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, "0.7.0", 0)

    monkeypatch.setattr(launch, "launch", fake_launch)
    real_triage = runner.triage
    given = []

    def recording_triage(verdict, read=None):
        given.append(read)
        opened = _run_facts_opened(monkeypatch)
        found = real_triage(verdict, read)
        given.append(tuple(opened))
        return found

    monkeypatch.setattr(runner, "triage", recording_triage)
    outcome = runner.execute(make_plan(tmp_path), out=None)
    assert not outcome.verdict.qualified and outcome.triage is not None and outcome.triage.failed
    read, opened = given
    assert read is not None and read.timeline.run_dir == outcome.run_dir
    assert opened == ()


def test_verify_command_reads_the_run_facts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    """`nvrx-qual verify` on a failed run: history reads run.json and launch.json, and the triage
    in its report takes them from that read instead of opening them again."""
    from harness.cli import main as cli_main

    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario(restarts_exhausted=True)).run_dir
    opened = _run_facts_opened(monkeypatch)
    assert cli_main(["verify", str(run_dir), "--no-write", "--quiet"]) == 1
    assert opened.count("run.json") == 1 and opened.count("launch.json") == 1, opened
