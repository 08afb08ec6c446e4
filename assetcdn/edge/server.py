"""One edge node process: W worker processes sharing the public port (SO_REUSEPORT)."""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import shutil
import signal
import sys
from pathlib import Path

from assetcdn.shared.config import load_settings
from assetcdn.shared.logs import configure_logging
from assetcdn.shared.process import EXIT_CANNOT_LISTEN, die_with_parent, port_in_use
from assetcdn.shared.secrets import private_umask


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="assetcdn edge", description="Run one edge node.")
    parser.add_argument("--control-url", required=True)
    parser.add_argument("--name", default="edge-0")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cache-dir", help="default: <data_dir>/<name>")
    parser.add_argument("--data-dir", help="where secrets.env may be read from when not in the environment")
    parser.add_argument("--advertise-host", help="address control uses to reach this node (default: --host)")
    parser.add_argument("--config")
    return parser


def run_worker(argv: list[str], worker: int) -> None:
    die_with_parent()
    # Imported here: PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client is imported.
    from assetcdn.edge.app import EdgeIdentity, create_app
    from assetcdn.edge.fastpath.server import HitSite
    from assetcdn.shared.http_server import serve
    from assetcdn.shared.secrets import load_edge_secrets

    args = _parser().parse_args(argv)
    settings = load_settings(args.config)
    host = args.host or settings.get("server", "host")
    port = args.port or settings.get("server", "edge_port")
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    cache_dir = Path(args.cache_dir or settings.get("edge", "cache_dir") or data_dir / args.name).resolve()
    configure_logging(f"{args.name}/{worker}")
    identity = EdgeIdentity(args.name, worker, args.control_url, cache_dir, args.advertise_host or host, data_dir)
    app = create_app(settings, load_edge_secrets(data_dir), identity)
    # Hits are answered below aiohttp (assetcdn/edge/fastpath/), unless the operator turned that off.
    site = HitSite if settings.get("edge", "fast_hits") else None
    sys.exit(serve(app, settings, host=host, port=port, reuse_port=True, site_factory=site))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    private_umask()  # cached assets (signed ones too) and metrics files are the owner's only
    settings = load_settings(args.config)
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    cache_dir = Path(args.cache_dir or settings.get("edge", "cache_dir") or data_dir / args.name).resolve()
    metrics_dir = cache_dir / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)  # counters restart with the node
    metrics_dir.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    # The workers share the port through SO_REUSEPORT, which would also let them join another
    # install's listeners on it: refuse a port someone else holds before starting any.
    host = args.host or settings.get("server", "host")
    port = args.port or settings.get("server", "edge_port")
    if port_in_use(host, port):
        configure_logging(args.name)
        logging.getLogger("edge").error("cannot listen on %s:%s: the port is already in use", host, port)
        sys.exit(EXIT_CANNOT_LISTEN)
    if args.workers <= 1:
        run_worker(argv, 0)
        return
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=run_worker, args=(argv, i), name=f"{args.name}/{i}")
               for i in range(args.workers)]
    for process in workers:
        process.start()

    def stop(signum: int, _frame: object) -> None:
        for process in workers:
            if process.is_alive():
                process.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for process in workers:
        process.join()
    codes = [p.exitcode or 0 for p in workers]
    sys.exit(EXIT_CANNOT_LISTEN if EXIT_CANNOT_LISTEN in codes else 1 if any(c > 0 for c in codes) else 0)
