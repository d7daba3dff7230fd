"""Every refusal names what the user typed (issue 36 item 3): a knob whose value came from a
flag by its flag, one whose value came from the environment by its environment name, each with
its fix, never the other name. The mechanism: from_sources records where each value came from
(RunSpec.from_env) and every message names a knob through one function (spec.knob_name, via
RunSpec.knob / RunSpec.say). This test walks every Knob.check, every problem of validate() and
of the planner's check with the values given both ways, and fails when a message names the
other one; typed values (the pytest fixtures, library callers) name the flag."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.machine.nvrx import NvrxTarget


def _empty(root: Path) -> dict[str, str]:
    return {}


def _ckpt(tracker: str | None, *names: str) -> Callable[[Path], dict[str, str]]:
    """A checkpoint directory of the user's with that tracker and those entries."""
    def make(root: Path) -> dict[str, str]:
        ckpt = root / "ckpt"
        ckpt.mkdir()
        if tracker is not None:
            (ckpt / "latest_checkpointed_iteration.txt").write_text(tracker)
        for name in names:
            (ckpt / name).mkdir() if name.startswith("iter_") else (ckpt / name).write_text("{}")
        return {"checkpoint_dir": str(ckpt)}
    return make


def _in_run_dir(name: str) -> Callable[[Path], dict[str, str]]:
    """Run directory r1 already holding `name` (a file, or a directory with a file when it ends in /)."""
    def make(root: Path) -> dict[str, str]:
        run = root / "work" / "runs" / "r1"
        target = run / name.rstrip("/")
        if name.endswith("/"):
            target.mkdir(parents=True)
            (target / "old.log").write_text("x")
        else:
            run.mkdir(parents=True)
            target.write_text("{}")
        return {"run_id": "r1"}
    return make


def _work_dir_is_a_file(root: Path) -> dict[str, str]:
    (root / "afile").write_text("x")
    return {"work_dir": str(root / "afile" / "work")}


@dataclass(frozen=True)
class Case:
    """Values (as typed) that make one rule refuse; `knob`: the knob whose rule it is (a
    Knob.check's field) or the validate() problem it stands for (`validate:<what>`)."""

    knob: str
    flags: dict[str, str]
    setup: Callable[[Path], dict[str, str]] = _empty
    nvrx: str = "0.7.0"
    named: str = ""  # the knob the message must name (default: `knob`)
    extra: tuple[str, ...] = field(default=())


