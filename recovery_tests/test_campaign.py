"""Campaigns (docs/campaigns.md): the seeded schedule planner (harness.plan.campaign), its knobs
(--faults, --seed, --fault-kinds), the run's sizing, the record in run.json, and the nemesis
picking fault i's kind, rank and moment from the schedule by marker index. The launched
campaigns are in test_campaign_e2e.py."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from harness.plan import campaign
from harness.vocab import faults
from harness.nemesis import injector as nemesis
from harness.plan import spec as specmod
from harness.plan.commands import campaign_lines
from harness.vocab.faults import CAMPAIGN, PlannedFault
from harness.vocab.layout import TRACKER_NAME
from harness.nemesis.injector import NemesisError, claim_marker, parse_command_line

ALL_KINDS = ("kill", "hang", "term", "exception", "segfault", "abort", "gil")


def spec_of(tmp_path: Path, **flags) -> specmod.RunSpec:
    base = {"workload": "reference", "work_dir": tmp_path, "run_id": "c1", "rdzv_endpoint": "localhost:29500"}
    return specmod.from_sources({**base, **flags}, {})


def problems(spec: specmod.RunSpec) -> str:
    with pytest.raises(specmod.SpecError) as err:
        specmod.validate(spec)
    return str(err.value)


# ---------------------------------------------------------------- the planner


def test_the_same_seed_gives_the_same_schedule_whatever_the_global_random_state() -> None:
    first = campaign.draw(6, 42, ALL_KINDS, 2, "megatron-cpu")
    random.seed(1)
    random.random()  # the planner owns its generator: the module's state changes nothing
    again = campaign.draw(6, 42, ALL_KINDS, 2, "megatron-cpu")
    assert first == again and len(first) == 6
    assert campaign.draw(6, 43, ALL_KINDS, 2, "megatron-cpu") != first
    # pinned: a change of the draw would silently change every recorded campaign's replay
    assert [f.text() for f in campaign.draw(4, 7, ALL_KINDS, 2, "reference")] == [
        "term@0:in-save", "hang@0:after-commit", "exception@1:after-commit", "kill@0:in-save"]


def test_every_kind_of_the_pool_comes_once_before_any_comes_twice() -> None:
    for seed in range(20):
        drawn = [f.kind for f in campaign.draw(9, seed, ALL_KINDS, 2, "reference")]
        assert set(drawn[:7]) == set(ALL_KINDS), (seed, drawn)


def test_each_fault_gets_a_moment_its_kind_allows_and_a_rank_of_the_world() -> None:
    for seed in range(20):
        for f in campaign.draw(8, seed, ALL_KINDS, 4, "megatron-cpu"):
            assert f.moment in faults.CAMPAIGN_MOMENTS and faults.FAULT_KINDS[f.kind].allows(f.moment)
            assert 0 <= f.rank < 4
    # a node loss never on node 0 (its launcher hosts the rendezvous)
    nodes = campaign.draw(5, 3, ("node",), 8, "megatron", gpus_per_node=4)
    assert nodes and all(f.rank >= 4 and f.moment == "after-commit" for f in nodes)


def test_the_default_pool_is_the_kinds_the_job_recovers_from_on_its_own() -> None:
    pool = campaign.default_kinds("reference")
    assert pool == ALL_KINDS
    assert not {"poison", "corrupt", "disk-full", "node", "gpu-hang", "gpu-error"} & set(pool)
    assert "node" in campaign.default_kinds("megatron", nnodes=2, slurm=True)
    assert "node" not in campaign.default_kinds("megatron", nnodes=2, slurm=False)
    assert "ends the job" in campaign.kind_problem("poison", "reference")
    assert "ends the job" in campaign.kind_problem("corrupt", "reference")
    assert campaign.kind_problem("disk-full", "reference") is not None


def test_the_run_is_sized_so_every_fault_finds_a_fresh_commit() -> None:
    after = [PlannedFault("kill", 1, "after-commit")] * 6
    size = campaign.sizing(after, 4)
    # faults after commits 4, 8, ..., 24; the last recovery restores 24 and commits 28
    assert (size.train_iters, size.max_restarts) == (28, 6)
    in_save_last = [*after[:5], PlannedFault("gil", 0, "in-save")]
    assert campaign.sizing(in_save_last, 4).train_iters == 36  # the save at 20 + 8 in flight, rounded to a save, + 4 slack
    assert "one restart per fault" in size.restarts_reason


# ---------------------------------------------------------------- the knobs


def test_faults_n_makes_a_campaign_with_a_recorded_seed_and_sized_run(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, faults="4")
    assert spec.fault == CAMPAIGN and spec.seed is not None and spec.max_restarts == 4
    assert spec.train_iters >= campaign.sizing(spec.schedule, spec.save_interval).train_iters
    specmod.validate(spec)
    doc = spec.to_json()
    assert doc["seed"] == spec.seed and doc["faults"] == 4
    assert [PlannedFault(d["kind"], d["rank"], d["moment"]) for d in doc["schedule"]] == list(spec.schedule)
    assert [d["fault_index"] for d in doc["schedule"]] == [1, 2, 3, 4]
    # replay: the recorded seed gives the recorded schedule
    assert spec_of(tmp_path, faults="4", seed=str(spec.seed)).schedule == spec.schedule
    # a one-fault run records its schedule too: in-restore is two faults
    one = spec_of(tmp_path, fault="kill", fault_at="in-restore")
    assert [f["moment"] for f in one.to_json()["schedule"]] == ["after-commit", "in-restore"]


def test_given_values_win_over_the_sizing(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, faults="3", seed="5", train_iters="60", max_restarts="5")
    assert (spec.train_iters, spec.max_restarts) == (60, 5)
    specmod.validate(spec)


def test_a_single_in_save_fault_is_sized_with_a_save_of_slack(tmp_path: Path) -> None:
    """Megatron's loop saves every 4 of 12 by default: an in-save fault has one save to hit (8,
    after the commit of 4), and a save that finished between two of the nemesis's polls on a
    loaded machine left none (CI, 2026-12-05: the disk-full fault never happened). Sized as a
    campaign of one, it trains to 16 and may hit 12; a given --train-iters wins, and `plan` says why."""
    spec = spec_of(tmp_path, workload="megatron-cpu", fault="disk-full", fault_at="in-save")
    assert (spec.train_iters, spec.max_restarts) == (16, specmod.RunSpec.max_restarts)
    specmod.validate(spec)
    assert spec_of(tmp_path, workload="megatron-cpu", fault="kill", fault_at="after-commit").train_iters == 12
    assert spec_of(tmp_path, workload="megatron-cpu", fault="kill", fault_at="in-save", train_iters="12").train_iters == 12
    assert spec_of(tmp_path, fault="kill", fault_at="in-save").train_iters == 30  # the reference's 30 is enough
    line = campaign_lines(spec)
    assert line == ["train iterations 16 (an in-save fault trains at least 16 unless --train-iters is given: the "
                    "in-save fault waits for a committed checkpoint and the save after it (save interval 4: during "
                    "the save at 8), the recovery commits one more checkpoint, and one save of slack (a save can "
                    "finish between two of the nemesis's polls))"], line


def test_a_restart_budget_below_the_faults_is_refused_not_launched(tmp_path: Path) -> None:
    """Fewer restarts than planned faults cannot qualify: refused before launch (it once was
    planned with a note "expected NOT QUALIFIED"; the verdict of a run directory whose budget
    ran out is test_a_restart_budget_that_runs_out_is_a_named_not_qualified's)."""
    spec = spec_of(tmp_path, faults="3", seed="5", train_iters="60", max_restarts="1")
    assert spec.max_restarts == 1  # given: it wins over the sizing, and is refused
    with pytest.raises(specmod.SpecError, match=re.escape(
            "--max-restarts=1 allows 1 restart and this plan injects 3 faults, each recovered by a restart of its "
            "own: the budget would run out at fault 2 and the run could not qualify; use --max-restarts=3 or more")):
        specmod.validate(spec)


@pytest.mark.parametrize(("flags", "message"), [
    ({"faults": "0"}, "--faults=0 must be between 1 and 99"),
    ({"faults": "100"}, "--faults=100 must be between 1 and 99"),
    ({"faults": "4", "fault": "kill"}, "--faults=4 with --fault=kill: a campaign draws its kinds from --fault-kinds"),
    ({"fault": "campaign"}, "--fault=campaign needs --faults=2 or more"),
    ({"seed": "3"}, "--seed=3 draws a campaign's schedule, and this run plans one fault: add --faults=N (2 or more)"),
    ({"fault_kinds": "kill"}, "--fault-kinds=kill is the pool of a campaign"),
    ({"faults": "3", "fault_kinds": "kill,poison"}, "--fault-kinds=kill,poison: poison ends the job"),
    ({"faults": "3", "fault_kinds": "gpu-hang"}, "gpu-hang needs a GPU and the reference workload runs on CPU"),
    ({"faults": "3", "fault_kinds": "node"}, "node loses a whole node and the job has --nnodes=1"),
    ({"faults": "6", "seed": "1", "save_interval": "5", "train_iters": "20"},
     "--train-iters=20 is too short for a campaign of 6 faults with --save-interval=5"),
    ({"faults": "3", "seed": "-1"}, "--seed=-1 must be between 0 and"),
])
def test_bad_campaign_knobs_are_refused_with_the_value_and_the_fix(tmp_path: Path, flags: dict, message: str) -> None:
    assert message in problems(spec_of(tmp_path, **flags))


def test_an_unknown_kind_in_the_list_is_refused_by_the_parser(tmp_path: Path) -> None:
    with pytest.raises(specmod.SpecError, match="--fault-kinds='kill,teleport' is not valid: use kinds separated"):
        spec_of(tmp_path, faults="3", fault_kinds="kill,teleport")


# ---------------------------------------------------------------- the nemesis reads fault i from the schedule


SCHEDULE = "kill@1:after-commit,exception@0:after-commit,gil@1:in-save"


def _config(tmp_path: Path, rank: int, schedule: str = SCHEDULE) -> nemesis.NemesisConfig:
    env = {"RANK": str(rank), "WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "1"}
    config, _ = parse_command_line(["--fault", "campaign", "--schedule", schedule, "--run-dir", str(tmp_path),
                                    "--poll-interval", "0.01", "--", "t.py"], env)
    return config


def _claim(tmp_path: Path, config: nemesis.NemesisConfig, index: int) -> None:
    record = nemesis.InjectionRecord(fault="kill", signal="SIGKILL", rank=1, local_rank=1, cycle=0, iteration=5,
                                     baseline_iteration=0, injected_at="2026-12-02T00:00:00.000Z", host="h", pid=1,
                                     tracker="t", fault_index=index)
    assert claim_marker(config.layout.marker_for(index), record)


def test_the_nemesis_arms_fault_i_with_its_scheduled_kind_rank_and_moment(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / TRACKER_NAME).write_text("5")
    rank0, rank1 = _config(tmp_path, 0), _config(tmp_path, 1)
    assert rank0.schedule == faults.parse_schedule(SCHEDULE) and rank0.selected and rank1.selected
    # fault 1 (kill) is rank 1's: rank 0 stays quiet in this cycle
    assert nemesis.arm(rank0) is None
    first = nemesis.arm(rank1)
    try:
        assert (first.kind, first.fault_index, first.moment.name) == ("kill", 1, "after-commit")
    finally:
        first.disarm()
    _claim(tmp_path, rank1, 1)
    # marker 1 claimed: fault 2 is an exception on rank 0 (rank 1 stays quiet)
    assert nemesis.arm(rank1) is None
    second = nemesis.arm(rank0)
    try:
        assert (second.kind, second.fault_index, second.moment.name) == ("exception", 2, "after-commit")
        assert second.baseline == 5  # waits for a commit newer than the restored checkpoint
        assert json.loads(second._record(10, None, None).to_json())["fault"] == "exception"
    finally:
        second.disarm()
    _claim(tmp_path, rank0, 2)
    third = nemesis.arm(rank1)
    try:
        assert (third.kind, third.fault_index, third.moment.name) == ("gil", 3, "in-save")
    finally:
        third.disarm()
    _claim(tmp_path, rank1, 3)
    assert nemesis.arm(rank0) is None and nemesis.arm(rank1) is None  # every planned fault was injected


@pytest.mark.parametrize(("argv", "message"), [
    (["--fault", "campaign"], "--fault campaign needs --schedule"),
    (["--fault", "kill", "--schedule", "kill@1:after-commit"], "--schedule goes with --fault campaign"),
    (["--fault", "campaign", "--schedule", "kill@1"], "fault 1 'kill@1' is not KIND@RANK:MOMENT"),
    (["--fault", "campaign", "--schedule", "kill@1:after-commit,poke@0:in-save"], "fault 2 'poke@0:in-save'"),
    (["--fault", "campaign", "--schedule", "node@1:in-save"], "node fires only at after-commit"),
    (["--fault", "campaign", "--schedule", "kill@5:after-commit"], "names rank 5, which does not exist in a world of 2"),
])
def test_a_bad_schedule_is_refused_before_the_entrypoint(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(NemesisError, match=message):
        parse_command_line([*argv, "--run-dir", str(tmp_path), "--", "t.py"], {"RANK": "0", "WORLD_SIZE": "2"})


def test_run_json_schedule_is_read_back_checked() -> None:
    good = [f.to_json(i) for i, f in enumerate(faults.parse_schedule(SCHEDULE), start=1)]
    assert faults.schedule_from_json(good) == faults.parse_schedule(SCHEDULE)
    for bad in (None, [], "kill", [{"kind": "kill", "rank": True, "moment": "after-commit"}],
                [{"kind": "kill", "rank": 1, "moment": "whenever"}], [{"kind": "x", "rank": 1, "moment": "in-save"}],
                [{"kind": "kill", "rank": 2 ** 40, "moment": "after-commit"}]):
        assert faults.schedule_from_json(bad) is None, bad


# ---------------------------------------------------------------- a campaign's run directory judged per fault

from harness.report import verify  # noqa: E402
from recovery_tests import rundirs  # noqa: E402

TWO = rundirs.Scenario(second_failure_at=17, second_injection=True, second_marker=True)


def _as_campaign(run_dir: Path, schedule: str, **spec: object) -> None:
    """run.json rewritten as a campaign's: fault campaign, its seed and schedule (the markers keep theirs)."""
    record = json.loads((run_dir / "run.json").read_text())
    planned = faults.parse_schedule(schedule)
    record["spec"].update(fault=CAMPAIGN, faults=len(planned), seed=5, **spec,
                          schedule=[f.to_json(i) for i, f in enumerate(planned, start=1)])
    record["spec"].pop("fault_at", None)
    if "contract" in record:  # what the run promised: the same schedule (harness.launch.contract)
        record["contract"]["faults"] = [{**f.to_json(i), "fault_after": "any" if f.moment == "after-commit" else None}
                                        for i, f in enumerate(planned, start=1)]
    (run_dir / "run.json").write_text(json.dumps(record))


def test_a_campaign_run_is_judged_per_fault_and_records_its_seed(tmp_path: Path) -> None:
    run_dir = rundirs.build(tmp_path / "run", TWO).run_dir
    _as_campaign(run_dir, "kill@1:after-commit,kill@1:after-commit")
    v = verify.verify_run(run_dir, picture=False)
    assert v.fault == CAMPAIGN and v.campaign == {"seed": 5, "faults": 2, "schedule": [
        {"fault_index": 1, "kind": "kill", "rank": 1, "moment": "after-commit"},
        {"fault_index": 2, "kind": "kill", "rank": 1, "moment": "after-commit"}]}
    assert [(e.number, e.fault, e.rank) for e in v.episodes] == [(1, "kill", 1), (2, "kill", 1)]
    assert v.qualified, [(c.id, c.status, c.detail) for c in v.criteria]
    from harness.vocab.verdict import Verdict
    assert Verdict.from_json(v.to_json()).to_json() == v.to_json()  # verdict.json's reader keeps it


def test_a_fault_of_another_kind_than_planned_fails_its_own_episode(tmp_path: Path) -> None:
    """The schedule planned a hang as fault 2; its marker says kill: that episode, and so the
    campaign, fails, while fault 1 still passes."""
    run_dir = rundirs.build(tmp_path / "run", TWO).run_dir
    _as_campaign(run_dir, "kill@1:after-commit,hang@1:after-commit")
    v = verify.verify_run(run_dir, picture=False)
    first, second = ({c.id: c for c in e.criteria} for e in v.episodes)
    assert first["pre_fault_checkpoint"].status == "pass"
    assert second["pre_fault_checkpoint"].status == "fail" and not v.qualified


def test_a_restart_budget_that_runs_out_is_a_named_not_qualified(tmp_path: Path) -> None:
    """--max-restarts 1 for a campaign of 3: the second fault's cycle is not restarted. The verdict
    is NOT QUALIFIED with replacement_cycle naming the budget, not a crash (exit 1)."""
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario(
        second_failure_at=17, second_injection=True, second_marker=True, second_not_restarted=True)).run_dir
    _as_campaign(run_dir, "kill@1:after-commit,kill@1:after-commit,kill@0:after-commit", max_restarts=1)
    v = verify.verify_run(run_dir, picture=False)
    assert not v.qualified and v.exit_status == 1
    c = v.criterion("replacement_cycle")
    assert c.status == "fail" and "the restart budget ran out: --max-restarts 1 allows 1 restart(s) and this plan " \
                                  "injected 2 faults (campaign)" in c.detail, c.detail


def test_the_campaign_fails_when_an_earlier_fault_fails_though_the_last_recovered(tmp_path: Path) -> None:
    """Every fault is judged, not only the last: fault 1 was planned a hang and its marker says
    kill (its episode fails), fault 2 recovered; the merged verdict must be NOT QUALIFIED."""
    run_dir = rundirs.build(tmp_path / "run", TWO).run_dir
    _as_campaign(run_dir, "hang@1:after-commit,kill@1:after-commit")
    v = verify.verify_run(run_dir, picture=False)
    assert [e.status for e in v.episodes] == ["fail", "pass"]
    assert not v.qualified and v.criterion("pre_fault_checkpoint").status == "fail"
    assert "fault_injected.json" in " ".join(v.criterion("pre_fault_checkpoint").evidence)


# ---------------------------------------------------------------- a campaign of several kinds, judged episode by episode


def _relabel_marker(run_dir: Path, index: int, **fields: object) -> None:
    """Marker `index` rewritten as another fault's (its kind, its moment, what it damaged)."""
    from harness.vocab.layout import marker_name

    path = run_dir / marker_name(index)
    record = json.loads(path.read_text())
    record.update(fields)
    path.write_text(json.dumps(record))


def test_each_episode_kind_decides_which_checks_concern_it(tmp_path: Path) -> None:
    """kill, then disk-full while the save of 20 was in flight: disk_full_handled is judged, for
    fault 2 alone (its marker is the evidence), and passes (the replacement resumed from 15); the
    kill's episode is judged as a kill. A run-level kind ('campaign') once left it out."""
    run_dir = rundirs.build(tmp_path / "run", TWO).run_dir
    _as_campaign(run_dir, "kill@1:after-commit,disk-full@1:in-save")
    _relabel_marker(run_dir, 2, fault="disk-full", signal=None, fault_at="in-save", iteration=20, committed_iteration=15)
    v = verify.verify_run(run_dir, picture=False)
    assert [(e.number, e.fault, e.fault_at) for e in v.episodes] == [(1, "kill", "after-commit"), (2, "disk-full", "in-save")]
    full = v.criterion("disk_full_handled")
    assert full.status == "pass" and "the save of iteration 20 met the full filesystem" in full.detail, full.detail
    assert "replacement cycle 2 loaded checkpoint 15" in full.detail and "fault_injected.2.json" in full.evidence[0]
    assert v.qualified, [(c.id, c.status, c.detail) for c in v.criteria]


def test_a_poisoning_episode_is_judged_as_a_restart_loop_and_the_others_as_recoveries(tmp_path: Path) -> None:
    """kill, then poison (checkpoint 15 truncated): fault 1's reload is judged and passes, fault 2's
    is not applicable (its checkpoint was damaged on purpose), and loop_stopped judges fault 2's
    checkpoint: the replacement loaded it and trained on, so the damage went unnoticed and the
    campaign is NOT QUALIFIED. With the kinds held at run level it qualified."""
    run_dir = rundirs.build(tmp_path / "run", TWO).run_dir
    _as_campaign(run_dir, "kill@1:after-commit,poison@1:after-commit")
    _relabel_marker(run_dir, 2, fault="poison", poisoned=str(run_dir / "checkpoints" / "iter_0000015" / "__1_0.distcp"))
    v = verify.verify_run(run_dir, picture=False)
    first, second = ({c.id: c for c in e.criteria} for e in v.episodes)
    assert first["optimizer_reload"].status == "pass", first["optimizer_reload"].detail
    assert second["optimizer_reload"].status == "not_applicable"
    assert second["optimizer_reload"].detail.startswith("The poison fault truncated a file of checkpoint 15 on purpose")
    loop = v.criterion("loop_stopped")
    assert loop.status == "fail" and "the damaged checkpoint 15: the truncated file went unnoticed" in loop.detail, loop.detail
    assert "fault_injected.2.json" in loop.evidence[0]
    assert v.criterion("clean_finish").status == "not_applicable"  # the loop ends the job: loop_stopped's to judge
    assert not v.qualified
