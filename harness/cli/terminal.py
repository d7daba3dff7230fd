"""What the commands show on a terminal, as text: the line before a launch, one run's result,
one verification, a repeat's table, a scenario's lines in the pytest summary. Pure functions from the library's values to lines; the
command layer (harness.cli) decides where they go."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from harness.report import stats
from harness.judge.criteria import headline
from harness.vocab.faults import DEFAULT_FAULT_AT

if TYPE_CHECKING:
    from harness.judge.findings import KnownMatch
    from harness.plan.commands import Plan
    from harness.report.outputs import Verdict
    from harness.launch.runner import Outcome
    from harness.vocab.verdict import Goodput


def announce(plan: "Plan", which: str = "") -> str:
    """The line `nvrx-qual run` prints before launching; `which` e.g. "2 of 5" for a repeat."""
    spec = plan.spec
    fault = "no fault" if spec.fault == "none" else f"{spec.fault} on rank {spec.fault_rank}" + (
        "" if spec.fault_at == DEFAULT_FAULT_AT else f" at {spec.fault_at}")
    if spec.fault == "campaign":
        fault = f"campaign of {spec.faults} faults, seed {spec.seed} ({', '.join(f.text() for f in spec.schedule)})"
    return (f"nvrx-qual: run {spec.run_id}{f' ({which})' if which else ''}: {spec.workload} workload, {fault}, "
            f"NVRx {plan.nvrx.version}{f' ({_shown_path(plan.nvrx.path)})' if plan.nvrx.path else ''}, "
            f"{spec.nnodes}x{spec.gpus_per_node} ranks, deadline profile "
            f"{spec.deadline_profile} ({spec.section_timeouts_arg}, out of section {spec.out_of_section_timeout:g} s)"
            f"\n  run directory: {plan.layout.root}")


def _shown_path(path) -> str:
    """A path relative to the working directory when it lies below it."""
    from pathlib import Path

    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_outcome(outcome: "Outcome") -> str:
    """One launched run: every criterion, the latencies, what went wrong around it, the verdict."""
    v, m = outcome.verdict, outcome.verdict.metrics
    width = max(len(c.id) for c in v.criteria)
    lines = ["", *known_first(v, outcome.known), f"{'criterion'.ljust(width)}  status          detail"]
    for c in v.criteria:
        lines.append(f"{c.id.ljust(width)}  {str(c.status).ljust(14)}  {c.detail}")

    def s(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f} s"

    lines += ["",
              f"latency{_of_last(v)}: detection {s(m.detection_s)} | restart {s(m.restart_s)} | restore "
              f"{s(m.restore_s)} | first step {s(m.first_step_s)} | failure → first committed step "
              f"{s(m.failure_to_first_step_s)} | lost iterations {'—' if m.lost_iterations is None else m.lost_iterations}"]
    if v.goodput is not None:
        lines.append(goodput_line(v.goodput))
    lines += [f"warning: {w}" for w in m.warnings]
    if outcome.launch.stopped_early:
        lines.append(f"stopped early: {outcome.launch.stopped_early}")
    if outcome.launch.capture_error:
        lines.append(f"logs incomplete: {outcome.launch.capture_error}")
    if outcome.triage is not None and outcome.triage.failed:
        lines.append(f"triage: {outcome.triage.summary}")
    lines += [f"advice: {m.sentence}" for m in outcome.known]
    if outcome.picture_problem:
        lines.append(f"timeline.png not drawn: {outcome.picture_problem}")
    lines += fault_lines(v)
    verdict = headline(v.qualified, v.fault)
    lines.append(f"{verdict}: {outcome.plan.spec.workload} workload, fault {v.fault}; report: "
                 f"{outcome.run_dir / 'report.md'}")
    if outcome.plan.spec.workload_type.scope_note:
        lines.append(f"note: {outcome.plan.spec.workload_type.scope_note}")
    return "\n".join(lines)


def known_first(verdict: "Verdict", known: Sequence["KnownMatch"]) -> list[str]:
    """Before the table of a run a known defect fails: why it fails, so the table reads as the
    evidence of a known finding, not as a new one (the advice line after it names what qualifies)."""
    return [f"{headline(verdict.qualified, verdict.fault)} because of {m.brief}: the table shows its failure, the "
            "advice line which configuration qualifies" for m in known]


def goodput_line(g: "Goodput") -> str:
    """One line: the goodput and its biggest badput part (report.md has the split)."""
    if g.ratio is None:
        return f"goodput: unknown ({g.reason})"
    top = g.biggest()
    worst = f"; biggest badput: {top[0].replace('_', ' ')} {top[1]:.2f} s" if top is not None else ""
    return f"goodput: {100 * g.ratio:.1f} % ({g.productive_s:.2f} s productive of {g.wall_s:.2f} s wall){worst}"


def _of_last(verdict: "Verdict") -> str:
    """Which recovery the headline latency is, when the run has several: the last fault's."""
    if len(verdict.episodes) < 2:
        return ""
    e = verdict.episodes[-1]
    return f" of fault {e.number} of {len(verdict.episodes)} ({e.fault or '?'}, {e.fault_at}; each fault's is below)"


