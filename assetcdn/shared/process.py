"""Process hygiene shared by `assetcdn up` and the processes it starts.

- Children die with their parent (no orphans), even if it is SIGKILLed (`die_with_parent`).
- `serve` runs one aiohttp application until SIGTERM/SIGINT: the first signal starts an orderly stop
  (in-flight requests get `HANDLER_GRACE_S`, or the `shutdown_timeout` the caller gives: `[server]
  shutdown_grace_s`, then every resource the app opened is closed), later signals never interrupt that
  stop, and a process that still has not exited `EXIT_DEADLINE_S` after it began to stop dumps its
  threads' stacks and exits anyway. A port that cannot be bound (the application's own too, one it opens as it
  starts: `CannotListen`) ends the process at once with `EXIT_CANNOT_LISTEN` and a message that names the address.
- `port_in_use` tells, before anything starts, whether a port a process is about to listen on is
  already taken by another program (a listener that shares ports with SO_REUSEPORT included).
- A process started by `assetcdn up` answers `/api/health` with the run's id in `RUN_ID_HEADER` when
  asked with that same id, so `up` knows it is talking to its own children and not to another
  install that happens to answer on the same port.
"""

from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `assetcdn up` imports this module and needs no web server
    from aiohttp import web

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
HANDLER_GRACE_S = 3.0        # in-flight requests (uploads, SSE streams, proxied calls) at shutdown
EXIT_DEADLINE_S = 10.0       # from the first stop signal to the process being gone, whatever hangs
KEEPALIVE_TIMEOUT_S = 75.0   # idle keep-alive connections (aiohttp's run_app default)
THREAD_SETTLE_S = 1.0        # for worker threads that were told to end before they are reported
EXIT_CANNOT_LISTEN = 3       # the address is in use or not ours: restarting cannot help
EXIT_DEADLINE_EXCEEDED = 4   # the orderly stop overran EXIT_DEADLINE_S
RUN_ID_ENV = "ASSETCDN_RUN_ID"
RUN_ID_HEADER = "X-Assetcdn-Run"
SiteFactory = Callable[..., "web.BaseSite"]  # (runner, host, port, reuse_port=...) like web.TCPSite

# The collector's thresholds while serving (CPython's default: 700, 10, 10). A request makes hundreds of short-lived
# containers and a cache fill a long-lived entry: with the defaults a youngest-generation collection ran every few
# requests, scanning every request in flight each time.
GC_THRESHOLDS = (20_000, 20, 20)


def _prctl(option: int, value: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)
        except OSError:
            pass


def die_with_parent() -> None:
    """Ask Linux to send SIGTERM to this process when its parent exits (a no-op elsewhere)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process (Linux), so it can reap and account for them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _listen_addresses(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return []
    seen: list[tuple[int, tuple[Any, ...]]] = []
    for family, _type, _proto, _name, address in infos:
        if (family, address) not in seen and family in (socket.AF_INET, socket.AF_INET6):
            seen.append((family, address))
    return seen


def port_in_use(host: str, port: int) -> bool:
    """True when another socket listens on `host:port` (probed by binding without SO_REUSEPORT, which a
    listener that set SO_REUSEPORT does not share; SO_REUSEADDR only lets connections in TIME_WAIT
    from an earlier run not count)."""
    for family, address in _listen_addresses(host, port):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError:
                return True
    return False


class CannotListen(Exception):
    """An application's own listener, opened as it starts (the edge's cluster site), cannot bind: `serve` logs the
    message, one line that names the address and what moves it, and ends the process with EXIT_CANNOT_LISTEN
    (restarting cannot help), not with a traceback."""


class _ExitDeadline:
    """Once armed, ends the process after `seconds` if it has not exited by itself (a daemon timer, so
    it also covers the interpreter waiting on a leftover thread at exit)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        log.error("still running %.0fs after the stop began; exiting now. Threads:", self.seconds)
        faulthandler.dump_traceback(all_threads=True)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_DEADLINE_EXCEEDED)


