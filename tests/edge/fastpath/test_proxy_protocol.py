"""The PROXY protocol on the edge's http port (assetcdn/edge/fastpath/proxy_protocol.py), on real sockets: the
address a trusted balancer's header names is the client's for hits, for requests the application answers,
for the per-IP limits and for the X-Forwarded-For sent to control; a header from any other address, a
malformed one and one that never ends close the connection unanswered. The https port is covered by
tests/edge/tls/test_proxy_protocol_https.py."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from assetcdn.edge.app_keys import SETTINGS
from assetcdn.edge.fastpath.hit_server import ProxiedTCPSite
from assetcdn.edge.fastpath.proxy_protocol import (
    V2_SIGNATURE,
    Malformed,
    ProxyHeaderReader,
    ProxyPolicy,
    RefusalLog,
    parse_header,
    proxy_policy,
    trusted_networks,
)
from assetcdn.edge.server import EXIT_BAD_CONFIG
from assetcdn.shared.config import load_settings
from tests.integration.harness import KEYS, free_port_block
from tests.support.cdn import ZONE
from tests.support.control import ACCOUNT, METRICS
from tests.support.hit_cdn import (
    HitCdn,
    HitCdnFactory,
    RawConnection,
    request_bytes,
    shared_hit_cdn,
)
from tests.support.images import LOGO_SVG
from tests.support.proxy_protocol import UNTRUSTED, v1, v2
from tests.support.wait import wait_until

SVG = f"{ZONE}/v1/logos/proxied.svg"
HEADER_TIMEOUT_S = 2.0  # the wait for a header that never ends; the other tests send theirs within it, loaded or not
SHARED = pytest.mark.asyncio(loop_scope="module")


def settings_env(root: Path, mode: str = "optional") -> dict[str, str]:
    # The access log is written at each analytics flush: every 0.2 s rather than every second, since each
    # test below waits for the lines of its requests.
    return {"ASSETCDN_EDGE_PROXY_PROTOCOL": mode, "ASSETCDN_EDGE_PROXY_PROTOCOL_TRUSTED": "127.0.0.1/32",
            "ASSETCDN_EDGE_PROXY_PROTOCOL_TIMEOUT_S": str(HEADER_TIMEOUT_S),
            "ASSETCDN_ACCESS_LOG_OUTPUT": "file", "ASSETCDN_ACCESS_LOG_DIRECTORY": str(root / "access"),
            "ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S": "0.2"}


async def open_from(port: int, source: str = "127.0.0.1") -> RawConnection:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    return RawConnection(reader, writer)


async def access_log_ip(root: Path, request_id: str) -> str:
    """The client_ip the access log wrote for the request `request_id` (written at each analytics flush)."""
    found: dict[str, Any] = {}

    async def logged() -> bool:
        for path in (root / "access").glob("access-*.log"):
            for line in path.read_bytes().splitlines():
                entry = orjson.loads(line)
                if entry["request_id"] == request_id:
                    found.update(entry)
                    return True
        return False

    await wait_until(logged, f"the access log line of {request_id}")
    return str(found["client_ip"])


async def refusals(cdn: HitCdn, reason: str) -> float:
    resp = await cdn.control.session.get(f"http://127.0.0.1:{cdn.plain_port}/metrics", headers=METRICS)
    assert resp.status == 200
    for line in (await resp.text()).splitlines():
        if line.startswith(f'assetcdn_edge_proxy_header_refusals_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def closed_unanswered(conn: RawConnection) -> bool:
    """The server closed the connection and wrote nothing."""
    try:
        rest = await asyncio.wait_for(conn.reader.read(), 10)
    except ConnectionError:
        return True
    return rest == b""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxied_cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, Path]]:
    root = tmp_path_factory.mktemp("proxy-protocol")
    env = {**settings_env(root), "ASSETCDN_COUNTERS_SIGNED_RATE_LIMIT": "100"}
    async with shared_hit_cdn(root, workers=0, **env) as cdn:
        await cdn.upload(SVG, LOGO_SVG)
        yield cdn, root


@SHARED
@pytest.mark.parametrize(("header", "client"), [
    (v1("203.0.113.5"), "203.0.113.5"),
    (v1("2001:db8::5"), "2001:db8::5"),
    (v2("198.51.100.7"), "198.51.100.7"),
    (v2("2001:db8::7", tlvs=bytes((0x04, 0, 3)) + b"abc" + bytes((0x05, 0, 2)) + b"id"), "2001:db8::7"),
    (v2("::ffff:192.0.2.9"), "192.0.2.9"),   # a dual-stack balancer's IPv4 client is an IPv4 client
    (v2(None, local=True), "127.0.0.1"),     # LOCAL: the balancer's own connection
    (b"PROXY UNKNOWN\r\n", "127.0.0.1"),
    (b"", "127.0.0.1"),                      # optional: a trusted peer without a header is itself
])
async def test_the_header_names_the_client_of_hits_and_of_what_the_application_answers(
        proxied_cdn: tuple[HitCdn, Path], header: bytes, client: str) -> None:
    cdn, root = proxied_cdn
    conn = await open_from(cdn.port)
    hit, missing = str(uuid.uuid4()), str(uuid.uuid4())
    await conn.send(header + request_bytes(f"/{SVG}", X_Request_ID=hit))
    first = await conn.response()
    assert first.status == 200
    await conn.send(request_bytes(f"/{ZONE}/v1/none.txt", X_Request_ID=missing))
    assert (await conn.response()).status == 404  # handed to the application
    conn.close()
    assert await access_log_ip(root, hit) == client
    assert await access_log_ip(root, missing) == client


@SHARED
async def test_per_client_limits_count_the_address_the_header_names(proxied_cdn: tuple[HitCdn, Path]) -> None:
    cdn, _ = proxied_cdn

    async def remaining(header: bytes) -> str | None:
        conn = await open_from(cdn.port)
        await conn.send(header + request_bytes("/api/signed"))
        answer = await conn.response()
        conn.close()
        return answer.header("X-RateLimit-Remaining")

    assert [await remaining(v1("203.0.113.60")), await remaining(v2("203.0.113.60")),
            await remaining(v1("203.0.113.61")), await remaining(v2("2001:db8:1:2::61"))] == ["99", "98", "99", "99"]


@SHARED
async def test_control_is_told_the_client_the_header_names(proxied_cdn: tuple[HitCdn, Path]) -> None:
    cdn, _ = proxied_cdn
    body = b'{"Name": "proxied-zone"}'
    conn = await open_from(cdn.port)
    with_body, without = str(uuid.uuid4()), str(uuid.uuid4())
    # A request with a body: the connection is given to aiohttp for good; one without: handed over alone.
    await conn.send(v2("198.51.100.20") + request_bytes(
        "/api/core/zones", "POST", X_Request_ID=with_body, Content_Type="application/json",
        Content_Length=str(len(body)), **ACCOUNT) + body)
    assert (await conn.response()).status == 201
    conn.close()
    conn = await open_from(cdn.port)
    await conn.send(v1("198.51.100.21") + request_bytes("/api/core/zones", X_Request_ID=without, **ACCOUNT))
    assert (await conn.response()).status == 200
    conn.close()
    found: dict[str, str] = {}

    async def recorded() -> bool:
        resp = await cdn.control.get("/api/logs?limit=500", headers=ACCOUNT)
        for record in (await resp.json())["records"]:
            if record["requestId"] in (with_body, without):
                found[record["requestId"]] = record["ip"]
        return len(found) == 2

    await wait_until(recorded, "control's request log of both calls")
    assert found == {with_body: "198.51.100.20", without: "198.51.100.21"}


@SHARED
async def test_a_header_from_an_untrusted_address_is_refused(proxied_cdn: tuple[HitCdn, Path]) -> None:
    cdn, root = proxied_cdn
    before = await refusals(cdn, "untrusted")
    for header in (v1("203.0.113.99"), v2("203.0.113.99")):
        conn = await open_from(cdn.port, UNTRUSTED)
        await conn.send(header + request_bytes(f"/{SVG}"))
        assert await closed_unanswered(conn)
        conn.close()
    assert await refusals(cdn, "untrusted") == before + 2
    # The same peer without a header is served as itself.
    conn = await open_from(cdn.port, UNTRUSTED)
    request_id = str(uuid.uuid4())
    await conn.send(b"G")
    await conn.send(request_bytes(f"/{SVG}", X_Request_ID=request_id)[1:])
    assert (await conn.response()).status == 200
    conn.close()
    assert await access_log_ip(root, request_id) == UNTRUSTED


@SHARED
@pytest.mark.parametrize("header", [
    b"PROXY TCP4 203.0.113.5 127.0.0.1 40000\r\n",                     # a port missing
    b"PROXY TCP4 2001:db8::5 127.0.0.1 40000 80\r\n",                  # not the family named
    b"PROXY TCP4 203.0.113.5  127.0.0.1 40000 80\r\n",                 # two spaces
    b"PROXY TCP4 203.0.113.5 127.0.0.1 40000 80\n",                    # LF without CR
    b"PROXY TCP4 203.0.113.5 127.0.0.1 99999 80\r\n",                  # not a port
    b"PROXY UDP4 203.0.113.5 127.0.0.1 40000 80\r\n",
    b"PROXY TCP4 " + b"1" * 120 + b"\r\n",                             # past 107 bytes
    V2_SIGNATURE + bytes((0x11, 0x11, 0, 12)) + bytes(12),             # version 1 in a version 2 header
    V2_SIGNATURE + bytes((0x22, 0x11, 0, 12)) + bytes(12),             # command 2
    V2_SIGNATURE + bytes((0x21, 0x41, 0, 12)) + bytes(12),             # family 4
    V2_SIGNATURE + bytes((0x21, 0x11, 0, 4)) + bytes(4),               # too short for TCP4's addresses
    V2_SIGNATURE + bytes((0x21, 0x21, 0, 12)) + bytes(12),             # too short for TCP6's
    V2_SIGNATURE + bytes((0x21, 0x11)) + (4096).to_bytes(2) + bytes(4096),  # too long
])
async def test_a_malformed_header_closes_the_connection(proxied_cdn: tuple[HitCdn, Path], header: bytes) -> None:
    cdn, _ = proxied_cdn
    before = await refusals(cdn, "malformed")
    conn = await open_from(cdn.port)
    await conn.send(header + request_bytes(f"/{SVG}"))
    assert await closed_unanswered(conn)
    conn.close()
    assert await refusals(cdn, "malformed") == before + 1


@SHARED
async def test_a_header_sent_in_pieces_is_read_whole(proxied_cdn: tuple[HitCdn, Path]) -> None:
    cdn, root = proxied_cdn
    for header in (v1("203.0.113.33"), v2("203.0.113.33")):
        conn = await open_from(cdn.port)
        conn.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request_id = str(uuid.uuid4())
        for piece in (header[:1], header[1:7], header[7:13], header[13:-1], header[-1:]):
            await conn.send(piece)
        await conn.send(request_bytes(f"/{SVG}", X_Request_ID=request_id))
        assert (await conn.response()).status == 200
        conn.close()
        assert await access_log_ip(root, request_id) == "203.0.113.33"


@SHARED
@pytest.mark.parametrize("begun", [b"PROXY TCP4 203.0.113.5 ", V2_SIGNATURE[:7], v2("203.0.113.5")[:20]])
async def test_a_header_that_never_ends_is_cut_off(proxied_cdn: tuple[HitCdn, Path], begun: bytes) -> None:
    cdn, _ = proxied_cdn
    before = await refusals(cdn, "timeout")
    conn = await open_from(cdn.port)
    await conn.send(begun)
    # Closed by proxy_protocol_timeout_s: header_timeout_s (20 s) is past closed_unanswered's bound.
    assert await closed_unanswered(conn)
    conn.close()
    assert await refusals(cdn, "timeout") == before + 1


async def test_required_closes_a_trusted_peer_without_a_header(make_hit_cdn: HitCdnFactory, tmp_path: Path) -> None:
    cdn = await make_hit_cdn(**settings_env(tmp_path, "required"))
    await cdn.upload(SVG, LOGO_SVG)
    conn = await open_from(cdn.port)
    await conn.send(request_bytes(f"/{SVG}"))
    assert await closed_unanswered(conn)
    conn.close()
    assert await refusals(cdn, "missing") == 1
    for source, header in (("127.0.0.1", v1("203.0.113.8")), ("127.0.0.1", v2(None, local=True)), (UNTRUSTED, b"")):
        conn = await open_from(cdn.port, source)
        await conn.send(header + request_bytes(f"/{SVG}"))
        assert (await conn.response()).status == 200
        conn.close()


async def test_aiohttps_own_site_reads_the_header_too(make_hit_cdn: HitCdnFactory, tmp_path: Path) -> None:
    """``[edge] fast_hits = false``: the application's own site, behind the same reader."""
    cdn = await make_hit_cdn(**settings_env(tmp_path))
    policy = proxy_policy(cdn.app[SETTINGS])
    assert policy is not None
    site = ProxiedTCPSite(cdn.site._runner, "127.0.0.1", 0, policy=policy)
    await site.start()
    try:
        await cdn.upload(SVG, LOGO_SVG)
        request_id = str(uuid.uuid4())
        conn = await open_from(site.port)
        await conn.send(v2("203.0.113.44") + request_bytes(f"/{SVG}", X_Request_ID=request_id))
        assert (await conn.response()).status == 200
        conn.close()
        assert await access_log_ip(tmp_path, request_id) == "203.0.113.44"
        conn = await open_from(site.port, UNTRUSTED)
        await conn.send(v1("203.0.113.45") + request_bytes(f"/{SVG}"))
        assert await closed_unanswered(conn)
        conn.close()
    finally:
        await site.stop()


