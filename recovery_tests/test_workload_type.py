"""A workload is one Workload (harness.workloads): this file defines one, registers it, and plans
and judges a run of it through the type alone, without touching any other module of the house.
The rest of the suite checks the built-in ones; here the point is that nothing outside
harness/workloads/ needs to know a workload's name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness import workloads
from harness.judge.criteria import STATE_EQUIVALENCE
from harness.vocab.faults import AFTER_COMMIT
from harness.machine.nvrx import NvrxTarget
from harness.report.verify import verify_run
from harness.workloads import Determinism, Workload
from recovery_tests import rundirs

TOY_SCRIPT = Path("/opt/toy/train.py")


class Toy(Workload):
    """A CPU workload of a test's own: its own script and flags, one fault moment, a knob of its
    own refused to others, deterministic by its own account."""

    name = "toy-cpu"
    summary = "toy-cpu (a test's own)"
    defaults = dict(gpus_per_node=2, num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
                    vocab_size=256, train_iters=20, save_interval=5, deadline_profile="reference", baseline="none")
    moments = (AFTER_COMMIT,)
    scope_note = "the toy run qualifies nothing but the Workload type."

    def argv(self, spec) -> list[str]:
        return [str(TOY_SCRIPT), "--iters", str(spec.train_iters), "--save", str(spec.layout.checkpoints),
                "--every", str(spec.save_interval), *spec.extra_args]

    def entrypoint(self, spec) -> Path:
        return TOY_SCRIPT

    def extra_arg_problems(self, extra: tuple[str, ...]) -> list[str]:
        return [f"workload argument {a} is not the toy's: remove it" for a in extra if a == "--iters"]

    def determinism(self, timeline) -> Determinism:
        return Determinism(True, "deterministic", {"workload": self.name})


@pytest.fixture
def toy():
    registered = workloads.register(Toy())
    try:
        yield registered
    finally:
        workloads.unregister(Toy.name)


def _spec(tmp_path: Path, **flags) -> specmod.RunSpec:
    return specmod.from_sources({"workload": "toy-cpu", "work_dir": tmp_path, "run_id": "toy-1",
                                 "rdzv_endpoint": "127.0.0.1:29555", **flags}, {})


def test_an_unregistered_workload_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(specmod.SpecError, match="--workload='toy-cpu' is not valid: use megatron, megatron-cpu, "
                                                 "megatron-bridge or reference"):
        specmod.from_sources({"workload": "toy-cpu"}, {})


def test_a_workload_of_one_file_is_planned_through_its_type(tmp_path: Path, toy: Toy) -> None:
    spec = _spec(tmp_path)
    assert spec.workload_type is toy
    assert (spec.train_iters, spec.save_interval, spec.baseline) == (20, 5, "none")  # its defaults
    assert specmod.validate(spec) == 0
    plan = planmod.build(spec, NvrxTarget("0.7.0"))
    argv = list(plan.launcher.argv)
    assert argv[argv.index("--") + 1:] == [str(TOY_SCRIPT), "--iters", "20", "--save", str(spec.layout.checkpoints),
                                           "--every", "5"]
    assert plan.connections.value is None and "toy-cpu" in plan.connections.reason


def test_its_refusals_come_from_the_type(tmp_path: Path, toy: Toy) -> None:
    with pytest.raises(specmod.SpecError) as err:
        specmod.validate(_spec(tmp_path, fault_at="in-save", train_iters=30))
    assert "the toy-cpu workload cannot show this moment; use one of after-commit" in str(err.value)
    with pytest.raises(specmod.SpecError) as err:
        specmod.validate(_spec(tmp_path, save_delay_ms=100))
    assert "--save-delay-ms is a knob of the reference workload only" in str(err.value)
    with pytest.raises(specmod.SpecError) as err:
        specmod.validate(_spec(tmp_path, fault="gpu-hang"))
    assert "--fault=gpu-hang needs a GPU" in str(err.value)
    with pytest.raises(specmod.SpecError, match="workload argument --iters is not the toy's"):
        planmod.build(dataclasses.replace(_spec(tmp_path), extra_args=("--iters",)), NvrxTarget("0.7.0"))


def test_a_run_of_it_is_judged_through_its_type(tmp_path: Path, toy: Toy) -> None:
    """state_equivalence asks the workload whether its training is deterministic: the toy says
    it is, and the verdict says so in the toy's name; unregistered, the same run directory is a
    workload the suite does not know, judged within tolerances."""
    judged = rundirs.build(tmp_path / "judged", rundirs.Scenario()).run_dir
    base = rundirs.build(tmp_path / "base", rundirs.Scenario(fault="none")).run_dir
    for run_dir in (judged, base):
        record = json.loads((run_dir / "run.json").read_text())
        record["spec"]["workload"] = "toy-cpu"
        (run_dir / "run.json").write_text(json.dumps(record))
    verdict = verify_run(judged, baseline=base, picture=False)
    assert verdict.qualified, [(c.id, c.status, c.detail) for c in verdict.criteria]
    assert "the toy-cpu workload is bitwise deterministic" in verdict.criterion(STATE_EQUIVALENCE).detail
    workloads.unregister(Toy.name)
    unknown = verify_run(judged, baseline=base, picture=False).criterion(STATE_EQUIVALENCE)
    assert "the toy-cpu workload is not bitwise deterministic" in unknown.detail, unknown.detail
