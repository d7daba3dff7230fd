"""`nvrx-qual run --repeat N`: the loop over the N runs with its progress lines, the table at
the end and the exit status. What can be refused is refused before the first launch
(harness.launch.repeat.prepare); all N runs are launched even when one fails, because the point is a
pass rate."""

from __future__ import annotations

import signal
import sys
from typing import Mapping, TextIO

from harness.machine import nvrx
from harness.launch import repeat
from harness.report import stats
from harness.cli.guard import refused
from harness.vocab.exitcodes import ExitStatus, signalled
from harness.cli import terminal
from harness.plan.spec import SpecError


def run_repeats(flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str], count: int, *,
                execute: repeat.Execute | None = None, progress: bool = True, deadline_s: float | None = None,
                out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`nvrx-qual run --repeat N`. Exit status: 0 all N qualified, 1 some did not, 2 refused
    (before anything was created, or a later run refused by the machine), 128+N a signal."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        rp = repeat.prepare(flags, extra, env, count)
        if rp.dry_run:
            return _dry_run(rp, flags, extra, env, out)
    except (SpecError, nvrx.NvrxError) as exc:
        return refused(exc, err)
    execute = execute or repeat.launch_and_verify
    records: list[stats.RunRecord] = []
    ended_early: str | None = None
    status: int = ExitStatus.QUALIFIED
    n = len(rp.run_ids)
    for i, run_id in enumerate(rp.run_ids, 1):
        try:
            plan = repeat.plan_run(flags, extra, env, run_id)
            print(("\n" if i > 1 else "") + terminal.announce(plan, f"{i} of {n}"), file=out, flush=True)
            outcome = execute(plan, deadline_s=deadline_s, out=out if progress else None)
            print(terminal.run_outcome(outcome), file=out, flush=True)
            records.append(repeat.record_of(outcome))
        except KeyboardInterrupt as exc:  # launch has already stopped and reaped the run's processes
            signum = getattr(exc, "signum", signal.SIGINT)  # harness.launch.job.Interrupted: SIGTERM, SIGHUP too
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            ended_early, status = f"interrupted ({name}) after {len(records)} of {n} runs", signalled(signum)
            print(f"\nnvrx-qual: {ended_early}", file=err, flush=True)
            break
        except (SpecError, nvrx.NvrxError) as exc:  # e.g. the machine changed under a long repeat
            refused(exc, err)
            ended_early, status = f"run {i} of {n} ({run_id}) was refused: {exc}", ExitStatus.REFUSED
            break
    if not records:  # stopped during the first run: nothing to add up
        return status
    result, paths = repeat.write_summary(rp, records, ended_early)
    print("\n" + "\n".join(terminal.repeat_table(result, n)), file=out)
    print(f"summary: {paths[1]} and {paths[0]}", file=out, flush=True)
    if ended_early:
        return status
    return ExitStatus.of_verdict(result.all_qualified and len(records) == n)


def _dry_run(rp: repeat.RepeatPlan, flags: Mapping[str, object], extra: tuple[str, ...], env: Mapping[str, str],
             out: TextIO) -> int:
    """The N plans, printed; nothing created, so the real repeat with the same base ID can follow."""
    n = len(rp.run_ids)
    for i, run_id in enumerate(rp.run_ids, 1):
        plan = repeat.plan_run(flags, extra, env, run_id)
        print(f"# run {i} of {n}: {run_id} (run directory {plan.layout.root})", file=out)
        print(plan.render(), end="", file=out)
    print(f"# dry run: nothing launched, nothing created; the {n} runs would summarize into {rp.summary_dir}",
          file=out)
    return ExitStatus.QUALIFIED
