"""A lower CPU priority for every process of one launch: the uninterrupted twin that launches
with a fault run yields the CPUs to the run under test (harness.launch.baseline.twin_nice).

Linux weighs CPU time at two levels, so both are set. Each process has a nice value, which what it
starts inherits. Where the kernel groups processes by session (autogroup, on by default in most
distributions' kernels: /proc/sys/kernel/sched_autogroup_enabled), the scheduler first shares the
CPUs between the sessions' groups, each weighted by its own nice value (/proc/PID/autogroup), and a
process's nice value counts only within its group. (A process in a control group other than the root
one is weighed by that group instead, and one left in the kernel's default group, whose autogroup
file reads empty, shares the root group: for both only the nice value applies.) A launcher starts
its workers in sessions of their own (torch elastic does), so a nice value set on the launcher alone
would leave its workers at full weight. `Lowered.catch_up`, called once the launcher is started and
then at each tick of the launch, gives every process of the tree it has not seen yet the nice value,
and every session it has not seen yet the group's. Only ever raises a nice value (no privilege is
needed); a process that is gone, or that the kernel does not let this one change, is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import psutil


class Lowered:
    """The processes of one launch, lowered to `nice` as they appear (catch_up)."""

    def __init__(self, nice: int, proc: Path = Path("/proc")):
        self.nice = nice
        self._proc = proc
        self._seen: set[tuple[int, float]] = set()  # (pid, start time): a reused pid is a new process
        self._sessions: set[int] = set()

    def catch_up(self, roots: Iterable[int]) -> None:
        """Lower each process of the trees under `roots` (the launchers) not seen yet."""
        for root in roots:
            try:
                parent = psutil.Process(root)
                tree = [parent, *parent.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in tree:
                try:
                    key = (proc.pid, proc.create_time())
                except psutil.Error:  # gone since the walk
                    continue
                if key not in self._seen:
                    self._seen.add(key)
                    self._lower(proc.pid)

    def _lower(self, pid: int) -> None:
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) < self.nice:
                os.setpriority(os.PRIO_PROCESS, pid, self.nice)
            session = os.getsid(pid)
        except OSError:  # gone, or not ours to change
            return
        if session in self._sessions:
            return
        try:  # the session's group; no file where the kernel has no autogroup
            with open(self._proc / str(pid) / "autogroup", "r+", encoding="ascii") as f:
                group = autogroup_nice(f.read())
                if group is not None and group < self.nice:
                    f.seek(0)
                    f.write(str(self.nice))
        except (OSError, ValueError):  # gone meanwhile, or no autogroup: the session's next process tries again
            return
        self._sessions.add(session)


def autogroup_nice(text: str) -> int | None:
    """The nice value of /proc/PID/autogroup's `/autogroup-N nice V`; None for an empty file, which
    the kernel prints for a process left in its default group (no session group of its own: a
    container's first process, and what it starts without a new session). ValueError otherwise."""
    parts = text.split()
    if not parts:
        return None
    if len(parts) != 3 or parts[1] != "nice":
        raise ValueError(f"not an autogroup line: {text!r}")
    return int(parts[2])
