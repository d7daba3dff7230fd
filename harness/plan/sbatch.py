"""A complete sbatch script in the Slurm guide's shape for one qualification run.

One task per node, one ft_launcher per task forming one worker group across the nodes,
MASTER_ADDR from `scontrol show hostnames`, logs on the run directory (shared storage),
`uv run python -m ...` where the environment is uv-managed, container flags on the srun
line, then `nvrx-qual verify` on the run directory.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import unicodedata
from dataclasses import dataclass

from harness.plan import commands as planmod
from harness.machine import ports
from harness.vocab.layout import MARKER_GLOB, MARKER_NAME
from harness.plan.spec import SpecError


@dataclass(frozen=True)
class SbatchOptions:
    account: str | None = None
    partition: str | None = None
    time: str = "01:00:00"
    job_name: str | None = None
    container_image: str | None = None
    container_mounts: str | None = None
    container_workdir: str | None = None

    def container_flags(self) -> tuple[str, ...]:
        flags = []
        if self.container_image:
            flags.append(f"--container-image={self.container_image}")
        if self.container_mounts:
            flags.append(f"--container-mounts={self.container_mounts}")
        if self.container_workdir:
            flags.append(f"--container-workdir={self.container_workdir}")
        return tuple(flags)


def _control_characters(text: str) -> list[str]:
    return sorted({repr(c) for c in text if unicodedata.category(c) == "Cc"})


def _option_values(opts: SbatchOptions) -> list[tuple[str, str]]:
    values = [(f"--{f.name.replace('_', '-')}", getattr(opts, f.name)) for f in dataclasses.fields(opts)]
    return [(name, value) for name, value in values if value is not None]


def rendered_values(p: planmod.Plan, opts: SbatchOptions, verify_python: list[str]) -> list[tuple[str, str]]:
    """(name, value) of everything the script holds that did not come from this module."""
    values = _option_values(opts)
    values += [("the verify interpreter", w) for w in verify_python]
    values += [("the launcher command", w) for w in p.launcher.argv]
    values += [(f"environment {k}", v) for k, v in p.launcher.env]
    values += [("PYTHONPATH", w) for w in p.launcher.pythonpath]
    values.append(("the working directory", str(p.launcher.cwd)))
    return [(name, value) for name, value in values if value is not None]


def check(p: planmod.Plan, opts: SbatchOptions, verify_python: list[str] = ()) -> None:
    """Every value rendered into the script is refused when it holds a control character (a
    newline would become a shell line, and sbatch stops reading #SBATCH lines there); the
    values of #SBATCH lines are double-quoted for sbatch, which cannot carry `"` or `\\`."""
    problems = []
    for name, value in rendered_values(p, opts, list(verify_python)):
        bad = _control_characters(value)
        if bad:
            problems.append(f"{name} {value!r} holds control character(s) {', '.join(bad)}: a batch script cannot "
                            "carry them safely; remove them")
    problems += planmod.placeholder_problems(_option_values(opts))
    for name, value in _header_values(p, opts):
        if ('"' in value or "\\" in value) and not _control_characters(value):
            problems.append(f"{name} {value!r} holds '\"' or '\\': sbatch cannot read them in an #SBATCH line; "
                            "choose a value without them")
    if p.spec.local_nodes:
        problems.append("--local-nodes 1 starts every launcher on one machine without Slurm: drop it for a batch "
                        "script, whose srun starts one launcher per node")
    if not p.nvrx.routes_logs:
        problems.append(f"nvrx-qual sbatch needs NVRx >= 0.6.0, whose launcher writes the run's logs itself "
                        f"(planned for {p.nvrx.version}): pass --nvrx-version with the cluster's version")
    if not _valid_time(opts.time):
        problems.append(f"--time={opts.time!r} is not a Slurm time: use HH:MM:SS or D-HH:MM:SS")
    if problems:
        raise SpecError(problems)


def _header_values(p: planmod.Plan, opts: SbatchOptions) -> list[tuple[str, str]]:
    values = [("--job-name", _job_name(p, opts)), ("--account", opts.account), ("--partition", opts.partition),
              ("the run directory", str(p.layout.logs))]
    return [(name, value) for name, value in values if value is not None]


def _job_name(p: planmod.Plan, opts: SbatchOptions) -> str:
    return opts.job_name or f"nvrx-qual-{p.spec.run_id}"


_BARE = re.compile(r"[A-Za-z0-9._/:%=+,@-]+")
# The batch script's reading of layout.marker_index, as shell `case` patterns: fault 1's marker,
# then fault_injected.<2..99>.json (test_sbatch_render holds the two to the same names).
MARKER_CASES = (MARKER_NAME, "fault_injected.[2-9].json", "fault_injected.[1-9][0-9].json")


def _sbatch_word(value: str) -> str:
    """A value of an #SBATCH line, bare as in the Slurm guide when that is safe, else in double
    quotes, which sbatch reads (check() refused `"`, `\\` and control characters)."""
    return value if _BARE.fullmatch(value) else f'"{value}"'


def _valid_time(text: str) -> bool:
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    return (not days or days.isdigit()) and 1 <= len(parts) <= 3 and all(x.isdigit() for x in parts)


def _continued(argv: list[str], indent: str = "    ") -> str:
    """One flag (with its value) per line, joined by backslash-newline; every word quoted."""
    groups: list[list[str]] = []
    for word in argv:
        # a flag starts a line; so does a word after a self-contained --flag=value
        if not groups or word.startswith("-") or "=" in groups[-1][-1] and groups[-1][-1].startswith("--"):
            groups.append([word])
        else:
            groups[-1].append(word)
    return (" \\\n" + indent).join(planmod.join(g) for g in groups)


def render(p: planmod.Plan, opts: SbatchOptions, verify_python: list[str]) -> str:
    check(p, opts, verify_python)
    spec, layout = p.spec, p.layout
    q = shlex.quote
    job = _sbatch_word(_job_name(p, opts))
    # Slurm expands %-patterns in --output/--error: a literal % of the path is written %%.
    logs = str(layout.logs).replace("%", "%%")
    header = [
        "#!/bin/bash",
        f"# nvrx-qual: run {spec.run_id}: {spec.workload}, fault {spec.fault}"
        + ("" if spec.fault == "none" else f" on rank {spec.fault_rank}")
        + f", {spec.nnodes} node(s) x {spec.gpus_per_node} GPU(s)"
        + (f" + {spec.hot_spares} hot spare node(s)" if spec.hot_spares else "")
        + f", TP={spec.tp} PP={spec.pp}, NVRx {p.nvrx.version}",
        f"#SBATCH --job-name={job}",
    ]
    if opts.account:
        header.append(f"#SBATCH --account={_sbatch_word(opts.account)}")
    if opts.partition:
        header.append(f"#SBATCH --partition={_sbatch_word(opts.partition)}")
    header += [
        f"#SBATCH --nodes={planmod.launchers(spec)}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if spec.workload_type.on_gpu:
        header.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    header += [
        f"#SBATCH --time={opts.time}",  # check() accepts digits, ':' and '-' only
        f"#SBATCH --output={_sbatch_word(logs + '/slurm-%x-%j.out')}",
        f"#SBATCH --error={_sbatch_word(logs + '/slurm-%x-%j.err')}",
    ]
    run_dir = q(str(layout.root))
    free_ports = " ".join(q(w) for w in verify_python) + " - 2 <<'NVRX_QUAL_PORTS'\n" + ports.FREE_PORTS_SNIPPET \
        + "NVRX_QUAL_PORTS\n"
    body = [
        "",
        "set -euo pipefail",
        f"cd {q(str(p.launcher.cwd))}",
        "",
        f"RUN_DIR={run_dir}",
        "# Every test needs a fresh run ID: a marker (one per planned fault) stops replacement workers from",
        "# injecting again.",
        f'for marker in "$RUN_DIR"/{MARKER_GLOB}; do',
        '  case "${marker##*/}" in',
        f'    {"|".join(MARKER_CASES)})',
        '      echo "nvrx-qual: $RUN_DIR already holds ${marker##*/}: plan a new run ID" >&2',
        "      exit 2;;",
        "  esac",
        "done",
        "",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "# The batch step runs on the first node: ports free on it (rendezvous, NVRx log server), outside the",
        "# range its OS hands out by itself, so no srun socket takes one before the launcher binds it.",
        f"read -r RDZV_PORT NVRX_LOG_SERVER_PORT < <({free_ports})",
        'export RDZV_ENDPOINT="${MASTER_ADDR}:${RDZV_PORT}"',
        "export NNODES=${SLURM_NNODES}",
        f"export GPUS_PER_NODE={spec.gpus_per_node}",
    ]
    for key, value in p.launcher.env:
        if key == "CUDA_DEVICE_MAX_CONNECTIONS":
            body.append(f"# {p.connections.reason}")
        body.append(f"export {key}={q(value)}")
    if p.connections.value is None and spec.workload_type.on_gpu:
        body.append(f"# CUDA_DEVICE_MAX_CONNECTIONS left unset: {p.connections.reason}")
    if p.launcher.pythonpath:
        body.append(f"export PYTHONPATH={q(':'.join(p.launcher.pythonpath))}${{PYTHONPATH:+:$PYTHONPATH}}")
    srun = planmod.srun_prefix(spec, p.nvrx, opts.container_flags())
    srun[1] = "--ntasks=" + planmod.shell_var("NNODES")
    body += [
        "",
        "set +e",
        _continued(srun + list(p.launcher.argv)),
        "launcher_status=$?",
        "set -e",
        'echo "nvrx-qual: launcher exit status ${launcher_status}; verifying $RUN_DIR"',
        "# The verdict, not the launcher's exit status, decides: 0 qualified, 1 a criterion failed.",
        " ".join(q(w) for w in verify_python) + ' -m harness verify "$RUN_DIR"',
    ]
    return "\n".join(header + body) + "\n"
