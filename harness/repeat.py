"""`nvrx-qual run --repeat N`: the same scenario N times, each run with a fresh run ID
`<base>-r<i>` (zero-padded to the width of N), then the pass rate per criterion and
p50 / p95 / max of every latency, printed and written to `WORK_DIR/repeats/<base>/`
(summary.json, summary.md).

Everything that can be refused is refused before the first launch: a repeat that fails at
run 7 of 10 because run 7's directory already existed would waste the six before it. All N
runs are launched even when one fails, because the point is a pass rate. Ports are chosen
right before each launch, not up front, so a port taken meanwhile cannot break a later run.

`run_repeats(..., execute=)` takes the launch as a parameter so the loop is tested without
launching anything.
"""

from __future__ import annotations

import dataclasses
import signal

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, TextIO

from harness import cli, nvrx, runner, stats, summary
from harness.exitcodes import ExitStatus, signalled
from harness import plan as planmod
from harness import spec as specmod
from harness.layout import RUN_ID_PATTERN, RunLayout, is_valid_run_id
from harness.spec import SpecError

SUMMARY_DIR = "repeats"
EXIT_QUALIFIED, EXIT_FAILED, EXIT_REFUSED = ExitStatus.QUALIFIED, ExitStatus.NOT_QUALIFIED, ExitStatus.REFUSED
EXIT_INTERRUPTED = signalled(signal.SIGINT)


class Execute(Protocol):
    def __call__(self, plan: planmod.Plan, *, deadline_s: float | None, out: TextIO | None) -> runner.Outcome: ...


def launch_and_verify(plan: planmod.Plan, *, deadline_s: float | None, out: TextIO | None) -> runner.Outcome:
    """One run exactly as `nvrx-qual run` does it (preflight, launch with fail-fast, verify)."""
    return runner.execute(plan, deadline_s=deadline_s, fail_fast=True, out=out)


@dataclass(frozen=True)
class RepeatPlan:
    base: str
    run_ids: tuple[str, ...]
    work_dir: Path
    label: str
    dry_run: bool

    @property
    def summary_dir(self) -> Path:
        return self.work_dir / SUMMARY_DIR / self.base


def derived_run_ids(base: str, count: int) -> tuple[str, ...]:
    """`base-r01` .. `base-r10` for ten: zero-padded so the run directories sort in order."""
    width = len(str(count))
    return tuple(f"{base}-r{i:0{width}d}" for i in range(1, count + 1))


def plan_run(flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str],
             run_id: str) -> planmod.Plan:
    """One run's plan, validated, with ports free right now."""
    spec, target, _restored = cli.resolve_spec({**flags, "run_id": run_id}, extra, env)
    return planmod.build(spec, target)


def prepare(flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str], count: int) -> RepeatPlan:
    """Validate all N runs before any launch; raises SpecError / NvrxError. Creates nothing."""
    if count < 1:
        raise SpecError([f"--repeat {count} must be 1 or more: give the number of runs, e.g. --repeat 5"])
    base_spec = specmod.from_sources(flags, env, extra)  # the base ID, generated when not given
    base, problems = base_spec.run_id, []
    if not is_valid_run_id(base):
        raise SpecError([f"NVRX_RUN_ID={base!r} must match {RUN_ID_PATTERN}: use letters, digits, '.', '_' and '-', "
                         "starting with a letter or digit"])
    if count > 1 and base_spec.checkpoint_dir is not None:
        problems.append(f"NVRX_CHECKPOINT_DIR / --checkpoint-dir {base_spec.checkpoint_dir} with --repeat {count}: the "
                        "runs would share one checkpoint directory, so every run after the first would resume from "
                        "the one before it; unset it (each run then gets runs/<run-id>/checkpoints), or run the "
                        "repeats one at a time, each into a fresh copy of the checkpoints")
    run_ids = derived_run_ids(base, count)
    for run_id in run_ids:
        root = RunLayout.for_run(base_spec.work_dir, run_id).root
        if root.exists() or root.is_symlink():
            problems.append(f"run directory {root} already exists: choose a new base run ID (--run-id / "
                            "NVRX_RUN_ID, or leave it unset for a generated one); old runs are never overwritten")
    summary_dir = base_spec.work_dir / SUMMARY_DIR / base
    if summary_dir.exists() or summary_dir.is_symlink():
        problems.append(f"repeat summary directory {summary_dir} already exists: choose a new base run ID "
                        "(--run-id / NVRX_RUN_ID); earlier summaries are never overwritten")
    if problems:
        raise SpecError(problems)
    plan = plan_run(flags, extra, env, run_ids[0])  # everything else the N runs share
    if not plan.spec.dry_run:
        runner.preflight(plan, env)
    label = summary.scenario_label(plan.spec.workload, summary.fault_label(plan.spec.fault, plan.spec.fault_at),
                                   plan.nvrx.version)
    return RepeatPlan(base, run_ids, base_spec.work_dir, label, plan.spec.dry_run)


