"""Fuzz over generated run directories and markers: whatever a received run directory holds,
`verify`, `report` and `diagnose` end with a status in {0, 1, 2}, print no traceback and never
hang.

A seeded generator (NVRX_QUAL_FUZZ_SEED, NVRX_QUAL_FUZZ_CASES to widen a local hunt) damages
copies of realistic run directories (recovery_tests/rundirs.py): JSON records with values of
the wrong type, impossible times, huge or negative numbers, deep nesting; log lines with
mangled digits, invalid dates, NUL bytes and endless lines; trackers, iteration directories,
FIFOs, links to secrets and link loops where files were; checkpoints whose `.metadata` is a
hostile pickle (classes reached through DCP's modules, memo amplification, deep nesting) or
real DCP metadata with fields of the wrong type. Each case runs in a forked worker
with a per-case timeout, so a hang is reported as one, with the seed and case to replay it.

Nothing here launches: the module is in the quick tier, marked `fuzz`. By default a fixed-seed
sample runs (one parametrized case in four, and a quarter of the damaged run directories, the
first ones of the same seeded stream); `--fuzz full` runs every case (fixtures/launching.py).
"""

from __future__ import annotations

import copy
import io
import json
import multiprocessing
import os
import random
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from fixtures.launching import FUZZ_SAMPLE, fuzz_full
from harness.cli import main

from . import hostile, rundirs

pytestmark = pytest.mark.fuzz  # forked workers, no launch: a fixed-seed sample unless --fuzz full

SEED = int(os.environ.get("NVRX_QUAL_FUZZ_SEED", "20261201"))
CASES = int(os.environ.get("NVRX_QUAL_FUZZ_CASES", "300"))  # under --fuzz full; a quarter of them sampled


