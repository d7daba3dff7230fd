"""loss_continuity from run directories written here: the losses after the restore must
equal the uninterrupted baseline's, printed value for printed value. The losses come from
the one read of each run (history.read_run(losses=True)); the checker reads no file."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge.criteria import FAIL, LOSS_CONTINUITY as CRITERION_ID, NOT_APPLICABLE, PASS, LossComparison, compare_losses
from harness.judge.sentences import render
from harness.read.history import read_run


def iteration_losses(run: Path):
    return read_run(run, inspect_checkpoints=False, losses=True, progress=False).losses


def check_loss_continuity(run: Path, baseline: Path | None, fault: str, restored: int | None, train_iters: int | None):
    """The pure checker on the losses of the two reads, its sentence rendered."""
    losses = None
    if baseline is not None:
        read = restored is not None and fault != "none"  # else the checker needs no loss at all
        losses = LossComparison(iteration_losses(run) if read else {}, iteration_losses(baseline) if read else {},
                                str(baseline))
    return render(compare_losses(losses, fault, restored, train_iters))

ITER = (" [2026-11-29 18:45:14.453065] iteration {it:8d}/{total:8d} | consumed samples: {cs:12d} | "
        "elapsed time per iteration (ms): 101.0 | learning rate: 1.000000E-03 | global batch size:     2 | "
        "lm loss: {loss} | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |")


def loss(it: int) -> str:
    return f"{5 + 1 / it:.6E}"


def write_cycle(run: Path, cycle: int, iterations, losses=loss, rank: int = 1) -> None:
    (run / "logs").mkdir(parents=True, exist_ok=True)
    lines = ["0: saving checkpoint at iteration       5"]  # a line the reader skips
    lines += [f"{rank}: " + ITER.format(it=i, total=30, cs=2 * i, loss=losses(i)) for i in iterations]
    (run / "logs" / f"train_cycle_cycle{cycle}.log").write_text("\n".join(lines) + "\n")


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    run = tmp_path / "baseline"
    write_cycle(run, 0, range(1, 31))
    return run


def test_recovered_run_matches_the_baseline(tmp_path, baseline):
    run = tmp_path / "kill"
    write_cycle(run, 0, range(1, 8), losses=lambda i: "9.999999E+00")  # replaced by cycle 1 from 6 on
    write_cycle(run, 1, range(6, 31))
    result = check_loss_continuity(run, baseline, "kill", restored=5, train_iters=30)
    assert (result.id, result.status) == (CRITERION_ID, PASS), result.detail
    assert "iterations 6..30" in result.detail and "all 25" in result.detail
    assert result.evidence[0].startswith("logs/train_cycle_cycle1.log:2: 1:  [")


def test_a_fresh_optimizer_drifts_and_fails_at_the_first_difference(tmp_path, baseline):
    run = tmp_path / "no-load-optim"
    write_cycle(run, 0, range(1, 7))
    write_cycle(run, 1, range(6, 31), losses=lambda i: loss(i) if i < 7 else f"{6 + 1 / i:.6E}")
    result = check_loss_continuity(run, baseline, "kill", restored=5, train_iters=30)
    assert result.status == FAIL
    assert f"lm loss at iteration 7 is {6 + 1 / 7:.6E} after the restore of checkpoint 5 but {loss(7)}" in result.detail
    assert result.evidence[0].startswith("logs/train_cycle_cycle1.log:3:")
    assert result.evidence[1].startswith("baseline/logs/train_cycle_cycle0.log:8:")


def test_a_missing_iteration_fails(tmp_path, baseline):
    run = tmp_path / "gap"
    write_cycle(run, 1, [*range(6, 12), *range(13, 31)])
    result = check_loss_continuity(run, baseline, "kill", restored=5, train_iters=30)
    assert result.status == FAIL and "lacks iteration 12" in result.detail


@pytest.mark.parametrize(("fault", "base", "restored", "why"), [
    ("none", True, 5, "Fault none"),
    ("kill", False, 5, "No baseline run given"),
    ("hang", True, None, "No checkpoint was restored"),
])
def test_not_applicable(tmp_path, baseline, fault, base, restored, why):
    result = check_loss_continuity(tmp_path, baseline if base else None, fault, restored, 30)
    assert result.status == NOT_APPLICABLE and why in result.detail


def test_a_single_unprefixed_log_is_read_in_order(tmp_path):
    """A user's own run: one log, both starts in it; the later value of an iteration wins."""
    run = tmp_path / "user"
    (run / "logs").mkdir(parents=True)
    lines = [ITER.format(it=i, total=30, cs=2 * i, loss="1.000000E+00") for i in range(1, 8)]
    lines += [ITER.format(it=i, total=30, cs=2 * i, loss=loss(i)) for i in range(6, 31)]
    (run / "logs" / "train.log").write_text("\n".join(lines) + "\n")
    losses = iteration_losses(run)
    assert sorted(losses) == list(range(1, 31))
    assert losses[6].loss == loss(6) and losses[5].loss == "1.000000E+00"
    assert losses[6].src.path == "logs/train.log" and losses[6].src.line == 8


