"""`nvrx-qual plan | run [--repeat N] | sbatch | verify | diagnose | report | kit`.

The command layer: every argparse, every line printed to the terminal and every exit status
of the suite lives in this package (one module per command); the library under harness/
returns values and raises, and takes a callback or a TextIO where it reports progress.
Nothing outside this package imports it.

Exit status (harness.exitcodes.ExitStatus): 0 qualified (or plan written), 1 a criterion
failed, 2 input refused or unreadable (the message names the value and the fix), 3 an internal
error of the suite (one line; the traceback in a log file, or on stderr under --debug), 128+N
stopped by signal N.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from typing import Sequence

from harness import __version__, workloads
from harness import spec as specmod
from harness.cli import diagnose as cmd_diagnose
from harness.cli import kit as cmd_kit
from harness.cli import report as cmd_report
from harness.cli import run as cmd_run
from harness.cli import verify as cmd_verify
from harness.cli.guard import guarded
from harness.spec import RunSpec

SPEC_USAGE = "nvrx-qual {command} [OPTIONS] [-- WORKLOAD_ARGS...]   (options by group: --help)"

# Commands whose arguments are all their own (no `--` workload arguments to split off).
WHOLE_ARGV = ("verify", "diagnose", "report", "kit")


def _split_workload_args(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """Everything after the first `--` is appended to the workload's own command line."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], tuple(argv[i + 1:])
    return argv, ()


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
        return workloads.DEFAULT
    base = defaults.get(field, dataclasses.MISSING)
    if base is dataclasses.MISSING or base is None or field == "python":
        return None
    by_workload = {w: {**specmod.DEADLINE_PROFILES.get(d.get("deadline_profile"), {}), **d}.get(field, base)
                   for w, d in ((n, workloads.get(n).defaults) for n in workloads.names())}
    if len({_shown(v) for v in by_workload.values()}) == 1:
        return _shown(base)
    return ", ".join(f"{w} {_shown(v)}" for w, v in by_workload.items())


def add_spec_arguments(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The RunSpec flags (one per KNOBS row), in the --help groups of spec.HELP_GROUPS; each
    defaults to None so that 'not given' falls through to the environment, and --help shows the
    real default. A yes/no knob is also a bare flag (`--dry-run` is `--dry-run 1`). Returns the
    groups by title, for the command's own options."""
    titles = [*specmod.HELP_GROUPS, specmod.OTHER_GROUP]
    groups = {title: parser.add_argument_group(title) for title in titles}
    groups["what to run"].description = "flags win over the environment names shown as [env NAME]"
    for knob in specmod.KNOBS:
        helptext = knob.help + (f" [env {knob.env}]" if knob.env else "")
        shown = knob_defaults(knob.field)
        if shown is not None and "default" not in helptext:
            helptext = f"{helptext} (default: {shown})"
        yes_no = knob.parse is specmod.parse_bool
        flag_like = {"nargs": "?", "const": "1", "metavar": "0|1"} if yes_no else {"metavar": knob.field.upper()}
        groups[specmod.knob_group(knob)].add_argument(knob.flag, dest=knob.field, default=None, help=helptext,
                                                      **flag_like)
    return groups


def suggestion(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """'unknown option --falt; did you mean --fault?' for the first unknown option (difflib)."""
    options = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    first = next((u for u in unknown if u.startswith("-")), unknown[0] if unknown else "")
    name = first.split("=", 1)[0]
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if not name.startswith("-"):
        return f"unexpected argument {first!r} (workload arguments go after `--`)"
    hint = f"; did you mean {close[0]}?" if close else f"; see {parser.prog} --help"
    return f"unknown option {name}{hint}"


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

    p_plan = sub.add_parser("plan", usage=SPEC_USAGE.format(command='plan'), formatter_class=DefaultsHelpFormatter, help="validate, create the run directory, print the exact commands (dry run)",
                            description="Dry run: validates, creates the run's artifact directories, writes "
                                        "run.json and prints the exact commands. Allocates nothing. "
                                        "Workload arguments follow `--`.")
    add_spec_arguments(p_plan)
    p_plan.set_defaults(handler=cmd_run.plan)

    p_run = sub.add_parser("run", usage=SPEC_USAGE.format(command='run'), formatter_class=DefaultsHelpFormatter, help="plan, launch, watch and verify one scenario",
                           description="Plans, launches, watches and verifies one scenario (N times with "
                                       "--repeat N); arguments after `--` are appended to the workload's command "
                                       "line (e.g. -- --no-load-optim). NVRX_DRY_RUN=1 makes it a dry run.")
    cmd_run.add_run_arguments(add_spec_arguments(p_run))
    p_run.set_defaults(handler=cmd_run.run)

    p_sb = sub.add_parser("sbatch", usage=SPEC_USAGE.format(command='sbatch'), formatter_class=DefaultsHelpFormatter, help="render a complete sbatch script for this run",
                          description="Validates, creates the run directory and renders an sbatch script in the "
                                      "Slurm guide's shape; written to RUN_DIR/sbatch.sh and printed.")
    cmd_run.add_sbatch_arguments(add_spec_arguments(p_sb))
    p_sb.set_defaults(handler=cmd_run.sbatch)

    for name, module, text in (("verify", cmd_verify, "check the recovery criteria of a run directory"),
                               ("diagnose", cmd_diagnose, "find the root cause of a failed run across ranks"),
                               ("report", cmd_report, "one Markdown summary over several run directories"),
                               ("kit", cmd_kit, "assemble an offline GPU kit: wheels, Megatron-LM's three "
                                                "entrypoint files and a script that qualifies one GPU")):
        p_sub = sub.add_parser(name, help=text, formatter_class=DefaultsHelpFormatter)
        module.add_arguments(p_sub)
        p_sub.set_defaults(handler=lambda a, _extra, _run=module.run: _run(a))
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser | None:
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return action.choices.get(name) if action is not None and name else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(argv) and argv[0] == "--debug"
    if debug:
        argv = argv[1:]
    own, extra = _split_workload_args(argv)
    if own and own[0] in WHOLE_ARGV:
        own, extra = argv, ()
    parser = build_parser()
    args, unknown = parser.parse_known_args((["--debug"] if debug else []) + own)
    if unknown:
        command = _subparser(parser, getattr(args, "command", None)) or parser
        command.error(suggestion(command, unknown))  # exit 2, with the command's own usage
    return guarded(lambda: args.handler(args, extra), "nvrx-qual", debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
