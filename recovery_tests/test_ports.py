"""Ports: free on this host, outside the range the OS hands out by itself, never picked twice
by two pickers of one host at once (harness/machine/ports.py)."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.machine import ports

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
linux = pytest.mark.skipif(not RANGE.exists(), reason="the OS's ephemeral range is Linux's /proc file")


def _ephemeral() -> tuple[int, int]:
    low, high = (int(w) for w in RANGE.read_text().split()[:2])
    return low, high


@linux
def test_picks_lie_outside_the_range_the_os_hands_out_by_itself():
    """srun's I/O sockets and every bind to port 0 come from the ephemeral range: a port picked
    there can be taken before the launcher binds it (two xdist workers, docs/testing.md)."""
    low, high = _ephemeral()
    picked = [p for _ in range(50) for p in ports.pick_ports(2)]
    assert all(not low <= p <= high and 10000 <= p <= 65535 for p in picked), \
        [p for p in picked if low <= p <= high]
    taken_by_the_os = socket.socket()
    taken_by_the_os.bind(("", 0))
    with taken_by_the_os:
        assert low <= taken_by_the_os.getsockname()[1] <= high


def test_a_port_something_listens_on_is_never_picked(monkeypatch):
    """The bind test decides: the random draw offers a port a listener holds, then a free one."""
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        held = busy.getsockname()[1]
        offers = iter([held, held, None])

        class Draw(random.Random):
            def randint(self, a, b):
                offer = next(offers, None)
                return offer if offer is not None else super().randint(a, b)

        monkeypatch.setattr(random, "SystemRandom", Draw)
        (port,) = ports.pick_ports(1)
        assert port != held


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract Unix names are Linux's")
def test_a_port_another_picker_of_this_host_just_chose_is_skipped(monkeypatch):
    """Two xdist workers (or local Slurm nodes) pick at once: the first one's pick is marked
    for HOLD_S seconds, and the second skips it although nothing is bound to it yet."""
    first = ports.free_ports(1)[0]
    offers = iter([first, None])

    class Draw(random.Random):
        def randint(self, a, b):
            offer = next(offers, None)
            return offer if offer is not None else super().randint(a, b)

    monkeypatch.setattr(random, "SystemRandom", Draw)
    second = ports.pick_ports(1)
    assert second != [first]


def test_a_pick_holds_distinct_ports_and_gives_up_with_a_reason(monkeypatch):
    assert len(set(ports.pick_ports(4))) == 4

    class Busy(random.Random):
        def randint(self, a, b):
            return held

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        held = busy.getsockname()[1]
        monkeypatch.setattr(random, "SystemRandom", Busy)
        with pytest.raises(OSError, match=r"no 1 free port\(s\)"):
            ports.pick_ports(1)


@linux
def test_the_snippet_nodes_run_is_the_same_function():
    """sbatch and srun run FREE_PORTS_SNIPPET on the node whose ports they need: the source of
    pick_ports, with nothing of the harness imported."""
    low, high = _ephemeral()
    out = subprocess.run([sys.executable, "-I", "-c", ports.FREE_PORTS_SNIPPET, "3"], capture_output=True,
                         text=True, check=True, timeout=60).stdout.split()
    assert len(set(out)) == 3 and all(not low <= int(p) <= high for p in out), out
    assert "def pick_ports(" in ports.FREE_PORTS_SNIPPET
