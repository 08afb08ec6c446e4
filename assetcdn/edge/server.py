"""One edge node process: W worker processes sharing the public port (SO_REUSEPORT)."""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from assetcdn.shared.config import Settings, SettingsError, load_settings
from assetcdn.shared.logs import configure_logging
from assetcdn.shared.process import (
    EXIT_CANNOT_LISTEN,
    EXIT_DEADLINE_EXCEEDED,
    die_with_parent,
    port_in_use,
)
from assetcdn.shared.secrets import load_edge_secrets, private_umask

if TYPE_CHECKING:
    from aiohttp import web

    from assetcdn.edge.tls.certificates import Certificate

EXIT_BAD_CONFIG = 2  # a setting or file the edge cannot start with (the log names it)
WORKER_ENDED = (0, EXIT_BAD_CONFIG, EXIT_CANNOT_LISTEN, EXIT_DEADLINE_EXCEEDED)
# What a worker imports, loaded once by the fork server the workers are forked from.
# glibc gives each thread that allocates its own malloc arena: a memory-tier body read by an executor thread
# lives in that thread's arena, and the room it leaves on eviction is reused by that thread alone, so the
# worker's memory grows past what its cache holds. Two arenas are plenty under the GIL.
M_ARENA_MAX = -8
MALLOC_ARENAS = 2
WORKER_PRELOAD = ("assetcdn.edge.app", "assetcdn.edge.fastpath.hit_server", "assetcdn.shared.http_server")
# Set for the workers before they import anything (an operator's own value of each wins). frozenlist's compiled
# extension is C++: it maps the C++ runtime, libstdc++, 1.1 MiB of each worker's RSS, for the few lists aiohttp
# keeps in it (its application's signals and middleware, read once per answer the application gives; never by the
# hit path, the hit path's cache fills or the origin client). Its pure-Python twin does the same for 0.5 us more
# per such answer.
WORKER_ENVIRONMENT = {"FROZENLIST_NO_EXTENSIONS": "1"}
# A worker that dies is started again (`main`), at most this many times within the window; one more exit stops the
# edge. Exit statuses of a worker that is not started again: it stopped, or restarting cannot help.
WORKER_MAX_RESTARTS = 5
WORKER_CRASH_WINDOW_S = 60.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="assetcdn edge", description="Run one edge node.")
    parser.add_argument("--control-url", required=True)
    parser.add_argument("--name", default="edge-0")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--https-port", type=int, help="the https port (default: [tls] https_port; 0 = none)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cache-dir", help="default: <data_dir>/<name>")
    parser.add_argument("--data-dir", help="where secrets.env may be read from when not in the environment")
    parser.add_argument("--advertise-host", help="address control uses to reach this node (default: --host)")
    parser.add_argument("--config")
    return parser


def limit_malloc_arenas() -> None:
    """At most MALLOC_ARENAS malloc arenas in this process, before it starts threads (glibc only)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(M_ARENA_MAX, MALLOC_ARENAS)


def run_worker(argv: list[str], worker: int, default_certificate: Certificate | None = None) -> None:
    """One worker; `default_certificate`: the https port's self-signed certificate, the same for every worker."""
    die_with_parent()
    limit_malloc_arenas()
    gc.disable()  # until serving starts, as in control (assetcdn/control/__main__.py)
    # Imported here: PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client is imported.
    from assetcdn.edge.app import EdgeIdentity, create_app
    from assetcdn.edge.fastpath.hit_server import HitSite, ProxiedTCPSite
    from assetcdn.edge.fastpath.proxy_protocol import proxy_policy
    from assetcdn.shared.http_server import serve
    from assetcdn.shared.metrics import METRICS

    args = _parser().parse_args(argv)
    settings = _settings(args)
    host = args.host or settings.get("server", "host")
    port = args.port or settings.get("server", "edge_port")
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    cache_dir = Path(args.cache_dir or settings.get("edge", "cache_dir") or data_dir / args.name).resolve()
    configure_logging(f"{args.name}/{worker}")
    identity = EdgeIdentity(args.name, worker, args.control_url, cache_dir, args.advertise_host or host, data_dir,
                            workers=args.workers)
    app = create_app(settings, load_edge_secrets(data_dir), identity)
    # Hits are answered below aiohttp (assetcdn/edge/fastpath/), unless the operator turned that off.
    fast_hits = bool(settings.get("edge", "fast_hits"))
    site: Callable[..., web.BaseSite] | None = HitSite
    if not fast_hits:  # aiohttp's own site, behind the PROXY header reader when that is on
        proxying = proxy_policy(settings, app[METRICS].proxy_header_refusals)
        site = None if proxying is None else partial(ProxiedTCPSite, policy=proxying)
    https_port = int(settings.get("tls", "https_port"))

    def https_site(runner: web.AppRunner) -> web.BaseSite:
        # Made once the application has started: the node's TLS state (assetcdn/edge/tls/state.py) is open.
        from assetcdn.edge.app_keys import NODE
        from assetcdn.edge.tls.certificates import CertificateStore, default_certificate_names
        from assetcdn.edge.tls.h2 import H2Limits
        from assetcdn.edge.tls.site import HttpsSite

        names = default_certificate_names(str(settings.get("server", "public_url")), host)
        certificates = CertificateStore(settings, app[NODE].tls, default_names=names, spill_dir=cache_dir,
                                        self_signed_default=default_certificate)
        return HttpsSite(runner, host, https_port, reuse_port=True, certificates=certificates,
                         handshake_timeout_s=float(settings.get("tls", "handshake_timeout_s")),
                         limits=H2Limits.from_settings(settings), hits=fast_hits)

    sys.exit(serve(app, settings, host=host, port=port, reuse_port=True, site_factory=site,
                   more_sites=[https_site] if https_port else []))


