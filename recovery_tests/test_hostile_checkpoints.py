"""A received checkpoint is hostile input: what its pickles name is refused, never run; what
they build is bounded by what was read; a wrong type is a clean refusal. These tests use only
the reader's public API (read_optimizer_record, dcp_optimizer_keys, the CLI), so they run
against any version of the reader; each side effect or blow-up runs in a fresh interpreter
(a crash or a leak there cannot take the test session with it)."""

from __future__ import annotations

import json
import math
import os
import pickle
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from fixtures.processes import run_in_session

from . import hostile, rundirs

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STEP_KEY = "optimizer.distributed.dp_group_idx_0.optimizer"
BUCKET = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0"


def _python(code: str, timeout_s: float = 120) -> "object":
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    return run_in_session([sys.executable, "-c", textwrap.dedent(code)], timeout_s=timeout_s, env=env, cwd=REPO)


def _checkpoint(directory: Path, raw: dict[str, bytes] | None = None, step_object: bool = True) -> Path:
    """A small DCP checkpoint with the distributed optimizer's step object; `raw` replaces the
    stored bytes of pickled objects (by key) with the given ones, as a stranger could."""
    state: dict[str, object] = {f"{BUCKET}.{n}": torch.zeros(8) for n in ("param", "exp_avg", "exp_avg_sq")}
    if step_object:
        state[STEP_KEY] = ({"param_groups": [{"step": 8.0}]},)
    return hostile.write_dcp(directory, state, raw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


READ = """
    import gc, sys
    from pathlib import Path
    from harness.read.optimizer_record import read_optimizer_record
    from harness.read.history import dcp_optimizer_keys
    d = Path({d!r})
    rec = read_optimizer_record(d)
    keys = dcp_optimizer_keys(d)
    gc.collect()
    print("NOTE", rec.note)
    print("KEYS", keys[3])
"""


@pytest.mark.parametrize("attack", sorted(hostile.ATTACKS))
def test_a_hostile_metadata_is_refused_and_never_acts(tmp_path, attack):
    """~100-byte pickles naming what DCP's modules define or merely import: a directory made,
    a process started, a port listened on (and blocking), a descriptor closed. Read in a fresh
    interpreter; none of it may happen, and the record names the refusal."""
    d = _checkpoint(tmp_path / "iter_0000008")
    target, port = tmp_path / "made-by-the-pickle", _free_port()
    fd_file = tmp_path / "fd-holder"
    fd_file.write_text("x")
    argument = {"directory": str(target), "process": str(target), "port": port, "fd": 99}[attack]
    payload = hostile.ATTACKS[attack](argument)
    assert len(payload) < 1024  # a few hundred bytes, most of it the names and the path
    (d / ".metadata").write_bytes(payload)
    code = READ.format(d=str(d))
    if attack == "fd":  # the reader's own descriptor 99 must still be open afterwards
        code = f"import os\nos.dup2(os.open({str(fd_file)!r}, os.O_RDONLY), 99)\n" + textwrap.dedent(code) + \
            "\nos.fstat(99)\nprint('FD99 open')\n"
    done = _python(code, timeout_s=90)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-2000:]
    assert "not on the suite's allow-list" in out and "refused without running it" in out, out[-2000:]
    assert not target.exists(), f"the {attack} pickle made {target}"
    if attack == "fd":
        assert "FD99 open" in out
    if attack == "port":
        assert not _listening(port)


