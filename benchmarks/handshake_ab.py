"""CPU per new TLS connection of two source trees, side by side: the edge worker's and the whole system's.

    .venv/bin/python -m benchmarks.handshake_ab TREE_A TREE_B [--turns 12] [--duration 3] [--resume]

Each tree (a checkout or ``git archive`` of the project) runs its own ``assetcdn up`` (one edge with one worker
and an https port, the edge's modules imported from that tree), both with the same ECDSA P-256 certificate
and the 5 KB file of benchmarks/hits_bench.py in the memory tier. Turn after turn, in rotating order, four
``openssl s_time -new`` (``--resume``: ``-reuse``) run against one tree's port for ``--duration`` seconds
(benchmarks/https_bench.py's ``new conn`` and ``resumed`` modes), that tree's processes pinned to core 0
and s_time to core 1; the CPU of its edge worker and of its whole ``up`` (read ``SETTLE_S`` after the run,
as https_bench reads it) is divided by the connections made. Printed per turn, then each tree's median
and least microseconds per connection.

On a shared machine a single bench run's figure for one server moves by a fifth from run to run; the two
trees alternating many short turns under the same load is what can compare them. Loopback only; every
run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.hits_bench import SETTLE_S, Server, edge_server, prepare_files, whole_system
from benchmarks.https_bench import measure_one, require_tools, warm
from benchmarks.measure import load_average, machine
from tests.edge.tls.certs import TestCa
from tests.integration.harness import free_port_block, start_cdn


@dataclass
class Tree:
    path: str
    system: Server
    worker: Server
    url: str
    worker_us: list[float] = field(default_factory=list)
    system_us: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")
    args = parser.parse_args(argv)
    require_tools()
    prefix = ("taskset", "-c", args.load_core)
    print(f"# handshake_ab: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="handshake-ab-") as tmp:
        workdir = Path(tmp)
        cert, key = TestCa().issue("localhost").write(workdir, "localhost")
        cdns = []
        try:
            trees = []
            for index, path in enumerate(args.trees):
                port = free_port_block(1)
                env = {"PYTHONPATH": str(Path(path).resolve()), "ASSETCDN_EDGE_MEMORY_CACHE_MB": "512",
                       "ASSETCDN_TLS_HTTPS_PORT": str(port),
                       "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(cert), str(key)]])}
                (workdir / f"cdn{index}").mkdir()
                cdn = start_cdn(workdir / f"cdn{index}", workers=1, env_extra=env)
                cdns.append(cdn)
                system, _control = whole_system(cdn)
                paths, bodies = asyncio.run(prepare_files(cdn, ["5 KB"]))
                base = f"https://localhost:{port}"
                asyncio.run(warm(base, list(paths.values()), bodies))
                trees.append(Tree(path, system, edge_server(cdn), f"{base}/{paths['5 KB']}"))
            mode = "resumed" if args.resume else "new conn"
            for turn in range(args.turns):
                for tree in trees[turn % 2:] + trees[:turn % 2]:
                    tree.system.pin(args.server_core)
                    sample = measure_one(tree.system, mode, tree.url, args, prefix, SETTLE_S, part=tree.worker)
                    rate = max(sample.rps, 1 / args.duration)  # at least one connection: cores / rate is CPU s each
                    tree.worker_us.append(sample.part_cpu / rate * 1e6)
                    tree.system_us.append(sample.cpu / rate * 1e6)
                    print(f"# turn {turn + 1} {tree.path}: {sample.rps:,.0f} connections/s, worker "
                          f"{sample.part_cpu:.2f} cores, {tree.worker_us[-1]:,.0f} us a connection (whole system "
                          f"{tree.system_us[-1]:,.0f}), {sample.errors} of the wrong kind; load {load_average()}",
                          flush=True)
            for tree in trees:
                print(f"{tree.path}: worker {statistics.median(tree.worker_us):,.0f} us a connection (median; least "
                      f"{min(tree.worker_us):,.0f}), whole system {statistics.median(tree.system_us):,.0f} "
                      f"(least {min(tree.system_us):,.0f})")
            print(f"# done; load average {load_average()}")
        finally:
            for cdn in cdns:
                cdn.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
