"""One table of knobs (spec.KNOBS): each knob's constraints sit beside its declaration
(Knob.check), and the deadline numbers are stated once (spec.DEADLINE_PROFILES): RunSpec's
defaults, the --section-timeouts example, both --help texts are derived from it, and the
table in docs/usage.md is held to it here."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from harness.plan import spec as specmod

ROOT = Path(__file__).resolve().parent.parent


def reference(tmp_path: Path, **values) -> specmod.RunSpec:
    spec = specmod.from_sources({"workload": "reference", "work_dir": tmp_path, "run_id": "k1"}, {})
    return dataclasses.replace(spec, **values)


def test_the_defaults_are_the_default_profiles_deadlines() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(specmod.RunSpec)}
    profile = specmod.DEADLINE_PROFILES[specmod.DEFAULT_DEADLINE_PROFILE]
    assert {name: fields[name] for name in specmod.DEADLINE_FIELDS} == profile
    assert fields["deadline_profile"] == specmod.DEFAULT_DEADLINE_PROFILE
    assert specmod.KNOBS_BY_FIELD["section_timeouts"].fix == specmod.sections_text(specmod.DEFAULT_DEADLINE_PROFILE)


def literal_deadlines(text: str, rel: str) -> list[str]:
    """String constants that restate section deadlines ('setup:900,...') instead of deriving them."""
    tree = ast.parse(text, rel)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and re.search(r"\bsetup:\d", node.value)):
            found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    return found


def test_no_module_restates_the_deadline_numbers() -> None:
    found = []
    for top in ("harness", "fixtures"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += literal_deadlines(path.read_text(encoding="utf-8"), rel)
    assert not found, "deadline numbers restated; derive them from spec.DEADLINE_PROFILES:\n" + "\n".join(found)
    assert literal_deadlines('help = "walkthrough (setup:900,step:120)"\n', "x.py")  # the scan can fail
    assert not literal_deadlines('def f():\n    """Parses \'setup:900,step:120\'."""\n', "x.py")


def usage_table() -> dict[str, list[str]]:
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    section = usage[usage.index("## Deadline profiles"):]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z-]+)` \| (.*)", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")][:5]
    return rows


def test_the_docs_table_states_each_profiles_numbers() -> None:
    rows = usage_table()
    assert set(rows) == set(specmod.DEADLINE_PROFILES)
    for name, profile in specmod.DEADLINE_PROFILES.items():
        sections = dict(profile["section_timeouts"])
        check = profile["workload_check_interval"]
        expected = [f"{specmod._num(sections[s])} s" for s in specmod.SECTIONS]
        expected += [f"{specmod._num(profile['out_of_section_timeout'])} s",
                     "NVRx's 5 s" if check is None else f"{specmod._num(check)} s"]
        assert rows[name] == expected, (name, rows[name], expected)


@pytest.mark.parametrize(("field", "bad", "words"), [
    ("train_iters", 0, "--train-iters=0 must be a positive integer"),
    ("hot_spares", -1, "--hot-spares=-1 must be 0 or more"),
    ("max_no_progress_cycles", 0, "--max-no-progress-cycles=0 must be 1 or more"),
    ("out_of_section_timeout", float("nan"), "--out-of-section-timeout=nan must be a number of seconds"),
    ("section_timeouts", (("setup", 1.0), ("step", 0.0), ("checkpointing", 1.0)), "--section-timeouts step=0.0"),
    ("fault_rank", 9, "--fault-rank=9 is outside the active world of 2"),
    ("max_restarts", 0, "--max-restarts=0 leaves no restart"),
    ("rdzv_endpoint", "nohost", "--rdzv-endpoint=nohost is not HOST:PORT"),
    ("save_delay_ms", -5, "--save-delay-ms=-5 must be 0 or more"),
])  # fmt: skip
def test_each_constraint_is_its_knobs_own(tmp_path: Path, field: str, bad: object, words: str) -> None:
    knob = specmod.KNOBS_BY_FIELD[field]
    assert knob.check is not None and knob.check(reference(tmp_path)) == []
    assert any(words in p for p in knob.check(reference(tmp_path, **{field: bad}))), knob.check(
        reference(tmp_path, **{field: bad}))
    with pytest.raises(specmod.SpecError, match=re.escape(words)):  # and validate() runs it
        specmod.validate(reference(tmp_path, **{field: bad}))
