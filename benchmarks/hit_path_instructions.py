"""Instructions per cache hit of the hit path's Python, counted by callgrind: a figure the machine's load does not move.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/hits.out \\
        .venv/bin/python -m benchmarks.hit_path_instructions [--requests 2000] [--empty]

The setup of benchmarks/hit_path_micro.py (a control app and an edge app in this process, a 5 KB file
uploaded and warmed, one ``HitProtocol`` on a transport that throws the answers away), then ``--requests``
wrk request heads with callgrind's instrumentation on (``callgrind_control -i on``, then off): valgrind
prints the total as "Collected". ``--empty`` runs the same loop with ``data_received`` doing nothing: the
loop's and the toggles' share, to subtract. The transport's ``get_write_buffer_size`` and ``is_closing``
are C calls here, as uvloop's are. Control is taken as reachable for an hour (valgrind runs the process
tens of times slower), so every request stays a hit. Another checkout (one without this file) is counted by
running this file with that checkout first on the path: ``cd <checkout> && PYTHONPATH=$PWD valgrind ... python
/path/to/benchmarks/hit_path_instructions.py``. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import hit_path_micro as micro


def instrument(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
                   stdout=subprocess.DEVNULL, check=False)


async def run(args: argparse.Namespace, tmp: Path) -> None:
    async with micro.hit_site(tmp, "edge-i", {"ASSETCDN_EDGE_REACHABLE_FOR_S": "3600"}) as (_app, site):
        hits = site.hits
        assert hits is not None
        for _ in range(600):  # until a request is a hit answered here (replication is slow under valgrind)
            connection = micro.HitProtocol(hits)
            transport: Any = micro.NullTransport()
            transport.get_write_buffer_size = int  # C calls returning 0 and False, as uvloop's are
            transport.is_closing = bool
            connection.connection_made(transport)
            before = hits.served
            connection.data_received(micro.WRK)
            if hits.served == before + 1:
                break
            await asyncio.sleep(0.2)
        else:
            raise SystemExit("the file never became a hit answered on the hit path")
        feed = connection.data_received
        for _ in range(200):  # every path of the loop taken once before counting
            feed(micro.WRK)
        served = hits.served
        if args.empty:
            feed = micro.NullTransport().write
        instrument(True)
        for _ in range(args.requests):
            feed(micro.WRK)
        instrument(False)
        answered = hits.served - served
        assert args.empty or answered == args.requests, f"{args.requests - answered} requests were not hits"
        print(f"{args.requests} requests, {answered} answered on the hit path: instructions per hit = "
              f"valgrind's 'Collected' / {args.requests} (less an --empty run's)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--empty", action="store_true", help="the loop alone (the share to subtract)")
    return micro.run_in_temporary_directory(run, parser.parse_args(argv), "hit-instructions-")


if __name__ == "__main__":
    sys.exit(main())
