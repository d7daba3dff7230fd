"""state_equivalence: the final checkpoint's tensors against the baseline's, read offline from
real DCP checkpoints (written here by PyTorch) without unpickling anything; bitwise for a
deterministic workload, else within the tolerance of each tensor class; unknown when a
checkpoint cannot be read, never a crash; a link, a FIFO or a range beyond the file refused."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

from harness.read import end_state
from harness.judge.criteria import FAIL, LOSS_CONTINUITY, NOT_APPLICABLE, PASS, STATE_EQUIVALENCE, UNKNOWN
from harness.report.verify import verify_run
from recovery_tests.rundirs import Scenario, build

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

DIST = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0"
FC1 = "decoder.layers.0.mlp.linear_fc1.weight"


def state(**changes) -> dict:
    """A small Megatron-like state dict: a bf16 and an fp32 model tensor, the distributed
    optimizer's flat buffers, and two pickled objects (DCP bytes items)."""
    values = {
        FC1: torch.arange(16.0).reshape(4, 4).to(torch.bfloat16),
        "embedding.word_embeddings.weight": torch.linspace(-1, 1, 24).reshape(6, 4),
        f"{DIST}.param": torch.linspace(0, 1, 40),
        f"{DIST}.exp_avg": torch.full((40,), 1e-3),
        f"{DIST}.exp_avg_sq": torch.full((40,), 1e-6),
        "common_state": {"iteration": 30},
        "optimizer.distributed.dp_group_idx_0.optimizer": ({"param_groups": [{"step": 30.0}]},),
    }
    values.update(changes)
    return {k: v for k, v in values.items() if v is not None}


