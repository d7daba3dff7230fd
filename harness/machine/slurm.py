"""The Slurm allocation the suite runs in, and the commands that stop one job step.

Killing a local `srun` does not reliably stop its remote tasks, so an early stop cancels
the step by name (`srun --job-name=<run step>`): squeue lists the allocation's steps,
scancel cancels the one with our name.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping

Runner = Callable[[list[str]], str]  # argv -> stdout; raises on failure


def run_command(argv: list[str], timeout_s: float = 30.0) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=timeout_s).stdout


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[str, ...]
    gpus_per_node: int | None

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def first_host(self) -> str:
        return self.nodes[0]

    @classmethod
    def from_env(cls, env: Mapping[str, str], runner: Runner = run_command) -> "Allocation | None":
        """None outside an allocation. Node names come from `scontrol show hostnames`, as in
        the Slurm guide (it expands node-list ranges like gpu[001-004])."""
        job = env.get("SLURM_JOB_ID")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not job or not nodelist:
            return None
        nodes = tuple(h for h in runner(["scontrol", "show", "hostnames", nodelist]).split() if h)
        return cls(job_id=job, nodes=nodes, gpus_per_node=_gpus_per_node(env))


def _gpus_per_node(env: Mapping[str, str]) -> int | None:
    for key in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = env.get(key, "")
        digits = value.rsplit(":", 1)[-1].split("(")[0]  # "4", "h100:4", "4(x2)"
        if digits.isdigit():
            return int(digits)
    return None


def step_name(run_id: str) -> str:
    return f"nvrx-qual-{run_id}"


def list_steps_argv(job_id: str) -> list[str]:
    return ["squeue", "--steps", "--noheader", "--format=%i|%j", f"--jobs={job_id}"]


def find_step(squeue_output: str, name: str) -> str | None:
    """The step id (`<job>.<step>`) whose name is `name`, from list_steps_argv's output."""
    for line in squeue_output.splitlines():
        step, _, step_name_ = line.strip().partition("|")
        if step_name_ == name:
            return step
    return None


def cancel_step_argv(step_id: str) -> list[str]:
    return ["scancel", step_id]


def cancel_step(job_id: str, name: str, runner: Runner = run_command) -> str | None:
    """Cancel our step; returns its id, or None when it is already gone."""
    step = find_step(runner(list_steps_argv(job_id)), name)
    if step:
        runner(cancel_step_argv(step))
    return step


def free_port_on_argv(host: str, python: str, snippet: str, count: int = 1) -> list[str]:
    """Ask `host`'s own OS for free ports (the rendezvous store binds there), as a one-task step."""
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--overlap", python, "-c", snippet, str(count)]


def free_ports_on(host: str, python: str, count: int, runner: Runner = run_command) -> list[int]:
    from harness.machine.ports import FREE_PORTS_SNIPPET

    words = runner(free_port_on_argv(host, python, FREE_PORTS_SNIPPET, count)).split()
    ports = [int(w) for w in words if w.isdigit() and 0 < int(w) < 65536]
    if len(ports) != count or len(set(ports)) != count:
        raise RuntimeError(f"asking {host} for {count} free port(s) returned {' '.join(words)[:200]!r}")
    return ports


def free_port_on(host: str, python: str, runner: Runner = run_command) -> int:
    return free_ports_on(host, python, 1, runner)[0]


def rendezvous_ports(allocation: Allocation, python: str, runner: Runner = run_command) -> tuple[str, int]:
    """The rendezvous endpoint and NVRx's log-server port, both asked from the first host's OS at
    start: that host runs the rendezvous store and, with NVRx >= 0.6, the only log server, which
    every node's launcher reaches at the same port. Never chosen on the submitting host, whose
    free ports say nothing about the first host's."""
    rdzv, log_server = free_ports_on(allocation.first_host, python, 2, runner)
    return f"{allocation.first_host}:{rdzv}", log_server


_HOSTLIST_PART = re.compile(r"([^,\[]*)(?:\[([^\]]*)\])?([^,\[]*)")
_MAX_HOSTS = 100_000


def expand_hostlist(text: str) -> tuple[str, ...] | None:
    """`n[1-3,7],gpu01` -> ('n1', 'n2', 'n3', 'n7', 'gpu01'), as `scontrol show hostnames` (one
    bracket per name, zero-padded ranges kept). None when the text is not a host list."""
    hosts: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _HOSTLIST_PART.match(text, pos)
        if m is None or m.end() == pos:
            return None
        prefix, ranges, suffix = m.groups()
        if ranges is None:
            if not prefix or suffix:
                return None
            hosts.append(prefix)
        else:
            for part in ranges.split(","):
                lo, sep, hi = part.partition("-")
                if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
                    return None
                if int(hi or lo) - int(lo) + len(hosts) > _MAX_HOSTS:
                    return None
                width = len(lo)
                hosts += [f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi or lo) + 1)]
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                return None
            pos += 1
    return tuple(hosts)