CASES = (
    # ---- every Knob.check
    Case("workload", {"tp": "3"}, named="tp"),
    Case("megatron_path", {"workload": "megatron", "megatron_path": "{root}/no-megatron"}),
    Case("megatron_cpu_dir", {"workload": "megatron-cpu", "megatron_cpu_dir": "{root}/no-install"}),
    Case("megatron_bridge_dir", {"workload": "reference", "megatron_bridge_dir": "{root}/bridge"}),  # another's knob
    Case("megatron_bridge_dir", {"workload": "megatron-bridge", "megatron_bridge_dir": "{root}/no-install"}),
    Case("nnodes", {"nnodes": "3:2"}),
    Case("train_iters", {"train_iters": "-5"}),
    Case("save_interval", {"save_interval": "0"}),
    Case("fault", {"fault": "node"}),
    Case("fault_at", {"faults": "3", "seed": "1", "fault_at": "in-save"}),
    Case("fault_after", {"fault_after": "non-persistent"}),
    Case("fault_rank", {"fault_rank": "7"}),
    Case("faults", {"faults": "100"}),
    Case("seed", {"seed": "3"}),
    Case("fault_kinds", {"fault_kinds": "kill"}),
    Case("hot_spares", {"hot_spares": "-1"}),
    Case("rdzv_join_timeout", {"rdzv_join_timeout": "0"}),
    Case("local_nodes", {"local_nodes": "1"}),
    Case("rdzv_endpoint", {"rdzv_endpoint": "nohost"}),
    Case("section_timeouts", {"section_timeouts": "setup:nan,step:1,checkpointing:1"}),
    Case("out_of_section_timeout", {"out_of_section_timeout": "nan"}),
    Case("max_restarts", {"max_restarts": "0"}),
    Case("max_restarts", {"fault_at": "in-restore", "max_restarts": "1"}),
    Case("max_no_progress_cycles", {"max_no_progress_cycles": "0"}),
    Case("monitor_interval", {"monitor_interval": "0"}),
    Case("workload_check_interval", {"workload_check_interval": "inf"}),
    Case("poll_interval", {"poll_interval": "0"}),
    Case("save_delay_ms", {"save_delay_ms": "-5"}),
    # ---- every problem of validate() itself
    Case("validate:run-id-length", {"run_id": "a" * 130}, named="run_id"),
    Case("validate:run-id-pattern", {"run_id": "bad id"}, named="run_id"),
    Case("validate:marker", {}, _in_run_dir("fault_injected.json"), named="run_id"),
    Case("validate:launch-json", {}, _in_run_dir("launch.json"), named="run_id"),
    Case("validate:leftovers", {}, _in_run_dir("logs/"), named="run_id"),
    Case("validate:work-dir", {}, _work_dir_is_a_file, named="work_dir"),
    Case("validate:checkpoint-dir", {"checkpoint_dir": "{root}/missing"}, named="checkpoint_dir"),
    Case("validate:ft-state", {}, _ckpt("5", "ft_state.json"), named="checkpoint_dir"),
    Case("validate:newer", {}, _ckpt("5", "iter_0000010"), named="checkpoint_dir"),
    Case("validate:restored", {"train_iters": "100"}, _ckpt("95"), named="train_iters"),
    Case("validate:reach", {"save_interval": "50", "train_iters": "30"}, named="save_interval"),
    Case("validate:reach", {"fault_at": "in-save", "save_interval": "5", "train_iters": "10"}, named="train_iters"),
    Case("validate:endpoint", {"nnodes": "2", "assume_shared_storage": "1"}, named="nnodes"),
    Case("validate:node-local", {"nnodes": "2", "rdzv_endpoint": "n1:29400"}, named="work_dir"),
    # ---- the planner's refusals (plan.check)
    Case("plan:megatron-ft", {"workload": "megatron-cpu", "megatron_cpu_dir": "{root}/no-install"}, nvrx="0.4.1",
         named="nvrx_version"),
    Case("plan:shrink", {"nnodes": "1:2", "local_nodes": "1"}, named="nnodes"),
    Case("plan:poison", {"fault": "poison", "max_restarts": "3"}, nvrx="0.4.1", named="fault"),
    Case("plan:no-progress", {"max_no_progress_cycles": "2"}, nvrx="0.4.1", named="max_no_progress_cycles"),
    Case("plan:warmup", {"workload": "megatron-cpu", "megatron_cpu_dir": "{root}/no-install", "train_iters": "8",
                         "save_interval": "2"}, named="train_iters"),
)
IDS = [f"{c.knob}-{'-'.join(c.flags) or 'setup'}" for c in CASES]


def _env_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")


def _flag_pattern(flag: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9-]){re.escape(flag)}(?![A-Za-z0-9-])")


def refusals(case: Case, root: Path, flags: dict[str, object], env: dict[str, str]) -> list[str]:
    """Every problem validate() and the planner's check find in the plan built from these values."""
    own = "work_dir" in flags or specmod.KNOBS_BY_FIELD["work_dir"].env in env
    spec = specmod.from_sources({**({} if own else {"work_dir": str(root / "work")}), **flags}, env)
    problems: list[str] = []
    try:
        specmod.validate(spec)
    except specmod.SpecError as exc:
        problems += exc.problems
    try:
        planmod.check(spec, NvrxTarget(case.nvrx))
    except specmod.SpecError as exc:
        problems += exc.problems
    return problems


def given(case: Case, root: Path) -> dict[str, str]:
    values = {k: v.format(root=root) for k, v in case.flags.items()}
    values.update(case.setup(root))
    return {"workload": "reference", **values}