def test_verify_and_report_on_a_run_holding_hostile_pickles_refuse_them(tmp_path):
    """The same pickles in a received run directory: verify and report finish (no block on the
    port), exit 0-2, name the refusal, and nothing is made, started or closed."""
    runs, made = [], []
    port = _free_port()
    for i, attack in enumerate(sorted(hostile.ATTACKS)):
        run_dir = rundirs.build(tmp_path / f"run-{attack}", rundirs.Scenario()).run_dir
        target = tmp_path / f"made-{attack}"
        made.append(target)
        argument = {"directory": str(target), "process": str(target), "port": port, "fd": 1}[attack]
        for metadata in (run_dir / "checkpoints").glob("iter_*/.metadata"):
            metadata.write_bytes(hostile.ATTACKS[attack](argument))
        runs.append(run_dir)
        done = run_in_session([sys.executable, "-m", "harness", "verify", str(run_dir), "--no-write"],
                              timeout_s=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode in (0, 1, 2), done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "optimizer_state" in done.stdout and "refused without running it" in done.stdout, done.stdout[-3000:]
    done = run_in_session([sys.executable, "-m", "harness", "report", *map(str, runs)], timeout_s=240, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.strip(), "report printed nothing (its output was closed?)"
    assert not any(p.exists() for p in made), [str(p) for p in made if p.exists()]
    assert not _listening(port)


def test_a_hostile_common_state_is_refused(tmp_path):
    """The plain optimizer's record is Megatron's pickled common state: the same rule applies."""
    target = tmp_path / "made-by-the-common-state"
    payload = hostile.torch_save_zip(hostile.make_directory(str(target)))
    d = _checkpoint(tmp_path / "iter_0000008", {"common_state/shard_0_1": payload}, step_object=False)
    done = _python(READ.format(d=str(d)))
    assert "common_state/shard_0_1 names torch.distributed.checkpoint.staging._ReplicationStager, which is not on " \
           "the suite's allow-list" in done.stdout, done.stdout + done.stderr
    assert not target.exists()


def _rss_growth(setup: list[str], measured: list[str]) -> tuple[int, str]:
    """MiB of peak RSS the measured lines add, in a fresh interpreter."""
    lines = ["import resource, warnings", "warnings.simplefilter('ignore')", *setup,
             "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss", *measured,
             "print('GROWTH_MIB', (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)"]
    done = _python("\n".join(lines), timeout_s=300)
    out = done.stdout + done.stderr
    growth = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("GROWTH_MIB")]
    assert growth, out[-2000:]
    return growth[0], out


def _metadata_with_key(key_pickle: bytes) -> bytes:
    """DCP Metadata whose state_dict_metadata is {<key>: None} (the key given as pickle opcodes)."""
    head = b"\x80\x02ctorch.distributed.checkpoint.metadata\nMetadata\n)\x81}(X\x13\x00\x00\x00state_dict_metadata}"
    return head + key_pickle + b"Ns" + b"X\x0c\x00\x00\x00storage_data}ub."


def test_a_metadata_expanding_through_shared_references_is_refused_within_bounded_memory(tmp_path):
    """3(a): a key built of shared references (a tuple of two references to the level below, 22
    levels): under 2 KB that expands to 4M leaves of 64 characters when converted to text. The
    reader counts what it walks and refuses; peak memory stays small."""
    body = hostile.amplified(levels=22, container=b"t")[2:-1]  # tuples: hashable, a dict key
    payload = _metadata_with_key(body)
    assert len(payload) < 2048
    d = _checkpoint(tmp_path / "iter_0000008")
    (d / ".metadata").write_bytes(payload)
    growth, out = _rss_growth(
        ["from pathlib import Path", "from harness.read.optimizer_record import read_optimizer_record",
         "from harness.read.history import dcp_optimizer_keys", "import torch.distributed.checkpoint"],
        [f"rec = read_optimizer_record(Path({str(d)!r}))", f"keys = dcp_optimizer_keys(Path({str(d)!r}))",
         "print('NOTE', rec.note)", "print('KEYS', keys[3])"])
    assert "amplification" in out, out[-2000:]
    assert growth < 64, f"reading a {len(payload)}-byte .metadata grew the reader by {growth} MiB"


def test_a_deflated_member_in_the_optimizer_object_is_never_inflated(tmp_path):
    """3(b): the optimizer object is a torch.save zip whose tensor member is stored deflated:
    256 KB read, 256 MiB declared. Refused from the zip directory before anything inflates."""
    bomb = hostile.torch_save_zip(hostile.tensor_pickle(1 << 26), deflated={"data/0": 1 << 28})
    assert len(bomb) < (1 << 20)
    d = _checkpoint(tmp_path / "iter_0000008", {STEP_KEY: bomb})
    growth, out = _rss_growth(
        ["from pathlib import Path", "from harness.read.optimizer_record import read_optimizer_record",
         "import torch.distributed.checkpoint"],
        [f"rec = read_optimizer_record(Path({str(d)!r}))", "print('NOTE', rec.note)"])
    assert "compressed" in out and "NOTE None" not in out, out[-2000:]
    assert growth < 64, f"reading a {len(bomb)}-byte optimizer object grew the reader by {growth} MiB"


def test_a_tuple_nested_two_million_deep_is_refused_not_a_crash(tmp_path):
    """A 2 MB .metadata whose dict key is a tuple nested 2,000,000 levels: hashing it recursed
    past the C stack (SIGSEGV). Now: a refusal naming the depth."""
    d = _checkpoint(tmp_path / "iter_0000008")
    (d / ".metadata").write_bytes(hostile.nested_tuple_key(2_000_000))
    done = _python(READ.format(d=str(d)))
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-1000:]}"
    assert "nests deeper than" in done.stdout, done.stdout


