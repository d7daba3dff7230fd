"""The README's sample screen ("What you see") is what the current code prints.

The screen is a transcript of one `nvrx-qual run --workload reference --fault kill`, long lines
cut with `…`. Its lines are compared, by shape (numbers, run IDs, hashes and paths masked), with
what the code prints for the same kind of run: the announcement (harness.cli.terminal), the
baseline lines (harness.launch.runner.Twin, find_baseline), the watcher's progress lines (real recorded runs,
recovery_tests/data/runs/, replayed through harness.launch.watch.Watcher), and the result block (criteria table, latency and
verdict lines of harness.cli.terminal.run_outcome over a judged kill with its baseline). A
line the code no longer prints, or a criterion the table lacks, fails the test."""

from __future__ import annotations

import io
import re
import types
from pathlib import Path

import pytest

from harness.launch import baseline as baselinemod
from harness.launch import runner
from harness import workloads
from harness.cli import terminal
from harness.report.verify import verify_run
from harness.launch.watch import Watcher
from recovery_tests import rundirs
from recovery_tests import recorded

ROOT = Path(__file__).resolve().parent.parent
STAMP = re.compile(r"^(?:twin|kill)  \[\s*[\d.]+s\] ")  # the lines of the twin and the fault run side by side


def screen(text: str) -> list[str]:
    """The lines of the first code block after the `## What you see` heading."""
    section = text.split("\n## What you see", 1)[1]
    block = section.split("```", 2)[1]
    return block.split("\n")[1:-1]


def shape(line: str) -> str:
    """A line with what changes from run to run masked: run IDs, hashes, paths, the biggest badput
    part, numbers."""
    line = re.sub(r"\S*reference-(?:kill|none)-\d{8}T\d{6}Z-[0-9a-f]{4}\S*", "<RUN>", line)
    line = re.sub(r"\b[0-9a-f]{12}\b", "<HASH>", line)
    line = re.sub(r"(?<![\w<])(?:/|\.{1,2}/|runs/)[^\s),;]+", "<PATH>", line)
    line = re.sub(r"biggest badput: [a-z_ -]+? (?=\d)", "biggest badput: <PART> ", line)  # which part varies
    line = re.sub(r"\d+(?:\.\d+)*", "#", line)
    return re.sub(r" +", " ", line.rstrip())


def matches(readme_line: str, printed: list[str]) -> bool:
    """The README line (maybe cut with `…`) is a printed line, or the start of one, by shape."""
    cut = readme_line.rstrip().endswith("…")
    want = shape(readme_line.rstrip().rstrip("…"))
    return any(p == want or (cut and p.startswith(want)) for p in map(shape, printed))


