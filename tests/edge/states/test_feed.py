"""A fill's first client fed at its own pace (assetcdn/edge/states/feed.py): what it is sent, in order, when it
keeps up and when it lags behind the fill (the rest read back from the spool, in memory or in its file, after the
spool itself was closed as `pull.store` closes it), and when it goes; the places lagging clients hold, the worker's
and an HTTP/2 connection's."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
from typing import IO

import pytest

from assetcdn.edge.states import feed as feed_module
from assetcdn.edge.states.feed import CONNECTION_LAGGING, QUEUE_BYTES, ClientFeed, Rest, rest_of
from tests.support.feeds import waits_for_its_fill
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio

CHUNK = 64 * 1024


class Client:
    """A client's send: what it took, in order; it takes nothing while `held`, and is gone once `gone`."""

    def __init__(self) -> None:
        self.taken = bytearray()
        self.open = asyncio.Event()
        self.open.set()
        self.gone = False

    async def send(self, chunk: bytes) -> bool:
        await self.open.wait()
        if self.gone:
            return False
        self.taken += chunk
        return True


def body(size: int) -> bytes:
    return bytes(index % 251 for index in range(size))


IN_MEMORY = 64 * 1024  # the spools' size limit in memory


def spooled(kind: str) -> IO[bytes]:
    return io.BytesIO() if kind == "memory" else tempfile.SpooledTemporaryFile(max_size=IN_MEMORY)


async def fill(feed: ClientFeed, spool: IO[bytes], data: bytes) -> None:
    for start in range(0, len(data), CHUNK):
        chunk = data[start:start + CHUNK]
        spool.write(chunk)
        feed.offer(chunk)
        await asyncio.sleep(0)  # the fill's reads, between which the feed's task runs


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_client_that_keeps_up_is_sent_every_chunk_as_the_fill_reads_it(kind: str) -> None:
    client, data, spool = Client(), body(10 * CHUNK + 123), spooled(kind)
    feed = ClientFeed(client.send)
    await fill(feed, spool, data)
    assert not feed.lagging
    spool.close()
    assert await feed.finish(None) is True
    assert bytes(client.taken) == data


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_lagging_client_gets_the_rest_from_the_spool_after_the_spool_is_closed(kind: str) -> None:
    """The client takes nothing while the fill reads far past the queue's bound: the fill goes on regardless, the
    spool is closed once the rest is taken from it (as the store closes it), and the client then gets all."""
    client, data, spool = Client(), body(QUEUE_BYTES * 6 + 777), spooled(kind)
    client.open.clear()
    feed = ClientFeed(client.send)
    await fill(feed, spool, data)  # never waits for the client
    assert feed.lagging and feed.offered < len(data)
    rest = rest_of(spool, feed.offered, IN_MEMORY)
    assert spool.tell() == len(data)  # left where it was for the store
    spool.close()
    client.open.set()
    assert await feed.finish(rest) is True
    assert bytes(client.taken) == data
    assert rest.fd is None  # the rest's own descriptor closed


async def test_a_client_that_goes_is_sent_nothing_more_and_its_rest_is_closed() -> None:
    client, data, spool = Client(), body(QUEUE_BYTES * 4), spooled("file")
    client.open.clear()
    feed = ClientFeed(client.send)
    await fill(feed, spool, data)
    rest = rest_of(spool, feed.offered, IN_MEMORY)
    spool.close()
    client.gone = True
    client.open.set()
    assert await feed.finish(rest) is False
    assert feed.gone and not client.taken
    assert rest.fd is None


async def test_a_cancelled_feed_sends_nothing_more() -> None:
    """The origin's body failed: the feed is cancelled and the client's answer ends where it was."""
    client = Client()
    client.open.clear()
    feed = ClientFeed(client.send)
    feed.offer(b"x" * CHUNK)
    await asyncio.sleep(0)
    feed.cancel()
    client.open.set()
    await asyncio.sleep(0.01)
    assert not client.taken
    with pytest.raises(asyncio.CancelledError):
        await feed.finish(None)


async def test_the_rest_of_a_spool_in_a_file_is_read_from_its_own_descriptor() -> None:
    spool = tempfile.SpooledTemporaryFile(max_size=16)
    spool.write(b"0123456789" * 10)
    rest = rest_of(spool, 25, 16)
    spool.close()
    pieces = [piece async for piece in rest.pieces()]
    assert b"".join(pieces) == (b"0123456789" * 10)[25:]
    assert rest.fd is not None
    os.fstat(rest.fd)  # still open until closed
    rest.close()
    assert rest.fd is None


async def test_a_spool_still_in_memory_gives_its_rest_from_memory() -> None:
    spool = tempfile.SpooledTemporaryFile(max_size=1000)
    spool.write(b"abcdef" * 100)
    rest = rest_of(spool, 10, 1000)
    assert (rest.fd, rest.data) == (None, (b"abcdef" * 100)[10:])
    assert spool.tell() == 600  # where the store reads it from
    spool.close()


