"""Values rendered into the batch script can never become shell lines or shell variables.

A newline in --account, --partition, --job-name or in the work dir (through the #SBATCH
--output line) would start a new line of sbatch.sh (and sbatch stops reading #SBATCH lines
there); a run ID holding the planner's placeholder text would be expanded as a shell variable
on the srun line. Each is refused before anything is created; what sbatch can read is quoted."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness import cli

BASE = ["sbatch", "--workload", "reference", "--nvrx-version", "0.7.0", "--nnodes", "2", "--gpus-per-node", "1",
        "--assume-shared-storage", "1"]


def sbatch(tmp_path: Path, *extra: str, work: Path | None = None, run_id: str = "r1") -> list[str]:
    return [*BASE, "--work-dir", str(work or tmp_path / "work"), "--run-id", run_id, *extra]


@pytest.mark.parametrize("flag", ["--account", "--partition", "--job-name", "--container-image",
                                  "--container-mounts", "--container-workdir"])
@pytest.mark.parametrize("evil", ["a\ntouch /tmp/nvrx-qual-pwned", "a\rb", "a\x00b", "a\x1b[2Jb", "a\x85b"])
def test_a_control_character_in_an_option_is_refused_and_nothing_is_created(flag, evil, tmp_path, clean_spec_env,
                                                                               capsys):
    assert cli.main(sbatch(tmp_path, flag, evil)) == 2
    err = capsys.readouterr().err
    assert flag in err and "control character" in err, err
    assert not (tmp_path / "work").exists()


def test_a_newline_in_the_work_dir_is_refused(tmp_path, clean_spec_env, capsys):
    work = tmp_path / "w\ntouch x"
    assert cli.main(sbatch(tmp_path, work=work)) == 2
    assert "control character" in capsys.readouterr().err
    assert not work.exists()


def test_a_newline_in_a_workload_argument_is_refused(tmp_path, clean_spec_env, capsys):
    assert cli.main([*sbatch(tmp_path), "--", "--seed", "1\nid"]) == 2
    assert "control character" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["plan", "sbatch"])
def test_a_run_id_holding_the_placeholder_text_is_refused(command, tmp_path, clean_spec_env, capsys):
    argv = sbatch(tmp_path, run_id="x__NVRXQ_VAR_HOME__")
    argv[0] = command
    if command == "plan":
        argv += ["--rdzv-endpoint", "node1:29400"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "__NVRXQ_VAR_" in err and "reserves" in err, err
    assert not (tmp_path / "work" / "runs").exists()


def test_a_container_flag_holding_the_placeholder_text_is_refused(tmp_path, clean_spec_env, capsys):
    assert cli.main(sbatch(tmp_path, "--container-mounts", "/a:__NVRXQ_VAR_HOME__")) == 2
    assert "--container-mounts" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--account", "--partition", "--job-name"])
@pytest.mark.parametrize("value", ['a"b', "a\\b"])
def test_what_an_sbatch_line_cannot_carry_is_refused(flag, value, tmp_path, clean_spec_env, capsys):
    assert cli.main(sbatch(tmp_path, flag, value)) == 2
    assert flag in capsys.readouterr().err


def test_spaces_and_percent_are_quoted_for_sbatch_and_the_shell(tmp_path, clean_spec_env, capsys):
    work = tmp_path / "my work 100%"
    assert cli.main(sbatch(tmp_path, "--job-name", "my job", "--account", "team $HOME", work=work)) == 0
    script = (work / "runs" / "r1" / "sbatch.sh").read_text()
    logs = f"{work}/runs/r1/logs".replace("%", "%%")
    assert f'#SBATCH --output="{logs}/slurm-%x-%j.out"' in script
    assert f'#SBATCH --error="{logs}/slurm-%x-%j.err"' in script
    assert '#SBATCH --job-name="my job"' in script and '#SBATCH --account="team $HOME"' in script
    # every #SBATCH line comes before the first command, and each is one line
    header = script.split("\n\n", 1)[0].splitlines()
    assert all(line.startswith("#") for line in header)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    # the shell sees the work dir as one word
    assert re.search(r"^RUN_DIR='[^'\n]*my work 100%/runs/r1'$", script, re.M), script


def test_plain_values_stay_bare_as_in_the_slurm_guide(tmp_path, clean_spec_env, capsys):
    assert cli.main(sbatch(tmp_path, "--account", "acct", "--partition", "batch")) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --account=acct\n#SBATCH --partition=batch\n" in script


def test_local_nodes_make_no_batch_script(tmp_path, clean_spec_env, capsys):
    assert cli.main(sbatch(tmp_path, "--local-nodes", "1")) == 2
    assert "--local-nodes" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


def _marker_check(script: str) -> str:
    """The script's lines from `RUN_DIR=` to the blank line after them: its check for markers."""
    start = script.index("\nRUN_DIR=") + 1
    return script[start:script.index("\n\n", start)] + "\n"


@pytest.mark.parametrize("name,refused", [("fault_injected.json", True), ("fault_injected.2.json", True),
                                          ("fault_injected.37.json", True), ("fault_injected.99.json", True),
                                          ("fault_injected.1.json", False), ("fault_injected.100.json", False),
                                          ("fault_injected.bak.json", False), (None, False)])
def test_the_batch_script_refuses_a_run_dir_holding_any_marker(name, refused, tmp_path, clean_spec_env, capsys):
    """Every marker the layout allows (fault 1's and fault_injected.<2..99>.json, layout.marker_index)
    makes the batch script stop before launching: a second fault's marker left by an earlier run would
    keep that fault from being injected. Other names do not."""
    from harness.vocab.layout import marker_index

    assert cli.main(sbatch(tmp_path)) == 0
    script = (tmp_path / "work" / "runs" / "r1" / "sbatch.sh").read_text()
    run = tmp_path / "work" / "runs" / "r1"
    if name is not None:
        (run / name).write_text("{}")
        assert (marker_index(name) is not None) == refused  # the script reads markers as the layout does
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + _marker_check(script) + "echo launched"],
                          text=True, capture_output=True)
    if refused:
        assert done.returncode == 2 and "launched" not in done.stdout, done
        assert f"already holds {name}" in done.stderr
    else:
        assert (done.returncode, done.stdout) == (0, "launched\n"), done


def test_the_scripts_marker_patterns_name_the_layouts_markers() -> None:
    from fnmatch import fnmatchcase

    from harness.vocab.layout import marker_index, marker_name
    from harness.plan.sbatch import MARKER_CASES

    names = [marker_name(i) for i in range(1, 100)] + ["fault_injected.0.json", "fault_injected.1.json",
                                                       "fault_injected.100.json", "fault_injected.07.json"]
    assert [n for n in names if any(fnmatchcase(n, p) for p in MARKER_CASES) != (marker_index(n) is not None)] == []
