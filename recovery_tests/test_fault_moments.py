"""The fault vocabulary (harness.vocab.faults FAULT_KINDS / FAULT_MOMENTS) from the spec to the nemesis:
validation before launch, the plan's flags, and each moment fired by a real wrapper around the
stand-in worker (the same helpers as test_nemesis)."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from harness.plan import campaign
from harness.vocab import faults, tiers
from harness import workloads
from harness.nemesis import injector as nemesis
from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.vocab.layout import MARKER_NAME, TRACKER_NAME, marker_index, marker_name
from harness.nemesis.injector import find_in_flight_save, poison_checkpoint
from harness.machine.nvrx import NvrxTarget
from harness.workloads import reference_args
from recovery_tests.test_nemesis import launched, rank_env, write_tracker

# ---------------------------------------------------------------- the vocabulary, before launch


def spec_of(tmp_path: Path, **flags) -> specmod.RunSpec:
    base = {"workload": "reference", "work_dir": tmp_path, "run_id": "r1", "rdzv_endpoint": "localhost:29500"}
    return specmod.from_sources({**base, **flags}, {})


def problems(spec: specmod.RunSpec) -> str:
    with pytest.raises(specmod.SpecError) as err:
        specmod.validate(spec)
    return str(err.value)


def test_the_vocabulary_is_one_table_per_axis_at_the_bottom_of_the_house() -> None:
    # spec re-exports the same objects, it does not restate them
    assert specmod.FAULT_KINDS is faults.FAULT_KINDS and specmod.FAULT_MOMENTS is faults.FAULT_MOMENTS
    assert faults.FAULTS == (*faults.FAULT_KINDS, "none", faults.CAMPAIGN)
    for name, moment in faults.FAULT_MOMENTS.items():
        assert moment.moments[-1] == name, "a plan's own moment is its last fault"
        assert set(moment.moments) <= set(faults.FAULT_MOMENTS), (name, moment.moments)
    for kind in faults.FAULT_KINDS.values():
        assert set(kind.moments or ()) <= set(faults.FAULT_MOMENTS), kind


def test_every_kind_says_how_the_nemesis_injects_it() -> None:
    for kind in faults.FAULT_KINDS.values():
        assert kind.injects in faults.INJECTIONS
        if kind.planned is not None:  # refused before launch (spec.fault_problems), nothing to inject yet
            continue
        if kind.injects == faults.IN_PROCESS:
            assert kind.name in nemesis.IN_PROCESS_ACTIONS, f"{kind.name}: no in-process action in the nemesis"
        elif kind.injects == faults.FILL:  # the nemesis's own fill (harness.nemesis.inject.fill_filesystem); no signal
            assert kind.signal is None and kind.fills_filesystem, kind
        else:
            assert kind.name in nemesis.FAULT_SIGNALS, f"{kind.name}: no signal for the nemesis to send"
        if kind.damage is not None:
            assert kind.damage in nemesis.CHECKPOINT_DAMAGE, f"{kind.name}: the nemesis cannot do {kind.damage}"
    assert faults.FAULT_KINDS["node"].loses_node and faults.FAULT_KINDS["poison"].poisons_checkpoint
    assert not faults.FAULT_KINDS["kill"].loses_node and not faults.FAULT_KINDS["kill"].poisons_checkpoint


def test_a_row_that_cannot_be_injected_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match="needs its signal"):
        faults.FaultKind("x", None, "x")
    with pytest.raises(ValueError, match="injects='teleport'"):
        faults.FaultKind("x", "SIGKILL", "x", injects="teleport")
    with pytest.raises(ValueError, match="damage='shred'"):
        faults.FaultKind("x", "SIGKILL", "x", damage="shred")
    with pytest.raises(ValueError, match="SIGWHATEVER"):
        faults.FaultKind("x", "SIGWHATEVER", "x")
    assert faults.FaultKind("x", None, "x", injects=faults.IN_PROCESS).signal is None


def test_every_kind_and_moment_is_a_valid_flag(tmp_path: Path) -> None:
    for kind in specmod.FAULT_KINDS:
        if specmod.FAULT_KINDS[kind].planned is not None:  # refused with its reason: test_fault_kinds
            continue
        for moment in specmod.FAULT_MOMENTS:
            if not specmod.FAULT_KINDS[kind].allows(moment):
                continue
            if specmod.FAULT_KINDS[kind].gpu_only:  # refused on the CPU tiers (test_fault_kinds); the GPU workload's rules
                if moment in workloads.get("megatron").moments:
                    gpu = spec_of(tmp_path, workload="megatron", megatron_path=str(tmp_path), fault=kind, fault_at=moment,
                                  **({"train_iters": 30} if moment == "in-save" else {}))
                    assert specmod.fault_problems(gpu) == [], (kind, moment, specmod.fault_problems(gpu))
                continue
            # node: a node to lose beside node 0, which hosts the rendezvous
            shape = dict(nnodes=2, gpus_per_node=1, assume_shared_storage=True) if kind == "node" else {}
            spec = spec_of(tmp_path, fault=kind, fault_at=moment, **shape)
            assert specmod.validate(spec) == 0, (kind, moment)


def test_an_unknown_moment_is_refused_naming_the_choices() -> None:
    with pytest.raises(specmod.SpecError, match="--fault-at='mid-step' is not valid: use after-commit, in-save"):
        specmod.from_sources({"workload": "reference", "fault_at": "mid-step"}, {})


def test_a_moment_the_workload_cannot_show_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.get("reference"), "moments", ("after-commit",))
    text = problems(spec_of(tmp_path, fault_at="in-save"))
    assert "--fault-at=in-save: the reference workload cannot show this moment; use one of after-commit" in text


def test_poison_is_refused_on_a_users_checkpoint_dir_and_outside_after_commit(tmp_path: Path) -> None:
    mine = tmp_path / "my-ckpts"
    mine.mkdir()
    assert "is yours" in problems(spec_of(tmp_path, fault="poison", checkpoint_dir=mine))
    assert "this kind fires only at after-commit; use --fault-at=after-commit" in problems(
        spec_of(tmp_path, fault="poison", fault_at="in-save"))


def test_in_save_needs_a_committed_checkpoint_before_the_save_it_hits(tmp_path: Path) -> None:
    text = problems(spec_of(tmp_path, fault_at="in-save", train_iters=10, save_interval=5))
    assert "set --train-iters=11 or more" in text


NP_ARGS = ("--non-persistent-ckpt-type", "global", "--non-persistent-save-interval", "3")


def test_the_commits_of_a_training_follow_megatrons_loop() -> None:
    """Persistent every save interval, non-persistent at its other multiples, the final
    iteration saved after the loop when it is no multiple (training.py)."""
    c = tiers.Commits.of(30, 50, ())
    assert c.next(0) == (30, tiers.PERSISTENT) and c.next(30) is None  # only the final save
    c = tiers.Commits.of(12, 4, NP_ARGS)
    assert c.non_persistent_interval == 3
    assert [c.next(i) for i in (0, 3, 4, 8, 9)] == [(3, tiers.NON_PERSISTENT), (4, tiers.PERSISTENT),
                                                    (6, tiers.NON_PERSISTENT), (9, tiers.NON_PERSISTENT),
                                                    (12, tiers.PERSISTENT)]
    assert c.next(4, (tiers.NON_PERSISTENT,)) == (6, tiers.NON_PERSISTENT)
    assert c.next(11, (tiers.NON_PERSISTENT,)) is None  # 12 is the persistent tier's
    assert tiers.Commits.of(12, 4, ("--non-persistent-ckpt-type", "local", "--non-persistent-save-interval",
                                    "3")).non_persistent_interval is None  # the local tier arms no fault
    assert tiers.Commits.of(12, 4, (*NP_ARGS[:3], "8")).next(0, (tiers.NON_PERSISTENT,)) is None  # all persistent's


@pytest.mark.parametrize(("flags", "args", "words"), [
    # the example: no checkpoint before the final one
    ({"save_interval": "50", "train_iters": "30"}, (),
     "the kill fault at after-commit cannot happen: with --save-interval=50 and --train-iters=30 the first checkpoint "
     "after the start that it waits for is the final one (iteration 30)"),
    ({"fault_at": "in-save", "save_interval": "5", "train_iters": "10"}, (), "set --train-iters=11 or more"),
    ({"fault_at": "in-restore", "save_interval": "5", "train_iters": "5"}, (),
     "fault 1 of 2 (kill at after-commit) cannot happen"),
    # the tier --fault-after watches decides which saves count
    ({"workload": "megatron-cpu", "fault_after": "persistent", "save_interval": "20", "train_iters": "12"}, NP_ARGS,
     "set --train-iters=21 or more"),
    # in-restore watches the persistent load: a first fault after a non-persistent commit leaves it nothing to hit
    ({"workload": "megatron-cpu", "fault_at": "in-restore", "fault_after": "non-persistent"}, NP_ARGS,
     "fault 2 of 2 (kill at in-restore) fires while the replacement loads the checkpoint its cycle restored, and "
     "that is a non-persistent one"),
])
def test_a_plan_whose_fault_never_finds_its_checkpoint_is_refused(tmp_path: Path, flags, args, words) -> None:
    base = {"workload": "reference", "work_dir": tmp_path, "run_id": "r1", "rdzv_endpoint": "localhost:29500"}
    if flags.get("workload") == "megatron-cpu":
        base["megatron_cpu_dir"] = tmp_path  # its own problem, beside the one under test
    spec = specmod.from_sources({**base, **flags}, {}, args)
    assert words in " | ".join(specmod.reach_problems(spec)), specmod.reach_problems(spec)


def test_the_tier_a_fault_waits_for_can_make_a_long_save_interval_work(tmp_path: Path) -> None:
    base = {"workload": "megatron-cpu", "save_interval": "20", "train_iters": "12"}
    spec = spec_of(tmp_path, megatron_cpu_dir=tmp_path, **base)
    assert specmod.reach_problems(dataclasses.replace(spec, extra_args=NP_ARGS)) == []  # any: the commit at 3
    assert specmod.reach_problems(spec)  # no non-persistent tier: only the final save


def test_the_reference_workload_has_no_other_tier_to_wait_for(tmp_path: Path) -> None:
    """Its parser would refuse the tier flags in every worker after the launch: refused before."""
    base = {"workload": "reference", "work_dir": tmp_path, "run_id": "r1", "fault_after": "non-persistent"}
    spec = specmod.from_sources(base, {}, NP_ARGS)
    specmod.validate(spec)  # the tier is turned on, as far as the spec can tell
    with pytest.raises(specmod.SpecError, match="the reference workload saves persistent checkpoints only"):
        planmod.check(spec, NvrxTarget("0.7.0"))


@pytest.mark.parametrize("moment", list(faults.FAULT_MOMENTS))
def test_every_moment_reaches_its_checkpoint_in_the_default_plans(tmp_path: Path, moment: str) -> None:
    for workload, size in (("reference", {}), ("megatron-cpu", {"megatron_cpu_dir": tmp_path})):
        spec = spec_of(tmp_path, workload=workload, fault_at=moment, **size)
        reached = campaign.reach(spec.schedule, tiers.Commits.of(spec.train_iters, spec.save_interval))
        assert [r.missing for r in reached] == [None] * len(spec.schedule), (workload, reached)
        assert all(r.at is not None and r.at <= spec.train_iters for r in reached)


def test_a_campaigns_sizing_gives_every_fault_its_checkpoint(tmp_path: Path) -> None:
    """The sizing of harness.plan.campaign (train iterations with slack) never plans a fault that the
    schedule's reach says cannot fire: the same rule, for every moment a campaign draws."""
    checked = 0
    for workload in ("reference", "megatron-cpu"):
        kinds = campaign.default_kinds(workload)
        for count in (2, 3, 5, 8):
            for save_interval in (1, 2, 3, 5, 7):
                for seed in range(12):
                    schedule = campaign.draw(count, seed, kinds, 2, workload)
                    size = campaign.sizing(schedule, save_interval)
                    reached = campaign.reach(schedule, tiers.Commits(size.train_iters, save_interval))
                    assert [r.missing for r in reached] == [None] * count, (schedule, save_interval, reached)
                    checked += 1
    assert checked == 2 * 4 * 5 * 12


