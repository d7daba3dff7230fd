"""Loss continuity: the extra criterion after the five.

Under deterministic settings (the CPU reference workload is bitwise deterministic) a run
that recovered from checkpoint K must print, for every iteration after K, exactly the
`lm loss` of an uninterrupted run of the same configuration (docs/megatron.md, "Optimizer
state really reloaded", evidence 3). A restored model with a fresh optimizer matches at K+1 at
best and drifts from K+2 on, so this catches what the log lines alone might not.

Megatron (0.19 `training_log`) prints the first iteration of every start without resetting
its loss accumulators, so with --log-interval 1 the next line reports the mean of the start's
first two iterations. After a restore of K that is iteration K+2: its printed loss is then
the mean of this run's K+1 and the baseline's K+2 (to the printed precision), and is accepted
as continuous. The uninterrupted baseline averages only its iterations 1 and 2.

Streams the application logs of both runs line by line; keeps one loss per iteration.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from harness import safeio
from harness.criteria import FAIL, NOT_APPLICABLE, PASS, UNKNOWN, CriterionResult
from harness.events import Src, clip
from harness.history import application_logs, iteration_loss

CRITERION_ID = "loss_continuity"


@dataclass(frozen=True)
class LossLine:
    loss: str  # as printed: comparing the printed value is comparing what the run reported
    src: Src


def iteration_losses(run_dir: Path) -> dict[int, LossLine]:
    """iteration -> the last `lm loss` logged for it: a replacement cycle's value wins over
    the failed cycle's, as cycles are read in order."""
    out: dict[int, LossLine] = {}
    for path, rel in application_logs(run_dir):
        with safeio.open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):
                if b"lm loss" not in raw:
                    continue
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                found = iteration_loss(text)
                if found:
                    out[found[0]] = LossLine(found[1], Src(rel, lineno, clip(text)))
    return out


def check_loss_continuity(run_dir: Path, baseline_dir: Path | None, fault: str,
                          restored: int | None, train_iters: int | None) -> CriterionResult:
    """Compare the losses after the restored iteration with the baseline run's."""
    if fault == "none":
        return CriterionResult(CRITERION_ID, NOT_APPLICABLE, "Fault none: there is no restore to compare.")
    if baseline_dir is None:
        return CriterionResult(CRITERION_ID, NOT_APPLICABLE,
                               "No baseline run given (verify --baseline RUN_DIR of an uninterrupted run).")
    if restored is None:
        return CriterionResult(CRITERION_ID, NOT_APPLICABLE,
                               "No checkpoint was restored (see optimizer_reload), so there is nothing to compare.")
    try:
        ours, theirs = iteration_losses(run_dir), iteration_losses(baseline_dir)
    except OSError as exc:
        return CriterionResult(CRITERION_ID, UNKNOWN, f"A log could not be read ({exc}).")
    last = train_iters or max(ours, default=restored)
    wanted = range(restored + 1, last + 1)
    missing = [i for i in wanted if i not in ours or i not in theirs]
    if missing or not wanted:
        side = "this run" if any(i not in ours for i in missing) else f"the baseline {baseline_dir}"
        return CriterionResult(CRITERION_ID, FAIL if missing else UNKNOWN,
                               f"Iterations {restored + 1}..{last} must be logged by both runs; {side} lacks "
                               f"iteration {missing[0] if missing else '?'} (log every iteration: --log-interval 1).")
    averaged = None
    for i in wanted:
        if ours[i].loss != theirs[i].loss and i == restored + 2 and _mean_of(ours[i].loss, ours[i - 1].loss, theirs[i].loss):
            averaged = i  # Megatron's second line of a start: the mean of the start's first two iterations
            continue
        if ours[i].loss != theirs[i].loss:
            mean = ""
            if i == restored + 2 and _finite(ours[i - 1].loss, theirs[i].loss):
                mean = (f" (or {(float(ours[i - 1].loss) + float(theirs[i].loss)) / 2:.6E}, the mean of this run's "
                        f"{i - 1} and the baseline's {i}, as Megatron prints the second iteration of a start)")
            return CriterionResult(
                CRITERION_ID, FAIL,
                f"lm loss at iteration {i} is {ours[i].loss} after the restore of checkpoint {restored} but "
                f"{theirs[i].loss} in the uninterrupted baseline{mean}: the restored training state differs "
                "(optimizer state, data position or RNG).",
                (str(ours[i].src), f"{os.path.basename(baseline_dir)}/{theirs[i].src}"))
    first, end = wanted[0], wanted[-1]
    note = (f" (iteration {averaged}'s line is Megatron's mean of the restart's first two iterations, and equals the "
            f"mean of this run's {averaged - 1} and the baseline's {averaged})") if averaged is not None else ""
    return CriterionResult(
        CRITERION_ID, PASS,
        f"lm loss of iterations {first}..{end} after the restore of checkpoint {restored} equals the uninterrupted "
        f"baseline's, all {len(wanted)} of them{note}.",
        (str(ours[first].src), f"{os.path.basename(baseline_dir)}/{theirs[first].src}", str(ours[end].src)))


def _mean_of(printed: str, first: str, second: str) -> bool:
    """printed == (first + second) / 2 to the precision Megatron prints (%E: 7 significant digits)."""
    try:
        values = [float(printed), float(first), float(second)]
    except ValueError:
        return False
    if not all(math.isfinite(v) for v in values):
        return False
    return math.isclose(values[0], (values[1] + values[2]) / 2, rel_tol=2e-6)


def _finite(*printed: str) -> bool:
    try:
        return all(math.isfinite(float(p)) for p in printed)
    except ValueError:
        return False
