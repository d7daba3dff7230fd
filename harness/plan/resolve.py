"""Flags + environment + this machine -> a validated RunSpec with its NVRx target and ports.

Shared by the command line (`nvrx-qual plan | run | sbatch`), the repeat loop and the pytest
fixtures, so each builds its runs the same way. Raises SpecError / NvrxError; creates nothing.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable, Mapping

from harness.machine import discovery, nvrx, ports
from harness import workloads
from harness.plan import spec as specmod
from harness.plan.spec import RunSpec, SpecError


def _declared(field: str, flags: Mapping[str, object], env: Mapping[str, str]) -> object:
    """A knob's value as given (flag, else environment), parsed; None when not given."""
    knob = specmod.KNOBS_BY_FIELD[field]
    given = flags.get(field)
    if given is None and knob.env and env.get(knob.env, "") != "":
        given = env[knob.env]
    if isinstance(given, str):
        try:
            return knob.parse(given)
        except (ValueError, TypeError):
            return None  # from_sources reports it
    return given


def _given(field: str, flags: Mapping[str, object], env: Mapping[str, str]) -> bool:
    """The knob was given at all (a flag, even an empty one, or a non-empty environment name)."""
    knob = specmod.KNOBS_BY_FIELD[field]
    return flags.get(field) is not None or bool(knob.env and env.get(knob.env, "") != "")


def _named(field: str, flags: Mapping[str, object], env: Mapping[str, str]) -> str:
    """The knob as the user gave it, before a RunSpec exists (RunSpec.knob once it does)."""
    return specmod.knob_name(field, env=flags.get(field) is None and _given(field, flags, env))


def detected_defaults(flags: Mapping[str, object], env: Mapping[str, str], *,
                      probe: Callable[[list[str]], discovery.WorkerImports] | None = None,
                      gpu_stack: bool = True) -> dict:
    """Facts of this machine that feed RunSpec defaults (declared values always win).
    Transformer Engine and apex are imported in the interpreter that will run the workers
    (--python, or `uv run python`), only when one of them is not declared (seconds: it imports
    torch; gpu_stack=False leaves the GPU stack out). Raises SpecError when that interpreter
    cannot tell."""
    workload = workloads.find(_declared("workload", flags, env) or workloads.DEFAULT)
    uv = _declared("uv", flags, env)
    found = {"uv": discovery.uv_managed() if uv is None else uv}
    if workload is None or not workload.on_gpu or not gpu_stack:  # it matters only where ranks run on GPUs
        return found
    found["gpu_arch"] = discovery.gpu_arch(discovery.nvidia_smi_gpus())
    te, apex = _declared("transformer_engine", flags, env), _declared("apex", flags, env)
    if te is None or apex is None:
        # --no-sync: asking must not install anything into the project environment
        python = (["uv", "run", "--no-sync", "python"] if found["uv"]
                  else [str(_declared("python", flags, env) or sys.executable)])
        imports = (probe or discovery.worker_imports)(python)
        if imports.problem is not None:
            python_knob = "uv run" if found["uv"] else _named("python", flags, env)
            raise SpecError([f"could not ask the workers' interpreter whether Transformer Engine and apex import "
                             f"({imports.problem}): fix {python_knob}, or declare both with --transformer-engine 0|1 "
                             "--apex 0|1"])
        found["transformer_engine"], found["apex"] = imports.transformer_engine, imports.apex
    return found


def resolve_spec(flags: Mapping[str, object], extra: tuple[str, ...] = (), env: Mapping[str, str] | None = None,
                 *, for_sbatch: bool = False) -> tuple[RunSpec, nvrx.NvrxTarget, int]:
    """Flags (strings as typed, or typed values) + environment -> validated RunSpec with
    ports chosen, its NVRx target and the restored iteration. Raises SpecError /
    NvrxError; creates nothing. The pytest fixtures build their runs through this too."""
    env = dict(os.environ if env is None else env)
    flags = dict(flags)
    spec = specmod.from_sources(flags, env, extra, detected_defaults(flags, env, gpu_stack=False))
    problems: list[str] = []
    if (spec.nvrx_path is not None and _given("nvrx_path", flags, env)
            and (problem := nvrx.install_problem(spec.nvrx_path)) is not None):
        # A launcher path must hold an NVRx: never another one found on sys.path in its place.
        problems.append(f"{spec.say('nvrx_path')} {problem}: point it at a directory holding an NVRx install "
                        "(tools/install-nvrx-target.sh VERSION .nvrx/VERSION makes one), or use "
                        f"{spec.say('nvrx_path', '')} for the one pip installed")
    try:
        specmod.validate(spec, needs_endpoint=not for_sbatch)
    except SpecError as exc:
        problems += exc.problems
    if problems:
        # Refused before the workers' interpreter is asked about the GPU stack (it imports torch,
        # seconds): no rule depends on its answer but to add a refusal (context parallelism
        # without Transformer Engine), which the validation below, with the answer, still makes.
        raise SpecError(problems)
    stack = detected_defaults(flags, env)
    spec = dataclasses.replace(spec, **{k: v for k, v in stack.items()
                                        if k != "uv" and v is not None and not _given(k, flags, env)})
    if _given("nvrx_path", flags, env) or _given("nvrx_version", flags, env):
        # `--nvrx-path ''`: the one pip installed
        target = nvrx.resolve(spec.nvrx_version, spec.nvrx_path, version_name=spec.knob("nvrx_version"))
    else:  # neither given: the newest this machine has, pip's or a side-by-side .nvrx/VERSION
        target = nvrx.newest() or nvrx.resolve(None, None)
        spec = dataclasses.replace(spec, nvrx_path=target.path)
    rdzv_port, log_port = ports.free_ports(2)
    picked: dict[str, object] = {}
    if (spec.nnodes == 1 or spec.local_nodes) and not spec.rdzv_endpoint:
        picked["rdzv_endpoint"] = f"127.0.0.1:{rdzv_port}"
    if target.routes_logs and spec.log_server_port is None:
        picked["log_server_port"] = log_port
    spec = spec.with_picked(**picked)
    restored = specmod.validate(spec, needs_endpoint=not for_sbatch)
    return spec, target, restored