def forget_live_gauges(metrics_dir: Path, pid: int | None) -> None:
    """A worker that ended holds nothing now: its share of the gauges the node's /metrics sums over its live workers
    (`multiprocess_mode="livesum"`, assetcdn/shared/metrics.py), or takes the highest of (`"livemax"`), goes with its
    files, `gauge_live<mode>_<pid>.db`, as prometheus_client's `multiprocess.mark_process_dead` removes them (not
    imported here: this process has no use for prometheus_client, a fifth of a second to load). Its counters stay,
    so that the node's never go back, and so do the peaks (`"max"`)."""
    if pid is not None:
        for path in metrics_dir.glob(f"gauge_live*_{pid}.db"):
            path.unlink(missing_ok=True)


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    if args.https_port is not None:
        settings = settings.with_overrides("tls", https_port=args.https_port)
    return settings


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    private_umask()  # cached assets (signed ones too) and metrics files are the owner's only
    try:
        settings = _settings(args)
    except SettingsError as exc:
        configure_logging(args.name)
        logging.getLogger("edge").error("%s", exc)
        sys.exit(EXIT_BAD_CONFIG)
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    cache_dir = Path(args.cache_dir or settings.get("edge", "cache_dir") or data_dir / args.name).resolve()
    load_edge_secrets(data_dir)  # missing ones stop the edge here, once, rather than each worker it would restart
    metrics_dir = cache_dir / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)  # counters restart with the node
    try:
        metrics_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # under a file, or a place this user may not write: said, not a traceback
        configure_logging(args.name)
        logging.getLogger("edge").error("the cache directory %s cannot be made (%s): choose another with --cache-dir "
                                        "or ASSETCDN_EDGE_CACHE_DIR ([edge] cache_dir)", cache_dir,
                                        exc.strerror or exc)
        sys.exit(EXIT_BAD_CONFIG)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    for name, value in WORKER_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    # The workers share the port through SO_REUSEPORT, which would also let them join another
    # install's listeners on it: refuse a port someone else holds before starting any.
    host = args.host or settings.get("server", "host")
    port = args.port or settings.get("server", "edge_port")
    https_port = int(settings.get("tls", "https_port"))
    for taken in (p for p in (port, https_port) if p and port_in_use(host, p)):
        configure_logging(args.name)
        logging.getLogger("edge").error("cannot listen on %s:%s: the port is already in use", host, taken)
        sys.exit(EXIT_CANNOT_LISTEN)
    from assetcdn.edge.fastpath.proxy_protocol import proxy_policy
    try:
        proxy_policy(settings)  # a bad [edge] proxy_protocol setting stops the edge before any worker starts
    except (ValueError, TypeError) as exc:
        configure_logging(args.name)
        logging.getLogger("edge").error("%s", exc)
        sys.exit(EXIT_BAD_CONFIG)
    default_certificate: Certificate | None = None
    if https_port:
        # An operator certificate or key that cannot be used stops the edge before any worker starts.
        from assetcdn.edge.tls.certificates import (
            CertificateFileError,
            default_certificate_names,
            read_operator_pair,
            self_signed,
        )
        from assetcdn.shared.pull_settings import check_https_settings
        try:
            check_https_settings(settings)  # its times and HTTP/2 limits: a bad one would break every connection
        except ValueError as exc:
            configure_logging(args.name)
            logging.getLogger("edge").error("%s", exc)
            sys.exit(EXIT_BAD_CONFIG)
        try:
            for chain_file, key_file in settings.get("tls", "certificates"):
                read_operator_pair(str(chain_file), str(key_file))
        except (CertificateFileError, ValueError, TypeError) as exc:
            configure_logging(args.name)
            logging.getLogger("edge").error("%s", exc if isinstance(exc, CertificateFileError) else
                                            f"[tls] certificates must be [certificate file, key file] pairs: {exc}")
            sys.exit(EXIT_BAD_CONFIG)
        if not settings.get("tls", "certificates"):
            # Made here, once, and handed to every worker (in memory, never written): with one certificate each, a
            # client that trusts the one it was shown failed on the other workers.
            default_certificate = self_signed(default_certificate_names(str(settings.get("server", "public_url")),
                                                                        host))
    from assetcdn.edge.access_log_setting import check_access_log
    from assetcdn.edge.shield_address import shield_setting
    from assetcdn.shared.pull_settings import check_control_intervals, check_pull_settings
    try:
        shield_setting(settings.get("origin", "shield"))
        check_pull_settings(settings)  # timeouts, the pool, sizes: a bad one would break every fill instead
        check_control_intervals(settings)  # 0 would ask control without pause from every worker
        check_access_log(settings.section("access_log"), cache_dir / "access-logs")  # as EdgeNode opens it
    except ValueError as exc:
        configure_logging(args.name)
        logging.getLogger("edge").error("%s", exc)
        sys.exit(EXIT_BAD_CONFIG)
    if args.workers <= 1:
        run_worker(argv, 0, default_certificate)
        return
    # Forked by a fork server (a fresh process started now, after PROMETHEUS_MULTIPROC_DIR is set) that
    # loads the edge's modules once: W workers cost one import, not W. Each builds its own app, node and
    # image pool; it dies with the fork server, which exits when this process does.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_PRELOAD))

    def start(index: int) -> multiprocessing.process.BaseProcess:
        process = context.Process(target=run_worker, args=(argv, index, default_certificate),
                                  name=f"{args.name}/{index}")
        process.start()
        return process

    workers = [start(i) for i in range(args.workers)]
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for process in workers:
            if process.is_alive():
                process.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A worker that dies (the OOM killer, a crash) is started again, the others serving meanwhile; not one that
    # stopped by itself or cannot start (its port, a setting: the log says why), and not in a crash loop, which
    # stops the edge (exit 1) for whatever runs it (`assetcdn up`) to see. One that cannot listen stops the edge too
    # (EXIT_CANNOT_LISTEN): `up` names the port.
    # Every worker's end is looked at once (`seen`), however soon it came: one started again that dies before the
    # next look was never in a list of the living, and was left dead (with every worker so, the edge exited 0).
    restarts: list[float] = []
    crash_loop = False
    seen: set[multiprocessing.process.BaseProcess] = set()
    while True:
        ended = [(index, process) for index, process in enumerate(workers)
                 if process.exitcode is not None and process not in seen]
        if not ended:
            alive = [process for process in workers if process.exitcode is None]
            if not alive:
                break
            multiprocessing.connection.wait([process.sentinel for process in alive])
            continue
        for index, process in ended:
            seen.add(process)
            forget_live_gauges(metrics_dir, process.pid)
            code = process.exitcode
            if code == EXIT_CANNOT_LISTEN and not stopping:
                # Its port is another program's (its message above names it): the edge cannot serve as configured, and
                # its other workers serving alone would hide that (`assetcdn up` reported the edge ready).
                configure_logging(args.name)
                logging.getLogger("edge").error("worker %d cannot listen: stopping the edge", index)
                stop(signal.SIGTERM, None)
                continue
            if stopping or code in WORKER_ENDED:
                continue
            now = time.monotonic()
            restarts = [at for at in restarts if now - at < WORKER_CRASH_WINDOW_S] + [now]
            configure_logging(args.name)
            if len(restarts) > WORKER_MAX_RESTARTS:
                logging.getLogger("edge").error("worker %d exited with status %s, %d exits within %.0f s: stopping",
                                                index, code, len(restarts), WORKER_CRASH_WINDOW_S)
                crash_loop = True
                stop(signal.SIGTERM, None)
                break
            logging.getLogger("edge").warning("worker %d exited with status %s: starting it again", index, code)
            workers[index] = start(index)
    codes = [p.exitcode or 0 for p in workers]
    if crash_loop:  # killed workers' statuses are negative: not a clean stop all the same
        sys.exit(1)
    sys.exit(EXIT_CANNOT_LISTEN if EXIT_CANNOT_LISTEN in codes else 1 if any(c > 0 for c in codes) else 0)