def test_in_save_holds_the_reference_saves_open_by_default(tmp_path: Path) -> None:
    assert spec_of(tmp_path, fault_at="in-save").save_delay_ms == reference_args.IN_SAVE_DELAY_MS
    assert spec_of(tmp_path).save_delay_ms is None
    assert spec_of(tmp_path, fault_at="in-save", save_delay_ms=50).save_delay_ms == 50


def test_the_plan_passes_the_moment_and_the_no_progress_limit(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, fault="poison", max_no_progress_cycles=2)
    argv = planmod.build(spec, NvrxTarget("0.7.0")).launcher.argv
    assert argv[argv.index("--ft-max-no-progress-cycles") + 1] == "2"
    assert argv[argv.index("--ft-no-restart-exit-code") + 1] == "93"
    argv = planmod.build(spec_of(tmp_path, fault_at="in-restore"), NvrxTarget("0.7.0")).launcher.argv
    assert argv[argv.index("--fault-at") + 1] == "in-restore"
    argv = planmod.build(spec_of(tmp_path, fault_at="in-save"), NvrxTarget("0.7.0")).launcher.argv
    assert argv[argv.index("--save-delay-ms") + 1] == str(reference_args.IN_SAVE_DELAY_MS)
    assert "--fault-at" not in planmod.build(spec_of(tmp_path), NvrxTarget("0.7.0")).launcher.argv


