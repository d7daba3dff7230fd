"""`nvrx-qual report RUN_DIR...`: one Markdown summary over several synthetic run directories
(recovery_tests/rundirs.py): grouping by scenario, exit statuses, the failing run and
criterion, never overwriting an output file, unreadable directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.judge.criteria import CRITERIA_IDS
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

KILL = "megatron workload (1x2 ranks), fault kill, NVRx 0.7.0"
HANG = "megatron workload (1x2 ranks), fault hang, NVRx 0.7.0"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Once per module (real DCP checkpoints take a moment): a qualified kill, a kill whose
    replacement started from random weights, a qualified hang."""
    runs = tmp_path_factory.mktemp("report") / "runs"
    rundirs.build(runs / "kill-ok", Scenario())
    rundirs.build(runs / "kill-random", Scenario(restart_from_random=True))
    rundirs.build(runs / "hang-ok", Scenario(fault="hang"))
    return runs


@pytest.fixture
def runs(built: Path, tmp_path: Path) -> Path:
    """A private copy, so a test may add verdict.json or timeline.png."""
    return Path(shutil.copytree(built, tmp_path / "runs", symlinks=True))


def report(capsys, *argv: str | Path) -> tuple[int, str, str]:
    status = cli.main(["report", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_groups_by_scenario_and_names_the_failing_run(runs, capsys):
    status, out, _ = report(capsys, runs / "kill-ok", runs / "hang-ok", runs / "kill-random")
    assert status == 1
    assert out.startswith("# Recovery qualification summary\n\n2 of 3 runs qualified.")
    # per-run rows in scenario order; the failing run names its criterion
    assert f"| 1 | `kill-ok` | {KILL} | ✅ qualified | — | 5.12 | — |" in out
    assert f"| 2 | `kill-random` | {KILL} | ❌ not qualified | `optimizer_reload` fail | 5.12 | — |" in out
    assert f"| 3 | `hang-ok` | {HANG} | ✅ qualified | — | 15.61 | — |" in out
    kill, hang = out.split(f"## {KILL}")[1].split(f"## {HANG}")
    assert "1 of 2 runs qualified." in kill and "1 of 1 run qualified." in hang
    assert "| `optimizer_reload` | 1/2 (50 %) | 1 | 0 | 1 | 0 | 0 |" in kill
    assert "- `kill-random`: `optimizer_reload` fail: " in kill and str(runs / "kill-random") in kill
    # a hang's 15.6 s never enters the kill percentiles
    assert "| failure → first committed step (s) | 2/2 | 5.12 | 5.12 | 5.12 |" in kill
    assert "| failure → first committed step (s) | 1/1 | 15.61 | 15.61 | 15.61 |" in hang
    assert "Failing runs" not in hang


def test_reads_nothing_but_writes_nothing_into_the_runs(runs, capsys):
    before = {p: p.stat().st_mtime_ns for p in runs.rglob("*")}
    report(capsys, runs / "kill-ok", runs / "kill-random")
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*")} == before


def test_all_qualified_exits_0(runs, capsys):
    status, out, _ = report(capsys, runs / "kill-ok", runs / "hang-ok")
    assert status == 0 and "2 of 2 runs qualified." in out and "Failing runs" not in out


def test_a_recorded_loss_continuity_failure_is_kept_and_the_rest_re_judged(runs, capsys):
    """verdict.json's loss continuity was judged against a baseline report does not have: a
    failure of it is kept; every other criterion and latency comes from the evidence again."""
    doc = {"schema": 1, "run_dir": "/cluster/runs/kill-ok", "fault": "kill", "qualified": False,
           "criteria": [{"id": cid, "status": "pass", "detail": "", "evidence": []} for cid in CRITERIA_IDS]
           + [{"id": "loss_continuity", "status": "fail", "detail": "lm loss differs at iteration 12",
               "evidence": []}],
           "metrics": {"failure_to_first_step_s": 7.25}, "launcher": {"nvrx_version": "0.7.0"}}
    (runs / "kill-ok" / "verdict.json").write_text(json.dumps(doc))
    status, out, _ = report(capsys, runs / "kill-ok")
    assert status == 1
    assert f"| 1 | `kill-ok` | {KILL} | ❌ not qualified | `loss_continuity` fail | 5.12 | — |" in out
    # the run as it is found now, not where it was verified
    assert f"- `kill-ok`: `loss_continuity` fail: lm loss differs at iteration 12" in out
    assert f"(`{runs / 'kill-ok'}`)" in out


def test_a_broken_verdict_json_is_replaced_by_verifying(runs, capsys):
    (runs / "kill-random" / "verdict.json").write_text("{not json")
    status, out, err = report(capsys, runs / "kill-random")
    assert status == 1 and "`optimizer_reload` fail" in out
    assert "verdict.json is unreadable" in err and "verified the run directory instead" in err


def test_output_file_with_timeline_links_and_json(runs, tmp_path, capsys):
    (runs / "kill-ok" / "timeline.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    md, js = out_dir / "summary.md", out_dir / "summary.json"
    status, out, err = report(capsys, runs / "kill-ok", runs / "kill-random", "--output", md, "--json", js)
    assert status == 1 and out == ""
    assert f"1 of 2 runs qualified; written to {md}" in err
    text = md.read_text()
    assert "| [timeline.png](../runs/kill-ok/timeline.png) |" in text  # relative to the Markdown file
    assert text.count("[timeline.png]") == 1  # kill-random has no picture
    doc = json.loads(js.read_text())
    assert (doc["run_count"], doc["qualified_runs"]) == (2, 1)
    [scenario] = doc["scenarios"]
    assert scenario["label"] == KILL
    assert [(f["run_id"], f["criterion"]) for f in scenario["failures"]] == [("kill-random", "optimizer_reload")]


def test_links_on_standard_output_are_relative_to_the_current_directory(runs, capsys, monkeypatch):
    (runs / "hang-ok" / "timeline.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    monkeypatch.chdir(runs)
    status, out, _ = report(capsys, "hang-ok", runs / "kill-ok")
    assert status == 0 and "| [timeline.png](hang-ok/timeline.png) |" in out
    # the JSON keeps absolute paths: it is read by tools, from anywhere
    report(capsys, "hang-ok", "--json", runs / "s.json")
    assert json.loads((runs / "s.json").read_text())["scenarios"][0]["runs"][0]["run_dir"] == str(runs / "hang-ok")


def test_existing_output_is_refused_before_any_work(runs, tmp_path, capsys):
    existing = tmp_path / "mine.md"
    existing.write_text("the user's notes\n")
    # a run dir that does not exist would be exit 2 too: the output refusal must come first
    status, out, err = report(capsys, runs / "kill-ok", tmp_path / "no-such-run", "--output", existing)
    assert status == 2 and out == ""
    assert f"--output {existing} already exists" in err and "choose a new file name" in err
    assert "no-such-run" not in err
    assert existing.read_text() == "the user's notes\n"


def test_existing_json_and_missing_directory_are_refused(runs, tmp_path, capsys):
    existing = tmp_path / "stats.json"
    existing.write_text("{}")
    status, _, err = report(capsys, runs / "kill-ok", "--json", existing, "--output", tmp_path / "nope" / "s.md")
    assert status == 2
    assert f"--json {existing} already exists" in err
    assert f"directory {tmp_path / 'nope'} does not exist: create it first" in err
    assert existing.read_text() == "{}" and not (tmp_path / "nope").exists()


@pytest.mark.parametrize(("name", "why"), [("missing", "does not exist"), ("a-file", "is not a directory")])
def test_unreadable_run_dir_exits_2_naming_it(runs, tmp_path, capsys, name, why):
    target = tmp_path / name
    if name == "a-file":
        target.write_text("x")
    status, out, err = report(capsys, runs / "kill-ok", target)
    assert status == 2 and out == ""
    assert err.startswith("nvrx-qual report: error: ") and str(target) in err and why in err


def test_the_same_run_named_twice_counts_once(runs, capsys):
    status, out, _ = report(capsys, runs / "kill-ok", runs / "kill-ok" / ".", runs / "kill-ok")
    assert status == 0 and "1 of 1 runs qualified." in out


def test_directories_without_a_launched_run_are_skipped_with_a_note(runs, capsys):
    """`nvrx-qual report runs/*` over a work dir that also holds a dry run and an empty directory."""
    (runs / "plan-only").mkdir()
    (runs / "plan-only" / "run.json").write_text(json.dumps({"dry_run": True}))
    (runs / "empty").mkdir()
    status, out, err = report(capsys, runs / "kill-ok", runs / "plan-only", runs / "empty")
    assert status == 0 and "1 of 1 runs qualified." in out
    assert f"note: skipped: {runs / 'plan-only'} is a plan that never ran: it holds only run.json" in err
    assert f"note: skipped: {runs / 'empty'} holds nothing" in err
    assert "verify" not in err  # report's notes do not send the reader to another command's argument


def test_only_directories_without_a_launched_run_is_refused(runs, capsys):
    (runs / "plan-only").mkdir()
    (runs / "plan-only" / "run.json").write_text(json.dumps({"dry_run": True}))
    status, out, err = report(capsys, runs / "plan-only")
    assert status == 2 and out == "" and "no launched run among the 1 directory given" in err


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_runs_of_another_configuration_are_another_scenario(runs, capsys):
    """The distributed and the plain optimizer (or another parallel shape) never pool into one
    pass rate: the megatron-cpu distributed-optimizer run and a plain-optimizer run are two scenarios."""
    for name, distributed in (("kill-ok", False), ("kill-random", True)):
        _edit_json(runs / name / "run.json", lambda d, v=distributed: d["spec"].update(
            workload="megatron-cpu", distributed_optimizer=v, tp=1, pp=1))
    status, out, _ = report(capsys, runs / "kill-ok", runs / "kill-random")
    plain = "## megatron-cpu workload (plain optimizer, 1x2 ranks, TP 1, PP 1), fault kill, NVRx 0.7.0"
    dist = "## megatron-cpu workload (distributed optimizer, 1x2 ranks, TP 1, PP 1), fault kill, NVRx 0.7.0"
    assert plain in out and dist in out, out
    assert out.count("\n## ") == 2 and status == 1


def test_a_run_stopped_by_the_user_is_shown_apart_and_not_counted_as_a_failure(runs, capsys):
    _edit_json(runs / "kill-random" / "launch.json",
               lambda d: d.update(stopped_early="interrupted: the harness received SIGINT", ended_by="signal SIGINT"))
    status, out, _ = report(capsys, runs / "kill-ok", runs / "kill-random")
    assert out.startswith("# Recovery qualification summary\n\n1 of 1 runs qualified. 1 run was stopped by the user "
                          "(Ctrl-C), not counted."), out[:300]
    assert f"## {KILL} (stopped by the user)" in out and "⏹ stopped by the user (not counted)" in out
    assert status == 0  # the one counted run qualified


def test_an_expected_negative_caught_reads_as_expected(runs, capsys):
    (runs / "kill-random" / "expectation.json").write_text(json.dumps({"qualified": False, "why": "negative"}))
    status, out, _ = report(capsys, runs / "kill-random")
    assert "as expected: 1 of 1 run caught not qualifying" in out and "✅ not qualified, as expected" in out
    assert status == 1  # the exit status still says what qualified
