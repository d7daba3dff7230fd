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
    for shown in ("(default: kill)", "(default: megatron)", "(default: megatron 100, megatron-cpu 12, reference 30)",
                  "(default: megatron setup:900,step:120,checkpointing:600, megatron-cpu setup:90,step:15,checkpointing:15, "
                  "reference setup:60,step:10,checkpointing:10)",
                  "(default: 1)", "(default 1: one plain run)"):
        assert shown in out, shown


GROUPS = ("what to run", "faults", "deadlines", "GPU and cluster", "output")


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ("plan", "run", "sbatch"))
def test_spec_commands_group_their_options(command, capsys):
    """Every RunSpec option sits in one named group, never in a catch-all, and the groups come in
    the order of spec.HELP_GROUPS."""
    from harness import spec

    out = _help(capsys, command)
    positions = [out.index(f"\n{title}:\n") for title in GROUPS]
    assert positions == sorted(positions)
    assert f"\n{spec.OTHER_GROUP}:" not in out
    assert [k.field for k in KNOBS if spec.knob_group(k) == spec.OTHER_GROUP] == []
    if command == "sbatch":
        assert "\nSlurm:\n" in out and out.index("\nSlurm:\n") < out.index("\noutput:\n")


def test_run_help_lists_every_deadline_profile(capsys):
    from harness.spec import DEADLINE_PROFILES

    out = " ".join(_help(capsys, "run").split())
    for name in DEADLINE_PROFILES:
        assert f"{name} (setup:" in out, name


@pytest.mark.parametrize("argv, expected", [
    (["run", "--falt", "kill"], "unknown option --falt; did you mean --fault?"),
    (["plan", "--workload=reference", "--deadline-profle=short"], "did you mean --deadline-profile?"),
    (["plan", "--zzzz"], "unknown option --zzzz; see nvrx-qual plan --help"),
    (["verify", "RUN", "--no-wirte"], "did you mean --no-write?"),
])
def test_an_unknown_option_is_answered_with_the_closest_known_one(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and f"nvrx-qual {argv[0]}" in err


def test_dry_run_is_a_flag_and_still_takes_a_value(tmp_path, capsys):
    base = ["plan", "--workload", "reference", "--work-dir", str(tmp_path)]
    parser = cli.build_parser()
    assert parser.parse_known_args(["run", "--dry-run", "--fault", "hang"])[0].dry_run == "1"
    assert parser.parse_known_args(["run", "--dry-run", "0"])[0].dry_run == "0"
    assert parser.parse_known_args(["run", "--local-nodes"])[0].local_nodes == "1"
    assert cli.main([*base, "--run-id", "flag", "--dry-run"]) == 0
    assert "# dry run: nothing launched" in capsys.readouterr().out


def test_the_docs_list_every_deadline_profile():
    from pathlib import Path

    from harness.spec import DEADLINE_PROFILES

    usage = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text(encoding="utf-8")
    assert [name for name in DEADLINE_PROFILES if f"| `{name}` |" not in usage] == []