def _answer_run_id(run_id: str) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        if request.headers.get(RUN_ID_HEADER) == run_id:
            response.headers[RUN_ID_HEADER] = run_id
    return on_prepare


async def _serve(app: web.Application, host: str, port: int, reuse_port: bool, deadline: _ExitDeadline,
                 runner_options: dict[str, object], site_factory: SiteFactory | None = None,
                 more_ports: tuple[int, ...] = (),
                 more_sites: Sequence[Callable[[web.AppRunner], web.BaseSite]] = ()) -> int:
    from aiohttp import web

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.info("%s received again: already stopping", signal.Signals(signum).name)
            return
        log.info("%s received: stopping", signal.Signals(signum).name)
        stopping.set()
        deadline.arm()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    run_id = os.environ.get(RUN_ID_ENV)
    if run_id:
        app.on_response_prepare.append(_answer_run_id(run_id))
    # Request bodies are decoded by the shared reader (assetcdn/shared/request_body.py), which stops at each
    # route's limit; aiohttp's own decoding would go on inflating what is left of a refused body.
    options: dict[str, object] = {"access_log": None, "shutdown_timeout": HANDLER_GRACE_S,
                                  "keepalive_timeout": KEEPALIVE_TIMEOUT_S, "auto_decompress": False,
                                  **runner_options}
    runner = web.AppRunner(app, handle_signals=False, **options)  # type: ignore[arg-type]
    try:
        try:
            await runner.setup()
        except CannotListen as exc:
            log.error("%s", exc)
            return EXIT_CANNOT_LISTEN
        sites = [(f"{host}:{port}", (site_factory or web.TCPSite)(runner, host, port, reuse_port=reuse_port)),
                 *((f"{host}:{more}", web.TCPSite(runner, host, more, reuse_port=reuse_port)) for more in more_ports)]
        for make in more_sites:
            site = make(runner)
            sites.append((site.name.partition("://")[2] or site.name, site))
        for address, site in sites:
            try:
                await site.start()
            except OSError as exc:
                log.error("cannot listen on %s: %s", address, exc.strerror or exc)
                return EXIT_CANNOT_LISTEN
        await stopping.wait()
        return 0
    finally:
        deadline.arm()  # whatever ends the run (signal, bind failure, startup error), exit is bounded
        began = time.monotonic()
        await runner.cleanup()
        log.info("stopped in %.1fs", time.monotonic() - began)


def serve(app: web.Application, *, host: str, port: int, reuse_port: bool = False,
          exit_deadline_s: float = EXIT_DEADLINE_S, site_factory: SiteFactory | None = None,
          more_ports: tuple[int, ...] = (), more_sites: Sequence[Callable[[web.AppRunner], web.BaseSite]] = (),
          **runner_options: object) -> int:
    """Run `app` on host:port (and on each of `more_ports`, plain TCP sites) until SIGTERM or SIGINT;
    returns the process's exit status.

    `runner_options` go to `aiohttp.web.AppRunner` (e.g. `shutdown_timeout`, request-handler limits);
    `site_factory` replaces `aiohttp.web.TCPSite` (same arguments), e.g. the edge's hit site; `more_sites`
    make further listeners of the same application (the edge's https port).
    """
    import uvloop  # the servers' loop; imported here so `assetcdn up` itself does not need it

    # What the process made before serving (its modules, the application, its routes) lives as long as it
    # does: frozen, it is never traversed by a collection again. The servers' entry points start with
    # collections off (so the imports set off none); they run from here on.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()
    deadline = _ExitDeadline(exit_deadline_s)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        status = runner.run(_serve(app, host, port, reuse_port, deadline, runner_options, site_factory,
                                   more_ports, more_sites))
    # The interpreter waits for non-daemon threads before it exits: name any that is not ending (a
    # connection left open, a job still running); the exit deadline ends the wait if it has to.
    settle = time.monotonic() + THREAD_SETTLE_S
    leftover = [t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    for thread in leftover:
        thread.join(timeout=max(settle - time.monotonic(), 0))
    if still := [t.name for t in leftover if t.is_alive()]:
        log.warning("threads still running at exit: %s", ", ".join(still))
    return status