async def test_past_the_clients_that_may_lag_one_sets_its_fills_pace_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """With MAX_LAGGING clients lagging already, a client behind its queue does not lag: the fill waits for `room`
    until the client has taken its queue down to the bound, and it gets every byte in order, none from a rest."""
    monkeypatch.setattr(feed_module, "MAX_LAGGING", ClientFeed.lagging_now)
    client, data = Client(), body(QUEUE_BYTES * 3)
    client.open.clear()
    feed = ClientFeed(client.send)
    for start in range(0, len(data), CHUNK):
        feed.offer(data[start:start + CHUNK])
    assert feed.behind and not feed.lagging and feed.offered == len(data)
    waiting = asyncio.ensure_future(feed.room())
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the fill waits for its client
    client.open.set()
    await waiting
    assert not feed.behind
    assert await feed.finish(None) is True
    assert bytes(client.taken) == data


async def test_a_lagging_client_holds_its_place_until_it_is_done() -> None:
    before = ClientFeed.lagging_now
    client, data, spool = Client(), body(QUEUE_BYTES * 2), spooled("file")
    client.open.clear()
    feed = ClientFeed(client.send)
    await fill(feed, spool, data)
    assert feed.lagging and ClientFeed.lagging_now == before + 1
    rest = rest_of(spool, feed.offered, IN_MEMORY)
    spool.close()
    client.open.set()
    assert await feed.finish(rest) is True
    feed.cancel()
    assert ClientFeed.lagging_now == before


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_lagging_client_of_a_body_that_goes_past_the_limit_gets_all_of_it_then_sets_the_pace(kind: str) -> None:
    """A chunked body turns out longer than the object size limit while its client lags: the fill's copy goes, the
    client is first sent what it had not been sent of it, then the chunks read from then on, in order; and from
    then on the fill waits for the client (`behind`), as for an answer that is not kept."""
    client, spool = Client(), spooled(kind)
    kept, more = body(QUEUE_BYTES * 4 + 321), body(QUEUE_BYTES * 3)[::-1]
    client.open.clear()
    feed = ClientFeed(client.send)
    await fill(feed, spool, kept)
    assert feed.lagging and feed.offered < len(kept)
    feed.keep_pace(rest_of(spool, feed.offered, IN_MEMORY))  # what `relay_body` does at the limit
    spool.close()
    assert feed.paced
    waited = False
    for start in range(0, len(more), CHUNK):
        feed.offer(more[start:start + CHUNK])
        if feed.behind:
            waiting = asyncio.ensure_future(feed.room())
            if not waited:  # the client still takes nothing
                await asyncio.sleep(0.01)
                assert not waiting.done()  # the fill waits for its client now
                waited = True
                client.open.set()
            await waiting
    assert waited
    assert await feed.finish(None) is True
    assert bytes(client.taken) == kept + more


