"""Ports the OS reports free, outside the range it hands out by itself.

A port asked from the OS with `bind(("", 0))` is free when asked, not reserved: the OS may hand
the same number to the next socket that binds port 0 (srun's I/O sockets, a client's
connect) before the launcher binds it. With two xdist workers, srun took the port chosen for
NVRx's log server that way (docs/testing.md). The OS allocates such sockets from its
ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`) only, so the suite picks its ports
outside that range, at random, and keeps only those a bind test on this host accepts: no
constant port, and nothing the OS allocates by itself can take one in between.

Two pickers of this machine at once (xdist workers, local Slurm nodes on one host) skip each
other's recent picks: each chosen port is held by an abstract Unix socket (Linux; no file)
named after it, for `HOLD_S` seconds in a long-lived process, or until a short one exits.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import socket
import textwrap
import threading
import time


def pick_ports(count, host="", hold=None):
    """`count` distinct TCP ports that bind on `host` now, outside the OS's ephemeral range
    (10000 up to the range, or above it, where there is room; port 0's choice otherwise).
    Self-contained: its source is what Slurm nodes run (FREE_PORTS_SNIPPET). `hold`, a list,
    receives the abstract Unix sockets that mark the picks for other pickers of this host."""
    import random
    import socket
    import sys
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(w) for w in f.read().split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999
    spans = [s for s in ((10000, low - 1), (high + 1, 65535)) if s[1] - s[0] >= 1000]
    rng, bound, marks = random.SystemRandom(), [], []
    try:
        for _ in range(100 * count):
            if len(bound) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, rng.randint(*rng.choice(spans)) if spans else 0))
                if sys.platform.startswith("linux"):  # abstract names are Linux's
                    mark = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        mark.bind("\0nvrx-qual-port-%d" % sock.getsockname()[1])  # taken: another's pick
                    except OSError:
                        mark.close()
                        raise
                    marks.append(mark)
            except OSError:
                sock.close()
                continue
            bound.append(sock)
        if len(bound) < count:
            raise OSError("no %d free port(s) on %r after %d tries" % (count, host, 100 * count))
        if hold is not None:
            hold.extend(marks)
            marks = []
        return [b.getsockname()[1] for b in bound]
    finally:
        for s in bound + marks:
            s.close()


@functools.cache
def _snippet() -> str:
    return textwrap.dedent(inspect.getsource(pick_ports)) + "import sys\nprint(*pick_ports(int(sys.argv[1])))\n"


def __getattr__(name: str) -> str:
    """FREE_PORTS_SNIPPET, what scripts run on the node whose ports they need (sbatch, srun:
    `python -c SNIPPET COUNT`), read from this file's source on first use, not at import."""
    if name == "FREE_PORTS_SNIPPET":
        return _snippet()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

HOLD_S = 300.0  # how long this process marks its picks: the launcher binds them within its start
_held: list[tuple[float, list[socket.socket]]] = []
_held_lock = threading.Lock()


@atexit.register
def _release() -> None:
    with _held_lock:
        for _, marks in _held:
            for mark in marks:
                mark.close()
        _held.clear()


def free_ports(count: int, host: str = "") -> list[int]:
    """`count` distinct ports free on this host now (pick_ports), marked for HOLD_S seconds
    so that another picker of this host does not choose them meanwhile."""
    marks: list[socket.socket] = []
    ports = pick_ports(count, host, marks)
    now = time.monotonic()
    with _held_lock:
        while _held and now - _held[0][0] > HOLD_S:
            for mark in _held.pop(0)[1]:
                mark.close()
        _held.append((now, marks))
    return ports


def free_port(host: str = "") -> int:
    return free_ports(1, host)[0]


LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "0.0.0.0", "::1", ""})


def local_port(endpoint: str | None) -> int | None:
    """The port of a HOST:PORT endpoint on this machine (a single-node rendezvous), else None."""
    if not endpoint:
        return None
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or host not in LOCAL_HOSTS | {socket.gethostname()}:
        return None
    return int(port)


def in_use(port: int) -> str | None:
    """Why a listener cannot take `port` here ("address already in use", with the holder when
    it can be told), or None when it is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError as exc:
            holder = holder_of(port)
            why = (exc.strerror or str(exc)).lower()  # "address already in use"
            return f"port {port}: {why}" + (f" (held by {holder})" if holder else "")
    return None


def holder_of(port: int) -> str | None:
    """`pid N (name)` of the process listening on TCP `port`, when the OS says."""
    import psutil

    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid is None:
                    return "another process"
                try:
                    return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
                except (psutil.Error, OSError):
                    return f"pid {conn.pid}"
    except (psutil.Error, OSError):
        return None
    return None
