"""The verdict of one run and its renderings: verdict.json, report.md and timeline.png.

The only place that renders. `render_report(verdict, extra_sections=())` takes further
Markdown sections (e.g. a cross-rank triage) to append after the built-in ones. The picture
(harness.report.picture) needs matplotlib, an optional extra: without it the report says so and
everything else is written as usual.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from harness.safe import atomic, safeio
from harness.report import picture as picturemod
from harness.judge.criteria import FAIL, NOT_APPLICABLE, PASS, UNKNOWN, headline
from harness.vocab.events import iso_utc
from harness.vocab.verdict import EPISODE_GOODPUT_PARTS, GOODPUT_PARTS, SCHEMA, Deadlines, Goodput, Verdict, verdict_json
from harness.vocab.faults import DEFAULT_FAULT_AT

__all__ = ["SCHEMA", "Verdict", "render_report", "verdict_json", "write_outputs"]

_MARK = {PASS: "✅ pass", FAIL: "❌ fail", NOT_APPLICABLE: "➖ not applicable", UNKNOWN: "❔ unknown"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


_DEADLINE_WORDS = (("setup", "setup"), ("step", "step"), ("checkpointing", "checkpointing"),
                   ("out_of_section", "out of section"), ("check_interval", "check interval"))


def deadlines_text(deadlines: "Deadlines | dict") -> str:
    """'profile **short**: setup 600 s, step 60 s, ...' (the launcher's default where one is absent)."""
    shown = [f"{words} {deadlines.get(key):g} s" for key, words in _DEADLINE_WORDS
             if isinstance(deadlines.get(key), (int, float))]
    profile = deadlines.get("profile")
    head = f"profile **{profile}**" if profile else "no profile recorded"
    return head + (": " + ", ".join(shown) if shown else "")


def render_report(verdict: Verdict, extra_sections: Sequence[str] = (), picture: str | None = None,
                  picture_note: str | None = None) -> str:
    """report.md; `picture` is the timeline image's path relative to the report (embedded
    when given), `picture_note` says why there is none."""
    m = verdict.metrics
    head = headline(verdict.qualified, verdict.fault)
    out = [f"# Recovery verdict: {head}", ""]
    out.append(f"- Run directory: `{verdict.run_dir}`")
    out.append(f"- Fault: **{verdict.fault}** ({verdict.fault_how})")
    launcher = verdict.launcher
    if launcher is not None:
        shown = ", ".join(f"{k} {v}" for k, v in launcher.items() if v is not None)
        out.append(f"- Launcher: {shown}")
    if verdict.deadlines:
        out.append(f"- Deadlines: {deadlines_text(verdict.deadlines)}")
    if verdict.baseline is not None:
        b = verdict.baseline
        how = {"ran": "the uninterrupted twin, run first", "reused": "reused by its configuration hash",
               "given": "given"}.get(b.how, b.how)
        digest = f", config hash {b.config_hash[:12]}" if b.config_hash else ""
        same = {True: ", same configuration as this run", False: ", **another configuration than this run**"}.get(
            b.matches_run, "")
        out.append(f"- Baseline: `{b.run_dir}` ({how}{digest}{same})" + (f": {b.problem}" if b.problem else ""))
    if verdict.verified_at:
        out.append(f"- Verified at: {verdict.verified_at}")
    for warning in m.warnings:
        out += ["", f"> ⚠️ **Clock:** {warning}"]
    if picture:
        out += ["", f"![Recovery timeline: iteration against time per cycle, checkpoints, injection and the latency "
                    f"split]({picture})"]
    elif picture_note:
        out += ["", f"_No timeline picture: {picture_note}._"]
    out += ["", "## Criteria", "", "| # | criterion | status | detail |", "|---|---|---|---|"]
    for i, c in enumerate(verdict.criteria, 1):
        out.append(f"| {i} | `{c.id}` | {_MARK.get(c.status, c.status)} | {_cell(c.detail)} |")
    if len(verdict.episodes) > 1:  # one fault: its episode is the table above
        out += per_fault_lines(verdict)
        out += ["", "## Every episode", "",
                "The criteria above merge the episodes' own results (one episode per injected fault); a check "
                "marked superseded was left to a later episode.", "",
                "| episode | moment | failed cycle | criterion | status | detail |", "|---|---|---|---|---|---|"]
        for e in verdict.episodes:
            for c in e.criteria:
                mark = "superseded" if c.id in e.superseded else _MARK.get(c.status, c.status)
                out.append(f"| {e.number} of {len(verdict.episodes)} | {e.fault_at} | "
                           f"{'—' if e.cycle is None else e.cycle} | `{c.id}` | {mark} | {_cell(c.detail)} |")
    out += ["", "## Latency split", "",
            "| phase | seconds | from | to |", "|---|---|---|---|"]
    rows = (
        ("detection", m.detection_s, "injected", "failure detected"),
        ("restart", m.restart_s, "failure detected", "workers started (launcher record)"),
        ("restore", m.restore_s, "workers started (launcher record)", "checkpoint loaded"),
        ("first step", m.first_step_s, "checkpoint loaded", "first committed iteration"),
        ("**failure → first committed step**", m.failure_to_first_step_s, "injected", "first committed iteration"),
    )
    for name, value, start, end in rows:
        out.append(f"| {name} | {_seconds(value)} | {start} | {end} |")
    if len(m.recoveries) > 1 or any(r.fault_at != DEFAULT_FAULT_AT for r in m.recoveries):
        out += ["", "## Every fault and its recovery", "",
                "| fault | moment | failed cycle | injected (UTC) | detection | restart | restore | first step |",
                "|---|---|---|---|---|---|---|---|"]
        for r in m.recoveries:
            out.append(f"| fault {r.fault_index} of {len(m.recoveries)} | {r.fault_at} | "
                       f"{'—' if r.cycle is None else r.cycle} | {iso_utc(r.injected_at) or '—'} | "
                       f"{_seconds(r.detection_s)} | {_seconds(r.restart_s)} | {_seconds(r.restore_s)} | "
                       f"{_seconds(r.first_step_s)} |")
        out.append("")
        out.append("A phase shown — did not happen (a later fault interrupted that recovery) or has no timestamp. "
                   "The split above is the recovery from the last fault.")
    lost = "—" if m.lost_iterations is None else str(m.lost_iterations)
    out += ["", f"Lost iterations: {lost} (last iteration logged before the fault "
                f"{m.last_iteration_before_fault if m.last_iteration_before_fault is not None else '—'} − checkpoint "
                f"reloaded {m.restored_iteration if m.restored_iteration is not None else '—'}).", ""]
    stamps = [("injected", m.injected_at), ("failure detected", m.detected_at), ("workers started", m.workers_started_at),
              ("checkpoint loaded", m.checkpoint_loaded_at), ("first committed step", m.first_step_at)]
    if any(t is not None for _, t in stamps):
        out += ["| moment (UTC) | time | source |", "|---|---|---|"]
        keys = ("injected_at", "failure_detected_at", "workers_started_at", "checkpoint_loaded_at", "first_step_at")
        for (name, t), key in zip(stamps, keys):
            out.append(f"| {name} | {iso_utc(t) or '—'} | {_cell('`' + m.evidence[key] + '`') if key in m.evidence else ''} |")
        out.append("")
    if verdict.goodput is not None:
        out += goodput_section(verdict.goodput)
    out += ["## Evidence", ""]
    for c in verdict.criteria:
        out.append(f"### `{c.id}`: {c.status}")
        out.append("")
        out.append(c.detail)
        out.append("")
        if c.evidence:
            out.append("```")
            out.extend(c.evidence)
            out.append("```")
            out.append("")
    notes = [*verdict.notes, *m.notes]
    if notes:
        out += ["## Notes", ""]
        out += [f"- {n}" for n in notes]
        out.append("")
    for section in extra_sections:
        out += [section.rstrip(), ""]
    return "\n".join(out)


GOODPUT_WORDS = {
    "startup": ("start-up", "launch started (launch.json)", "the first iteration line, less one step"),
    "detection": ("detection", "injected (marker)", "the launcher's first record of the failure"),
    "restart": ("restart", "failure detected", "replacement workers started (launcher record)"),
    "restore": ("restore", "workers started", "the first stamped line after the load"),
    "redone": ("re-done iterations", "iterations trained again after the restore", "× the step price"),
    "save_stall": ("checkpoint save stalls", "`saving checkpoint`",
                   "`scheduled an async …` / `successfully saved` (unstamped: the `save-checkpoint` timer)"),
    "rest": ("rest (unattributed)", "wall − productive − the parts above", "warm-up, lost partial steps, shutdown"),
}


def _share(value: float | None, wall: float | None) -> str:
    return "—" if value is None or not wall else f"{100 * value / wall:.1f} %"


def goodput_section(g: Goodput) -> list[str]:
    """report.md's goodput section: the ratio, the badput table, every fault's share (docs/goodput.md)."""
    out = ["## Goodput", ""]
    if g.ratio is None:
        out.append(f"Goodput unknown: {g.reason or 'no reason recorded'}.")
    else:
        out.append(f"**Goodput {100 * g.ratio:.1f} %**: {g.productive_s:.3f} s of productive training "
                   f"({g.useful_iterations if g.useful_iterations is not None else '?'} iterations × "
                   f"{_seconds(g.step_s)} s, priced at {g.step_source or '?'}) in {g.wall_s:.3f} s of wall time.")
    if g.baseline_ratio is not None:
        out.append(f"The uninterrupted baseline's own goodput: {100 * g.baseline_ratio:.1f} % "
                   f"(start-up {_seconds(g.baseline_startup_s)} s).")
    out += ["", "| badput | seconds | share of wall | from | to |", "|---|---|---|---|---|"]
    for part in GOODPUT_PARTS:
        name, start, end = GOODPUT_WORDS[part]
        out.append(f"| {name} | {_seconds(g.part(part))} | {_share(g.part(part), g.wall_s)} | {_cell(start)} | "
                   f"{_cell(end)} |")
    if g.per_episode:
        out += ["", "| fault | moment | failed cycle | " + " | ".join(GOODPUT_WORDS[p][0] for p in EPISODE_GOODPUT_PARTS)
                + " | iterations re-done | unknown because |", "|---|---|---|" + "---|" * (len(EPISODE_GOODPUT_PARTS) + 2)]
        for e in g.per_episode:
            cells = " | ".join(_seconds(e.part(p)) for p in EPISODE_GOODPUT_PARTS)
            out.append(f"| {e.number} of {len(g.per_episode)} | {e.fault_at} | {'—' if e.cycle is None else e.cycle} | "
                       f"{cells} | {'—' if e.redone_iterations is None else e.redone_iterations} | "
                       f"{_cell(e.reason or '')} |")
    for part, why in g.part_reasons:
        out.append(f"- {GOODPUT_WORDS[part][0]} unknown: {why}.")
    out += [f"- {n}" for n in g.notes]
    out += ["", "Goodput decides nothing: it is not a criterion (docs/goodput.md says what it cannot see).", ""]
    return out


@dataclass(frozen=True)
class Written:
    paths: tuple[Path, ...]
    picture_problem: str | None = None  # why timeline.png was not drawn, when it was not


def write_picture(verdict: Verdict, root: Path) -> tuple[Path | None, str | None]:
    """timeline.png into root: (its path, None), or (None, why not)."""
    if verdict.picture is None:
        return None, "no timeline data (verified from a Timeline, not a run directory)"
    try:
        return picturemod.draw(verdict.picture, root / picturemod.FILE_NAME), None
    except picturemod.PictureUnavailable as exc:
        return None, str(exc)


def write_outputs(verdict: Verdict, run_dir: str | os.PathLike | None, json_path: str | os.PathLike | None = None,
                  extra_sections: Sequence[str] = ()) -> Written:
    """Write timeline.png, verdict.json and report.md into run_dir (when given; each replaced
    atomically, never through a link) and the JSON to json_path, a new file:
    an existing one (the run's own fault_injected.json, say) is never overwritten
    (FileExistsError, before anything is written). Raises OSError when a file cannot be
    written; a picture that cannot be drawn (no matplotlib) is reported in report.md and in
    the result instead."""
    written: list[Path] = []
    problem = None
    text = verdict_json(verdict)
    if json_path is not None and os.path.lexists(json_path):
        raise FileExistsError(17, "refused: it already exists; --json writes a new file only", str(json_path))
    if run_dir is not None:
        root = Path(run_dir)
        png, problem = write_picture(verdict, root)
        written += [png] if png else []
        atomic.write_text(root / "verdict.json", text)
        atomic.write_text(root / "report.md", render_report(verdict, extra_sections, picturemod.FILE_NAME if png else None,
                                                        problem))
        written += [root / "verdict.json", root / "report.md"]
    if json_path is not None:
        safeio.create_new(json_path, text)
        written.append(Path(json_path))
    return Written(tuple(written), problem)


def per_fault_lines(verdict: Verdict) -> list[str]:
    """One row per fault (episode): its kind, rank, moment, failed cycle and own result, and the
    checks that held it back; a campaign's seed first. The run qualifies only when every row does."""
    out = ["", "## Every fault", ""]
    c = verdict.campaign
    if c is not None:
        out += [f"Campaign: {c.get('faults')} faults drawn from seed {c.get('seed')} (replay: `nvrx-qual run --faults "
                f"{c.get('faults')} --seed {c.get('seed')}` with the same options); it qualifies only when every fault "
                "does.", ""]
    out += ["| fault | kind | rank | moment | failed cycle | result | held back by |", "|---|---|---|---|---|---|---|"]
    n = len(verdict.episodes)
    for e in verdict.episodes:
        bad = [f"`{r.id}` {r.status}" for r in e.criteria if r.id not in e.superseded and r.status in ("fail", "unknown")]
        out.append(f"| {e.number} of {n} | {e.fault or '?'} | {'—' if e.rank is None else e.rank} | {e.fault_at} | "
                   f"{'—' if e.cycle is None else e.cycle} | {_MARK.get(e.status, e.status)} | "
                   f"{', '.join(bad) or '—'} |")
    return out
