"""harness.safe.safe_unpickle, the suite's one restricted unpickler, and the plain / chained
optimizer's record it makes readable, on a real megatron-cpu common state.

recovery_tests/data/megatron_cpu/ holds what megatron-core 0.19.2 wrote in a real run
(`nvrx-qual run --workload megatron-cpu --fault kill --distributed-optimizer 0`, bf16, 2 ranks):
`common_state_iter8.pt`, the raw bytes of the DCP object `common_state/shard_0_1` of
iter_0000008 (31 KB: mostly Megatron's arguments), and `keys_iter8.tsv`, the keys, sizes and
dtypes of that checkpoint's `.metadata`."""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import pytest

from harness.safe import safe_unpickle
from harness.safe.safe_unpickle import COMMON_STATE, UnpickleRefused, admitted, load_pickle, load_torch_save

from . import hostile

torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data" / "megatron_cpu"
COMMON = (DATA / "common_state_iter8.pt").read_bytes()

# Every pair the unpickler admits. A new entry must be argued for (it widens what a received
# checkpoint can make the suite build) and added here on purpose.
GOLDEN = """
common_state: argparse.Namespace (stub)
common_state: collections.OrderedDict (checked)
common_state: megatron.core.enums.ModelType (stub)
common_state: megatron.core.optimizer.optimizer_config.OptimizerConfig (stub)
common_state: megatron.core.rerun_state_machine.RerunDiagnostic (stub)
common_state: megatron.core.rerun_state_machine.RerunMode (stub)
common_state: megatron.core.rerun_state_machine.RerunState (stub)
common_state: megatron.core.transformer.enums.AttnBackend (stub)
common_state: megatron.core.transformer.enums.CudaGraphModule (stub)
common_state: megatron.core.transformer.enums.CudaGraphScope (stub)
common_state: megatron.core.transformer.enums.InferenceCudaGraphScope (stub)
common_state: pathlib.PosixPath (stub)
common_state: signal.Signals (stub)
common_state: torch.BFloat16Storage (checked)
common_state: torch.BoolStorage (checked)
common_state: torch.ByteStorage (checked)
common_state: torch.CharStorage (checked)
common_state: torch.DoubleStorage (checked)
common_state: torch.FloatStorage (checked)
common_state: torch.HalfStorage (checked)
common_state: torch.IntStorage (checked)
common_state: torch.LongStorage (checked)
common_state: torch.ShortStorage (checked)
common_state: torch.Size (checked)
common_state: torch._utils._rebuild_tensor_v2 (checked)
common_state: torch.bfloat16 (checked)
common_state: torch.bool (checked)
common_state: torch.float16 (checked)
common_state: torch.float32 (checked)
common_state: torch.float64 (checked)
common_state: torch.int16 (checked)
common_state: torch.int32 (checked)
common_state: torch.int64 (checked)
common_state: torch.int8 (checked)
common_state: torch.storage.UntypedStorage (checked)
common_state: torch.uint8 (checked)
common_state: types.SimpleNamespace (stub)
metadata: pathlib.PosixPath (stub)
metadata: pathlib.PurePosixPath (stub)
metadata: torch.Size (checked)
metadata: torch.bfloat16 (checked)
metadata: torch.bool (checked)
metadata: torch.distributed.checkpoint.filesystem._StorageInfo (stub-checked)
metadata: torch.distributed.checkpoint.metadata.BytesStorageMetadata (stub-checked)
metadata: torch.distributed.checkpoint.metadata.ChunkStorageMetadata (stub-checked)
metadata: torch.distributed.checkpoint.metadata.Metadata (stub-checked)
metadata: torch.distributed.checkpoint.metadata.MetadataIndex (stub-checked)
metadata: torch.distributed.checkpoint.metadata.StorageMeta (stub-checked)
metadata: torch.distributed.checkpoint.metadata.TensorProperties (stub-checked)
metadata: torch.distributed.checkpoint.metadata.TensorStorageMetadata (stub-checked)
metadata: torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING (stub-checked)
metadata: torch.distributed.checkpoint.planner.SavePlan (stub-checked)
metadata: torch.distributed.checkpoint.planner.TensorWriteData (stub-checked)
metadata: torch.distributed.checkpoint.planner.WriteItem (stub-checked)
metadata: torch.distributed.checkpoint.planner.WriteItemType (stub-checked)
metadata: torch.float16 (checked)
metadata: torch.float32 (checked)
metadata: torch.float64 (checked)
metadata: torch.int16 (checked)
metadata: torch.int32 (checked)
metadata: torch.int64 (checked)
metadata: torch.int8 (checked)
metadata: torch.serialization._get_layout (checked)
metadata: torch.uint8 (checked)
tensors: collections.OrderedDict (checked)
tensors: torch.BFloat16Storage (checked)
tensors: torch.BoolStorage (checked)
tensors: torch.ByteStorage (checked)
tensors: torch.CharStorage (checked)
tensors: torch.DoubleStorage (checked)
tensors: torch.FloatStorage (checked)
tensors: torch.HalfStorage (checked)
tensors: torch.IntStorage (checked)
tensors: torch.LongStorage (checked)
tensors: torch.ShortStorage (checked)
tensors: torch.Size (checked)
tensors: torch._utils._rebuild_tensor_v2 (checked)
tensors: torch.bfloat16 (checked)
tensors: torch.bool (checked)
tensors: torch.float16 (checked)
tensors: torch.float32 (checked)
tensors: torch.float64 (checked)
tensors: torch.int16 (checked)
tensors: torch.int32 (checked)
tensors: torch.int64 (checked)
tensors: torch.int8 (checked)
tensors: torch.storage.UntypedStorage (checked)
tensors: torch.uint8 (checked)
""".split("\n")[1:-1]


