"""A job that shrinks: `--nnodes MIN:MAX`.

What NVRx 0.7.0 does with it (docs/slurm.md, "A job that shrinks", and the Slurm run of
test_slurm_cluster.py): its rendezvous makes the first MIN nodes active and the rest standby,
so `--nnodes 1:2` runs one node's ranks with a hot spare, never a 2-node job that goes on with
one. The plan refuses to pretend otherwise (exit 2, naming the equivalent --hot-spares plan).
Older launchers (torch elastic's rendezvous, NVRx 0.4.1) can run a job that shrinks; whatever
launcher ran it, the verdict must judge such a run: the criteria read Megatron's world_size in
every cycle, name the shrink, accept it only when the plan allowed it, and a restore that fails
or starts over after it is a named failure."""

from __future__ import annotations

import pytest

from harness import cli
from harness.judge.criteria import FAIL, PASS
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario


def test_spec_reads_min_max_nodes_and_the_plan_passes_it_to_an_elastic_launcher(tmp_path, clean_spec_env, capsys):
    argv = ["plan", "--workload", "reference", "--nvrx-version", "0.4.1", "--nnodes", "1:2", "--rdzv-endpoint",
            "node001:29400", "--assume-shared-storage", "1", "--work-dir", str(tmp_path), "--run-id", "elastic"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    [command] = [line for line in out.splitlines() if not line.startswith("#")]
    assert " --nnodes 1:2 " in command
    assert "may go on with as few as 1" in out
    assert '"min_nnodes": 1' in (tmp_path / "runs" / "elastic" / "run.json").read_text()


def test_nvrx_070_has_no_shrinking_job_and_the_plan_says_so(tmp_path, clean_spec_env, capsys):
    """NVRx >= 0.6's rendezvous: MIN active, MAX-MIN standby. `--nnodes 1:2` would silently run
    2 ranks, not 4: refused before anything starts, naming what the launcher would do."""
    argv = ["plan", "--workload", "reference", "--nvrx-version", "0.7.0", "--nnodes", "1:2", "--rdzv-endpoint",
            "node001:29400", "--assume-shared-storage", "1", "--work-dir", str(tmp_path / "w"), "--run-id", "s"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--nnodes=1:2 asks for a job of 2 nodes that may shrink to 1; NVRx 0.7.0 has no such job: its " \
           "rendezvous makes the first MIN nodes active and the other MAX-MIN standby" in err
    assert "use --nnodes=1 --hot-spares=1" in err
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(("nnodes", "why"), [
    ("3:2", "MIN must be at least 1 and at most MAX"),
    ("0:2", "MIN must be at least 1 and at most MAX"),
])
def test_bad_ranges_are_refused(nnodes, why, tmp_path, clean_spec_env, capsys):
    argv = ["plan", "--workload", "reference", "--nvrx-version", "0.4.1", "--nnodes", nnodes, "--rdzv-endpoint",
            "node001:29400", "--assume-shared-storage", "1", "--work-dir", str(tmp_path), "--run-id", "b"]
    assert cli.main(argv) == 2
    assert why in capsys.readouterr().err


def test_a_shrink_that_breaks_the_layout_is_refused(tmp_path, clean_spec_env, capsys):
    argv = ["plan", "--workload", "reference", "--nvrx-version", "0.4.1", "--nnodes", "1:2", "--gpus-per-node", "2",
            "--tp", "2", "--pp", "2", "--rdzv-endpoint", "node001:29400", "--assume-shared-storage", "1",
            "--work-dir", str(tmp_path), "--run-id", "b"]
    assert cli.main(argv) == 2
    assert "--nnodes=1:2: after a shrink to 1 node(s) the job runs a world of 2, and then world size 2" in \
        capsys.readouterr().err


def verdict_of(tmp_path, **kw):
    built = rundirs.build(tmp_path / "run", Scenario(world=4, world_after=2, nnodes=2, **kw))
    return verify_run(built.run_dir)


def test_an_allowed_shrink_is_named_and_a_resharded_load_with_optimizer_state_passes(tmp_path):
    verdict = verdict_of(tmp_path, min_nnodes=1)
    c = verdict.criterion("replacement_cycle")
    assert c.status == PASS and "the job shrank, as its --nnodes 1:2 allows: world size 4 (DP 4) in cycle 0, 2 " \
        "(DP 2) in cycle 1 (Megatron's arguments)" in c.detail, c.detail
    assert any("world_size" in e for e in c.evidence), c.evidence
    r = verdict.criterion("optimizer_reload")
    assert r.status == PASS and "resharded: the checkpoint saved by 4 ranks was loaded by 2, with its optimizer " \
        "state" in r.detail, r.detail


def test_a_shrink_the_plan_did_not_allow_fails_replacement_cycle(tmp_path):
    verdict = verdict_of(tmp_path)
    c = verdict.criterion("replacement_cycle")
    assert c.status == FAIL and "the job shrank: world size 4 (DP 4) in cycle 0, 2 (DP 2) in cycle 1" in c.detail
    assert "the plan asked for a fixed number of nodes (no --nnodes MIN:MAX)" in c.detail, c.detail
    assert not verdict.qualified


def test_a_resharded_load_without_optimizer_state_fails_naming_the_shrink(tmp_path):
    verdict = verdict_of(tmp_path, min_nnodes=1, silent_optimizer_skip=True)
    r = verdict.criterion("optimizer_reload")
    assert r.status == FAIL and "after the job shrank: world size 4 (DP 4) in cycle 0, 2 (DP 2) in cycle 1" in r.detail
    assert "without its optimizer state" in r.detail, r.detail


def test_a_shrunk_job_that_starts_over_is_a_named_failure(tmp_path):
    verdict = verdict_of(tmp_path, min_nnodes=1, restart_from_random=True)
    r = verdict.criterion("optimizer_reload")
    assert r.status == FAIL and "after the job shrank" in r.detail and "started from random" in r.detail, r.detail
    assert not verdict.qualified
