"""The CPU reference workload (harness/workloads/reference.py) behaves like Megatron where the
suite looks: under the real ft_launcher of NVRx 0.4.1 and 0.7.0 it commits async checkpoints in
Megatron's layout and order, prints Megatron's exact lines, and a resumed run reloads model and
optimizer and continues bit for bit.

One uninterrupted run (0 -> 20, saves every 5) is the reference. Its checkpoint directory, cut
back to the state a run killed while saving iteration 15 leaves behind (tracker at 10,
iter_0000015/ without metadata.json, nothing later), seeds the resumed runs.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_nvrx_qual.runs import Scenario, ScenarioRunner
from harness.launch import job as launch
from harness.vocab.layout import TRACKER_NAME as TRACKER
from harness.machine.nvrx import NvrxTarget
from harness.launch.prepare import prepare

TRAIN_ITERS = 20
SAVE_INTERVAL = 5
WORLD = 2
RESUME_AT = 10  # committed checkpoint the resumed runs start from
IN_FLIGHT = 15  # save a killed run left incomplete
LAUNCH_DEADLINE_S = 240.0
PARALLEL = "[ t 1/1, gtp_remat 1/1, p 1/1 ]"
TS = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\]"
ITERATION_RE = re.compile(
    rf"^ {TS} iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| "
    r"elapsed time per iteration \(ms\): \d+\.\d \| learning rate: \d\.\d{6}E[+-]\d\d \| "
    r"global batch size: +(\d+) \| lm loss: (\d\.\d{6}E[+-]\d\d) \| loss scale: 1\.0 \| "
    r"grad norm: \d+\.\d{3} \| number of skipped iterations: +0 \| number of nan iterations: +0 \|$"
)
DATETIME_RE = r"datetime: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ?$"
RANK_LINE_RE = re.compile(r"^ *(\d+): (.*)$")


# --------------------------------------------------------------------------- launching


@dataclass(frozen=True)
class RankLine:
    rank: int
    text: str


@dataclass(frozen=True)
class TrackerSighting:
    """The tracker seen while the run was live, and whether the directory it names was committed."""

    iteration: int
    committed: bool


@dataclass(frozen=True)
class WorkloadRun:
    returncode: int | None
    wall_s: float
    lines: tuple[RankLine, ...]
    checkpoints: Path
    sightings: tuple[TrackerSighting, ...]
    run_dir: Path

    def rank0(self) -> list[str]:
        return [line.text for line in self.lines if line.rank == 0]

    def losses(self) -> dict[int, str]:
        """iteration -> `lm loss` text, from the last rank's iteration lines."""
        found = {}
        for line in self.lines:
            match = ITERATION_RE.match(line.text)
            if match:
                found[int(match.group(1))] = match.group(5)
        return found

    def explain(self) -> str:
        return f"launcher rc={self.returncode}; run directory: {self.run_dir}"


def _sight_tracker(checkpoints: Path) -> TrackerSighting | None:
    try:
        text = (checkpoints / TRACKER).read_text()
    except OSError:
        return None
    iteration = int(text)  # a torn or non-integer tracker fails the test right here
    return TrackerSighting(iteration, (checkpoints / f"iter_{iteration:07d}" / "metadata.json").is_file())


