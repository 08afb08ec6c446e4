"""`assetcdn up`: control plus N edges as child processes, supervised until told to stop.

Each process is started as a child (`python -m assetcdn.control`, `python -m assetcdn.edge`); this module
never imports them, so the edge and control stay separable onto other hosts. It checks the ports first
(naming each taken one with its flag and setting), locks the data directory, waits for every child's
health (asked with this run's id, so another install answering on the same port is not mistaken for
ours) and for control to have every worker of every edge registered and caught up, restarts a child that
crashes (giving up on a crash loop, or at once when a child cannot listen), and stops them all on a signal.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from assetcdn.shared.config import Settings, load_settings
from assetcdn.shared.dashboard_url import dashboard_url
from assetcdn.shared.host_url import host_url
from assetcdn.shared.process import (
    EXIT_CANNOT_LISTEN,
    EXIT_DEADLINE_S,
    RUN_ID_ENV,
    RUN_ID_HEADER,
    become_subreaper,
    die_with_parent,
    port_in_use,
)
from assetcdn.shared.secrets import (
    SECRETS_FILE,
    load_or_create_secrets,
    private_umask,
)

HEALTH_TIMEOUT_S = 60.0
MAX_RESTARTS = 5
CRASH_WINDOW_S = 60.0
# The keys a user passes to the API (named in `up`'s output); the internal secrets are never mentioned.
USER_KEYS = ("ASSETCDN_ACCESS_KEY", "ASSETCDN_ACCOUNT_KEY", "ASSETCDN_PURGE_KEY", "ASSETCDN_ANALYTICS_KEY",
             "ASSETCDN_METRICS_KEY", "ASSETCDN_DASHBOARD_SECRET")
STOP_GRACE_S = EXIT_DEADLINE_S + 2.0  # a child stops by itself within this, or it is killed
KILL_WAIT_S = 5.0                     # for SIGKILLed processes to disappear
LOCK_FILE = "up.lock"
LAST_SEEN_ROUNDING_S = 0.1  # control's lastSeenSecondsAgo is rounded to it


def say(text: str, *, error: bool = False) -> None:
    stream = sys.stderr if error else sys.stdout
    stream.write(text + "\n")
    stream.flush()


class StartupFailed(Exception):
    """`assetcdn up` cannot bring the cluster up; the message says why and what to do."""


class _StopRequest:
    """The SIGTERM/SIGINT handler of `assetcdn up`: it only records the request, which the waiting loops
    look at. It never raises, so a second signal can never interrupt stopping the children."""

    def __init__(self) -> None:
        self.requested = False
        # A byte in this pipe ends `wait` early: the handler runs while the main thread sleeps in select(), and
        # select() is resumed afterwards (PEP 475), so only a readable descriptor wakes it.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)

    def __call__(self, signum: int, _frame: object) -> None:
        if self.requested:
            # os.write, not print: the main thread may be in the middle of writing to the same stream.
            os.write(2, f"assetcdn: already stopping (children that have not stopped within "
                        f"{STOP_GRACE_S:.0f}s are killed)\n".encode())
            return
        self.requested = True
        try:
            os.write(self._wake_write, b"\0")
        except BlockingIOError:  # a byte is already waiting
            pass

    def wait(self, seconds: float) -> None:
        """Sleep for `seconds`, or until a stop is requested (at once if it already was)."""
        if not self.requested:
            select.select([self._wake_read], [], [], seconds)


OURS, OTHER, DOWN = "ours", "other", "down"

# What moves each kind of port `up` listens on: its flag (the cluster port has none), and its setting (section, key),
# which the environment variable ASSETCDN_<SECTION>_<KEY> also sets. Edge i listens on the edge (and https) port + i;
# with a fixed cluster port, its worker w on that port + i x workers + w (`_cluster_ports`).
PORT_CHOICES: dict[str, tuple[str | None, str, str]] = {
    "control": ("--control-port", "server", "control_port"),
    "dashboard": ("--dashboard-port", "server", "dashboard_port"),
    "edge": ("--edge-port", "server", "edge_port"),
    "https": ("--https-port", "tls", "https_port"),
    "cluster": (None, "edge", "cluster_port"),
}


@dataclass(frozen=True)
class Listener:
    """A port one of `up`'s children listens on: `label` names it in messages, `kind` says what moves it."""

    label: str
    port: int
    kind: str

    def how_to_move(self) -> str:
        flag, section, key = PORT_CHOICES[self.kind]
        return f"{flag + ' or ' if flag else ''}ASSETCDN_{section.upper()}_{key.upper()} ([{section}] {key})"

    def taken(self, host: str) -> str:
        return (f"{self.label} port {self.port} on {host} is already in use; "
                f"choose another with {self.how_to_move()}")


