"""A stored verdict is never taken at its word (issue 24, class 2).

`report` (harness.report.stats.load_run) re-judges each run from its evidence through verify's own
judge; a verdict.json of an earlier release (no suite version, no `optimizer_state`), one
edited in a received directory, or one whose evidence is gone is never counted as qualified
when `verify` on the same directory says otherwise. A verdict records the suite version, the
criteria it was judged with and a digest of the run directory it judged.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness import __version__, cli
from harness.read import evidence
from harness.report import stats
from harness.judge.criteria import CHECK_IDS, OPTIMIZER_STATE
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose restored optimizer restarted its step counter (only optimizer_state fails,
    the criterion an earlier release did not have) and one that restarted from random weights."""
    runs = tmp_path_factory.mktemp("trust") / "runs"
    rundirs.build(runs / "step-reset", Scenario(optimizer_steps="reset"))
    rundirs.build(runs / "random", Scenario(restart_from_random=True))
    rundirs.build(runs / "good", Scenario())
    return runs


@pytest.fixture
def runs(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "runs", symlinks=True))


def report(capsys, *argv: object) -> tuple[int, str, str]:
    status = cli.main(["report", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def verify_says(capsys, run_dir: Path) -> int:
    status = cli.main(["verify", str(run_dir), "--no-write"])
    capsys.readouterr()
    return status


def old_release_verdict(run_dir: Path) -> dict:
    """verdict.json as the release before `optimizer_state` wrote it: the five criteria, no
    suite version, no criteria set, no evidence digest."""
    doc = verify_run(run_dir, picture=False).to_json()
    for key in ("suite_version", "criteria_set", "evidence_digest"):
        doc.pop(key, None)
    doc["criteria"] = [c for c in doc["criteria"] if c["id"] != OPTIMIZER_STATE]
    doc["qualified"] = all(c["status"] in ("pass", "not_applicable") for c in doc["criteria"])
    return doc


def test_a_verdict_records_what_judged_it(runs):
    verdict = verify_run(runs / "good", write=True)
    doc = json.loads((runs / "good" / "verdict.json").read_text())
    assert doc["suite_version"] == __version__
    assert doc["criteria_set"] == [c.id for c in verdict.criteria] and set(CHECK_IDS) <= set(doc["criteria_set"])
    digest = doc["evidence_digest"]
    assert digest["complete"] is True and digest["entries"] > 10 and digest["bytes"] > 0
    # the verdict's own outputs are not evidence: writing them changes nothing
    assert evidence.digest(runs / "good").to_json() == digest


def test_the_digest_tells_changed_evidence_from_a_copy_that_lost_its_times(runs):
    run = runs / "good"
    before = evidence.digest(run)
    log = run / "logs" / "train_cycle_cycle1.log"
    st = log.stat()
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    touched = evidence.digest(run)
    assert touched.sha256 != before.sha256 and touched.sizes_sha256 == before.sizes_sha256
    assert "other modification times" in before.compare(touched)
    with log.open("a") as f:
        f.write("1: one more line\n")
    grown = evidence.digest(run)
    assert grown.sizes_sha256 != before.sizes_sha256 and "changed since it was judged" in before.compare(grown)


def test_an_old_release_verdict_is_re_judged_not_counted(runs, capsys):
    run = runs / "step-reset"
    verify_run(run, write=True)  # timeline.png and report.md as a verify left them
    doc = old_release_verdict(run)
    assert doc["qualified"] is True  # what the earlier release said
    (run / "verdict.json").write_text(json.dumps(doc))
    assert verify_says(capsys, run) == 1
    status, out, err = report(capsys, run)
    assert status == 1 and "0 of 1 runs qualified." in out
    assert "`optimizer_state` fail" in out
    assert "records no suite version" in err and "no result for optimizer_state" in err
    assert "the evidence says not qualified (optimizer_state (absent) → fail)" in err
    # every run's picture is linked; one that shows the stored verdict, not this one, says so
    assert (run / "timeline.png").is_file()
    assert "timeline.png) (drawn for the stored verdict.json, which the evidence contradicts) |" in out, out
    # without its evidence (a summary of stored verdicts), such a verdict is stale, not qualified
    record = stats.RunRecord.from_verdict_json(doc)
    assert record.qualified is False and record.source == stats.STALE


def test_an_edited_verdict_is_re_judged_not_counted(runs, capsys):
    run = runs / "random"
    verify_run(run, write=True)
    doc = json.loads((run / "verdict.json").read_text())
    assert doc["qualified"] is False
    for c in doc["criteria"]:  # flipped to pass, with everything else a current verdict records
        c["status"] = "pass"
    doc["qualified"] = True
    (run / "verdict.json").write_text(json.dumps(doc))
    assert stats.RunRecord.from_verdict_json(doc).qualified is True  # nothing in the file itself gives it away
    assert verify_says(capsys, run) == 1
    status, out, err = report(capsys, "--json", run.parent / "summary.json", run)
    assert status == 1 and "0 of 1 runs qualified." in out and "`optimizer_reload` fail" in out
    assert "says qualified, the evidence says not qualified (optimizer_reload pass → fail" in err
    assert "Stored verdicts (verdict.json) that were not counted as written:" in out
    summary = json.loads((run.parent / "summary.json").read_text())
    (row,) = summary["scenarios"][0]["runs"]
    assert row["qualified"] is False and row["verdict_source"] == stats.REJUDGED and row["verdict_notes"]


@pytest.mark.parametrize("gone", ["everything", "logs"])
def test_a_verdict_whose_evidence_is_gone_is_not_counted(runs, capsys, gone):
    run = runs / "random"
    doc = verify_run(run).to_json()
    for c in doc["criteria"]:
        c["status"] = "pass"
    doc["qualified"] = True
    (run / "verdict.json").write_text(json.dumps(doc))  # a current verdict in every other respect
    shutil.rmtree(run / "logs")
    if gone == "everything":
        shutil.rmtree(run / "checkpoints")
        shutil.rmtree(run / "cycle_infos")
        (run / "fault_injected.json").unlink()
    status, out, err = report(capsys, runs / "good", run)  # with a good run: it must not be left out either
    assert status == 1 and "1 of 2 runs qualified." in out
    if gone == "everything":  # nothing to judge: counted, as unverifiable, never skipped
        assert "unverifiable verdict.json (not counted as qualified)" in out
        assert "the evidence it judged is gone" in err
    else:  # what is left is judged again: no log, nothing proves the recovery
        assert "the evidence says not qualified" in err
        assert "changed since it was judged" in err


def test_a_current_verdict_that_the_evidence_confirms_needs_no_note(runs, capsys):
    verify_run(runs / "good", write=True)
    status, out, err = report(capsys, runs / "good")
    assert status == 0 and "1 of 1 runs qualified." in out
    assert "verdict.json" not in err and "Stored verdicts" not in out
