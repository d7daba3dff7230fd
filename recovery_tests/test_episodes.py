"""Recovery episodes (harness.judge.episodes): a run with two injections gets two judged episodes
and one merged verdict; a single-fault run is a run with one episode."""

from __future__ import annotations

import json
from pathlib import Path

from harness.launch import runner
from harness.judge.criteria import CHECK_IDS, FAIL, NOT_APPLICABLE, PASS, analyze
from harness.read.history import read_history
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

TWO_FAULTS = Scenario(second_failure_at=17, second_injection=True, second_marker=True, moment="in-restore")
EPISODE_CHECKS = ["pre_fault_checkpoint", "replacement_cycle", "optimizer_reload", "later_checkpoint",
                  "optimizer_state"]


def test_two_injections_are_two_episodes_with_their_own_cycles(tmp_path: Path):
    tl = read_history(rundirs.build(tmp_path / "run", TWO_FAULTS).run_dir)
    a = analyze(tl)
    assert [(e.number, e.of, e.cycle, e.marker.fault_index, e.replacement_cycle, e.next_cycle) for e in a.episodes] == [
        (1, 2, 0, 1, 1, 1), (2, 2, 1, 2, 2, None)]
    first, second = a.episodes
    assert [s.cycle for s in first.continuation] == [1]  # its training ends where the second fault hit
    assert [s.cycle for s in second.continuation] == [2]
    assert (first.expected_k, second.expected_k) == (10, 15)
    assert first.loaded.iteration == 10 and second.loaded.iteration == 15


def test_a_two_fault_run_gets_two_judged_episodes_and_one_merged_verdict(tmp_path: Path):
    verdict = verify_run(rundirs.build(tmp_path / "run", TWO_FAULTS).run_dir, picture=False)
    assert [c.id for c in verdict.criteria] == list(CHECK_IDS)  # one merged result per check, in the order
    assert verdict.qualified, [c.detail for c in verdict.criteria]
    one, two = verdict.episodes
    assert [(e.number, e.cycle, e.fault_at) for e in (one, two)] == [(1, 0, "after-commit"), (2, 1, "in-restore")]  # as the markers say
    for e in (one, two):
        assert [c.id for c in e.criteria] == EPISODE_CHECKS
    # episode 1's own recovery was judged: it loaded 10; its training to the end was cut by fault 2
    assert one.criteria[2].status == PASS and "loaded checkpoint 10" in one.criteria[2].detail
    assert one.superseded == ("later_checkpoint",) and one.criteria[3].status == NOT_APPLICABLE
    assert two.superseded == () and "loaded checkpoint 15" in two.criteria[2].detail
    assert (one.criteria[0].values["committed"], one.criteria[0].values["episode"]) == (10, 1)
    assert (two.criteria[0].values["committed"], two.criteria[0].values["episode"]) == (15, 2)
    assert two.criteria[0].values["marker"] == "fault_injected.2.json"
    # the merge: the run's reload is the last episode's, led by the fault it is about; the
    # replacement cycles are both episodes', each told with its own kind, moment and cycles
    assert verdict.criterion("optimizer_reload").detail == "[fault 2 of 2: kill on rank 1, in-restore] " + \
        two.criteria[2].detail
    replaced = verdict.criterion("replacement_cycle").detail
    assert "failures of all 2 injected faults" in replaced
    assert "fault 1 (kill, after-commit) failed cycle 0" in replaced and "replaced in cycle 1" in replaced
    assert "fault 2 (kill, in-restore) failed cycle 1" in replaced and "replaced in cycle 2" in replaced
    assert verdict.criterion("pre_fault_checkpoint").detail == "[fault 1 of 2: kill on rank 1, after-commit] " + \
        one.criteria[0].detail
    doc = json.loads(json.dumps(verdict.to_json()))
    assert [e["episode"] for e in doc["episodes"]] == [1, 2]
    assert doc["criteria"] == [c.to_json() for c in verdict.criteria]  # the old section, as old readers read it


def test_a_failing_second_episode_fails_the_merged_verdict(tmp_path: Path):
    """Episode 2's marker names a checkpoint no log line saved: its pre_fault_checkpoint fails,
    and the merged result says so although episode 1's passed."""
    run_dir = rundirs.build(tmp_path / "run", TWO_FAULTS).run_dir
    marker = run_dir / "fault_injected.2.json"
    record = json.loads(marker.read_text())
    record["iteration"] = 25
    marker.write_text(json.dumps(record))
    verdict = verify_run(run_dir, picture=False)
    one, two = verdict.episodes
    assert (one.criteria[0].status, two.criteria[0].status) == (PASS, FAIL)
    merged = verdict.criterion("pre_fault_checkpoint")
    assert merged.status == FAIL and not verdict.qualified
    assert merged.detail == "[fault 2 of 2: kill on rank 1, in-restore] " + two.criteria[0].detail  # whose it is


def test_a_single_fault_run_is_a_run_with_one_episode(tmp_path: Path):
    verdict = verify_run(rundirs.build(tmp_path / "run", Scenario()).run_dir, picture=False)
    (only,) = verdict.episodes
    assert only.superseded == ()
    merged = {c.id: c for c in verdict.criteria}
    assert [(c.id, c.status, c.detail, c.evidence) for c in only.criteria] == [
        (cid, merged[cid].status, merged[cid].detail, merged[cid].evidence) for cid in EPISODE_CHECKS]


def test_a_run_without_a_fault_has_no_episode(tmp_path: Path):
    verdict = verify_run(rundirs.build(tmp_path / "run", Scenario(fault="none")).run_dir, picture=False)
    assert verdict.episodes == () and verdict.to_json()["episodes"] == []


def test_the_scenario_deadline_grows_with_the_planned_episodes():
    from harness.plan.spec import from_sources

    def spec(**knobs):
        flags = {"workload": "reference", "fault": "kill", "run_id": "d", "work_dir": Path("/"), **knobs}
        return from_sources(flags, {}, detected={})

    one, two = spec(), spec(fault_at="in-restore")
    assert (runner.planned_episodes(one), runner.planned_episodes(two)) == (1, 2)
    setup = dict(one.section_timeouts)["setup"]
    per_episode = one.workload_check_interval if one.workload_check_interval is not None else 5.0
    assert runner.scenario_deadline(two) - runner.scenario_deadline(one) == (
        setup + per_episode + runner.RESTART_ALLOWANCE_S)
