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
