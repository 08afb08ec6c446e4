"""What /proc says about a process: its parent, resident memory and CPU time (Linux)."""

from __future__ import annotations

import os

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def started_for(edge_pid: int) -> bool:
    """Whether this process's parent is the edge, or the edge's fork server (whose parent is the edge)."""
    parent = os.getppid()
    return parent == edge_pid or parent_of(parent) == edge_pid


def parent_of(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else 0


def _stat_fields(pid: int) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command name (state first); empty once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []
    return fields if len(fields) > 12 else []


def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid`, every thread (0 once it is gone)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if fields else 0.0
