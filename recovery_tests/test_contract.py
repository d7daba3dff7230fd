"""The run's contract (issue 31): every reader judges a run against what it promised.

On built run directories (recovery_tests/rundirs.py writes run.json's contract as harness.launch.contract
does): planned faults that never fired fail the run, naming them; the recorded baseline is used by
`verify` and `report` without flags, and when it is gone or changed both baseline checks are
unknown, never dropped, while `--baseline none` skips them by request and says so; the launcher
the workers imported must be the one planned; a chained optimizer's checkpoint is read as
optimizer_state reads it. The real launches are in test_contract_e2e.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.launch import contract
from harness.nemesis import identity as nvrx_identity
from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.judge.criteria import FAIL, LAUNCHER_IDENTITY, NOT_APPLICABLE, PASS, UNKNOWN
from harness.read.history import run_config
from harness.machine.nvrx import NvrxTarget
from harness.launch.prepare import prepare, release
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGN = ("kill@1:after-commit", "kill@0:after-commit", "term@1:after-commit")


def statuses(verdict) -> dict:
    return {c.id: c.status for c in verdict.criteria}


# ---------------------------------------------------------------- planned faults that never fired


def test_a_campaign_whose_later_faults_never_fired_is_not_qualified_naming_them(tmp_path):
    """3 faults planned, one marker and one failed cycle: faults 2 and 3 were never exercised."""
    built = rundirs.build(tmp_path / "run", Scenario(planned=CAMPAIGN))
    verdict = verify_run(built.run_dir)
    assert not verdict.qualified
    finish = verdict.criterion("clean_finish")
    assert finish.status == FAIL, finish.detail
    assert ("2 of the 3 planned faults never fired: fault 2 (kill on rank 0, after-commit) and fault 3 (term on "
            "rank 1, after-commit)") in finish.detail, finish.detail
    assert "exactly 3 injections" not in finish.detail
    # fault 1's own recovery is judged, and held
    assert [e.number for e in verdict.episodes] == [1]
    assert all(c.status == PASS for c in verdict.episodes[0].criteria), verdict.episodes[0].criteria


def test_a_second_in_restore_fault_that_never_fired_is_not_qualified(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(moment="in-restore"))
    verdict = verify_run(built.run_dir)
    finish = verdict.criterion("clean_finish")
    assert (finish.status, verdict.qualified) == (FAIL, False), finish.detail
    assert "1 of the 2 planned faults never fired: fault 2 (kill on rank 1, in-restore)" in finish.detail


def test_every_planned_fault_fired_still_qualifies(tmp_path):
    """The positive control: the in-restore plan with both markers is judged as before."""
    built = rundirs.build(tmp_path / "run", Scenario(moment="in-restore", second_failure_at=12, second_injection=True,
                                                     second_marker=True))
    finish = verify_run(built.run_dir).criterion("clean_finish")
    assert finish.status == PASS and "exactly 2 injections" in finish.detail, finish.detail


# ---------------------------------------------------------------- the recorded baseline


def _twin_and_run(tmp_path: Path, **run) -> tuple[Path, Path]:
    runs = tmp_path / "runs"
    twin = rundirs.build(runs / "twin-baseline", Scenario(fault="none")).run_dir
    fault_run = rundirs.build(runs / "kill-run", Scenario(baseline_run_id="twin-baseline", **run)).run_dir
    return twin, fault_run


def _verify(capsys, *argv: str) -> tuple[int, str]:
    status = cli.main(["verify", *argv, "--no-write"])
    return status, capsys.readouterr().out


def test_verify_and_report_judge_against_the_recorded_baseline_without_flags(tmp_path, capsys):
    """The data-replay defect of the issue: the replacement trained on from the wrong data, so its
    losses and end state differ from the uninterrupted twin's; verify and report both say so."""
    _twin, run = _twin_and_run(tmp_path, diverged_after_restore=True)
    status, out = _verify(capsys, str(run))
    assert status == 1, out
    assert "fail           state_equivalence" in out and "fail           loss_continuity" in out, out
    assert "baseline " + str(tmp_path / "runs" / "twin-baseline") in out, out
    status = cli.main(["report", str(run)])
    text = capsys.readouterr().out
    assert status == 1, text
    assert "`state_equivalence` fail" in text and "0 of 1 runs qualified." in text, text


