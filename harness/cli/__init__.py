"""`nvrx-qual plan | run [--repeat N] | sbatch | verify | diagnose | report | kit`.

The command layer: every argparse, every line printed to the terminal and every exit status
of the suite lives in this package (one module per command); the library under harness/
returns values and raises, and takes a callback or a TextIO where it reports progress.
Nothing outside this package imports it.

Exit status (harness.vocab.exitcodes.ExitStatus): 0 qualified (or plan written), 1 a criterion
failed, 2 input refused or unreadable (the message names the value and the fix), 3 an internal
error of the suite (one line; the traceback in a log file, or on stderr under --debug), 128+N
stopped by signal N.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
import textwrap
from typing import Sequence

from harness import __version__, workloads
from harness.plan import spec as specmod
from harness.cli import diagnose as cmd_diagnose
from harness.cli import kit as cmd_kit
from harness.cli import report as cmd_report
from harness.cli import run as cmd_run
from harness.cli import verify as cmd_verify
from harness.cli.guard import guarded
from harness.plan.spec import RunSpec

SPEC_USAGE = "nvrx-qual {command} [OPTIONS] [-- WORKLOAD_ARGS...]"

# What `--help` of plan / run / sbatch shows in full, in this order (argparse dests); every
# other option is named under its group, and shown with its text by --help-group GROUP or
# --help-all (docs/usage.md#options). The rest of the help of an option lives in docs/.
COMMON_OPTIONS = {
    "plan": ("workload", "fault", "fault_at", "fault_rank", "faults", "seed", "train_iters", "nvrx_path",
             "baseline", "nnodes", "gpus_per_node", "work_dir", "run_id"),
    "run": ("workload", "fault", "fault_at", "fault_rank", "faults", "seed", "train_iters", "nvrx_path",
            "baseline", "repeat", "dry_run", "nnodes", "gpus_per_node", "deadline", "work_dir", "run_id", "quiet"),
    "sbatch": ("account", "partition", "time", "job_name", "container_image", "container_mounts",
               "container_workdir", "output", "workload", "megatron_path", "fault", "fault_at", "fault_rank",
               "nnodes", "gpus_per_node", "work_dir", "run_id"),
}
HELP_WIDTH = 100  # the --help text's width, whatever the terminal (COLUMNS) says: its length is tested

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

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 30, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, width or HELP_WIDTH)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or not action.option_strings or action.default in (None, False)
                or action.default is argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def group_slug(title: str) -> str:
    """A --help-group name: 'GPU and cluster' -> 'gpu-and-cluster'."""
    return title.lower().replace(" ", "-")


class GroupedHelpParser(argparse.ArgumentParser):
    """A command whose --help fits on two screens: the options of `common` (dests) in full, every
    other one by name under its group; --help-group GROUP shows one group in full and --help-all
    every option. Without `common`, --help is the whole help, as argparse writes it."""

    common: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def enable_grouped_help(self, common: Sequence[str]) -> None:
        known = {a.dest for a in self._actions}
        missing = [c for c in common if c not in known]
        if missing:
            raise ValueError(f"{self.prog}: COMMON_OPTIONS names no option of it: {missing}")
        self.common = tuple(common)
        titles = ", ".join(group_slug(g.title) for g in self._option_groups())
        self.add_argument("--help-all", action=_HelpAll, help="show every option, by group, and exit")
        self.add_argument("--help-group", action=_HelpGroup, metavar="GROUP",
                          help=f"show the options of one group and exit: {titles}")

    def _option_groups(self) -> list[argparse._ArgumentGroup]:
        """The named groups that hold options (not the positionals, not the one of -h)."""
        return [g for g in self._action_groups
                if g._group_actions and g.title not in ("positional arguments", "options", "optional arguments")]

    def _helpers(self) -> list[argparse.Action]:
        return [a for a in self._actions if isinstance(a, argparse._HelpAction)]  # -h, --help-all, --help-group

    def format_help(self) -> str:
        if not self.common:
            return super().format_help()
        by_dest = {a.dest: a for a in self._actions}
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        formatter.start_section("common options")
        formatter.add_text("flags win over the environment names shown as [env NAME]")
        formatter.add_arguments([*self._helpers(), *(by_dest[d] for d in self.common)])
        formatter.end_section()
        head = formatter.format_help()
        rest = ["", "more options, by group:"]
        rest += textwrap.wrap(f"{self.prog} --help-group GROUP shows one group with what each option means, "
                              f"--help-all every option; the long explanations: docs/usage.md#options", HELP_WIDTH,
                              initial_indent="  ", subsequent_indent="  ")
        width = max(len(group_slug(g.title)) for g in self._option_groups()) + 2
        for group in self._option_groups():
            flags = [a.option_strings[-1] for a in group._group_actions
                     if a.option_strings and a.dest not in self.common and a not in self._helpers()]
            if flags:
                rest += textwrap.wrap(", ".join(flags), HELP_WIDTH, initial_indent=f"  {group_slug(group.title):<{width}}",
                                      subsequent_indent=" " * (width + 2), break_on_hyphens=False)
        epilog = f"\n{self.epilog}\n" if self.epilog else ""
        return head + "\n".join(rest) + "\n" + epilog

    def format_help_all(self) -> str:
        return super().format_help()

    def format_help_group(self, name: str) -> str | None:
        """The help of one group (by its slug or title), None for a group it does not have."""
        groups = {group_slug(g.title): g for g in self._option_groups()}
        group = groups.get(group_slug(name))
        if group is None:
            return None
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.start_section(group.title)
        formatter.add_text(group.description)
        formatter.add_arguments(group._group_actions)
        formatter.end_section()
        return formatter.format_help()


class _HelpAll(argparse._HelpAction):
    """--help-all: argparse's whole help (every group, every option)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        argparse.Action.__init__(self, option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(parser.format_help_all(), sys.stdout)
        parser.exit()


