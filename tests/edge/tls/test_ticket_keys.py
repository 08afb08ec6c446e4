"""The shared session ticket keys (assetcdn/edge/tls/tickets.py) through real OpenSSL handshakes in this
process (memory BIOs, a clock of the test's own): a ticket of the previous period resumes and is replaced,
one of two periods ago does not; outside the window after a rotation OpenSSL seals and opens tickets with
the shared key itself, without the callback; every worker reading the key file gets the same keys and the file keeps
three periods; a callback that fails costs the ticket, not the handshake; where the SSL_CTX cannot be
reached the store falls back to per-worker keys with one log line."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assetcdn.edge.tls import tickets
from assetcdn.edge.tls.certificates import CertificateStore
from assetcdn.edge.tls.state import EdgeTlsState
from assetcdn.edge.tls.tickets import (
    KEY_FILE,
    KeyFile,
    OpenSsl,
    TicketKeys,
    Unavailable,
    shared_ticket_keys,
)
from assetcdn.shared.config import load_settings
from tests.edge.tls.certs import Issued, TestCa

ROTATION_S = 100.0
START = 1_000 * ROTATION_S + 1  # early in period 1000
GRACE_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def at_once(read: Callable[[], None]) -> None:
    """The keys read ahead in the caller's thread (TicketKeys starts a thread), so the test decides when."""
    read()


@pytest.fixture(scope="module")
def issued() -> Issued:
    return TestCa().issue("localhost")


def server_context(issued: Issued, tmp_path: Path, keys: TicketKeys) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    chain, key = issued.write(tmp_path, "server")
    context.load_cert_chain(chain, key)
    keys.install(context)
    return context


