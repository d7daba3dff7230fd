"""One reader of a JSON record's numbers (issue 26): dialect.record_number, with the bound of
each quantity in dialect.BOUNDS, serves verdict.json's reader (verdict._num / _int) and
history's records (history._int) too; a second bound or a second type rule beside it fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.vocab import dialect, verdict
from harness.read import history

ROOT = Path(__file__).resolve().parent.parent
# modules that bound numbers at 2**53 for another reason than reading a record, with the reason
OTHER_USES = {"harness/report/picture.py": "what matplotlib can draw of values history already range-checked"}


def test_verdict_and_history_read_numbers_through_record_number(monkeypatch) -> None:
    assert verdict._num(12.5) == 12.5 and verdict._int(12) == 12 and history._int("12") == 12
    monkeypatch.setitem(dialect.BOUNDS, "record", (0, 10))  # one bound: narrowing it narrows every reader
    assert verdict._num(12.5) is None and verdict._int(12) is None and history._int("12") is None
    assert verdict._num(9.5) == 9.5 and history._int(" 9 ") == 9


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), "12", 2 ** 53 + 1, None, [1]])
def test_what_no_reader_takes(value: object) -> None:
    assert verdict._num(value) is None and verdict._int(value) is None
    assert history._int(value) is (12 if value == "12" else None)  # history's records may write digits


def test_no_module_states_a_json_number_bound_of_its_own() -> None:
    """`2 ** 53` / `1 << 53` (the largest integer a JSON double holds exactly) is stated once, in
    dialect.BOUNDS["record"]."""
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant) and node.right.value == 53 and \
                    isinstance(node.left, ast.Constant) and node.left.value in (1, 2) and rel != "harness/vocab/dialect.py" \
                    and rel not in OTHER_USES:
                found.append(f"{rel}:{node.lineno}")
    assert not found, f"a second bound of JSON numbers: {found}"
