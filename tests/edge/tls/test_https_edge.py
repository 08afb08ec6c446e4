"""The edge's https port on a real `assetcdn up`: TLS versions, SNI and the default certificate, hits and
misses over HTTP/1.1 and HTTP/2, the redirect of plain HTTP with its ACME exemption, HSTS, operator
certificates read again when replaced, and certificates arriving and leaving with control's TLS state."""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable

import orjson
import pytest
from cryptography import x509

from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.tls_state import TLS_STATE_PATH, CertificateEntry, TlsState
from tests.edge.tls.client import (
    H2Client,
    answer_records,
    client_context,
    closing_answer,
    handshake,
    https_get,
)
from tests.integration.harness import KEYS
from tests.support.https import HSTS_MAX_AGE_S, ZONE, HttpsCdn

pytestmark = pytest.mark.integration
WAIT_S = 30.0  # for a change to reach the edge (never asserted as a duration)


def serial_of(der: bytes) -> int:
    return x509.load_der_x509_certificate(der).serial_number


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.1)


def test_tls_1_3_and_1_2_are_served_with_aead_ciphers_and_1_1_is_refused(https_cdn: HttpsCdn) -> None:
    ca = https_cdn.ca_file
    shake = handshake(https_cdn.https_port, "cdn.example.test", client_context(ca))
    assert shake.version == "TLSv1.3"
    shake = handshake(https_cdn.https_port, "cdn.example.test", client_context(ca, version=ssl.TLSVersion.TLSv1_2))
    assert shake.version == "TLSv1.2" and shake.cipher is not None
    assert "GCM" in shake.cipher or "CHACHA20" in shake.cipher
    for old in (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1):
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            handshake(https_cdn.https_port, "cdn.example.test", client_context(None, version=old))


def test_sni_picks_the_certificate_and_unknown_names_get_the_default(https_cdn: HttpsCdn) -> None:
    ca = https_cdn.ca_file
    exact = handshake(https_cdn.https_port, "cdn.example.test", client_context(ca))  # verified against the name
    assert serial_of(exact.certificate) == https_cdn.main.serial
    wildcard = handshake(https_cdn.https_port, "a.t.example.test", client_context(ca))
    assert serial_of(wildcard.certificate) == https_cdn.wildcard.serial
    # One label deep only, as a wildcard certificate covers; anything else gets the default (the first
    # operator certificate), which a verifying client then refuses for that name.
    for name in ("b.a.t.example.test", "unknown.example.test"):
        shake = handshake(https_cdn.https_port, name, client_context(None))
        assert serial_of(shake.certificate) == serial_of(
            handshake(https_cdn.https_port, "cdn.example.test", client_context(None)).certificate)
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(https_cdn.https_port, name, client_context(ca))


def test_hits_and_misses_over_tls_http_1_1_carry_hsts(https_cdn: HttpsCdn) -> None:
    body = os.urandom(5 * 1024)
    https_cdn.upload("v1/h1/file.bin", body)
    path = f"/{ZONE}/v1/h1/file.bin"
    seen = []
    for _ in range(3):
        answer = https_get(https_cdn.https_port, path, server_name="cdn.example.test", ca=https_cdn.ca_file)
        assert answer.status == 200 and answer.body == body
        assert answer.headers["strict-transport-security"] == f"max-age={HSTS_MAX_AGE_S}"
        seen.append(answer.headers["x-cache"])
    assert seen[0] == "MISS" and seen[-1] == "HIT"
    # A body larger than the memory tier's objects is sent from its cache file, through TLS.
    big = os.urandom(3 * 1024 * 1024)
    https_cdn.upload("v1/h1/big.bin", big)
    for _ in range(2):
        answer = https_get(https_cdn.https_port, f"/{ZONE}/v1/h1/big.bin", ca=https_cdn.ca_file)
        assert answer.status == 200 and answer.body == big
    assert answer.headers["x-cache"] == "HIT"


def closing_request_for_a_hit(https_cdn: HttpsCdn, name: str) -> tuple[bytes, bytes]:
    """(a 5 KB body uploaded as `name` and made a hit, an HTTP/1.1 request for it that closes the connection)."""
    body = os.urandom(5 * 1024)
    https_cdn.upload(name, body)
    path = f"/{ZONE}/{name}"
    eventually(lambda: https_get(https_cdn.https_port, path, ca=https_cdn.ca_file).headers["x-cache"] == "HIT",
               "the file is a hit")
    return body, f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode()


