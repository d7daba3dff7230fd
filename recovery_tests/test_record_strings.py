"""Strings in a received run directory's records that the OS cannot take (issue 32, item 2).

A NUL byte in run.json's spec.work_dir made `verify` exit 3 (Path.resolve raised ValueError)
and leave a traceback file in the temporary directory. Every string of every record (run.json,
launch.json, the markers, cycle infos; verdict.json where it is read) is now checked where the
records are read (harness.safe.safeio.parse_record), and the strings that name paths or names
(run.json's work_dir, checkpoint_dir, run_id, the launch's working directory, the directories
its workload arguments name) also for their length: the run directory is refused (exit 2, one
sentence naming the file and the field), never an internal error.

The fuzz: every string (and every key) of the records of a realistic run directory gets one
hostile value, seeded (NVRX_QUAL_FUZZ_SEED), turn by turn; the path fields get each length
that no path or name may have.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from harness.safe import safeio
from harness.cli import main
from harness.report.verify import verify_run
from recovery_tests import rundirs

SEED = int(os.environ.get("NVRX_QUAL_FUZZ_SEED", "20261205"))
HOSTILE = {"nul": "a\x00b", "surrogate": "x\ud800y", "nul-only": "\x00"}
EVIDENCE = ("run.json", "launch.json", "fault_injected.json", "cycle_infos/cycle_info..0.0")
PATHS = ("spec.work_dir", "spec.checkpoint_dir", "spec.run_id", "commands[0].cwd")
TOO_LONG = {"long-path": "/" + "d/" * 2100, "long-name": "/x/" + "n" * 300}
VERDICT_SAMPLE = 12  # verdict.json holds hundreds of strings: a seeded sample of them


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Path:
    """A realistic run directory (a kill that recovered; NVRx 0.7.0's cycle infos), with
    work_dir and a workload argument naming a directory recorded, and its verdict.json."""
    run_dir = rundirs.build(tmp_path_factory.mktemp("records") / "runs" / "good", rundirs.Scenario()).run_dir
    record = json.loads((run_dir / "run.json").read_text())
    record["spec"]["work_dir"] = str(run_dir.parent.parent)
    record["spec"]["extra_args"] = ["--non-persistent-global-ckpt-dir", str(run_dir / "np")]
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    assert verify_run(run_dir, write=True, picture=False).qualified and (run_dir / "verdict.json").is_file()
    return run_dir


def locations(value: object, where: str = "") -> list[str]:
    """Every string leaf of a JSON value ("spec.fault", "commands[0].argv[2]") and, as
    "KEY:<where>.<key>", every key of every object."""
    out = []
    if isinstance(value, str):
        out.append(where)
    elif isinstance(value, dict):
        for key, sub in value.items():
            named = f"{where}.{key}" if where else key
            out.append(f"KEY:{named}")
            out += locations(sub, named)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            out += locations(sub, f"{where}[{i}]")
    return out


def _steps(where: str) -> list[str | int]:
    steps: list[str | int] = []
    for part in where.split("."):
        name, *indices = part.split("[")
        steps.append(name)
        steps += [int(i.rstrip("]")) for i in indices]
    return steps


def plant(doc: object, where: str, value: str) -> str:
    """Put `value` at `where` (a string leaf, or for KEY: the key's name) in `doc`; returns how
    the refusal names the place."""
    key = where.startswith("KEY:")
    steps = _steps(where[4:] if key else where)
    holder = doc
    for step in steps[:-1]:
        holder = holder[step]
    last = steps[-1]
    if key:
        holder[value] = holder.pop(last)
        parent = where[4:].rpartition(".")[0]
        return f"the name of a field in {parent or 'the record'}"
    holder[last] = value
    return where


def cases(run_dir: Path) -> list[tuple[str, str, str]]:
    """(record, location, hostile value's name): each string and key of the evidence records
    once, a sample of verdict.json's, each path field with each length no path may have."""
    rng = random.Random(SEED)
    out = []
    for rel in (*EVIDENCE, "verdict.json"):
        found = locations(json.loads((run_dir / rel).read_text()))
        if rel == "verdict.json":
            found = rng.sample(found, VERDICT_SAMPLE)
        out += [(rel, where, rng.choice(sorted(HOSTILE))) for where in found]
    out += [("run.json", where, name) for where in PATHS for name in TOO_LONG]
    out += [("run.json", "spec.extra_args[1]", name) for name in TOO_LONG]
    return out


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """The temporary directory an internal error would leave its traceback file in."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return tmp


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "runs" / run_dir.name, symlinks=True))


def test_the_fuzz_reaches_every_record_and_the_fields_history_resolves(judged):
    found = cases(judged)
    assert {rel for rel, _, _ in found} == {*EVIDENCE, "verdict.json"}
    places = {where for _, where, _ in found}
    assert {"spec.work_dir", "spec.run_id", "spec.checkpoint_dir", "commands[0].cwd", "KEY:spec.work_dir"} <= places
    assert len(found) > 80, len(found)


def _run(argv: list[str], capsys) -> tuple[int, str]:
    status = main(argv)
    return status, capsys.readouterr().err


def test_every_string_of_the_records_is_checked_before_use(judged, tmp_path, private_tmp, capsys):
    """Case by case in one copy of the run directory (each record restored after its case):
    verify (and, for the fields history resolves, diagnose) never crash. The evidence
    records are refused with exit 2 naming the file and the field; a hostile verdict.json is
    read by report, which notes it unreadable and judges the evidence (a stored verdict is
    never believed). No traceback file is left."""
    run_dir = _copy(judged, tmp_path)
    failures = []
    for rel, where, name in cases(judged):
        original = (run_dir / rel).read_bytes()
        doc = json.loads(original)
        named = plant(doc, where, HOSTILE.get(name) or TOO_LONG[name])
        (run_dir / rel).write_text(json.dumps(doc))
        if rel == "verdict.json":
            status, err = _run(["report", str(run_dir)], capsys)
            ok = status == 0 and "verdict.json is unreadable" in err and f"{named} holds " in err
        else:
            status, err = _run(["verify", "--no-write", "--quiet", str(run_dir)], capsys)
            ok = (status == 2 and f"{run_dir / rel}: {named}" in err and " holds " in err
                  and "nvrx-qual never writes such a record" in err)
            if ok and where in PATHS:
                status, err = _run(["diagnose", str(run_dir)], capsys)
                ok = status == 2 and f"{named} holds " in err
        if not ok:
            failures.append(f"{rel} {where} = {name}: exit {status}: {err.strip()[-300:]}")
        (run_dir / rel).write_bytes(original)
    left = sorted(p.name for p in private_tmp.iterdir())
    assert failures == [] and left == [], "\n".join(failures[:20] + left)


def test_verify_ignores_and_replaces_a_stored_verdict_with_odd_strings(judged, tmp_path, private_tmp, capsys):
    run_dir = _copy(judged, tmp_path)
    doc = json.loads((run_dir / "verdict.json").read_text())
    doc["fault"] = "hang\x00"  # compared with the fault this verification is for: never read now
    (run_dir / "verdict.json").write_text(json.dumps(doc))
    status, err = _run(["verify", "--quiet", str(run_dir)], capsys)
    assert status == 0, err
    assert json.loads((run_dir / "verdict.json").read_text())["fault"] == "kill"
    assert list(private_tmp.iterdir()) == []


def test_report_counts_a_refused_run_as_refused_not_as_skipped(judged, tmp_path, private_tmp, capsys):
    run_dir = _copy(judged, tmp_path)
    doc = json.loads((run_dir / "run.json").read_text())
    doc["spec"]["work_dir"] = "/tmp/x\x00y"
    (run_dir / "run.json").write_text(json.dumps(doc))
    status, err = _run(["report", str(run_dir)], capsys)
    assert status == 2 and "spec.work_dir holds a NUL byte" in err and "skipped" not in err, err
    assert list(private_tmp.iterdir()) == []


def test_the_string_checks():
    assert safeio.string_problem("ok/ünïcode \udc80") is None  # bytes that are not UTF-8 (surrogateescape) are fine
    assert "NUL" in safeio.string_problem("a\x00")
    assert "surrogate" in safeio.string_problem("\ud800")
    assert safeio.path_problem("/" + "a" * 255) is None and "name of 256 bytes" in safeio.path_problem("/" + "a" * 256)
    assert "path of 4096 bytes" in safeio.path_problem("/" + "a/" * 2047 + "b")
    assert safeio.name_problem("a/b") and safeio.name_problem("..") and safeio.name_problem("run-1") is None
    deep = {"a": [{"b": ["ok", {"c\x00": 1}]}]}
    problem = safeio.record_problem(deep)
    assert problem is not None and problem.where == "the name of a field in a[0].b[1]", problem
    with pytest.raises(safeio.UnusableRecord, match=r"commands\[0\]\.argv\[1\] holds a NUL byte"):
        safeio.parse_record(json.dumps({"commands": [{"argv": ["python", "x\x00"]}]}))
