"""Replay every recorded and built run directory the tests have and dump its verdict JSON.

    python tools/replay_verdicts.py collect [TEST_FILE ...]   # record the Scenarios the tests build
    python tools/replay_verdicts.py dump OUT_DIR               # one OUT_DIR/<name>.json per run directory

`collect` runs pytest on the test files with this module as a plugin: every `rundirs.build`
call records its Scenario (a frozen dataclass whose repr evaluates back to it) in
tools/replay_scenarios.txt, one a line, sorted, without duplicates. `dump` replays the recorded
samples (recovery_tests/data/samples/*) and builds each recorded Scenario in a temporary
directory, judges it with harness.report.verify.verify_run (writing nothing into the run directory)
and writes the verdict JSON (and, beside it, diagnose's triage JSON as <name>.triage.json) with the fields that vary from one replay to the next (the time
of the verdict, the temporary path, the evidence digest's sha256, which covers the entries'
modification times) normalised. Diff two dumps
(`diff -r BEFORE AFTER`) to see what a change to the judging did to every verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tools" / "replay_scenarios.txt"
SAMPLES = ROOT / "recovery_tests" / "data" / "samples"
_RECORD_ENV = "REPLAY_VERDICTS_RECORD"


# ---------------------------------------------------------------- pytest plugin (collect)

def pytest_configure(config) -> None:  # noqa: ARG001 - pytest's hook signature
    target = os.environ.get(_RECORD_ENV)
    if not target:
        return
    from recovery_tests import rundirs

    original = rundirs.build

    def recording_build(root, s=rundirs.Scenario()):
        with open(target, "a", encoding="utf-8") as out:
            out.write(repr(s) + "\n")
        return original(root, s)

    rundirs.build = recording_build


def collect(tests: list[str]) -> int:
    import subprocess

    tests = tests or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recovery_tests").glob("test_*.py")
                            if "Scenario" in p.read_text(encoding="utf-8") or "rundirs" in p.read_text(encoding="utf-8"))
    with tempfile.NamedTemporaryFile("r", suffix=".txt", delete=False) as tmp:
        record = tmp.name
    env = {**os.environ, _RECORD_ENV: record,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "replay_verdicts", "-p", "no:cacheprovider",
           "-m", "not gpu and not e2e and not fuzz", *tests]  # fuzz: generated damage, not verdicts
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    lines = sorted({line.strip() for line in Path(record).read_text(encoding="utf-8").splitlines() if line.strip()})
    os.unlink(record)
    SCENARIOS.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{len(lines)} distinct scenarios -> {SCENARIOS} (pytest exit {rc})")
    return 0


# ---------------------------------------------------------------- dump

def _normalise(doc: dict, run_dir: Path) -> dict:
    text = json.dumps(doc, sort_keys=True)
    text = text.replace(str(run_dir), "<RUN_DIR>")
    doc = json.loads(text)
    doc.pop("verified_at", None)
    digest = doc.get("evidence_digest")
    if isinstance(digest, dict) and "sha256" in digest:  # covers the entries' mtimes: new with every build
        digest["sha256"] = "<covers the mtimes of this replay's copy>"
    return doc


def _judge(run_dir: Path) -> dict:
    from harness.vocab.verdict import verdict_json
    from harness.report.verify import verify_run

    try:
        verdict = verify_run(run_dir, picture=True)
    except Exception as exc:  # noqa: BLE001 - a replay records what happened, whatever it was
        return {"replay_error": f"{type(exc).__name__}: {exc}"}
    return _normalise(json.loads(verdict_json(verdict)), run_dir)


def _triage(run_dir: Path) -> dict:
    """diagnose's reading of the run directory (triage.to_json), whether or not it qualified."""
    from harness.judge.triage import diagnose

    try:
        found = diagnose(run_dir)
    except Exception as exc:  # noqa: BLE001 - a replay records what happened, whatever it was
        return {"replay_error": f"{type(exc).__name__}: {exc}"}
    return _normalise(found.to_json(), run_dir)


def dump(out: Path) -> int:
    from recovery_tests import rundirs
    from recovery_tests.rundirs import Scenario  # noqa: F401 - eval of the recorded reprs

    out.mkdir(parents=True, exist_ok=True)
    count = 0
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        for sample in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
            copy = Path(tmp) / sample.name
            shutil.copytree(sample, copy, symlinks=True)
            (out / f"sample-{sample.name}.json").write_text(json.dumps(_judge(copy), indent=1, sort_keys=True) + "\n")
            (out / f"sample-{sample.name}.triage.json").write_text(
                json.dumps(_triage(copy), indent=1, sort_keys=True) + "\n")
            count += 1
        for n, line in enumerate(SCENARIOS.read_text(encoding="utf-8").splitlines()):
            scenario = eval(line, {"Scenario": rundirs.Scenario})  # noqa: S307 - our own recorded reprs
            root = Path(tmp) / f"s{n:03d}"
            built = rundirs.build(root, scenario)
            doc = {"scenario": line, "verdict": _judge(built.run_dir)}
            (out / f"scenario-{n:03d}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            triage = {"scenario": line, "triage": _triage(built.run_dir)}
            (out / f"scenario-{n:03d}.triage.json").write_text(json.dumps(triage, indent=1, sort_keys=True) + "\n")
            shutil.rmtree(root, ignore_errors=True)
            count += 1
    print(f"{count} verdicts -> {out}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["collect"]:
        return collect(argv[1:])
    if len(argv) == 2 and argv[0] == "dump":
        return dump(Path(argv[1]))
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