def megatron_restart_lines(restored: int, losses=loss):
    """Megatron 0.19 after a restore of `restored`: iteration restored+2 is printed as the mean
    of the start's first two iterations (its accumulators are not reset after the first line)."""
    def printed(i: int) -> str:
        if i == restored + 2:
            return f"{(float(losses(i - 1)) + float(losses(i))) / 2:.6E}"
        return losses(i)
    return printed


def test_megatrons_averaged_second_line_of_a_restart_is_continuous(tmp_path, baseline):
    run = tmp_path / "kill"
    write_cycle(run, 0, range(1, 8))
    write_cycle(run, 1, range(6, 31), losses=megatron_restart_lines(5))
    result = check_loss_continuity(run, baseline, "kill", restored=5, train_iters=30)
    assert result.status == PASS, result.detail
    assert "iteration 7's line is Megatron's mean of the restart's first two iterations" in result.detail


def test_the_averaged_line_still_catches_a_drift_from_the_second_step(tmp_path, baseline):
    """The step-reset bug: iteration restored+1 matches, restored+2 differs from the mean."""
    run = tmp_path / "step-reset"
    drifted = megatron_restart_lines(5, losses=lambda i: loss(i) if i < 7 else f"{5.5 + 1 / i:.6E}")
    write_cycle(run, 0, range(1, 8))
    write_cycle(run, 1, range(6, 31), losses=drifted)
    result = check_loss_continuity(run, baseline, "kill", restored=5, train_iters=30)
    assert result.status == FAIL
    expected_mean = (float(loss(6)) + float(loss(7))) / 2
    assert f"lm loss at iteration 7 is {drifted(7)} after the restore of checkpoint 5 but {loss(7)} in the " \
           f"uninterrupted baseline (or {expected_mean:.6E}, the mean of this run's 6 and the baseline's 7" in result.detail


def test_verify_checks_continuity_against_a_baseline_from_the_one_read(tmp_path: Path):
    """verify --baseline: the losses of both runs come from their one read and the pure
    checker judges them; a drifted loss after the restore fails the run."""
    from harness.report.verify import verify_run
    from recovery_tests import rundirs
    from recovery_tests.rundirs import Scenario

    base = rundirs.build(tmp_path / "base", Scenario(fault="none")).run_dir
    good = rundirs.build(tmp_path / "good", Scenario()).run_dir
    result = verify_run(good, baseline=base).criterion(CRITERION_ID)
    assert result.status == PASS, result.detail
    assert result.evidence[1].startswith("base/logs/")
    log = next((good / "logs").glob("*_cycle1.log"))
    text = log.read_text()
    last = [line for line in text.splitlines() if "lm loss:" in line][-1]
    log.write_text(text.replace(last, last.replace("lm loss: ", "lm loss: 1")))
    drifted = verify_run(good, baseline=base)
    assert drifted.criterion(CRITERION_ID).status == FAIL and not drifted.qualified


def test_nothing_trained_after_the_final_checkpoint_is_not_applicable(tmp_path, baseline):
    """--fault-at last-iteration: the replacement restored the final checkpoint and trained nothing."""
    run = tmp_path / "last"
    write_cycle(run, 0, range(1, 31))
    result = check_loss_continuity(run, baseline, "kill", restored=30, train_iters=30)
    assert result.status == NOT_APPLICABLE and "nothing was trained after the restore" in result.detail
