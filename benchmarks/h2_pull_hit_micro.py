"""The edge worker's CPU per HTTP/2 hit of a pull zone, the streams' frames passed in memory.

    .venv/bin/python -m benchmarks.h2_pull_hit_micro [--rounds 50] [--streams 50]

A hit-path edge in this process (tests/support/hit_cdn.py) with a pull zone in front of a scripted origin stores
one 5 KB answer (max-age=600); an HTTP/2 connection to its https hit server (assetcdn/edge/tls/h2.py's
H2Protocol on a memory transport, the `h2` library as the client, windows opened wide) then asks for it
``--streams`` times per round. Each round's frames go to the server at once; the process's CPU from then until
the answers are written is divided by the streams answered (the first ten rounds are not counted). No TLS and
no sockets: what is measured is the worker's own share of an HTTP/2 pull hit (frames, decision, fields, HPACK),
to compare trees, not to compare with another server.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings

from assetcdn.edge.fastpath.hit_server import HitServer
from assetcdn.edge.tls.h2 import H2Limits, H2Protocol
from tests.support.h2_memory import MemoryTransport
from tests.support.origins import LONG, pull_zone_on_hit_cdn

ZONE = "h2pull"
NAME = "/hit.bin"
BODY = b"x" * 5120
WARM_ROUNDS = 10
WIDE = 2**31 - 1


async def measure(rounds: int, streams: int) -> float:
    with tempfile.TemporaryDirectory(prefix="h2-pull-") as directory:
        async with pull_zone_on_hit_cdn(Path(directory), ZONE) as (cdn, origin):
            origin.answer(NAME, BODY, headers={"Content-Type": "application/octet-stream", "ETag": '"h"', **LONG})
            plain = await cdn.connect()
            if (await plain.request(f"/{ZONE}{NAME}")).header("X-Cache") != "MISS":
                raise RuntimeError("the first request was not a miss")
            plain.close()
            assert cdn.site.hits is not None
            server = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
            transport = MemoryTransport()
            protocol = H2Protocol(server, H2Limits())
            protocol.connection_made(transport)
            client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
            client.initiate_connection()
            client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WIDE})
            client.increment_flow_control_window(WIDE - 65535)
            protocol.data_received(client.data_to_send())
            client.receive_data(transport.take())
            protocol.data_received(client.data_to_send())
            request = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", f"/{ZONE}{NAME}".encode()),
                       (b":authority", b"edge.test"), (b"user-agent", b"h2-pull-hit-micro")]
            cpu, answered = 0.0, 0
            for round_ in range(rounds):
                for _ in range(streams):
                    client.send_headers(client.get_next_available_stream_id(), request, end_stream=True)
                frames = client.data_to_send()
                started = time.process_time()
                protocol.data_received(frames)
                for _ in range(5):  # anything the answers left for the loop (a stream taking the HTTP/1.1 side)
                    await asyncio.sleep(0)
                spent = time.process_time() - started
                ended = sum(isinstance(event, h2.events.StreamEnded) for event in client.receive_data(transport.take()))
                protocol.data_received(client.data_to_send())
                if ended != streams:
                    raise RuntimeError(f"round {round_}: {ended} of {streams} streams answered")
                if round_ >= WARM_ROUNDS:
                    cpu += spent
                    answered += ended
            server.stop()
            return cpu / answered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--streams", type=int, default=50)
    args = parser.parse_args(argv)
    per_hit = asyncio.run(measure(max(args.rounds, WARM_ROUNDS + 1), args.streams))
    print(f"{per_hit * 1e6:.1f} us of CPU per HTTP/2 pull zone hit (5 KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
