"""Every `--help` shows the defaults: a newcomer should not have to read the code to learn
what a run does when an option is left out."""

from __future__ import annotations

import argparse

import pytest

from harness import cli
from harness.plan.spec import KNOBS

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
        cli.main(["run", "--help-all"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for shown in ("(default: kill)", "(default: megatron)", "(default: megatron 100, megatron-cpu 12, megatron-bridge 12, reference 30)",
                  "(default: megatron setup:900,step:120,checkpointing:600, megatron-cpu setup:90,step:15,checkpointing:15, "
                  "megatron-bridge setup:90,step:15,checkpointing:15, reference setup:60,step:10,checkpointing:10)",
                  "(default: 1)", "(default 1: one plain run)"):
        assert shown in out, shown


GROUPS = ("what to run", "faults", "deadlines", "GPU and cluster", "output")


def _help(capsys, *argv, how: str = "--help-all") -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, how])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ("plan", "run", "sbatch"))
def test_spec_commands_group_their_options(command, capsys):
    """Every RunSpec option sits in one named group, never in a catch-all, and the groups come in
    the order of spec.HELP_GROUPS."""
    from harness.plan import spec

    out = _help(capsys, command)
    positions = [out.index(f"\n{title}:\n") for title in GROUPS]
    assert positions == sorted(positions)
    assert f"\n{spec.OTHER_GROUP}:" not in out
    assert [k.field for k in KNOBS if spec.knob_group(k) == spec.OTHER_GROUP] == []
    if command == "sbatch":
        assert "\nSlurm:\n" in out and out.index("\nSlurm:\n") < out.index("\noutput:\n")


def test_run_help_lists_every_deadline_profile(capsys):
    from harness.plan.spec import DEADLINE_PROFILES

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

    from harness.plan.spec import DEADLINE_PROFILES

    usage = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text(encoding="utf-8")
    assert [name for name in DEADLINE_PROFILES if f"| `{name}` |" not in usage] == []


# ---------------------------------------------------------------- two screens, every option reachable

ALL_COMMANDS = (*COMMANDS, "kit")
SCREENS = 120  # two screens of a terminal


def _options(command: str) -> dict[str, argparse.Action]:
    """Every option of a command by its long flag (the --help actions aside)."""
    parser = subparsers()[command]
    return {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)}  # -h, --help-all, --help-group


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_every_help_fits_on_two_screens(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # a narrow terminal does not lengthen it: the width is fixed
    out = _help(capsys, command, how="--help")
    assert len(out.splitlines()) <= SCREENS, f"nvrx-qual {command} --help: {len(out.splitlines())} lines"
    assert "(options by group: --help)" not in out  # the old usage line, which pointed at itself


def test_the_top_level_help_fits_too(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert len(capsys.readouterr().out.splitlines()) <= SCREENS


def _entry(out: str, flag: str) -> str:
    """The text of one option's entry in a help listing (its lines, joined)."""
    lines = out.splitlines()  # an entry starts at the options' indent, its wrapped lines further right
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {flag}")
                 and line[2 + len(flag):][:1] in ("", " ", ","))
    entry = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        entry.append(line)
    return " ".join(" ".join(entry).split())


@pytest.mark.parametrize("command", ("plan", "run", "sbatch"))
def test_every_option_is_reachable_the_documented_way(command, capsys):
    """--help names every option: the common ones with their text, the others under their group;
    --help-group GROUP shows each of those with its text, and --help-all every one."""
    from harness.cli import COMMON_OPTIONS, group_slug

    short = _help(capsys, command, how="--help")
    assert f"nvrx-qual {command} --help-group GROUP" in short and "--help-all" in short
    everything = _help(capsys, command)
    parser = subparsers()[command]
    group_of = {a.dest: g.title for g in parser._action_groups for a in g._group_actions}
    for flag, action in _options(command).items():
        assert flag in short, f"{command} --help does not name {flag}"
        full = _entry(everything, flag)
        assert " ".join(action.help.split()[:3]) in full, (flag, full)
        if action.dest in COMMON_OPTIONS[command]:
            assert _entry(short, flag) == full, flag  # the same entry, defaults and all
        else:
            group = _help(capsys, command, "--help-group", how=group_slug(group_of[action.dest]))
            assert _entry(group, flag) == full, (flag, group_of[action.dest])


def test_an_unknown_help_group_names_the_groups(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--help-group", "fault"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--help-group fault: no such group; the groups: what-to-run, faults, deadlines" in err


def test_the_long_explanations_are_in_the_docs_the_help_links():
    """The help of --fault and --fault-at names every kind and moment and links the page that
    explains each; that page has a row for every one of them."""
    from pathlib import Path

    from harness.vocab.faults import FAULT_KINDS, FAULT_MOMENTS
    from harness.plan.spec import KNOBS_BY_FIELD

    root = Path(__file__).resolve().parent.parent
    for field, names in (("fault", FAULT_KINDS), ("fault_at", FAULT_MOMENTS)):
        text = KNOBS_BY_FIELD[field].help
        page = root / next(w for w in text.replace(";", " ").split() if w.startswith("docs/"))
        doc = page.read_text(encoding="utf-8")
        assert len(text) < 300, field  # short: the explanations are on the page
        assert all(name in text and f"| `{name}`" in doc for name in names), field
    assert "docs/usage.md#options" in _help_text(["run", "--help"])
    usage = (root / "docs" / "usage.md").read_text(encoding="utf-8")
    assert "\n## Options\n" in usage and "--help-group" in usage and "--help-all" in usage


def _help_text(argv: list[str]) -> str:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), pytest.raises(SystemExit):
        cli.main(argv)
    return " ".join(buffer.getvalue().split())


def test_faults_help_says_what_1_runs():
    """--faults 1 (the default) is one plain --fault run, not a campaign of one: its help and the
    campaign docs say so, instead of only "2 or more"."""
    from pathlib import Path

    text = _help_text(["run", "--help"])
    entry = text[text.index("--faults FAULTS"):text.index("--seed SEED")]
    assert "1 is the one --fault" in entry and "2 or more is a campaign" in entry
    campaigns = (Path(__file__).resolve().parent.parent / "docs" / "campaigns.md").read_text(encoding="utf-8")
    assert "`--faults 1`, the default, is no campaign" in " ".join(campaigns.split())
