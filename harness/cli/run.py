"""`nvrx-qual plan`, `nvrx-qual run [--repeat N]` and `nvrx-qual sbatch`: a RunSpec from the
flags and the environment, then a dry run, a launch (watched, verified, triaged) or a batch
script."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Mapping

from harness.safe import atomic, safeio
from harness.launch import baseline, runner
from harness.machine import nvrx
from harness.plan import sbatch as sbatchmod
from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.cli.guard import refused
from harness.vocab.exitcodes import ExitStatus
from harness.launch.prepare import prepare, release
from harness.cli import terminal
from harness.plan.resolve import resolve_spec
from harness.plan.spec import SpecError


def spec_flags(args: argparse.Namespace) -> dict:
    return {k.field: getattr(args, k.field, None) for k in specmod.KNOBS}


def add_run_arguments(groups: dict[str, argparse._ArgumentGroup]) -> None:
    groups["output"].add_argument("--quiet", action="store_true",
                                  help="no progress lines while the job runs (default: off)")
    groups["deadlines"].add_argument(
        "--deadline", type=float, default=None,
        help="seconds before the whole job is stopped (default: derived from the section timeouts)")
    groups["what to run"].add_argument(
        "--repeat", type=int, default=1, metavar="N",
        help="run the same scenario N times, each with a fresh run ID <run-id>-r<i>, then print the pass rate per "
             "criterion and p50/p95/max of every latency and write them to WORK_DIR/repeats/<run-id>/summary."
             "{json,md} (default 1: one plain run)")


def add_sbatch_arguments(groups: dict[str, argparse._ArgumentGroup]) -> None:
    slurm = groups["Slurm"]
    slurm.add_argument("--account", help="sbatch --account (default: the cluster's)")
    slurm.add_argument("--partition", help="sbatch --partition (default: the cluster's)")
    slurm.add_argument("--time", default="01:00:00", help="HH:MM:SS (default 01:00:00)")
    slurm.add_argument("--job-name", help="sbatch --job-name (default: nvrx-qual-<run-id>)")
    slurm.add_argument("--container-image", help="pyxis/enroot image for srun --container-image (default: none)")
    slurm.add_argument("--container-mounts",
                       help="srun --container-mounts; shared storage must be mounted (default: none)")
    slurm.add_argument("--container-workdir", help="srun --container-workdir (default: none)")
    groups["output"].add_argument("--output", help="also write the script to this new file (default: none)")


DRY_RUN_SUFFIX = "dry-run"


def dry_run_spec(spec: specmod.RunSpec, flags: Mapping[str, object], env: Mapping[str, str]) -> specmod.RunSpec:
    """A dry run whose run ID was generated (no --run-id, no NVRX_RUN_ID) gets one per scenario
    instead, `<workload>-<fault>[-<moment>]-dry-run`, which the next such dry run replaces (a dry
    run's run.json is the one prepare() replaces): `plan` does not leave a directory per call.
    The generated ID is `<workload>-<scenario>-<time>-<random>`: its last two parts give way."""
    if flags.get("run_id") or env.get(specmod.KNOBS_BY_FIELD["run_id"].env or ""):
        return spec
    return dataclasses.replace(spec, run_id=f"{spec.run_id.rsplit('-', 2)[0]}-{DRY_RUN_SUFFIX}")


def plan(args: argparse.Namespace, extra: tuple[str, ...]) -> int:
    try:
        flags = spec_flags(args)
        spec, target, restored = resolve_spec(flags, extra)
        p = planmod.build(dry_run_spec(spec, flags, os.environ), target)
    except (SpecError, nvrx.NvrxError) as exc:
        return refused(exc)
    return dry_run(p, restored)


def dry_run(p: planmod.Plan, restored: int) -> int:
    """Create the run's directories and run.json, print the exact commands and what the
    baseline adds; launch nothing."""
    try:
        baseline.choose(p.spec)  # a --baseline PATH that is no uninterrupted run is refused here too
        prepare(p, dry_run=True)
    except SpecError as exc:
        return refused(exc)
    release(p.layout)
    if restored:
        print(f"# resuming: checkpoint iteration {restored} in {p.layout.checkpoints}; "
              f"the fault waits for a newer one")
    print(p.render(), end="")
    print(f"# {baseline.cost(p, baseline.choose(p.spec))}")
    again = (" (the next dry run of this scenario without --run-id replaces it)"
             if p.spec.run_id.endswith(f"-{DRY_RUN_SUFFIX}") else "")
    print(f"# dry run: nothing launched. run.json: {p.layout.run_json}{again}")
    return ExitStatus.QUALIFIED


def run(args: argparse.Namespace, extra: tuple[str, ...]) -> int:
    env = dict(os.environ)
    if args.deadline is not None and not specmod.seconds_ok(args.deadline):
        return refused(SpecError([f"--deadline={args.deadline!r} must be a number of seconds above 0 and at most "
                                  f"{specmod.MAX_SECONDS:g} (leave it out for the default derived from the timeouts)"]))
    if args.repeat != 1:  # --repeat 1 is exactly one plain run, as without the flag
        from harness.cli import repeat

        return repeat.run_repeats(spec_flags(args), extra, env, args.repeat, progress=not args.quiet,
                                  deadline_s=args.deadline)
    try:
        flags = spec_flags(args)
        spec, target, restored = resolve_spec(flags, extra, env)
        if spec.dry_run:  # --dry-run 1 or NVRX_DRY_RUN=1
            return dry_run(planmod.build(dry_run_spec(spec, flags, env), target), restored)
        p = planmod.build(spec, target)
        return one_run(p, progress=not args.quiet, deadline_s=args.deadline)
    except (SpecError, nvrx.NvrxError) as exc:
        return refused(exc)


def one_run(p: planmod.Plan, *, progress: bool = True, deadline_s: float | None = None) -> int:
    """One planned run: raises SpecError (exit 2) when the machine cannot run it."""
    baseline.choose(p.spec)  # a --baseline PATH that is no uninterrupted run is refused before any launch
    runner.preflight(p, os.environ)
    print(terminal.announce(p), flush=True)
    out = sys.stdout if progress else None
    outcome = runner.execute_with_baseline(p, deadline_s=deadline_s, out=out)
    print(terminal.run_outcome(outcome), flush=True)
    return ExitStatus.of_verdict(outcome.verdict.qualified)


def sbatch(args: argparse.Namespace, extra: tuple[str, ...]) -> int:
    opts = sbatchmod.SbatchOptions(account=args.account, partition=args.partition, time=args.time,
                                   job_name=args.job_name, container_image=args.container_image,
                                   container_mounts=args.container_mounts, container_workdir=args.container_workdir)
    try:
        spec, target, _ = resolve_spec(spec_flags(args), extra, for_sbatch=True)
        p = planmod.build(spec, target, sbatch=True)
        python = ["uv", "run", "python"] if spec.uv else [spec.python]
        script = sbatchmod.render(p, opts, python)
        if args.output and os.path.exists(args.output):
            raise SpecError([f"--output {args.output} already exists: choose a new file name; "
                             "existing files are never overwritten"])
        prepare(p, dry_run=False)
    except (SpecError, nvrx.NvrxError) as exc:
        return refused(exc)
    script_path = p.layout.root / "sbatch.sh"
    try:
        atomic.write_text(script_path, script)  # never through a link
        if args.output:
            safeio.create_new(args.output, script)  # a file that appeared meanwhile is kept
    finally:
        release(p.layout)
    print(script, end="")
    print(f"# written to {script_path}; submit with: sbatch {script_path}", file=sys.stderr)
    return ExitStatus.QUALIFIED
