"""Statistics over several runs: pass rate per criterion and p50 / p95 / max per latency metric.

One recovery proves little; operators signing off a stack want to know it holds every time.
The input is each run's `Verdict` (harness.vocab.verdict), so the same code serves `nvrx-qual run --repeat N`,
pytest's `--repeat N` and `nvrx-qual report RUN_DIR...`. A verdict.json is never taken at its word:
`load_run` re-judges the run's evidence (as `verify` does, writing nothing) and a verdict whose
evidence is gone is `unverifiable`, never qualified; `RunRecord.from_verdict_json` (a stored
verdict without its evidence) counts a stale one (an earlier release's, one lacking a criterion
every run is judged by now) as not qualified.

Percentiles interpolate linearly between the two nearest ranks (numpy.percentile's default,
Hyndman & Fan type 7): over 1, 2, 3, 4, 10 the p50 is 3 and the p95 is 4 + 0.8 x 6 = 8.8.
A metric a run could not measure (None) is counted as missing, never as zero.
Pure: nothing here reads or writes files except `write_summary`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from harness.safe import atomic, safeio
from harness import workloads
from harness.read.history import RunDirError, check_run_dir
from harness.vocab.layout import EXPECTATION_NAME, VERDICT_NAME
from harness.report.picture import FILE_NAME as TIMELINE
from harness import __version__
from harness.judge.criteria import CHECK_IDS, CRITERIA_IDS, FAIL, LOSS_CONTINUITY, NOT_APPLICABLE, PASS, UNKNOWN
from harness.vocab.verdict import CriterionResult, Verdict, qualified
from harness.vocab.faults import DEFAULT_FAULT_AT

# Where a record's verdict came from (RunRecord.source; summary.json's `verdict_source`).
JUDGED = "judged"  # judged now from the run's evidence (no verdict.json, or a fresh verdict)
REJUDGED = "re-judged"  # verdict.json was there; the evidence was judged again and that counts
RECORDED = "recorded"  # a current verdict.json taken as recorded, without its evidence (from_verdict_json)
STALE = "stale"  # a verdict.json of an earlier release or another criteria set, without its evidence
UNVERIFIABLE = "unverifiable"  # a verdict.json whose evidence is gone
UNTRUSTED = (STALE, UNVERIFIABLE)  # never counted as qualified

SCHEMA = 1
# The latency split and lost work, in the order of the report (harness.judge.metrics).
METRICS = ("detection_s", "restart_s", "restore_s", "first_step_s", "failure_to_first_step_s", "lost_iterations")
METRIC_LABELS = {
    "detection_s": "detection (s)",
    "restart_s": "restart (s)",
    "restore_s": "restore (s)",
    "first_step_s": "first step (s)",
    "failure_to_first_step_s": "failure → first committed step (s)",
    "lost_iterations": "lost iterations",
}
HEADLINE = "failure_to_first_step_s"


@dataclass(frozen=True)
class RunRecord:
    """What the statistics need of one run's verdict."""

    run_dir: str
    fault: str
    qualified: bool
    criteria: tuple[CriterionResult, ...]
    metrics: tuple[tuple[str, float | None], ...]
    nvrx_version: str | None = None
    workload: str | None = None
    stopped_early: str | None = None
    # False for a negative scenario: a run that breaks the recovery on purpose, which the
    # suite must catch (expectation.json in the run directory, written by the pytest fixtures)
    expected_qualified: bool = True
    source: str = JUDGED
    source_notes: tuple[str, ...] = ()  # what differed between verdict.json and the evidence, or why not trusted
    picture_current: bool = True  # False: timeline.png shows a stored verdict that this record contradicts
    # what else makes two runs different scenarios: the optimizer and the parallel shape
    # (run_configuration of run.json's spec); None: not recorded
    configuration: str | None = None

    @property
    def stopped_by_user(self) -> bool:
        """The person stopped the run (Ctrl-C, SIGTERM, SIGHUP to the harness): no verdict on the recovery."""
        return bool(self.stopped_early) and self.stopped_early.startswith(INTERRUPTED_PREFIX)

    @property
    def run_id(self) -> str:
        return Path(self.run_dir).name or self.run_dir

    @property
    def is_baseline(self) -> bool:
        """An uninterrupted run (fault none): it proves the job runs, not that it recovers, and
        the summaries count it apart from the fault runs."""
        return self.fault == "none" and self.expected_qualified and not self.stopped_by_user

    @property
    def as_expected(self) -> bool:
        return self.qualified == self.expected_qualified

    @property
    def verdict_cell(self) -> str:
        """The verdict as the summaries show it, with the expectation when it is negative."""
        if self.stopped_by_user:
            return "⏹ stopped by the user (not counted)"
        if self.source in UNTRUSTED:
            return f"❔ {self.source} verdict.json (not counted as qualified)"
        if self.expected_qualified:
            if self.qualified and self.fault == "none":
                return "✅ baseline (no fault: no recovery exercised)"
            return "✅ qualified" if self.qualified else "❌ not qualified"
        return "⚠️ qualified, but expected to be caught" if self.qualified else "✅ not qualified, as expected"

    @classmethod
    def from_verdict(cls, verdict: Verdict, *, run_dir: str | os.PathLike | None = None,
                     workload: str | None = None, stopped_early: str | None = None) -> "RunRecord":
        """`run_dir` overrides the recorded one (a run verified on a cluster and copied elsewhere)."""
        return cls(
            run_dir=str(run_dir if run_dir is not None else verdict.run_dir),
            fault=verdict.fault,
            # recomputed from the criteria, never the stored flag: a verdict.json may have been edited
            qualified=qualified(verdict.criteria),
            criteria=verdict.criteria,
            metrics=tuple((name, _number(getattr(verdict.metrics, name))) for name in METRICS),
            nvrx_version=_text(verdict.launcher.nvrx_version if verdict.launcher is not None else None),
            workload=workload,
            stopped_early=stopped_early,
        )

    @classmethod
    def from_verdict_json(cls, doc: Mapping, **where: object) -> "RunRecord":
        """From verdict.json (or `Verdict.to_json()`), read by `Verdict.from_json`, without its
        evidence; missing keys read as unknown. A stale verdict (Verdict.stale_reasons: an
        earlier release's, one without a criterion every run is judged by now) is never
        counted as qualified; a current one counts as recorded (a run directory's verdict goes
        through load_run, which re-judges the evidence)."""
        verdict = Verdict.from_json(doc)
        record = cls.from_verdict(verdict, **where)  # type: ignore[arg-type]
        reasons = verdict.stale_reasons(CHECK_IDS, __version__)
        if reasons:
            return replace(record, qualified=False, source=STALE,
                           source_notes=(f"verdict.json is stale ({'; '.join(reasons)}) and its evidence was not "
                                         "judged again: not counted as qualified",))
        return replace(record, source=RECORDED)

    def metric(self, name: str) -> float | None:
        return dict(self.metrics).get(name)

    def status(self, criterion_id: str) -> CriterionResult | None:
        return next((c for c in self.criteria if c.id == criterion_id), None)

    @property
    def failed(self) -> tuple[CriterionResult, ...]:
        return tuple(c for c in self.criteria if not c.held)

    def to_json(self) -> dict:
        return {"run_dir": self.run_dir, "run_id": self.run_id, "workload": self.workload, "fault": self.fault,
                "nvrx_version": self.nvrx_version, "qualified": self.qualified,
                "did_not_hold": [{"id": c.id, "status": c.status.value, "detail": c.detail} for c in self.failed], "metrics": dict(self.metrics),
                "stopped_early": self.stopped_early, "expected_qualified": self.expected_qualified,
                "verdict_source": self.source, "verdict_notes": list(self.source_notes),
                "configuration": self.configuration, "stopped_by_user": self.stopped_by_user}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