def test_the_allow_list_admits_exactly_the_golden_pairs():
    assert admitted() == GOLDEN, "the allow-list changed: argue for each new pair and add it to GOLDEN"


def test_every_checked_pair_is_defined_where_the_pickle_names_it():
    """A real or checked pair resolves only when getattr(import_module(m), n) is defined in m."""
    for profile, pairs in safe_unpickle.ALLOWED.items():
        for (module, name), kind in pairs.items():
            if kind != "stub":
                safe_unpickle._defined_there(module, name)  # raises when not


def test_a_name_a_module_merely_imports_is_refused(monkeypatch):
    """TCPStore is reachable as torch.distributed.checkpoint._async_process_executor.TCPStore; even
    on the list it would not resolve there, since it is defined in torch._C."""
    pair = ("torch.distributed.checkpoint._async_process_executor", "TCPStore")
    monkeypatch.setitem(safe_unpickle.ALLOWED[safe_unpickle.METADATA], pair, "real")
    with pytest.raises(UnpickleRefused, match="imported there, not defined there"):
        load_pickle(hostile.listen(1), "x.metadata")


@pytest.mark.parametrize("attack", sorted(hostile.ATTACKS))
def test_each_hostile_pickle_is_refused_by_name(tmp_path, attack):
    payload = hostile.ATTACKS[attack]({"directory": str(tmp_path / "d"), "process": str(tmp_path / "d"),
                                       "port": 1, "fd": 999}[attack])
    for profile in safe_unpickle.ALLOWED:
        with pytest.raises(UnpickleRefused, match=r"x\.metadata names torch\.distributed\.checkpoint\..* not on"):
            load_pickle(payload, "x.metadata", profile)
    assert not (tmp_path / "d").exists()


