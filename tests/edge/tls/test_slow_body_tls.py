"""A request body that comes too slowly on the edge's https port (a real `assetcdn up`): over HTTP/1.1 the client
still sending it gets its 408 and a clean end of the connection, as on the plain port
(tests/integration/test_hostile_clients.py); over HTTP/2 the 408 ends that stream only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.edge.tls.client import H2Client, client_context
from tests.integration.harness import ACCESS
from tests.support.https import ZONE, HttpsCdn, start_https_cdn
from tests.support.sockets import still_sending_after_answer

pytestmark = pytest.mark.integration

BODY_TIMEOUT_S = 2  # server.body_timeout_s of this cluster
WAIT_S = 30.0  # how long a test waits for what the deadline should bring about (never asserted as a duration)


@pytest.fixture(scope="module")
def slow_https_cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    cdn = start_https_cdn(tmp_path_factory.mktemp("slow-https"),
                          {"ASSETCDN_SERVER_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S)})
    try:
        yield cdn
    finally:
        cdn.cdn.stop()


async def test_a_client_still_sending_its_body_over_tls_after_its_408_reads_the_answer_to_a_clean_end(
        slow_https_cdn: HttpsCdn) -> None:
    """Cut off for a body that came too slowly, a client that goes on sending it over TLS gets the 408 and the end
    of the connection, never a reset: TLS has no half-close for the server's side (no FIN before the close), but
    what the client still sends is read and dropped for a while before the close, as on the plain port."""
    head = (f"PUT /api/storage/{ZONE}/slow/still-tls.txt HTTP/1.1\r\nHost: localhost\r\n"
            f"AccessKey: {ACCESS['AccessKey']}\r\nContent-Length: 100000\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", slow_https_cdn.https_port, ssl=client_context(slow_https_cdn.ca_file),
        server_hostname="localhost")
    try:
        answer, rest = await still_sending_after_answer(reader, writer, head, WAIT_S)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b'"code":"RequestTimeout"' in rest
    finally:
        writer.close()


def test_a_body_too_slow_on_an_http2_stream_ends_that_stream_only(slow_https_cdn: HttpsCdn) -> None:
    """The 408 of a stream whose body came too slowly ends that stream (the client may go on sending its DATA), not
    the connection: the next request on it is answered."""
    client = H2Client(slow_https_cdn.https_port, "localhost", slow_https_cdn.ca_file)
    try:
        stream_id = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream_id, client.request_headers(
            f"/api/storage/{ZONE}/slow/still-h2.txt", "PUT",
            [("accesskey", ACCESS["AccessKey"]), ("content-length", "100000")]))
        client.conn.send_data(stream_id, b"x")
        client.send()
        answer = client.answer(stream_id)
        assert answer.status == 408 and b'"code":"RequestTimeout"' in answer.body
        client.conn.send_data(stream_id, b"x" * 1000)  # more of the body, after the answer
        client.send()
        assert client.get("/api/health").status == 200
        assert client.terminated is None
    finally:
        client.close()
