"""`nvrx-qual plan | run [--repeat N] | sbatch | verify | diagnose | report | kit`.

Exit status (harness.exitcodes): 0 qualified (or plan written), 1 a criterion failed, 2 input
refused or unreadable (the message names the value and the fix), 3 an internal error of the suite
(one line; the traceback in a log file, or on stderr under --debug), 128+N stopped by signal N.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Callable, Mapping, Sequence

from harness import __version__, atomic, discovery, nvrx, ports, safeio, spec as specmod
from harness import plan as planmod
from harness.exitcodes import ExitStatus, guarded
from harness.spec import RunSpec, SpecError

EXIT_QUALIFIED, EXIT_FAILED, EXIT_REFUSED = ExitStatus.QUALIFIED, ExitStatus.NOT_QUALIFIED, ExitStatus.REFUSED


def _split_workload_args(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """Everything after the first `--` is appended to the workload's own command line."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], tuple(argv[i + 1:])
    return argv, ()


def _declared(field: str, flags: Mapping[str, object], env: Mapping[str, str]) -> object:
    """A knob's value as given (flag, else environment), parsed; None when not given."""
    knob = specmod.KNOBS_BY_FIELD[field]
    given = flags.get(field)
    if given is None and knob.env and env.get(knob.env, "") != "":
        given = env[knob.env]
    if isinstance(given, str):
        try:
            return knob.parse(given)
        except (ValueError, TypeError):
            return None  # from_sources reports it
    return given


def detected_defaults(flags: dict, env: dict, *,
                      probe: Callable[[list[str]], discovery.WorkerImports] = discovery.worker_imports) -> dict:
    """Facts of this machine that feed RunSpec defaults (declared values always win).
    Transformer Engine and apex are imported in the interpreter that will run the workers
    (--python, or `uv run python`), only when one of them is not declared. Raises SpecError
    when that interpreter cannot tell."""
    workload = flags.get("workload") or env.get("NVRX_QUAL_WORKLOAD") or "megatron"
    uv = _declared("uv", flags, env)
    found = {"uv": discovery.uv_managed() if uv is None else uv}
    if workload != "megatron":
        return found
    found["gpu_arch"] = discovery.gpu_arch(discovery.nvidia_smi_gpus())
    te, apex = _declared("transformer_engine", flags, env), _declared("apex", flags, env)
    if te is None or apex is None:
        # --no-sync: asking must not install anything into the project environment
        python = (["uv", "run", "--no-sync", "python"] if found["uv"]
                  else [str(_declared("python", flags, env) or sys.executable)])
        imports = probe(python)
        if imports.problem is not None:
            raise SpecError([f"could not ask the workers' interpreter whether Transformer Engine and apex import "
                             f"({imports.problem}): fix --python, or declare both with --transformer-engine 0|1 "
                             "--apex 0|1"])
        found["transformer_engine"], found["apex"] = imports.transformer_engine, imports.apex
    return found


def spec_flags(args: argparse.Namespace) -> dict:
    return {k.field: getattr(args, k.field, None) for k in specmod.KNOBS}


def resolve_spec(flags: Mapping[str, object], extra: tuple[str, ...] = (), env: Mapping[str, str] | None = None,
                 *, for_sbatch: bool = False) -> tuple[RunSpec, nvrx.NvrxTarget, int]:
    """Flags (strings as typed, or typed values) + environment -> validated RunSpec with
    ports chosen, its NVRx target and the restored iteration. Raises SpecError /
    NvrxError; creates nothing. The pytest fixtures build their runs through this too."""
    env = dict(os.environ if env is None else env)
    flags = dict(flags)
    spec = specmod.from_sources(flags, env, extra, detected_defaults(flags, env))
    target = nvrx.resolve(spec.nvrx_version, spec.nvrx_path)
    rdzv_port, log_port = ports.free_ports(2)
    if (spec.nnodes == 1 or spec.local_nodes) and not spec.rdzv_endpoint:
        spec = dataclasses.replace(spec, rdzv_endpoint=f"127.0.0.1:{rdzv_port}")
    if target.routes_logs and spec.log_server_port is None:
        spec = dataclasses.replace(spec, log_server_port=log_port)
    restored = specmod.validate(spec, needs_endpoint=not for_sbatch)
    return spec, target, restored


def _refused(exc: Exception) -> int:
    for line in str(exc).splitlines():
        print(f"nvrx-qual: error: {line}", file=sys.stderr)
    return EXIT_REFUSED


