"""Module sizes and the import graph's circles of a checkout, measured with the project's own
test_import_graph machinery (its `graph` and `cycles`: every import counts, lazy and
TYPE_CHECKING ones too).

    python tools/module_graph.py [ROOT]   # ROOT: a checkout (default: this one)

Prints the line count of every module under harness/ (largest first), the total, the import
edges, and each circle (strongly connected component of more than one module), if any.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else HERE
    sys.path.insert(0, str(HERE))
    from recovery_tests.test_import_graph import cycles, graph

    sizes = {p.relative_to(root).as_posix(): sum(1 for _ in p.open(encoding="utf-8"))
             for p in sorted((root / "harness").rglob("*.py"))}
    for rel, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"{n:6d} {rel}")
    print(f"{sum(sizes.values()):6d} total ({len(sizes)} modules)")
    g = graph(root)
    circles = cycles(g)
    print(f"import edges: {sum(len(v) for v in g.values())}; circles: {len(circles)}")
    for c in circles:
        print("  circle: " + " -> ".join(c))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
