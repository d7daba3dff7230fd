"""The optimizer's own record in a torch_dist checkpoint, read offline.

What a log line cannot fake (docs/megatron.md, "Optimizer state really reloaded"):

- Megatron's DistributedOptimizer stores its non-tensor state as the DCP object
  `[chained_<i>.]optimizer.distributed.dp_group_idx_<g>.optimizer[/shard_<i>_<n>]`, a pickled
  list of `{"param_groups": [...]}` whose every group carries `step`, Adam's step counter; its
  moments are tensors `...bucket_idx_<k>.{param,exp_avg,exp_avg_sq}`.
- The plain (non-distributed) optimizer keeps the counter in Megatron's common state: the DCP
  object `common_state/shard_0_1` (megatron-core >= 0.15; before, the file `common.pt`) is a
  torch.save'd `[state_dict]` whose `optimizer` entry is the optimizer's `sharded_state_dict`
  without its tensors: `{"optimizer": {"state": {"common_step": tensor(N)}, "param_groups":
  [...]}}` for the fp16/bf16 wrapper, `{"state": {"common_step": ...}, "param_groups": [...]}`
  for FP32Optimizer (`_extract_common_per_param_step`, megatron/core/optimizer/optimizer.py), and
  for a ChainedOptimizer of several, `{0: <one such>, 1: ...}`; a `step` in the param groups
  (apex's FusedAdam) counts too. Its moments are tensors
  `[chained_<i>.]optimizer.state.{fp32_param,exp_avg,exp_avg_sq}.<parameter>`.

A run that continued from checkpoint K has stepped once per iteration, so the first checkpoint
committed after the restore holds step == its iteration.

A checkpoint may come from a stranger: files are opened without following links (O_NOFOLLOW,
the iteration directory included), must be regular and of bounded size, every offset and
length is range-checked, and every pickle (`.metadata`, the optimizer object, the common
state) goes through harness.safe.safe_unpickle (exact allow-listed pairs, inert stand-ins, result
type-checked and bounded, zip members never inflated). Anything unreadable gives a record with
a `note` (the check is then `unknown`), never an exception.

API, for every offline reader of checkpoints (optimizer_state, end-state comparisons):

    read_dcp_metadata(directory) -> DcpMetadata   # ValueError naming the file and the reason
    read_dcp_object(directory, metadata, fqn, profile, limit, index) -> object  # one stored item, bounded
    read_optimizer_record(directory) -> OptimizerRecord           # never raises
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from harness.safe import safe_unpickle
from harness.vocab.events import OptimizerRecord, clip

MAX_METADATA_BYTES = 256 << 20
MAX_OBJECT_BYTES = 16 << 20
MAX_COMMON_BYTES = 64 << 20
MAX_STEP = 1e12
MAX_SLOTS_LISTED = 4
MAX_STEP_OBJECTS = 64
MAX_KEY_CHARS = 4096
MAX_CHUNKS = 1 << 20
MAX_OFFSET = 1 << 62
_CHAINED = r"(?:chained_\d+\.)?"
STEP_KEY_RE = re.compile(r"(chained_\d+\.)?optimizer\.distributed\.dp_group_idx_(\d+)\.optimizer(?:/shard_\d+_\d+)?")
COMMON_KEY_RE = re.compile(r"common_state(?:/shard_\d+_\d+)?")
SHARD_FILE_RE = re.compile(r"__\d+_\d+\.distcp")
_DIST_MOMENT_RE = re.compile("(" + _CHAINED + r"optimizer\.distributed\..*)\.(param|exp_avg|exp_avg_sq)")
_PLAIN_MOMENT_RE = re.compile("(" + _CHAINED + r")optimizer\.state\.(fp32_param|exp_avg|exp_avg_sq)\.(.+)")
_DCP_META = "torch.distributed.checkpoint.metadata."


@dataclass(frozen=True)
class TensorEntry:
    """A tensor of the checkpoint: its global size, dtype name (`float32`, `bfloat16`, ...) and
    chunks as (offsets, sizes) pairs; each chunk is stored under StorageIndex(key, offsets)."""

    size: tuple[int, ...]
    dtype: str | None
    chunks: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class BytesEntry:
    """A pickled object of the checkpoint (DCP's bytes item)."""


@dataclass(frozen=True)
class StorageIndex:
    fqn: str
    offset: tuple[int, ...] | None
    index: int | None


@dataclass(frozen=True)
class StorageInfo:
    """Where one item lies: `relative_path` in the checkpoint directory, `offset`, `length`."""

    relative_path: str
    offset: int
    length: int
    transformed: bool


@dataclass(frozen=True)
class DcpMetadata:
    """DCP's `.metadata`, type-checked: keys to entries, and where each item is stored."""

    state_dict_metadata: Mapping[str, TensorEntry | BytesEntry]
    storage_data: Mapping[StorageIndex, StorageInfo]

    def stored(self, fqn: str) -> list[StorageInfo]:
        return [info for idx, info in self.storage_data.items() if idx.fqn == fqn]


class RecordError(Exception):
    """Why the record could not be read (one phrase). Public, with open_checkpoint_file and
    read_at: the reader's API for a checkpoint's files, which end_state reads through too."""


def open_checkpoint_file(directory_fd: int, name: str, limit: int) -> tuple[int, int]:
    """(fd, size) of a regular file in the directory, never through a link; the caller closes fd."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
    except OSError as exc:
        raise RecordError(f"{name} cannot be opened ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise RecordError(f"{name} is not a regular file")
    if st.st_size > limit:
        os.close(fd)
        raise RecordError(f"{name} is {st.st_size} bytes, more than the {limit} a checkpoint's file may have here")
    return fd, st.st_size


def read_at(fd: int, offset: int, length: int) -> bytes:
    """`length` bytes at `offset` of an open file; RecordError when it ends before."""
    out = bytearray()
    while len(out) < length:
        chunk = os.pread(fd, length - len(out), offset + len(out))
        if not chunk:
            raise RecordError("the file ended early")
        out += chunk
    return bytes(out)


def _metadata_error(what: str) -> RecordError:
    return RecordError(f".metadata is not DCP metadata: {what}")


def _int_tuple(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) > 64 or \
            not all(type(v) is int and 0 <= v <= MAX_OFFSET for v in value):
        raise _metadata_error(f"{what} is {_kind(value)}, not a tuple of non-negative integers")
    return value


def _kind(value: object) -> str:
    if isinstance(value, safe_unpickle.Stub):
        return f"a {value.name.rsplit('.', 1)[-1]}"
    if type(value) is float and not math.isfinite(value):
        return f"the float {value}"
    return f"a {type(value).__name__}"


def _stub(value: object, cls: str, what: str) -> safe_unpickle.Stub:
    if not isinstance(value, safe_unpickle.Stub) or value.name != _DCP_META + cls or not isinstance(value.state, dict):
        raise _metadata_error(f"{what} is {_kind(value)}, not DCP's {cls}")
    return value


def _typed_metadata(raw: object) -> DcpMetadata:
    """The unpickled `.metadata` as DcpMetadata, every field used type-checked (a wrong type is a
    RecordError naming the field and the type, never an exception further on)."""
    md = _stub(raw, "Metadata", "its top object")
    entries = md.get("state_dict_metadata")
    if not isinstance(entries, dict):
        raise _metadata_error(f"state_dict_metadata is {_kind(entries)}, not a mapping")
    keys: dict[str, TensorEntry | BytesEntry] = {}
    for key, entry in entries.items():
        if type(key) is not str or len(key) > MAX_KEY_CHARS:
            raise _metadata_error(f"a key of state_dict_metadata is {_kind(key)}, not a name")
        name = entry.name if isinstance(entry, safe_unpickle.Stub) else ""
        if name == _DCP_META + "BytesStorageMetadata":
            keys[key] = BytesEntry()
            continue
        entry = _stub(entry, "TensorStorageMetadata", f"state_dict_metadata[{clip(repr(key), 60)}]")
        props = entry.get("properties")
        dtype = None
        if isinstance(props, safe_unpickle.Stub) and isinstance(props.state, tuple) and props.state \
                and isinstance(props.state[0], safe_unpickle.DType):
            dtype = str(props.state[0])
        raw_chunks = entry.get("chunks")
        if not isinstance(raw_chunks, list) or len(raw_chunks) > MAX_CHUNKS:
            raise _metadata_error(f"the chunks of {clip(key, 60)} are {_kind(raw_chunks)}, not a list of chunks")
        chunks = []
        for chunk in raw_chunks:
            chunk = _stub(chunk, "ChunkStorageMetadata", f"a chunk of {clip(key, 60)}")
            chunks.append((_int_tuple(chunk.get("offsets"), f"a chunk offset of {clip(key, 60)}"),
                           _int_tuple(chunk.get("sizes"), f"a chunk size of {clip(key, 60)}")))
        keys[key] = TensorEntry(size=_int_tuple(entry.get("size"), f"the size of {clip(key, 60)}"), dtype=dtype,
                                chunks=tuple(chunks))
    storage = md.get("storage_data")
    if not isinstance(storage, dict):
        raise _metadata_error(f"storage_data is {_kind(storage)}, not a mapping")
    where: dict[StorageIndex, StorageInfo] = {}
    for idx, info in storage.items():
        idx = _stub(idx, "MetadataIndex", "a key of storage_data")
        fqn, offset, index = idx.get("fqn"), idx.get("offset"), idx.get("index")
        if type(fqn) is not str or len(fqn) > MAX_KEY_CHARS:
            raise _metadata_error(f"a storage index's fqn is {_kind(fqn)}, not a name")
        if not (index is None or (type(index) is int and 0 <= index <= MAX_OFFSET)):
            raise _metadata_error(f"the storage index of {clip(fqn, 60)} is {_kind(index)}, not a chunk number")
        if not isinstance(info, safe_unpickle.Stub) or info.name != "torch.distributed.checkpoint.filesystem._StorageInfo" \
                or not isinstance(info.state, dict):
            raise _metadata_error(f"the storage of {clip(fqn, 60)} is {_kind(info)}, not DCP's _StorageInfo")
        path, off, length = info.get("relative_path"), info.get("offset"), info.get("length")
        if type(path) is not str or type(off) is not int or type(length) is not int \
                or not 0 <= off <= MAX_OFFSET or not 0 <= length <= MAX_OFFSET:
            raise _metadata_error(f"the storage of {clip(fqn, 60)} has path {_kind(path)}, offset {_kind(off)} "
                                  f"{clip(repr(off), 24)} and length {_kind(length)} {clip(repr(length), 24)}, not a "
                                  "file name and two byte counts")
        where[StorageIndex(fqn, None if offset is None else _int_tuple(offset, f"the offset of {clip(fqn, 60)}"),
                           index)] = StorageInfo(path, off, length, bool(info.get("transform_descriptors")))
    return DcpMetadata(keys, where)


def _metadata(directory_fd: int) -> DcpMetadata:
    fd, size = open_checkpoint_file(directory_fd, ".metadata", MAX_METADATA_BYTES)
    try:
        data = read_at(fd, 0, size)
    finally:
        os.close(fd)
    try:
        raw = safe_unpickle.load_pickle(data, ".metadata", safe_unpickle.METADATA)
    except safe_unpickle.UnpickleRefused as exc:
        raise RecordError(str(exc)) from None
    return _typed_metadata(raw)


def _opened(directory: Path) -> int:
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"{directory.name} cannot be opened as a directory ({exc.strerror or exc})") from None


def read_dcp_metadata(directory: Path) -> DcpMetadata:
    """DCP's `.metadata` of one checkpoint directory, read as above (no link followed, a
    regular file of bounded size, restricted unpickling, every field type-checked).
    ValueError with the reason when it cannot be read."""
    dfd = _opened(directory)
    try:
        return _metadata(dfd)
    except RecordError as exc:
        raise ValueError(str(exc)) from None
    finally:
        os.close(dfd)


def _object(directory_fd: int, metadata: DcpMetadata, key: str, limit: int, profile: str,
            index: StorageIndex | None = None) -> object:
    """The pickled DCP object `key` (one chunk of it: `index`), read within `limit` bytes
    through harness.safe.safe_unpickle."""
    entries = [metadata.storage_data[index]] if index in metadata.storage_data else metadata.stored(key)
    if len(entries) != 1:
        raise RecordError(f"{key} has {len(entries)} storage entries in .metadata, not one")
    info = entries[0]
    name, offset, length = info.relative_path, info.offset, info.length
    if not SHARD_FILE_RE.fullmatch(name):
        raise RecordError(f"{key} is stored in {clip(repr(name), 60)}, not a __<rank>_<n>.distcp file")
    if info.transformed:
        raise RecordError(f"{key} is stored transformed; not read")
    if not 0 < length <= limit:
        raise RecordError(f"{key} has length {length}, out of range (1..{limit})")
    fd, size = open_checkpoint_file(directory_fd, name, 1 << 62)
    try:
        if offset + length > size:
            raise RecordError(f"{key} lies at {offset}+{length} beyond the end of {name} ({size} bytes)")
        data = read_at(fd, offset, length)
    finally:
        os.close(fd)
    return _torch_object(data, key, profile)


def _torch_object(data: bytes, key: str, profile: str) -> object:
    try:
        return safe_unpickle.load_torch_save(data, key, profile, max_tensor_bytes=MAX_OBJECT_BYTES)
    except ImportError as exc:  # numpy absent: unknown with the reason; a broken import (SystemError) is a bug
        raise RecordError(f"numpy is not importable here ({type(exc).__name__})") from None
    except safe_unpickle.UnpickleRefused as exc:
        raise RecordError(f"{key} is not a plain optimizer record ({exc})") from None


def read_dcp_object(directory: Path, metadata: DcpMetadata, fqn: str, profile: str = safe_unpickle.TENSORS,
                    limit: int = MAX_OBJECT_BYTES, index: StorageIndex | None = None) -> object:
    """One stored item of a DCP checkpoint, read within `limit` bytes: a pickled object (e.g.
    `common_state/shard_0_1` with profile=safe_unpickle.COMMON_STATE), or one chunk of a tensor
    (`index`, a key of metadata.storage_data: DCP stores each chunk as a torch.save'd tensor,
    which comes back as a read-only numpy array). ValueError with the reason."""
    dfd = _opened(directory)
    try:
        return _object(dfd, metadata, fqn, limit, profile, index)
    except RecordError as exc:
        raise ValueError(str(exc)) from None
    finally:
        os.close(dfd)


def moment_keys(keys: list[str]) -> list[str]:
    """The keys of a checkpoint that hold Adam's moments (exp_avg, exp_avg_sq) of an optimizer, as
    optimizer_state reads them: the distributed optimizer's buckets and the plain optimizer's
    per-parameter state, each possibly under a ChainedOptimizer's `chained_<i>.` prefix."""
    out = []
    for key in keys:
        m = _DIST_MOMENT_RE.fullmatch(key) or _PLAIN_MOMENT_RE.fullmatch(key)
        if m is not None and m.group(2) in ("exp_avg", "exp_avg_sq"):
            out.append(key)
    return out