@dataclass(frozen=True)
class RunFailure:
    """A run in which a criterion did not hold: which run, which criterion, and why."""

    run_dir: str
    criterion: str
    status: str
    detail: str

    @property
    def run_id(self) -> str:
        return Path(self.run_dir).name or self.run_dir

    def to_json(self) -> dict:
        return {"run_id": self.run_id, **asdict(self)}


@dataclass(frozen=True)
class CriterionRate:
    id: str
    passed: int
    not_applicable: int
    failed: int
    unknown: int
    not_checked: int  # runs whose verdict has no result for it (e.g. loss continuity without a baseline)
    failures: tuple[RunFailure, ...]

    @property
    def runs(self) -> int:
        """Runs that checked it."""
        return self.passed + self.not_applicable + self.failed + self.unknown

    @property
    def held(self) -> int:
        """Runs in which the criterion did not stand in the way of qualification."""
        return self.passed + self.not_applicable

    @property
    def rate(self) -> float | None:
        return self.held / self.runs if self.runs else None

    def to_json(self) -> dict:
        return {"id": self.id, "runs": self.runs, "held": self.held, "pass": self.passed,
                "not_applicable": self.not_applicable, "fail": self.failed, "unknown": self.unknown,
                "not_checked": self.not_checked, "pass_rate": self.rate,
                "failures": [f.to_json() for f in self.failures]}