def _recovery_split(r) -> str:  # noqa: ANN001 - a harness.vocab.verdict.Recovery
    """One fault's latency split, in a few words."""
    def s(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f} s"

    parts = (r.detection_s, r.restart_s, r.restore_s, r.first_step_s)
    total = f", failure → first committed step {sum(parts):.2f} s" if all(x is not None for x in parts) else ""
    return (f"detection {s(r.detection_s)}, restart {s(r.restart_s)}, restore {s(r.restore_s)}, "
            f"first step {s(r.first_step_s)}{total}")


def fault_lines(verdict: "Verdict") -> list[str]:
    """Several faults: one line each (kind, rank, moment, cycle, its own result and what held it
    back, its own latency split), a campaign's seed first; nothing for one fault (its criteria
    and latency are the verdict's)."""
    if len(verdict.episodes) < 2:
        return []
    c = verdict.campaign
    lines = [f"campaign: {c.get('faults')} faults, seed {c.get('seed')}"] if c is not None else []
    n = len(verdict.episodes)
    recoveries = verdict.metrics.recoveries
    for i, e in enumerate(verdict.episodes):
        bad = [f"{r.id} {r.status}" for r in e.criteria if r.id not in e.superseded and str(r.status) in ("fail", "unknown")]
        split = f"; {_recovery_split(recoveries[i])}" if i < len(recoveries) else ""
        lines.append(f"fault {e.number} of {n}: {e.fault or '?'} on rank {'?' if e.rank is None else e.rank}, "
                     f"{e.fault_at}, cycle {'?' if e.cycle is None else e.cycle}: {e.status}"
                     + (f" ({', '.join(bad)})" if bad else "") + split)
    return lines


def verification(verdict: "Verdict", known: Sequence["KnownMatch"] = ()) -> str:
    """`nvrx-qual verify`'s lines: every criterion, the latencies, the known defects its failure
    matches, the verdict."""
    lines = [f"nvrx-qual verify: {verdict.run_dir} (fault {verdict.fault}: {verdict.fault_how})"]
    lines += [f"  {line}" for line in known_first(verdict, known)]
    width = max(len(c.id) for c in verdict.criteria)
    for c in verdict.criteria:
        lines.append(f"  {str(c.status):<14} {c.id:<{width}}  {c.detail}")
    m = verdict.metrics
    if m.failure_to_first_step_s is not None or m.detection_s is not None:
        def s(v: float | None) -> str:
            return "?" if v is None else f"{v:.2f}s"
        lines.append(f"  failure -> first committed step{_of_last(verdict)} {s(m.failure_to_first_step_s)} "
                     f"(detection {s(m.detection_s)}, "
                     f"restart {s(m.restart_s)}, restore {s(m.restore_s)}, first step {s(m.first_step_s)}); "
                     f"lost iterations {m.lost_iterations if m.lost_iterations is not None else '?'}")
    if verdict.goodput is not None:
        lines.append("  " + goodput_line(verdict.goodput))
    lines += [f"  warning: {w}" for w in m.warnings]
    lines += [f"  advice: {k.sentence}" for k in known]
    lines += [f"  {line}" for line in fault_lines(verdict)]
    lines.append(headline(verdict.qualified, verdict.fault))
    return "\n".join(lines)


def repeat_table(result: stats.RepeatStats, planned: int) -> list[str]:
    """Pass rate per criterion and p50 / p95 / max of every latency, as aligned text."""
    done = len(result.runs)
    head = f"{result.qualified_runs} of {done} runs qualified"
    if done != planned:
        head += f" ({planned} planned)"
    lines = [f"repeats: {result.label}: {head}"]
    width = max([len("criterion"), *(len(c.id) for c in result.criteria)])
    lines.append(f"  {'criterion'.ljust(width)}  held")
    for c in result.criteria:
        rate = f"{c.held}/{c.runs}" if c.runs else "—"
        lines.append(f"  {c.id.ljust(width)}  {rate}")
    label_width = max(len(label) for label in stats.METRIC_LABELS.values())
    lines.append(f"  {'metric'.ljust(label_width)}  {'p50':>8}  {'p95':>8}  {'max':>8}  measured")
    for m in result.metrics:
        cells = "  ".join(f"{stats.format_value(m.name, v):>8}" for v in (m.p50, m.p95, m.max))
        lines.append(f"  {stats.METRIC_LABELS[m.name].ljust(label_width)}  {cells}  {m.n}/{m.n + m.missing}")
    if result.failures:
        lines.append("  failing runs:")
        lines += [f"    {f.run_id}: {f.criterion} {f.status}: {f.detail}" for f in result.failures]
    return lines
