"""Session ticket keys shared by every worker of an edge, rotated by the wall clock.

A ticket (TLS 1.3 session ticket, TLS 1.2 RFC 5077 ticket) is sealed under a key of the edge, not of the
worker that made it, so a client resumes whichever worker its next connection reaches. Time is cut into
periods of ``[tls] session_ticket_rotation_s``; each period has its own random 80-byte key (a 16-byte
name, 32 bytes of HMAC-SHA256 key, 32 of AES-256 key), kept in one file of the edge's cache directory
(mode 0600) that every worker reads and the first one to need a period's key writes, under ``flock``;
after the first read a worker reads it from a thread, a period ahead (`TicketKeys`), never in a handshake;
a worker that reaches a period without its key (no connection for a period, or that thread held up) reads
it at once, before its first handshake of the period, as another worker may seal under it already.
The file holds the keys of the previous, the current and the next period only: a key is dropped for good
two periods after its own, so whoever reads the file later cannot open older tickets. New tickets are
sealed under the current period's key; a ticket of the current or the previous period resumes (one of the
previous period is replaced by a fresh ticket), anything older makes a full handshake.

Python's ``ssl`` has no ticket key API, so the keys are set on the ``SSL_CTX`` behind each
``ssl.SSLContext``, through cffi on the libssl the ``_ssl`` module is linked to, in two ways. The current
period's key is OpenSSL's own ticket key (``SSL_CTRL_SET_TLSEXT_TICKET_KEYS``): OpenSSL seals and opens
tickets itself, at no cost over its random key. OpenSSL holds one such key, so for the first
session-timeout of each period (7,200 s, the longest a ticket of the previous period is offered and
accepted) a key callback (``SSL_CTX_set_tlsext_ticket_key_evp_cb``) opens the previous period's tickets
too; a call into Python per ticket costs a handshake a tenth more, so it is set only for that window. Reaching that ``SSL_CTX`` reads CPython's object layout (the pointer right
after the object header); :func:`binding` checks it against what the context reports before anything is
set, and when it cannot be done (another OpenSSL, another layout) the edge says so in one log line and
each worker keeps OpenSSL's own random key (resumption per worker, see assetcdn/edge/tls/certificates.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import hmac
import logging
import os
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

KEY_FILE = "tls-ticket-keys"
NAME_LEN, HMAC_LEN, AES_LEN = 16, 32, 32
KEY_LEN = NAME_LEN + HMAC_LEN + AES_LEN
FAILURE_LOG_INTERVAL_S = 60.0
MAX_FILE_BYTES = 4096  # three keys and their periods take under 600; anything longer is not ours
_SSL_CTRL_GET_MAX_PROTO_VERSION = 131
_SSL_CTRL_SET_TLSEXT_TICKET_KEYS = 59
_OSSL_PARAM_UTF8_STRING, _OSSL_PARAM_OCTET_STRING = 4, 5
# SSL_VERIFY_NONE, SSL_VERIFY_PEER, and PEER | FAIL_IF_NO_PEER_CERT, as ssl.SSLContext.verify_mode reports them
_VERIFY_MODES = {0: ssl.CERT_NONE, 1: ssl.CERT_OPTIONAL, 3: ssl.CERT_REQUIRED}

_CDEF = """
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct evp_mac_ctx_st EVP_MAC_CTX;
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct engine_st ENGINE;
typedef struct { const char *key; unsigned int data_type; void *data; size_t data_size; size_t return_size; }
    OSSL_PARAM;
