"""One recovery episode per injection: outside harness.read.history (which reads the markers) and
harness.judge.episodes (the episode type, which decides which injection and which failed cycle an
episode is about), no module indexes "the" injection or "the" failed cycle. Read from the
sources with `ast` (nothing is imported), like test_import_graph.py.

Forbidden outside the allow-list:
- an attribute, variable, field or keyword named `injection`, `first_injection` or
  `failed_cycle` (`a.injection`, `Progress.failed_cycle`, `failed_cycle=...`): a run has
  episodes, each with its marker and its cycle;
- `<...>.injections[0]` / `<...>.injections[-1]` (or `markers[...]`, or a bare `injections[0]`): picking one
  marker out of several is the episode type's job.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "fixtures")
ALLOWED = {
    "harness/read/history.py": "reads the markers (fault_injected.json, fault_injected.<n>.json) into Timeline.injections",
    "harness/judge/episodes.py": "the episode type: one episode per injection, its failed cycle",
}
NAMES = {"injection", "first_injection", "failed_cycle"}
LISTS = {"injections", "markers"}


def _index(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        return -value if isinstance(value, int) else None
    return None


def _list_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def violations(source: str, rel: str) -> list[str]:
    """Each use of "the" injection or "the" failed cycle in one module's source."""
    found = []
    for node in ast.walk(ast.parse(source, rel)):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.arg):
            name = node.arg
        elif isinstance(node, ast.keyword):
            name = node.arg
        if name in NAMES:
            found.append(f"{rel}:{getattr(node, 'lineno', 0)}: {name}")
        if isinstance(node, ast.Subscript) and _list_name(node.value) in LISTS and _index(node.slice) in (0, -1):
            found.append(f"{rel}:{node.lineno}: {_list_name(node.value)}[{_index(node.slice)}]")
    return found


def scan(root: Path = ROOT) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel not in ALLOWED:
                found.extend(violations(path.read_text(encoding="utf-8"), rel))
    return found


def test_no_module_outside_history_and_the_episode_type_indexes_the_injection():
    assert scan() == [], "judge an episode (harness.judge.episodes) instead of 'the' injection or failed cycle"


def test_the_guard_sees_each_way_of_indexing_the_injection():
    source = """
def f(a, tl, p):
    x = a.injection
    y = tl.injections[-1]
    z = tl.injections[0]
    c = p.failed_cycle
    failed_cycle = 3
    return Progress(failed_cycle=c), a.first_injection, tl.injections[1], [i for i in tl.injections]
"""
    found = violations(source, "m.py")
    assert sorted(found) == sorted(["m.py:3: injection", "m.py:4: injections[-1]", "m.py:5: injections[0]",
                                    "m.py:6: failed_cycle", "m.py:7: failed_cycle", "m.py:8: failed_cycle",
                                    "m.py:8: first_injection"]), found


def test_the_allow_list_names_existing_modules():
    assert all((ROOT / rel).is_file() for rel in ALLOWED)
