"""The end state of a run against its baseline's: the final checkpoint's model and optimizer
tensors, read offline from the DCP shards of both and compared (`state_equivalence`).

Each tensor of a torch_dist checkpoint is one or more DCP items (a chunk of a sharded tensor,
or the whole tensor). DCP's `.metadata` (read with harness.read.optimizer_record.read_dcp_metadata,
the one reader of that format) gives each item's dtype, chunk offsets and sizes, and where its
bytes lie: a `__<rank>_<n>.distcp` file, an offset and a length. The bytes of a tensor item are
what `torch.save` wrote for it: a ZIP archive (stored, never compressed) whose `data/<k>` member
is the tensor's storage and whose `data.pkl` records its layout. Nothing here unpickles: the
storage bytes are read with `zipfile` and, where they differ, interpreted with the dtype the
metadata names (harness.safe.safe_unpickle.values, numpy; no PyTorch); the layout records of the
two runs must be byte-identical, so equal storages are equal tensors. An item stored as pickled bytes (DCP's BYTE_IO: Megatron's RNG
state, its common state with the plain optimizer's step, extra states) is listed as not
compared, never unpickled.

A checkpoint may come from a stranger: the iteration directory is opened without following a
link, every shard file must be a regular file (harness.read.optimizer_record's opener), every
offset and length is range-checked against the file's size and bounded, every size is checked
against the dtype and shape. Anything unreadable gives a comparison with a `note` (the check is
then `unknown`), never an exception.

Where the workload is deterministic the criterion asks for bitwise equality; elsewhere it asks
for every element within the tolerance of its tensor class (TOLERANCES), elementwise
|a - b| <= atol + rtol * |b|, b the baseline's.
"""

from __future__ import annotations

import io
import math
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from harness.vocab.events import (
    CheckpointOnDisk, StateComparison, TensorDiff, Timeline, clip, TENSOR_CLASSES,
)
from harness.safe import safe_unpickle
from harness.read.optimizer_record import (
    SHARD_FILE_RE, BytesEntry, StorageInfo, open_checkpoint_file, read_at, RecordError, read_dcp_metadata,
)

MAX_ITEM_BYTES = 2 << 30  # one tensor item read into memory at a time (twice: ours and the baseline's)
MAX_LAYOUT_BYTES = 64 << 10  # a torch.save archive's data.pkl for one tensor is a few hundred bytes
MAX_SHOWN = 6  # differing tensors and uncompared objects kept by name

# Per tensor class, the tolerance of a run whose training is not bitwise deterministic (GPU
# reductions, dropout): (rtol, atol), elementwise |a - b| <= atol + rtol * |b|. Provisional:
# not calibrated on GPU hardware yet (docs/criteria.md says so); a deterministic run is held to
# bitwise equality instead.
TOLERANCES: dict[str, tuple[float, float]] = {
    "model": (1.6e-2, 1e-5),  # about two bf16 ulps
    "optimizer.param": (1e-4, 1e-6),  # fp32 main parameters
    "optimizer.exp_avg": (1e-2, 1e-8),
    "optimizer.exp_avg_sq": (2e-2, 1e-12),
    "optimizer.other": (1e-4, 1e-6),
}
assert tuple(TOLERANCES) == TENSOR_CLASSES

_OPT = r"(?:chained_\d+\.)?optimizer\."
_CHUNK_SUFFIX = re.compile(r"\[[\d,]*\]$")
_CLASS_RES = (
    ("optimizer.param", re.compile(_OPT + r"(?:state\.fp32_param\.|distributed\..*\.param$)")),
    ("optimizer.exp_avg_sq", re.compile(_OPT + r"(?:state\.exp_avg_sq\.|distributed\..*\.exp_avg_sq$)")),
    ("optimizer.exp_avg", re.compile(_OPT + r"(?:state\.exp_avg\.|distributed\..*\.exp_avg$)")),
    ("optimizer.other", re.compile(_OPT)),
)


