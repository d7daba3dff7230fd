"""The one-way flow of the code, read from the sources with `ast` (nothing is imported):

- the command layer `harness.cli` is imported by nobody outside it (no library -> CLI and
  no fixtures -> CLI arrow);
- the installed packages (harness/, the pytest plugin pytest_nvrx_qual/) import nothing of the
  checkout's fixtures/, which is not installed;
- the module import graph of harness/, pytest_nvrx_qual/ and fixtures/ has no cycle (every import counts, also
  one inside a function: a lazy import hides a circle, it does not remove it; and one under
  `if TYPE_CHECKING:`: it never runs, but a type named in a lower module's annotations ties
  that module to the higher one all the same — verdict's `picture: TimelinePicture` once
  closed verdict -> picture -> criteria -> verdict that way. The vocabulary belongs at the
  bottom);
- the library never prints, exits or parses a command line: `print(` (unless to a stream
  the caller injected, `file=out`), `sys.exit(`,
  `exit(`, `quit(`, `raise SystemExit`, `os._exit(` and `import argparse` appear only in
  harness/cli/ and in the separate programs allowed below, each with its reason. Text
  that is generated for another program (the kit's script, a probe passed to `python -c`)
  is a string, not a call, so it is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "pytest_nvrx_qual", "fixtures")
# What pyproject.toml installs; fixtures/ (the suite's scaffolding) stays in the checkout.
DISTRIBUTED = ("harness", "pytest_nvrx_qual")
CLI = "harness.cli"

# Separate programs: their own process, their own command line and exit status.
PROGRAMS = {
    "harness.__main__": "`python -m harness`: hands argv to harness.cli.main and exits with its status",
    "harness.nemesis.": "`python -m harness.nemesis` (its __main__ and the injector it runs), the fault injector "
                        "ft_launcher starts around each worker",
    "harness.launch.watchdog": "`python -m harness.launch.watchdog`, the process that outlives a dead harness to stop "
                               "its launch",
    "harness.workloads.": "the worker programs ft_launcher starts (reference workload, Megatron entrypoints, the "
                          "CUDA->CPU shim): they print training lines and exit like any training script",
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _target(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` is or lies in."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST):
    """Every node that can run: all of them but the body of `if TYPE_CHECKING:` (imports
    for annotations only, which Python never executes)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                todo.extend(child.orelse)
            else:
                todo.append(child)


