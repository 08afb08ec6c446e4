"""What the kernel can take of a response for a client that reads nothing: the bound on the bytes a test of
aborted downloads may see counted as sent."""

from __future__ import annotations

from pathlib import Path

RCVBUF = 16 * 1024   # the attacking client's receive buffer (the kernel doubles it)


def send_buffer_max() -> int:
    """The most a socket's send buffer can hold here (tcp_wmem autotuning limit)."""
    return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])


# What the edge can hand to the kernel for a client that reads nothing: its send buffer and the client's
# receive buffer. A body well past it cannot have been sent whole.
REALLY_WRITTEN_MAX = send_buffer_max() + 4 * RCVBUF
