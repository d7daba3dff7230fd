"""--baseline auto | none | RUN_DIR: the configuration hash, finding a reusable baseline, and
what `nvrx-qual run` says about it. The twin run beside the fault run when none is found:
test_overlap.py (stand-in launches) and test_baseline_auto.py (real ones)."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.launch import baseline, runner
from harness import cli
from harness.read import evidence
from harness.plan import spec as specmod
from harness.vocab.layout import TRACKER_NAME
from harness.plan.spec import SpecError


def spec_of(tmp_path: Path, **flags) -> specmod.RunSpec:
    values = {"workload": "reference", "work_dir": tmp_path / "work", "run_id": "r1", **flags}
    extra = values.pop("extra", ())
    return specmod.from_sources(values, {}, tuple(extra), detected={})


def test_auto_is_the_default_of_the_cpu_tiers_only(tmp_path):
    assert spec_of(tmp_path).baseline == "auto"
    assert spec_of(tmp_path, workload="megatron-cpu").baseline == "auto"
    assert spec_of(tmp_path, workload="megatron").baseline == "none"


@pytest.mark.parametrize("change", [
    {"fault": "hang"}, {"fault": "none"}, {"fault_rank": 0}, {"fault_at": "in-save"}, {"run_id": "other"},
    {"deadline_profile": "short"}, {"out_of_section_timeout": 99.0}, {"rdzv_endpoint": "127.0.0.1:1"},
    {"step_time_ms": 7}, {"save_delay_ms": 5}, {"nvrx_version": "0.4.1"}, {"max_restarts": 5},
    {"baseline": "none"}, {"extra": ("--no-load-optim",)}, {"extra": ("--drop-on-restore", "data-position")},
])
def test_what_leaves_the_trajectory_alone_keeps_the_hash(tmp_path, change):
    assert baseline.config_hash(spec_of(tmp_path, **change)) == baseline.config_hash(spec_of(tmp_path))


@pytest.mark.parametrize("change", [
    {"train_iters": 31}, {"save_interval": 6}, {"hidden_size": 32}, {"gpus_per_node": 1}, {"micro_batch_size": 2},
    {"global_batch_size": 4}, {"workload": "megatron-cpu"}, {"distributed_optimizer": False},
    {"extra": ("--seed", "7")}, {"extra": ("--lr-decay-style", "linear")},
])
def test_what_shapes_the_trajectory_changes_the_hash(tmp_path, change):
    assert baseline.config_hash(spec_of(tmp_path, **change)) != baseline.config_hash(spec_of(tmp_path))


def test_choices(tmp_path):
    assert baseline.choose(spec_of(tmp_path)).mode == "auto"
    assert baseline.choose(spec_of(tmp_path, baseline="none")).why == "--baseline none"
    assert "itself a baseline" in baseline.choose(spec_of(tmp_path, fault="none")).why
    assert "restart loop" in baseline.choose(spec_of(tmp_path, fault="poison")).why
    with pytest.raises(SpecError, match="does not exist"):
        baseline.choose(spec_of(tmp_path, baseline=str(tmp_path / "nowhere")))


TRAIN_ITERS = 30


def fake_run(work: Path, run_id: str, digest: str, *, fault: str = "none", qualified: bool = True) -> Path:
    """A finished run directory as `nvrx-qual run` leaves one (run.json, logs, the final checkpoint
    with its tracker, verdict.json recording the digest of that evidence)."""
    root = work / "runs" / run_id
    (root / "logs").mkdir(parents=True)
    final = root / "checkpoints" / f"iter_{TRAIN_ITERS:07d}"
    final.mkdir(parents=True)
    (final / ".metadata").write_bytes(b"dcp")
    (root / "checkpoints" / TRACKER_NAME).write_text(str(TRAIN_ITERS))
    (root / "logs" / "train_cycle_cycle0.log").write_text("0: a line\n")
    (root / "run.json").write_text(json.dumps({"spec": {"fault": fault, "train_iters": TRAIN_ITERS},
                                               "config_hash": digest, "dry_run": False}))
    (root / "verdict.json").write_text(json.dumps({"qualified": qualified, "fault": fault,
                                                   "evidence_digest": evidence.digest(root).to_json()}))
    return root


def test_only_a_qualified_uninterrupted_run_of_the_same_hash_is_reused(tmp_path):
    work, digest = tmp_path / "work", "a" * 64
    fake_run(work, "other-config", "b" * 64)
    fake_run(work, "failed", digest, qualified=False)
    fake_run(work, "with-fault", digest, fault="kill")
    assert baseline.find_reusable(work, digest) is None
    good = fake_run(work, "good", digest)
    (work / "runs" / "link").symlink_to(good)
    assert baseline.find_reusable(work, digest) == good
    assert baseline.find_reusable(work, digest, exclude=("good",)) is None


def test_reuse_trusts_the_evidence_not_the_verdicts_flag(tmp_path):
    """A baseline whose checkpoints were pruned after its verdict, or whose final checkpoint is
    gone (even with a verdict.json written again since), or whose verdict records no digest of
    its evidence, is never reused, and says why."""
    work, digest = tmp_path / "work", "a" * 64
    pruned = fake_run(work, "pruned", digest)
    (pruned / "checkpoints" / f"iter_{TRAIN_ITERS:07d}" / ".metadata").unlink()
    assert "its evidence changed since its verdict" in baseline.reuse_problem(pruned, digest)
    rewritten = fake_run(work, "rewritten", digest)
    (rewritten / "checkpoints" / TRACKER_NAME).write_text("25")
    (rewritten / "verdict.json").write_text(json.dumps({"qualified": True, "fault": "none",
                                                        "evidence_digest": evidence.digest(rewritten).to_json()}))
    assert baseline.reuse_problem(rewritten, digest) == ("its final checkpoint is gone (the tracker in checkpoints/ "
                                                         f"says 25, not iteration {TRAIN_ITERS})")
    flagged = fake_run(work, "flagged", digest)
    (flagged / "verdict.json").write_text(json.dumps({"qualified": True, "fault": "none"}))
    assert "records no digest of its evidence" in baseline.reuse_problem(flagged, digest)
    assert baseline.find_reusable(work, digest) is None
    good = fake_run(work, "good", digest)
    assert baseline.reuse_problem(good, digest) is None and baseline.find_reusable(work, digest) == good


def test_a_pruned_baseline_is_passed_over_with_a_line_saying_why(tmp_path):
    """`--baseline auto` with the newest baseline of the configuration pruned: nothing is reused
    (the twin must run: harness.launch.runner.Twin, test_overlap.py), and the console says
    why the old one was passed over."""
    plan = SimpleNamespace(spec=spec_of(tmp_path, run_id="kill-2"), nvrx=None)
    old = fake_run(tmp_path / "work", "kill-1-baseline", baseline.config_hash(plan.spec))
    shutil.rmtree(old / "checkpoints" / f"iter_{TRAIN_ITERS:07d}")
    out = io.StringIO()
    assert runner.find_baseline(plan, out=out) is None
    said = out.getvalue().splitlines()
    assert said[0].startswith(f"baseline: passing over kill-1-baseline (config hash "
                              f"{baseline.short(baseline.config_hash(plan.spec))}): its evidence changed since its "
                              "verdict (the run directory changed since it was judged"), said
    assert len(said) == 1, said


def test_the_second_run_of_a_configuration_reuses_the_twin(tmp_path):
    """The first run of a configuration finds nothing (its twin runs); a later one, of another
    fault, reuses that twin once it qualified, and says so in one line."""
    first = SimpleNamespace(spec=spec_of(tmp_path, run_id="kill-1"), nvrx=None)
    out = io.StringIO()
    assert runner.find_baseline(first, out=out) is None and out.getvalue() == ""
    fake_run(tmp_path / "work", "kill-1-baseline", baseline.config_hash(first.spec))  # what the twin leaves
    again = SimpleNamespace(spec=spec_of(tmp_path, run_id="kill-2", fault="hang"), nvrx=None)
    second = io.StringIO()
    used = runner.find_baseline(again, out=second)
    assert (used.how, used.path.name) == ("reused", "kill-1-baseline")
    digest = baseline.short(baseline.config_hash(again.spec))
    assert second.getvalue() == f"baseline: reusing kill-1-baseline (config hash {digest})\n"
    assert sorted(p.name for p in (tmp_path / "work" / "runs").iterdir()) == ["kill-1-baseline"]


def test_plan_says_what_the_baseline_costs(tmp_path, capsys, clean_spec_env, megatron_checkout):
    work = tmp_path / "work"
    assert cli.main(["plan", "--workload", "reference", "--work-dir", str(work), "--run-id", "p1"]) == 0
    assert ("# baseline: auto: runs the uninterrupted twin beside the fault run (fault none, 30 iterations, config "
            "hash ") in capsys.readouterr().out
    gpu = ["plan", "--workload", "megatron", "--megatron-path", str(megatron_checkout), "--work-dir", str(work),
           "--nvrx-version", "0.7.0", "--transformer-engine", "0", "--apex", "0"]
    assert cli.main([*gpu, "--run-id", "g1"]) == 0
    assert ("# baseline: none: loss_continuity and state_equivalence are not judged; opt in with --baseline auto: "
            "one extra uninterrupted run of 100 iterations") in capsys.readouterr().out
    assert cli.main([*gpu, "--run-id", "g2", "--baseline", "auto"]) == 0
    assert ("# baseline: auto: runs the uninterrupted twin before the fault run (fault none, 100 iterations"
            in capsys.readouterr().out)  # GPU ranks do not share: harness.launch.baseline.twin_beside
    assert cli.main(["plan", "--workload", "reference", "--work-dir", str(work), "--run-id", "p2",
                     "--baseline", str(work / "runs" / "p1")]) == 2  # a dry run's directory: nothing launched
    assert "--baseline" in capsys.readouterr().err


def test_twin_spec(tmp_path):
    spec = dataclasses.replace(spec_of(tmp_path, run_id="k", fault_at="in-save"), rdzv_endpoint="127.0.0.1:5")
    twin = baseline.twin_spec(spec)
    assert (twin.fault, twin.run_id, twin.baseline, twin.fault_at) == ("none", "k-baseline", "none", "after-commit")
    assert twin.rdzv_endpoint != spec.rdzv_endpoint
    assert baseline.config_hash(twin) == baseline.config_hash(spec)
    assert (twin.section_timeouts, twin.deadline_profile) == (spec.section_timeouts, spec.deadline_profile)


def test_a_twin_at_a_lower_priority_gets_patient_deadlines(tmp_path):
    """twin_spec(lowered=True), the twin beside a fault run at a lower CPU priority: no section or
    out-of-section deadline shorter than the default profile's, the workload check interval and
    the configuration hash as they were, a longer deadline of the run's kept."""
    spec = dataclasses.replace(spec_of(tmp_path, run_id="p"), section_timeouts=(
        ("setup", 90.0), ("step", 15.0), ("checkpointing", 1200.0)), out_of_section_timeout=15.0,
        workload_check_interval=1.0, deadline_profile=specmod.CUSTOM_PROFILE)
    twin = baseline.twin_spec(spec, lowered=True)
    floor = specmod.DEADLINE_PROFILES[specmod.DEFAULT_DEADLINE_PROFILE]
    assert twin.section_timeouts == (("setup", 900.0), ("step", 120.0), ("checkpointing", 1200.0))
    assert twin.out_of_section_timeout == floor["out_of_section_timeout"] == 180.0
    assert (twin.workload_check_interval, twin.deadline_profile) == (1.0, specmod.CUSTOM_PROFILE)
    assert baseline.config_hash(twin) == baseline.config_hash(spec)