def test_a_small_hit_over_tls_comes_in_one_record(https_cdn: HttpsCdn) -> None:
    # Head and body of an answer that fits in one TLS record are sealed together: one record, not one each.
    body, request = closing_request_for_a_hit(https_cdn, "v1/h1/record.bin")
    records = answer_records(https_cdn.https_port, request, ca=https_cdn.ca_file)
    assert len(records) == 1, [len(record) for record in records]
    head, _, sent = records[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nX-Cache: HIT" in head and sent == body


def test_a_hit_that_closes_the_connection_ends_with_close_notify_and_the_servers_close(https_cdn: HttpsCdn) -> None:
    # After the answer to `Connection: close` the server's close_notify, then its end of the connection,
    # without waiting for the client's close_notify (the client here never sends one).
    body, request = closing_request_for_a_hit(https_cdn, "v1/h1/closing.bin")
    answer, after = closing_answer(https_cdn.https_port, request, ca=https_cdn.ca_file)
    head, _, sent = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nX-Cache: HIT" in head and sent == body
    assert after == b""


def test_http2_serves_hits_misses_and_api_calls(https_cdn: HttpsCdn) -> None:
    body = os.urandom(100 * 1024)
    https_cdn.upload("v1/h2/file.bin", body)
    client = H2Client(https_cdn.https_port, "cdn.example.test", https_cdn.ca_file)
    try:
        first = client.get(f"/{ZONE}/v1/h2/file.bin")
        assert first.status == 200 and first.body == body and first.headers["x-cache"] == "MISS"
        second = client.get(f"/{ZONE}/v1/h2/file.bin")  # on the same connection
        assert second.status == 200 and second.body == body and second.headers["x-cache"] == "HIT"
        assert second.headers["strict-transport-security"] == f"max-age={HSTS_MAX_AGE_S}"
        assert "connection" not in second.headers and "keep-alive" not in second.headers
        head = client.get(f"/{ZONE}/v1/h2/file.bin", method="HEAD")
        assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(len(body))
        missing = client.get(f"/{ZONE}/v1/h2/none.bin")
        assert missing.status == 404 and orjson.loads(missing.body)["HttpCode"] == 404
        health = client.get("/api/health")
        assert health.status == 200 and orjson.loads(health.body)["status"] == "ok"
        # An upload through the edge, larger than the default stream window (64 KB), with and without
        # a content-length (the edge then forwards it chunked).
        for name, length in (("sized", True), ("streamed", False)):
            data = os.urandom(300 * 1024)
            fields = [("accesskey", KEYS["ASSETCDN_ACCESS_KEY"]), ("checksum", hashlib.sha256(data).hexdigest())]
            if length:
                fields.append(("content-length", str(len(data))))
            put = client.send_body(f"/api/storage/{ZONE}/v1/h2/{name}.bin", "PUT", fields, data)
            assert put.status == 201, put.body
            fetched = client.get(f"/{ZONE}/v1/h2/{name}.bin")
            assert fetched.status == 200 and fetched.body == data
    finally:
        client.close()


def test_http2_hits_are_answered_field_for_field_as_over_http_1_1(https_cdn: HttpsCdn) -> None:
    # Hits on HTTP/2 are answered from the stream's fields, not through an HTTP/1.1 request: the same decisions
    # and the same fields (less the connection's own) for a GET, a HEAD, a revalidation, a range, a request id.
    body = os.urandom(20 * 1024)
    path = f"/{ZONE}/v1/h2/same.bin"
    https_cdn.upload("v1/h2/same.bin", body)
    assert https_get(https_cdn.https_port, path, ca=https_cdn.ca_file).status == 200  # cached from here on
    etag = https_get(https_cdn.https_port, path, ca=https_cdn.ca_file).headers["etag"]
    request_id = "0f8fad5b-d9cb-469f-a165-70867728950e"
    cases: list[tuple[str, dict[str, str], int, bytes]] = [
        ("GET", {}, 200, body), ("HEAD", {}, 200, b""), ("GET", {"If-None-Match": etag}, 304, b""),
        ("GET", {"Range": "bytes=100-199"}, 206, body[100:200]), ("GET", {"X-Request-ID": request_id}, 200, body),
        ("GET", {"Cache-Control": "max-age=0", "Pragma": "no-cache"}, 200, body)]  # a browser's reload
    client = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        for method, headers, status, expected in cases:
            one = https_get(https_cdn.https_port, path, ca=https_cdn.ca_file, method=method, headers=headers)
            two = client.get(path, method, [(name.lower(), value) for name, value in headers.items()])
            assert (one.status, one.body, two.status, two.body) == (status, expected, status, expected), method
            assert two.headers["x-cache"] == "HIT"
            per_answer = {"date", "x-request-id", "connection", "keep-alive"}
            assert {k: v for k, v in two.headers.items() if k not in per_answer} == \
                {k: v for k, v in one.headers.items() if k not in per_answer}, (method, headers)
            if "X-Request-ID" in headers:
                assert one.headers["x-request-id"] == two.headers["x-request-id"] == request_id
    finally:
        client.close()
    assert "hit path failed" not in https_cdn.cdn.log_path.read_text()  # every case was decided, none crashed


def test_http2_refuses_an_unknown_expectation_as_http_1_1_does(https_cdn: HttpsCdn) -> None:
    # RFC 9110 10.1.1: an expectation the server does not know is 417; 100-continue alone is known. A hit, a miss
    # and an API route, each answered over HTTP/2 as over HTTP/1.1.
    https_cdn.upload("v1/h2/expect.txt", b"expected\n")
    hit = f"/{ZONE}/v1/h2/expect.txt"
    assert https_get(https_cdn.https_port, hit, ca=https_cdn.ca_file).status == 200  # cached from here on
    client = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        for path in (hit, f"/{ZONE}/v1/h2/none.txt", "/api/health"):
            one = https_get(https_cdn.https_port, path, ca=https_cdn.ca_file, headers={"Expect": "foo"})
            two = client.get(path, "GET", [("expect", "foo")])
            assert (one.status, two.status) == (417, 417), path
            assert two.body == one.body, path
            assert two.headers.get("content-type") == one.headers.get("content-type"), path
        known = client.get(hit, "GET", [("expect", "100-continue")])
        assert known.status == 200 and known.body == b"expected\n"
    finally:
        client.close()


def test_an_over_long_request_line_is_414_and_an_over_long_field_431_over_tls_and_http2(https_cdn: HttpsCdn) -> None:
    # RFC 9110 15.5.15 and RFC 6585 5, over TLS HTTP/1.1 and HTTP/2 as on the plain port: both were 400 BadRequest.
    https_cdn.upload("v1/h2/long.txt", b"long\n")
    path = f"/{ZONE}/v1/h2/long.txt"
    client = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        for query, fields, status, code in ((f"?{'q' * 9000}", {}, 414, "URITooLong"),
                                            ("", {"x-big": "b" * 9000}, 431, "RequestHeaderFieldsTooLarge")):
            one = https_get(https_cdn.https_port, path + query, ca=https_cdn.ca_file, headers=fields)
            two = client.get(path + query, "GET", list(fields.items()))
            for answer in (one, two):
                body = orjson.loads(answer.body)
                assert (answer.status, body["HttpCode"], body["error"]["code"]) == (status, status, code), answer.body
        assert client.get(path).body == b"long\n"  # the HTTP/2 connection serves on
    finally:
        client.close()


def test_plain_http_is_redirected_except_acme_challenges(https_cdn: HttpsCdn) -> None:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    https_cdn.upload("v1/plain/file.bin", b"plain")
    plain = f"http://127.0.0.1:{https_cdn.plain_port}"
    for method, status in (("GET", 301), ("POST", 308)):
        request = urllib.request.Request(f"{plain}/{ZONE}/v1/plain/file.bin?x=1", method=method, data=None)
        with pytest.raises(urllib.error.HTTPError) as raised:
            opener.open(request, timeout=20)
        assert raised.value.code == status
        assert raised.value.headers["Location"] == \
            f"https://127.0.0.1:{https_cdn.https_port}/{ZONE}/v1/plain/file.bin?x=1"
        assert "Strict-Transport-Security" not in raised.value.headers  # never over plain HTTP
    with pytest.raises(urllib.error.HTTPError) as raised:
        opener.open(f"{plain}/.well-known/acme-challenge/no-such-token", timeout=20)
    assert raised.value.code == 404  # answered over http, not redirected


def test_a_request_for_no_path_is_not_redirected_to_a_broken_url(https_cdn: HttpsCdn) -> None:
    """`OPTIONS * HTTP/1.1` (asking about the server, RFC 9110 9.3.7) on the plain port was answered 308 with
    `Location: https://127.0.0.1:<port>*`, no URL a client can follow; it is answered as over https now."""
    with socket.create_connection(("127.0.0.1", https_cdn.plain_port), timeout=20) as raw:
        raw.sendall(b"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    assert head.startswith("http/1.1 404 "), head  # no endpoint is OPTIONS *, as without the redirect
    assert "location:" not in head


def test_an_operator_certificate_replaced_on_disk_is_served_to_new_handshakes(https_cdn: HttpsCdn) -> None:
    renewed = https_cdn.ca.issue("cdn.example.test", "localhost")
    old = handshake(https_cdn.https_port, "cdn.example.test", client_context(https_cdn.ca_file))
    assert serial_of(old.certificate) != renewed.serial
    open_before = H2Client(https_cdn.https_port, "cdn.example.test", https_cdn.ca_file)
    try:
        # As a renewal tool writes them: key first (a moment where they do not match), then the chain.
        (https_cdn.certs_dir / "main.key").write_bytes(renewed.key_pem)
        (https_cdn.certs_dir / "main.pem").write_bytes(renewed.chain_pem)
        eventually(lambda: serial_of(handshake(https_cdn.https_port, "cdn.example.test",
                                               client_context(https_cdn.ca_file)).certificate) == renewed.serial,
                   "the renewed operator certificate")
        assert open_before.get("/api/health").status == 200  # a connection opened before is not dropped
    finally:
        open_before.close()


def _push(https_cdn: HttpsCdn, state: TlsState) -> dict[str, object]:
    member, url = https_cdn.edge_member()
    body = orjson.dumps(state.to_message())
    headers = {"Content-Type": "application/json",
               **sign_request(KEYS["ASSETCDN_CLUSTER_SECRET"], "POST", PREFIX + TLS_STATE_PATH, body, audience=member)}
    request = urllib.request.Request(url + PREFIX + TLS_STATE_PATH, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=20) as resp:
        reply: dict[str, object] = orjson.loads(resp.read())
        return reply


def test_certificates_from_the_tls_state_are_offered_and_withdrawn(https_cdn: HttpsCdn) -> None:
    secret = KEYS["ASSETCDN_CLUSTER_SECRET"]
    issued = https_cdn.ca.issue("shop.example.test")
    not_after = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = CertificateEntry.seal(secret, ("shop.example.test",), issued.chain_pem.decode(), issued.key_pem, not_after)
    serial = int(time.time())
    https_cdn.upload("v1/shop/file.bin", b"shop")
    client = H2Client(https_cdn.https_port, "cdn.example.test", https_cdn.ca_file)
    try:
        assert _push(https_cdn, TlsState(serial, {"tok": "tok.thumb"}, (entry,)))["applied"] is True
        shake = handshake(https_cdn.https_port, "shop.example.test", client_context(https_cdn.ca_file))
        assert serial_of(shake.certificate) == issued.serial  # verified for the new name
        answer = https_get(https_cdn.https_port, f"/{ZONE}/v1/shop/file.bin", server_name="shop.example.test",
                           ca=https_cdn.ca_file)
        assert answer.status == 200 and answer.body == b"shop"
        challenge = https_get(https_cdn.https_port, "/.well-known/acme-challenge/tok", ca=https_cdn.ca_file)
        assert challenge.status == 200 and challenge.body == b"tok.thumb"

        assert _push(https_cdn, TlsState(serial + 1, {}, ()))["applied"] is True
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(https_cdn.https_port, "shop.example.test", client_context(https_cdn.ca_file))
        assert client.get("/api/health").status == 200  # connections open meanwhile are not dropped
    finally:
        client.close()


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_returning_client_resumes_its_session(https_cdn: HttpsCdn, version: ssl.TLSVersion) -> None:
    """One worker here: its ticket key (TLS 1.3) and session cache (TLS 1.2) serve every name."""
    context = client_context(https_cdn.ca_file, version=version)
    session = None
    for attempt in range(2):
        with socket.create_connection(("127.0.0.1", https_cdn.https_port), timeout=20) as raw, \
                context.wrap_socket(raw, server_hostname="cdn.example.test", session=session) as tls:
            tls.sendall(b"GET /api/health HTTP/1.1\r\nHost: cdn.example.test\r\nConnection: close\r\n\r\n")
            while tls.recv(65536):  # TLS 1.3 tickets arrive after the handshake, with the answer
                pass
            assert tls.session_reused == (attempt == 1)
            session = tls.session