def run_workload(scenarios: ScenarioRunner, target: NvrxTarget, name: str, *extra: str,
                 checkpoint_dir: Path | None = None) -> WorkloadRun:
    """The workload alone (fault none) under ft_launcher, through the harness's own plan and
    launch, with the tracker sighted every 20 ms while the run is live."""
    knobs = [("train_iters", TRAIN_ITERS), ("save_interval", SAVE_INTERVAL), ("step_time_ms", 20)]
    if checkpoint_dir is not None:
        knobs.append(("checkpoint_dir", checkpoint_dir))
    plan = scenarios.plan(Scenario("none", target, name=f"{name}-{target.version}", knobs=tuple(knobs),
                                   workload_args=extra))
    prepare(plan, dry_run=False)
    checkpoints = plan.layout.checkpoints
    sightings: list[TrackerSighting] = []

    def sight() -> None:
        sighting = _sight_tracker(checkpoints)
        if sighting is not None and sighting not in sightings[-1:]:
            sightings.append(sighting)

    with scenarios.launch_slot():
        result = launch.launch(plan, deadline_s=LAUNCH_DEADLINE_S, watch=sight, tick_s=0.02)
    assert result.stopped_early is None, f"{result.stopped_early}: {plan.layout.root}"
    log = plan.layout.cycle_log(0)
    lines = tuple(RankLine(int(m.group(1)), m.group(2))
                  for raw in log.read_text(errors="replace").splitlines() if (m := RANK_LINE_RE.match(raw)))
    return WorkloadRun(result.launcher_exit_code, result.duration_s, lines, checkpoints, tuple(sightings),
                       plan.layout.root)


def crashed_copy(src: Path, dst: Path) -> Path:
    """`src` as a run killed while saving IN_FLIGHT leaves it, once the user has moved the
    incomplete iter_<IN_FLIGHT>/ out as nvrx-qual asks (it refuses a checkpoint dir holding
    iterations newer than its tracker: a run never rewrites a directory it did not create):
    tracker at RESUME_AT, nothing later."""

    def later(_: str, names: list[str]) -> list[str]:
        return [n for n in names if n.startswith("iter_") and int(n[5:]) > RESUME_AT]

    shutil.copytree(src, dst, ignore=later)
    (dst / TRACKER).write_text(str(RESUME_AT))
    return dst


# --------------------------------------------------------------------------- fixtures
# Launches dominate the file's run time (~15-20 s each here, mostly workers importing torch), so
# each one is made to count: one uninterrupted run (oldest launcher) is the reference; the
# resume, the path a restart takes, runs under every installed launcher, through the seed's
# NVRX_CHECKPOINT_DIR flow; --no-load-optim, a workload-side switch no launcher touches, under one.
# Session-scoped: pytest orders a session's tests by the session-scoped launcher parameter, so
# this module's tests of one launcher run apart from those of the other, and a module-scoped
# run was torn down in between and launched again (3 launches of reference-full in CI).


@pytest.fixture(scope="session")
def full_run(scenarios: ScenarioRunner, installed_launchers: list) -> WorkloadRun:
    return run_workload(scenarios, installed_launchers[0], "reference-full")


@pytest.fixture(scope="session")
def resumed_run(scenarios: ScenarioRunner, nvrx_target: NvrxTarget, full_run: WorkloadRun,
                tmp_path_factory: pytest.TempPathFactory) -> WorkloadRun:
    return _resume(scenarios, nvrx_target, full_run, tmp_path_factory, "reference-resumed")


@pytest.fixture(scope="session")
def no_load_optim_run(scenarios: ScenarioRunner, installed_launchers: list, full_run: WorkloadRun,
                      tmp_path_factory: pytest.TempPathFactory) -> WorkloadRun:
    return _resume(scenarios, installed_launchers[0], full_run, tmp_path_factory, "reference-no-load-optim",
                   "--no-load-optim")


def _resume(scenarios: ScenarioRunner, target: NvrxTarget, full_run: WorkloadRun,
            tmp_path_factory: pytest.TempPathFactory, name: str, *extra: str) -> WorkloadRun:
    assert full_run.returncode == 0, full_run.explain()
    checkpoints = crashed_copy(full_run.checkpoints, tmp_path_factory.mktemp(f"{name}-{target.version}") / "ckpt")
    return run_workload(scenarios, target, name, *extra, checkpoint_dir=checkpoints)


def _first_match(lines: list[str], pattern: str) -> int:
    for i, line in enumerate(lines):
        if re.match(pattern, line):
            return i
    raise AssertionError(f"no line matches {pattern!r}")