@dataclass(frozen=True)
class MetricStats:
    name: str
    n: int  # runs that measured it
    missing: int  # runs that could not
    p50: float | None
    p95: float | None
    max: float | None

    def to_json(self) -> dict:
        return {"n": self.n, "missing": self.missing, "p50": self.p50, "p95": self.p95, "max": self.max}


@dataclass(frozen=True)
class RepeatStats:
    """Every run of one scenario, and what they add up to."""

    label: str
    runs: tuple[RunRecord, ...]
    criteria: tuple[CriterionRate, ...]
    metrics: tuple[MetricStats, ...]

    @property
    def qualified_runs(self) -> int:
        return sum(r.qualified for r in self.runs)

    @property
    def all_qualified(self) -> bool:
        return bool(self.runs) and self.qualified_runs == len(self.runs)

    @property
    def expected_negative(self) -> bool:
        """Every run of this scenario was meant not to qualify (the suite must catch it)."""
        return bool(self.runs) and not any(r.expected_qualified for r in self.runs)

    @property
    def as_expected(self) -> bool:
        return bool(self.runs) and all(r.as_expected for r in self.runs)

    @property
    def stopped_by_user(self) -> bool:
        """Every run of this group was stopped by the person (Ctrl-C): it says nothing either way."""
        return bool(self.runs) and all(r.stopped_by_user for r in self.runs)

    def qualified_sentence(self) -> str:
        n = len(self.runs)
        runs = f"run{'s' if n != 1 else ''}"
        if self.stopped_by_user:
            return f"{n} {runs} stopped by the user before a verdict on the recovery (not counted)."
        if all(r.is_baseline for r in self.runs):
            return (f"{self.qualified_runs} of {n} uninterrupted baseline {runs} ran cleanly (fault none: no recovery "
                    "was exercised).")
        text = f"{self.qualified_runs} of {n} {runs} qualified"
        if not self.expected_negative:
            return text + "."
        if self.as_expected:
            return (f"as expected: {n} of {n} {runs} caught not qualifying (this scenario's recovery is broken, on "
                    "purpose or by a known defect).")
        return text + " although this scenario's recovery is broken (on purpose or by a known defect): the suite did not catch it."

    @property
    def failures(self) -> tuple[RunFailure, ...]:
        """Run by run, in the criteria's order: what did not hold where (the criteria's own
        failure lists, regrouped; the sort is stable, so each run keeps the criteria's order)."""
        order = {r.run_dir: i for i, r in reversed(list(enumerate(self.runs)))}
        return tuple(sorted((f for c in self.criteria for f in c.failures), key=lambda f: order[f.run_dir]))

    def metric(self, name: str) -> MetricStats:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def criterion(self, criterion_id: str) -> CriterionRate:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise KeyError(criterion_id)

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "run_count": len(self.runs),
            "qualified_runs": self.qualified_runs,
            "all_qualified": self.all_qualified,
            "expected_negative": self.expected_negative,
            "as_expected": self.as_expected,
            "runs": [r.to_json() for r in self.runs],
            "criteria": [c.to_json() for c in self.criteria],
            "metrics": {m.name: m.to_json() for m in self.metrics},
            "failures": [f.to_json() for f in self.failures],
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the nearest ranks (type 7)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _criterion_ids(runs: Sequence[RunRecord]) -> list[str]:
    """The five criteria first, in their order, then further checks in first-seen order."""
    seen = [c for c in CRITERIA_IDS if any(r.status(c) for r in runs)]
    for r in runs:
        seen += [c.id for c in r.criteria if c.id not in seen]
    return seen