def _listeners(edge_port: int, control_port: int, dashboard_port: int, https_port: int,
               edges: int, cluster_port: int = 0, workers: int = 1) -> list[list[Listener]]:
    """The ports of each child, in the order the children start: control (its API and the dashboard), then
    edge i (its plain port, with https its https port, and with a fixed `cluster_port` each worker's cluster port)."""
    children = [[Listener("control", control_port, "control"), Listener("dashboard", dashboard_port, "dashboard")]]
    for i in range(edges):
        children.append([Listener(f"edge-{i}", edge_port + i, "edge"),
                         *([Listener(f"edge-{i} https", https_port + i, "https")] if https_port else []),
                         *(Listener(f"edge-{i}/{w} cluster", cluster_port + i * workers + w, "cluster")
                           for w in range(workers) if cluster_port)])
    return children


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed (urllib's own would send every header, the metrics key's too, to where it points):
    it stays the HTTPError it is, which says the answer is not the health asked for."""

    def redirect_request(self, *_: object) -> None:
        return None


# `up` asks only the children it started, on the addresses it started them on: never through a proxy named in the
# environment (`http_proxy`, which would be handed the metrics key and answer for them), never after a redirect.
_OWN_CHILDREN = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def _probe(url: str, run_id: str) -> str:
    """OURS when this run's child answers healthy, DOWN when nothing (or our child, not ready yet)
    answers, OTHER when a process this run did not start answers on that address."""
    answer = _health_answer(url + "/api/health", run_id)
    if answer is None:
        return DOWN
    status, _, ours = answer
    if not ours:
        return OTHER
    return OURS if status < 400 else DOWN


def _health_answer(url: str, run_id: str, timeout_s: float = 2, **headers: str) -> tuple[int, bytes, bool] | None:
    """A child's health answer, asked with this run's id: its status, its body (a degraded 503's too, which still
    says what it says) and whether this run's child gave it; None when nothing answers."""
    request = urllib.request.Request(url, headers={RUN_ID_HEADER: run_id, **headers})
    try:
        with _OWN_CHILDREN.open(request, timeout=timeout_s) as resp:  # noqa: S310 (loopback/operator URL)
            return resp.status, resp.read(), resp.headers.get(RUN_ID_HEADER) == run_id
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get(RUN_ID_HEADER) == run_id
    except (urllib.error.URLError, OSError):
        return None


def _exit_reason(label: str, status: int, host: str, ports: list[Listener]) -> str:
    """Why a child ended; a child that could not listen is told apart by the port another program holds now
    (control listens on two), named with what moves it."""
    if status != EXIT_CANNOT_LISTEN:
        return f"{label} exited early with status {status}"
    if taken := [port for port in ports if port_in_use(host, port.port)]:
        return f"{label} cannot listen: " + "; ".join(port.taken(host) for port in taken)
    named = " or ".join(f"{port.label} port {port.port} ({port.how_to_move()})" for port in ports)
    return f"{label} cannot listen on its {named} (see its message above): another program held it"