def cmd_plan(args: argparse.Namespace, extra: tuple[str, ...]) -> int:
    try:
        spec, target, restored = resolve_spec(spec_flags(args), extra)
        p = planmod.build(spec, target)
    except (SpecError, nvrx.NvrxError) as exc:
        return _refused(exc)
    return _dry_run(p, restored)


def _dry_run(p: planmod.Plan, restored: int) -> int:
    """Create the run's directories and run.json, print the exact commands; launch nothing."""
    from harness.prepare import prepare, release

    try:
        prepare(p, dry_run=True)
    except SpecError as exc:
        return _refused(exc)
    release(p.layout)
    if restored:
        print(f"# resuming: checkpoint iteration {restored} in {p.layout.checkpoints}; "
              f"the fault waits for a newer one")
    print(p.render(), end="")
    print(f"# dry run: nothing launched. run.json: {p.layout.run_json}")
    return EXIT_QUALIFIED


def cmd_run(args: argparse.Namespace, extra: tuple[str, ...]) -> int:
    from harness import runner

    env = dict(os.environ)
    if args.deadline is not None and not specmod.seconds_ok(args.deadline):
        return _refused(SpecError([f"--deadline={args.deadline!r} must be a number of seconds above 0 and at most "
                                   f"{specmod.MAX_SECONDS:g} (leave it out for the default derived from the timeouts)"]))
    if args.repeat != 1:  # --repeat 1 is exactly one plain run, as without the flag
        from harness import repeat

        return repeat.run_repeats(spec_flags(args), extra, env, args.repeat, progress=not args.quiet,
                                  deadline_s=args.deadline)
    try:
        spec, target, restored = resolve_spec(spec_flags(args), extra, env)
        p = planmod.build(spec, target)
        if spec.dry_run:  # --dry-run 1 or NVRX_DRY_RUN=1
            return _dry_run(p, restored)
        return runner.run(p, progress=not args.quiet, deadline_s=args.deadline)
    except (SpecError, nvrx.NvrxError) as exc:
        return _refused(exc)