async def test_a_client_that_kept_up_with_a_body_past_the_limit_sets_the_pace_from_there() -> None:
    client, spool = Client(), spooled("memory")
    data = body(CHUNK * 3)
    feed = ClientFeed(client.send)
    await fill(feed, spool, data)
    feed.keep_pace(None)  # not lagging: nothing to take from the spool
    spool.close()
    client.open.clear()
    for _ in range(QUEUE_BYTES * 2 // CHUNK):
        feed.offer(data[:CHUNK])
    assert feed.behind and not feed.lagging
    client.open.set()
    await feed.room()
    assert await feed.finish(None) is True
    assert bytes(client.taken) == data + data[:CHUNK] * (QUEUE_BYTES * 2 // CHUNK)


async def test_a_rest_still_queued_when_the_feed_is_cancelled_is_closed() -> None:
    client, spool = Client(), spooled("file")
    client.open.clear()
    feed = ClientFeed(client.send)
    await fill(feed, spool, body(QUEUE_BYTES * 3))
    rest = rest_of(spool, feed.offered, IN_MEMORY)
    spool.close()
    feed.keep_pace(rest)
    feed.cancel()
    assert rest.fd is None


class Connection:
    """An HTTP/2 connection as a feed sees it: its transport's `lag_places`, the count of its clients lagging."""

    def __init__(self, lagging: int = 0) -> None:
        self.lagging = lagging


class StreamTransport:
    def __init__(self, connection: Connection) -> None:
        self.lag_places = connection


async def test_a_connection_holding_its_places_has_its_next_client_set_its_fills_pace() -> None:
    """An HTTP/2 connection whose streams hold CONNECTION_LAGGING places: its next client behind its queue does not
    lag, though the worker has places free, and the fill waits for it; a client of another connection lags."""
    assert ClientFeed.lagging_now + 1 < feed_module.MAX_LAGGING
    full, data = Connection(CONNECTION_LAGGING), body(QUEUE_BYTES * 3)
    client = Client()
    client.open.clear()
    feed = ClientFeed(client.send, StreamTransport(full))
    for start in range(0, len(data), CHUNK):
        feed.offer(data[start:start + CHUNK])
    assert feed.behind and not feed.lagging and full.lagging == CONNECTION_LAGGING
    other, other_client, spool = Connection(CONNECTION_LAGGING - 1), Client(), spooled("memory")
    other_client.open.clear()
    lagging = ClientFeed(other_client.send, StreamTransport(other))
    await fill(lagging, spool, data)
    assert lagging.lagging and other.lagging == CONNECTION_LAGGING
    client.open.set()
    other_client.open.set()
    await feed.room()
    assert await feed.finish(None) is True
    assert await lagging.finish(rest_of(spool, lagging.offered, IN_MEMORY)) is True
    assert (full.lagging, other.lagging) == (CONNECTION_LAGGING, CONNECTION_LAGGING - 1)


async def test_a_connection_of_one_request_at_a_time_is_held_to_the_workers_places_alone() -> None:
    """A transport without `lag_places` (HTTP/1.1's, plain or TLS): its client lags as the worker's places allow."""
    before = ClientFeed.lagging_now
    client, spool = Client(), spooled("memory")
    client.open.clear()
    feed = ClientFeed(client.send, object())
    await fill(feed, spool, body(QUEUE_BYTES * 3))
    assert feed.lagging and ClientFeed.lagging_now == before + 1
    feed.cancel()
    assert ClientFeed.lagging_now == before


@pytest.mark.parametrize("end", ["whole", "gone", "cut short", "past the limit"])
async def test_a_lagging_client_gives_its_connections_place_back_however_it_ends(end: str) -> None:
    """A lagging client's place, the worker's and its connection's, comes back when it has the whole body, when it
    is gone (or cut off by the send rule: its send answers False alike), when its fill fails, and when it set the
    pace of a body found past the limit."""
    before = ClientFeed.lagging_now
    connection, client, spool = Connection(), Client(), spooled("file")
    data = body(QUEUE_BYTES * 3)
    client.open.clear()
    feed = ClientFeed(client.send, StreamTransport(connection))
    await fill(feed, spool, data)
    assert feed.lagging and (connection.lagging, ClientFeed.lagging_now) == (1, before + 1)
    rest: Rest | None = rest_of(spool, feed.offered, IN_MEMORY)
    spool.close()
    if end == "cut short":  # the origin's body failed: `keep` cancels the feed
        assert rest is not None
        rest.close()
        feed.cancel()
    else:
        if end == "gone":
            client.gone = True
        if end == "past the limit":
            feed.keep_pace(rest)
            rest = None
        client.open.set()
        assert await feed.finish(rest) is (end != "gone")
        feed.cancel()
    assert (connection.lagging, ClientFeed.lagging_now) == (0, before)


class Watch:
    """A client's connection as a feed watches it: the callback it was given (None: none, or taken back), and every
    call, in order."""

    def __init__(self) -> None:
        self.told: list[object] = []

    def __call__(self, told: object) -> None:
        self.told.append(told)

    @property
    def watching(self) -> object:
        return self.told[-1] if self.told else None


async def test_a_lagging_client_whose_connection_is_lost_gives_its_places_back_at_once() -> None:
    """A lagging client has taken what it was queued, and its feed waits for the fill, when its connection is lost:
    its places, the worker's and its connection's, come back then, not once the fill ends; the fill's rest is closed
    unsent, and the feed says the client is gone. A client that keeps up is never watched."""
    before = ClientFeed.lagging_now
    connection, client, spool, watch = Connection(), Client(), spooled("file"), Watch()
    client.open.clear()
    feed = ClientFeed(client.send, StreamTransport(connection), watch)
    await fill(feed, spool, body(QUEUE_BYTES * 3))
    assert feed.lagging and (connection.lagging, ClientFeed.lagging_now) == (1, before + 1)
    client.open.set()

    async def idle() -> bool:
        return waits_for_its_fill(feed)

    await wait_until(idle, "the client sent its queue")  # it takes it; then the feed waits for the fill
    lost = watch.watching
    assert callable(lost)
    lost()
    assert (feed.lagging, connection.lagging, ClientFeed.lagging_now, feed.gone) == (False, 0, before, True)
    assert watch.watching is None  # taken back
    rest = rest_of(spool, feed.offered, IN_MEMORY)
    spool.close()
    assert await feed.finish(rest) is False
    assert rest.fd is None and len(client.taken) == feed.offered
    keeping_up, quick, data = Watch(), Client(), body(QUEUE_BYTES * 3)
    kept_up = ClientFeed(quick.send, StreamTransport(connection), keeping_up)
    await fill(kept_up, spooled("memory"), data)
    assert await kept_up.finish(None) is True
    assert (bytes(quick.taken), keeping_up.told) == (data, [])