def _rate(cid: str, runs: Sequence[RunRecord]) -> CriterionRate:
    counts = {PASS: 0, NOT_APPLICABLE: 0, FAIL: 0, UNKNOWN: 0}
    failures, not_checked = [], 0
    for r in runs:
        c = r.status(cid)
        if c is None:
            not_checked += 1
            continue
        counts[c.status if c.status in counts else UNKNOWN] += 1  # an unheard-of status decides nothing
        if not c.held:
            failures.append(RunFailure(r.run_dir, cid, c.status, c.detail))
    return CriterionRate(cid, counts[PASS], counts[NOT_APPLICABLE], counts[FAIL], counts[UNKNOWN], not_checked,
                         tuple(failures))


def _metric(name: str, runs: Sequence[RunRecord]) -> MetricStats:
    values = [v for v in (r.metric(name) for r in runs) if v is not None]
    if not values:
        return MetricStats(name, 0, len(runs), None, None, None)
    return MetricStats(name, len(values), len(runs) - len(values), round(percentile(values, 50), 3),
                       round(percentile(values, 95), 3), max(values))


def summarize(label: str, runs: Iterable[RunRecord]) -> RepeatStats:
    runs = tuple(runs)
    return RepeatStats(label, runs, tuple(_rate(cid, runs) for cid in _criterion_ids(runs)),
                       tuple(_metric(name, runs) for name in METRICS))


# ---------------------------------------------------------------- renderings


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _count(value: float | None) -> str:
    """Iterations: whole numbers as such, interpolated percentiles with one decimal."""
    return "—" if value is None else f"{value:.2f}".rstrip("0").removesuffix(".")


def format_value(name: str, value: float | None) -> str:
    """A metric's value as the summaries show it ("—" when not measured)."""
    return _count(value) if name == "lost_iterations" else _num(value)


def _held(c: CriterionRate) -> str:
    if not c.runs:
        return "—"
    return f"{c.held}/{c.runs} ({100 * c.held / c.runs:.0f} %)"


def _link(target: str) -> str:
    """A Markdown link target; angle brackets keep spaces and parentheses intact."""
    return f"<{target}>" if any(ch in target for ch in " ()<>") else target


def render_group(stats: RepeatStats, heading: str = "##") -> str:
    """One scenario's statistics: pass rate per criterion, latency percentiles, failing runs."""
    out = [f"{heading} {stats.label}", "", stats.qualified_sentence(), "",
           "| criterion | held | pass | not applicable | fail | unknown | not checked |", "|---|---|---|---|---|---|---|"]
    for c in stats.criteria:
        out.append(f"| `{c.id}` | {_held(c)} | {c.passed} | {c.not_applicable} | {c.failed} | {c.unknown} | "
                   f"{c.not_checked} |")
    out += ["", "| metric | runs measured | p50 | p95 | max |", "|---|---|---|---|---|"]
    for m in stats.metrics:
        out.append(f"| {METRIC_LABELS[m.name]} | {m.n}/{m.n + m.missing} | {format_value(m.name, m.p50)} | "
                   f"{format_value(m.name, m.p95)} | {format_value(m.name, m.max)} |")
    if stats.failures:
        out += ["", "Failing runs (caught, as expected):" if stats.expected_negative else "Failing runs:", ""]
        out += [f"- `{f.run_id}`: `{f.criterion}` {f.status}: {_cell(f.detail)} (`{f.run_dir}`)"
                for f in stats.failures]
    unexplained = [r for r in stats.runs if not r.qualified and not r.failed]
    if unexplained:  # a verdict that says "not qualified" without a criterion to blame
        out += ["", "Not qualified without a failing criterion in the verdict:", ""]
        out += [f"- `{r.run_id}` (`{r.run_dir}`)" for r in unexplained]
    stopped = [r for r in stats.runs if r.stopped_early]
    if stopped:
        out += ["", "Stopped early by the harness:", ""]
        out += [f"- `{r.run_id}`: {_cell(r.stopped_early or '')}" for r in stopped]
    return "\n".join(out) + "\n"


