"""`nvrx-qual verify`: verdict.json and report.md, exit statuses 0 / 1 / 2, --json, --fault,
--no-write, and `python -m harness.report.verify` as a real process."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from fixtures.processes import run_in_session

from harness.report import verify
from harness.cli import verify as cmd_verify
from harness.judge.criteria import CHECK_IDS, CRITERIA_IDS
from harness.read.history import RunDirError
from harness.report.outputs import render_report
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

REPO = Path(__file__).resolve().parent.parent


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nvrx-qual verify")
    cmd_verify.add_arguments(parser)
    return cmd_verify.run(parser.parse_args(argv))


@pytest.fixture
def good_run(tmp_path: Path) -> Path:
    return rundirs.build(tmp_path / "good", Scenario()).run_dir


@pytest.fixture
def broken_run(tmp_path: Path) -> Path:
    return rundirs.build(tmp_path / "broken", Scenario(no_load_optim=True)).run_dir


def test_qualified_run_exits_0_and_writes_verdict_and_report(good_run, capsys):
    assert _cli([str(good_run)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("QUALIFIED") and "failure -> first committed step 5.12s" in out
    doc = json.loads((good_run / "verdict.json").read_text())
    assert {"run_dir", "fault", "qualified", "criteria", "metrics"} <= set(doc)
    assert (doc["run_dir"], doc["fault"], doc["qualified"]) == (str(good_run), "kill", True)
    assert [c["id"] for c in doc["criteria"]] == list(CHECK_IDS)
    assert all(set(c) == {"id", "status", "detail", "evidence"} and c["status"] == "pass" for c in doc["criteria"])
    for key in ("detection_s", "restart_s", "restore_s", "failure_to_first_step_s", "lost_iterations"):
        assert key in doc["metrics"]
    assert doc["metrics"]["failure_to_first_step_s"] == pytest.approx(5.12)
    report = (good_run / "report.md").read_text()
    assert report.startswith("# Recovery verdict: QUALIFIED")
    for cid in CRITERIA_IDS:
        assert f"| `{cid}` | ✅ pass |" in report and f"### `{cid}`: pass" in report
    assert "## Latency split" in report and "| **failure → first committed step** | 5.120 |" in report
    assert "logs/train_cycle_cycle1.log:" in report  # evidence lines


def test_failed_criterion_exits_1(broken_run, capsys):
    assert _cli([str(broken_run), "--no-write"]) == 1
    out = capsys.readouterr().out
    assert "fail           optimizer_reload" in out and out.rstrip().endswith("NOT QUALIFIED")
    assert not (broken_run / "verdict.json").exists() and not (broken_run / "report.md").exists()


@pytest.mark.parametrize("name, why", [("missing", "does not exist"), ("empty", "holds nothing")])
def test_unreadable_run_dir_exits_2_and_says_why(tmp_path, capsys, name, why):
    target = tmp_path / name
    if name == "empty":
        target.mkdir()
    assert _cli([str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nvrx-qual verify: error: ") and why in err and str(target) in err


def test_json_to_a_path_and_to_stdout(good_run, tmp_path, capsys):
    out_file = tmp_path / "v.json"
    assert _cli([str(good_run), "--no-write", "--json", str(out_file)]) == 0
    assert json.loads(out_file.read_text())["qualified"] is True
    capsys.readouterr()
    assert _cli([str(good_run), "--no-write", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["fault"] == "kill"  # stdout is the JSON document alone


def test_fault_override(good_run, capsys):
    assert _cli([str(good_run), "--no-write", "--fault", "none"]) == 1  # the run did restart, and has a marker
    assert "fault none: --fault" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        _cli([str(good_run), "--fault", "crash"])


def test_unwritable_run_dir_warns_and_still_judges(good_run, capsys):
    (good_run / "verdict.json").mkdir()  # cannot be replaced by a file, whoever runs the test
    assert _cli([str(good_run)]) == 0
    assert "could not write the verdict" in capsys.readouterr().err


def test_library_call(good_run, tmp_path):
    v = verify.verify_run(good_run)  # writes nothing by default
    assert v.qualified and v.exit_status == 0 and not (good_run / "report.md").exists()
    verify.verify_run(good_run, "kill", write=True, extra_sections=["## Triage\n\nfirst traceback: none"])
    report = (good_run / "report.md").read_text()
    assert report.rstrip().endswith("## Triage\n\nfirst traceback: none")
    with pytest.raises(RunDirError):
        verify.verify_run(tmp_path / "nothing")
    with pytest.raises(ValueError, match="is not one of kill, hang, term, poison, node, exception, .*, none"):
        verify.verify_run(good_run, "crash")


def test_report_renders_failures_notes_and_escapes_pipes(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(restarts_exhausted=True, nvrx="0.4.1", run_json=False))
    v = verify.verify_run(built.run_dir)
    first = dataclasses.replace(v.criteria[0], detail="a detail with a | pipe.")
    v = dataclasses.replace(v, criteria=(first, *v.criteria[1:]))
    report = render_report(v, extra_sections=("## Extra", "## More"))
    assert "| 2 | `replacement_cycle` | ❌ fail |" in report and "➖ not applicable" in report
    assert "a detail with a \\| pipe." in report
    assert "## Notes" in report and "assumed this machine's" in report
    assert report.index("## Extra") < report.index("## More")
    tables: list[list[str]] = []
    previous = ""
    for line in report.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    assert len(tables) == 5  # criteria, latency split, moments, goodput: badput parts and every fault
    for rows in tables:
        cells = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
        assert len(cells) == 1, rows  # an unescaped | in a cell would add a column


def test_nvrx_qual_cli_dispatches_to_verify(good_run, capsys):
    from harness.cli import main

    assert main(["verify", str(good_run), "--no-write", "--quiet"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.e2e
def test_python_dash_m_harness_verify(good_run):
    proc = run_in_session([sys.executable, "-m", "harness", "verify", str(good_run), "--json", "-", "--no-write"],
                          timeout_s=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["qualified"] is True


def test_verify_says_what_it_wrote_and_what_it_replaced(good_run, capsys):
    assert _cli([str(good_run)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("nvrx-qual verify: wrote ") and "verdict.json" in first and "report.md" in first
    assert "replacing" not in first
    assert _cli([str(good_run)]) == 0
    again = capsys.readouterr().out.splitlines()[0]
    assert "replacing the earlier verdict.json: QUALIFIED, fault kill" in again


def test_verify_refuses_to_change_a_stored_fault_without_force(good_run, capsys):
    assert _cli([str(good_run)]) == 0
    stored = (good_run / "verdict.json").read_bytes()
    capsys.readouterr()
    assert _cli([str(good_run), "--fault", "none"]) == 2
    err = capsys.readouterr().err
    assert "records the run judged for fault kill" in err and "--force" in err
    assert (good_run / "verdict.json").read_bytes() == stored  # unchanged
    assert _cli([str(good_run), "--fault", "none", "--no-write"]) == 1  # judging without writing is fine
    assert (good_run / "verdict.json").read_bytes() == stored
    assert _cli([str(good_run), "--fault", "none", "--force"]) == 1
    assert json.loads((good_run / "verdict.json").read_text())["fault"] == "none"


def test_fault_none_run_is_a_baseline_verdict(tmp_path, capsys):
    """No fault qualifies only as a baseline: exit 0, and the words say no recovery was exercised."""
    run = rundirs.build(tmp_path / "none", Scenario(fault="none")).run_dir
    assert _cli([str(run)]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("BASELINE QUALIFIED") and "no recovery was exercised" in last
    assert (run / "report.md").read_text().startswith("# Recovery verdict: BASELINE QUALIFIED")
    assert json.loads((run / "verdict.json").read_text())["qualified"] is True  # the contract stays
