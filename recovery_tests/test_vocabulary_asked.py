"""Moments and kinds are asked, never spelled (issue 33): the fault vocabulary is one table per
axis in harness/vocab/faults.py (FAULT_KINDS, FAULT_MOMENTS, their names as constants), and the
rest of the house asks a row for what it needs (`kind.loses_node`, `kind.dies_at_once`,
`moment.hits_a_save`, `moment.watches_commits`, `poisons_checkpoint`, ...) instead of comparing a
name. Read from the sources with `ast` (tests and docs excluded): outside faults.py,

- a moment's name is no string literal at all (`"in-save"`, `"after-commit"`, ...): the constants
  (IN_SAVE, DEFAULT_FAULT_AT, ...) or the row's properties say it;
- a kind's name is never compared (`==`, `!=`, `in`, `not in`, a literal in a compared tuple) nor
  used as a key (a subscript, a dict literal's key, `.get`/`.pop`/`.setdefault`, a `case`): a
  branch on "kill" or "node" is a property of the kind's row that the table does not have yet.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.vocab.faults import FAULT_KINDS, FAULT_MOMENTS

ROOT = Path(__file__).resolve().parent.parent
VOCABULARY = ROOT / "harness" / "vocab" / "faults.py"
KEYED = ("get", "pop", "setdefault")


def sources(root: Path = ROOT) -> list[Path]:
    found = [*root.glob("harness/**/*.py"), *root.glob("fixtures/**/*.py"), *root.glob("tools/*.py"),
             *root.glob("bench/*.py"), root / "conftest.py"]
    return sorted(p for p in found if p.is_file() and p != VOCABULARY)


def _names(node: ast.AST | None, names: set[str]):
    """The vocabulary's names written as literals in `node` (itself, or the members of a literal
    tuple, list or set)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        yield node
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for e in node.elts:
            yield from _names(e, names)


def spelled(tree: ast.AST, where: str) -> list[str]:
    """Every moment name written as a literal, and every kind name compared or used as a key."""
    moments, kinds = set(FAULT_MOMENTS), set(FAULT_KINDS)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in moments:
            found.append(f"{where}:{n.lineno}: the moment {n.value!r} spelled")
        used: list[ast.AST] = []
        if isinstance(n, ast.Compare):
            for operand in (n.left, *n.comparators):
                used += _names(operand, kinds)
        elif isinstance(n, ast.Subscript):
            used += _names(n.slice, kinds)
        elif isinstance(n, ast.Dict):
            for key in n.keys:
                used += _names(key, kinds)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in KEYED and n.args:
            used += _names(n.args[0], kinds)
        elif isinstance(n, ast.MatchValue):
            used += _names(n.value, kinds)
        found += [f"{where}:{u.lineno}: the kind {u.value!r} compared or used as a key" for u in used]
    return found


def test_moments_and_kinds_are_asked_of_the_vocabulary_never_spelled() -> None:
    found = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        found += spelled(ast.parse(path.read_text(encoding="utf-8")), rel)
    assert not found, ("ask harness.vocab.faults (a row's property or its constants) instead: "
                       + "; ".join(found))


def test_the_rule_sees_a_moment_or_a_kind_spelled() -> None:
    tree = ast.parse("in_save = marker.fault_at == 'in-save'\n"
                     "if kind_name(ep) in ('kill', 'term'): pass\n"
                     "EXIT = {'segfault': -11}\n"
                     "shown = names.get('node')\n"
                     "x = TABLE['gil']\n"
                     "match k:\n    case 'hang': pass\n"
                     "default = 'last-iteration'\n"
                     "ok = FAULT_KINDS[name].loses_node and fault_at == DEFAULT_FAULT_AT\n"
                     "said = f'kill {x}' + 'kill'\n")  # a kind's word in text is no comparison
    found = spelled(tree, "x.py")
    assert sorted(found, key=lambda f: int(f.split(":")[1])) == [
        "x.py:1: the moment 'in-save' spelled", "x.py:2: the kind 'kill' compared or used as a key",
        "x.py:2: the kind 'term' compared or used as a key", "x.py:3: the kind 'segfault' compared or used as a key",
        "x.py:4: the kind 'node' compared or used as a key", "x.py:5: the kind 'gil' compared or used as a key",
        "x.py:7: the kind 'hang' compared or used as a key", "x.py:8: the moment 'last-iteration' spelled"], found
