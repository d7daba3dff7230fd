"""The optimizer's own record read offline from a torch_dist checkpoint: Adam's step counters
and the optimizer slots' moments, from a checkpoint that may come from a stranger (no link
followed, no FIFO read, no code from a pickle run, every offset range-checked)."""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

from harness.read.optimizer_record import _steps, read_optimizer_record  # noqa: E402

BUCKET = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32).bucket_idx_0"
STEP_KEY = "optimizer.distributed.dp_group_idx_0.optimizer"


def write(directory: Path, *, step: object = 8.0, moments=("param", "exp_avg", "exp_avg_sq"), groups=None) -> Path:
    state: dict[str, object] = {f"{BUCKET}.{name}": torch.zeros(8) for name in moments}
    state["decoder.weight"] = torch.ones(4)
    if groups is not None or step is not None:
        state[STEP_KEY] = ({"param_groups": groups if groups is not None else [{"step": step}, {"step": step}]},)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(directory)), no_dist=True)
    return directory


def test_steps_and_moments_of_a_distributed_optimizer_checkpoint(tmp_path):
    rec = read_optimizer_record(write(tmp_path / "iter_0000008"))
    assert (rec.key, rec.steps, rec.moment_slots, rec.missing_count, rec.note) == (STEP_KEY, (8.0, 8.0), 1, 0, None)


def test_megatrons_own_object_shape_a_list_of_param_group_holders():
    assert _steps([{"param_groups": [{"lr": 1e-4, "step": 4.0}, {"lr": 1e-4, "step": 4.0}]}]) == (4.0, 4.0)
    assert _steps([{"param_groups": [{"lr": 1e-4}]}]) == ()  # groups without a step (no counter recorded)


def test_a_slot_without_its_moments_is_named(tmp_path):
    rec = read_optimizer_record(write(tmp_path / "iter_0000008", moments=("param", "exp_avg")))
    assert (rec.missing_count, rec.missing_moments) == (1, (BUCKET,))


def test_no_step_object_is_no_counter_not_an_error(tmp_path):
    rec = read_optimizer_record(write(tmp_path / "iter_0000008", step=None))
    assert (rec.key, rec.steps, rec.note) == (None, (), None)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "8", True, 1e13])
def test_a_step_that_is_no_step_count_is_refused(tmp_path, bad):
    rec = read_optimizer_record(write(tmp_path / "iter_0000008", step=bad))
    assert rec.steps is None and "not a step count" in rec.note


def test_an_object_that_needs_more_than_plain_types_is_not_unpickled(tmp_path):
    rec = read_optimizer_record(write(tmp_path / "iter_0000008", groups=[{"step": 8.0, "args": argparse.Namespace()}]))
    assert rec.steps is None and "is not a plain optimizer record" in rec.note
    assert "argparse.Namespace, which is not on the suite's allow-list" in rec.note


def test_a_linked_iteration_directory_is_not_followed(tmp_path):
    real = write(tmp_path / "real")
    (tmp_path / "iter_0000008").symlink_to(real)
    rec = read_optimizer_record(tmp_path / "iter_0000008")
    assert rec.steps is None and "cannot be opened as a directory" in rec.note


def test_a_linked_or_fifo_metadata_file_is_not_read(tmp_path):
    d = write(tmp_path / "iter_0000008")
    (d / ".metadata").rename(tmp_path / "elsewhere")
    (d / ".metadata").symlink_to(tmp_path / "elsewhere")
    assert "cannot be opened" in read_optimizer_record(d).note
    (d / ".metadata").unlink()
    os.mkfifo(d / ".metadata")
    assert read_optimizer_record(d).note == ".metadata is not a regular file"


def test_metadata_naming_anything_but_dcp_classes_runs_no_code(tmp_path):
    d = write(tmp_path / "iter_0000008")
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return subprocess.call, (["touch", str(marker)],)

    (d / ".metadata").write_bytes(pickle.dumps(Exploit()))
    rec = read_optimizer_record(d)
    assert rec.steps is None and "names subprocess.call, which is not on the suite's allow-list" in rec.note
    assert not marker.exists()


def test_an_offset_beyond_the_file_is_refused(tmp_path):
    d = write(tmp_path / "iter_0000008")
    metadata = dcp.FileSystemReader(str(d)).read_metadata()
    for index, info in metadata.storage_data.items():
        if index.fqn == STEP_KEY:
            info.offset = 10 ** 9
    (d / ".metadata").write_bytes(pickle.dumps(metadata))
    rec = read_optimizer_record(d)
    assert rec.steps is None and "beyond the end of __0_0.distcp" in rec.note


def test_listing_optimizer_keys_runs_no_code_from_the_metadata_either(tmp_path):
    """history's key listing for optimizer_reload reads .metadata the same guarded way."""
    from harness.read.history import dcp_optimizer_keys

    d = write(tmp_path / "iter_0000008")
    assert dcp_optimizer_keys(d)[:2] == (2, 5)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return subprocess.call, (["touch", str(marker)],)

    (d / ".metadata").write_bytes(pickle.dumps(Exploit()))
    opt, total, _, note = dcp_optimizer_keys(d)
    assert (opt, total) == (None, None) and "names subprocess.call" in note
    assert not marker.exists()


def test_a_chained_distributed_optimizer_is_read_per_optimizer(tmp_path):
    """Megatron's ChainedOptimizer of DistributedOptimizers prefixes each one's keys with
    `chained_<i>.`: one step object per optimizer is read, and every counter must be there."""
    state: dict[str, object] = {}
    for i, step in enumerate((8.0, 3.0)):
        for name in ("param", "exp_avg", "exp_avg_sq"):
            state[f"chained_{i}.{BUCKET}.{name}"] = torch.zeros(8)
        state[f"chained_{i}.{STEP_KEY}"] = ({"param_groups": [{"step": step}]},)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path / "iter_0000008")), no_dist=True)
    rec = read_optimizer_record(tmp_path / "iter_0000008")
    assert (rec.key, rec.steps, rec.moment_slots, rec.missing_count) == (
        f"chained_0.{STEP_KEY} (and 1 more)", (8.0, 3.0), 2, 0)


def test_a_tensor_chunk_is_read_through_the_same_reader(tmp_path):
    """The API the end-state comparison uses: every chunk of a tensor, bounded, as a tensor."""
    from harness.read.optimizer_record import read_dcp_metadata, read_dcp_object

    d = write(tmp_path / "iter_0000008")
    md = read_dcp_metadata(d)
    assert md.state_dict_metadata["decoder.weight"].size == (4,)
    [(index, _)] = [(i, v) for i, v in md.storage_data.items() if i.fqn == "decoder.weight"]
    assert read_dcp_object(d, md, "decoder.weight", index=index).tolist() == [1.0] * 4
    with pytest.raises(ValueError, match="out of range"):
        read_dcp_object(d, md, "decoder.weight", index=index, limit=8)