def _moments(keys: list[str]) -> tuple[int, tuple[str, ...]]:
    """(slots holding optimizer state, slots lacking exp_avg or exp_avg_sq)."""
    slots: dict[str, set[str]] = {}
    for key in keys:
        if m := _DIST_MOMENT_RE.fullmatch(key):
            slots.setdefault(m.group(1), set()).add(m.group(2))
        elif m := _PLAIN_MOMENT_RE.fullmatch(key):
            slots.setdefault(f"{m.group(1)}optimizer.state.*.{m.group(3)}", set()).add(
                "param" if m.group(2) == "fp32_param" else m.group(2))
    missing = tuple(sorted(slot for slot, kinds in slots.items() if not {"exp_avg", "exp_avg_sq"} <= kinds))
    return len(slots), missing


def _step_value(value: object, where: str) -> float:
    if hasattr(value, "shape") and hasattr(value, "item") and not isinstance(value, (int, float)):
        # a tensor, as harness.safe.safe_unpickle rebuilds it (a numpy array)
        n = value.numel() if callable(getattr(value, "numel", None)) else value.size
        if n != 1:
            raise RecordError(f"{where} is a tensor of {n} elements, not a step count")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= MAX_STEP:
        raise RecordError(f"{where} is {clip(repr(value), 40)}, not a step count")
    return float(value)