def printed_lines(tmp_path: Path, monkeypatch) -> dict[str, list[str]]:
    """What the code prints for a reference kill, part by part."""
    spec = types.SimpleNamespace(fault="kill", fault_rank=1, fault_at="after-commit",
                                 run_id="reference-kill-20261201T211403Z-6f09", workload="reference", nnodes=1,
                                 workload_type=workloads.get("reference"),
                                 gpus_per_node=2, deadline_profile="reference",
                                 section_timeouts_arg="setup:60,step:10,checkpointing:10", out_of_section_timeout=10.0)
    plan = types.SimpleNamespace(spec=spec, nvrx=types.SimpleNamespace(version="0.7.0", path=Path(".nvrx/0.7.0")),
                                 layout=types.SimpleNamespace(root=Path("runs") / spec.run_id))
    parts = {"announce": terminal.announce(plan).splitlines()}

    # the baseline lines: the twin run beside the fault run, then reused
    out = io.StringIO()
    twin_id = spec.run_id + "-baseline"
    fault_plan = types.SimpleNamespace(spec=types.SimpleNamespace(work_dir=tmp_path, run_id=spec.run_id, fault="kill",
                                                                  workload_type=spec.workload_type),
                                       nvrx=None, srun=None)
    monkeypatch.setattr(baselinemod, "choose", lambda _spec: baselinemod.Choice("auto", "7dc07569893a" + "0" * 52))
    monkeypatch.setattr(baselinemod, "twin_spec", lambda _spec, **_kw: _spec)
    monkeypatch.setattr(runner.planmod, "build", lambda *_a: types.SimpleNamespace(
        spec=types.SimpleNamespace(run_id=twin_id, train_iters=30), layout=types.SimpleNamespace(root=Path("runs") / twin_id)))
    monkeypatch.setattr(runner, "preflight", lambda *_a: None)
    monkeypatch.setattr(runner, "execute_preflighted", lambda *_a, **_k: types.SimpleNamespace(
        verdict=types.SimpleNamespace(qualified=True), run_dir=Path("runs") / twin_id))
    with runner.Twin(fault_plan, deadline_s=None, out=out, base_env=None) as twin:
        twin.result()
    monkeypatch.setattr(baselinemod, "candidates", lambda *_a, **_k: [baselinemod.Candidate(Path("runs") / twin_id, None)])
    assert runner.find_baseline(fault_plan, out=out).how == "reused"
    parts["baseline"] = out.getvalue().splitlines()

    # the progress lines of real runs (a kill, and a hang for the heartbeat of a training run),
    # replayed as they were written and polled every tick, as harness.launch.job polls its watcher,
    # each as the twin's and as the fault run's lines (the twin's are a run without its fault)
    progress = io.StringIO()
    for name in ("reference-kill", "reference-hang"):
        for stream in (progress, twin.twin_out, twin.run_out):
            source = recorded.recorded(name)
            clock = recorded.Clock(recorded.started_at(source))
            live = tmp_path / name / str(id(stream))
            watcher = Watcher(recorded.spec_of(source, tmp_path), live, out=stream, clock=clock)
            watcher.say("launching ft_launcher: 2 ranks on 1 node(s)")  # what harness.launch.runner says before the launch
            recorded.replay(source, live, watcher, clock, tick_s=0.5)
            assert watcher.stop_reason is None
    parts["progress"] = progress.getvalue().splitlines() + out.getvalue().splitlines()

    # the result block: a kill judged against its uninterrupted twin
    judged = rundirs.build(tmp_path / "judged", rundirs.Scenario()).run_dir  # with real DCP checkpoints
    base = rundirs.build(tmp_path / "base", rundirs.Scenario(fault="none")).run_dir
    verdict = verify_run(judged, baseline=base)
    outcome = types.SimpleNamespace(verdict=verdict, launch=types.SimpleNamespace(stopped_early=None,
                                                                                  capture_error=None),
                                    triage=None, known=(), picture_problem=None, plan=plan,
                                    run_dir=plan.layout.root)
    parts["result"] = terminal.run_outcome(outcome).splitlines()
    parts["criteria"] = [c.id for c in verdict.criteria]
    return parts


def test_every_line_of_the_readme_screen_is_one_the_code_prints(tmp_path, monkeypatch):
    lines = screen((ROOT / "README.md").read_text(encoding="utf-8"))
    parts = printed_lines(tmp_path, monkeypatch)
    printed = [*parts["announce"], *parts["baseline"], *parts["progress"], *parts["result"]]
    stale = [line for line in lines[1:] if line.strip() and not matches(line, printed)]
    assert stale == [], "README's sample screen shows lines the code does not print: " + "\n".join(stale)
    assert lines[0] == "$ nvrx-qual run --workload reference --fault kill"


def test_the_readme_screen_shows_every_criterion_and_the_baseline(tmp_path, monkeypatch):
    lines = screen((ROOT / "README.md").read_text(encoding="utf-8"))
    parts = printed_lines(tmp_path, monkeypatch)
    table = [line.split()[0] for line in lines if re.match(r"^[a-z_]+ +(pass|fail|unknown|not_applicable)\b", line)]
    assert table == parts["criteria"], "the README's criteria table is not the one a judged kill prints"
    assert any(line.startswith("baseline: ") for line in lines), "the README's screen lacks the baseline line"
    assert any(STAMP.match(line) for line in lines)


def test_the_shape_check_sees_a_stale_line():
    printed = ["  [   22.6s] checkpoint 5 committed (iteration 7/30)", "pre_fault_checkpoint  pass  Checkpoint 5 was"]
    assert matches("  [    3.0s] checkpoint 15 committed (iteration 18/30)", printed)
    assert matches("pre_fault_checkpoint  pass  Checkpoint 10…", printed)
    assert not matches("  [    3.0s] checkpoint 15 saved (iteration 18/30)", printed)
    assert not matches("pre_fault_checkpoint  pass  Checkpoint 5 was committed…", printed[:1])
    with pytest.raises(IndexError):
        screen("# no screen here\n")