def client_context(version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl._create_unverified_context()  # noqa: S323  (resumption is what is examined)
    context.minimum_version = context.maximum_version = version
    return context


def connect(server: ssl.SSLContext, client: ssl.SSLContext,
            session: ssl.SSLSession | None) -> tuple[bool, ssl.SSLSession | None]:
    """(resumed?, the client's session afterwards) of one handshake and one answer, over memory BIOs."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, to_server, server_hostname="localhost", session=session)
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    done = [False, False]
    for _ in range(10):
        for index, side in enumerate((client_side, server_side)):
            if not done[index]:
                try:
                    side.do_handshake()
                    done[index] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(to_server.read())
        to_client.write(server_out.read())
        if all(done):
            break
    assert all(done)
    server_side.write(b"answer")
    to_client.write(server_out.read())
    assert client_side.read(100) == b"answer"  # a TLS 1.3 ticket is read before it
    return client_side.session_reused, client_side.session


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_ticket_resumes_in_its_period_and_the_next_and_never_after(tmp_path: Path, issued: Issued,
                                                                      version: ssl.TLSVersion) -> None:
    clock = Clock()
    openssl = OpenSsl()
    key_file = KeyFile(tmp_path / KEY_FILE, ROTATION_S)
    # Two workers: separate contexts and callbacks, one key file.
    first = server_context(issued, tmp_path, TicketKeys(openssl, key_file, ROTATION_S, clock, at_once))
    second = server_context(issued, tmp_path, TicketKeys(openssl, key_file, ROTATION_S, clock, at_once))
    client = client_context(version)
    resumed, session = connect(first, client, None)
    assert not resumed
    resumed, same_period = connect(second, client, session)
    assert resumed
    clock.now += ROTATION_S  # the next period: still opened, and a ticket of the new key comes back
    resumed, renewed = connect(first, client, session)
    assert resumed
    clock.now += ROTATION_S  # two periods after the first ticket's: a full handshake
    resumed, _ = connect(second, client, same_period)
    assert not resumed
    resumed, _ = connect(first, client, renewed)  # sealed one period ago
    assert resumed


def test_outside_the_window_after_a_rotation_openssl_uses_the_shared_key_itself(
        tmp_path: Path, issued: Issued, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    seal_or_open = TicketKeys._seal_or_open

    def counted(self: TicketKeys, *args: Any) -> int:
        calls.append(args[-1])
        return seal_or_open(self, *args)

    monkeypatch.setattr(TicketKeys, "_seal_or_open", counted)
    clock = Clock()
    clock.now = START + GRACE_S  # past the window: OpenSSL's own key is the period's shared key
    openssl = OpenSsl()
    key_file = KeyFile(tmp_path / KEY_FILE, ROTATION_S)
    workers = [TicketKeys(openssl, key_file, GRACE_S, clock, at_once) for _ in range(2)]
    first, second = (server_context(issued, tmp_path, keys) for keys in workers)
    client = client_context(ssl.TLSVersion.TLSv1_3)
    _, old = connect(first, client, None)
    resumed, _ = connect(second, client, old)
    assert resumed and calls == []
    clock.now = START - 1 + ROTATION_S + 1  # the next period, inside its window: the callback opens `old`
    for keys, context in zip(workers, (first, second), strict=True):
        assert keys.apply([context]) == START - 1 + ROTATION_S + GRACE_S
    resumed, fresh = connect(second, client, old)
    assert resumed and calls
    clock.now += GRACE_S  # past the window: only this period's tickets resume
    for keys, context in zip(workers, (first, second), strict=True):
        keys.apply([context])
    calls.clear()
    resumed, _ = connect(first, client, old)
    assert not resumed
    resumed, _ = connect(first, client, fresh)
    assert resumed and calls == []


def test_the_next_key_is_read_ahead_so_the_callback_reads_no_file_at_a_rotation(tmp_path: Path,
                                                                                issued: Issued) -> None:
    clock = Clock()
    openssl = OpenSsl()
    path = tmp_path / KEY_FILE
    reads: list[Callable[[], None]] = []  # the reader thread's work, run when the test says
    keys = TicketKeys(openssl, KeyFile(path, ROTATION_S), ROTATION_S, clock, reads.append)
    server = server_context(issued, tmp_path, keys)
    client = client_context(ssl.TLSVersion.TLSv1_3)
    _, session = connect(server, client, None)
    clock.now += ROTATION_S  # period 1001: its key is held; 1002's is to be read ahead
    resumed, session = connect(server, client, session)
    assert resumed and len(reads) == 1
    reads.pop()()
    other = TicketKeys(openssl, KeyFile(path, ROTATION_S), ROTATION_S, clock, reads.append)  # another worker
    other_server = server_context(issued, tmp_path, other)
    path.unlink()
    path.mkdir()  # no key file can be read from here on (not even by root)
    clock.now += ROTATION_S  # period 1002, in the window: 1001's tickets still open, with the shared keys
    resumed, renewed = connect(server, client, session)
    assert resumed
    resumed, _ = connect(other_server, client, renewed)  # sealed under 1002's shared key
    assert resumed


def test_the_key_file_holds_three_periods_shared_by_every_reader(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE
    first = KeyFile(path, ROTATION_S).keys_around(1000)
    assert sorted(first) == [999, 1000, 1001]
    assert KeyFile(path, ROTATION_S).keys_around(1000) == first  # another worker: the same keys
    assert path.stat().st_mode & 0o777 == 0o600
    later = KeyFile(path, ROTATION_S).keys_around(1002)
    assert sorted(later) == [1001, 1002, 1003] and later[1001] == first[1001]
    assert str(999) not in path.read_text().split() and first[1000].hex() not in path.read_text()
    path.chmod(0o644)
    assert KeyFile(path, ROTATION_S * 2).keys_around(501)[501] not in later.values()  # another rotation
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_key_file_that_is_not_ours_is_written_anew(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE
    path.write_bytes(b"rotation 100.0\n1000 not-hex\n")
    keys = KeyFile(path, ROTATION_S).keys_around(1000)
    assert sorted(keys) == [999, 1000, 1001]
    assert KeyFile(path, ROTATION_S).keys_around(1000) == keys


def test_a_failing_callback_costs_the_ticket_not_the_handshake(tmp_path: Path, issued: Issued,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    keys = TicketKeys(OpenSsl(), KeyFile(tmp_path / KEY_FILE, ROTATION_S), ROTATION_S, clock, at_once)
    server = server_context(issued, tmp_path, keys)
    client = client_context(ssl.TLSVersion.TLSv1_3)
    _, session = connect(server, client, None)

    def broken() -> float:
        raise RuntimeError("clock gone")

    keys.clock = broken
    with caplog.at_level(logging.ERROR, logger=tickets.__name__):
        resumed, _ = connect(server, client, session)
    assert not resumed
    assert "ticket key callback failed" in caplog.text


def test_without_the_callback_the_store_keeps_per_worker_keys(tmp_path: Path, issued: Issued,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    # A layout check that does not match (as another CPython's would not): no shared keys, one warning.
    monkeypatch.setattr(tickets, "_VERIFY_MODES", {})
    with pytest.raises(Unavailable):
        OpenSsl().ssl_ctx(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    chain, key = issued.write(tmp_path, "operator")
    settings = load_settings(None).with_overrides("tls", certificates=[[str(chain), str(key)]])
    with caplog.at_level(logging.WARNING, logger=tickets.__name__):
        store = CertificateStore(settings, EdgeTlsState("secret"), spill_dir=tmp_path)
    assert store.tickets is None
    assert caplog.text.count("session tickets are not shared") == 1
    assert not (tmp_path / KEY_FILE).exists()
    client = client_context(ssl.TLSVersion.TLSv1_3)
    _, session = connect(store.front_context(), client, None)
    resumed, _ = connect(store.front_context(), client, session)  # OpenSSL's own key, in this worker
    assert resumed


def test_shared_keys_are_made_where_the_callback_can_be_set(tmp_path: Path) -> None:
    keys = shared_ticket_keys(tmp_path / KEY_FILE, ROTATION_S)
    assert keys is not None and (tmp_path / KEY_FILE).exists()


def test_a_late_read_of_an_earlier_period_keeps_the_newest_key_every_worker_holds(tmp_path: Path) -> None:
    """A worker's read ahead that runs a period late (its thread held up) asks for the window of an earlier
    period: the next period's key another worker already holds stays the one in the file, so a third worker
    reading later gets the same key, and tickets sealed under it open everywhere."""
    key_file = KeyFile(tmp_path / KEY_FILE, ROTATION_S)
    on_time = key_file.keys_around(10)
    late = key_file.keys_around(9)
    later = key_file.keys_around(11)
    assert later[11] == on_time[11] and late[10] == on_time[10]
    assert later[10] == on_time[10]


def worker(openssl: OpenSsl, key_file: KeyFile, clock: Clock, issued: Issued, tmp_path: Path,
           start_reader: Callable[[Callable[[], None]], None]) -> tuple[TicketKeys, ssl.SSLContext]:
    keys = TicketKeys(openssl, key_file, ROTATION_S, clock, start_reader)
    return keys, server_context(issued, tmp_path, keys)


def first_connection_of_the_period(*workers: tuple[TicketKeys, ssl.SSLContext]) -> None:
    """What each worker does as it accepts its first connection of a period (CertificateStore.front_context):
    its contexts get the keys of now."""
    for keys, context in workers:
        keys.apply([context])


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_worker_whose_read_ahead_has_not_landed_opens_a_ticket_of_the_new_period(
        tmp_path: Path, issued: Issued, version: ssl.TLSVersion) -> None:
    """At a rotation one worker holds the new period's key (its read ahead landed) and seals under it; the
    other's reader thread is held up (a loaded machine): a ticket of the first still resumes on the second."""
    clock = Clock()
    openssl = OpenSsl()
    key_file = KeyFile(tmp_path / KEY_FILE, ROTATION_S)
    held_up: list[Callable[[], None]] = []  # the second worker's reads ahead, never run
    first = worker(openssl, key_file, clock, issued, tmp_path, at_once)
    second = worker(openssl, key_file, clock, issued, tmp_path, held_up.append)
    client = client_context(version)
    clock.now += ROTATION_S  # period 1001: both hold its key (read at start); 1002's is read ahead
    first_connection_of_the_period(first, second)
    assert held_up
    clock.now += ROTATION_S  # period 1002
    first_connection_of_the_period(first)
    _, session = connect(first[1], client, None)
    first_connection_of_the_period(second)
    resumed, _ = connect(second[1], client, session)
    assert resumed


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_after_periods_without_a_handshake_tickets_are_sealed_under_a_key_every_worker_opens(
        tmp_path: Path, issued: Issued, version: ssl.TLSVersion) -> None:
    """Workers that had no connection for a few periods (no read ahead meanwhile) and whose reader threads
    are held up: the first ticket sealed after that resumes on the other worker, and on its own."""
    clock = Clock()
    openssl = OpenSsl()
    key_file = KeyFile(tmp_path / KEY_FILE, ROTATION_S)
    held_up: list[Callable[[], None]] = []
    first = worker(openssl, key_file, clock, issued, tmp_path, held_up.append)
    second = worker(openssl, key_file, clock, issued, tmp_path, held_up.append)
    client = client_context(version)
    clock.now += 3 * ROTATION_S
    first_connection_of_the_period(first, second)
    _, session = connect(first[1], client, None)
    resumed, _ = connect(second[1], client, session)
    assert resumed
    resumed, _ = connect(first[1], client, session)
    assert resumed