class _HelpGroup(argparse._HelpAction):
    """--help-group GROUP: one group's options with their text and defaults."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None, metavar=None):
        argparse.Action.__init__(self, option_strings=option_strings, dest=dest, default=default, nargs=1, help=help,
                                 metavar=metavar)

    def __call__(self, parser, namespace, values, option_string=None):
        text = parser.format_help_group(values[0])
        if text is None:
            names = ", ".join(group_slug(g.title) for g in parser._option_groups())
            parser.error(f"--help-group {values[0]}: no such group; the groups: {names}")
        parser._print_message(text, sys.stdout)
        parser.exit()


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
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=GroupedHelpParser)

    p_plan = sub.add_parser("plan", usage=SPEC_USAGE.format(command='plan'), formatter_class=DefaultsHelpFormatter, help="validate, create the run directory, print the exact commands (dry run)",
                            description="Dry run: validates, creates the run's artifact directories, writes "
                                        "run.json and prints the exact commands. Allocates nothing. "
                                        "Workload arguments follow `--`.")
    add_spec_arguments(p_plan)
    p_plan.enable_grouped_help(COMMON_OPTIONS["plan"])
    p_plan.set_defaults(handler=cmd_run.plan)

    p_run = sub.add_parser("run", usage=SPEC_USAGE.format(command='run'), formatter_class=DefaultsHelpFormatter, help="plan, launch, watch and verify one scenario",
                           description="Plans, launches, watches and verifies one scenario (N times with "
                                       "--repeat N); arguments after `--` are appended to the workload's command "
                                       "line (e.g. -- --no-load-optim). NVRX_DRY_RUN=1 makes it a dry run.")
    cmd_run.add_run_arguments(add_spec_arguments(p_run))
    p_run.enable_grouped_help(COMMON_OPTIONS["run"])
    p_run.set_defaults(handler=cmd_run.run)

    p_sb = sub.add_parser("sbatch", usage=SPEC_USAGE.format(command='sbatch'), formatter_class=DefaultsHelpFormatter, help="render a complete sbatch script for this run",
                          description="Validates, creates the run directory and renders an sbatch script in the "
                                      "Slurm guide's shape; written to RUN_DIR/sbatch.sh and printed.")
    cmd_run.add_sbatch_arguments(add_spec_arguments(p_sb))
    p_sb.enable_grouped_help(COMMON_OPTIONS["sbatch"])
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