def _check_children(processes: list[subprocess.Popen[bytes]], labels: list[str], listeners: list[list[Listener]],
                    host: str) -> None:
    """StartupFailed saying why, when a child has ended while `up` waits for it."""
    for process, label, ports in zip(processes, labels, listeners, strict=False):
        if process.poll() is not None:
            raise StartupFailed(_exit_reason(label, process.returncode, host, ports))


def _wait_healthy(urls: list[str], processes: list[subprocess.Popen[bytes]], labels: list[str],
                  listeners: list[list[Listener]], host: str, run_id: str, stop: _StopRequest,
                  timeout_s: float) -> bool:
    """Wait until every URL is answered healthy by this run's own child; False if a stop was requested."""
    deadline = time.monotonic() + timeout_s
    pending = list(urls)
    while pending and not stop.requested:
        _check_children(processes, labels, listeners, host)
        waiting = []
        for url in pending:
            state = _probe(url, run_id)
            if state == OTHER:
                raise StartupFailed(f"{url} is answered by a process this `assetcdn up` did not start: "
                                    "another install or program uses that port")
            if state == DOWN:
                waiting.append(url)
        pending = waiting
        if pending and time.monotonic() > deadline:
            raise StartupFailed(f"not healthy after {timeout_s:.0f}s: {', '.join(pending)}")
        if pending:
            stop.wait(0.2)
    return not stop.requested


METRICS_KEY_REFUSED = ("control refuses this run's metrics key (ASSETCDN_METRICS_KEY), which `up` sends to its "
                       "/api/health?deep=1 to see every edge worker caught up; no client could read /metrics with it "
                       "either (a key with a space or a line break at either end never matches): choose another")


def _caught_up_workers(control_url: str, run_id: str, metrics_key: str, heard_since: float = -math.inf) -> set[str]:
    """The edge workers (`edge-i/w`) this run's control has registered and heard at its own generation: each one
    control pushes changes and purges to, and that holds every file control has. Empty while control does not say.
    Only those heard from since `heard_since` (time.monotonic()): control started again keeps the workers it knew
    (assetcdn/control/publishing/edge_registry.py), and a previous run's (`up` killed and started again within
    `control.edge_timeout_s`), listed alive at control's generation, is not this run's worker."""
    # The key's UTF-8 bytes, which control compares (assetcdn/shared/secrets.py `secret_matches`): http.client writes
    # a header as Latin-1, so they are handed over as the Latin-1 text of those bytes.
    authorization = f"Bearer {metrics_key}".encode().decode("latin-1")
    try:
        answer = _health_answer(control_url + "/api/health?deep=1", run_id, timeout_s=5,
                                Authorization=authorization)
    except ValueError:  # a line break in the key, which no header carries; http.client's message holds the key
        raise StartupFailed(METRICS_KEY_REFUSED) from None
    if answer is None or not answer[2]:
        return set()
    status, body, _ = answer
    if status == 401:  # asking again cannot help: said now, not as workers missing after the wait
        raise StartupFailed(METRICS_KEY_REFUSED)
    heard_within = time.monotonic() - heard_since  # once answered: a slow answer does not leave out a worker
    try:
        edges = json.loads(body).get("edges") or []
        return {str(edge["name"]) for edge in edges
                if edge.get("alive") and edge.get("generationsBehind") == 0
                and float(edge.get("lastSeenSecondsAgo", 0)) <= heard_within + LAST_SEEN_ROUNDING_S}
    except (ValueError, AttributeError, KeyError, TypeError):
        return set()


