"""Every `--help` shows the defaults: a newcomer should not have to read the code to learn
what a run does when an option is left out."""

from __future__ import annotations

import argparse

import pytest

from harness import cli
from harness.spec import KNOBS

# RunSpec flags without a fixed default: they are detected, generated or absent unless given.
NO_FIXED_DEFAULT = {"megatron_path", "checkpoint_dir", "rdzv_endpoint", "nvrx_path", "python", "gpu_arch",
                    "monitor_interval", "workload_check_interval", "poll_interval", "step_time_ms", "nvrx_version"}
COMMANDS = ("plan", "run", "sbatch", "verify", "diagnose", "report")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def help_of(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_with_a_default_shows_it(command):
    parser = subparsers()[command]
    assert parser.formatter_class is cli.DefaultsHelpFormatter
    knobs = {k.field for k in KNOBS}
    for action in parser._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        text = parser._get_formatter()._get_help_string(action) % {"default": action.default}
        if action.dest in knobs and action.dest in NO_FIXED_DEFAULT:
            continue
        if action.dest in knobs or action.default not in (None, False):
            assert "default" in text, f"{command} {action.option_strings[0]}: {text!r}"


def test_run_help_names_the_workload_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for shown in ("(default: kill)", "(default: megatron)", "(default: megatron 100, reference 30, megatron-cpu 12)",
                  "(default: megatron setup:900,step:120,checkpointing:600, reference setup:60,step:10,checkpointing:10, "
                  "megatron-cpu setup:90,step:15,checkpointing:15)",
                  "(default: 1)", "(default 1: one plain run)"):
        assert shown in out, shown