def named_wrongly(problems: list[str], by_flag: set[str], by_env: set[str]) -> list[str]:
    """Every problem that names a knob given by flag by its environment name, or one given in the
    environment by its flag."""
    wrong = []
    for problem in problems:
        for field_ in by_flag:
            env = specmod.KNOBS_BY_FIELD[field_].env
            if env and _env_pattern(env).search(problem):
                wrong.append(f"{field_} came from its flag, the message names {env}: {problem}")
        for field_ in by_env:
            flag = specmod.KNOBS_BY_FIELD[field_].flag
            if _flag_pattern(flag).search(problem):
                wrong.append(f"{field_} came from {specmod.KNOBS_BY_FIELD[field_].env}, the message names {flag}: "
                             f"{problem}")
    return wrong


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_refusal_names_the_knob_as_it_was_given(tmp_path: Path, case: Case) -> None:
    named = case.named or case.knob
    # 1. every value from a flag
    flag_root = tmp_path / "flags"
    flag_root.mkdir()
    values = given(case, flag_root)
    problems = refusals(case, flag_root, values, {})
    assert problems, f"{case.knob}: the values {values} were not refused"
    assert not named_wrongly(problems, set(values), set()), named_wrongly(problems, set(values), set())
    flag = specmod.KNOBS_BY_FIELD[named].flag
    assert any(_flag_pattern(flag).search(p) for p in problems), (flag, problems)

    # 2. the same values from the environment, wherever a knob has an environment name
    env_root = tmp_path / "env"
    env_root.mkdir()
    values = given(case, env_root)
    in_env = {f for f in values if specmod.KNOBS_BY_FIELD[f].env}
    env = {specmod.KNOBS_BY_FIELD[f].env: values[f] for f in in_env}
    flags = {f: v for f, v in values.items() if f not in in_env}
    problems = refusals(case, env_root, flags, env)
    assert problems, f"{case.knob}: the values {env} were not refused"
    assert not named_wrongly(problems, set(flags), in_env), named_wrongly(problems, set(flags), in_env)
    knob = specmod.KNOBS_BY_FIELD[named]
    expected = knob.env if named in in_env else knob.flag
    pattern = _env_pattern(expected) if named in in_env else _flag_pattern(expected)
    assert any(pattern.search(p) for p in problems), (expected, problems)


KNOB_CASES = [c for c in CASES if ":" not in c.knob]


@pytest.mark.parametrize("case", KNOB_CASES, ids=[f"{c.knob}-{'-'.join(c.flags)}" for c in KNOB_CASES])
def test_typed_values_name_the_flag(tmp_path: Path, case: Case) -> None:
    """The pytest fixtures and library callers pass typed values: the same messages as for the
    same values typed on the command line (which name the flags, above)."""
    values = given(case, tmp_path)
    typed = {f: specmod.KNOBS_BY_FIELD[f].parse(v) for f, v in values.items()}
    assert refusals(case, tmp_path, typed, {}) == refusals(case, tmp_path, values, {})


def _problem_sites(module: object, name: str) -> int:
    """How many problems a module's function appends (problems.append(...) calls in its source,
    read from the file: a test may have wrapped the live function)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return sum(1 for node in ast.walk(function)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
               and isinstance(node.func.value, ast.Name) and node.func.value.id == "problems")


def test_the_walk_covers_every_rule() -> None:
    """Every knob with a check has a case, and validate() has a case per problem it appends
    itself: a new rule without a case fails here (then add its case to CASES)."""
    checked = {k.field for k in specmod.KNOBS if k.check is not None}
    assert checked <= {c.knob for c in CASES}, sorted(checked - {c.knob for c in CASES})
    validate_cases = {c.knob for c in CASES if c.knob.startswith("validate:")} - {"validate:reach"}
    assert len(validate_cases) == _problem_sites(specmod, "validate"), sorted(validate_cases)
    # the Megatron workloads' own (Workload.plan_problems): the warmup and the NVRx with FT
    plan_cases = {c.knob for c in CASES if c.knob.startswith("plan:")} - {"plan:warmup", "plan:megatron-ft"}
    assert len(plan_cases) == _problem_sites(planmod, "check"), sorted(plan_cases)


def test_the_walk_can_fail() -> None:
    """The check itself: a message naming the other name is caught."""
    assert named_wrongly(["TRAIN_ITERS=-5 must be a positive integer"], {"train_iters"}, set())
    assert named_wrongly(["--train-iters=-5 must be a positive integer"], set(), {"train_iters"})
    assert not named_wrongly(["--train-iters=-5 must be a positive integer"], {"train_iters"}, set())
    assert not named_wrongly(["--tp-comm-overlap is not TP"], set(), {"pp"})
