"""Real launches judged against their contract (issue 31): planned faults that cannot fire.

The reference workload under the real ft_launcher, its run.json's contract planning more faults
than its nemesis is told to inject (the nemesis's own --schedule / --fault-at cut to the first
fault; nothing of NVRx or torch is touched): the one fault that fires recovers, the launcher
reports success, and the run must still be NOT QUALIFIED, naming the planned faults that never
fired. Without the contract's check both runs qualified (clean_finish said "exactly 3
injections")."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

from pytest_nvrx_qual.runs import SPEC_ENV_NAMES
from harness.plan import commands as planmod
from harness.plan import resolve
from harness.launch import runner
from harness.judge.criteria import FAIL, LAUNCHER_IDENTITY, PASS
from harness.vocab.faults import schedule_text

pytestmark = [pytest.mark.e2e, pytest.mark.launch]  # each test launches its own plan


def _plan(newest_launcher, run_allocator, name: str, **knobs) -> planmod.Plan:
    flags = {"workload": "reference", "work_dir": run_allocator.work_dir, "run_id": run_allocator.new_run_id(name),
             "nvrx_version": newest_launcher.version, "nvrx_path": newest_launcher.path, "baseline": "none", **knobs}
    env = {k: v for k, v in os.environ.items() if k not in SPEC_ENV_NAMES}
    spec, target, _ = resolve.resolve_spec(flags, (), env)
    return planmod.build(spec, target)


def _nemesis_told(plan: planmod.Plan, old: tuple[str, ...], new: tuple[str, ...]) -> planmod.Plan:
    """The plan with the nemesis's own options `old` replaced by `new` in the launcher command
    (run.json's contract still records what the spec planned)."""
    argv = list(plan.launcher.argv)
    at = next(i for i in range(len(argv)) if tuple(argv[i:i + len(old)]) == old)
    argv[at:at + len(old)] = new
    return dataclasses.replace(plan, launcher=dataclasses.replace(plan.launcher, argv=tuple(argv)))


def _launch(plan: planmod.Plan) -> runner.Outcome:
    return runner.execute(plan, deadline_s=runner.scenario_deadline(plan.spec), out=sys.stdout)


def _explain(outcome: runner.Outcome) -> str:
    return "\n".join(f"{c.id}: {c.status}: {c.detail}" for c in outcome.verdict.criteria) + \
        f"\nrun directory: {outcome.run_dir}"


def test_a_campaign_whose_later_faults_cannot_fire_is_not_qualified_naming_them(newest_launcher, run_allocator):
    plan = _plan(newest_launcher, run_allocator, "contract-campaign", fault="campaign", faults=3, seed=5,
                 fault_kinds=("kill",))
    schedule = plan.spec.schedule
    assert len(schedule) == 3
    told = _nemesis_told(plan, ("--schedule", schedule_text(schedule)), ("--schedule", schedule_text(schedule[:1])))
    outcome = _launch(told)
    v = outcome.verdict
    assert [e.number for e in v.episodes] == [1], _explain(outcome)
    assert all(c.status == PASS for c in v.episodes[0].criteria if c.id not in v.episodes[0].superseded), _explain(outcome)
    finish = v.criterion("clean_finish")
    named = " and ".join(f"fault {i} ({f.kind} on rank {f.rank}, {f.moment})" for i, f in enumerate(schedule, 1)
                         if i > 1)
    assert finish.status == FAIL and f"2 of the 3 planned faults never fired: {named}" in finish.detail, _explain(outcome)
    assert not v.qualified and outcome.launch.launcher_exit_code == 0  # the launcher itself reported success
    assert v.criterion(LAUNCHER_IDENTITY).status == PASS, _explain(outcome)  # the real nemesis said which NVRx


def test_an_in_restore_run_whose_second_fault_cannot_fire_is_not_qualified(newest_launcher, run_allocator):
    plan = _plan(newest_launcher, run_allocator, "contract-in-restore", fault="kill", fault_at="in-restore")
    told = _nemesis_told(plan, ("--fault-at", "in-restore"), ())
    outcome = _launch(told)
    v = outcome.verdict
    finish = v.criterion("clean_finish")
    assert finish.status == FAIL, _explain(outcome)
    assert f"1 of the 2 planned faults never fired: fault 2 (kill on rank {plan.spec.fault_rank}, in-restore)" \
        in finish.detail, _explain(outcome)
    assert not v.qualified and [e.number for e in v.episodes] == [1]
