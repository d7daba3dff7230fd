"""The fault matrix on the GPU tier (Megatron-LM's pretrain_gpt.py under ft_launcher), opt in:

    pytest -m gpu --megatron-path /path/to/Megatron-LM --fault-matrix quick   # one GPU is enough
    pytest -m gpu --megatron-path /path/to/Megatron-LM --fault-matrix full

The cells and their expected verdicts are the CPU matrix's (test_fault_matrix.MATRIX); `quick`
is the three moments a single-GPU node can show in a few minutes. Megatron's async saves of
a small model are short, so an in-save fault may find no save in flight: the verdict then says
the fault never happened (pre_fault_checkpoint), which is a finding about the window, not a
pass.
"""

from __future__ import annotations

import dataclasses

import pytest

from recovery_tests.test_fault_matrix import MATRIX, explain
from recovery_tests.test_recovery_gpu import megatron_scenario, record_latency

# each scenario follows from the GPUs and the Megatron checkout found when the test runs
pytestmark = [pytest.mark.gpu, pytest.mark.e2e,
              pytest.mark.launches(undeclarable="its scenario follows from the GPUs found when it runs")]

QUICK = ("kill-rank0-in-save", "kill-in-restore", "kill-last-iteration")


def selected(config: pytest.Config, name: str) -> None:
    choice = config.getoption("--fault-matrix")
    if choice == "off" or (choice == "quick" and name not in QUICK):
        pytest.skip(f"fault matrix cell {name}: opt in with --fault-matrix {'quick' if name in QUICK else 'full'}")


@pytest.mark.parametrize(("cell", "check"), [(c, k) for c in MATRIX for k in c.expected],
                         ids=[f"{c.id}-{k}" for c in MATRIX for k in c.expected])
def test_megatron_matrix_criterion(cell, check, gpu_env, scenarios, pytestconfig, record_property):
    selected(pytestconfig, cell.name)
    knobs = dict(cell.knobs)
    # One GPU: fault rank 0 whatever the cell says (megatron_scenario picks the rank the node has).
    knobs.pop("fault_rank", None)
    base = megatron_scenario(gpu_env, cell.fault, fault_at=cell.fault_at, **knobs)
    scenario = dataclasses.replace(base, name=f"{base.name}-{cell.name}", fail_fast=cell.fault != "poison",
                                   expect_qualified=cell.expect_qualified)
    outcome = scenarios.outcome(scenario)
    record_latency(record_property, outcome)
    c = outcome.verdict.criterion(check)
    assert c.status == cell.expected[check], explain(outcome, check)
    if check in cell.details:
        assert cell.details[check] in c.detail, explain(outcome, check)
