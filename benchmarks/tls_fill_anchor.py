"""Pull zone cache fills over TLS per core: the edge beside nginx ``proxy_cache`` with ``ssl``, one origin.

    .venv/bin/python -m benchmarks.tls_fill_anchor [--size "5 KB"] [--turns 4] [--duration 4] [--h2]

`make bench-pull` compares fills over plain HTTP; browsers ask over HTTPS. Here the edge (`assetcdn up` with an https
port, tests/support/https.py's test certificates, one worker, a 512 MB memory tier: benchmarks/fill_ab.py's
`start_tree`) and nginx (benchmarks/nginx_conf.py with ``ssl http2``, ``proxy_cache`` and keep-alive connections
to the origin, as `make bench-https` configures it, a certificate of a test CA) stand in front of pull_bench's nginx
origin, pinned to core 1 with wrk. Turn after turn, in alternating order, wrk (``-t2 -c64``) asks each over TLS
HTTP/1.1 for ``--duration`` seconds for URLs never asked before (pull_bench's fills), the server's whole process
tree pinned to core 0: CPU per fill (the edge's whole system, read ``SETTLE_S`` after the run), then the medians
and fills per core. With ``--h2`` both are asked over HTTP/2 instead: h2load over one connection, 64 streams at a
time, ``--h2-requests`` new URLs per turn from a list, each once (benchmarks/fill_ab.py's `h2_fills`). Varnish is not
here: it has no TLS of its own (`make bench-https` puts hitch in front of it). `make bench-pull-tls` runs both.
Loopback only; every run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.fill_ab import fill_turn, parsed_turns, start_tree, turn_arguments
from benchmarks.hits_bench import Server, anchor, stop
from benchmarks.measure import load_average, machine, require_tools, tool_path
from benchmarks.nginx_conf import TlsFiles, nginx_conf
from benchmarks.pull_bench import SIZES, ZONE, ready_origin
from tests.edge.tls.certs import TestCa
from tests.integration.harness import free_port_block


def start_nginx(workdir: Path, origin_port: int, core: str) -> Server:
    """nginx with TLS and proxy_cache in front of the origin, its certificate from a test CA of its own."""
    cert, key = TestCa().issue("localhost").write(workdir, "nginx-tls")
    os.chmod(key, 0o644)  # read by nginx's master as it starts; the directory is the benchmark's own
    directory = workdir / "nginx"
    directory.mkdir()
    os.chmod(directory, 0o777)
    port = free_port_block(1)
    conf = directory / "nginx.conf"
    conf.write_text(nginx_conf(directory, port, origin_port, "", tls=TlsFiles(cert, key), proxy_path="", keepalive=64))
    process = subprocess.Popen(["taskset", "-c", core, tool_path("nginx"), "-c", str(conf), "-p", str(directory)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return anchor("nginx", f"https://127.0.0.1:{port}", process)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    turn_arguments(parser, 4)
    args = parsed_turns(parser, argv)
    require_tools(("wrk", "nginx", "taskset", *(("h2load",) if args.h2 else ())), "bench-pull-tls")
    protocol = "HTTP/2" if args.h2 else "TLS HTTP/1.1"
    print(f"# tls_fill_anchor: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="tls-fill-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # nginx's workers run as their own user
        origin, bodies = ready_origin(workdir, free_port_block(1), args.load_core)
        (workdir / "cdn").mkdir()
        cdn, edge = start_tree(workdir / "cdn", str(Path(__file__).resolve().parents[1]), origin,
                               bodies[SIZES[args.size][0]], args.size, args.server_core, tls=True)
        nginx = start_nginx(workdir, int(origin.base.rsplit(":", 1)[1]), args.server_core)
        try:
            time.sleep(1)  # nginx's worker up
            servers = {"edge": (edge, f"{edge.base}/{ZONE}/", f"/{ZONE}"), "nginx": (nginx, f"{nginx.base}/", "")}
            per_fill: dict[str, list[float]] = {name: [] for name in servers}
            for turn in range(args.turns):
                for name in list(servers) if turn % 2 == 0 else list(reversed(servers)):
                    server, url, path_prefix = servers[name]
                    cost, errors, rate = fill_turn(server, url, f"{path_prefix}/{SIZES[args.size][1]}/t{turn}-",
                                                   args, workdir / f"urls-{name}-{turn}")
                    per_fill[name].append(cost)
                    print(f"# turn {turn + 1} {name}: {rate:,.0f} fills/s, {per_fill[name][-1]:,.0f} us of CPU "
                          f"a fill, {errors} errors; load {load_average()}", flush=True)
            medians = {name: statistics.median(values) for name, values in per_fill.items()}
            for name, median in medians.items():
                print(f"{name}: {median:,.0f} us of CPU a {args.size} fill over {protocol}, {1e6 / median:,.0f} fills per "
                      f"core (turns {', '.join(f'{value:,.0f}' for value in per_fill[name])})")
            print(f"edge / nginx per core: {medians['nginx'] / medians['edge']:.2f}x; load average {load_average()}")
        finally:
            cdn.stop()
            stop(nginx)
            stop(origin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