def _wait_workers_caught_up(control_url: str, run_id: str, metrics_key: str, workers: set[str],
                            processes: list[subprocess.Popen[bytes]], labels: list[str],
                            listeners: list[list[Listener]], host: str, stop: _StopRequest, timeout_s: float,
                            edges_started: float) -> bool:
    """Wait until control has every worker of every edge registered and caught up, not only the one an edge's health
    probe reached: another worker still starting (on a loaded machine, for seconds) is not pushed purges and does not
    count in their answers meanwhile. It is counted only once it reports control's generation, so it holds every file
    control has (a worker listens for clients after its first catch-up, assetcdn/edge/node.py `start`, or after
    `edge.control_probe_timeout_s` without one): none answers 503 EdgeNotReady for one of them once this returns.
    Only a worker control has heard from since `edges_started` (time.monotonic() when `up` started the edges) counts.
    False if a stop was requested."""
    deadline = time.monotonic() + timeout_s
    while not stop.requested:
        _check_children(processes, labels, listeners, host)
        missing = workers - _caught_up_workers(control_url, run_id, metrics_key, edges_started)
        if not missing:
            return True
        if time.monotonic() > deadline:
            raise StartupFailed(f"not every edge worker registered with control and caught up within "
                                f"{timeout_s:.0f}s: {', '.join(sorted(missing))}")
        stop.wait(0.2)
    return False


def _chat_ready(control_url: str, run_id: str) -> bool:
    """Whether this run's control says its chat answers without warming up (a control that does not say
    counts as ready)."""
    answer = _health_answer(control_url + "/api/health", run_id)
    if answer is None:
        return False
    try:
        return bool(json.loads(answer[1]).get("chat", "ready") == "ready")
    except (ValueError, AttributeError):
        return False


def _wait_chat_ready(control_url: str, run_id: str, stop: _StopRequest, timeout_s: float) -> None:
    """`up` is announced once the first chat question is answered at once; a chat still loading after
    `timeout_s` is said, not fatal (everything else works, and it answers when it is ready)."""
    deadline = time.monotonic() + timeout_s
    while not stop.requested and not _chat_ready(control_url, run_id):
        if time.monotonic() > deadline:
            say("assetcdn up: the chat is still loading its documentation vectors; it answers once they are ready",
                 error=True)
            return
        stop.wait(0.2)