def test_a_run_whose_end_state_equals_its_recorded_baseline_qualifies(tmp_path, capsys):
    _twin, run = _twin_and_run(tmp_path)
    verdict = verify_run(run)
    assert (statuses(verdict)["loss_continuity"], statuses(verdict)["state_equivalence"]) == (PASS, PASS)
    assert verdict.qualified and verdict.baseline is not None and verdict.baseline.how == "ran"
    status = cli.main(["report", str(run), str(tmp_path / "runs" / "twin-baseline")])
    text = capsys.readouterr().out
    assert status == 0, text
    # the twin is counted apart from the fault runs; every run's picture is linked when drawn
    assert text.splitlines()[2].startswith("1 of 1 runs qualified. 1 uninterrupted baseline run (fault none"), text


def test_a_missing_baseline_makes_both_checks_unknown_and_none_skips_them_by_request(tmp_path, capsys):
    twin, run = _twin_and_run(tmp_path, diverged_after_restore=True)
    shutil.rmtree(twin)
    status, out = _verify(capsys, str(run))
    assert status == 1, out
    for cid in ("loss_continuity", "state_equivalence"):
        line = next(line for line in out.splitlines() if f" {cid} " in line)
        assert line.split()[0] == "unknown", line
        assert "the baseline twin-baseline that run.json's contract names (ran) is not in" in line, line
        assert "--baseline none" in line, line
    status, out = _verify(capsys, str(run), "--baseline", "none")
    assert status == 0, out  # the rest of the run holds
    assert "baseline skipped by request: --baseline none: judged without the recorded baseline twin-baseline" in out
    verdict_json = tmp_path / "v.json"
    assert cli.main(["verify", str(run), "--baseline", "none", "--no-write", "--json", str(verdict_json)]) == 0
    doc = json.loads(verdict_json.read_text())
    assert doc["baseline"]["how"] == "none"
    assert "--baseline none" in doc["baseline"]["skipped"]
    skipped = {c["id"]: c for c in doc["criteria"]}
    assert skipped["state_equivalence"]["status"] == NOT_APPLICABLE.value
    assert skipped["state_equivalence"]["detail"].startswith("Not judged, by request: --baseline none")


def test_a_pruned_or_replaced_baseline_is_unknown_never_trusted(tmp_path):
    twin, run = _twin_and_run(tmp_path, diverged_after_restore=True)
    shutil.rmtree(twin / "checkpoints" / "iter_0000015")  # pruned since the run was judged against it
    c = verify_run(run).criterion("state_equivalence")
    assert c.status == UNKNOWN and "checkpoints of the baseline twin-baseline changed since" in c.detail, c.detail
    shutil.rmtree(twin)
    elsewhere = rundirs.build(tmp_path / "elsewhere", Scenario(fault="none")).run_dir
    twin.symlink_to(elsewhere)  # never followed
    c = verify_run(run).criterion("loss_continuity")
    assert c.status == UNKNOWN and "is a link, which is never followed" in c.detail, c.detail


def test_the_baseline_is_looked_up_beside_the_run_never_at_a_recorded_path(tmp_path):
    """run.json names the baseline by its run ID; one that is not a run ID is never a path to read."""
    _twin, run = _twin_and_run(tmp_path)
    record = json.loads((run / "run.json").read_text())
    record["contract"]["baseline"]["run_id"] = "../../etc"
    (run / "run.json").write_text(json.dumps(record))
    verdict = verify_run(run)
    c = verdict.criterion("state_equivalence")
    assert c.status == UNKNOWN and "which is not a run ID" in c.detail, c.detail


# ---------------------------------------------------------------- the launcher the workers imported