def render_markdown(groups: Sequence[RepeatStats], title: str, links: Mapping[str, str] | None = None,
                    notes: Sequence[str] = ()) -> str:
    """A summary over several runs: one row per run, then each scenario's statistics.
    `links` maps a run directory to the path to show for its timeline picture."""
    runs = [r for g in groups for r in g.runs]
    negative = [r for r in runs if not r.expected_qualified and not r.stopped_by_user]
    stopped = [r for r in runs if r.stopped_by_user]
    head = counted_sentence(runs)
    if stopped:
        head += f" {len(stopped)} run{'s were' if len(stopped) != 1 else ' was'} stopped by the user (Ctrl-C), not counted."
    if negative:
        caught = sum(not r.qualified for r in negative)
        head += (f" {len(negative)} of them had a broken recovery to catch (expected not to qualify); "
                 f"{caught} of those were caught.")
    out = [f"# {title}", "", head, ""]
    out += [f"> {note}" for note in notes]
    if notes:
        out.append("")
    out += ["| # | run | scenario | verdict | did not hold | failure → first step (s) | timeline |",
            "|---|---|---|---|---|---|---|"]
    i = 0
    for g in groups:
        for r in g.runs:
            i += 1
            failed = ", ".join(f"`{c.id}` {c.status}" for c in r.failed) or "—"
            picture = (links or {}).get(r.run_dir)
            shown = f"[timeline.png]({_link(picture)})" if picture else "—"
            if picture and not r.picture_current:
                shown += " (drawn for the stored verdict.json, which the evidence contradicts)"
            verdict = r.verdict_cell
            out.append(f"| {i} | `{r.run_id}` | {_cell(g.label)} | {verdict} | {failed} | "
                       f"{_num(r.metric(HEADLINE))} | {shown} |")
    out.append("")
    noted = [r for r in runs if r.source_notes]
    if noted:  # a stored verdict.json that the evidence contradicts, that is stale, or whose evidence is gone
        out += ["Stored verdicts (verdict.json) that were not counted as written:", ""]
        out += [f"- `{r.run_id}` ({r.source}): {_cell(n)}" for r in noted for n in r.source_notes]
        out.append("")
    for g in groups:
        out.append(render_group(g))
    out.append("Percentiles interpolate linearly between the nearest ranks; a criterion *holds* in a run when it "
               "passes or does not apply (no fault: nothing to recover); a metric a run could not measure is "
               "left out of its percentiles, not counted as zero.")
    return "\n".join(out) + "\n"


def counted_sentence(runs: Sequence[RunRecord]) -> str:
    """'3 of 4 runs qualified.', counting the fault runs; the uninterrupted baselines (fault none)
    apart, and the runs the person stopped not at all."""
    stopped = [r for r in runs if r.stopped_by_user]
    baselines = [r for r in runs if r.is_baseline]
    faults = [r for r in runs if not r.stopped_by_user and not r.is_baseline]
    head = f"{sum(r.qualified for r in faults)} of {len(faults)} runs qualified."
    if baselines:
        clean = sum(r.qualified for r in baselines)
        head += (f" {len(baselines)} uninterrupted baseline run{'s' if len(baselines) != 1 else ''} (fault none, no "
                 f"recovery exercised) counted apart: {clean} of them ran cleanly.")
    return head


def summary_json(groups: Sequence[RepeatStats], title: str = "", notes: Sequence[str] = ()) -> dict:
    runs = [r for g in groups for r in g.runs]
    baselines = [r for r in runs if r.is_baseline]
    return {"schema": SCHEMA, "title": title, "notes": list(notes), "run_count": sum(len(g.runs) for g in groups),
            "qualified_runs": sum(g.qualified_runs for g in groups),
            "baseline_runs": len(baselines), "clean_baseline_runs": sum(r.qualified for r in baselines),
            "qualified_fault_runs": sum(r.qualified for r in runs if not r.is_baseline and not r.stopped_by_user),
            "all_qualified": bool(groups) and all(g.all_qualified for g in groups),
            "scenarios": [g.to_json() for g in groups]}


