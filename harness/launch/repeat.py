"""`nvrx-qual run --repeat N`: the same scenario N times, each run with a fresh run ID
`<base>-r<i>` (zero-padded to the width of N), then the pass rate per criterion and
p50 / p95 / max of every latency, printed and written to `WORK_DIR/repeats/<base>/`
(summary.json, summary.md).

Everything that can be refused is refused before the first launch: a repeat that fails at
run 7 of 10 because run 7's directory already existed would waste the six before it. All N
runs are launched even when one fails, because the point is a pass rate. Ports are chosen
right before each launch, not up front, so a port taken meanwhile cannot break a later run.

The loop itself, with its progress lines, is the command layer's (harness.cli.repeat); it
takes the launch (`Execute`) as a parameter so it is tested without launching anything.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence, TextIO

from harness.launch import runner
from harness.report import stats
from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.vocab.layout import RUN_ID_PATTERN, RunLayout, is_valid_run_id
from harness.plan.resolve import resolve_spec
from harness.plan.spec import SpecError

SUMMARY_DIR = "repeats"


class Execute(Protocol):
    def __call__(self, plan: planmod.Plan, *, deadline_s: float | None, out: TextIO | None) -> runner.Outcome: ...


def launch_and_verify(plan: planmod.Plan, *, deadline_s: float | None, out: TextIO | None) -> runner.Outcome:
    """One run exactly as `nvrx-qual run` does it (its baseline: the first repeat runs the twin
    beside it, the later ones reuse it; preflight, launch with fail-fast, verify)."""
    runner.preflight(plan, os.environ)  # refused before a baseline twin is launched for it
    return runner.execute_with_baseline(plan, deadline_s=deadline_s, out=out)


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
    spec, target, _restored = resolve_spec({**flags, "run_id": run_id}, extra, env)
    return planmod.build(spec, target)


def prepare(flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str], count: int) -> RepeatPlan:
    """Validate all N runs before any launch; raises SpecError / NvrxError. Creates nothing."""
    if count < 1:
        raise SpecError([f"--repeat {count} must be 1 or more: give the number of runs, e.g. --repeat 5"])
    base_spec = specmod.from_sources(flags, env, extra)  # the base ID, generated when not given
    base, problems = base_spec.run_id, []
    if not is_valid_run_id(base):
        raise SpecError([f"{base_spec.say('run_id')} must match {RUN_ID_PATTERN}: use letters, digits, '.', '_' and "
                         "'-', starting with a letter or digit"])
    if count > 1 and base_spec.checkpoint_dir is not None:
        problems.append(f"{base_spec.say('checkpoint_dir')} with --repeat {count}: the "
                        "runs would share one checkpoint directory, so every run after the first would resume from "
                        f"the one before it; leave {base_spec.knob('checkpoint_dir')} out (each run then gets "
                        "runs/<run-id>/checkpoints), or run the repeats one at a time, each into a fresh copy of the "
                        "checkpoints")
    run_ids = derived_run_ids(base, count)
    for run_id in run_ids:
        root = RunLayout.for_run(base_spec.work_dir, run_id).root
        if root.exists() or root.is_symlink():
            problems.append(f"run directory {root} already exists: choose a new base run ID ({base_spec.knob('run_id')}"
                            ", or leave it out for a generated one); old runs are never overwritten")
    summary_dir = base_spec.work_dir / SUMMARY_DIR / base
    if summary_dir.exists() or summary_dir.is_symlink():
        problems.append(f"repeat summary directory {summary_dir} already exists: choose a new base run ID "
                        f"({base_spec.knob('run_id')}); earlier summaries are never overwritten")
    if problems:
        raise SpecError(problems)
    plan = plan_run(flags, extra, env, run_ids[0])  # everything else the N runs share
    if not plan.spec.dry_run:
        runner.preflight(plan, env)
    label = stats.scenario_label(plan.spec.workload, stats.fault_label(plan.spec.fault, plan.spec.fault_at),
                                   plan.nvrx.version)
    return RepeatPlan(base, run_ids, base_spec.work_dir, label, plan.spec.dry_run)


def record_of(outcome: runner.Outcome) -> stats.RunRecord:
    record = stats.RunRecord.from_verdict(outcome.verdict, run_dir=outcome.run_dir,
                                          workload=outcome.plan.spec.workload,
                                          stopped_early=outcome.launch.stopped_early)
    return dataclasses.replace(record, fault=stats.fault_label(record.fault, outcome.plan.spec.fault_at),
                               configuration=stats.run_configuration(outcome.plan.spec.to_json()))


def write_summary(rp: RepeatPlan, records: Sequence[stats.RunRecord], ended_early: str | None = None
                  ) -> tuple[stats.RepeatStats, tuple[Path, Path]]:
    """The runs' statistics, written to WORK_DIR/repeats/<base>/summary.{json,md}."""
    result = stats.summarize(rp.label, records)
    notes = [f"Stopped early: {ended_early}; the statistics cover the runs that finished."] if ended_early else []
    paths = stats.write_summary([result], rp.summary_dir, f"{len(rp.run_ids)} repeats of {rp.base}",
                                links=stats.timeline_links(records, rp.summary_dir), notes=notes)
    return result, tuple(paths)
