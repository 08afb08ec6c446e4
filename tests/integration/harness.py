"""Start a real `assetcdn up` (control plus N edges) on loopback with free ports, and take it down."""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from assetcdn.shared.config import load_settings
from assetcdn.shared.host_url import host_url
from assetcdn.shared.process import port_in_use

KEYS = {
    "ASSETCDN_ACCESS_KEY": "it-access-key", "ASSETCDN_ACCOUNT_KEY": "it-account-key",
    "ASSETCDN_PURGE_KEY": "it-purge-key", "ASSETCDN_ANALYTICS_KEY": "it-analytics-key",
    "ASSETCDN_SIGNED_URL_SECRET": "it-signed-secret", "ASSETCDN_CLUSTER_SECRET": "it-cluster-secret",
    "ASSETCDN_SESSION_SECRET": "it-session-secret", "ASSETCDN_METRICS_KEY": "it-metrics-key",
}
ACCESS = {"AccessKey": KEYS["ASSETCDN_ACCESS_KEY"]}
ACCOUNT = {"AccountKey": KEYS["ASSETCDN_ACCOUNT_KEY"]}
PURGE = {"x-api-key": KEYS["ASSETCDN_PURGE_KEY"]}
METRICS = {"Authorization": f"Bearer {KEYS['ASSETCDN_METRICS_KEY']}"}  # /metrics, /api/health?deep=1


