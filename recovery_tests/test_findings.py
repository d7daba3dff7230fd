"""The known-defect table (harness.judge.findings): a failure that matches a documented defect of the
version and configuration in use is named, with the configuration that qualifies; anything else
is left alone."""

from __future__ import annotations

import dataclasses

import pytest

from harness.judge import findings
from harness.vocab.events import RunConfig
from harness.vocab.verdict import CriterionResult, Metrics, Status, Verdict

STEP_FAIL = CriterionResult("optimizer_state", Status.FAIL,
                            "checkpoints/iter_0000008, the first checkpoint committed after the restore of checkpoint "
                            "4, holds Adam's step counter 64 in optimizer.distributed... : it ran ahead")
DISTOPT = RunConfig(workload="megatron-cpu", megatron_version="0.19.2", distributed_optimizer=True,
                    transformer_engine=False, apex=False, nvrx_version="0.7.0")


def verdict(*criteria: CriterionResult) -> Verdict:
    ok = all(c.status in (Status.PASS, Status.NOT_APPLICABLE) for c in criteria)
    return Verdict("runs/x", "kill", "run.json", ok, tuple(criteria), Metrics())


def ids(matches) -> list[str]:
    return [m.defect.id for m in matches]


def test_the_distributed_optimizer_step_reset_is_named_with_the_qualifying_configuration():
    matches = findings.known_defects(verdict(STEP_FAIL), DISTOPT)
    assert ids(matches) == ["megatron-distopt-adam-step"]
    sentence = matches[0].sentence
    assert sentence.startswith("known defect in Megatron 0.19.2: ")
    assert "qualifying configuration: Megatron's plain optimizer (--distributed-optimizer 0" in sentence
    assert "docs/megatron-cpu.md" in sentence
    assert "## Known defect" in findings.markdown(matches) and "still not qualified" in findings.markdown(matches)


@pytest.mark.parametrize("change", [
    {"distributed_optimizer": False},  # the plain optimizer: a step failure there is something else
    {"transformer_engine": True},  # TE's fused Adam: not torch's
    {"megatron_version": "0.20.0"},  # another version: not known to have it
])
def test_another_configuration_or_version_is_not_this_defect(change):
    assert findings.known_defects(verdict(STEP_FAIL), dataclasses.replace(DISTOPT, **change)) == ()


def test_an_unrecorded_version_matches_and_says_so():
    matches = findings.known_defects(verdict(STEP_FAIL), dataclasses.replace(DISTOPT, megatron_version=None))
    assert ids(matches) == ["megatron-distopt-adam-step"]
    assert "known defect in Megatron 0.19.x (this run did not record its Megatron version)" in matches[0].sentence


def test_a_qualified_run_or_another_failure_gets_no_known_defect():
    assert findings.known_defects(verdict(dataclasses.replace(STEP_FAIL, status=Status.PASS)), DISTOPT) == ()
    other = CriterionResult("replacement_cycle", Status.FAIL, "no replacement workers")
    assert findings.known_defects(verdict(other), DISTOPT) == ()


def test_the_fully_reshardable_keyerror():
    run = dataclasses.replace(DISTOPT, extra_args=("--dist-ckpt-optim-fully-reshardable",))
    reload_fail = CriterionResult("optimizer_reload", Status.FAIL, "the replacement workers never loaded checkpoint 4")
    matches = findings.known_defects(verdict(reload_fail), run)
    assert ids(matches) == ["megatron-fully-reshardable-keyerror"]
    assert "KeyError: 'step'" in matches[0].sentence and "leave out --dist-ckpt-optim-fully-reshardable" in \
        matches[0].sentence
    assert findings.known_defects(verdict(reload_fail), DISTOPT) == ()  # without the flag: not this defect


def test_every_row_points_at_a_doc_page_that_exists():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for row in findings.KNOWN_DEFECTS:
        page, _, anchor = row.doc.partition("#")
        text = (root / page).read_text(encoding="utf-8")
        assert anchor.replace("-", " ") in text.lower(), row.id


