"""Exit statuses CI can trust: 0 qualified, 1 not qualified, 2 refused / unreadable input,
3 an internal error of the suite (one line; the traceback in a log file or under --debug).
A crash is never exit 1."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from fixtures.processes import run_in_session
from harness.vocab import exitcodes
from harness.cli import main
from harness.vocab.exitcodes import ExitStatus

from . import rundirs


def test_the_enum_is_the_documented_contract():
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3]
    assert ExitStatus.of_verdict(True) == 0 and ExitStatus.of_verdict(False) == 1
    assert exitcodes.signalled(15) == 143


def _boom(*_a, **_k):
    raise KeyError("a bug deep inside a checker")


@pytest.mark.parametrize("command", ["verify", "report", "diagnose"])
def test_a_crash_of_any_command_is_exit_3_with_one_line_and_a_traceback_file(command, monkeypatch, capsys, tmp_path):
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    if command == "diagnose":
        monkeypatch.setattr("harness.judge.triage.diagnose", _boom)
    else:
        monkeypatch.setattr("harness.report.verify.verify_run", _boom)  # report
        monkeypatch.setattr("harness.report.verify.judge_run", _boom)  # verify
        monkeypatch.setattr("harness.report.stats.check_run_dir", lambda _p: None)
        (run_dir / "verdict.json").unlink(missing_ok=True)
    argv = [command, str(run_dir)] + (["--no-write"] if command == "verify" else [])
    assert main(argv) == ExitStatus.INTERNAL_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error" in err[0] and "KeyError" in err[0], err
    log = Path(re.search(r"traceback in (\S+);", err[0]).group(1))
    assert log.parent == tmp_path and "Traceback (most recent call last)" in log.read_text()
    assert "_boom" in log.read_text()


def test_debug_shows_the_traceback_on_stderr(monkeypatch, capsys, tmp_path):
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    monkeypatch.setattr("harness.report.verify.judge_run", _boom)
    assert main(["--debug", "verify", str(run_dir), "--no-write"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_boom" in err


def test_an_environment_error_is_refused_input_not_a_crash(monkeypatch, capsys, tmp_path):
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir

    def disk_full(*_a, **_k):
        raise OSError(28, "No space left on device", str(run_dir / "verdict.json"))

    monkeypatch.setattr("harness.report.verify.judge_run", disk_full)
    assert main(["verify", str(run_dir)]) == ExitStatus.REFUSED
    err = capsys.readouterr().err
    assert "No space left on device" in err and "verdict.json" in err and "Traceback" not in err


def test_a_real_process_that_crashes_exits_3_not_1(tmp_path):
    """The console entry point end to end: a bug inside verify, in a real process."""
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    code = textwrap.dedent(f"""
        import sys, tempfile
        tempfile.tempdir = {str(tmp_path)!r}
        import harness.report.verify
        def boom(*a, **k):
            raise ZeroDivisionError("division by zero in a metric")
        harness.report.verify.judge_run = boom
        from harness.cli import main
        sys.exit(main(["verify", {str(run_dir)!r}, "--no-write"]))
    """)
    done = run_in_session([sys.executable, "-c", code], timeout_s=120)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "internal error" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