def imports(module: str, tree: ast.AST, known: dict[str, Path], *, type_only: bool = True) -> set[str]:
    """Every module of ours that `module` imports, anywhere in its body (with type_only=False,
    not those under `if TYPE_CHECKING:`)."""
    out: set[str] = set()
    package = module if known[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in (ast.walk(tree) if type_only else _runtime_nodes(tree)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from harness import cli` imports the module harness.cli
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out |= {t for n in names if (t := _target(n, known)) is not None and t != module}
    return out


def graph(root: Path = ROOT, *, type_only: bool = True) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports(m, ast.parse(p.read_text(encoding="utf-8"), str(p)), known, type_only=type_only)
            for m, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def is_cli(module: str) -> bool:
    return module == CLI or module.startswith(CLI + ".")


def is_program(module: str) -> bool:
    return any(module == p or (p.endswith(".") and module.startswith(p)) for p in PROGRAMS)


def _to_injected_stream(call: ast.Call) -> bool:
    """print(..., file=out) with `out` given by the caller (a TextIO injected as watch.py's
    `out`): progress the caller asked for, not the library printing to the terminal."""
    stream = next((k.value for k in call.keywords if k.arg == "file"), None)
    if stream is None:
        return False
    return not (isinstance(stream, ast.Attribute) and isinstance(stream.value, ast.Name)
                and stream.value.id == "sys" and stream.attr in ("stdout", "stderr"))


def terminal_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every print, exit and argparse in a module's code."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print" and not _to_injected_stream(node):
                found.append((node.lineno, "print("))
            elif isinstance(f, ast.Name) and f.id in ("exit", "quit"):
                found.append((node.lineno, f"{f.id}("))
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in (
                    ("sys", "exit"), ("os", "_exit")):
                found.append((node.lineno, f"{f.value.id}.{f.attr}("))
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                found.append((node.lineno, "raise SystemExit"))
        elif isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            found.append((node.lineno, "import argparse"))
        elif isinstance(node, ast.ImportFrom) and node.module == "argparse":
            found.append((node.lineno, "from argparse import"))
    return found


def library_terminal_calls(root: Path = ROOT) -> list[str]:
    out = []
    for module, path in modules(root).items():
        if is_cli(module) or is_program(module):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        out += [f"{path.relative_to(root)}:{line}: {what}" for line, what in terminal_calls(tree)]
    return out


def cli_importers(root: Path = ROOT) -> list[str]:
    return sorted(f"{m} -> {', '.join(sorted(t for t in targets if is_cli(t)))}"
                  for m, targets in graph(root).items() if not is_cli(m) and any(is_cli(t) for t in targets)
                  and m != "harness.__main__")


def test_nothing_outside_the_command_layer_imports_it():
    assert cli_importers() == []


def suite_importers(root: Path = ROOT) -> list[str]:
    """Every import of a module of fixtures/ by a module that pyproject.toml installs."""
    return sorted(f"{m} -> {t}" for m, targets in graph(root).items() if m.split(".")[0] in DISTRIBUTED
                  for t in targets if t.split(".")[0] not in DISTRIBUTED)


def test_the_installed_packages_import_nothing_of_the_checkouts_fixtures():
    assert suite_importers() == []


def test_the_suite_import_finder_sees_the_plugin_importing_fixtures(tmp_path):
    (tmp_path / "pytest_nvrx_qual").mkdir()
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "pytest_nvrx_qual" / "__init__.py").write_text("def f():\n    from fixtures import budget\n")
    (tmp_path / "fixtures" / "budget.py").write_text("X = 1\n")
    assert suite_importers(tmp_path) == ["pytest_nvrx_qual -> fixtures.budget"]


def test_the_import_graph_has_no_cycle():
    assert cycles(graph()) == []


def test_the_library_never_prints_exits_or_parses_a_command_line():
    assert library_terminal_calls() == []


def test_the_command_layer_is_a_package_with_its_commands():
    known = modules()
    assert {"harness.cli", "harness.cli.guard", "harness.cli.run", "harness.cli.repeat", "harness.cli.verify",
            "harness.cli.report", "harness.cli.diagnose", "harness.cli.kit"} <= set(known)


@pytest.mark.parametrize("source, expected", [
    ("print('x')", ["print("]),
    ("import sys\nprint('x', file=sys.stderr)", ["print("]),
    ("print('x', file=out)", []),  # progress to a TextIO the caller injected
    ("import sys\nsys.exit(2)", ["sys.exit("]),
    ("raise SystemExit(1)", ["raise SystemExit"]),
    ("import argparse", ["import argparse"]),
    ("SCRIPT = 'import sys; sys.exit(1); print(2)'", []),  # generated text for another program
    ("out.write('x')", []),
])
def test_the_terminal_call_finder_sees_calls_not_text(source, expected):
    assert [what for _line, what in terminal_calls(ast.parse(source))] == expected


def test_the_cycle_finder_finds_a_lazy_import_circle(tmp_path):
    """The shape main had: cli imports repeat inside a function, repeat imports cli at the top."""
    pkg = tmp_path / "harness"
    (pkg / "cli").mkdir(parents=True)
    (tmp_path / "fixtures").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "__init__.py").write_text("def f():\n    from harness import repeat\n")
    (pkg / "repeat.py").write_text("from harness import cli\n")
    assert cycles(graph(tmp_path)) == [["harness.cli", "harness.repeat"]]
    assert cli_importers(tmp_path) == ["harness.repeat -> harness.cli"]
    (pkg / "repeat.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness import cli\n")
    assert cycles(graph(tmp_path, type_only=False)) == []


def test_the_cycle_finder_finds_a_circle_closed_by_an_annotation(tmp_path):
    """The shape verdict -> picture -> criteria -> verdict had: the vocabulary (verdict) named a
    higher module's type under `if TYPE_CHECKING:`."""
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (tmp_path / "fixtures").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "verdict.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                    "    from harness.picture import TimelinePicture\n")
    (pkg / "picture.py").write_text("from harness.criteria import Analysis\n")
    (pkg / "criteria.py").write_text("from harness.verdict import Status\n")
    assert cycles(graph(tmp_path)) == [["harness.criteria", "harness.picture", "harness.verdict"]]
    assert cycles(graph(tmp_path, type_only=False)) == []


# The rooms of harness/, from the ground floor up (docs/architecture.md, "Layout of the
# repository"): a module imports only from its own room or from the rooms below it. Modules
# directly in harness/ (its __init__ and __main__) stand outside the floors.
FLOORS = ("harness.safe", "harness.vocab", "harness.nemesis", "harness.machine", "harness.workloads",
          "harness.plan", "harness.read", "harness.judge", "harness.report", "harness.launch", "harness.cli")


def floor_of(module: str) -> int | None:
    return next((i for i, room in enumerate(FLOORS) if module == room or module.startswith(room + ".")), None)


def upward_imports(root: Path = ROOT) -> list[str]:
    """Every import of a module on a higher floor than the importer's (annotations included)."""
    found = []
    for module, targets in graph(root).items():
        here = floor_of(module)
        if here is None:
            continue
        found += [f"{module} -> {t}" for t in sorted(targets) if (there := floor_of(t)) is not None and there > here]
    return found


def test_every_module_of_harness_lives_in_a_room():
    loose = [m for m in modules() if m.startswith("harness.") and floor_of(m) is None
             and m not in ("harness.__main__",)]
    assert loose == [], f"modules outside the rooms {FLOORS}: {loose}"


def test_imports_only_go_down_the_floors():
    assert upward_imports() == []


def test_the_floor_rule_sees_an_import_that_climbs(tmp_path):
    pkg = tmp_path / "harness"
    for room in ("vocab", "judge"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (tmp_path / "fixtures").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "vocab" / "verdict.py").write_text("from harness.judge import criteria\n")
    (pkg / "judge" / "criteria.py").write_text("X = 1\n")
    assert upward_imports(tmp_path) == ["harness.vocab.verdict -> harness.judge.criteria"]