def _group_steps(groups: object, where: str) -> list[float]:
    if not isinstance(groups, list):
        raise RecordError(f"{where} has no param_groups list")
    steps: list[float] = []
    for group in groups:
        if not isinstance(group, dict):
            raise RecordError("a param group is not a mapping")
        if "step" in group:
            steps.append(_step_value(group["step"], "a param group's step"))
    return steps


def _steps(obj: object) -> tuple[float, ...]:
    """param_groups[*].step of Megatron's optimizer object (a list of {"param_groups": [...]},
    or one such dict); () when the groups record no step."""
    holders = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    steps: list[float] = []
    for holder in holders:
        if not isinstance(holder, dict):
            raise RecordError("the optimizer object has no param_groups list")
        steps += _group_steps(holder.get("param_groups"), "the optimizer object")
    return tuple(steps)


def _common_steps(common: object) -> tuple[str, tuple[float, ...]]:
    """(where the counters were read, Adam's step counters) from Megatron's common state."""
    if isinstance(common, (list, tuple)) and len(common) == 1:
        common = common[0]
    if not isinstance(common, dict):
        raise RecordError(f"the common state is {_kind(common)}, not Megatron's state dict")
    opt = common.get("optimizer")
    if opt is None:
        return "optimizer (absent: saved without optimizer state)", ()
    if isinstance(opt, dict) and opt and all(type(k) is int for k in opt):  # ChainedOptimizer of several
        subs = [(f"optimizer[{k}]", opt[k]) for k in sorted(opt)]
    elif isinstance(opt, list):
        subs = [(f"optimizer[{i}]", v) for i, v in enumerate(opt)]
    else:
        subs = [("optimizer", opt)]
    steps: list[float] = []
    fields: list[str] = []
    for label, sub in subs:
        if isinstance(sub, dict) and isinstance(sub.get("optimizer"), dict):  # the fp16/bf16 wrapper
            label, sub = f"{label}.optimizer", sub["optimizer"]
        if not isinstance(sub, dict) or not isinstance(sub.get("state", {}), dict):
            raise RecordError(f"{label} of the common state is {_kind(sub)}, not an optimizer state dict")
        state = sub.get("state", {})
        if "common_step" in state:
            steps.append(_step_value(state["common_step"], f"{label}.state.common_step"))
            fields.append(f"{label}.state.common_step")
        group_steps = _group_steps(sub.get("param_groups"), label)
        if group_steps:
            steps += group_steps
            fields.append(f"{label}.param_groups[*].step")
    shown = ", ".join(fields[:2]) + (" ..." if len(fields) > 2 else "")
    return shown, tuple(steps)


