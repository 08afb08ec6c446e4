"""Sockets: a listener on a free loopback port to configure before a server uses it, and what the kernel can take
of a response for a client that reads nothing (the bound on the bytes a test of aborted downloads may see
counted as sent)."""

from __future__ import annotations

import socket
from pathlib import Path

RCVBUF = 16 * 1024   # the attacking client's receive buffer (the kernel doubles it)


def send_buffer_max() -> int:
    """The most a socket's send buffer can hold here (tcp_wmem autotuning limit)."""
    return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])


# What the edge can hand to the kernel for a client that reads nothing: its send buffer and the client's
# receive buffer. A body well past it cannot have been sent whole.
REALLY_WRITTEN_MAX = send_buffer_max() + 4 * RCVBUF


def loopback_listener() -> socket.socket:
    """A socket bound to a free loopback port, so that the port can be configured before a server
    uses it (edges' origins and the dashboard's own port are in control's settings)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    return listener
