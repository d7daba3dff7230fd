"""Markdown of a Triage (the `diagnose` command's output and the report's triage section)."""

from __future__ import annotations

import re

from harness.judge.triage.model import Symptom, Triage, _rank_ranges, _short


# ============================================================================ Markdown


def _md_code(text: str) -> str:
    ticks = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")



_NUMBERS = re.compile(r"\d+")


def render_markdown(triage: Triage) -> str:
    """The "Failure triage" section of a failed run's report."""
    out = ["## Failure triage", "", f"**{triage.category}** — {triage.summary}", ""]
    if triage.category == "none":
        out.append(f"Scanned {len(triage.files_scanned)} file(s).")
        if triage.unreadable:
            out += ["", "Unreadable:"] + [f"- {_md_code(u)}" for u in triage.unreadable]
        return "\n".join(out) + "\n"
    facts = []
    if triage.rank is not None:
        local = f" (local rank {triage.local_rank})" if triage.local_rank is not None else ""
        facts.append(f"- Rank: {triage.rank}{local}")
    elif triage.local_rank is not None:
        facts.append(f"- Local rank: {triage.local_rank}")
    if triage.cycle is not None:
        facts.append(f"- Cycle: {triage.cycle}")
    if triage.phase:
        facts.append(f"- Phase: {triage.phase}")
    if triage.exception:
        facts.append(f"- Exception: {_md_code(_short(triage.exception, 600))}")
    if triage.location:
        facts.append(f"- Where: {_md_code(triage.location)}")
    if triage.memory is not None:
        facts.append(f"- Memory: {triage.memory.describe()}")
    if triage.config.source:
        facts.append(f"- Job shape: {triage.config.describe()} (from {_md_code(triage.config.source)})")
    out += facts
    out += ["", f"**Advice:** {triage.advice}", ""]
    if triage.excerpt:
        out += ["Traceback excerpt:", "", "~~~text", *triage.excerpt, "~~~", ""]
    if triage.symptoms:
        out += ["Failures on other ranks:", "", "| ranks | kind | what | first seen |",
                "|---|---|---|---|"]  # fmt: skip
        groups: dict[tuple[str, str], list[Symptom]] = {}
        for s in triage.symptoms:
            groups.setdefault((s.kind, _NUMBERS.sub("N", s.what)), []).append(s)
        for (kind, _), members in groups.items():
            ranks = [s.rank for s in members if s.rank is not None]
            locals_ = [s.local_rank for s in members if s.rank is None and s.local_rank is not None]
            who = []
            if ranks:
                who.append(_rank_ranges(ranks))
            if locals_:
                who.append("local " + _rank_ranges(locals_))
            if len(ranks) + len(locals_) < len(members):
                who.append("unattributed")
            first_seen = _md_code(_md_cell(_short(members[0].evidence, 200)))
            out.append(f"| {_md_cell(' / '.join(who))} | {kind} | {_md_cell(members[0].what)} | {first_seen} |")
        out.append("")
    if triage.evidence:
        out += ["Evidence:", ""] + [f"- {_md_code(_short(e, 300))}" for e in triage.evidence] + [""]
    unreadable = f"; unreadable: {', '.join(triage.unreadable)}" if triage.unreadable else ""
    out.append(f"Scanned {len(triage.files_scanned)} file(s){unreadable}.")
    return "\n".join(out) + "\n"
