"""Every input the seed rules out is refused before anything starts: exit status 2, one
line naming the value and the fix, and nothing created or deleted."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from harness import cli
from harness.plan import spec as specmod
from harness.plan.spec import RunSpec, SpecError


@pytest.fixture
def megatron(megatron_checkout: Path) -> Path:
    return megatron_checkout


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def refused(capsys, tmp_path: Path, argv: list[str]) -> str:
    before = snapshot(tmp_path)
    status = cli.main(["plan", "--nvrx-version", "0.7.0", "--transformer-engine", "1", *argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert snapshot(tmp_path) == before, "a refused plan must not create anything"
    return err


def base(tmp_path: Path, megatron: Path) -> list[str]:
    return ["--megatron-path", str(megatron), "--work-dir", str(tmp_path / "work"), "--run-id", "val-1"]


@pytest.mark.usefixtures("clean_spec_env")
class TestRefusals:
    def test_fault_rank_outside_world(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--fault-rank", "5"])
        assert "--fault-rank=5 is outside the active world of 2 rank(s): choose a rank in 0..1" in err

    def test_default_rank_one_with_one_gpu_says_use_rank_zero(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--gpus-per-node", "1"])
        assert "--fault-rank=1 is outside the active world of 1 rank(s): with one GPU use --fault-rank=0" in err

    def test_world_not_divisible_by_tp_pp(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--gpus-per-node", "6", "--tp", "2", "--pp", "2"])
        assert "world size 6 (--nnodes=1 x --gpus-per-node=6) is not divisible by the model-parallel size 4 (--tp=2 x --pp=2 x --cp=1)" in err

    def test_heads_not_divisible_by_tp(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--gpus-per-node", "3", "--tp", "3"])
        assert "--num-attention-heads=8 is not divisible by --tp=3: choose a tensor-parallel size that divides 8" in err

    def test_layers_not_divisible_by_pp(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--gpus-per-node", "3", "--pp", "3"])
        assert "--num-layers=4 is not divisible by --pp=3: choose a pipeline-parallel size that divides 4" in err

    def test_global_batch_not_divisible_by_micro_times_dp(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--gpus-per-node", "4",
                                                                    "--global-batch-size", "6"])
        assert "global batch size 6 is not divisible by micro batch 1 x DP 4 = 4: " \
               "set --global-batch-size=4 or another multiple of 4" in err

    @pytest.mark.parametrize("run_id", ["bad id", "-leading-dash", "a/b", ".hidden", "ünïcode"])
    def test_run_id_pattern(self, capsys, tmp_path, megatron, run_id):
        argv = [a for a in base(tmp_path, megatron) if a not in ("--run-id", "val-1")] + [f"--run-id={run_id}"]
        err = refused(capsys, tmp_path, argv)
        assert f"--run-id={shlex.quote(run_id)} must match [A-Za-z0-9][A-Za-z0-9._-]*" in err

    def test_run_dir_with_marker_is_refused(self, capsys, tmp_path, megatron):
        run = tmp_path / "work" / "runs" / "val-1"
        run.mkdir(parents=True)
        (run / "fault_injected.json").write_text("{}")
        err = refused(capsys, tmp_path, base(tmp_path, megatron))
        assert "already holds fault_injected.json from an earlier run: use a new --run-id for every test" in err

    @pytest.mark.parametrize("content,expect", [
        (b"", "is empty"),
        (b"  \n", "is empty"),
        (b"release", "holds 'release', not an iteration number"),
        (b"12abc", "holds '12abc', not an iteration number"),
        (b"\xff\xfe10", "is unreadable"),
    ])
    def test_bad_tracker_in_checkpoint_dir(self, capsys, tmp_path, megatron, content, expect):
        ckpt = tmp_path / "old"
        ckpt.mkdir()
        (ckpt / "latest_checkpointed_iteration.txt").write_bytes(content)
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--checkpoint-dir", str(ckpt)])
        assert f"tracker {ckpt}/latest_checkpointed_iteration.txt {expect}" in err
        assert (ckpt / "latest_checkpointed_iteration.txt").read_bytes() == content

    def test_tracker_that_is_a_directory_is_unreadable(self, capsys, tmp_path, megatron):
        ckpt = tmp_path / "old"
        (ckpt / "latest_checkpointed_iteration.txt").mkdir(parents=True)
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--checkpoint-dir", str(ckpt)])
        assert "is unreadable" in err and "never treated as iteration 0" in err

    def test_train_iters_must_exceed_restored_by_two_intervals(self, capsys, tmp_path, megatron):
        ckpt = tmp_path / "old"
        ckpt.mkdir()
        (ckpt / "latest_checkpointed_iteration.txt").write_text("95")
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--checkpoint-dir", str(ckpt)])
        assert "--train-iters=100 must exceed the restored iteration 95 by at least two save intervals " \
               "(2 x --save-interval=5): set --train-iters=105 or more" in err

    def test_ft_state_json_is_refused_with_archive_hint(self, capsys, tmp_path, megatron):
        ckpt = tmp_path / "old"
        ckpt.mkdir()
        (ckpt / "ft_state.json").write_text("{}")
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--checkpoint-dir", str(ckpt)])
        assert f"--checkpoint-dir={ckpt} holds ft_state.json" in err and "archive it deliberately" in err
        assert (ckpt / "ft_state.json").exists()

    def test_missing_checkpoint_dir(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--checkpoint-dir", str(tmp_path / "nope")])
        assert "is not a directory" in err and "leave --checkpoint-dir out for a fresh run" in err

    def test_megatron_path_without_pretrain_gpt(self, capsys, tmp_path, megatron):
        (megatron / "pretrain_gpt.py").unlink()
        err = refused(capsys, tmp_path, base(tmp_path, megatron))
        assert f"--megatron-path={megatron} has no pretrain_gpt.py" in err

    def test_megatron_path_unset(self, capsys, tmp_path):
        err = refused(capsys, tmp_path, ["--work-dir", str(tmp_path / "w"), "--run-id", "x"])
        assert "--megatron-path is not given" in err and "--workload reference" in err

    def test_multinode_needs_rdzv_endpoint(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--nnodes", "2", "--gpus-per-node", "4"])
        assert "--nnodes=2 needs --rdzv-endpoint" in err and "scontrol show hostnames" in err

    def test_multinode_refuses_node_local_tmp(self, capsys, tmp_path, megatron):
        err = refused(capsys, tmp_path, base(tmp_path, megatron) + ["--nnodes", "2", "--gpus-per-node", "4",
                                                                    "--rdzv-endpoint", "node1:29400"])
        assert "is on node-local storage (/tmp); with --nnodes=2 every node must see it" in err

    def test_megatron_needs_nvrx_06(self, capsys, tmp_path, megatron):
        before = snapshot(tmp_path)
        status = cli.main(["plan", "--nvrx-version", "0.4.1", *base(tmp_path, megatron)])
        err = capsys.readouterr().err
        assert status == 2 and "NVRx 0.4.1 cannot run Megatron's --enable-ft-package (it needs >= 0.6.0)" in err
        assert snapshot(tmp_path) == before

    def test_harness_owned_workload_argument(self, capsys, tmp_path, megatron):
        before = snapshot(tmp_path)
        status = cli.main(["plan", "--nvrx-version", "0.7.0", *base(tmp_path, megatron), "--", "--save", "/x"])
        err = capsys.readouterr().err
        assert status == 2 and "workload argument --save is set by the harness" in err
        assert snapshot(tmp_path) == before

    def test_unparsable_environment_value_names_the_variable(self, capsys, tmp_path, megatron, monkeypatch):
        monkeypatch.setenv("TP", "two")
        err = refused(capsys, tmp_path, base(tmp_path, megatron))
        assert "TP='two' is not valid: use a positive integer" in err


@pytest.mark.usefixtures("clean_spec_env")
class TestAccepted:
    def test_none_ignores_fault_rank(self, capsys, tmp_path, megatron):
        status = cli.main(["plan", "--nvrx-version", "0.7.0", *base(tmp_path, megatron), "--gpus-per-node", "1",
                           "--fault", "none"])
        assert status == 0, capsys.readouterr().err
        assert "--fault none --run-dir" in capsys.readouterr().out

    def test_absent_tracker_is_a_fresh_run(self, capsys, tmp_path, megatron):
        ckpt = tmp_path / "empty-ckpt"
        ckpt.mkdir()
        status = cli.main(["plan", "--nvrx-version", "0.7.0", *base(tmp_path, megatron), "--checkpoint-dir", str(ckpt)])
        out = capsys.readouterr().out
        assert status == 0 and "resuming" not in out and f"--save {ckpt} --load {ckpt}" in out

    def test_flag_wins_over_environment(self, capsys, tmp_path, megatron, monkeypatch):
        monkeypatch.setenv("TP", "2")
        monkeypatch.setenv("TRAIN_ITERS", "40")
        status = cli.main(["plan", "--nvrx-version", "0.7.0", *base(tmp_path, megatron), "--tp", "1"])
        out = capsys.readouterr().out
        assert status == 0
        assert "--tensor-model-parallel-size 1 " in out and "--train-iters 40 " in out

    def test_seed_environment_names(self, capsys, tmp_path, megatron, monkeypatch):
        for key, value in {"MEGATRON_PATH": str(megatron), "NVRX_WORK_DIR": str(tmp_path / "w"),
                           "NVRX_RUN_ID": "env-run", "GPUS_PER_NODE": "4", "TP": "2", "NVRX_DEMO_FAULT": "hang",
                           "NVRX_FAULT_RANK": "3"}.items():
            monkeypatch.setenv(key, value)
        status = cli.main(["plan", "--nvrx-version", "0.7.0", "--transformer-engine", "1"])
        out = capsys.readouterr().out
        assert status == 0
        assert f"--run-dir {tmp_path}/w/runs/env-run" in out and "--fault hang --fault-rank 3" in out
        assert "--nproc-per-node 4" in out and "CUDA_DEVICE_MAX_CONNECTIONS=1" in out

    def test_no_run_id_generates_a_fresh_one(self, capsys, tmp_path, megatron, monkeypatch):
        """A run without a run ID gets a fresh one; a dry run (plan) one per scenario, which the
        next dry run of it replaces, so that plans do not pile up in runs/."""
        monkeypatch.delenv("NVRX_RUN_ID", raising=False)
        flags = {"workload": "reference", "work_dir": tmp_path / "work"}
        ids = {specmod.from_sources(flags, {}).run_id for _ in range(2)}
        assert len(ids) == 2 and all(i.startswith("reference-kill-") for i in ids)
        argv = [a for a in base(tmp_path, megatron) if a not in ("--run-id", "val-1")]
        assert cli.main(["plan", "--nvrx-version", "0.7.0", *argv]) == 0
        assert cli.main(["plan", "--nvrx-version", "0.7.0", *argv]) == 0
        runs = sorted(p.name for p in (tmp_path / "work" / "runs").iterdir())
        assert runs == ["megatron-kill-dry-run"]

    def test_dry_run_then_real_run_reuses_the_planned_directory(self, capsys, tmp_path, megatron):
        assert cli.main(["plan", "--nvrx-version", "0.7.0", *base(tmp_path, megatron)]) == 0
        assert cli.main(["plan", "--nvrx-version", "0.7.0", *base(tmp_path, megatron)]) == 0


def test_shared_storage_rule_with_probe(tmp_path):
    class Probe:
        def __init__(self, fstype):
            self.fstype = fstype

        def fs_type(self, path):
            return self.fstype

    spec = RunSpec(workload="reference", work_dir=Path("/lustre/me/work"), run_id="ms", nnodes=2,
                   rdzv_endpoint="n1:29400")
    specmod.validate(spec, Probe("lustre"))
    specmod.validate(spec, Probe("nfs4"))
    with pytest.raises(SpecError, match=r"--work-dir=/lustre/me/work is on a ext4 filesystem, not a network"):
        specmod.validate(spec, Probe("ext4"))
    with pytest.raises(SpecError, match="unknown filesystem"):
        specmod.validate(spec, Probe(None))


def test_system_probe_reads_proc_mounts():
    fstype = specmod.SystemProbe().fs_type(Path("/proc/self"))
    assert fstype == "proc"


@pytest.mark.usefixtures("clean_spec_env")
def test_dry_run_through_run_allocates_nothing(capsys, monkeypatch, fresh_run):
    """NVRX_DRY_RUN=1 nvrx-qual run: validates, creates the artifact directories and run.json,
    prints the exact command, launches nothing."""
    work, run_id = fresh_run
    monkeypatch.setenv("NVRX_DRY_RUN", "1")
    status = cli.main(["run", "--workload", "reference", "--work-dir", str(work), "--run-id", run_id,
                       "--nvrx-version", "0.7.0"])
    out = capsys.readouterr().out
    run = work / "runs" / run_id
    assert status == 0 and "# dry run: nothing launched" in out
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "cycle_infos", "logs", "run.json"]
    assert not any((run / "logs").iterdir()) and not (run / "launch.json").exists()
    record = json.loads((run / "run.json").read_text())
    assert record["dry_run"] is True and record["spec"]["run_id"] == run_id
    assert shlex.join(record["commands"][0]["argv"]) in out  # exactly what would run