def test_a_restart_loop_is_refused_on_a_launcher_without_a_no_progress_rule(tmp_path: Path) -> None:
    with pytest.raises(specmod.SpecError, match="NVRx 0.4.1 has no such rule"):
        planmod.build(spec_of(tmp_path, fault="poison"), NvrxTarget("0.4.1"))
    with pytest.raises(specmod.SpecError, match="--max-no-progress-cycles=2: NVRx 0.4.1"):
        planmod.build(spec_of(tmp_path, max_no_progress_cycles=2), NvrxTarget("0.4.1"))


def test_one_marker_per_planned_fault() -> None:
    assert [marker_name(i) for i in (1, 2, 3)] == [MARKER_NAME, "fault_injected.2.json", "fault_injected.3.json"]
    assert [marker_index(n) for n in (MARKER_NAME, "fault_injected.2.json", "fault_injected.1.json", "x.json")] == [
        1, 2, None, None]


# ---------------------------------------------------------------- the checkpoint directory, read by the nemesis


def make_save(checkpoints: Path, iteration: int, *, data: bool = True, committed: bool = False) -> Path:
    d = checkpoints / f"iter_{iteration:07d}"
    d.mkdir(parents=True)
    if data:
        (d / "__0_0.distcp").write_bytes(b"x" * 100)
        (d / "__1_0.distcp").write_bytes(b"y" * 10)
    if committed:
        (d / ".metadata").write_bytes(b"m")
        (d / "metadata.json").write_text("{}")
    return d