@pytest.mark.parametrize("imported, status, phrase", [
    ("planned", PASS, "Every worker statement names the planned NVRx 0.7.0 from /opt/venv"),
    ("other", FAIL, "rank 0 (cycle 0) imported nvidia_resiliency_ext 0.4.1 from /usr/lib/python3/dist-packages"),
    ("missing", FAIL, "imported no nvidia_resiliency_ext at all (not on sys.path)"),
    ("silent", UNKNOWN, "No worker said which NVRx it imported"),
])
def test_the_workers_launcher_must_be_the_planned_one(tmp_path, imported, status, phrase):
    built = rundirs.build(tmp_path / "run", Scenario(imported=imported))
    verdict = verify_run(built.run_dir)
    c = verdict.criterion(LAUNCHER_IDENTITY)
    assert c.status == status and phrase in c.detail, c.detail
    assert verdict.qualified is (status == PASS)
    assert c.final is (status == FAIL)  # the watcher stops a run that launched the wrong NVRx


def test_a_run_dir_from_before_contracts_has_no_launcher_to_compare(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario(contract=False, imported="other"))
    verdict = verify_run(built.run_dir)
    assert verdict.criterion(LAUNCHER_IDENTITY).status == NOT_APPLICABLE and verdict.qualified


def test_the_nemesis_says_which_nvrx_the_worker_finds(tmp_path):
    """Run under the side-by-side NVRx 0.7.0 (PYTHONPATH, as the plan puts it): the first worker
    of the node states it, as the plan's own search finds it; another local rank stays quiet."""
    side = ROOT / ".nvrx" / "0.7.0"
    if not (side / "nvidia_resiliency_ext").is_dir():
        pytest.skip("NVRx 0.7.0 is not installed side by side in .nvrx/0.7.0 (tools/bootstrap)")
    script = tmp_path / "entry.py"
    script.write_text("print('trained')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{side}:{ROOT}", "RANK": "3", "WORLD_SIZE": "4"}
    said = {}
    for local in ("0", "1"):
        proc = subprocess.run([sys.executable, "-m", "harness.nemesis", "--fault", "none", "--", str(script)],
                              env={**env, "LOCAL_RANK": local}, capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
        assert proc.returncode == 0 and "trained" in proc.stdout, proc.stderr
        said[local] = [line for line in proc.stderr.splitlines() if "launcher identity" in line]
    planned = nvrx_identity.locate([str(side), *sys.path[1:]])
    assert planned is not None and planned.version == "0.7.0"
    assert said == {"0": [f"[nemesis] {planned.line(3)}"], "1": []}


def test_run_json_records_the_launcher_really_found_never_a_path_not_used(tmp_path):
    """`--nvrx-path /nonexistent` (refused before launch by the spec's checks) must never make
    run.json claim a launcher that was not there: the contract records where NVRx was found."""
    spec = specmod.from_sources({"workload": "reference", "work_dir": tmp_path / "work", "run_id": "r1",
                                 "baseline": "none", "rdzv_endpoint": "127.0.0.1:29999"}, {}, (), detected={})
    found = nvrx_identity.locate(sys.path[1:])
    assert found is not None
    plan = planmod.build(spec, NvrxTarget(found.version or "?", Path("/nonexistent")))
    prepare(plan, dry_run=True)
    release(plan.layout)
    launcher = json.loads(plan.layout.run_json.read_text())["contract"]["launcher"]
    assert launcher["path"] == found.path and (Path(launcher["path"]) / "fault_tolerance").is_dir(), launcher
    assert (launcher["version"], launcher["sha256"]) == (found.version, found.sha256)
    assert run_config(plan.layout.root).contract.launcher.path == found.path  # read back through history


def test_the_contract_records_what_the_run_promised(tmp_path):
    spec = specmod.from_sources({"workload": "reference", "work_dir": tmp_path / "work", "run_id": "r1",
                                 "fault": "kill", "fault_at": "in-restore", "rdzv_endpoint": "127.0.0.1:29999"}, {}, (),
                                detected={})
    plan = planmod.build(spec, NvrxTarget("0.7.0"))
    doc = contract.build(plan, contract.BaselinePromise(contract.NONE, why="--baseline none"))
    assert doc["version"] == contract.VERSION
    assert [(f["fault_index"], f["kind"], f["rank"], f["moment"]) for f in doc["faults"]] == [
        (1, "kill", 1, "after-commit"), (2, "kill", 1, "in-restore")]
    assert doc["baseline"] == {"how": "none", "run_id": None, "config_hash": None, "checkpoints": None,
                               "why": "--baseline none", "problem": None}
    assert doc["shape"]["world"] == spec.world and doc["tiers"]["save_interval"] == spec.save_interval


# ---------------------------------------------------------------- chained optimizers


def test_a_chained_optimizers_checkpoint_with_a_correct_state_qualifies(tmp_path):
    """Megatron's ChainedOptimizer (MoE) keys every optimizer tensor chained_<i>.optimizer...:
    optimizer_reload reads them through optimizer_state's reader."""
    built = rundirs.build(tmp_path / "run", Scenario(optimizer_record="chained_distributed"))
    verdict = verify_run(built.run_dir)
    assert verdict.qualified, [(c.id, c.status, c.detail) for c in verdict.criteria if not c.held]
    reload = verdict.criterion("optimizer_reload")
    assert "4 optimizer keys in checkpoints/iter_0000010" in reload.detail, reload.detail
    assert verdict.criterion("optimizer_state").status == PASS


# ---------------------------------------------------------------- a stranger's contract


@pytest.mark.parametrize("part, value, said", [
    ("version", "1", "is not version 1 of the format"),
    ("version", 2, "is not version 1 of the format"),
    ("faults", [{"fault_index": 2, "kind": "kill", "rank": 1, "moment": "after-commit"}], "not a list of planned faults"),
    ("faults", [{"fault_index": 1, "kind": "kill", "rank": 2 ** 40, "moment": "after-commit"}], "not a list of planned"),
    ("faults", "kill", "not a list of planned faults"),
    ("launcher", {"version": 7}, "names no NVRx version"),
    ("launcher", {"version": "0.7.0 x"}, "names no NVRx version"),  # (a NUL byte refuses run.json: test_record_strings)
    ("baseline", {"how": "stolen"}, "says no way it came"),
    ("baseline", {"how": "ran", "run_id": "a/b"}, "is not a run ID"),
])
def test_a_hostile_contract_is_read_as_no_promise_never_a_crash(tmp_path, part, value, said):
    """run.json may come from a stranger: a contract part that is not what the suite writes is
    left out with a note naming it (a version the reader does not know: the whole contract), and
    the run is judged as one without that promise."""
    built = rundirs.build(tmp_path / "run", Scenario())
    record = json.loads((built.run_dir / "run.json").read_text())
    record["contract"][part] = value
    (built.run_dir / "run.json").write_text(json.dumps(record))
    verdict = verify_run(built.run_dir)
    assert any(said in note for note in verdict.notes), verdict.notes
    assert verdict.criterion("clean_finish").status == PASS  # the spec's own schedule of one fault stands
    if part in ("version", "launcher"):
        assert verdict.criterion(LAUNCHER_IDENTITY).status == NOT_APPLICABLE


def test_a_contracts_launcher_fields_are_range_checked(tmp_path):
    built = rundirs.build(tmp_path / "run", Scenario())
    record = json.loads((built.run_dir / "run.json").read_text())
    record["contract"]["launcher"].update(sha256="not-hex", files=-3, path="x" * 5000)
    (built.run_dir / "run.json").write_text(json.dumps(record))
    planned = run_config(built.run_dir).contract.launcher
    assert (planned.version, planned.sha256, planned.files, planned.path) == ("0.7.0", None, None, None)
    # compared by version alone, and said so
    c = verify_run(built.run_dir).criterion(LAUNCHER_IDENTITY)
    assert c.status == PASS and "by version only" in c.detail, c.detail