def test_verify_prints_the_known_defect_and_report_md_holds_it(tmp_path, capsys):
    """A run directory with the distributed optimizer's step reset on torch Adam, planned with
    Megatron 0.19.2: `nvrx-qual verify` says it is the known defect and which configuration
    qualifies; report.md carries the same sentence."""
    import json

    from harness import cli
    from recovery_tests import rundirs

    run = rundirs.build(tmp_path / "run", rundirs.Scenario(optimizer_steps="ahead")).run_dir
    doc = json.loads((run / "run.json").read_text())
    doc["megatron_version"] = "0.19.2"
    doc["spec"].update(workload="megatron-cpu", distributed_optimizer=True, transformer_engine=False, apex=False)
    (run / "run.json").write_text(json.dumps(doc))
    status = cli.main(["verify", str(run)])
    out = capsys.readouterr().out
    assert status == 1
    advice = [line for line in out.splitlines() if line.strip().startswith("advice: ")]
    assert len(advice) == 1 and "known defect in Megatron 0.19.2: " in advice[0], out
    assert "qualifying configuration: Megatron's plain optimizer" in advice[0]
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "## Known defect" in report and "known defect in Megatron 0.19.2" in report


def _known_defect_run(tmp_path):
    """A run directory that fails by the distributed optimizer's step reset on torch Adam with
    Megatron 0.19.2, as the default megatron-cpu kill does."""
    import json

    from recovery_tests import rundirs

    run = rundirs.build(tmp_path / "run", rundirs.Scenario(optimizer_steps="ahead")).run_dir
    doc = json.loads((run / "run.json").read_text())
    doc["megatron_version"] = "0.19.2"
    doc["spec"].update(workload="megatron-cpu", distributed_optimizer=True, transformer_engine=False, apex=False)
    (run / "run.json").write_text(json.dumps(doc))
    return run


def test_a_run_failed_by_a_known_defect_says_so_before_its_table(tmp_path, clean_spec_env):
    """`nvrx-qual run`'s result: the first line names the known defect, before the criteria
    table (whose failures are then its evidence); the advice line still follows it."""
    from harness.plan import commands as planmod
    from harness.launch import runner
    from harness.report import verify
    from harness.launch.job import LaunchResult
    from harness.cli import terminal
    from harness.plan.resolve import resolve_spec

    run = _known_defect_run(tmp_path)
    verdict, read = verify.judge_run(run, picture=False)
    known = findings.known_defects(verdict, read.timeline.run)
    assert ids(known) == ["megatron-distopt-adam-step"]
    spec, target, _ = resolve_spec({"workload": "reference", "fault": "kill", "work_dir": tmp_path / "w",
                                    "run_id": "known"}, ())
    launched = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, target.version, 0)
    text = terminal.run_outcome(runner.Outcome(planmod.build(spec, target), launched, verdict, None, None, known))
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("NOT QUALIFIED because of a known defect in Megatron 0.19.2, met by the distributed "
                               "optimizer"), lines[0]
    assert lines[1].startswith("criterion ") and any(line.startswith("advice: known defect") for line in lines)