def write_summary(groups: Sequence[RepeatStats], directory: str | os.PathLike, title: str,
                  stem: str = "summary", links: Mapping[str, str] | None = None,
                  notes: Sequence[str] = ()) -> tuple[Path, Path]:
    """`<stem>.json` and `<stem>.md` in directory (created when missing); returns both paths.
    `links` are shown as written: make them relative to `directory`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    json_path, md_path = root / f"{stem}.json", root / f"{stem}.md"
    for path, text in ((json_path, json.dumps(summary_json(groups, title, notes), indent=2, ensure_ascii=False) + "\n"),
                       (md_path, render_markdown(groups, title, links, notes))):
        atomic.write_text(path, text)
    return json_path, md_path


# ---------------------------------------------------------------- runs from their directories
# (`nvrx-qual report RUN_DIR...`, the repeat loops): each run is read from its verdict.json when
# present (the record `verify` or `run` wrote), else verified read-only from its files. Runs are
# grouped into scenarios (workload, fault, NVRx version, expectation) so a percentile never
# mixes a kill's latency with a hang's.

TITLE = "Recovery qualification summary"


EXPECTATION_FILE = EXPECTATION_NAME  # {"qualified": false, "why": "..."}: a negative scenario of the suite
EXPECTED_NEGATIVE = "expected not to qualify"


INTERRUPTED_PREFIX = "interrupted:"  # launch.json's stopped_early when the person stopped the harness
STOPPED_BY_USER = "stopped by the user"


@dataclass(frozen=True)
class ScenarioKey:
    workload: str | None
    fault: str
    nvrx_version: str | None
    expected_qualified: bool = True
    configuration: str | None = None
    stopped_by_user: bool = False


def scenario_label(workload: str | None, fault: str, nvrx_version: str | None, expected_qualified: bool = True,
                   configuration: str | None = None, stopped_by_user: bool = False) -> str:
    label = f"{workload or 'unknown'} workload" + (f" ({configuration})" if configuration else "") + \
        f", fault {fault}, NVRx {nvrx_version or 'unknown'}"
    if stopped_by_user:
        return f"{label} ({STOPPED_BY_USER})"
    return label if expected_qualified else f"{label} ({EXPECTED_NEGATIVE})"


def run_configuration(spec: Mapping) -> str | None:
    """The optimizer (Megatron workloads) and the parallel shape of a run, as run.json's spec
    (or RunSpec.to_json()) records them: 'distributed optimizer, 1x2 ranks, TP 1, PP 1'."""
    if not isinstance(spec, Mapping):
        return None
    parts = []
    optimizer = spec.get("distributed_optimizer")
    workload = workloads.find(spec.get("workload"))
    if workload is not None and "distributed_optimizer" in workload.own_knobs and isinstance(optimizer, bool):
        parts.append("distributed optimizer" if optimizer else "plain optimizer")
    nodes, per_node = spec.get("nnodes"), spec.get("gpus_per_node")
    if _whole(nodes) and _whole(per_node):
        parts.append(f"{nodes}x{per_node} ranks")
    for key, name in (("tp", "TP"), ("pp", "PP"), ("cp", "CP")):
        value = spec.get(key)
        if _whole(value) and (value != 1 or key != "cp"):
            parts.append(f"{name} {value}")
    return ", ".join(parts) or None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000


def expectation_record(why: str) -> str:
    """expectation.json of a run that breaks the recovery on purpose (the suite must catch it)."""
    return json.dumps({"qualified": False, "why": why}, indent=2) + "\n"


def _expected_qualified(run_dir: Path) -> bool:
    """False only when the run directory says it was meant to fail (expectation.json)."""
    path = run_dir / EXPECTATION_FILE
    if path.is_symlink() or not path.is_file():
        return True
    doc, _ = _read_json(path)
    return not (doc is not None and doc.get("qualified") is False)


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    """(the object, None), (None, None) when absent, (None, why) when unreadable."""
    try:
        data = safeio.read_json(path)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError) as exc:
        return None, str(exc) or type(exc).__name__
    return (data, None) if isinstance(data, dict) else (None, "not a JSON object")


def load_run(run_dir: Path, warn: Callable[[str], None] | None = None,
             read_dirs: Sequence[str | os.PathLike] = ()) -> RunRecord:
    """One run as a RunRecord, judged from its evidence through verify's own judge
    (harness.report.verify.judge_run; writes nothing). A verdict.json in the directory is compared
    with that judgment, never counted instead of it: what differs is noted (`warn` and the
    record's source_notes). A verdict.json whose evidence is gone (no logs, marker or
    checkpoints) is `unverifiable`: its criteria read unknown, it is not qualified. Raises
    RunDirError for a path that is neither a run directory nor holds a verdict.json."""
    from harness.report.verify import judge_run  # the checkers only where a run is judged

    say = warn or (lambda _message: None)
    path = run_dir / VERDICT_NAME
    doc, why = _read_json(path)
    if doc is not None and not isinstance(doc.get("criteria"), list):
        doc, why = None, "it holds no criteria"
    try:
        check_run_dir(run_dir)
    except RunDirError as exc:
        if doc is None:
            raise
        stored = Verdict.from_json(doc)
        note = (f"{path} says {'qualified' if stored.qualified else 'not qualified'}, but the evidence it judged is "
                f"gone ({str(exc).split(': ', 1)[-1].split(';')[0]}): it cannot be re-judged, so it is not counted as "
                "qualified; copy the run's logs/, checkpoints/ and markers with it")
        say(note)
        return _record(run_dir, _unverifiable(stored), source=UNVERIFIABLE, notes=(note,), picture_current=False)
    if why:
        say(f"{path} is unreadable ({why}): verified the run directory instead")
    verdict, _read = judge_run(run_dir, picture=False, read_dirs=read_dirs)
    if doc is None:
        return _record(run_dir, verdict)
    stored = Verdict.from_json(doc)
    notes = _differences(path, stored, verdict)
    for note in notes:
        say(note)
    counted = _with_stored_baseline(stored, verdict)
    same = stored.qualified == counted.qualified and {c.id: c.status for c in stored.criteria} == {
        c.id: c.status for c in counted.criteria}
    return _record(run_dir, counted, source=REJUDGED, notes=notes, picture_current=same)


def _record(run_dir: Path, verdict: Verdict, source: str = JUDGED, notes: tuple[str, ...] = (),
            picture_current: bool = True) -> RunRecord:
    run_json, _ = _read_json(run_dir / "run.json")
    launch_json, _ = _read_json(run_dir / "launch.json")
    spec = (run_json or {}).get("spec")
    workload = spec.get("workload") if isinstance(spec, dict) else None
    record = RunRecord.from_verdict(verdict, run_dir=run_dir.absolute(), workload=str(workload) if workload else None,
                                    stopped_early=_stopped(launch_json))
    record = replace(record, expected_qualified=_expected_qualified(run_dir), source=source, source_notes=notes,
                     picture_current=picture_current, configuration=run_configuration(spec))
    if source in UNTRUSTED:
        record = replace(record, qualified=False)
    version = (run_json or {}).get("nvrx_version")
    if version and not record.nvrx_version:  # a verdict.json without its launcher section
        record = replace(record, nvrx_version=str(version))
    moment = spec.get("fault_at") if isinstance(spec, dict) else None
    if isinstance(moment, str) and record.fault != "none":  # a kill in a save never mixes with one after a commit
        record = replace(record, fault=fault_label(record.fault, moment))
    return record


def _unverifiable(stored: Verdict) -> Verdict:
    """A stored verdict that cannot be re-judged: every criterion unknown (saying what the file
    claimed), no latency (nothing measured them now), not qualified."""
    criteria = tuple(CriterionResult(c.id, UNKNOWN, f"Not re-judged: the evidence is gone (verdict.json said "
                                                    f"{c.status.value}).") for c in stored.criteria)
    return replace(stored, qualified=False, criteria=criteria, metrics=type(stored.metrics)())


def _differences(path: Path, stored: Verdict, now: Verdict) -> tuple[str, ...]:
    """What verdict.json says that the evidence, judged again, does not: one note each."""
    notes = []
    reasons = stored.stale_reasons(CHECK_IDS, __version__)
    if reasons:
        notes.append(f"{path} is stale ({'; '.join(reasons)}): re-judged from the evidence")
    said = {c.id: c.status for c in stored.criteria}
    changed = [f"{c.id} {said[c.id].value if c.id in said else '(absent)'} → {c.status.value}" for c in now.criteria
               if (c.id in said and said[c.id] != c.status) or (c.id not in said and not c.held)]
    if stored.qualified != now.qualified or changed:
        notes.append(f"{path} says {'qualified' if stored.qualified else 'not qualified'}, the evidence says "
                     f"{'qualified' if now.qualified else 'not qualified'}" + (f" ({', '.join(changed)})" if changed else "")
                     + ": the evidence was counted")
    if stored.fault not in (now.fault, "?"):
        notes.append(f"{path} was judged for fault {stored.fault[:20]} ({stored.fault_how[:40]}); re-judged for the fault "
                     f"the run records, {now.fault} ({now.fault_how})")
    if stored.evidence_digest is not None and now.evidence_digest is not None:
        changed_evidence = stored.evidence_digest.compare(now.evidence_digest)
        if changed_evidence:
            notes.append(f"{path}: {changed_evidence}; re-judged from what is there now")
    return tuple(notes)


def _with_stored_baseline(stored: Verdict, now: Verdict) -> Verdict:
    """A loss-continuity result needs the baseline `verify --baseline` was given, which the
    record does not name: one that did not hold is kept (it can only hold a run back)."""
    kept = tuple(c for c in stored.criteria if c.id == LOSS_CONTINUITY and not c.held
                 and all(n.id != c.id for n in now.criteria))
    if not kept:
        return now
    results = (*now.criteria, *(replace(c, detail=f"{c.detail} (from verdict.json: judged against a baseline at "
                                                  "verify time, not re-judged)") for c in kept))
    return replace(now, criteria=results, qualified=qualified(results))


def fault_label(fault: str, fault_at: str | None) -> str:
    """The fault as scenarios are grouped: its kind, and its moment when not the default one."""
    return fault if fault == "none" or fault_at in (None, DEFAULT_FAULT_AT) else f"{fault} at {fault_at}"


def _stopped(launch_json: dict | None) -> str | None:
    value = (launch_json or {}).get("stopped_early")
    return str(value) if value else None


def group_runs(records: Iterable[RunRecord]) -> list[RepeatStats]:
    """One RepeatStats per scenario, in order of first appearance."""
    groups: dict[ScenarioKey, list[RunRecord]] = {}
    for r in records:
        key = ScenarioKey(r.workload, r.fault, r.nvrx_version, r.expected_qualified, r.configuration, r.stopped_by_user)
        groups.setdefault(key, []).append(r)
    return [summarize(scenario_label(k.workload, k.fault, k.nvrx_version, k.expected_qualified, k.configuration,
                                     k.stopped_by_user), runs)
            for k, runs in groups.items()]


def timeline_links(records: Iterable[RunRecord], relative_to: Path) -> dict[str, str]:
    """run_dir -> path of its timeline.png relative to `relative_to`, the directory the
    Markdown is read from (so the summary and the runs can move together)."""
    links = {}
    for r in records:  # one that shows a stored verdict the evidence contradicts is marked where it is shown
        picture = Path(r.run_dir) / TIMELINE
        if picture.is_file():
            links[r.run_dir] = os.path.relpath(picture.absolute(), relative_to.absolute())
    return links


def refuse_existing(option: str, path: str | None) -> str | None:
    """Why a new output file cannot be written at `path`, or None."""
    if path is None:
        return None
    target = Path(path)
    if target.exists() or target.is_symlink():
        return (f"{option} {path} already exists: choose a new file name (or move it away); existing files are "
                "never overwritten")
    parent = target.absolute().parent
    if not parent.is_dir():
        return f"{option} {path}: directory {parent} does not exist: create it first"
    return None


def scenario_lines(group: RepeatStats, width: int = 160) -> list[str]:
    """A few terminal lines: runs qualified, the headline latency, each failing run and criterion."""
    m = group.metric(HEADLINE)
    latency = (f"failure → first step p50 {_seconds(m.p50)} s, p95 {_seconds(m.p95)} s, max {_seconds(m.max)} s"
               if m.n else "failure → first step not measured")
    lines = [f"{group.label}: {group.qualified_sentence().rstrip('.')}; {latency}"]
    for f in group.failures:
        line = f"  {f.run_id}: {f.criterion} {f.status}: {f.detail}"
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return lines


def _seconds(value: float | None) -> str:
    return format_value(HEADLINE, value)