def cmd_sbatch(args: argparse.Namespace, extra: tuple[str, ...]) -> int:
    from harness import sbatch
    from harness.prepare import prepare, release

    opts = sbatch.SbatchOptions(account=args.account, partition=args.partition, time=args.time,
                                job_name=args.job_name, container_image=args.container_image,
                                container_mounts=args.container_mounts, container_workdir=args.container_workdir)
    try:
        spec, target, _ = resolve_spec(spec_flags(args), extra, for_sbatch=True)
        p = planmod.build(spec, target, sbatch=True)
        python = ["uv", "run", "python"] if spec.uv else [spec.python]
        script = sbatch.render(p, opts, python)
        if args.output and os.path.exists(args.output):
            raise SpecError([f"--output {args.output} already exists: choose a new file name; "
                             "existing files are never overwritten"])
        prepare(p, dry_run=False)
    except (SpecError, nvrx.NvrxError) as exc:
        return _refused(exc)
    script_path = p.layout.root / "sbatch.sh"
    try:
        atomic.write_text(script_path, script)  # never through a link
        if args.output:
            safeio.create_new(args.output, script)  # a file that appeared meanwhile is kept
    finally:
        release(p.layout)
    print(script, end="")
    print(f"# written to {script_path}; submit with: sbatch {script_path}", file=sys.stderr)
    return EXIT_QUALIFIED


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, unless its help already says it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or not action.option_strings or action.default in (None, False)
                or action.default is argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def _shown(value: object) -> str:
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return ",".join(f"{k}:{v:g}" if isinstance(v, float) else f"{k}:{v}" for k, v in value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def knob_defaults(field: str) -> str | None:
    """What a RunSpec flag defaults to when neither it nor its environment name is given, per
    workload where they differ; None when there is no fixed default (detected, generated)."""
    defaults = {f.name: f.default for f in dataclasses.fields(RunSpec)}
    if field == "workload":
        return "megatron"
    base = defaults.get(field, dataclasses.MISSING)
    if base is dataclasses.MISSING or base is None or field == "python":
        return None
    by_workload = {w: {**specmod.DEADLINE_PROFILES.get(d.get("deadline_profile"), {}), **d}.get(field, base)
                   for w, d in specmod.DEFAULTS.items()}
    if len({_shown(v) for v in by_workload.values()}) == 1:
        return _shown(base)
    return ", ".join(f"{w} {_shown(v)}" for w, v in by_workload.items())


def _with_knob_defaults(parser: argparse.ArgumentParser) -> None:
    """The RunSpec flags default to None (so the environment can fill them): show the real default."""
    for action in parser._actions:
        knob = specmod.KNOBS_BY_FIELD.get(action.dest)
        shown = knob_defaults(action.dest) if knob is not None else None
        if shown is not None and "default" not in (action.help or ""):
            action.help = f"{action.help} (default: {shown})"


def _delegate(module: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    import importlib

    mod = importlib.import_module(module)
    return mod.add_arguments, mod.run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvrx-qual",
        description="Prove, with evidence, that a Megatron GPT job under NVRx ft_launcher recovers from a "
                    "dead or hung rank.",
        epilog="Exit status: 0 qualified, 1 a criterion failed, 2 input refused or unreadable, 3 internal error of "
               "nvrx-qual, 128+N stopped by signal N.",
        formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"nvrx-qual {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an internal error here instead of only in a log file")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_plan = sub.add_parser("plan", formatter_class=DefaultsHelpFormatter, help="validate, create the run directory, print the exact commands (dry run)",
                            description="Dry run: validates, creates the run's artifact directories, writes "
                                        "run.json and prints the exact commands. Allocates nothing. "
                                        "Workload arguments follow `--`.")
    specmod.add_arguments(p_plan)
    _with_knob_defaults(p_plan)
    p_plan.set_defaults(handler=cmd_plan)

    p_run = sub.add_parser("run", formatter_class=DefaultsHelpFormatter, help="plan, launch, watch and verify one scenario",
                           description="Plans, launches, watches and verifies one scenario (N times with "
                                       "--repeat N); arguments after `--` are appended to the workload's command "
                                       "line (e.g. -- --no-load-optim). NVRX_DRY_RUN=1 makes it a dry run.")
    specmod.add_arguments(p_run)
    _with_knob_defaults(p_run)
    p_run.add_argument("--quiet", action="store_true", help="no progress lines while the job runs")
    p_run.add_argument("--deadline", type=float, default=None,
                       help="seconds before the whole job is stopped (default: derived from the section timeouts)")
    p_run.add_argument("--repeat", type=int, default=1, metavar="N",
                       help="run the same scenario N times, each with a fresh run ID <run-id>-r<i>, then print the "
                            "pass rate per criterion and p50/p95/max of every latency and write them to "
                            "WORK_DIR/repeats/<run-id>/summary.{json,md} (default 1: one plain run)")
    p_run.set_defaults(handler=cmd_run)

    p_sb = sub.add_parser("sbatch", formatter_class=DefaultsHelpFormatter, help="render a complete sbatch script for this run",
                          description="Validates, creates the run directory and renders an sbatch script in the "
                                      "Slurm guide's shape; written to RUN_DIR/sbatch.sh and printed.")
    specmod.add_arguments(p_sb)
    _with_knob_defaults(p_sb)
    slurm = p_sb.add_argument_group("Slurm")
    slurm.add_argument("--account")
    slurm.add_argument("--partition")
    slurm.add_argument("--time", default="01:00:00", help="HH:MM:SS (default 01:00:00)")
    slurm.add_argument("--job-name")
    slurm.add_argument("--container-image", help="pyxis/enroot image for srun --container-image")
    slurm.add_argument("--container-mounts", help="srun --container-mounts (shared storage must be mounted)")
    slurm.add_argument("--container-workdir")
    slurm.add_argument("--output", help="also write the script to this new file")
    p_sb.set_defaults(handler=cmd_sbatch)

    for name, module, text in (("verify", "harness.verify", "check the five recovery criteria of a run directory"),
                               ("diagnose", "harness.diagnose", "find the root cause of a failed run across ranks"),
                               ("report", "harness.summary", "one Markdown summary over several run directories"),
                               ("kit", "harness.kit", "assemble an offline GPU kit: wheels, Megatron-LM's three "
                                                      "entrypoint files and a script that qualifies one GPU")):
        add, run = _delegate(module)
        p_sub = sub.add_parser(name, help=text, formatter_class=DefaultsHelpFormatter)
        add(p_sub)
        p_sub.set_defaults(handler=lambda a, _extra, _run=run: _run(a))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(argv) and argv[0] == "--debug"
    if debug:
        argv = argv[1:]
    own, extra = _split_workload_args(argv)
    if own and own[0] in ("verify", "diagnose", "report", "kit"):
        own, extra = argv, ()
    args = build_parser().parse_args((["--debug"] if debug else []) + own)
    return guarded(lambda: args.handler(args, extra), "nvrx-qual", debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
