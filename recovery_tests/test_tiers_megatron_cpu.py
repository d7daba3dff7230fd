"""Megatron's non-persistent global checkpoints on its own loop (megatron-cpu, e2e): the fault
after a commit of either tier, and the restore Megatron chooses between them (harness.vocab.tiers,
docs/tiers.md). Three launches and one shared uninterrupted twin cover the cases:

- issue 21's command (`-- --non-persistent-ckpt-type global --non-persistent-save-interval 2`,
  fault after the newest commit of any tier: non-persistent 2) qualifies, restored from that tier;
- the reverse order (`--fault-after persistent`: persistent 6, non-persistent 5 older): Megatron
  says "non-persistent checkpoints are older than persistent checkpoint", restores 4, qualifies;
- a non-persistent checkpoint newer than an existing persistent one (save every 4, non-persistent
  every 5, `--fault-after non-persistent`: 5 over 4) is restored from the non-persistent tier. The
  next save (persistent 8) is three iterations away, so the kill lands before it: with saves one
  iteration apart (2, then 3, then 4) the next persistent one could be committed in the same
  second as the kill, and restoring that newer one would be right, not the case under test.

- a replacement that restores an older tier than the newest committed, which must be NOT
  QUALIFIED naming both. Within one ft_launcher job Megatron never does this on its own (the
  load side computes the non-persistent directory as the save side does, docs/tiers.md); it
  does when the replacement starts without the non-persistent flags, as a job whose resume
  script lacks them. The user's job script here is such a one: it passes Megatron's arguments
  through unchanged on the first attempt and drops `--non-persistent-*` on a restart
  (TORCHELASTIC_RESTART_COUNT > 0). Megatron's loader then finds no non-persistent tier, loads
  the persistent checkpoint, which is older, and says nothing about it.

The plain optimizer: the distributed one's step reset on CPU (docs/megatron-cpu.md) is another test's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_nvrx_qual.runs import Scenario, explain
from fixtures.launching import launches
from harness.vocab import events as ev
from harness.vocab import tiers
from harness.judge.criteria import CHECK_IDS
from harness.read.history import read_history
from recovery_tests.test_recovery_megatron_cpu import megatron_cpu  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e

NP_ARGS = ("--non-persistent-ckpt-type", "global", "--non-persistent-save-interval", "2")


def _scenario(target, name: str, knobs: tuple = (), args: tuple[str, ...] = NP_ARGS) -> Scenario:
    return Scenario("kill", target, workload="megatron-cpu", name=f"megatron-cpu-tiers-{name}",
                    knobs=(("distributed_optimizer", False), *knobs), workload_args=args, fail_fast=False)


def _restore(outcome) -> tuple[tiers.Load, ev.Timeline]:
    tl = read_history(outcome.run_dir)
    replacement = next(s for s in tl.starts if s.cycle == 1)
    got = tiers.loaded(replacement)
    assert got is not None, explain(outcome, "optimizer_reload")
    return got, tl


def _qualified(outcome) -> None:
    failed = [c.id for c in outcome.verdict.criteria if c.status not in ("pass", "not_applicable")]
    assert outcome.verdict.qualified, "\n\n".join(explain(outcome, cid) for cid in failed)
    assert all(outcome.verdict.criterion(cid).status == "pass" for cid in CHECK_IDS)


def _any(target) -> Scenario:
    return _scenario(target, "any")


def _persistent(target) -> Scenario:
    # persistent every 6, non-persistent every 5: the fault after persistent 6 (non-persistent 5 older),
    # the next save (non-persistent 10) four iterations away: an async finalize lags the save by an
    # iteration or two on a loaded machine, and a save in flight at the kill may still commit
    args = ("--non-persistent-ckpt-type", "global", "--non-persistent-save-interval", "5")
    return _scenario(target, "persistent", (("fault_after", "persistent"), ("save_interval", 6), ("train_iters", 16)),
                     args)


def _np_over_p(target) -> Scenario:
    args = ("--non-persistent-ckpt-type", "global", "--non-persistent-save-interval", "5")
    return _scenario(target, "np-over-p", (("fault_after", "non-persistent"), ("save_interval", 4),
                                           ("baseline", "none")), args)


def _resume_without_np(target) -> Scenario:
    # persistent every 6, non-persistent every 7: the fault after non-persistent 7 (persistent 6 older),
    # the next save (persistent 12) five iterations away, so it cannot commit before the kill
    args = ("--non-persistent-ckpt-type", "global", "--non-persistent-save-interval", "7")
    scenario = _scenario(target, "resume-without-np", (("fault_after", "non-persistent"), ("save_interval", 6),
                                                       ("train_iters", 16), ("baseline", "none"),
                                                       ("megatron_path", RESUME_WITHOUT_NP)), args)
    return dataclasses.replace(scenario, expect_qualified=False)


@launches(lambda megatron_cpu: _any(megatron_cpu))
def test_issue_21_command_faults_after_the_newest_tier_and_qualifies(megatron_cpu, scenarios):  # noqa: F811
    """The fault fires after the first commit of either tier (non-persistent 2 on a quiet machine)
    and the replacement restores the newest checkpoint committed before it landed, of its tier.
    Persistent 4 is two iterations after non-persistent 2: on a loaded machine its async finalize
    can land in the same poll as 2's (the nemesis then fires after 4), or between the poll that
    saw 2 and the kill (seen in CI 2026-12-05: marker 2, persistent 4 committed and restored, the
    judge's newest committed checkpoint). Either way the restore is the newest commit of cycle 0,
    which is what is asserted; a non-persistent restore under load-proof spacing is
    test_non_persistent_newer_than_a_persistent_one_is_restored's."""
    outcome = scenarios.outcome(_any(megatron_cpu))
    _qualified(outcome)
    marker = json.loads((outcome.run_dir / "fault_injected.json").read_text())
    got, tl = _restore(outcome)
    committed = [c for c in tiers.commits(tl, upto_cycle=0) if c.tier != tiers.LOCAL]
    assert committed, "cycle 0 logged no commit"
    newest = max(committed, key=lambda c: c.iteration)
    # the marker names a commit of the tier its tracker is, and the restore is no older than it
    assert (marker["iteration"], "/non_persistent/" in marker["tracker"]) in {
        (c.iteration, c.tier == tiers.NON_PERSISTENT) for c in committed}, (marker, committed)
    assert (got.tier, got.iteration) == (newest.tier, newest.iteration), (marker, committed)
    assert got.iteration >= marker["iteration"]


@launches(lambda megatron_cpu: _persistent(megatron_cpu))
def test_reverse_order_restores_the_newer_persistent_checkpoint(megatron_cpu, scenarios):  # noqa: F811
    outcome = scenarios.outcome(_persistent(megatron_cpu))
    _qualified(outcome)
    got, _ = _restore(outcome)
    assert (got.tier, got.iteration) == (tiers.PERSISTENT, 6)
    assert got.np_older is not None, "Megatron did not say the non-persistent checkpoint was older"


@launches(lambda megatron_cpu: _np_over_p(megatron_cpu))
def test_non_persistent_newer_than_a_persistent_one_is_restored(megatron_cpu, scenarios):  # noqa: F811
    outcome = scenarios.outcome(_np_over_p(megatron_cpu))
    _qualified(outcome)
    got, tl = _restore(outcome)
    assert (got.tier, got.iteration) == (tiers.NON_PERSISTENT, 5)
    assert tiers.tier_of_iteration(tl, 4) == tiers.PERSISTENT  # the persistent one it was newer than


# A user's job script (MEGATRON_PATH/pretrain_gpt.py) whose restarts run without the
# non-persistent flags; Megatron's own loop, unchanged, does the rest.
RESUME_WITHOUT_NP = Path(__file__).parent / "data" / "tiers-resume-without-np"


@launches(lambda megatron_cpu: _resume_without_np(megatron_cpu))
def test_a_replacement_without_the_non_persistent_flags_restores_an_older_tier_and_is_not_qualified(
        megatron_cpu, scenarios):  # noqa: F811
    outcome = scenarios.outcome(_resume_without_np(megatron_cpu))
    got, tl = _restore(outcome)
    assert (got.tier, got.iteration) == (tiers.PERSISTENT, 6), explain(outcome, "optimizer_reload")
    assert tiers.tier_of_iteration(tl, 7) == tiers.NON_PERSISTENT
    assert got.np_older is None  # Megatron said nothing: without the flag it never looked
    reload = outcome.verdict.criterion("optimizer_reload")
    assert reload.status == "fail" and reload.final, explain(outcome, "optimizer_reload")
    assert "restored persistent checkpoint 6" in reload.detail, reload.detail
    assert "older than non-persistent checkpoint 7" in reload.detail and "non_persistent/iter_0000007" in reload.detail
    assert not outcome.verdict.qualified
