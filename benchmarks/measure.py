"""What every benchmark measures with, one definition each: percentiles, the machine and its load, the
tools a benchmark needs, and what a server's processes spend and hold (read from /proc, Linux); the options
every wrk benchmark takes, and a pull zone made and waited for.

SSIM is benchmarks/quality.py's (it needs numpy, pyvips and scikit-image, which the hit benchmarks
do not import).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp


def percentile(values: Iterable[float], fraction: float) -> float:
    """The ``fraction`` (0 to 1) percentile of ``values``: the value at index round(fraction * (n - 1)) of
    the sorted values (numpy's method="nearest"), so a percentile is always a measured value; 0.0 when
    there are none. p50 is ``percentile(values, 0.5)``, p99 ``percentile(values, 0.99)``."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes, e.g. "3.12 2.80 2.41"."""
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def machine() -> str:
    """How many CPUs and which, e.g. "2 vCPU, Intel(R) Xeon(R) ..."."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    return f"{os.cpu_count()} vCPU, {model}"


def tool_path(name: str) -> str:
    """The executable ``name`` on PATH, or in /usr/sbin (where Debian puts varnishd, nginx and hitch,
    outside a user's PATH)."""
    return shutil.which(name) or f"/usr/sbin/{name}"


def require_tools(tools: Iterable[str], make_target: str) -> None:
    """Stop with a message naming the make target that installs them when any of ``tools`` is missing."""
    missing = [tool for tool in tools if not Path(tool_path(tool)).exists()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: run `make {make_target}` (installs them from Debian)")


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if ``process`` has not exited within ``timeout_s``; reaped either way."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_tree(*roots: int) -> list[int]:
    """Each of ``roots`` and every process under it, each pid once (a server's master and its workers,
    an edge and its image workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat_fields(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, None] = {}  # insertion-ordered: roots first
    todo = list(reversed(roots))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = None
            todo.extend(children.get(pid, []))
    return list(found)


PIN_ATTEMPTS = 10


def cpu_set(core: str) -> set[int]:
    """The CPUs of a taskset CPU list ("0", "0-1", "0,2")."""
    cpus: set[int] = set()
    for part in core.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _off_core(pids: Iterable[int], cpus: set[int]) -> list[int]:
    """Those of ``pids`` with a thread allowed on other CPUs than ``cpus`` (a pid gone meanwhile is skipped)."""
    off = []
    for pid in pids:
        try:
            threads = [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for thread in threads:
            try:
                if os.sched_getaffinity(thread) != cpus:
                    off.append(pid)
                    break
            except OSError:
                continue
    return off


def pin(roots: Iterable[int], core: str) -> list[int]:
    """Every thread of every process under ``roots`` onto ``core`` (a taskset CPU list: "0", "0-1"), checked;
    returns the pids (``process_tree``). Children inherit it, but one forked between a walk of the tree and its
    parent's taskset (an image worker launched as the edge starts, a worker `up` starts again) keeps the affinity
    it had: the tree is walked and pinned again until none is left off ``core``. Every benchmark pins here, its
    own processes and the anchors alike, so each gets the same cores."""
    roots, cpus = list(roots), cpu_set(core)
    for _ in range(PIN_ATTEMPTS):
        pids = process_tree(*roots)
        for pid in pids:
            subprocess.run(["taskset", "-a", "-p", "-c", core, str(pid)], capture_output=True, check=False)
        if not _off_core(process_tree(*roots), cpus):
            return process_tree(*roots)
    raise RuntimeError(f"processes under {roots} still run off core {core} after {PIN_ATTEMPTS} pinnings")


def cpu_seconds(pids: Iterable[int], *, reaped_children: bool = False) -> float:
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


def rss_bytes(pids: Iterable[int]) -> int:
    """Resident memory of ``pids`` together (VmRSS; shared pages count once per process)."""
    return _kilobytes_of(pids, "status", "VmRSS:")


def pss_bytes(pids: Iterable[int]) -> int:
    """Proportional memory of ``pids`` together (Pss: a page shared by n processes counts 1/n in each),
    so processes forked from one parent are not charged its pages once per child."""
    return _kilobytes_of(pids, "smaps_rollup", "Pss:")


def _kilobytes_of(pids: Iterable[int], name: str, field: str) -> int:
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


def wrk_arguments(description: str | None) -> argparse.ArgumentParser:
    """A parser with the options of every wrk benchmark (hits_bench, pull_bench): the run's length and rounds,
    wrk's connections and threads, and the cores of the servers and of the load."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")
    return parser


def configs_naming(data_dir: Path, zone: str) -> int:
    """How many edge workers' stored configurations (under a running CDN's `data_dir`) name the zone."""
    count = 0
    for path in data_dir.rglob("edge-config-*.json"):
        try:
            count += f'"{zone}"'.encode() in path.read_bytes()
        except OSError:
            continue  # being replaced
    return count


async def create_pull_zone(control_url: str, account: Mapping[str, str], name: str, origin: str, data_dir: Path,
                           *, workers: int = 1, wait_s: float = 60.0) -> None:
    """The pull zone `name` in front of `origin`, made through control (`account`: its headers); returns once
    `workers` edge workers have the configuration that names it, so the edge serves it."""
    async with aiohttp.ClientSession() as session, session.post(
            f"{control_url}/api/core/zones", json={"Name": name, "Origin": {"Url": origin}},
            headers=dict(account)) as resp:
        if resp.status != 201:
            raise RuntimeError(f"creating the pull zone {name}: {resp.status} {await resp.text()}")
    deadline = time.monotonic() + wait_s
    while configs_naming(data_dir, name) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pull zone {name} never reached the edge")
        await asyncio.sleep(0.1)