def _refused(exc: Exception, err: TextIO) -> int:
    for line in str(exc).splitlines():
        print(f"nvrx-qual: error: {line}", file=err)
    return EXIT_REFUSED


def record_of(outcome: runner.Outcome) -> stats.RunRecord:
    record = stats.RunRecord.from_verdict_json(outcome.verdict.to_json(), run_dir=outcome.run_dir,
                                               workload=outcome.plan.spec.workload,
                                               stopped_early=outcome.launch.stopped_early)
    return dataclasses.replace(record, fault=summary.fault_label(record.fault, outcome.plan.spec.fault_at))


def run_repeats(flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str], count: int, *,
                execute: Execute | None = None, progress: bool = True, deadline_s: float | None = None,
                out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`nvrx-qual run --repeat N`. Exit status: 0 all N qualified, 1 some did not, 2 refused
    (before anything was created, or a later run refused by the machine), 130 Ctrl-C."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        rp = prepare(flags, extra, env, count)
        if rp.dry_run:
            return _dry_run(rp, flags, extra, env, out)
    except (SpecError, nvrx.NvrxError) as exc:
        return _refused(exc, err)
    execute = execute or launch_and_verify
    records: list[stats.RunRecord] = []
    ended_early: str | None = None
    status = EXIT_QUALIFIED
    n = len(rp.run_ids)
    for i, run_id in enumerate(rp.run_ids, 1):
        try:
            plan = plan_run(flags, extra, env, run_id)
            print(("\n" if i > 1 else "") + runner.announce(plan, f"{i} of {n}"), file=out, flush=True)
            outcome = execute(plan, deadline_s=deadline_s, out=out if progress else None)
            print(runner.summary(outcome), file=out, flush=True)
            records.append(record_of(outcome))
        except KeyboardInterrupt as exc:  # launch has already stopped and reaped the run's processes
            signum = getattr(exc, "signum", signal.SIGINT)  # harness.launch.Interrupted: SIGTERM, SIGHUP too
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            ended_early, status = f"interrupted ({name}) after {len(records)} of {n} runs", signalled(signum)
            print(f"\nnvrx-qual: {ended_early}", file=err, flush=True)
            break
        except (SpecError, nvrx.NvrxError) as exc:  # e.g. the machine changed under a long repeat
            _refused(exc, err)
            ended_early, status = f"run {i} of {n} ({run_id}) was refused: {exc}", EXIT_REFUSED
            break
    if not records:  # stopped during the first run: nothing to add up
        return status
    result = stats.summarize(rp.label, records)
    notes = [f"Stopped early: {ended_early}; the statistics cover the runs that finished."] if ended_early else []
    paths = stats.write_summary([result], rp.summary_dir, f"{n} repeats of {rp.base}",
                                links=summary.timeline_links(records, rp.summary_dir), notes=notes)
    print("\n" + "\n".join(render_terminal(result, n)), file=out)
    print(f"summary: {paths[1]} and {paths[0]}", file=out, flush=True)
    if ended_early:
        return status
    return EXIT_QUALIFIED if result.all_qualified and len(records) == n else EXIT_FAILED


def render_terminal(result: stats.RepeatStats, planned: int) -> list[str]:
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


def _dry_run(rp: RepeatPlan, flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str],
             out: TextIO) -> int:
    """The N plans, printed; nothing created, so the real repeat with the same base ID can follow."""
    n = len(rp.run_ids)
    for i, run_id in enumerate(rp.run_ids, 1):
        plan = plan_run(flags, extra, env, run_id)
        print(f"# run {i} of {n}: {run_id} (run directory {plan.layout.root})", file=out)
        print(plan.render(), end="", file=out)
    print(f"# dry run: nothing launched, nothing created; the {n} runs would summarize into {rp.summary_dir}",
          file=out)
    return EXIT_QUALIFIED
