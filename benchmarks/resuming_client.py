"""A client of resumed TLS handshakes: new connections, one after the other, each offering the session the
previous one ended with (as a browser does), each carrying one HTTP/1.1 GET with ``Connection: close``.

    .venv/bin/python -m benchmarks.resuming_client --url https://localhost:8443/path --seconds 4

Prints one JSON line: connections made, how many resumed, and errors (a failed connection or an answer
that is not 200). The certificate is not checked (the peers of the load runs check it). Loopback only.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import time
from urllib.parse import urlsplit

from benchmarks.load import require_loopback


def run(url: str, seconds: float) -> dict[str, int]:
    require_loopback(url)
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 443
    request = f"GET {parts.path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    context = ssl._create_unverified_context()  # noqa: S323  (a load generator on loopback)
    context.set_alpn_protocols(["http/1.1"])
    session: ssl.SSLSession | None = None
    counts = {"connections": 0, "resumed": 0, "errors": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        counts["connections"] += 1
        try:
            with socket.create_connection((host, port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname=host, session=session) as tls:
                tls.sendall(request)
                answer = bytearray()
                while chunk := tls.recv(65536):
                    answer += chunk
                counts["resumed"] += bool(tls.session_reused)
                session = tls.session
            if not answer.startswith(b"HTTP/1.1 200"):
                counts["errors"] += 1
        except (OSError, ssl.SSLError):
            counts["errors"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.url, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
