"""Small hostile pickles, written opcode by opcode (no class of ours is pickled), for the tests
of harness.safe.safe_unpickle and the fuzz of received run directories.

Each payload is what a stranger could put in a checkpoint's `.metadata` (or in a pickled DCP
object) to make a reader that admits "any class of torch.distributed.checkpoint.*" act:
every name used here is reachable that way, most of them merely imported by a DCP module.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile

D = "torch.distributed.checkpoint"


def _global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def _str(text: str) -> bytes:
    return f"V{text}\n".encode()


def _timedelta_60s() -> bytes:  # datetime.timedelta, as imported by DCP's staging module
    return _global(f"{D}.staging", "timedelta") + b"(I0\nI60\ntR"


def make_directory(path: str) -> bytes:
    """_ReplicationStager(None, timedelta(0, 60), 'cpu', path): os.makedirs(path) on construction."""
    return _global(f"{D}.staging", "_ReplicationStager") + b"(N" + _timedelta_60s() + _str("cpu") + _str(path) + b"tR."


def start_process(path: str) -> bytes:
    """CheckpointProcess(...): spawns a Python process that runs the directory maker above."""
    stager = _global(f"{D}.staging", "_ReplicationStager")
    return (_global(f"{D}._experimental.checkpoint_process", "CheckpointProcess") + b"("
            + _global(f"{D}._experimental.types", "RankInfo") + b"(I1\nI0\ntR"
            + _global(f"{D}._experimental.checkpoint_process", "CheckpointProcessConfig") + b"(tR"
            + stager + b"(N" + _timedelta_60s() + _str("cpu") + _str(path) + b"t"
            + stager + b"(dtR.")


def listen(port: int) -> bytes:
    """TCPStore('127.0.0.1', port, 2, True) (imported by DCP's async process executor): listens
    and blocks until a second member joins or five minutes pass."""
    return _global(f"{D}._async_process_executor", "TCPStore") + f"(V127.0.0.1\nI{port}\nI2\nI01\ntR.".encode()


def close_fd(fd: int) -> bytes:
    """multiprocessing.connection.Connection(fd) (imported by DCP's checkpoint process): closes
    fd when it is collected."""
    return _global(f"{D}._experimental.checkpoint_process", "Connection") + f"(I{fd}\ntR.".encode()


def run_command(path: str) -> bytes:
    """os.system('touch path'): the classic."""
    return _global("os", "system") + b"(" + _str(f"touch {path}") + b"tR."


ATTACKS = {"directory": make_directory, "process": start_process, "port": listen, "fd": close_fd}


def amplified(levels: int = 24, width: int = 2, leaf: str = "x" * 64, container: bytes = b"l") -> bytes:
    """A list (container b"t": a tuple) whose every level holds `width` references to the level
    below (memo): a few hundred bytes that expand to width**levels leaves when walked or
    converted to text. Exactly one object is left on the stack."""
    out = bytearray(b"\x80\x02X" + struct.pack("<I", len(leaf)) + leaf.encode() + b"r" + struct.pack("<I", 0) + b"0")
    for i in range(levels):
        out += b"(" + (b"j" + struct.pack("<I", i)) * width + container + b"r" + struct.pack("<I", i + 1) + b"0"
    return bytes(out + b"j" + struct.pack("<I", levels) + b".")


def nested_tuple_key(depth: int) -> bytes:
    """{((((None,),),)...): None}: a tuple `depth` levels deep used as a dict key (hashed recursively)."""
    return b"\x80\x02}N" + b"\x85" * depth + b"Ns."


def torch_save_zip(pickle_bytes: bytes, members: dict[str, bytes] | None = None,
                   deflated: dict[str, int] | None = None) -> bytes:
    """A torch.save-shaped archive holding `pickle_bytes` as data.pkl, plus members; `deflated`
    adds members of that many zero bytes stored deflated (a zip bomb's shape), written in
    1 MiB pieces so building one costs no memory."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/version", b"3\n")
        for name, data in (members or {}).items():
            z.writestr(f"archive/{name}", data)
        for name, size in (deflated or {}).items():
            info = zipfile.ZipInfo(f"archive/{name}")
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=True) as w:
                chunk = bytes(1 << 20)
                for _ in range(size >> 20):
                    w.write(chunk)
    return buf.getvalue()


def tensor_pickle(numel: int, key: str = "0", step: float | None = 8.0) -> bytes:
    """[{"param_groups": [{"step": <step>}], "t": <float32 tensor of numel from storage key>}]
    as torch.save writes it (protocol 2, a persistent id per storage)."""
    out = bytearray(b"\x80\x02]q\x00}q\x01(X\x0c\x00\x00\x00param_groupsq\x02]q\x03}q\x04X\x04\x00\x00\x00stepq\x05")
    out += pickle.dumps(step, protocol=2)[2:-1]
    out += b"sa"  # param_groups[0]["step"] = step; append the group
    out += b"X\x01\x00\x00\x00t"
    out += _global("torch._utils", "_rebuild_tensor_v2") + b"("
    out += b"(X\x07\x00\x00\x00storage" + _global("torch", "FloatStorage") + b"X" + struct.pack("<I", len(key)) + \
        key.encode() + b"X\x03\x00\x00\x00cpu" + b"J" + struct.pack("<i", numel) + b"tQ"
    out += b"K\x00" + b"J" + struct.pack("<i", numel) + b"\x85" + b"K\x01\x85" + b"\x89"
    out += _global("collections", "OrderedDict") + b")R" + b"tR"
    out += b"u" + b"a."
    return bytes(out)


def write_dcp(directory, state: dict, raw: dict[str, bytes] | None = None):
    """dcp.save(state) into `directory`, then the stored bytes of the pickled objects named in
    `raw` replaced by the given ones (a file `__1_0.distcp` and a rewritten `.metadata`), as
    Megatron stores its common state (raw torch.save bytes) or as a stranger could."""
    import warnings

    import torch.distributed.checkpoint as dcp

    state = dict(state)
    for key in raw or {}:
        state[key] = ({"placeholder": 1},)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(directory)), no_dist=True)
    if raw:
        md = dcp.FileSystemReader(str(directory)).read_metadata()
        blob = bytearray()
        for idx, info in md.storage_data.items():
            if idx.fqn in raw:
                info.relative_path, info.offset, info.length = "__1_0.distcp", len(blob), len(raw[idx.fqn])
                blob += raw[idx.fqn]
        (directory / "__1_0.distcp").write_bytes(bytes(blob))
        (directory / ".metadata").write_bytes(pickle.dumps(md))
    return directory