def cases(config: pytest.Config, full: int) -> int:
    """How many generated cases a loop runs: all under --fuzz full, else the first quarter."""
    return full if fuzz_full(config) else max(1, full // FUZZ_SAMPLE)
CASE_TIMEOUT_S = 60.0  # a verify of these small runs takes well under a second; only a hang reaches this

TARGETS = ("fault_injected.json", "run.json", "launch.json", "logs/launcher.log", "logs/train_cycle_cycle0.log",
           "logs/train_cycle_cycle1.log", "logs/console.log", "checkpoints/latest_checkpointed_iteration.txt",
           "checkpoints/iter_0000010/.metadata", "checkpoints/iter_0000010/metadata.json", "logs", "checkpoints",
           "cycle_infos", "verdict.json", "report.md")
SCENARIOS = (rundirs.Scenario(), rundirs.Scenario(fault="hang", nvrx="0.4.1", console_log=True),
             rundirs.Scenario(per_cycle_logs=False, launch_json=False), rundirs.Scenario(fault="none", marker=False))


def odd_value(rng: random.Random, depth: int = 0) -> object:
    choices = [None, True, False, -1, 0, 1, 7, 2 ** 63, -(10 ** 40), 10 ** 400, 1e308, -1e-9, float("nan"),
               float("inf"), "", "abc", "+7", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999+14:00",
               "2026-13-40T25:61:00Z", "2026-11-29T16:32:05.000Z", "x" * rng.choice((300, 70000)), "\x00\u202e\n\r",
               "kill", "hang", "none", "SIGKILL", "../../etc/passwd"]
    if depth < 3:
        choices += ["LIST", "DICT"]
    value = rng.choice(choices)
    if value == "LIST":
        return [odd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if value == "DICT":
        return {rng.choice(("fault", "iteration", "rank", "a", "spec")): odd_value(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return value


def _dump(value: object) -> str:
    return json.dumps(value, allow_nan=True)


def _put(path: Path, data: str | bytes) -> None:
    """Write `data` as a new regular file at `path`, whatever an earlier mutation left there
    (the generator itself must not block on its own FIFO)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)


def _regular_text(path: Path) -> str | None:
    return path.read_text(errors="replace") if path.is_file() and not path.is_symlink() else None


def mutate_json(rng: random.Random, path: Path) -> None:
    try:
        doc = json.loads(_regular_text(path) or "{}")
    except (OSError, ValueError, RecursionError):
        doc = {}
    if not isinstance(doc, dict) or rng.random() < 0.15:
        _put(path, _dump(odd_value(rng)))
        return
    keys = list(doc) + ["injected_at", "iteration", "baseline_iteration", "rank", "cycle", "fault", "utc_offset_s",
                        "started_at", "ended_at", "launcher_exit_code", "spec", "commands", "capture_error"]
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(keys)
        if key == "spec" and isinstance(doc.get("spec"), dict) and rng.random() < 0.7:
            spec_key = rng.choice(list(doc["spec"]) + ["work_dir", "run_id", "checkpoint_dir", "train_iters"])
            doc["spec"][spec_key] = odd_value(rng)
        else:
            doc[key] = odd_value(rng)
    text = _dump(doc)
    if rng.random() < 0.1:
        text = text[: rng.randint(0, len(text))]  # cut mid-write
    if rng.random() < 0.05:
        text = "[" * 100000 + "]" * 100000  # deeper than any parser's recursion
    _put(path, text)


def mutate_log(rng: random.Random, path: Path) -> None:
    lines = path.read_bytes().split(b"\n") if path.is_file() and not path.is_symlink() else []
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(lines) + 1)
        pick = rng.random()
        base = lines[rng.randrange(len(lines))] if lines else b"iteration 1/ 30 | lm loss: 1.0 |"
        if pick < 0.4:  # the same line with other numbers
            out, digits = bytearray(), False
            for byte in base:
                if 48 <= byte <= 57:
                    if not digits:
                        out += str(rng.choice((0, 13, 61, 99, 2 ** 70, 10 ** 40))).encode()
                    digits = True
                else:
                    digits = False
                    out.append(byte)
            new = bytes(out)
        elif pick < 0.6:
            new = b"[2026-" + rng.choice((b"13-45 25:61:61", b"02-30 10:00:00", b"00-00 00:00:00")) + b"] " + base
        elif pick < 0.75:
            new = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        elif pick < 0.8:
            new = b"x" * rng.choice((1 << 16, 3 << 20))  # longer than any line buffer
        elif pick < 0.9:
            new = base.replace(b" ", b"\x00", 1)
        else:
            lines = lines[: rng.randrange(len(lines) + 1)]  # a process killed mid-write
            continue
        lines.insert(i, new)
    _put(path, b"\n".join(lines))


def make_special(rng: random.Random, run_dir: Path, rel: str, secret: Path) -> None:
    path = run_dir / rel
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = rng.choice(("fifo", "secret", "dangling", "loop", "dir", "empty"))
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "secret":
        path.symlink_to(secret)
    elif kind == "dangling":
        path.symlink_to(run_dir / "nowhere")
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path.write_bytes(b"")


def mutate_checkpoints(rng: random.Random, run_dir: Path) -> None:
    ckpt = run_dir / "checkpoints"
    if not ckpt.is_dir() or ckpt.is_symlink():
        return
    pick = rng.random()
    if pick < 0.3:
        _put(ckpt / "latest_checkpointed_iteration.txt",
             rng.choice((b"", b"+7", b"-3", b"release", b"9" * 5000, b"\xff\xfe", b"10\n10", b"1e3")))
    elif pick < 0.55:
        name = rng.choice(("iter_00000010", "iter_9999999999999", "iter_-000001", "iter_0000010x", "iter_"))
        if not os.path.lexists(ckpt / name):
            (ckpt / name).mkdir()
            (ckpt / name / "metadata.json").write_text("{}")
    elif pick < 0.75:
        a, b = ckpt / "iter_0000040", ckpt / "iter_0000045"
        if not (os.path.lexists(a) or os.path.lexists(b)):
            a.symlink_to(b)
            b.symlink_to(a)
    elif pick < 0.85:
        for md in ckpt.glob("iter_*/.metadata"):
            _put(md, bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))))
    elif pick < 0.93:
        payload = hostile_pickle(rng, run_dir / "hostile-side-effect")
        for md in ckpt.glob("iter_*/.metadata"):
            _put(md, payload)
    else:
        for md in ckpt.glob("iter_*/.metadata"):
            if md.is_file() and not md.is_symlink():
                _put(md, confused_metadata(rng, md.read_bytes()))


# Names a hostile pickle may try: what DCP's modules define or import, what the allow-list
# admits (misused), and the classics.
HOSTILE_NAMES = (
    (f"{hostile.D}.staging", "_ReplicationStager"), (f"{hostile.D}.staging", "timedelta"),
    (f"{hostile.D}._async_process_executor", "TCPStore"), (f"{hostile.D}.filesystem", "FileSystemWriter"),
    (f"{hostile.D}._experimental.checkpoint_process", "Connection"), (f"{hostile.D}.filesystem", "Path"),
    (f"{hostile.D}.metadata", "Metadata"), (f"{hostile.D}.metadata", "MetadataIndex"), ("torch", "Size"),
    ("torch.serialization", "_get_layout"), ("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict"),
    ("argparse", "Namespace"), ("builtins", "eval"), ("builtins", "getattr"), ("os", "system"), ("posix", "system"),
    ("subprocess", "Popen"), ("torch", "load"), ("io", "FileIO"), ("copyreg", "_reconstructor"),
)


def hostile_pickle(rng: random.Random, side_effect: Path) -> bytes:
    """A generated hostile pickle: a name from HOSTILE_NAMES called with odd arguments (or
    with the side-effect path), an amplification, or a deep nesting."""
    kind = rng.random()
    if kind < 0.15:
        return hostile.amplified(levels=rng.randint(8, 40), width=rng.randint(2, 4), container=rng.choice((b"l", b"t")))
    if kind < 0.25:
        return hostile.nested_tuple_key(rng.choice((50, 5000, 300_000)))
    if kind < 0.45:
        return rng.choice(list(hostile.ATTACKS.values()))(
            rng.choice((str(side_effect), 1, 2, 65000)))  # the path, a descriptor, a port
    module, name = rng.choice(HOSTILE_NAMES)
    args = b"".join(rng.choice((b"N", b"I1\n", b"I-1\n", b"L" + b"9" * 5000 + b"L\n", b"F nan\n".replace(b" ", b""),
                                f"V{side_effect}\n".encode(), b"(t", b"(l", b"(d", b"Vtouch " + str(side_effect).encode() + b"\n"))
                    for _ in range(rng.randint(0, 4)))
    return f"c{module}\n{name}\n".encode() + b"(" + args + b"tR."


def confused_metadata(rng: random.Random, data: bytes) -> bytes:
    """Real DCP metadata (unpickled here, in the generator only) with one field of a wrong type."""
    import pickle

    try:
        md = pickle.loads(data)  # the fuzz's own template, written by dcp.save
        entries, storage = md.state_dict_metadata, md.storage_data
    except Exception:  # an earlier mutation already replaced it
        return data
    value = odd_value(rng)
    pick = rng.randrange(6)
    if pick == 0:
        object.__setattr__(md, "state_dict_metadata", value)
    elif pick == 1:
        object.__setattr__(md, "storage_data", value)
    elif pick == 2 and isinstance(entries, dict) and entries:  # an earlier mutation may have made it anything
        key = rng.choice(list(entries))
        entries[key if rng.random() < 0.5 else (value if isinstance(value, (int, str, float)) else 7)] = value
    elif isinstance(storage, dict) and storage:
        info = rng.choice(list(storage.values()))
        if hasattr(info, "relative_path"):
            object.__setattr__(info, rng.choice(("offset", "length", "relative_path")), value)
    return pickle.dumps(md)


def damage(rng: random.Random, run_dir: Path, secret: Path) -> list[str]:
    done = []
    for _ in range(rng.randint(1, 4)):
        pick = rng.random()
        rel = rng.choice(TARGETS)
        try:
            if pick < 0.3:
                rel = rng.choice(("fault_injected.json", "run.json", "launch.json", "cycle_infos/cycle_info.fuzz.0.1"))
                mutate_json(rng, run_dir / rel)
            elif pick < 0.6:
                logs = sorted((run_dir / "logs").glob("*")) if (run_dir / "logs").is_dir() else []
                files = [p for p in logs if p.is_file() and not p.is_symlink()]
                if not files:
                    continue
                rel = str(rng.choice(files).relative_to(run_dir))
                mutate_log(rng, run_dir / rel)
            elif pick < 0.75:
                make_special(rng, run_dir, rel, secret)
            elif pick < 0.9:
                rel = "checkpoints"
                mutate_checkpoints(rng, run_dir)
            else:
                path = run_dir / rel
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif os.path.lexists(path):
                    path.unlink()
        except OSError:  # an earlier mutation put a file where a directory was: this one cannot apply
            continue
        done.append(rel)
    return done


def _read_checkpoint(directory: str) -> str:
    """In the forked worker: the offline reader on one checkpoint; a note or 'ok', never an exception."""
    from harness.read.history import dcp_optimizer_keys
    from harness.read.optimizer_record import read_optimizer_record

    rec = read_optimizer_record(Path(directory))
    keys = dcp_optimizer_keys(Path(directory))
    assert (rec.note is None) == (rec.steps is not None), rec
    assert (keys[3] is None) == (keys[0] is not None), keys
    return rec.note or "ok"


def _judge(argv: list[str]) -> tuple[int, str]:
    """One command in the forked worker: its status and what it printed on stderr."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        status = main(argv)
    return int(status), err.getvalue()[-3000:]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("fuzz-bases")
    return [rundirs.build(root / f"base{i}", s).run_dir for i, s in enumerate(SCENARIOS)]


def test_fuzzed_run_directories_never_crash_hang_or_leak(tmp_path, bases, pytestconfig):
    count = cases(pytestconfig, CASES)
    rng = random.Random(SEED)
    secret = tmp_path / "secret"
    secret.write_text("SECRET-TOKEN-7f3a9c")
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(1)
    problems: list[str] = []
    seen_statuses: set[int] = set()
    try:
        for case in range(count):
            run_dir = tmp_path / f"case{case:03d}"
            shutil.copytree(rng.choice(bases), run_dir, symlinks=True)
            what = damage(rng, run_dir, secret)
            command = rng.choice(("verify", "verify", "verify", "verify-write", "report", "diagnose"))
            if command == "verify-write":
                argv = ["verify", str(run_dir), "--quiet", "--json", str(tmp_path / f"case{case:03d}.json")]
            elif command == "verify":
                argv = ["verify", str(run_dir), "--no-write"]
            else:
                argv = [command, str(run_dir)]
            replay = f"case {case} (NVRX_QUAL_FUZZ_SEED={SEED}): {' '.join(argv[:1])} after damaging {what}"
            try:
                status, err = pool.apply_async(_judge, (argv,)).get(timeout=CASE_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                problems.append(f"{replay}: no answer within {CASE_TIMEOUT_S:g} s (a hang)")
                pool.terminate()
                pool = ctx.Pool(1)
                if sum("(a hang)" in p for p in problems) >= 3:
                    break  # enough to act on; the test's own time stays bounded
                continue
            seen_statuses.add(status)
            if status not in (0, 1, 2) or "Traceback" in err:
                problems.append(f"{replay}: exit {status}: {err.strip()[-800:]}")
            if "SECRET-TOKEN" in err:
                problems.append(f"{replay}: the content of a linked secret reached the output")
            if secret.read_text() != "SECRET-TOKEN-7f3a9c":
                problems.append(f"{replay}: a file outside the run directory was written through a link")
                secret.write_text("SECRET-TOKEN-7f3a9c")
            shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        pool.terminate()
        pool.join()
    assert not problems, f"{len(problems)} of {count} cases failed:\n" + "\n".join(problems[:10])
    assert {0, 1} <= seen_statuses or count < 50, seen_statuses  # the fuzz reaches verdicts, not only refusals


def test_hostile_and_type_confused_checkpoints_are_refused_never_run(tmp_path, bases):
    """Seeded generation over the reader of one checkpoint (NVRX_QUAL_FUZZ_PICKLES cases):
    generated hostile pickles and type-confused DCP metadata give a record with a note, no
    exception, no crash (a forked worker), no hang and no side effect of the pickle."""
    rng = random.Random(SEED)
    template = next(bases[0].glob("checkpoints/iter_*"))
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(1)
    side_effect = tmp_path / "hostile-side-effect"
    problems: list[str] = []
    notes: set[str] = set()
    try:
        for case in range(int(os.environ.get("NVRX_QUAL_FUZZ_PICKLES", "120"))):  # all: a few seconds
            d = tmp_path / f"iter_{case:07d}"
            shutil.copytree(template, d)
            md = d / ".metadata"
            confused = rng.random() < 0.4
            md.write_bytes(confused_metadata(rng, md.read_bytes()) if confused else hostile_pickle(rng, side_effect))
            replay = f"case {case} (NVRX_QUAL_FUZZ_SEED={SEED}), {md.read_bytes()[:120]!r}"
            try:
                note = pool.apply_async(_read_checkpoint, (str(d),)).get(timeout=CASE_TIMEOUT_S)
                notes.add(note.split(" ")[0])
            except multiprocessing.TimeoutError:
                problems.append(f"{replay}: the reader hung")
                pool.terminate()
                pool = ctx.Pool(1)
            except Exception as exc:  # noqa: BLE001 - the worker's exception or its death, as a finding
                problems.append(f"{replay}: {type(exc).__name__}: {exc}")
                pool.terminate()
                pool = ctx.Pool(1)
            if side_effect.exists():
                problems.append(f"{replay}: the pickle acted ({side_effect} exists)")
                shutil.rmtree(side_effect, ignore_errors=True)
            shutil.rmtree(d, ignore_errors=True)
    finally:
        pool.terminate()
        pool.join()
    assert not problems, "\n".join(problems[:10])
    assert len(notes) > 3, notes  # refusals of several kinds, not one


# ---------------------------------------------------------------- generators by class (issue 24, class 4)
# Each class of odd input the first fuzz reached only by chance, enumerated: a number in every
# numeric field of every line kind the dialect, history and triage parse, longer than Python's
# int-string limit (4300 digits) or beyond a float's range; losses and seconds of inf, NaN and
# 1e400; directory trees under logs/ deeper than the interpreter's recursion limit; a value of
# the wrong JSON type in every field of run.json, launch.json, the marker and verdict.json.
# Every case runs verify, report and diagnose in this process and wants a status in {0, 1, 2}.

HUGE_INTS = ("9" * 5000, "1" + "0" * 400)  # past the int-string limit; past a float's range
ODD_FLOATS = ("1e400", "-1e400", "inf", "nan", "NaN", "9" * 5000, "1" + "0" * 400 + ".5")
# `{}` marks each numeric field; lines are written as they appear in the launcher log and in
# a per-cycle application log (with the `0: ` label NVRx puts before them).
LINE_KINDS = (
    # prefixes history and triage peel off every line
    "{}: [rank{}]: plain text",
    "[default{}]:[rank{}]: text",
    "2026-11-29T16:32:{}.123Z out text",
    "[2026-11-29 17:32:09.{}] text",
    "I1129 17:32:09.{} 1 text",
    # Megatron
    " [2026-11-29 17:32:09.310000] iteration {}/ {} | consumed samples: {} | lm loss: {} | "
    "number of skipped iterations: {} | number of nan iterations: {} |",
    "saving checkpoint at iteration {} to /ckpt in torch_dist format",
    "  scheduled an async checkpoint save at iteration {} to /ckpt",
    "  successfully saved checkpoint from iteration {} to /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ]",
    " loading distributed checkpoint from /ckpt at iteration {}",
    "  successfully loaded checkpoint from /ckpt [ t 1/1 ] at iteration {}",
    "[nemesis] rank {} injecting SIGKILL after checkpoint iteration {} (baseline 0)",
    "[after training is done] datetime: 2026-11-29 17:32:{}.{}",
    "[Rank {}] (after {} iterations) memory (MB) | allocated: {} | max allocated: {} | reserved: {} | max reserved: {}",
    "    world_size ...................................... {}",
    "using world size: {}, data-parallel size: {}, context-parallel size: {}, tensor-model-parallel size: {}, "
    "pipeline-model-parallel size: {}",
    'Traceback (most recent call last):\n  File "/opt/megatron/train.py", line {}, in train_step\n    step()\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} GiB. GPU {} has a total capacity of {} GiB",
    "[Rank {}] NCCL WARN Watchdog caught collective operation timeout",
    # NVRx and torch elastic
    "profiling.py:93 Cycle: {} Event: worker_start_completed Node: n_1_0 Rank: {} Time: 2026-11-29 16:32:05.{} UTC",
    "[Cycle {}] Section 'step' has been open for {} seconds. Timeout is {} seconds.",
    "[RankMonServer{}@vm:{}] Was out of section for {} seconds. Timeout is {} seconds.",
    "[node7] [workload:{}({}) infra:?(?)] Did not get initial heartbeat. Waited {} seconds.",
    "[RankMonServer{}@vm:{}] FT timeout elapsed",
    "The node 'n_1_0' has joined round {} of the rendezvous 'job' as rank {} in a world of size {}.",
    "failed (exitcode: {}) local_rank: {} (pid: {}) of binary: /usr/bin/python3",
    "Worker group FAILED. {}/{} attempts left; will restart worker group",
    "{}/{} restart attempts left. Exiting...",
    "[ft_launcher1@vm] Agent's exit code = {}",
    "srun: error: node{}: tasks {}: Exited with exit code {}",
    "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-29_17:32:09\n  host      : vm\n"
    "  rank      : {} (local_rank: {})\n  exitcode  : {} (pid: 1)\n  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n" + "=" * 60,
)
# names whose numbers discovery and history read
FILE_NAMES = ("logs/train_cycle{}.log", "logs/attempt_{}/{}/stderr.log", "cycle_infos/cycle_info.job.{}.{}",
              "checkpoints/iter_{}")


def _field_lines(template: str) -> list[str]:
    """The line once per numeric field and odd value (the other fields ordinary)."""
    lines = []
    for i in range(template.count("{}")):
        for value in HUGE_INTS + ODD_FLOATS[:3]:
            lines.append(_fill(template, i, value))
    return lines


def _fill(template: str, field: int, value: str) -> str:
    ordinary = ("1", "2", "3", "4", "5", "6")
    parts = [value if i == field else ordinary[i % len(ordinary)] for i in range(template.count("{}"))]
    return template.format(*parts)


def _statuses(run_dir: Path, tmp_path: Path) -> dict[str, tuple[int, str]]:
    """verify (with a verdict written, then report on it) and diagnose, in this process."""
    out = {}
    for name, argv in (("verify", ["verify", str(run_dir), "--quiet", "--json", str(tmp_path / "v.json")]),
                       ("report", ["report", str(run_dir)]), ("diagnose", ["diagnose", str(run_dir)])):
        out[name] = _judge(argv)
    return out


def _assert_no_crash(statuses: dict[str, tuple[int, str]], what: str) -> None:
    bad = {name: (status, err.strip()[-600:]) for name, (status, err) in statuses.items()
           if status not in (0, 1, 2) or "Traceback" in err}
    assert not bad, f"{what}: {bad}"


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    return rundirs.build(tmp_path_factory.mktemp("class4") / "base", rundirs.Scenario()).run_dir


def _copy(base: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(base, run_dir, symlinks=True)
    return run_dir


def _append_everywhere(run_dir: Path, line: str) -> None:
    """The line (or block) in the launcher log, in each per-cycle log (each line labelled) and
    in a single log."""
    for path in sorted((run_dir / "logs").glob("*.log")):
        prefix = "" if path.name == "launcher.log" else "0: "
        with open(path, "a") as fh:
            fh.write("".join(prefix + part + "\n" for part in line.split("\n")))
    with open(run_dir / "job.out", "a") as fh:
        fh.write(line + "\n")


@pytest.mark.parametrize("template", LINE_KINDS, ids=lambda t: t.strip()[:28])
def test_odd_numbers_in_every_field_of_every_line_kind(tmp_path, base_run, template):
    run_dir = _copy(base_run, tmp_path)
    for line in _field_lines(template):
        _append_everywhere(run_dir, line)
    _assert_no_crash(_statuses(run_dir, tmp_path), f"odd numbers in each field of {template!r}")


@pytest.mark.parametrize("loss", ODD_FLOATS)
def test_odd_losses_and_iterations_in_the_progress_curve(tmp_path, base_run, loss):
    """Iteration lines whose loss and numbers are inf, NaN or beyond a float reach the curve
    timeline.png draws, and the loss comparison."""
    run_dir = _copy(base_run, tmp_path)
    for path in sorted((run_dir / "logs").glob("*cycle*.log")):
        with open(path, "a") as fh:
            for it in ("31", "1" + "0" * 400, "9" * 5000):
                fh.write(f"0:  [2026-11-29 17:40:09.310000] iteration {it}/ {it} | consumed samples: 1 | "
                         f"lm loss: {loss} | number of skipped iterations:   0 | number of nan iterations:   0 |\n")
    _assert_no_crash(_statuses(run_dir, tmp_path), f"loss {loss[:20]}")


@pytest.mark.parametrize("name", FILE_NAMES)
@pytest.mark.parametrize("value", HUGE_INTS[1:])  # a file name holds at most 255 bytes
def test_odd_numbers_in_file_names(tmp_path, base_run, name, value):
    run_dir = _copy(base_run, tmp_path)
    rel = name.format(value[:200], value[:20])
    path = run_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if name.startswith("checkpoints/"):
        path.mkdir()
        (path / "metadata.json").write_text("{}")
    elif name.startswith("cycle_infos/"):
        path.write_text(json.dumps({"cycle_number": value, "attempt_index": int(value), "cycle_start_time": value}))
    else:
        path.write_text("0:  loading distributed checkpoint from /ckpt at iteration 10\n")
    _assert_no_crash(_statuses(run_dir, tmp_path), rel[:80])


@pytest.mark.parametrize("depth", (1200, 3000))
def test_deeply_nested_directories_under_logs(tmp_path, base_run, depth):
    """Deeper than the recursion limit; the deeper one also past PATH_MAX from the run dir."""
    run_dir = _copy(base_run, tmp_path)
    fd = os.open(run_dir / "logs", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with os.fdopen(os.open("deep.log", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write("Traceback (most recent call last):\nRuntimeError: deep\n")
    finally:
        os.close(fd)
    try:
        _assert_no_crash(_statuses(run_dir, tmp_path), f"logs/ {depth} folders deep")
    finally:
        _remove_deep(run_dir / "logs")


def _remove_deep(top: Path) -> None:
    """rmtree for a tree deeper than PATH_MAX (shutil.rmtree walks by descriptor, but recurses)."""
    path = top
    chain = []
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    while "d" in os.listdir(fd):
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        chain.append(fd)
        fd = inner
    os.close(fd)
    while chain:
        parent = chain.pop()
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent)
        for name in os.listdir(inner):
            os.unlink(name, dir_fd=inner)
        os.close(inner)
        os.rmdir("d", dir_fd=parent)
        os.close(parent)


WRONG_TYPES = (None, True, -1, 2 ** 70, "9" * 5000, 1e308, float("nan"), float("inf"), "",
               "x", [], [1, "a"], {}, {"a": [None]})
JSON_FIELDS = {
    "run.json": ("run_id", "dry_run", "utc_offset_s", "created_at", "commands", "nvrx_version", "spec",
                 "spec.fault", "spec.fault_rank", "spec.fault_at", "spec.train_iters", "spec.save_interval",
                 "spec.max_restarts", "spec.max_no_progress_cycles", "spec.nnodes", "spec.work_dir", "spec.run_id",
                 "spec.checkpoint_dir", "spec.extra_args", "spec.section_timeouts", "spec.deadline_profile",
                 "spec.micro_batch_size", "spec.tp"),
    "launch.json": ("launcher_exit_code", "started_at", "ended_at", "stopped_early", "nvrx_version", "clock_jumps",
                    "capture_error"),
    "fault_injected.json": ("fault", "signal", "rank", "local_rank", "cycle", "iteration", "baseline_iteration",
                            "injected_at", "pid", "launcher_pid", "host", "fault_at", "committed_iteration",
                            "poisoned"),
    "verdict.json": ("schema", "run_dir", "fault", "fault_source", "qualified", "criteria", "metrics",
                     "metrics.lost_iterations", "metrics.recoveries", "metrics.iterations", "launcher",
                     "launcher.exit_code", "launcher.nvrx_version", "deadlines", "notes", "verified_at"),
}


def _json_cases() -> list[tuple[str, tuple[str, ...], object]]:
    """Each field of verdict.json with each odd value (only `report` reads it: cheap); each
    field of the other records with one odd value (turn by turn); each odd value in every
    field of a record at once."""
    one = [(name, (key,), value) for key in JSON_FIELDS["verdict.json"] for value in WRONG_TYPES
           for name in ("verdict.json",)]
    one += [(name, (key,), WRONG_TYPES[i % len(WRONG_TYPES)])
            for name, keys in JSON_FIELDS.items() if name != "verdict.json" for i, key in enumerate(keys)]
    every = [(name, keys, value) for name, keys in JSON_FIELDS.items() for value in WRONG_TYPES]
    return one + every


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory, base_run) -> Path:
    """The base run with a verdict.json written by verify, for report to read."""
    run_dir = tmp_path_factory.mktemp("judged") / "run"
    shutil.copytree(base_run, run_dir, symlinks=True)
    status, err = _judge(["verify", str(run_dir), "--quiet"])
    assert status in (0, 1) and (run_dir / "verdict.json").is_file(), err
    return run_dir


@pytest.mark.parametrize("name,keys,value", _json_cases(), ids=lambda v: str(v)[:16])
def test_wrong_json_types_in_every_record_field(tmp_path, judged_run, name, keys, value):
    run_dir = _copy(judged_run, tmp_path)
    path = run_dir / name
    doc = json.loads(path.read_text())
    for key in keys:
        target, _, leaf = key.rpartition(".")
        holder = doc.get(target) if target else doc
        if not isinstance(holder, dict):
            holder = doc[target] = {}
        holder[leaf] = copy.deepcopy(value)  # one object per field: no record refers to itself
    path.write_text(json.dumps(doc, allow_nan=True))
    statuses = {"report": _judge(["report", str(run_dir)])} if name == "verdict.json" else _statuses(run_dir, tmp_path)
    _assert_no_crash(statuses, f"{name} {', '.join(keys)[:60]} = {str(value)[:30]}")