def test_what_comes_out_is_type_checked():
    with pytest.raises(UnpickleRefused, match="holds an integer of 16601 bits"):
        load_pickle(b"\x80\x02" + b"\x8b" + (2076).to_bytes(4, "little") + b"\x01" * 2076 + b".", "x")
    with pytest.raises(UnpickleRefused, match="nests deeper than"):
        load_pickle(hostile.nested_tuple_key(200), "x")
    with pytest.raises(UnpickleRefused, match="amplification"):
        load_pickle(hostile.amplified(levels=30), "x")
    pairs = b"".join(b"M" + i.to_bytes(2, "little") + b"N\x86" for i in range(2000))
    copies = b"ccollections\nOrderedDict\nq\x00]q\x01(" + pairs + b"e0(" + b"h\x00h\x01\x85R" * 4000 + b"l."
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(UnpickleRefused, match="amplification"):  # 28 KB copying 2000 pairs 4000 times
            load_torch_save(hostile.torch_save_zip(b"\x80\x02" + copies), "x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20, f"copies while loading reached {peak >> 20} MiB before the refusal"
    with pytest.raises(UnpickleRefused, match="refers to external data"):
        load_pickle(b"\x80\x02X\x01\x00\x00\x00aQ.", "x")


def test_a_real_megatron_common_state_loads_inert(tmp_path):
    """Megatron's arguments and enums come back as stubs; megatron is never imported."""
    before = {m for m in sys.modules if m.startswith("megatron")}
    [common] = load_torch_save(COMMON, "common_state/shard_0_1", COMMON_STATE)
    assert {m for m in sys.modules if m.startswith("megatron")} == before
    assert common["iteration"] == 8
    assert common["optimizer"]["optimizer"]["state"]["common_step"].item() == 8.0
    args = common["args"]
    assert isinstance(args, safe_unpickle.Stub) and args.name == "argparse.Namespace"
    assert args.get("train_iters") == 12 and args.get("use_distributed_optimizer") is False
    with pytest.raises(UnpickleRefused, match="argparse.Namespace, which is not on"):
        load_torch_save(COMMON, "the distributed optimizer's object")  # its profile admits no stand-ins


def _replace_member(archive: bytes, suffix: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info, data if info.filename.endswith(suffix) else src.read(info))
    return out.getvalue()


def _real_checkpoint(directory: Path, common: bytes, prefix: str = "") -> Path:
    """A DCP checkpoint with the real megatron-cpu keys and shapes (zeros) and the given common state."""
    state = {}
    for line in (DATA / "keys_iter8.tsv").read_text().splitlines():
        key, size, _ = line.split("\t")
        if size == "bytes" or key.startswith("common_state"):
            continue
        shape = [int(x) for x in size.split("x")] if size != "scalar" else []
        state[(prefix if key.startswith("optimizer.") else "") + key] = torch.zeros(shape)
    return hostile.write_dcp(directory, state, {"common_state/shard_0_1": common})


def test_the_plain_optimizers_record_on_a_real_megatron_checkpoint(tmp_path):
    from harness.read.optimizer_record import read_optimizer_record

    rec = read_optimizer_record(_real_checkpoint(tmp_path / "iter_0000008", COMMON))
    assert (rec.key, rec.steps, rec.step_field, rec.moment_slots, rec.missing_count, rec.note) == (
        "common_state/shard_0_1", (8.0,), "optimizer.optimizer.state.common_step", 16, 0, None)
    reset = _replace_member(COMMON, "/data/0", torch.tensor(4.0).numpy().tobytes())
    assert read_optimizer_record(_real_checkpoint(tmp_path / "reset", reset)).steps == (4.0,)


def test_a_chained_optimizers_record_built_from_the_real_structure(tmp_path):
    """megatron-cpu cannot build a chained optimizer on CPU (MoE with the local implementation
    fails in Megatron's forward: "Output 0 of _ReduceFromModelParallelRegion is a view and is
    being modified inplace"), so this common state is the real one with its optimizer entry
    replaced by what ChainedOptimizer.sharded_state_dict returns for two: {0: ..., 1: ...}."""
    from harness.read.optimizer_record import read_optimizer_record

    [real] = load_torch_save(COMMON, "common_state", COMMON_STATE)
    groups = real["optimizer"]["optimizer"]["param_groups"]

    def chained(steps: tuple[float, float]) -> bytes:
        sub = [{"optimizer": {"state": {"common_step": torch.tensor(s)}, "param_groups": groups}} for s in steps]
        buf = io.BytesIO()
        torch.save([{"iteration": 8, "checkpoint_version": 3.0, "optimizer": {0: sub[0], 1: sub[1]}}], buf)
        return buf.getvalue()

    rec = read_optimizer_record(_real_checkpoint(tmp_path / "iter_0000008", chained((8.0, 8.0)), "chained_0."))
    assert (rec.steps, rec.moment_slots, rec.missing_count, rec.note) == ((8.0, 8.0), 16, 0, None)
    assert rec.step_field == "optimizer[0].optimizer.state.common_step, optimizer[1].optimizer.state.common_step"
    rec = read_optimizer_record(_real_checkpoint(tmp_path / "reset", chained((8.0, 4.0)), "chained_0."))
    assert rec.steps == (8.0, 4.0)