def checkpoint_tensors(directory: Path) -> dict:
    """Every tensor of one DCP checkpoint, read offline with plain PyTorch."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(str(directory)).read_metadata().state_dict_metadata
    state = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.items()
        if isinstance(meta, TensorStorageMetadata)
    }
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.load(state, checkpoint_id=str(directory), no_dist=True)
    return state


def assert_megatron_run_log(run: WorkloadRun, first_iteration: int) -> None:
    """The lines of one start of the workload, from FT init to FT close, in Megatron's shapes:
    FT lines, the arguments table, a save triplet per checkpoint, an iteration line per
    iteration on the last rank only, the end line."""
    assert run.returncode == 0, run.explain()
    ckpt = re.escape(str(run.checkpoints))
    rank0 = run.rank0()
    ft_init = rank0.index("FT: initializing...")  # stderr warnings of imports may come first
    assert rank0[ft_init + 1].startswith("FT: initialized. Timeouts=SectionTimeouts(")
    assert "step=10.00" in rank0[ft_init + 1]
    assert rank0[-2:] == ["FT: closing...", "FT: closed."]
    assert re.match(rf"^\[after training is done\] {DATETIME_RE}", rank0[-3])
    _first_match(rank0, rf"^\[after model, optimizer, and learning rate scheduler are built\] {DATETIME_RE}")

    begin = rank0.index("------------------------ arguments ------------------------")
    end = rank0.index("-------------------- end of arguments ---------------------")
    table = rank0[begin + 1 : end]
    assert table == sorted(table, key=str.lower)
    for row in (
        f"  train_iters ..................................... {TRAIN_ITERS}",
        "  no_load_optim ................................... False",
        f"  save_interval ................................... {SAVE_INTERVAL}",
        f"  save ............................................ {run.checkpoints}",
        f"  world_size ...................................... {WORLD}",
        "  async_save ...................................... True",
    ):
        assert row in table

    first_save = (first_iteration + SAVE_INTERVAL - 1) // SAVE_INTERVAL * SAVE_INTERVAL
    for it in range(first_save, TRAIN_ITERS + 1, SAVE_INTERVAL):
        start = _first_match(rank0, rf"^{TS} saving checkpoint at iteration {it:7d} to {ckpt} in torch_dist format$")
        scheduled = _first_match(rank0, rf"^  {TS} scheduled an async checkpoint save at iteration {it:7d} to {ckpt}$")
        saved = _first_match(
            rank0, rf"^  {TS} successfully saved checkpoint from iteration {it:7d} to {ckpt} {re.escape(PARALLEL)}$"
        )
        assert start < scheduled < saved

    iteration_lines = [line for line in run.lines if "consumed samples" in line.text]
    assert {line.rank for line in iteration_lines} == {WORLD - 1}
    assert all(ITERATION_RE.match(line.text) for line in iteration_lines), iteration_lines[:2]
    assert sorted(run.losses()) == list(range(first_iteration, TRAIN_ITERS + 1))
    for line, it in ((iteration_lines[0].text, first_iteration), (iteration_lines[-1].text, TRAIN_ITERS)):
        assert f" iteration {it:8d}/{TRAIN_ITERS:8d} | consumed samples: {it * WORLD:12d} |" in line
        assert " global batch size: {:5d} |".format(WORLD) in line


def assert_commits_in_order(run: WorkloadRun, first_save: int) -> None:
    """While the run was live the tracker only ever named committed directories, moving forward;
    the `successfully saved` lines (printed after the commit) come once per save, ascending."""
    seen = [s.iteration for s in run.sightings]
    assert seen and seen == sorted(seen) and seen[-1] == TRAIN_ITERS, seen
    assert all(s.committed for s in run.sightings), run.sightings
    assert (run.checkpoints / TRACKER).read_bytes() == str(TRAIN_ITERS).encode()  # bare integer, no newline
    saved_re = re.compile(r"successfully saved checkpoint from iteration +(\d+)")
    saved = [int(m.group(1)) for line in run.rank0() if (m := saved_re.search(line))]
    assert saved == list(range(first_save, TRAIN_ITERS + 1, SAVE_INTERVAL))


# --------------------------------------------------------------------------- end-to-end tests


@pytest.mark.e2e
def test_uninterrupted_run_commits_every_save_in_megatron_layout(full_run: WorkloadRun) -> None:
    from torch.distributed.checkpoint import FileSystemReader

    assert full_run.returncode == 0, full_run.explain()
    assert_commits_in_order(full_run, first_save=SAVE_INTERVAL)
    ckpt = full_run.checkpoints
    expected = [f"iter_{i:07d}" for i in range(SAVE_INTERVAL, TRAIN_ITERS + 1, SAVE_INTERVAL)]
    assert sorted(p.name for p in ckpt.iterdir() if p.is_dir()) == expected
    for name in expected:
        files = {p.name for p in (ckpt / name).iterdir()}
        assert {".metadata", "metadata.json", "__0_0.distcp", "__1_0.distcp"} <= files, name
        assert json.loads((ckpt / name / "metadata.json").read_text()) == {
            "sharded_backend": "torch_dist", "sharded_backend_version": 1,
        }
    keys = set(FileSystemReader(str(ckpt / expected[-1])).read_metadata().state_dict_metadata)
    optimizer_keys = {k for k in keys if k.startswith("optimizer.")}
    assert any(k.endswith(".exp_avg") for k in optimizer_keys), sorted(keys)
    assert any(k.endswith(".exp_avg_sq") for k in optimizer_keys), sorted(keys)
    assert "common_state" in keys and "embedding.word_embeddings.weight" in keys


@pytest.mark.e2e
def test_uninterrupted_run_prints_megatron_lines(full_run: WorkloadRun) -> None:
    assert_megatron_run_log(full_run, first_iteration=1)
    rank0 = [line.rstrip() for line in full_run.rank0()]
    assert f"WARNING: could not find the metadata file {full_run.checkpoints / TRACKER}" in rank0
    assert "    will not load any checkpoints and will start from random" in rank0
    assert not any("loading distributed checkpoint" in line for line in rank0)


@pytest.mark.e2e
def test_resume_reloads_model_and_optimizer_and_continues_bitwise(
    full_run: WorkloadRun, resumed_run: WorkloadRun
) -> None:
    assert_megatron_run_log(resumed_run, first_iteration=RESUME_AT + 1)
    assert_commits_in_order(resumed_run, first_save=IN_FLIGHT)
    ckpt = resumed_run.checkpoints
    rank0 = [line.rstrip() for line in resumed_run.rank0()]
    load_block = [
        f" loading distributed checkpoint from {ckpt} at iteration {RESUME_AT}",
        " checkpoint version 3.0",
        "INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type dp_reshardable",
        "INFO:megatron.core.optimizer_param_scheduler: > using checkpoint value 0.001 for learning rate",
        f"  successfully loaded checkpoint from {ckpt} {PARALLEL} at iteration {RESUME_AT}",
    ]
    positions = [rank0.index(line) for line in load_block]
    assert positions == sorted(positions)
    assert not any("will start from random" in line for line in rank0)
    assert (ckpt / f"iter_{IN_FLIGHT:07d}" / "metadata.json").is_file()  # saved afresh by this run
    # Every loss after K equals the uninterrupted run's (the printed %E text) ...
    resumed, full = resumed_run.losses(), full_run.losses()
    assert resumed == {it: full[it] for it in range(RESUME_AT + 1, TRAIN_ITERS + 1)}
    # ... and, beyond the printed digits, the final model and Adam state are bitwise identical.
    final = f"iter_{TRAIN_ITERS:07d}"
    ours, theirs = checkpoint_tensors(ckpt / final), checkpoint_tensors(full_run.checkpoints / final)
    assert ours.keys() == theirs.keys()
    assert [k for k in ours if not ours[k].equal(theirs[k])] == []


@pytest.mark.e2e
def test_no_load_optim_resume_is_visible_in_log_and_loss(full_run: WorkloadRun, no_load_optim_run: WorkloadRun) -> None:
    assert no_load_optim_run.returncode == 0, no_load_optim_run.explain()
    rank0 = [line.rstrip() for line in no_load_optim_run.rank0()]
    ckpt = no_load_optim_run.checkpoints
    assert f"  successfully loaded checkpoint from {ckpt} {PARALLEL} at iteration {RESUME_AT}" in rank0
    assert not any("Loading distributed optimizer" in line or "using checkpoint value" in line for line in rank0)
    resumed, full = no_load_optim_run.losses(), full_run.losses()
    assert min(resumed) == RESUME_AT + 1
    # The model came back (same loss before the first update), Adam's moments did not.
    assert resumed[RESUME_AT + 1] == full[RESUME_AT + 1]
    assert all(resumed[it] != full[it] for it in range(RESUME_AT + 2, TRAIN_ITERS + 1)), (resumed, full)
    final = f"iter_{TRAIN_ITERS:07d}"
    ours, theirs = checkpoint_tensors(ckpt / final), checkpoint_tensors(full_run.checkpoints / final)
    assert not ours["embedding.word_embeddings.weight"].equal(theirs["embedding.word_embeddings.weight"])


# --------------------------------------------------------------------------- in-process checks


def _reference():
    from harness.workloads import reference

    return reference


def test_unknown_megatron_flag_is_rejected_by_name() -> None:
    reference = _reference()
    with pytest.raises(reference.UsageError, match=r"--bf16"):
        reference.parse_args(["--train-iters", "5", "--bf16"], world_size=2)


def test_global_batch_must_split_over_ranks() -> None:
    reference = _reference()
    with pytest.raises(reference.UsageError, match=r"--global-batch-size 3 .* multiple of 2"):
        reference.parse_args(["--train-iters", "5", "--global-batch-size", "3"], world_size=2)


def test_arguments_table_matches_megatron_rows() -> None:
    reference = _reference()
    args = reference.parse_args(["--train-iters", "100", "--save-interval", "5"], world_size=2)
    table = reference.format_args_table(args)
    # Rows copied from docs/megatron.md ("The arguments table"), not recomputed with the workload's formula.
    for row in (
        "  train_iters ..................................... 100",
        "  no_load_optim ................................... False",
        "  save_interval ................................... 5",
    ):
        assert row in table
    assert table[0] == "------------------------ arguments ------------------------"
    assert table[-1] == "-------------------- end of arguments ---------------------"


def test_enable_ft_package_outside_ft_launcher_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    reference = _reference()
    monkeypatch.delenv("FT_RANK_MONITOR_IPC_SOCKET", raising=False)
    args = reference.parse_args(["--train-iters", "5", "--save", str(tmp_path), "--enable-ft-package"], world_size=1)
    with pytest.raises(reference.UsageError, match="not started by ft_launcher"):
        reference.FaultTolerance.start(args, 0, reference.Console(0, 1))


def test_synthetic_data_depends_only_on_seed_and_sample_index() -> None:
    reference = _reference()
    a = reference.synthetic_sample(1234, 17, 32, 256)
    assert a.shape == (33,)
    assert a.equal(reference.synthetic_sample(1234, 17, 32, 256))
    assert not a.equal(reference.synthetic_sample(1234, 18, 32, 256))
    assert not a.equal(reference.synthetic_sample(4321, 17, 32, 256))


def test_commit_files_never_write_through_a_planted_link(tmp_path: Path) -> None:
    """The tracker and the commit marker are replaced through a temporary with an unpredictable
    name: a link planted at the temporary's old, fixed name (`.<name>.tmp`) is left alone and the
    file it points at is never written."""
    from harness.workloads.reference import _write_atomically

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    tracker = tmp_path / TRACKER
    (tmp_path / f".{TRACKER}.tmp").symlink_to(victim)
    _write_atomically(tracker, "8")
    assert tracker.read_text() == "8" and not tracker.is_symlink()
    assert victim.read_text() == "the user's file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, f".{TRACKER}.tmp", "victim.txt"])