def test_an_in_flight_save_is_one_above_a_committed_checkpoint_with_data_and_no_commit(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoints"
    make_save(ck, 5, committed=True)
    make_save(ck, 10)
    assert find_in_flight_save(ck, 0) is None  # no tracker yet: nothing of this run is committed
    write_tracker(ck / TRACKER_NAME, "5")
    found = find_in_flight_save(ck, 0)
    assert (found.iteration, found.committed) == (10, 5)
    assert find_in_flight_save(ck, 5) is None  # 5 predates this start (the baseline)
    (ck / "iter_0000010" / "metadata.json").write_text("{}")
    assert find_in_flight_save(ck, 0) is None  # committed: not in flight
    make_save(ck, 15, data=False)
    assert find_in_flight_save(ck, 0) is None  # a directory without data yet is not a save being written


def _disk_full_in_save(run_dir: Path, committed: int, in_flight: int) -> tuple["nemesis.Injector", Path]:
    """Rank 1's disk-full in-save injector (not started) over `committed` and the save of
    `in_flight` in flight; and its checkpoint directory."""
    config, _ = nemesis.parse_command_line(["--fault", "disk-full", "--run-dir", str(run_dir), "--", "x.py"],
                                           {"RANK": "1", "WORLD_SIZE": "2", "NVRX_FAULT_AT": "in-save",
                                            "NVRX_POLL_INTERVAL": "0.01"})
    ck = config.layout.checkpoints
    make_save(ck, committed, committed=True)
    write_tracker(ck / TRACKER_NAME, str(committed))
    make_save(ck, in_flight)
    return nemesis.Injector(config, config.layout, 0, watch="in-save"), ck


def test_an_in_save_fault_whose_save_committed_meanwhile_waits_for_the_next_save(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """CI, 2026-12-05: a megatron-cpu disk-full in-save poller found the save of 8 in flight but,
    on a loaded machine, landed 200 ms after Megatron committed it. The moment is checked again
    after the fill, before the marker: a save committed meanwhile takes the fill back and the
    fault lands in the next save."""
    injector, ck = _disk_full_in_save(tmp_path, committed=4, in_flight=8)
    fills, freed = [], []

    def fill(directory: Path):
        fills.append(directory)
        if len(fills) == 1:  # Megatron finalizes the save of 8 while the poller fills, and starts 12
            (ck / "iter_0000008" / "metadata.json").write_text("{}")
            write_tracker(ck / TRACKER_NAME, "8")
            make_save(ck, 12)
        return directory / "filler", 10, 100

    monkeypatch.setattr(nemesis.inject, "fill_filesystem", fill)
    monkeypatch.setattr(nemesis.inject, "free_filesystem", lambda directory: freed.append(directory))
    injector.moment._poll()  # returns once the fault landed
    assert injector.failure is None and len(fills) == 2 and freed == [ck]
    marker = json.loads((tmp_path / MARKER_NAME).read_text())
    assert (marker["fault_at"], marker["iteration"], marker["committed_iteration"]) == ("in-save", 12, 8)


def test_an_in_save_fault_whose_every_save_committed_meanwhile_says_so(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """CI, 2026-12-05: the save of 12, the last, committed while the poller filled; the fault never
    happened, and the wrapper said "no checkpoint newer than the startup baseline appeared",
    though 4, 8 and 12 had. The reason names the moment that passed."""
    injector, ck = _disk_full_in_save(tmp_path, committed=8, in_flight=12)

    def fill(directory: Path):  # Megatron finalizes 12 while the poller fills; the entrypoint ends
        (ck / "iter_0000012" / "metadata.json").write_text("{}")
        write_tracker(ck / TRACKER_NAME, "12")
        injector._stop.set()
        return directory / "filler", 10, 100

    monkeypatch.setattr(nemesis.inject, "fill_filesystem", fill)
    monkeypatch.setattr(nemesis.inject, "free_filesystem", lambda directory: None)
    injector.moment._poll()
    assert not (tmp_path / MARKER_NAME).exists()
    assert injector.why_not() == ("the in-save moment of iteration 12 passed before the fault could land (committed "
                                  "meanwhile) and no later one came before the entrypoint ended; give the run more "
                                  "saves (--train-iters)")


def test_poison_truncates_the_largest_shard_to_half(tmp_path: Path) -> None:
    d = make_save(tmp_path, 5, committed=True)
    assert poison_checkpoint(d) == d / "__0_0.distcp"
    assert (d / "__0_0.distcp").stat().st_size == 50 and (d / "__1_0.distcp").stat().st_size == 10


# ---------------------------------------------------------------- each moment, fired by a real wrapper


@pytest.mark.e2e
def test_in_save_fires_during_the_save_and_records_both_iterations(tmp_path: Path, run_dir: Path) -> None:
    ck = run_dir / "checkpoints"
    with launched(tmp_path, rank_env(1, run_dir, NVRX_FAULT_AT="in-save")) as wrapper:
        wrapper.ready()
        make_save(ck, 5, committed=True)
        write_tracker(ck / TRACKER_NAME, "5")
        wrapper.await_polls(3)
        assert wrapper.proc.poll() is None  # a committed checkpoint alone is no save in flight
        make_save(ck, 10)
        assert wrapper.await_exit() == -signal.SIGKILL
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert (marker["fault_at"], marker["iteration"], marker["committed_iteration"]) == ("in-save", 10, 5)
    assert "after checkpoint iteration 5 (baseline 0), during the async save of iteration 10" in wrapper.stderr()


@pytest.mark.e2e
def test_in_restore_fires_the_second_fault_at_the_first_checkpoint_read(tmp_path: Path, run_dir: Path) -> None:
    ck = run_dir / "checkpoints"
    make_save(ck, 5, committed=True)
    write_tracker(ck / TRACKER_NAME, "5")
    (run_dir / MARKER_NAME).write_text('{"fault": "kill", "fault_at": "after-commit"}')  # fault 1, cycle 0
    env = rank_env(1, run_dir, NVRX_FAULT_AT="in-restore", TORCHELASTIC_RESTART_COUNT="1")
    # Reading only the tracker is no load: the worker ends normally and fault 2 never happened.
    with launched(tmp_path, env, worker_args=("--read", str(ck / TRACKER_NAME), "--exit-now"), name="a") as wrapper:
        assert wrapper.await_exit() == 3
    assert not (run_dir / "fault_injected.2.json").exists()
    with launched(tmp_path, env, worker_args=("--read", str(ck / "iter_0000005" / ".metadata")), name="b") as wrapper:
        assert wrapper.await_exit() == -signal.SIGKILL
    marker = json.loads((run_dir / "fault_injected.2.json").read_text())
    assert (marker["fault_at"], marker["fault_index"], marker["iteration"], marker["cycle"]) == ("in-restore", 2, 5, 1)
    # The next replacement finds both markers and stays quiet.
    with launched(tmp_path, env, worker_args=("--read", str(ck / "iter_0000005" / ".metadata"), "--exit-now"),
                  name="c") as wrapper:
        assert wrapper.await_exit() == 0
    assert "every planned fault was injected" in wrapper.stderr()


@pytest.mark.e2e
def test_last_iteration_fires_at_the_normal_end_once_the_final_checkpoint_is_committed(
        tmp_path: Path, run_dir: Path) -> None:
    tracker = run_dir / "checkpoints" / TRACKER_NAME
    env = rank_env(1, run_dir, NVRX_FAULT_AT="last-iteration")
    write_tracker(tracker, "5")
    with launched(tmp_path, env, worker_args=("--exit-now", "--train-iters", "10"), name="a") as wrapper:
        assert wrapper.await_exit() == 3
    assert "not at the final iteration 10" in wrapper.stderr() and not (run_dir / MARKER_NAME).exists()
    write_tracker(tracker, "10")
    with launched(tmp_path, env, worker_args=("--exit-now", "--train-iters", "10"), name="b") as wrapper:
        assert wrapper.await_exit() == -signal.SIGKILL
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert (marker["fault_at"], marker["iteration"]) == ("last-iteration", 10)


@pytest.mark.e2e
@pytest.mark.parametrize(("kind", "sig"), [("term", signal.SIGTERM), ("poison", signal.SIGKILL)])
def test_term_and_poison_after_commit(tmp_path: Path, run_dir: Path, kind: str, sig: signal.Signals) -> None:
    ck = run_dir / "checkpoints"
    d = make_save(ck, 5, committed=True)
    with launched(tmp_path, rank_env(0, run_dir, NVRX_DEMO_FAULT=kind, NVRX_FAULT_RANK="0")) as wrapper:
        wrapper.ready()
        write_tracker(ck / TRACKER_NAME, "5")
        assert wrapper.await_exit() == -sig
    marker = json.loads((run_dir / MARKER_NAME).read_text())
    assert (marker["fault"], marker["signal"], marker["rank"]) == (kind, sig.name, 0)
    if kind == "poison":
        assert marker["poisoned"] == str(d / "__0_0.distcp") and (d / "__0_0.distcp").stat().st_size == 50
    else:
        assert marker["poisoned"] is None and (d / "__0_0.distcp").stat().st_size == 100


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    (path / "checkpoints").mkdir(parents=True)
    return path


def test_scenarios_are_grouped_by_kind_and_moment() -> None:
    from harness.report.stats import fault_label

    assert fault_label("kill", "after-commit") == "kill" and fault_label("kill", None) == "kill"
    assert fault_label("kill", "in-save") == "kill at in-save"
    assert fault_label("none", "in-save") == "none"


def test_triage_of_a_two_fault_run_names_the_second_marker(tmp_path: Path) -> None:
    """in-restore: the second cycle's death is the second planned fault, and the triage says so
    (it is not an unexplained later failure)."""
    from harness.judge.triage import diagnose
    from recovery_tests import rundirs

    built = rundirs.build(tmp_path / "run", rundirs.Scenario(second_failure_at=17, second_injection=True,
                                                             second_marker=True, moment="in-restore"))
    found = diagnose(built.run_dir)
    assert "this is the fault the harness injected (fault_injected.2.json: SIGKILL)" in found.summary, found.summary


# ---------------------------------------------------------------- the nemesis's moments: one class each


def test_every_moment_of_the_vocabulary_has_its_class_in_the_nemesis() -> None:
    assert set(nemesis.MOMENTS) == set(faults.FAULT_MOMENTS)
    for name, cls in nemesis.MOMENTS.items():
        assert cls.name == name
    # the schedule's index is the marker number: fault i of in-restore claims marker i at its moment
    assert [m.name for m in nemesis.schedule("in-restore")] == ["after-commit", "in-restore"]
    assert [m.name for m in nemesis.schedule("in-save")] == ["in-save"]


def test_a_new_moment_is_one_class_and_its_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What adding a moment takes: its Moment subclass (and its vocabulary row); arm(), the marker,
    the record and the injection need nothing else. Here with an in-process kind, whose action
    stands in for the signal (a signal would end pytest)."""
    import threading

    from harness.vocab.layout import RunLayout

    monkeypatch.setattr(nemesis, "MOMENTS", dict(nemesis.MOMENTS))  # the class below registers itself here

    class AtArm(nemesis.Moment):
        name = "at-arm"

        def waits_for(self) -> str:
            return "at once"

        def wait(self, stop: threading.Event) -> nemesis.Trigger:
            return nemesis.Trigger(7)

        def during(self, trigger: nemesis.Trigger) -> str:
            return ", at arm time"

    done = threading.Event()
    monkeypatch.setitem(faults.FAULT_MOMENTS, "at-arm", faults.FaultMoment("at-arm", "as soon as armed"))
    assert nemesis.MOMENTS["at-arm"] is AtArm
    monkeypatch.setitem(faults.FAULT_KINDS, "note", faults.FaultKind("note", None, "records", injects=faults.IN_PROCESS))
    monkeypatch.setitem(nemesis.IN_PROCESS_ACTIONS, "note", done.set)
    layout = RunLayout.of_dir(tmp_path / "run")
    layout.checkpoints.mkdir(parents=True)
    config = nemesis.NemesisConfig(fault="note", fault_rank=0, rank=0, local_rank=0, cycle=0, layout=layout,
                                   poll_interval=0.01, fault_at="at-arm")
    injector = nemesis.arm(config)
    assert injector is not None and isinstance(injector.moment, AtArm)
    assert done.wait(30), "the new moment never fired"
    record = json.loads(layout.marker_for(1).read_text())
    assert (record["fault"], record["fault_at"], record["iteration"], record["signal"]) == ("note", "at-arm", 7, None)
    injector.disarm()