def read_optimizer_record(directory: Path) -> OptimizerRecord:
    """The optimizer's step counters and moment slots of one `iter_N` directory."""
    try:
        dfd = _opened(directory)
    except ValueError as exc:
        return OptimizerRecord(note=str(exc))
    try:
        try:
            metadata = _metadata(dfd)
            keys = sorted(metadata.state_dict_metadata)
            slots, missing = _moments(keys)
            moments = dict(moment_slots=slots, missing_moments=missing[:MAX_SLOTS_LISTED], missing_count=len(missing))
            # One optimizer object per optimizer (the first key of each `chained_<i>.` prefix, or
            # the only one): every shard of one optimizer holds the same param groups.
            firsts: dict[str, str] = {}
            for k in keys:
                if m := STEP_KEY_RE.fullmatch(k):
                    firsts.setdefault(m.group(1) or "", k)
            step_keys = sorted(firsts.values())
            if step_keys:
                if len(step_keys) > MAX_STEP_OBJECTS:
                    raise RecordError(f".metadata lists {len(step_keys)} chained optimizers, more than "
                                       f"{MAX_STEP_OBJECTS}")
                steps: list[float] = []
                for key in step_keys:
                    steps += _steps(_object(dfd, metadata, key, MAX_OBJECT_BYTES, safe_unpickle.TENSORS))
                shown = step_keys[0] + (f" (and {len(step_keys) - 1} more)" if len(step_keys) > 1 else "")
                return OptimizerRecord(key=shown, steps=tuple(steps), **moments)
            common_keys = [k for k in keys if COMMON_KEY_RE.fullmatch(k)]
            if len(common_keys) == 1:
                common = _object(dfd, metadata, common_keys[0], MAX_COMMON_BYTES, safe_unpickle.COMMON_STATE)
                key = common_keys[0]
            elif not common_keys and _exists(dfd, "common.pt"):
                fd, size = open_checkpoint_file(dfd, "common.pt", MAX_COMMON_BYTES)
                try:
                    data = read_at(fd, 0, size)
                finally:
                    os.close(fd)
                key = "common.pt"
                common = _torch_object(data, key, safe_unpickle.COMMON_STATE)
            else:
                return OptimizerRecord(key=None, steps=(), **moments)
            field, steps_read = _common_steps(common)
            if not steps_read:
                return OptimizerRecord(key=None, steps=(), common_read=key, **moments)
            return OptimizerRecord(key=key, steps=steps_read, step_field=field, **moments)
        except RecordError as exc:
            return OptimizerRecord(note=str(exc))
    finally:
        os.close(dfd)


def _exists(directory_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except OSError:
        return False
    return True
