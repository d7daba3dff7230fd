"""The optimizer's own record in a torch_dist checkpoint, read offline with plain PyTorch.

What a log line cannot fake (docs/megatron.md, "Optimizer state really reloaded"): Megatron's
DistributedOptimizer stores its non-tensor state as the DCP object
`optimizer.distributed.dp_group_idx_<g>.optimizer[/shard_<i>_<n>]`, a pickled list of
`{"param_groups": [...]}` whose every group carries `step`, Adam's step counter; and its
moments as tensors `...bucket_idx_<k>.{param,exp_avg,exp_avg_sq}` (the plain optimizer:
`optimizer.state.{fp32_param,exp_avg,exp_avg_sq}.<parameter>`). A run that continued from
checkpoint K has stepped once per iteration, so the first checkpoint committed after the
restore holds step == its iteration.

A checkpoint may come from a stranger: files are opened without following links
(O_NOFOLLOW, the iteration directory included), must be regular and of bounded size, every
offset and length is range-checked, DCP's `.metadata` is unpickled with only DCP's own
metadata classes allowed, and the optimizer object is loaded with `torch.load(...,
weights_only=True)`. Anything unreadable gives a record with a `note` (the check is then
`unknown`), never an exception.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import re
import stat
import warnings
from pathlib import Path

from harness.events import OptimizerRecord, clip

MAX_METADATA_BYTES = 256 << 20
MAX_OBJECT_BYTES = 16 << 20
MAX_STEP = 1e12
MAX_SLOTS_LISTED = 4
STEP_KEY_RE = re.compile(r"optimizer\.distributed\.dp_group_idx_(\d+)\.optimizer(?:/shard_\d+_\d+)?")
SHARD_FILE_RE = re.compile(r"__\d+_\d+\.distcp")
_DIST_MOMENT_RE = re.compile(r"(optimizer\.distributed\..*)\.(param|exp_avg|exp_avg_sq)")
_PLAIN_MOMENT_RE = re.compile(r"optimizer\.state\.(fp32_param|exp_avg|exp_avg_sq)\.(.+)")


class _RecordError(Exception):
    """Why the record could not be read (one phrase)."""


def _open_regular(directory_fd: int, name: str, limit: int) -> tuple[int, int]:
    """(fd, size) of a regular file in the directory, never through a link; the caller closes fd."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
    except OSError as exc:
        raise _RecordError(f"{name} cannot be opened ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _RecordError(f"{name} is not a regular file")
    if st.st_size > limit:
        os.close(fd)
        raise _RecordError(f"{name} is {st.st_size} bytes, more than the {limit} a checkpoint's file may have here")
    return fd, st.st_size


def _read_at(fd: int, offset: int, length: int) -> bytes:
    out = bytearray()
    while len(out) < length:
        chunk = os.pread(fd, length - len(out), offset + len(out))
        if not chunk:
            raise _RecordError("the file ended early")
        out += chunk
    return bytes(out)


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's `.metadata` is a pickle: only DCP's metadata classes and torch's plain value
    types may be named in it, so unpickling runs no code from the checkpoint."""

    def find_class(self, module: str, name: str) -> object:
        import torch

        if module == "collections" and name == "OrderedDict":
            import collections

            return collections.OrderedDict
        if module == "pathlib" and name in ("PosixPath", "PurePosixPath"):  # storage_meta.checkpoint_id
            import pathlib

            return getattr(pathlib, name)
        if module == "torch.serialization" and name == "_get_layout":  # a layout by its name (copyreg)
            return torch.serialization._get_layout
        if module == "torch":
            value = getattr(torch, name, None)
            if name == "Size" or isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
                return value
        if module.startswith("torch.distributed.checkpoint.") and not name.startswith("__"):
            import importlib

            value = getattr(importlib.import_module(module), name, None)
            if isinstance(value, type):
                return value
        raise _RecordError(f".metadata names {module}.{name}, which DCP metadata never holds")


def _metadata(directory_fd: int) -> object:
    fd, size = _open_regular(directory_fd, ".metadata", MAX_METADATA_BYTES)
    try:
        data = _read_at(fd, 0, size)
    finally:
        os.close(fd)
    try:
        return _MetadataUnpickler(io.BytesIO(data)).load()
    except _RecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged pickle is a reason, not a crash
        raise _RecordError(f".metadata is not DCP metadata ({type(exc).__name__}: {clip(str(exc), 80)})") from None


def read_dcp_metadata(directory: Path) -> object:
    """DCP's `.metadata` of one checkpoint directory, read as above (no link followed, a
    regular file of bounded size, only DCP's metadata classes unpickled). ValueError with the
    reason when it cannot be read."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"{directory.name} cannot be opened as a directory ({exc.strerror or exc})") from None
    try:
        return _metadata(dfd)
    except _RecordError as exc:
        raise ValueError(str(exc)) from None
    finally:
        os.close(dfd)


def _moments(keys: list[str]) -> tuple[int, tuple[str, ...]]:
    """(slots holding optimizer state, slots lacking exp_avg or exp_avg_sq)."""
    slots: dict[str, set[str]] = {}
    for key in keys:
        if m := _DIST_MOMENT_RE.fullmatch(key):
            slots.setdefault(m.group(1), set()).add(m.group(2))
        elif m := _PLAIN_MOMENT_RE.fullmatch(key):
            slots.setdefault(f"optimizer.state.*.{m.group(2)}", set()).add(
                "param" if m.group(1) == "fp32_param" else m.group(1))
    missing = tuple(sorted(slot for slot, kinds in slots.items() if not {"exp_avg", "exp_avg_sq"} <= kinds))
    return len(slots), missing


def _steps(obj: object) -> tuple[float, ...]:
    """param_groups[*].step of Megatron's optimizer object (a list of {"param_groups": [...]},
    or one such dict); () when the groups record no step."""
    holders = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    steps: list[float] = []
    for holder in holders:
        if not isinstance(holder, dict) or not isinstance(holder.get("param_groups"), list):
            raise _RecordError("the optimizer object has no param_groups list")
        for group in holder["param_groups"]:
            if not isinstance(group, dict):
                raise _RecordError("a param group is not a mapping")
            if "step" not in group:
                continue
            value = group["step"]
            if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 <= value <= MAX_STEP:
                raise _RecordError(f"a param group's step is {clip(repr(value), 40)}, not a step count")
            steps.append(float(value))
    return tuple(steps)


def read_optimizer_record(directory: Path) -> OptimizerRecord:
    """The optimizer's step counters and moment slots of one `iter_N` directory."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return OptimizerRecord(note=f"{directory.name} cannot be opened as a directory ({exc.strerror or exc})")
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import torch  # noqa: F401 - the unpickler and the object loader need it
        except ImportError as exc:  # absent: unknown with the reason; a broken import (SystemError) is a bug
            return OptimizerRecord(note=f"PyTorch is not importable here ({type(exc).__name__})")
        try:
            metadata = _metadata(dfd)
            keys = sorted(str(k) for k in getattr(metadata, "state_dict_metadata", {}) or {})
            slots, missing = _moments(keys)
            step_keys = [k for k in keys if STEP_KEY_RE.fullmatch(k)]
            if not step_keys:
                return OptimizerRecord(key=None, steps=(), moment_slots=slots,
                                       missing_moments=missing[:MAX_SLOTS_LISTED], missing_count=len(missing))
            key = step_keys[0]
            entries = [(idx, info) for idx, info in (getattr(metadata, "storage_data", {}) or {}).items()
                       if getattr(idx, "fqn", None) == key]
            if len(entries) != 1:
                raise _RecordError(f"{key} has {len(entries)} storage entries in .metadata, not one")
            info = entries[0][1]
            name, offset, length = info.relative_path, info.offset, info.length
            if not isinstance(name, str) or not SHARD_FILE_RE.fullmatch(name):
                raise _RecordError(f"{key} is stored in {clip(repr(name), 60)}, not a __<rank>_<n>.distcp file")
            if getattr(info, "transform_descriptors", None):
                raise _RecordError(f"{key} is stored transformed ({info.transform_descriptors}); not read")
            if not (isinstance(offset, int) and isinstance(length, int) and offset >= 0 and 0 < length <= MAX_OBJECT_BYTES):
                raise _RecordError(f"{key} has offset {offset!r} and length {length!r} out of range")
            fd, size = _open_regular(dfd, name, 1 << 62)
            try:
                if offset + length > size:
                    raise _RecordError(f"{key} lies at {offset}+{length} beyond the end of {name} ({size} bytes)")
                data = _read_at(fd, offset, length)
            finally:
                os.close(fd)
            try:
                import torch

                obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - a damaged record in a received run dir is a reason
                raise _RecordError(f"{key} is not a plain optimizer record ({type(exc).__name__}: "
                                   f"{clip(str(exc).splitlines()[0] if str(exc) else '', 80)})") from None
            return OptimizerRecord(key=key, steps=_steps(obj), moment_slots=slots,
                                   missing_moments=missing[:MAX_SLOTS_LISTED], missing_count=len(missing))
        except _RecordError as exc:
            return OptimizerRecord(note=str(exc))
    finally:
        os.close(dfd)