def _cluster_ports(settings: Settings, edge: int, workers: int) -> dict[str, str]:
    """The fixed cluster ports (`[edge] cluster_port`, `cluster_advertise_port`) of edge `edge` of `up`: a range of
    `workers` ports of its own after the edges before it (its worker w on the port + edge x workers + w), as the
    workers of every edge on one host would otherwise all take cluster_port + w. Nothing for 0 (any free port)."""
    moved = {}
    for key in ("cluster_port", "cluster_advertise_port"):
        if first := int(settings.get("edge", key)):
            moved[f"ASSETCDN_EDGE_{key.upper()}"] = str(first + edge * workers)
    return moved


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # Its own process group: when it stops, whatever it started (edge workers) can be killed with it.
    return subprocess.Popen([sys.executable, *args], env=env, process_group=0,  # noqa: PLW1509
                            preexec_fn=die_with_parent)


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL what is left of a child's process group (the child, its workers) and reap all of it."""
    _signal_group(process, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        try:  # orphaned workers are re-parented to this process (a subreaper): reap them
            while os.waitpid(-process.pid, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        try:
            os.killpg(process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() > deadline:
            say(f"processes of group {process.pid} are still there {KILL_WAIT_S:.0f}s after SIGKILL", error=True)
            return
        time.sleep(0.02)


def _stop(processes: list[subprocess.Popen[bytes]], labels: list[str]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
            _signal_group(process, signal.SIGCONT)  # a suspended child handles its SIGTERM and stops cleanly
    deadline = time.monotonic() + STOP_GRACE_S
    for process, label in zip(processes, labels, strict=False):
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            say(f"{label} did not stop within {STOP_GRACE_S:.0f}s; killing it", error=True)
        _kill_group(process)


def _stop_all(processes: list[subprocess.Popen[bytes]], labels: list[str]) -> None:
    """Edges first (they hand their last access records to control), then control. Each has
    STOP_GRACE_S to stop by itself; then its whole process group is killed. Nothing is left behind."""
    _stop(processes[1:], labels[1:])
    _stop(processes[:1], labels[:1])


def _lock_data_dir(data_dir: Path) -> int:
    """Hold a lock on the data directory for as long as this `assetcdn up` runs: two installs must never
    share one repository and database. Returns the lock's file descriptor (released at exit)."""
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:  # not ours to write (another user's), or under a file: said, not a traceback
        raise StartupFailed(f"the data directory {data_dir} cannot be used ({exc.strerror or exc}): choose another "
                            "with --data-dir or ASSETCDN_SERVER_DATA_DIR ([server] data_dir)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise StartupFailed(f"assetcdn up is already running on {data_dir} (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _keys_notice(secrets_path: Path, generated: list[str]) -> str:
    """Where the keys are, by name only: output of `up` ends up in logs, so no key value is ever printed."""
    if not generated:
        return f"Keys: from the environment or {secrets_path}"
    user_keys = [name for name in generated if name in USER_KEYS]
    named = f" ({', '.join(user_keys)})" if user_keys else ""
    return (f"Generated keys{named} are in {secrets_path} (mode 0600); they are not printed. "
            f"Load them with: set -a; . {secrets_path}; set +a")


def _ports_taken(host: str, listeners: list[list[Listener]]) -> bool:
    """Say which ports another program holds, each with what moves it; True if any."""
    taken = [port for ports in listeners for port in ports if port_in_use(host, port.port)]
    for port in taken:
        say(f"assetcdn up: {port.taken(host)}", error=True)
    if taken:
        say(f"assetcdn up: another install or program is using {'it' if len(taken) == 1 else 'them'}: "
             "stop that one, or choose free ports as said", error=True)
    return bool(taken)


def cmd_up(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    host = args.host or settings.get("server", "host")
    edge_port = args.edge_port or settings.get("server", "edge_port")
    control_port = args.control_port or settings.get("server", "control_port")
    dashboard_port = args.dashboard_port or settings.get("server", "dashboard_port")
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    https_port = args.https_port if args.https_port is not None else int(settings.get("tls", "https_port"))
    listeners = _listeners(edge_port, control_port, dashboard_port, https_port, args.edges,
                           int(settings.get("edge", "cluster_port")), args.workers)
    every_port = [port.port for ports in listeners for port in ports]
    if len(set(every_port)) < len(every_port):
        say("assetcdn up: control, dashboard, edge, https and cluster ports must all differ: choose them with "
             "--control-port, --dashboard-port, --edge-port, --https-port and ASSETCDN_EDGE_CLUSTER_PORT", error=True)
        return 1
    if args.check_ports:  # before a long setup (`make run`): nothing is written, nothing started
        return 1 if _ports_taken(host, listeners) else 0
    private_umask()  # everything control and the edges create under the data dir is the owner's only
    first_start = not (data_dir / "repo.git").exists()
    try:
        _lock_data_dir(data_dir)  # before anything is read or written there
    except StartupFailed as exc:
        say(f"assetcdn up: {exc}", error=True)
        return 1
    if _ports_taken(host, listeners):
        return 1
    secrets, generated = load_or_create_secrets(data_dir)
    labels = ["control", *(f"edge-{i}" for i in range(args.edges))]
    become_subreaper()
    run_id = os.urandom(8).hex()  # the children echo it from /api/health: how `up` knows they are its own
    env = {**os.environ, **secrets.as_env(), "ASSETCDN_SERVER_EDGE_PORT": str(edge_port),
           "ASSETCDN_SERVER_DASHBOARD_PORT": str(dashboard_port), "ASSETCDN_SERVER_HOST": host, RUN_ID_ENV: run_id}
    if args.config:
        env["ASSETCDN_CONFIG"] = str(Path(args.config).resolve())
    control_url = host_url(host, control_port)
    demo = ["--demo"] if first_start and not args.no_demo else []
    commands = [["-m", "assetcdn.control", "--data-dir", str(data_dir), "--host", host, "--port", str(control_port), *demo]]
    envs = [env]
    edge_urls = []
    for i in range(args.edges):
        port = edge_port + i
        commands.append(["-m", "assetcdn.edge", "--control-url", control_url, "--name", f"edge-{i}", "--host", host,
                         "--port", str(port), "--workers", str(args.workers), "--data-dir", str(data_dir),
                         *(["--https-port", str(https_port + i)] if https_port else [])])
        envs.append({**env, **_cluster_ports(settings, i, args.workers)})
        edge_urls.append(host_url(host, port))
    processes: list[subprocess.Popen[bytes]] = []
    stop = _StopRequest()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        processes.append(_spawn(commands[0], envs[0]))
        if not _wait_healthy([control_url], processes, labels, listeners, host, run_id, stop, HEALTH_TIMEOUT_S):
            return 0
        commands[0] = [a for a in commands[0] if a != "--demo"]  # a restarted control must not re-seed
        edges_started = time.monotonic()
        processes.extend(_spawn(command, edge_env) for command, edge_env in zip(commands[1:], envs[1:], strict=True))
        if not _wait_healthy(edge_urls, processes, labels, listeners, host, run_id, stop, HEALTH_TIMEOUT_S):
            return 0
        workers = {f"edge-{i}/{w}" for i in range(args.edges) for w in range(args.workers)}
        if not _wait_workers_caught_up(control_url, run_id, secrets.metrics_key, workers, processes, labels, listeners,
                                       host, stop, HEALTH_TIMEOUT_S, edges_started):
            return 0
        _wait_chat_ready(control_url, run_id, stop, HEALTH_TIMEOUT_S)
        if stop.requested:
            return 0
        # One write: whoever reads the output (a log shipper, a script waiting for "assetcdn is up") sees the
        # whole banner at once, never the first line without the others.
        banner = [f"assetcdn is up: {edge_urls[0]}  (control {control_url}; edges {', '.join(edge_urls)})"]
        if https_port:
            banner.append(f"HTTPS: {host_url(host, https_port, 'https')}"
                          + (f" to :{https_port + args.edges - 1}" if args.edges > 1 else ""))
        banner.append(_keys_notice(data_dir / SECRETS_FILE, generated))
        dashboard = dashboard_url(settings.with_overrides("server", host=host, dashboard_port=dashboard_port))
        banner.append(f"Dashboard: {dashboard}/dashboard/ (its own origin; "
                      "sign in with ASSETCDN_DASHBOARD_SECRET)")
        say("\n".join(banner))
        return _supervise(processes, commands, labels, listeners, host, envs, stop)
    except StartupFailed as exc:
        say(f"assetcdn up: {exc}", error=True)
        return 1
    finally:
        _stop_all(processes, labels)


def _supervise(processes: list[subprocess.Popen[bytes]], commands: list[list[str]], labels: list[str],
               listeners: list[list[Listener]], host: str, envs: list[dict[str, str]], stop: _StopRequest) -> int:
    """Restart a child that dies (an edge that crashed catches up on what it missed) until a stop is
    requested; give up on a crash loop, or at once when a child can no longer listen on its port."""
    restarts: list[float] = []
    while not stop.requested:
        for index, process in enumerate(processes):
            if stop.requested or process.poll() is None:
                continue
            _kill_group(process)  # whatever it left (edge workers) goes too, and frees its port
            if process.returncode == EXIT_CANNOT_LISTEN:
                reason = _exit_reason(labels[index], process.returncode, host, listeners[index])
                say(f"assetcdn up: {reason}; stopping", error=True)
                return 1
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < CRASH_WINDOW_S] + [now]
            if len(restarts) > MAX_RESTARTS:
                say(f"children keep exiting ({len(restarts)} exits within {CRASH_WINDOW_S:.0f}s, after "
                    f"{len(restarts) - 1} restarts); stopping", error=True)
                return 1
            say(f"{labels[index]} exited with status {process.returncode}; restarting", error=True)
            processes[index] = _spawn(commands[index], envs[index])
        stop.wait(0.5)
    return 0