typedef int (*ticket_key_cb)(SSL *, unsigned char *, unsigned char *, EVP_CIPHER_CTX *, EVP_MAC_CTX *, int);
unsigned long OpenSSL_version_num(void);
uint64_t SSL_CTX_get_options(const SSL_CTX *);
int SSL_CTX_get_verify_mode(const SSL_CTX *);
long SSL_CTX_ctrl(SSL_CTX *, int, long, void *);
int SSL_CTX_set_tlsext_ticket_key_evp_cb(SSL_CTX *, ticket_key_cb);
long SSL_CTX_get_timeout(const SSL_CTX *);
const EVP_CIPHER *EVP_aes_256_cbc(void);
int EVP_EncryptInit_ex(EVP_CIPHER_CTX *, const EVP_CIPHER *, ENGINE *, const unsigned char *, const unsigned char *);
int EVP_DecryptInit_ex(EVP_CIPHER_CTX *, const EVP_CIPHER *, ENGINE *, const unsigned char *, const unsigned char *);
int EVP_MAC_CTX_set_params(EVP_MAC_CTX *, const OSSL_PARAM *);
int RAND_bytes(unsigned char *, int);
"""


class Unavailable(Exception):
    """The ticket key callback cannot be set in this process; the message says why (never a key)."""


def _libssl_path() -> str:
    """The libssl mapped into this process by ``_ssl`` (so the same library, not another on the path)."""
    import _ssl  # noqa: F401  (maps libssl, if it was not already)
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            path = line.rstrip("\n").partition("/")[2]
            if path and "/libssl.so" in "/" + path:
                return "/" + path
    raise Unavailable("libssl is not mapped in this process (is _ssl linked statically?)")


class OpenSsl:
    """The few libssl and libcrypto calls the key callback needs, on the library ``_ssl`` uses."""

    def __init__(self) -> None:
        try:
            import cffi  # type: ignore[import-untyped]
        except ImportError as exc:
            raise Unavailable("cffi is not installed") from exc
        if ctypes.sizeof(ctypes.c_void_p) != 8 or ssl.SSLContext.__basicsize__ < object.__basicsize__ + 8:
            raise Unavailable("an unexpected ssl.SSLContext layout")
        self.ffi = cffi.FFI()
        self.ffi.cdef(_CDEF)
        try:
            self.lib: Any = self.ffi.dlopen(_libssl_path())
            version = self.lib.OpenSSL_version_num()
        except (OSError, AttributeError) as exc:
            raise Unavailable(f"libssl cannot be opened: {exc}") from exc
        if version != ssl.OPENSSL_VERSION_NUMBER or version < 0x30000000:
            raise Unavailable(f"libssl is {version:#x}, _ssl was built for {ssl.OPENSSL_VERSION_NUMBER:#x} "
                              "(OpenSSL 3 is needed)")
        self.aes = self.lib.EVP_aes_256_cbc()
        self.null = self.ffi.NULL

    def ssl_ctx(self, context: ssl.SSLContext) -> Any:
        """The ``SSL_CTX *`` of `context`: CPython's PySSLContext holds it right after the object header.
        Checked against three things the context reports; raises Unavailable when any differs."""
        if not isinstance(context, ssl.SSLContext):
            raise Unavailable("not an ssl.SSLContext")
        address = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
        if not address or address % 8:
            raise Unavailable("ssl.SSLContext does not hold an SSL_CTX where expected")
        pointer = self.ffi.cast("SSL_CTX *", address)
        if (self.lib.SSL_CTX_get_options(pointer) != int(context.options)
                or _VERIFY_MODES.get(self.lib.SSL_CTX_get_verify_mode(pointer)) != context.verify_mode
                or self.lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_GET_MAX_PROTO_VERSION, 0, self.null)
                != (int(context.maximum_version) if context.maximum_version > 0 else 0)):
            raise Unavailable("ssl.SSLContext does not hold an SSL_CTX where expected")
        return pointer


@dataclass(eq=False)
class TicketKey:
    """One period's key as OpenSSL is handed it: the name, the AES key and the HMAC parameters, kept in
    C memory that is wiped when the key is dropped. Never printed (no repr of the material)."""

    period: int
    name: bytes = field(repr=False)
    material: Any = field(repr=False)  # name, HMAC key, AES key: OpenSSL's own ticket key
    aes: Any = field(repr=False)
    hmac_params: Any = field(repr=False)
    _owned: list[Any] = field(repr=False)

    @classmethod
    def make(cls, openssl: OpenSsl, period: int, material: bytes) -> TicketKey:
        ffi = openssl.ffi
        mac_key = ffi.new("unsigned char[]", material[NAME_LEN:NAME_LEN + HMAC_LEN])
        aes = ffi.new("unsigned char[]", material[NAME_LEN + HMAC_LEN:])
        digest_key, digest, key_key = ffi.new("char[]", b"digest"), ffi.new("char[]", b"SHA256"), ffi.new("char[]", b"key")
        params = ffi.new("OSSL_PARAM[3]")
        params[0] = (digest_key, _OSSL_PARAM_UTF8_STRING, digest, 6, 0)
        params[1] = (key_key, _OSSL_PARAM_OCTET_STRING, mac_key, HMAC_LEN, 0)
        whole = ffi.new("unsigned char[]", material)
        return cls(period, material[:NAME_LEN], whole, aes, params, [mac_key, aes, digest_key, digest, key_key, params])

    def matches(self, openssl: OpenSsl, material: bytes) -> bool:
        return hmac.compare_digest(openssl.ffi.buffer(self.material)[:], material)

    def wipe(self, openssl: OpenSsl) -> None:
        openssl.ffi.memmove(self._owned[0], bytes(HMAC_LEN), HMAC_LEN)
        openssl.ffi.memmove(self.aes, bytes(AES_LEN), AES_LEN)
        openssl.ffi.memmove(self.material, bytes(KEY_LEN), KEY_LEN)


def _period(now: float, rotation_s: float) -> int:
    return int(now // rotation_s) if rotation_s > 0 else 0


def _parse(data: bytes, rotation_s: float) -> dict[int, bytes]:
    """The keys of a key file: a first line ``rotation <seconds>``, then ``<period> <hex key>`` lines. A
    file of another rotation, or not of this form, holds no key (it is written anew)."""
    lines = data.decode("ascii", "replace").splitlines()
    if not lines or lines[0] != f"rotation {rotation_s!r}":
        return {}
    keys: dict[int, bytes] = {}
    for line in lines[1:]:
        period, _, material = line.partition(" ")
        try:
            key = bytes.fromhex(material)
            if len(key) == KEY_LEN:
                keys[int(period)] = key
        except ValueError:
            return {}
    return keys


def _format(keys: dict[int, bytes], rotation_s: float) -> bytes:
    return "\n".join([f"rotation {rotation_s!r}", *(f"{p} {k.hex()}" for p, k in sorted(keys.items()))]).encode() + b"\n"


class KeyFile:
    """The edge's key file: read, completed (the previous, current and next period; older ones dropped)
    and written back under an exclusive ``flock``, so every worker sees the same key for a period."""

    def __init__(self, path: Path, rotation_s: float) -> None:
        self.path = path
        self.rotation_s = rotation_s

    def keys_around(self, period: int) -> dict[int, bytes]:
        """The keys of the period before `period`, of `period` and of the next one, made where missing; the
        window of a later period when another worker has written one already (a read that ran late, from a
        thread under load, neither drops the newest key nor makes another one for it)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            info = os.fstat(fd)
            if info.st_uid != os.getuid():
                raise OSError(f"{self.path} belongs to another user")
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)  # never readable by anyone else, whatever made it so
            data = os.pread(fd, MAX_FILE_BYTES + 1, 0)
            held = _parse(data, self.rotation_s) if len(data) <= MAX_FILE_BYTES else {}
            if self.rotation_s > 0 and held:
                period = max(period, max(held) - 1)
            wanted = (period - 1, period, period + 1) if self.rotation_s > 0 else (period,)
            # A period before the previous one is gone for good; one not yet listed gets a new random key
            # (nobody can hold a ticket of it: every worker would have read its key from here).
            keys = {p: held.get(p) or secrets.token_bytes(KEY_LEN) for p in wanted}
            if keys != held:
                text = _format(keys, self.rotation_s)
                os.ftruncate(fd, 0)
                os.pwrite(fd, text, 0)
            return keys
        finally:
            os.close(fd)  # also releases the lock