# --- the reader and the parser alone -------------------------------------------------------------------


class Transport:
    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.protocol: Any = None
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.peer: Any = None
        self.received = b""

    def connection_made(self, transport: Any) -> None:
        self.peer = transport.get_extra_info("peername")

    def data_received(self, data: bytes) -> None:
        self.received += data


@pytest.mark.parametrize("header", [v1("203.0.113.70", 1234), v2("203.0.113.70", 1234, tlvs=b"\x04\x00\x01x")])
async def test_every_split_of_a_header_gives_the_same_client(header: bytes) -> None:
    policy = ProxyPolicy(False, trusted_networks(["127.0.0.1"]), 20.0, 5.0)
    request = request_bytes("/x")
    for at in range(1, len(header) + 1):
        inner = Inner()
        reader = ProxyHeaderReader(policy, lambda inner=inner: inner)  # type: ignore[misc]
        transport = Transport(("127.0.0.1", 5000))
        reader.connection_made(transport)  # type: ignore[arg-type]
        reader.data_received(header[:at])
        assert inner.peer is None or at == len(header)
        reader.data_received(header[at:] + request)
        assert (inner.peer, inner.received, transport.protocol) == (("203.0.113.70", 1234), request, inner)
        assert not transport.closed


def test_the_parser_reads_what_the_specification_allows() -> None:
    assert parse_header(b"PROXY TCP4 192.0.2.1 192.0.2.2 1 65535\r\nGET") == (40, ("192.0.2.1", 1))
    assert parse_header(b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n") == (32, ("2001:db8::1", 1, 0, 0))
    assert parse_header(b"PROXY UNKNOWN ffff:: ffff:: 1 2\r\n") == (33, None)
    assert parse_header(b"PROXY TCP4 192.0.2.1") is None
    longest = b"PROXY UNKNOWN " + b"f" * 91 + b"\r\n"
    assert len(longest) == 107 and parse_header(longest) == (107, None)
    with pytest.raises(Malformed):
        parse_header(b"PROXY UNKNOWN " + b"f" * 92 + b"\r\n")
    assert parse_header(v2("192.0.2.1")[:27]) is None
    unix = V2_SIGNATURE + bytes((0x21, 0x31)) + (216).to_bytes(2) + bytes(216)
    assert parse_header(unix) == (232, None)


def test_refusals_are_logged_one_line_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    refusal_log = RefusalLog(60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "assetcdn.edge.fastpath.proxy_protocol"):
        for second in (0, 1, 30, 59.9, 60, 61):
            now[0] = 1000.0 + second
            refusal_log.refused("untrusted", ("192.0.2.1", 5), "a header")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert "192.0.2.1" in lines[0] and "untrusted" in lines[0] and "0 more" in lines[0]
    assert "3 more" in lines[1]


def test_settings_that_cannot_be_meant_stop_the_start() -> None:
    def policy(mode: str, trusted: str = "[]") -> ProxyPolicy | None:
        return proxy_policy(load_settings(environ={"ASSETCDN_EDGE_PROXY_PROTOCOL": mode,
                                                   "ASSETCDN_EDGE_PROXY_PROTOCOL_TRUSTED": trusted}))

    assert policy("off") is None
    made = policy("required", "10.0.0.0/8, 192.0.2.1")
    assert made is not None and made.required and made.trusts(("10.1.2.3", 1)) and made.trusts(("192.0.2.1", 1))
    assert not made.trusts(("192.0.2.2", 1)) and made.trusts(("::ffff:10.0.0.1", 1, 0, 0))
    assert proxy_policy(load_settings(environ={"ASSETCDN_EDGE_PROXY_PROTOCOL": "optional",
                                               "ASSETCDN_EDGE_PROXY_PROTOCOL_TRUSTED": '["::1/128"]'})) is not None
    for mode, trusted in (("on", "10.0.0.0/8"), ("optional", "[]"), ("optional", "10.0.0.300/8")):
        with pytest.raises(ValueError):
            policy(mode, trusted)


@pytest.mark.parametrize(("mode", "trusted", "named"), [
    ("optional", "[]", "names no address"), ("required", "10.0.0.0/33", "'10.0.0.0/33'"), ("always", "[]", "always")])
def test_the_edge_refuses_to_start_with_a_setting_that_cannot_be_meant(tmp_path: Path, mode: str, trusted: str,
                                                                        named: str) -> None:
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_EDGE_PROXY_PROTOCOL": mode,
           "ASSETCDN_EDGE_PROXY_PROTOCOL_TRUSTED": trusted}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(free_port_block(1)), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert "edge.proxy_protocol" in done.stderr and named in done.stderr