def _port_free(port: int, *, udp: bool = False) -> bool:
    kinds = (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,)
    for kind in kinds:
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _ephemeral_start() -> int:
    """The first port the kernel hands out for bind(0) (Linux: ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by `free_port_block`, reserved across every test process on the machine (the workers of a run,
# and a second run beside it): a port chosen here is free, but its server binds it later (seconds later for one
# configured before another starts, as an ACME CA's), and another process choosing meanwhile must not take it.
# A reservation is a file naming the process; it lapses after RESERVED_FOR_S or when that process is gone.
RESERVED = Path(tempfile.gettempdir()) / "assetcdn-test-ports"
RESERVED_FOR_S = 900


def _reserved(port: int, now: float) -> bool:
    mark = RESERVED / str(port)
    try:
        holder = int(mark.read_text())
        age = now - mark.stat().st_mtime
    except (OSError, ValueError):
        return False
    return age < RESERVED_FOR_S and Path(f"/proc/{holder}").exists()


def free_port_block(count: int, *, udp: bool = False, avoid: Collection[int] = ()) -> int:
    """A base port such that base..base+count-1 are free on 127.0.0.1 (for UDP too with `udp`), chosen
    below the ephemeral range: test servers running beside (bind to port 0) and every outgoing connection
    take ephemeral ports, and would otherwise grab a port of the block before its server binds it. None of
    the block is in `avoid` (ports picked already, not bound yet) or reserved by a test process (this one
    included: `RESERVED`); the block is reserved for this one, under a lock every test process takes."""
    top = min(_ephemeral_start(), 65000) - count
    RESERVED.mkdir(parents=True, exist_ok=True)
    with open(RESERVED / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        now = time.time()
        for _ in range(200):
            base = random.randrange(10000, top)
            ports = range(base, base + count)
            if all(port not in avoid and not _reserved(port, now) and _port_free(port, udp=udp) for port in ports):
                for port in ports:
                    (RESERVED / str(port)).write_text(str(os.getpid()))
                return base
    raise RuntimeError("no free port block")


def running(pids: set[int] | list[int]) -> set[int]:
    """Those of `pids` that are still processes. A process is gone once every one of its threads is dead and
    only waiting to be reaped: a killed process's main thread turns zombie before its other threads have
    exited, and they still hold its open files (its listening sockets) until they have."""
    alive = set()
    for pid in pids:
        try:
            threads = [task.name for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for thread in threads:
            try:
                state = Path(f"/proc/{pid}/task/{thread}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("Z", "X"):
                alive.add(pid)
                break
    return alive


def wait_gone(pids: set[int], timeout_s: float = 60) -> set[int]:
    """Wait (bounded) for every one of `pids` to end; returns those still running at the deadline."""
    deadline = time.monotonic() + timeout_s
    while (left := running(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


UP_MODULE = "assetcdn.cli"  # the `up` supervisor


def up_command(data_dir: Path, *, edge_port: int, control_port: int, dashboard_port: int, edges: int = 1,
               workers: int = 1, demo: bool = False, host: str = "127.0.0.1") -> list[str]:
    command = [sys.executable, "-m", UP_MODULE, "up", "--data-dir", str(data_dir), "--host", host,
               "--edge-port", str(edge_port), "--control-port", str(control_port),
               "--dashboard-port", str(dashboard_port), "--edges", str(edges), "--workers", str(workers)]
    if not demo:
        command.append("--no-demo")
    return command


# Image workers start at an edge's first image job, one per edge process: most tests never transform, and
# each worker loads Python and libvips (start_cdn's `image_workers_at_start` gives the edges their configured
# pool). The in-process edges of tests/edge/routes use it too. Tests may override either setting.
LAZY_IMAGE_POOL = {"ASSETCDN_TRANSFORM_PRESTART_WORKERS": "false", "ASSETCDN_TRANSFORM_CONCURRENCY": "1"}


def up_env(env_extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **KEYS, "ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.5", **LAZY_IMAGE_POOL, **(env_extra or {})}
    env.pop("ASSETCDN_CONFIG", None)  # the embedded defaults, whatever the caller's shell has
    if env_extra and "PYTHONPATH" in env_extra:
        # A caller choosing the source tree (the benchmarks' A/B of two checkouts): `python -m` puts the working
        # directory first on the path, before PYTHONPATH, so every process would import the caller's tree.
        env["PYTHONSAFEPATH"] = "1"
    return env




def child_processes() -> dict[int, list[int]]:
    """{process id: its live children's ids}, read from /proc (a process gone meanwhile is left out)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


@dataclass
class RunningCdn:
    process: subprocess.Popen[bytes]
    data_dir: Path
    control_url: str
    edge_urls: list[str]
    log_path: Path
    dashboard_url: str  # control's own listener for the dashboard (its origin: http://localhost:<port>)
    stopped_pids: list[int] = field(default_factory=list)
    https_port: int = 0  # the https port it listens on (ASSETCDN_TLS_HTTPS_PORT; `start_cdn` may have moved it)

    def pids(self, needle: str) -> list[int]:
        """Pids of this cluster's processes whose command line contains `needle` (e.g. '--name edge-1')."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(self.data_dir) in cmdline and needle in cmdline and int(entry.name) != self.process.pid:
                found.append(int(entry.name))
        return found

    def descendants(self) -> set[int]:
        """Every live process below `assetcdn up` (control, edges and their spawned workers)."""
        children = child_processes()
        found: set[int] = set()
        stack = [self.process.pid]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        return found

    def signal(self, needle: str, sig: signal.Signals) -> list[int]:
        pids = self.pids(needle)
        for pid in pids:
            os.kill(pid, sig)
        return pids


    def stop(self) -> int:
        for pid in self.stopped_pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def made_demo_videos(data_dir: Path) -> None:
    """Small demo videos (2 s at 320x180) already made in `data_dir`'s video cache, as an earlier first start
    leaves it: control reuses complete ones whatever their size and only commits them. For the tests that need the
    demo but do not test making its videos: three 12 s 1080p videos cost about 11 CPU-s in the background, these
    half a second (tests/integration/test_demo_content.py makes the real ones). Within one pytest run they are
    made once and copied (`_run_directory`)."""
    from assetcdn.control.video.ingest import DEMO_VIDEO_CACHE

    run = _run_directory(data_dir)
    if run is None:
        _make_demo_videos(data_dir / DEMO_VIDEO_CACHE)
        return
    made = run / "demo-videos"
    if not made.is_dir():
        # Made aside and renamed into place: another xdist worker of the run may be making them at the same time.
        scratch = run / f"demo-videos.{os.getpid()}"
        _make_demo_videos(scratch)
        try:
            scratch.rename(made)
        except OSError:  # the other worker's are in place: the same videos
            shutil.rmtree(scratch)
    shutil.copytree(made, data_dir / DEMO_VIDEO_CACHE, dirs_exist_ok=True)


def _make_demo_videos(cache_dir: Path) -> None:
    from assetcdn.control.video.demo import ensure_demo_videos  # PyAV: only where videos are made

    ensure_demo_videos(cache_dir, seconds=2, width=320, height=180)


def _run_directory(path: Path) -> Path | None:
    """The numbered directory of this pytest run that holds `path` (`pytest-N`, shared by the run's xdist workers
    and removed with the run's other old directories), or None outside one (the `make fuzz` command line)."""
    for parent in path.parents:
        if parent.name.startswith("pytest-") and parent.name.removeprefix("pytest-").isdigit():
            return parent
    return None


# What `assetcdn up` says when a port it was given is taken (by its pre-start check, or by a child
# that could not listen): another test run on this machine chose the same ports in the meantime.
# What `assetcdn up` says when a port picked free was taken before it bound it (another suite beside this one):
# the start is tried again on other ports.
PORT_TAKEN = (b"another install or program is using", b"another install or program uses that port",
              b"cannot listen")
START_ATTEMPTS = 5
HTTPS_PORT = "ASSETCDN_TLS_HTTPS_PORT"  # a caller's https port, moved to a free one when an attempt found it taken
PUBLIC_URL = "ASSETCDN_SERVER_PUBLIC_URL"  # moved with it when it names that port


def start_cdn(tmp: Path, *, edges: int = 1, workers: int = 1, demo: bool = False,
              env_extra: dict[str, str] | None = None, image_workers_at_start: bool = False,
              semantic_search: bool = False, prepare: Callable[[Path], None] | None = None,
              host: str = "127.0.0.1") -> RunningCdn:
    """A running `assetcdn up` on a free block of ports. Free ports are checked before `up` binds
    them, so a test run beside this one can take one in between: `up` refuses such ports at once,
    and the start is tried again on another block (a fresh data directory each time). It returns once every
    worker of every edge answers its health 200 (`wait_every_worker_ready`).
    `prepare(data_dir)` runs before each attempt, on that attempt's data directory: a test that sets up
    part of it (a small filesystem under an edge's cache) must not find its setting left behind in the
    directory of a failed attempt (`RunningCdn.data_dir` is the one that started). A caller's https port
    (ASSETCDN_TLS_HTTPS_PORT in `env_extra`) may be the port taken: an attempt that finds it taken takes another
    free one, and `RunningCdn.https_port` is the one that started.

    Image workers start lazily, one per edge process (LAZY_IMAGE_POOL); `image_workers_at_start` starts
    them with the edge, as many as configured, for the tests that check every process of the tree stops.
    `host`: what `up` listens on (`--host`), 127.0.0.1 or ::1."""
    configured = load_settings(environ={}).get("transform", "concurrency")
    prestart = ({"ASSETCDN_TRANSFORM_PRESTART_WORKERS": "true", "ASSETCDN_TRANSFORM_CONCURRENCY": str(configured)}
                if image_workers_at_start else {})
    # Control loads its sentence model at start (search.semantic) and embeds every asset: only the tests
    # that search, or that stop control while it loads, ask for it; the others search nothing.
    semantic = {"ASSETCDN_SEARCH_SEMANTIC": "true" if semantic_search else "false"}
    env_extra = {**prestart, **semantic, **(env_extra or {})}
    for attempt in range(1, START_ATTEMPTS + 1):
        data_dir = tmp / ("data" if attempt == 1 else f"data-{attempt}")
        if prepare is not None:
            prepare(data_dir)
        if attempt > 1 and HTTPS_PORT in env_extra and port_in_use("127.0.0.1", int(env_extra[HTTPS_PORT])):
            _move_https_port(env_extra)  # the caller's https port was the one taken meanwhile
        cdn = _start_once(data_dir, tmp / "up.log", edges=edges, workers=workers, demo=demo, env_extra=env_extra,
                          host=host)
        if cdn is not None:
            cdn.https_port = int(env_extra.get(HTTPS_PORT, 0))
            try:
                for url in cdn.edge_urls:
                    wait_every_worker_ready(url, workers)
            except BaseException:
                cdn.stop()
                raise
            return cdn
    raise AssertionError(f"assetcdn up found its ports taken {START_ATTEMPTS} times in a row")


READY_TIMEOUT_S = 90.0


def worker_health(edge_url: str) -> tuple[int, str]:
    """(status, the answering worker: its health's ``node``, ``edge-i/w``) of one GET /api/health on a new
    connection; (0, "") when the connection fails."""
    request = urllib.request.Request(f"{edge_url}/api/health", headers={"Connection": "close"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError:
        return 0, ""
    try:
        node = json.loads(body).get("node", "")
    except ValueError:
        node = ""
    return status, node if isinstance(node, str) else ""


def wait_every_worker_ready(edge_url: str, workers: int, timeout_s: float = READY_TIMEOUT_S) -> set[str]:
    """Until each of the `workers` processes sharing `edge_url`'s port (SO_REUSEPORT hands each new connection to
    one of them) has answered its health 200; returns their names. `up` waits until control has each one registered
    and caught up, and a worker listens only after that, but the kernel hands connections only to those listening:
    a test that means to reach each worker waits for all of them here."""
    ready: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while len(ready) < workers:
        if time.monotonic() > deadline:
            raise AssertionError(f"{edge_url}: only {sorted(ready) or 'no worker'} of {workers} workers answered "
                                 f"their health 200 within {timeout_s:.0f} s")
        status, node = worker_health(edge_url)
        if status == 200 and node and node not in ready:
            ready.add(node)
        else:
            time.sleep(0.05)  # polling other processes' catch-up with control: no event of theirs to wait on
    return ready


def _move_https_port(env_extra: dict[str, str]) -> None:
    """Another free https port in `env_extra`, and in the public URL when that names the old one."""
    old, new = env_extra[HTTPS_PORT], str(free_port_block(1))
    env_extra[HTTPS_PORT] = new
    public = env_extra.get(PUBLIC_URL, "")
    if public.endswith(f":{old}"):
        env_extra[PUBLIC_URL] = public.removesuffix(old) + new


def _start_once(data_dir: Path, log_path: Path, *, edges: int, workers: int, demo: bool,
                env_extra: dict[str, str] | None, host: str = "127.0.0.1") -> RunningCdn | None:
    # A port the caller chose already (the https one) is free until up binds it: not one of the block.
    chosen = {int(value) for name, value in (env_extra or {}).items() if name == HTTPS_PORT}
    base = free_port_block(edges + 2, avoid=chosen)
    control_port, dashboard_port, edge_port = base + edges, base + edges + 1, base
    env = up_env(env_extra)
    command = up_command(data_dir, edge_port=edge_port, control_port=control_port, dashboard_port=dashboard_port,
                         edges=edges, workers=workers, demo=demo, host=host)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    cdn = RunningCdn(process, data_dir, host_url(host, control_port),
                     [host_url(host, edge_port + i) for i in range(edges)], log_path, host_url(host, dashboard_port))
    deadline = time.monotonic() + 90
    while b"assetcdn is up" not in log_path.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            cdn.stop()
            output = log_path.read_bytes()
            if any(sign in output for sign in PORT_TAKEN):
                return None
            raise AssertionError(f"assetcdn up did not start:\n{output.decode(errors='replace')[-4000:]}")
        time.sleep(0.2)
    return cdn