def _in_thread(read: Callable[[], None]) -> None:
    threading.Thread(target=read, name="tls-ticket-keys", daemon=True).start()


class TicketKeys:
    """This worker's view of the edge's keys, what each context is given of them, and the callback OpenSSL
    calls in the window after a rotation (see the module docstring). The key file is read at the start and
    then ahead of time: once the clock is in a period whose next period's key this worker does not hold, a
    thread (`start_reader`) reads the keys around it, and the loop takes them at its next look-up, before
    that next period starts. A worker without the current period's key (it had no connection for a period,
    or the thread is held up that long) reads the file on the loop, in `apply`, before the period's first
    handshake: any ticket a client offers was sealed by then, under that key at the newest. The callback
    (run mid-handshake, on the event loop) never reads the file; in a handshake that crossed a rotation,
    the newest key held stands in. `grace_s`: how long into a period the previous period's tickets are
    opened."""

    def __init__(self, openssl: OpenSsl, key_file: KeyFile, grace_s: float,
                 clock: Callable[[], float] = time.time,
                 start_reader: Callable[[Callable[[], None]], None] = _in_thread) -> None:
        self.openssl = openssl
        self.key_file = key_file
        self.grace_s = grace_s
        self.clock = clock
        self.by_period: dict[int, TicketKey] = {}
        self.by_name: dict[bytes, TicketKey] = {}
        self._read_failed = False
        self._failure_logged_at = -FAILURE_LOG_INTERVAL_S
        self._start_reader = start_reader
        self._reading = False  # a read ahead is under way or waiting in `_read`
        self._read: list[dict[int, bytes]] = []  # the reader thread's result (list.append: atomic)
        self._adopt(self._material(_period(clock(), key_file.rotation_s)))
        ffi = openssl.ffi
        self.callback = ffi.callback("ticket_key_cb", self._seal_or_open, error=0, onerror=self._failed)

    def _mode(self, now: float) -> tuple[int, bool, float]:
        """(the period, whether the callback opens the previous one's tickets, until when this holds)."""
        rotation_s = self.key_file.rotation_s
        if rotation_s <= 0:
            return 0, False, float("inf")
        period = _period(now, rotation_s)
        start = period * rotation_s
        if now < start + self.grace_s:
            return period, True, min(start + self.grace_s, start + rotation_s)
        return period, False, start + rotation_s

    def install(self, context: ssl.SSLContext) -> None:
        """Have `context` seal and open tickets with the edge's keys as they are now. Raises Unavailable."""
        self.apply([context])

    def apply(self, contexts: Iterable[ssl.SSLContext]) -> float:
        """Give `contexts` the current period's key and set or clear the callback; returns the wall-clock
        time until which that holds (the first connection after it calls this again). Only on contexts no
        handshake is using on another thread (OpenSSL reads both while a handshake runs); reads the key file
        when this worker does not hold the current period's key. Raises Unavailable."""
        period, callback, until = self._mode(self.clock())
        key = self._key(period, between_handshakes=True)
        lib = self.openssl.lib
        for context in contexts:
            pointer = self.openssl.ssl_ctx(context)
            if (lib.SSL_CTX_ctrl(pointer, _SSL_CTRL_SET_TLSEXT_TICKET_KEYS, KEY_LEN, key.material) != 1
                    or lib.SSL_CTX_set_tlsext_ticket_key_evp_cb(
                        pointer, self.callback if callback else self.openssl.ffi.NULL) != 1):
                raise Unavailable("OpenSSL refused the session ticket key")
        return until

    def _key(self, period: int, *, between_handshakes: bool = False) -> TicketKey:
        key = self.by_period.get(period)
        if key is None or period + 1 not in self.by_period and self.key_file.rotation_s > 0:
            key = self._advance(period, between_handshakes)
        return key

    def _advance(self, period: int, between_handshakes: bool) -> TicketKey:
        """The key of `period` when the next period's is not held yet: the keys the reader brought are taken,
        else a read ahead is started. Without the key of `period` itself (no connection for a period, or a
        reader held up that long), a look-up between handshakes reads the file at once: another worker may
        already seal under that key. In a handshake the newest key held stands in instead."""
        self._take_read()
        if period not in self.by_period and between_handshakes:
            self._adopt(self._material(period))
        if period + 1 not in self.by_period and not self._reading and self.key_file.rotation_s > 0:
            self._reading = True
            self._start_reader(partial(self._read_ahead, period))
            self._take_read()  # a reader that ran at once (start_reader)
        key = self.by_period.get(period)
        if key is None:  # the newest key held before `period` (the oldest, had the clock gone back)
            earlier = [p for p in self.by_period if p <= period]
            key = self.by_period[max(earlier) if earlier else min(self.by_period)]
        return key

    def _take_read(self) -> None:
        """The keys the reader brought, unless they are older than those held (read before a read on the loop)."""
        if self._read:
            material = self._read.pop()
            self._reading = False
            if material and max(material) >= max(self.by_period):
                self._adopt(material)

    def _read_ahead(self, period: int) -> None:
        """On the reader's thread: the keys around `period`, for the loop to take (`_advance`)."""
        try:
            material = self._material(period)
        except Exception:  # nothing taken: the next look-up starts another read
            log.exception("TLS: session ticket keys could not be read ahead")
            material = {}
        self._read.append(material)

    def _material(self, period: int) -> dict[int, bytes]:
        try:
            material = self.key_file.keys_around(period)
            self._read_failed = False
        except OSError as exc:
            # This worker alone then: its own keys for these periods, so tickets keep working here.
            if not self._read_failed:
                log.error("TLS: session ticket keys cannot be read from %s (%s); this worker seals tickets "
                          "with keys of its own until it can", self.key_file.path, exc.strerror or exc)
            self._read_failed = True
            material = {p: secrets.token_bytes(KEY_LEN) for p in (period - 1, period, period + 1)}
        return material

    def _adopt(self, material: dict[int, bytes]) -> None:
        # A key still held is kept as it is (a handshake may be using it); one dropped is wiped.
        kept = {p: k for p, k in self.by_period.items() if p in material and k.matches(self.openssl, material[p])}
        for old in self.by_period.values():
            if old.period not in kept:
                old.wipe(self.openssl)
        self.by_period = {p: kept.get(p) or TicketKey.make(self.openssl, p, m) for p, m in material.items()}
        self.by_name = {k.name: k for k in self.by_period.values()}

    def current(self) -> TicketKey:
        return self._key(_period(self.clock(), self.key_file.rotation_s))

    def _seal_or_open(self, _ssl: Any, name: Any, iv: Any, cipher: Any, mac: Any, encrypt: int) -> int:
        """OpenSSL's ticket key callback: 1 sealed or opened, 2 opened but seal a new one (a previous
        period's key), 0 not opened (a full handshake follows) or, sealing, no ticket (never -1, which
        would end the handshake)."""
        ffi, lib = self.openssl.ffi, self.openssl.lib
        period = _period(self.clock(), self.key_file.rotation_s)
        current = self._key(period)
        if encrypt:
            ffi.memmove(name, current.name, NAME_LEN)
            if (lib.RAND_bytes(iv, 16) != 1
                    or lib.EVP_EncryptInit_ex(cipher, self.openssl.aes, ffi.NULL, current.aes, iv) != 1
                    or lib.EVP_MAC_CTX_set_params(mac, current.hmac_params) != 1):
                return 0
            return 1
        key = self.by_name.get(ffi.buffer(name, NAME_LEN)[:])
        if key is None or key.period not in (period, period - 1):  # by the clock, whatever key stands in
            return 0
        if (lib.EVP_DecryptInit_ex(cipher, self.openssl.aes, ffi.NULL, key.aes, iv) != 1
                or lib.EVP_MAC_CTX_set_params(mac, key.hmac_params) != 1):
            return 0
        return 1 if key is current else 2

    def _failed(self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        """The callback raised (it then answers 0: no ticket, or a full handshake): one line a minute."""
        now = time.monotonic()
        if now - self._failure_logged_at >= FAILURE_LOG_INTERVAL_S:
            self._failure_logged_at = now
            log.error("TLS: the session ticket key callback failed: %s (one line a minute)",
                      exc_type.__name__ if exc_type else exc)


def shared_ticket_keys(key_file: Path, rotation_s: float) -> TicketKeys | None:
    """The edge's shared keys for this worker, or None (logged once, with why) when OpenSSL's callback
    cannot be reached from here: then each worker keeps OpenSSL's own key."""
    try:
        openssl = OpenSsl()
        # The layout check, on a throwaway context; Python never changes OpenSSL's session timeout.
        session_timeout_s = float(openssl.lib.SSL_CTX_get_timeout(openssl.ssl_ctx(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))))
    except Unavailable as exc:
        log.warning("TLS: session tickets are not shared between this edge's workers (%s); each worker "
                    "resumes only its own", exc)
        return None
    return TicketKeys(openssl, KeyFile(key_file, rotation_s), session_timeout_s)
