"""HTTP/2 streams on the hit server in this process (assetcdn/edge/tls/h2.py's H2Protocol on a memory transport,
the `h2` library as the client): every stream gets the answer the same request gets over HTTP/1.1, and the hit
decision is made once per stream, whether the stream is answered from its fields, sent from a file on disk, or
handed to the application (a miss); a request repeating the cache fields' slot (Cache-Control with Pragma, a
browser's reload) is answered from its fields, as HTTP/1.1 answers it on the hit path."""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson
import pytest

from assetcdn.edge.fastpath.hit_server import HitServer
from tests.support.cdn import ZONE
from tests.support.h2_memory import H2InProcess
from tests.support.hit_cdn import HitCdn, HitCdnFactory, Response

ENV = {"ASSETCDN_EDGE_MEMORY_OBJECT_MAX_KB": "64"}  # BIG is kept on disk only
SMALL = f"{ZONE}/v1/h2/small.bin"
BIG = f"{ZONE}/v1/h2/big.bin"
SMALL_BODY = os.urandom(20 * 1024)
BIG_BODY = os.urandom(200 * 1024)
PER_ANSWER = {"date", "x-request-id", "connection", "keep-alive", "transfer-encoding"}


def comparable(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    return (response.status, sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() not in PER_ANSWER),
            response.body)


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The paths the hit decision (HitServer._find) was made for."""
    made: list[bytes] = []
    find = HitServer._find

    def counted(self: HitServer, conn: Any, view: Any, path: bytes, head_only: bool, files: bool) -> Any:
        made.append(path)
        return find(self, conn, view, path, head_only, files)

    monkeypatch.setattr(HitServer, "_find", counted)
    return made


@pytest.fixture
def from_fields(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The paths answered from a stream's fields (HitServer.answer_stream gave the answer itself)."""
    answered: list[bytes] = []
    answer_stream = HitServer.answer_stream

    def recorded(self: HitServer, request: Any, head_only: bool, host: bytes, path: bytes) -> Any:
        answer = answer_stream(self, request, head_only, host, path)
        if isinstance(answer, tuple):
            answered.append(path)
        return answer

    monkeypatch.setattr(HitServer, "answer_stream", recorded)
    return answered


async def test_each_stream_is_decided_once_and_answered_as_over_http_1_1(
        make_hit_cdn: HitCdnFactory, decisions: list[bytes], from_fields: list[bytes]) -> None:
    cdn: HitCdn = await make_hit_cdn(**ENV)
    await cdn.upload(SMALL, SMALL_BODY)
    await cdn.upload(BIG, BIG_BODY)
    plain = await cdn.connect()
    for path in (SMALL, BIG):  # cached from here on: SMALL in memory, BIG on disk only
        assert (await plain.request(f"/{path}")).header("X-Cache") == "MISS"
    assert cdn.site.hits is not None
    # The https site's (its bodies written through the stream, never sendfile'd), beside the plain site's.
    client = H2InProcess(HitServer(cdn.app, cdn.site.hits.web_server, secure=True))
    reload = [("cache-control", "max-age=0"), ("pragma", "no-cache")]
    cases: list[tuple[str, list[tuple[str, str]], str]] = [
        (SMALL, [], "HIT"), (SMALL, reload, "HIT"), (SMALL, [("range", "bytes=10-99")], "HIT"),
        (BIG, [], "HIT"), (BIG, [("range", "bytes=1000-")], "HIT"),
        (f"{ZONE}/v1/h2/none.bin", [], "MISS")]  # the application answers (404)
    for path, fields, cache in cases:
        decisions.clear()
        from_fields.clear()
        over_h2 = await client.get(f"/{path}", fields)
        assert decisions == [f"/{path}".encode()], (path, fields)
        assert from_fields == ([f"/{path}".encode()] if path == SMALL else []), (path, fields)  # a memory-tier hit
        over_http_1_1 = await plain.request(f"/{path}", **dict(fields))
        if cache == "HIT":
            assert comparable(over_h2) == comparable(over_http_1_1), (path, fields)
            assert over_h2.headers["x-cache"] == "HIT"
        else:  # an error envelope: its request id and time are the answer's own
            assert over_h2.status == over_http_1_1.status == 404
            assert orjson.loads(over_h2.body)["error"] == orjson.loads(over_http_1_1.body)["error"]
    plain.close()


def held_size(*roots: Any) -> int:
    """Bytes the objects under `roots` hold (tuples and byte strings, each counted once)."""
    seen: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, tuple):
            stack.extend(item)
    return total


async def test_the_http_2_heads_made_on_use_are_charged_to_the_memory_budget(make_hit_cdn: HitCdnFactory) -> None:
    """A stored zone's hit over HTTP/2 makes its heads' fields on first use (200, its Date's copy, 304, 206): the
    memory tier's budget is charged what they hold while the hit server holds the hit, and given it back after."""
    cdn: HitCdn = await make_hit_cdn(**ENV)
    paths = [f"{ZONE}/v1/h2/charged-{i}.bin" for i in range(12)]
    plain = await cdn.connect()
    for path in paths:
        await cdn.upload(path, SMALL_BODY)
        assert (await plain.request(f"/{path}")).header("X-Cache") == "MISS"
    plain.close()
    assert cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    memory = cdn.node.cache.memory
    client = H2InProcess(secure)
    for path in paths:  # the head (its fields not made yet) is held and charged as over HTTP/1.1
        assert (await client.get(f"/{path}", [("range", "bytes=0-1")])).status == 206
    charged_before, kept = memory.heads_bytes, secure.head_bytes
    heads = [hit for view in secure.hosts.values() for hit in view.hits.values()]
    assert len(heads) == len(paths)
    fields_before = held_size(*(hit.h2_head_206 for hit in heads))
    for path in paths:
        answer = await client.get(f"/{path}", [])
        assert answer.status == 200 and answer.body == SMALL_BODY
        assert (await client.get(f"/{path}", [("if-none-match", answer.headers["etag"])])).status == 304
    made = held_size(*(field for hit in heads for field in (hit.h2_head_206, hit.h2_head, hit.h2_head_304,
                                                             hit.h2_dated))) - fields_before
    added = memory.heads_bytes - charged_before
    assert added == secure.head_bytes - kept
    assert made <= added <= 1.6 * made, (made, added)
    secure._forget_hosts()
    assert memory.heads_bytes == charged_before - kept
