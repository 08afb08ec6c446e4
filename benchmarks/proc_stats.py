"""What a benchmarked server's processes spend and hold, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pids: list[int], *, reaped_children: bool = False) -> float:
    """User plus system CPU of ``pids``; with ``reaped_children``, also that of the children they
    have waited for (a server that forks a process per job spends its CPU there)."""
    ticks = 0
    for pid in pids:
        fields = stat_fields(pid)
        if fields is not None:  # utime, stime, cutime, cstime
            ticks += int(fields[11]) + int(fields[12])
            if reaped_children:
                ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of ``pids`` together (VmRSS; shared pages count once per process)."""
    return _kilobytes_of(pids, "status", "VmRSS:")


def pss_bytes(pids: list[int]) -> int:
    """Proportional memory of ``pids`` together (Pss: a page shared by n processes counts 1/n in each),
    so processes forked from one parent are not charged its pages once per child."""
    return _kilobytes_of(pids, "smaps_rollup", "Pss:")


def _kilobytes_of(pids: list[int], name: str, field: str) -> int:
    """The sum over ``pids`` of the "<field> N kB" line of /proc/<pid>/<name>, in bytes."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(field):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total