def test_verify_names_the_known_defect_first_too(tmp_path, capsys):
    from harness import cli

    run = _known_defect_run(tmp_path)
    assert cli.main(["verify", str(run), "--no-write"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  NOT QUALIFIED because of a known defect in Megatron 0.19.2"), lines[:3]


EMPTY_TRACKER = CriterionResult("pre_fault_checkpoint", Status.FAIL,
                                "[fault 1 of 6: exception on rank 1, after-commit] "
                                "checkpoints/latest_checkpointed_iteration.txt holds '', not an iteration number, "
                                "although the fault fired on its value 2: the tracker was damaged or written by "
                                "something else after the run.")
PLAIN = dataclasses.replace(DISTOPT, distributed_optimizer=False)


def test_an_empty_tracker_left_by_megatron_is_named_as_its_in_place_write():
    """CI's megatron-cpu campaign, 2026-12-05: a kill of rank 0 in-save landed on Megatron's
    in-place tracker write; the replacement read '' and exited 0 ('Invalid metadata file')."""
    matches = findings.known_defects(verdict(EMPTY_TRACKER), PLAIN)
    assert ids(matches) == ["megatron-tracker-written-in-place"]
    assert "ends with exit status 0 on a tracker it cannot read" in matches[0].sentence
    # a tracker damaged otherwise (a number of another run), or a run of no Megatron, is not this
    other = dataclasses.replace(EMPTY_TRACKER, detail="checkpoints/latest_checkpointed_iteration.txt holds 12, "
                                                      "newer than the 8 the fault fired on")
    assert findings.known_defects(verdict(other), PLAIN) == ()
    reference = RunConfig(workload="reference", nvrx_version="0.7.0")
    assert findings.known_defects(verdict(EMPTY_TRACKER), reference) == ()


def test_a_replacement_that_could_not_listen_on_its_master_port_is_named_as_the_race(tmp_path):
    """CI, 2026-12-05: the first replacement of a megatron-cpu kill run failed on rank 0 with
    torch's DistNetworkError EADDRINUSE, and NVRx restarted once more. The verdict (clean_finish:
    two failed cycles) cannot tell that from a broken recovery; the triage's root cause can."""
    from harness.report import verify
    from recovery_tests import rundirs

    run = rundirs.build(tmp_path / "run", rundirs.Scenario(master_port_taken=True)).run_dir
    verdict, read = verify.judge_run(run, picture=False)
    assert not verdict.qualified and verdict.criterion("clean_finish").status == Status.FAIL
    found, sections = verify.triage(verdict, read)
    assert found is not None and found.cycle == 1 and found.rank == 0 and not found.injected
    matches = verify.known_defects(verdict, read, found)
    assert ids(matches) == [findings.MASTER_PORT_RACE]
    assert matches[0].sentence.startswith("known defect in NVRx 0.7.0: rank 0's worker could not listen on the master "
                                          "port"), matches[0].sentence
    assert sections[0].startswith("## Known defect") and "still not qualified" in sections[0]
    # told by the root cause only: without the triage, or with another root cause, no match
    assert verify.known_defects(verdict, read) == ()
    other = dataclasses.replace(found, exception="RuntimeError: Connection reset by peer")
    assert findings.known_defects(verdict, read.timeline.run, triage=other) == ()
    injected = dataclasses.replace(found, injected=True)
    assert findings.known_defects(verdict, read.timeline.run, triage=injected) == ()


# what both ranks of a disk-full run's injected cycle print (CI, 2026-12-05): the fault ends them with a traceback
DISK_FULL_TRACEBACKS = {rank: (f"{rank}: Traceback (most recent call last):",
                               f'{rank}:   File "/opt/harness/workloads/reference.py", line 672, in save',
                               f"{rank}:     response = dcp.async_save(state, checkpoint_id=str(target))",
                               f"{rank}: OSError: [Errno 28] No space left on device") for rank in (0, 1)}


def test_the_port_race_is_named_after_a_fault_that_ends_its_cycle_with_a_traceback(tmp_path):
    """CI, 2026-12-05 (run P): a reference disk-full run whose first replacement met the master
    port race. The injected cycle's own tracebacks (ENOSPC on both ranks: the fault, as planned)
    came first, so the triage named them and the race went unnamed: the suite did not relaunch
    the spoiled run. The injected cycle is expected to fail, whatever it prints: a later cycle's
    failure is the story."""
    from harness.report import verify
    from recovery_tests import rundirs

    run = rundirs.build(tmp_path / "run", rundirs.Scenario(master_port_taken=True)).run_dir
    log = run / "logs" / "train_cycle_cycle0.log"
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "injecting" in line) + 1
    lines[at:at] = [*DISK_FULL_TRACEBACKS[1], *DISK_FULL_TRACEBACKS[0]]
    log.write_text("\n".join(lines) + "\n")
    verdict, read = verify.judge_run(run, picture=False)
    found, _sections = verify.triage(verdict, read)
    assert found is not None and found.cycle == 1 and "EADDRINUSE" in (found.exception or ""), found
    assert found.summary.startswith("After the fault the harness injected in cycle 0"), found.summary
    assert ids(verify.known_defects(verdict, read, found)) == [findings.MASTER_PORT_RACE]


def test_verify_names_the_master_port_race_first(tmp_path, capsys):
    from harness import cli
    from recovery_tests import rundirs

    run = rundirs.build(tmp_path / "run", rundirs.Scenario(master_port_taken=True)).run_dir
    assert cli.main(["verify", str(run), "--no-write"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  NOT QUALIFIED because of a known defect in NVRx 0.7.0"), lines[:3]

