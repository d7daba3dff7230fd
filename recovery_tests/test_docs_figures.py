"""Measured figures are written once, in docs/figures.md.

Every figure the README quotes in its prose (its sample screen aside) is one docs/figures.md
holds, and every paragraph of docs/ that cites a `bench/` script holds only figures that
docs/figures.md holds too, so a figure refreshed there cannot silently disagree with a copy
elsewhere. A "figure" is a number
with a unit of time, size or throughput (`44.2 s`, `95-125 MB/s`, `38 MiB`); versions,
deadlines written as `setup:60` and code blocks (sample output) are not figures.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures.md"

_FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?(?:[–-]\d[\d,]*(?:\.\d+)?)?)\s?"
                     r"(ms|s|min|minutes|seconds|MB/s|MB|MiB|GB|GiB|KiB)(?![\w/])")


def prose_paragraphs(text: str) -> list[str]:
    """The paragraphs of a Markdown text outside fenced code blocks."""
    out, current, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if not line.strip():
            if current:
                out.append(" ".join(current))
            current = []
        else:
            current.append(line.strip())
    if current:
        out.append(" ".join(current))
    return out


def figures_in(text: str) -> list[str]:
    return [f"{m.group(1)} {m.group(2)}" for m in _FIGURE.finditer(text)]


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def readme_figures(text: str) -> list[str]:
    return [f for p in prose_paragraphs(text) for f in figures_in(p)]


def unbacked_bench_figures(text: str, figures_page: str) -> list[str]:
    """Figures of paragraphs citing a bench/ script that docs/figures.md does not hold."""
    known = {f for p in prose_paragraphs(figures_page) for f in figures_in(_normal(p))}
    return [f for p in prose_paragraphs(text) if "bench/" in p for f in figures_in(p) if f not in known]


def unbacked_readme_figures(text: str, figures_page: str) -> list[str]:
    """Figures of the README's prose that docs/figures.md does not hold."""
    known = {f for p in prose_paragraphs(figures_page) for f in figures_in(_normal(p))}
    return [f for f in readme_figures(text) if f not in known]


def test_every_figure_the_readme_quotes_is_one_figures_md_holds():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert unbacked_readme_figures(text, FIGURES.read_text(encoding="utf-8")) == []
    assert "docs/figures.md" in text


def test_every_bench_figure_in_docs_is_the_one_in_figures_md():
    page = FIGURES.read_text(encoding="utf-8")
    problems = {p.name: bad for p in sorted((ROOT / "docs").glob("*.md")) if p != FIGURES
                if (bad := unbacked_bench_figures(p.read_text(encoding="utf-8"), page))}
    assert problems == {}


def test_figures_md_names_the_script_and_date_of_each_figure():
    page = FIGURES.read_text(encoding="utf-8")
    for section in page.split("\n## ")[1:]:
        title = section.splitlines()[0]
        assert "bench/" in title or "by hand" in title, title
        assert re.search(r"20\d\d-\d\d-\d\d|the seed", section), title


def test_the_checks_see_a_retyped_or_changed_figure():
    page = "## X (`bench/x.py`)\n\n2026-12-01: kill → verdict 21.6 s, verify 95-125 MB/s.\n"
    assert readme_figures("The job takes about 30 s.\n\n```\n[  3.1s] sample\n```\n") == ["30 s"]
    assert readme_figures("Python ≥ 3.10, torch==2.13.0, deadlines setup:60.\n") == []
    assert unbacked_readme_figures("The kill → verdict took 21.6 s.\n", page) == []
    assert unbacked_readme_figures("The kill → verdict took 20 s.\n", page) == ["20 s"]
    assert unbacked_bench_figures("`bench/x.py` measured 21.6 s and 95-125 MB/s.\n", page) == []
    assert unbacked_bench_figures("`bench/x.py` measured 22.0 s.\n", page) == ["22.0 s"]
    assert unbacked_bench_figures("Without a bench citation 99 s is no bench figure.\n", page) == []
