"""Ports come from the OS, never from constants."""

from __future__ import annotations

import socket
from contextlib import ExitStack

# One Python line for scripts that must pick ports on the node where they run (sbatch).
FREE_PORTS_SNIPPET = ('import socket, sys; ss = [socket.socket() for _ in range(int(sys.argv[1]))]; '
                      '[s.bind(("", 0)) for s in ss]; print(*(s.getsockname()[1] for s in ss))')


def free_ports(count: int, host: str = "") -> list[int]:
    """`count` distinct ports the OS just reported free. All sockets stay bound until every
    port is chosen, so the same port is never handed out twice; the caller binds them soon
    after (the window torchrun's --standalone accepts too)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


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