def save(directory: Path, values: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(values, storage_writer=dcp.FileSystemWriter(str(directory)))
    return directory


def compare(tmp_path: Path, ours: dict, theirs: dict):
    a, b = save(tmp_path / "run" / "iter_0000030", ours), save(tmp_path / "base" / "iter_0000030", theirs)
    return end_state.compare_checkpoints(a, b, shown="checkpoints/iter_0000030",
                                         baseline_shown="base/checkpoints/iter_0000030", iteration=30)


def test_equal_checkpoints_compare_equal_tensor_by_tensor(tmp_path):
    c = compare(tmp_path, state(), state())
    assert c.note is None, c.note
    assert dict(c.compared) == {"model": 2, "optimizer.param": 1, "optimizer.exp_avg": 1, "optimizer.exp_avg_sq": 1}
    assert c.differing_count == 0 and c.missing_count == 0
    assert c.not_compared_count == 2 and "common_state.iteration" in c.not_compared


def test_the_first_differing_tensor_is_named_with_its_max_abs_difference(tmp_path):
    changed = torch.linspace(0, 1, 40)
    changed[7] += 0.25
    c = compare(tmp_path, state(**{f"{DIST}.param": changed, f"{DIST}.exp_avg": torch.full((40,), 2e-3)}), state())
    assert c.differing_count == 2 and c.outside_tolerance_count == 2
    first = c.differing[0]
    assert (first.key, first.tensor_class) == (f"{DIST}.param", "optimizer.param")
    assert first.max_abs_diff == pytest.approx(0.25, rel=1e-6)
    assert dict(c.max_abs_diff)["optimizer.exp_avg"] == pytest.approx(1e-3)


def test_a_tiny_difference_is_within_tolerance_but_not_bitwise(tmp_path):
    nudged = torch.linspace(0, 1, 40) * (1 + 1e-6)
    c = compare(tmp_path, state(**{f"{DIST}.param": nudged}), state())
    assert c.differing_count == 1 and c.outside_tolerance_count == 0
    assert c.differing[0].within_tolerance


def test_a_tensor_only_one_side_holds_is_named(tmp_path):
    c = compare(tmp_path, state(), state(**{"decoder.final_layernorm.weight": torch.ones(4)}))
    assert c.missing_count == 1 and c.missing == ("decoder.final_layernorm.weight (only in the baseline's)",)


def test_nothing_is_unpickled(tmp_path, monkeypatch):
    """Tensor bytes come out of torch.save's archive with zipfile; bytes items are only listed."""
    ours, theirs = save(tmp_path / "a", state()), save(tmp_path / "b", state())

    def refuse(*_a, **_k):
        raise AssertionError("unpickled a checkpoint item")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr("pickle.loads", refuse)
    c = end_state.compare_checkpoints(ours, theirs, shown="a", baseline_shown="b", iteration=30)
    assert c.note is None and c.compared_count == 5


def _shard(directory: Path) -> Path:
    return next(directory.glob("__*_*.distcp"))


@pytest.mark.parametrize("damage", ["symlink", "fifo", "truncated", "not-a-zip"])
def test_an_unreadable_shard_is_a_reason_never_a_crash(tmp_path, damage):
    ours, theirs = save(tmp_path / "a", state()), save(tmp_path / "b", state())
    shard = _shard(ours)
    if damage == "symlink":
        target = tmp_path / "elsewhere.distcp"
        shutil.move(shard, target)
        shard.symlink_to(target)
    elif damage == "fifo":
        shard.unlink()
        os.mkfifo(shard)
    elif damage == "truncated":
        os.truncate(shard, 100)
    else:
        shard.write_bytes(b"\0" * shard.stat().st_size)
    c = end_state.compare_checkpoints(ours, theirs, shown="a", baseline_shown="b", iteration=30)
    expected = {"symlink": "cannot be opened", "fifo": "not a regular file", "truncated": "beyond the end",
                "not-a-zip": "neither a torch.save archive"}[damage]
    assert c.note is not None and expected in c.note, c.note
    assert c.note.startswith("a: ")


def test_the_tensor_classes():
    cls = end_state.tensor_class
    assert cls(FC1) == "model"
    assert cls("optimizer.state.fp32_param.embedding.word_embeddings.weight") == "optimizer.param"
    assert cls("optimizer.state.exp_avg_sq.decoder.layers.mlp.linear_fc1.weight") == "optimizer.exp_avg_sq"
    assert cls("chained_1.optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight") == "optimizer.exp_avg"
    assert cls(f"{DIST}.exp_avg") == "optimizer.exp_avg" and cls(f"{DIST}.param") == "optimizer.param"
    assert cls(f"{DIST}.exp_avg_sq[4096]") == "optimizer.exp_avg_sq"  # one chunk of a sharded buffer
    assert cls("decoder.layers.mlp.linear_fc1.weight[1,0,0]") == "model"


# ---------------------------------------------------------------- the criterion, through verify


def runs(tmp_path: Path, workload: str = "megatron") -> tuple[Path, Path]:
    """A recovered kill run and its uninterrupted baseline (recovery_tests.rundirs), with
    run.json naming `workload`: their checkpoints hold the same tensors."""
    run, base = build(tmp_path / "kill", Scenario()).run_dir, build(tmp_path / "base", Scenario(fault="none")).run_dir
    for root in (run, base):
        doc = json.loads((root / "run.json").read_text())
        doc["spec"]["workload"] = workload
        (root / "run.json").write_text(json.dumps(doc))
    return run, base


def final(root: Path) -> Path:
    return max((root / "checkpoints").glob("iter_*"))


def rewrite_final(root: Path, values: dict) -> None:
    d = final(root)
    committed = (d / "metadata.json").read_text()
    shutil.rmtree(d)
    save(d, values)
    (d / "metadata.json").write_text(committed)


def criterion(run: Path, base: Path | None):
    return verify_run(run, baseline=base, picture=False).criterion(STATE_EQUIVALENCE)


def test_same_end_state_passes_and_no_baseline_leaves_it_out(tmp_path):
    run, base = runs(tmp_path, "reference")
    c = criterion(run, base)
    assert c.status == PASS, c.detail
    assert "equal the uninterrupted baseline's base/checkpoints/iter_0000030 bitwise" in c.detail
    assert "reference workload is bitwise deterministic" in c.detail
    ids = [x.id for x in verify_run(run, picture=False).criteria]
    assert STATE_EQUIVALENCE not in ids and LOSS_CONTINUITY not in ids


def test_deterministic_workload_fails_on_any_difference_naming_the_tensor(tmp_path):
    run, base = runs(tmp_path, "reference")
    values = state()
    for root, weights in ((run, values[FC1] + 1), (base, values[FC1])):
        rewrite_final(root, state(**{FC1: weights}))
    c = criterion(run, base)
    assert c.status == FAIL, c.detail
    assert f"the first is {FC1} (model, max abs difference 1;" in c.detail
    assert "beyond bitwise equality" in c.detail
    assert any(e.startswith(f"checkpoints/iter_0000030/{FC1}:0: 16 bfloat16 values, max |run - baseline| = 1")
               for e in c.evidence), c.evidence


def test_non_deterministic_workload_names_the_tolerance(tmp_path):
    run, base = runs(tmp_path, "megatron")
    rewrite_final(base, state())
    rewrite_final(run, state(**{f"{DIST}.param": torch.linspace(0, 1, 40) * (1 + 1e-6)}))
    c = criterion(run, base)
    assert c.status == PASS, c.detail
    assert "within the tolerance of their class" in c.detail and "optimizer.param rtol=0.0001 atol=1e-06" in c.detail
    rewrite_final(run, state(**{f"{DIST}.exp_avg_sq": torch.full((40,), 2e-6)}))
    c = criterion(run, base)
    assert c.status == FAIL and "the optimizer.exp_avg_sq tolerance rtol=0.02, atol=1e-12" in c.detail, c.detail


def test_unreadable_checkpoint_is_unknown(tmp_path):
    run, base = runs(tmp_path, "reference")
    os.truncate(_shard(final(run)), 10)
    c = criterion(run, base)
    assert c.status == UNKNOWN and "could not be compared" in c.detail, c.detail


def test_baseline_without_the_same_iteration_is_unknown(tmp_path):
    run, base = runs(tmp_path, "reference")
    shutil.rmtree(final(base))
    c = criterion(run, base)
    assert c.status == UNKNOWN and "checkpoint of iteration 30 is not there" in c.detail, c.detail


def test_a_baseline_of_another_configuration_is_noted(tmp_path):
    run, base = runs(tmp_path, "reference")
    for root, digest in ((run, "a" * 64), (base, "b" * 64)):
        doc = json.loads((root / "run.json").read_text())
        doc["config_hash"] = digest
        (root / "run.json").write_text(json.dumps(doc))
    verdict = verify_run(run, baseline=base, picture=False)
    assert verdict.baseline is not None and verdict.baseline.matches_run is False
    assert any("was run with another configuration (config hash bbbbbbbbbbbb" in n for n in verdict.notes)
    assert verdict.to_json()["baseline"]["how"] == "given"
    from harness.report.outputs import render_report
    from harness.vocab.verdict import Verdict

    assert Verdict.from_json(verdict.to_json()).to_json() == verdict.to_json()  # verdict.json round trip
    assert "another configuration than this run" in render_report(verdict)


def test_no_restore_is_not_applicable(tmp_path):
    base = build(tmp_path / "base", Scenario(fault="none")).run_dir
    run = build(tmp_path / "random", Scenario(restart_from_random=True)).run_dir
    assert criterion(run, base).status == NOT_APPLICABLE


def test_a_deterministic_workload_gets_no_tolerance(tmp_path):
    """The same tiny difference passes on a GPU workload (above) and fails on the reference one."""
    run, base = runs(tmp_path, "reference")
    rewrite_final(base, state())
    rewrite_final(run, state(**{f"{DIST}.param": torch.linspace(0, 1, 40) * (1 + 1e-6)}))
    c = criterion(run, base)
    assert c.status == FAIL and "beyond bitwise equality (the reference workload is bitwise deterministic)" in c.detail


def test_equal_values_in_another_memory_layout_are_not_compared_byte_for_byte(tmp_path):
    """The layout records must match: a transposed storage with equal values is not called different."""
    x = torch.arange(16.0).reshape(4, 4)
    c = compare(tmp_path, state(**{"embedding.word_embeddings.weight": x.t().contiguous().t()}),
                state(**{"embedding.word_embeddings.weight": x}))
    assert c.note is not None and "laid out differently" in c.note, c
