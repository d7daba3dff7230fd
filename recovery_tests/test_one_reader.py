"""One reader per format, read from the sources with `ast` (like test_import_graph.py): Megatron's
tracker file and its `iter_N` directory names are read only by harness/vocab/layout.py
(`read_tracker_file`, `parse_tracker`, `parse_iter_name`, `iter_name`). Three tracker readers
and three `iter_N` parsers with different rules once lived in the nemesis, the spec and
history, with a literal tracker name beside layout.TRACKER_NAME; this test fails on a new one:

- a string that is the tracker's file name used as a path (`"latest_checkpointed_iteration.txt"`,
  `f"{d}/latest_checkpointed_iteration.txt"`) outside layout.py: use TRACKER_NAME / RunLayout.tracker;
- a file read (`open`, `os.open`, `read_text`, `read_bytes`, `safeio.read_*`, `open_regular`) of
  something named like a tracker, or inside a function named like one: use layout.read_tracker_file;
- a string that parses `iter_` names: the bare prefix `"iter_"` (a startswith or a slice) or a
  pattern such as `r"iter_(\\d+)"`: use layout.parse_iter_name / is_megatron_iter_name.

Prose that mentions the names (an error message, a docstring) is not a reader and is not counted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.vocab.layout import ITER_PREFIX, TRACKER_NAME

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("harness", "fixtures", "tools", "bench")
OWNER = "harness/vocab/layout.py"
# Files that read these formats on purpose by rules of their own, with the reason.
ALLOWED = {
    "harness/workloads/reference.py": "the reference workload plays Megatron: it writes and reads its tracker and "
                                      "iter_N directories by Megatron's own rules (int(), 'release'), which the "
                                      "harness that judges it must not share",
}
READ_CALLS = {"open", "read_text", "read_bytes", "read_json", "open_regular", "open_log", "fdopen"}
_ITER_PATTERN = re.compile(re.escape(ITER_PREFIX) + r"[(\\\[{]|" + re.escape(ITER_PREFIX) + r"\\d")


def sources() -> dict[str, str]:
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            found[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    return found


def _names(node: ast.AST) -> set[str]:
    """Every identifier a subtree names (variables and attributes)."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _writes(call: ast.Call) -> bool:
    """open(path, "w"), os.open(path, os.O_WRONLY | ...): a writer, not a reader."""
    modes = [*call.args[1:2], *(k.value for k in call.keywords if k.arg in ("mode", "flags"))]
    for mode in modes:
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
            return True
        if _names(mode) & {"O_WRONLY", "O_RDWR", "O_CREAT"}:
            return True
    return False


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def second_readers(rel: str, text: str) -> list[str]:
    """What in one source file reads the tracker or parses iter_N names outside layout.py."""
    tree = ast.parse(text, rel)
    docs = _docstrings(tree)
    found = []

    # the constant parts of f-strings: f"iter_{n:07d}" builds a name, it parses none
    built = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            value = node.value
            if value == TRACKER_NAME or value.endswith("/" + TRACKER_NAME) or value.endswith("\\" + TRACKER_NAME):
                found.append(f"{rel}:{node.lineno}: the tracker's name as a literal path {value!r}")
            if (value == ITER_PREFIX and id(node) not in built) or _ITER_PATTERN.search(value):
                found.append(f"{rel}:{node.lineno}: an iter_N name parser {value!r}")
        if isinstance(node, ast.Call) and _call_name(node) in READ_CALLS and not _writes(node):
            named = _names(ast.Tuple(elts=[*node.args, node.func], ctx=ast.Load()))
            if any("tracker" in n.lower() or n == "TRACKER_NAME" for n in named) or "tracker" in function.lower():
                found.append(f"{rel}:{node.lineno}: a tracker read by {_call_name(node)}() in {function or 'module'}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


def test_the_tracker_and_iter_names_have_one_reader_in_layout() -> None:
    found = []
    for rel, text in sources().items():
        if rel == OWNER or rel in ALLOWED:
            continue
        found += second_readers(rel, text)
    assert not found, ("a second tracker reader or iter_N parser; use harness.vocab.layout's read_tracker_file, "
                       "parse_tracker, parse_iter_name, is_megatron_iter_name, iter_name:\n" + "\n".join(found))


def test_the_scan_finds_each_kind_of_second_reader() -> None:
    """The negative control: each of the three old readers, and a literal path, is caught."""
    samples = {
        "literal": 'p = d / "latest_checkpointed_iteration.txt"\n',
        "fstring": 'p = f"{d}/latest_checkpointed_iteration.txt"\n',
        "history": "t = safeio.read_text(path / TRACKER_NAME, limit=4096)\n",
        "spec": "def read_tracker(path):\n    return safeio.read_text(path)\n",
        "nemesis": "def _read_tracker_text(t):\n    return os.open(t, os.O_RDONLY)\n",
        "regex": 'm = re.fullmatch(r"iter_(\\d{7,})", name)\n',
        "prefix": 'ok = name.startswith("iter_") and name[5:].isdigit()\n',
        "poll": "with open(layout.tracker) as f:\n    f.read()\n",
    }
    for what, text in samples.items():
        assert second_readers(f"{what}.py", text), what
    prose = ('def f():\n    """Reads latest_checkpointed_iteration.txt and iter_N."""\n'
             '    raise ValueError("no latest_checkpointed_iteration.txt under --load; see iter_0000005")\n'
             'name = f"iter_{n:07d}"\n'
             'with open(d / TRACKER_NAME, "w") as f:\n    f.write("5")\n')
    assert second_readers("prose.py", prose) == []


def test_the_allowed_files_exist_and_still_need_their_exception() -> None:
    texts = sources()
    for rel, why in ALLOWED.items():
        assert rel in texts, f"{rel} is gone: drop it from ALLOWED ({why})"
        assert second_readers(rel, texts[rel]), f"{rel} reads no tracker any more: drop it from ALLOWED"


# ---------------------------------------------------------------- the one reader's rules


def test_iter_names_one_rule(tmp_path: Path) -> None:
    from harness.vocab.layout import is_megatron_iter_name, iter_name, parse_iter_name

    assert [parse_iter_name(n) for n in ("iter_0000005", "iter_5", "iter_12345678", "iter_", "iter_+5", "iter_5x",
                                         "iter_\u0665", "iter_" + "9" * 19, "release", "xiter_0000005",
                                         "iter_" + "0" * 30 + "1")] == [
        5, 5, 12345678, None, None, None, None, None, None, None, 1]
    assert iter_name(5) == "iter_0000005" and iter_name(12345678) == "iter_12345678"
    assert [is_megatron_iter_name(n) for n in ("iter_0000005", "iter_5", "iter_00000005", "iter_12345678")] == [
        True, False, False, True]


def test_the_tracker_reader_says_what_the_file_is(tmp_path: Path) -> None:
    import os

    from harness.vocab import layout

    t = tmp_path / TRACKER_NAME
    assert layout.read_tracker_file(t) == layout.TrackerRead(layout.TRACKER_ABSENT)
    for text, state, value in (("15\n", layout.TRACKER_OK, 15), (" \n", layout.TRACKER_EMPTY, None),
                               ("release", layout.TRACKER_GARBLED, None), ("+7", layout.TRACKER_GARBLED, None)):
        t.write_text(text)
        read = layout.read_tracker_file(t)
        assert (read.state, read.value, read.text) == (state, value, text)
    t.write_bytes(b"\xff1")
    assert layout.read_tracker_file(t).state == layout.TRACKER_UNREADABLE
    t.write_text("1" * (layout.TRACKER_READ_LIMIT + 1))
    assert layout.read_tracker_file(t).state == layout.TRACKER_UNREADABLE
    t.unlink()
    os.mkfifo(t)  # never blocks on a FIFO
    assert layout.read_tracker_file(t).state == layout.TRACKER_UNREADABLE
    t.unlink()
    (tmp_path / "real").write_text("5")
    t.symlink_to(tmp_path / "real")  # never follows a link
    assert layout.read_tracker_file(t).state == layout.TRACKER_UNREADABLE
