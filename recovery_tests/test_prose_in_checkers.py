"""Facts apart from prose (issue 26): the checkers' helpers that once built sentence fragments
inline (a node fault's replacement, a recovery stamped before its fault, a marker outside the
launch, a world change, how a worker ended, why an episode's check is superseded, whether the
training is deterministic) return facts and render them through
harness.judge.sentences. Read from the source with `ast`: a prose literal (a string or an
f-string with words) in one of them fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RENDERED = {"_node_replacement", "_node_replacement_by_joins", "_before_the_injection", "_outside_the_run",
            "WorldChange", "_exit_meaning", "_fault_rank_exit", "_load_cut", "_not_last", "_nothing_new_committed",
            "determinism", "_slots"}


def _prose(node: ast.AST) -> list[str]:
    docstrings = {id(b.body[0].value) for b in ast.walk(node)
                  if isinstance(b, (ast.FunctionDef, ast.ClassDef)) and b.body and isinstance(b.body[0], ast.Expr)
                  and isinstance(b.body[0].value, ast.Constant)}
    found = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings \
                and n.value.strip().count(" ") >= 2:
            found.append(f"line {n.lineno}: {n.value[:50]!r}")
        elif isinstance(n, ast.JoinedStr):
            words = "".join(v.value for v in n.values if isinstance(v, ast.Constant))
            if words.strip().count(" ") >= 2:
                found.append(f"line {n.lineno}: f{words[:50]!r}")
    return found


def test_the_checkers_helpers_render_their_sentences_from_facts() -> None:
    tree = ast.parse((ROOT / "harness" / "judge" / "criteria.py").read_text(encoding="utf-8"))
    seen, found = set(), []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in RENDERED:
            seen.add(node.name)
            found += [f"{node.name} {p}" for p in _prose(node)]
    assert seen == RENDERED, f"helpers gone or renamed: {RENDERED - seen}"
    assert not found, "prose built inline in criteria.py (move it to judge/sentences.py): " + "; ".join(found)