def _confused(d: Path, mutate) -> Path:
    """A real .metadata with one field replaced by a wrong type."""
    md = dcp.FileSystemReader(str(d)).read_metadata()
    mutate(md)
    (d / ".metadata").write_bytes(pickle.dumps(md))
    return d


def _set(obj: object, field: str, value: object) -> None:
    object.__setattr__(obj, field, value)


CONFUSIONS = {
    "state_dict_metadata is a list": lambda md: _set(md, "state_dict_metadata", list(md.state_dict_metadata)),
    "storage_data is a list": lambda md: _set(md, "storage_data", list(md.storage_data.values())),
    "a key is an int": lambda md: md.state_dict_metadata.update({7: md.state_dict_metadata.popitem()[1]}),
    "a key is a huge int": lambda md: md.state_dict_metadata.update({10 ** 5000: None}),
    "a size is a str": lambda md: _set(next(v for v in md.state_dict_metadata.values() if hasattr(v, "size")),
                                       "size", "8"),
    "an offset is NaN": lambda md: [_set(i, "offset", math.nan) for i in md.storage_data.values()],
    "an offset is a str": lambda md: [_set(i, "offset", "0") for i in md.storage_data.values()],
    "a length is huge": lambda md: [_set(i, "length", 2 ** 100) for i in md.storage_data.values()],
    "a path is an int": lambda md: [_set(i, "relative_path", 5) for i in md.storage_data.values()],
    "an entry is a dict": lambda md: md.state_dict_metadata.update({STEP_KEY: {"size": [1]}}),
}


@pytest.mark.parametrize("confusion", sorted(CONFUSIONS))
def test_a_wrong_type_inside_metadata_is_a_clean_refusal(tmp_path, confusion):
    """Class 4: a dict where a list belongs, a str where an int does, huge ints, NaN: the record
    is unknown with a sentence, the key listing too; never an exception."""
    from harness.read.history import dcp_optimizer_keys
    from harness.read.optimizer_record import read_optimizer_record

    d = _confused(_checkpoint(tmp_path / "iter_0000008"), CONFUSIONS[confusion])
    rec = read_optimizer_record(d)
    assert rec.steps is None and rec.note is not None and ".metadata" in rec.note, rec
    opt, total, _, note = dcp_optimizer_keys(d)
    assert (opt, total) == (None, None) and ".metadata" in note, note


def test_verify_on_type_confused_metadata_exits_cleanly(tmp_path):
    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    for metadata in (run_dir / "checkpoints").glob("iter_*/.metadata"):
        _confused(metadata.parent, CONFUSIONS["storage_data is a list"])
    done = run_in_session([sys.executable, "-m", "harness", "verify", str(run_dir), "--no-write"],
                          timeout_s=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode in (1, 2), done.stdout[-1500:] + done.stderr[-1500:]
    assert "Traceback" not in done.stderr
    assert "storage_data is a list, not a mapping" in done.stdout, done.stdout[-3000:]