def tensor_class(key: str) -> str:
    """model, optimizer.param, optimizer.exp_avg, optimizer.exp_avg_sq or optimizer.other, of a
    DCP key (with or without the `[offsets]` of one of its chunks)."""
    fqn = _CHUNK_SUFFIX.sub("", key)
    for name, pattern in _CLASS_RES:
        if pattern.match(fqn):
            return name
    return "model"


@dataclass(frozen=True)
class _Item:
    """One tensor item of a checkpoint: where its bytes are and what they must hold."""

    key: str  # fqn, with the chunk's offsets when the tensor has several chunks
    dtype: str  # an admitted dtype name (harness.safe.safe_unpickle), e.g. float32
    numel: int
    file: str
    offset: int
    length: int


class _Checkpoint:
    """The tensor items of one iteration directory and its opened shard files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.items: dict[str, _Item] = {}
        self.objects: list[str] = []  # BYTE_IO items: pickled, not compared
        self._fds: dict[str, tuple[int, int]] = {}
        try:
            self._dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise RecordError(f"{directory.name} cannot be opened as a directory ({exc.strerror or exc})") from None

    def close(self) -> None:
        for fd, _size in self._fds.values():
            os.close(fd)
        self._fds.clear()
        os.close(self._dfd)

    def index(self) -> None:
        try:
            metadata = read_dcp_metadata(self.directory)
        except ValueError as exc:
            raise RecordError(str(exc)) from None
        storage = {(idx.fqn, idx.offset): info for idx, info in metadata.storage_data.items()}
        for fqn, meta in metadata.state_dict_metadata.items():
            if isinstance(meta, BytesEntry):
                self.objects.append(fqn)
                continue
            dtype = meta.dtype
            if dtype is None or safe_unpickle.itemsize(dtype) is None:
                raise RecordError(f"{fqn} names no dtype the suite reads ({clip(repr(meta.dtype), 40)})")
            for offsets, sizes in meta.chunks:
                if any(s < 0 for s in sizes) or any(o < 0 for o in offsets):
                    raise RecordError(f"{fqn} has a chunk with a negative offset or size")
                info = storage.get((fqn, offsets))
                if info is None:
                    raise RecordError(f"{fqn} chunk at {list(offsets)} has no storage entry in .metadata")
                key = fqn if len(meta.chunks) == 1 else f"{fqn}[{','.join(map(str, offsets))}]"
                self.items[key] = _checked_item(key, dtype, math.prod(sizes), info)

    def payload(self, item: _Item) -> bytes:
        if item.file not in self._fds:
            self._fds[item.file] = open_checkpoint_file(self._dfd, item.file, 1 << 62)
        fd, size = self._fds[item.file]
        if item.offset + item.length > size:
            raise RecordError(f"{item.key} lies at {item.offset}+{item.length} beyond the end of {item.file} "
                               f"({size} bytes)")
        return read_at(fd, item.offset, item.length)


def _checked_item(key: str, dtype: str, numel: int, info: StorageInfo) -> _Item:
    name, offset, length = info.relative_path, info.offset, info.length
    if not isinstance(name, str) or not SHARD_FILE_RE.fullmatch(name):
        raise RecordError(f"{key} is stored in {clip(repr(name), 60)}, not a __<rank>_<n>.distcp file")
    if info.transformed:
        raise RecordError(f"{key} is stored transformed (DCP's transform_descriptors); not read")
    if not (isinstance(offset, int) and isinstance(length, int) and offset >= 0 and 0 < length <= MAX_ITEM_BYTES):
        raise RecordError(f"{key} has offset {offset!r} and length {length!r} out of range "
                           f"(at most {MAX_ITEM_BYTES} bytes per tensor item are read)")
    return _Item(key, dtype, numel, name, offset, length)


def _storage(item: _Item, data: bytes) -> tuple[bytes, bytes]:
    """(layout record, storage bytes) of one tensor item: a torch.save archive's data.pkl and
    its one storage member, or (b"", the bytes) for an item written raw. Nothing unpickled."""
    expected = item.numel * safe_unpickle.itemsize(item.dtype)
    if not data.startswith(b"PK\x03\x04"):
        if len(data) != expected:
            raise RecordError(f"{item.key} holds {len(data)} bytes, neither a torch.save archive nor the "
                               f"{expected} bytes of its {item.numel} {item.dtype} values")
        return b"", data
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise RecordError(f"{item.key} is not a readable torch.save archive ({clip(str(exc), 60)})") from None
    prefixes = {m.filename.split("/", 1)[0] for m in members}
    if len(prefixes) != 1 or any(m.compress_type != zipfile.ZIP_STORED for m in members):
        raise RecordError(f"{item.key} is not a torch.save archive (one top directory, stored members)")
    top = prefixes.pop()
    by_name = {m.filename: m for m in members}
    storages = [m for m in members if m.filename.startswith(f"{top}/data/")]
    layout = by_name.get(f"{top}/data.pkl")
    order = by_name.get(f"{top}/byteorder")
    if layout is None or len(storages) != 1 or layout.file_size > MAX_LAYOUT_BYTES:
        raise RecordError(f"{item.key}'s archive does not hold one tensor storage and its layout record")
    if order is not None and (order.file_size > 16 or archive.read(order) != b"little"):
        raise RecordError(f"{item.key} was written big-endian; not compared")
    if storages[0].file_size != expected:
        raise RecordError(f"{item.key}'s storage holds {storages[0].file_size} bytes, not the {expected} of its "
                           f"{item.numel} {item.dtype} values")
    try:
        return archive.read(layout), archive.read(storages[0])
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise RecordError(f"{item.key}'s archive is damaged ({clip(str(exc), 60)})") from None


def _compare_values(item: _Item, ours: bytes, theirs: bytes) -> tuple[float, bool]:
    """(max |ours - theirs|, every element within its class's tolerance) of two storages."""
    import numpy as np

    a = safe_unpickle.values(item.dtype, ours).astype(np.float64)
    b = safe_unpickle.values(item.dtype, theirs).astype(np.float64)
    rtol, atol = TOLERANCES[tensor_class(item.key)]
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
        diff[np.isnan(a) & np.isnan(b)] = 0.0
        if bool(np.isnan(diff).any()):
            return math.nan, False
        within = bool((diff <= atol + rtol * np.abs(b)).all())
    return float(diff.max()) if diff.size else 0.0, within


def _order(key: str) -> tuple[int, str]:
    return TENSOR_CLASSES.index(tensor_class(key)), key


def compare_checkpoints(ours: Path, theirs: Path, *, shown: str, baseline_shown: str, iteration: int) -> StateComparison:
    """Every tensor item of `ours` against the same item of `theirs` (two iteration directories)."""
    base = StateComparison(checkpoint=shown, baseline_checkpoint=baseline_shown, iteration=iteration,
                           tolerances=tuple((c, *TOLERANCES[c]) for c in TENSOR_CLASSES))
    try:
        import numpy  # noqa: F401 - the values of tensors that differ
    except ImportError as exc:
        return _replace(base, note=f"numpy is not importable here ({type(exc).__name__})")
    sides: list[_Checkpoint] = []
    try:
        for directory, who in ((ours, shown), (theirs, baseline_shown)):
            try:
                ck = _Checkpoint(directory)
            except RecordError as exc:
                return _replace(base, note=f"{who}: {exc}")
            sides.append(ck)
            try:
                ck.index()
            except RecordError as exc:
                return _replace(base, note=f"{who}: {exc}")
        mine, other = sides
        only_ours = sorted(set(mine.items) - set(other.items), key=_order)
        only_theirs = sorted(set(other.items) - set(mine.items), key=_order)
        missing = tuple([f"{k} (only in this run's)" for k in only_ours[:MAX_SHOWN]]
                        + [f"{k} (only in the baseline's)" for k in only_theirs[:MAX_SHOWN]])
        differing: list[TensorDiff] = []
        counts: dict[str, int] = {}
        differ_count = outside_count = 0
        worst: dict[str, float] = {}
        for key in sorted(set(mine.items) & set(other.items), key=_order):
            a, b = mine.items[key], other.items[key]
            cls = tensor_class(key)
            if a.dtype != b.dtype or a.numel != b.numel:
                return _replace(base, note=f"{key} is {a.numel} {a.dtype} values in this run's checkpoint but "
                                           f"{b.numel} {b.dtype} in the baseline's: not the same configuration")
            try:
                layout_a, data_a = _storage(a, mine.payload(a))
            except RecordError as exc:
                return _replace(base, note=f"{shown}: {exc}")
            try:
                layout_b, data_b = _storage(b, other.payload(b))
            except RecordError as exc:
                return _replace(base, note=f"{baseline_shown}: {exc}")
            if layout_a != layout_b:
                return _replace(base, note=f"{key} is laid out differently in the two checkpoints (their torch.save "
                                           "layout records differ): not compared")
            counts[cls] = counts.get(cls, 0) + 1
            if data_a == data_b:
                continue
            max_abs, within = _compare_values(a, data_a, data_b)
            differ_count += 1
            outside_count += 0 if within else 1
            worst[cls] = max(worst.get(cls, 0.0), max_abs) if not math.isnan(max_abs) else math.nan
            if len(differing) < MAX_SHOWN:
                differing.append(TensorDiff(key=key, tensor_class=cls, dtype=a.dtype,
                                            numel=a.numel, max_abs_diff=max_abs, within_tolerance=within))
        return _replace(
            base, compared=tuple((c, counts[c]) for c in TENSOR_CLASSES if c in counts),
            differing=tuple(differing), differing_count=differ_count, outside_tolerance_count=outside_count,
            max_abs_diff=tuple((c, worst[c]) for c in TENSOR_CLASSES if c in worst),
            missing=missing, missing_count=len(only_ours) + len(only_theirs),
            not_compared=tuple(sorted(mine.objects)[:MAX_SHOWN]), not_compared_count=len(mine.objects))
    except OSError as exc:
        return _replace(base, note=f"a checkpoint file could not be read ({exc.strerror or exc})")
    except RecordError as exc:
        return _replace(base, note=str(exc))
    finally:
        for ck in sides:
            ck.close()


def _replace(c: StateComparison, **changes: object) -> StateComparison:
    import dataclasses

    return dataclasses.replace(c, **changes)


def final_checkpoint(tl: Timeline) -> CheckpointOnDisk | None:
    """The run's last committed checkpoint (its end state), or None."""
    if tl.checkpoints is None or not tl.checkpoints.exists:
        return None
    committed = [c for c in tl.checkpoints.iterations if c.committed]
    return committed[-1] if committed else None


def compare_final(run: Timeline, baseline: Timeline) -> StateComparison:
    """This run's final committed checkpoint against the baseline's committed checkpoint of the
    same iteration. `iteration` None: this run committed none (later_checkpoint says why)."""
    tolerances = tuple((c, *TOLERANCES[c]) for c in TENSOR_CLASSES)
    mine = final_checkpoint(run)
    if mine is None:
        return StateComparison(checkpoint=None, baseline_checkpoint=None, iteration=None, tolerances=tolerances)
    name = baseline.run_dir.name
    theirs = baseline.checkpoints.get(mine.iteration) if baseline.checkpoints is not None else None
    if theirs is None or not theirs.committed:
        why = "is not there" if theirs is None else "was never committed"
        return StateComparison(checkpoint=mine.rel, baseline_checkpoint=None, iteration=mine.iteration,
                               tolerances=tolerances,
                               note=f"the baseline {name}'s checkpoint of iteration {mine.iteration} {why}: give a "
                                    "baseline of the same configuration (same train iterations and save interval) "
                                    "with its checkpoints")
    return compare_checkpoints(run.run_dir / mine.rel, baseline.run_dir / theirs.rel, shown=mine.rel,
                               baseline_shown=f"{name}/{theirs.rel}", iteration=mine.iteration)
