"""Facts apart from prose (issues 26 and 33): a checker returns its reason key and its facts,
nested phrases as deferred values (harness.vocab.verdict.Phrase, Joined), and the one renderer
(harness.judge.sentences.render) makes the sentence where a result is shown. Read from the
sources with `ast`:

- no module of the checkers (harness.judge.criteria and the rooms it registers) calls or imports
  `sentence` or `render`, or builds a CriterionResult with a detail of its own: a sentence made
  inside a checker is prose the verdict can no longer re-render;
- the helpers that once built fragments inline (a node fault's replacement, a recovery stamped
  before its fault, a marker outside the launch, a world change, how a worker ended, why an
  episode's check is superseded, whether the training is deterministic, what a damage did)
  hold no prose literal (a string or an f-string with words).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JUDGE = ROOT / "harness" / "judge"
# the checkers, their analysis and their registry: every module that decides a criterion
CHECKER_MODULES = ("criteria.py", "analysis.py", "five_criteria.py", "further_checks.py")
RENDERERS = {"sentence", "render", "said"}  # harness.judge.sentences' functions that make words
RENDERED = {"_node_replacement", "_node_replacement_by_joins", "_before_the_injection", "_outside_the_run",
            "WorldChange", "_exit_meaning", "_fault_rank_exit", "_load_cut", "_not_last", "_nothing_new_committed",
            "determinism", "_slots", "na_poisoned", "damage_done", "_planned_list", "_local_reload"}


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse((JUDGE / name).read_text(encoding="utf-8")) for name in CHECKER_MODULES}


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


def rendering_in(name: str, tree: ast.Module) -> list[str]:
    """Where a checker module makes words itself: a call of (or an import of) a renderer, or a
    CriterionResult given a detail (its third argument, or detail=)."""
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "harness.judge.sentences":
            found += [f"{name}:{n.lineno}: imports {a.name}" for a in n.names if a.name in RENDERERS]
        elif isinstance(n, ast.Call):
            f = n.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if called in RENDERERS:
                found.append(f"{name}:{n.lineno}: {called}(...)")
            elif called == "CriterionResult":
                detail = n.args[2] if len(n.args) > 2 else next((k.value for k in n.keywords if k.arg == "detail"), None)
                if detail is not None and not (isinstance(detail, ast.Constant) and detail.value == ""):
                    found.append(f"{name}:{n.lineno}: CriterionResult(..., detail={ast.unparse(detail)[:40]})")
    return found


def test_no_checker_renders_a_sentence() -> None:
    """Rendering is the edge's: the verdict (report.verify), the watcher's stop reason, a reader;
    the registry's own evaluate() and check() for tests and tools are the one allowed caller,
    through `render` on a finished result."""
    found = []
    for name, tree in _trees().items():
        hits = rendering_in(name, tree)
        if name == "criteria.py":  # evaluate() / check(): the finished, merged results of the registry
            allowed = {f"criteria.py:{n.lineno}" for fn in tree.body if isinstance(fn, ast.FunctionDef)
                       and fn.name in ("evaluate", "check") for n in ast.walk(fn) if isinstance(n, ast.Call)}
            hits = [h for h in hits if ":".join(h.split(":")[:2]) not in allowed and "imports render" not in h]
        found += hits
    assert not found, "a checker renders its own sentence (return a Phrase, render at the edge): " + "; ".join(found)


def test_the_rule_sees_a_sentence_made_inside_a_checker() -> None:
    tree = ast.parse("from harness.judge.sentences import sentence\n"
                     "def check_x(j):\n    return answer('x', PASS, 'ok', {'why': sentence('x', 'why', {})})\n"
                     "def check_y(j):\n    return CriterionResult('y', PASS, f'{j} passed')\n")
    assert len(rendering_in("x.py", tree)) == 3


def test_the_checkers_helpers_render_their_sentences_from_facts() -> None:
    seen, found = set(), []
    for name, tree in _trees().items():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in RENDERED:
                seen.add(node.name)
                found += [f"{name} {node.name} {p}" for p in _prose(node)]
    assert seen == RENDERED, f"helpers gone or renamed: {RENDERED - seen}"
    assert not found, "prose built inline in a checker (move it to judge/sentences.py): " + "; ".join(found)
