"""Every certificate this worker offers, and the SNI callback that picks one per handshake.

Sources, in order of preference for a name: the operator's files (``[tls] certificates``), then the
TLS state control publishes (ACME certificates of custom domains; assetcdn/edge/tls/state.py). A name is
matched exactly first, then by a wildcard one label deep (``*.t.example.com`` covers ``a.t.example.com``).
When a name has both an ECDSA and an RSA certificate, both are loaded into its context and OpenSSL
offers the one the client's signature algorithms allow (ECDSA first). A name nothing covers, and a
ClientHello without SNI, get the default certificate: the first operator certificate, else a
self-signed ECDSA one made when the edge starts, the same for all its workers (kept in memory only). The handshake then completes
and the client's own name check decides: as nginx and Caddy do with a default server.

Each set of certificates is one ``ssl.SSLContext``; a change (a file replaced on disk, a new TLS state)
builds a new table in a thread, off the event loop (thousands of certificates take a second to load),
reusing the contexts and parsed certificates that did not change, and swaps it in with one assignment
on the loop: new handshakes get the new certificate and open connections keep theirs. Keys reach
OpenSSL through anonymous memory files (memfd), never a file on disk; an operator key file is read where
the operator put it.

CPython reads a ClientHello's server name as ASCII before the callback runs; one that is not fails the
handshake and is reported through ``sys.unraisablehook`` (a traceback on stderr per handshake). The https
port refuses such a ClientHello before OpenSSL sees it (assetcdn/edge/tls/client_hello.py);
:class:`UnreadableServerNames` counts those refusals and the reports of any it could not read (a name
beyond the first record) as one log line per minute.
"""

from __future__ import annotations

import asyncio
import datetime
import hmac
import ipaddress
import logging
import os
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from assetcdn.edge.tls.ssl_object import TlsObject
from assetcdn.edge.tls.state import EdgeTlsState
from assetcdn.edge.tls.tickets import KEY_FILE as TICKET_KEY_FILE
from assetcdn.edge.tls.tickets import Unavailable, shared_ticket_keys
from assetcdn.shared.config import Settings
from assetcdn.shared.tls_state import CertificateEntry

log = logging.getLogger(__name__)
ALPN = ("h2", "http/1.1")
# TLS 1.2: ECDHE key exchange with an AEAD cipher only (ECDSA or RSA certificates); TLS 1.3's suites are all AEAD.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
SELF_SIGNED_DAYS = 365
UNREADABLE_NAME_LOG_INTERVAL_S = 60.0


class CertificateFileError(Exception):
    """An operator certificate or key file that cannot be read or used; the message names the file."""


@dataclass(frozen=True)
class Certificate:
    """One certificate chain and its key, ready to load. `source` says where it came from (a file or the TLS
    state, never the key)."""

    names: tuple[str, ...]
    chain_pem: bytes
    key_pem: bytes
    ecdsa: bool
    not_after: datetime.datetime
    source: str

    @property
    def ident(self) -> tuple[bytes, bytes]:
        return (self.chain_pem, self.key_pem)


def new_context() -> ssl.SSLContext:
    """A server context with the edge's policy: TLS 1.2 and 1.3, AEAD ciphers, ALPN h2 and http/1.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(list(ALPN))
    # One TLS 1.3 ticket per connection, not OpenSSL's two: a client resumes one connection per origin
    # (HTTP/2) and each resumption brings a fresh ticket, and every ticket is sealed and sent at a cost.
    context.num_tickets = 1
    context.sslobject_class = TlsObject  # what uvloop's TLS protocol drives (assetcdn/edge/tls/ssl_object.py)
    return context


def _load_into(context: ssl.SSLContext, certificate: Certificate, spill_dir: Path | None) -> None:
    """``load_cert_chain`` takes file names only: the chain and key go through memory files (Linux
    memfd), or, where there are none, through 0600 files in `spill_dir` removed at once."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("tls-chain", "tls-key")]
        try:
            for fd, data in zip(fds, (certificate.chain_pem, certificate.key_pem), strict=True):
                os.write(fd, data)
            context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return
    paths: list[str] = []
    try:
        for data in (certificate.chain_pem, certificate.key_pem):
            fd, path = tempfile.mkstemp(dir=spill_dir, prefix=".tls-")
            paths.append(path)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        context.load_cert_chain(paths[0], paths[1])
    finally:
        for path in paths:
            os.unlink(path)


def parse_certificate(chain_pem: bytes, key_pem: bytes, source: str, names: Iterable[str] = ()) -> Certificate:
    """The chain's first certificate says the names (its DNS subject alternative names, else its common
    name) unless `names` are given, and its expiry; the key says ECDSA or RSA. Raises ValueError."""
    leaf = x509.load_pem_x509_certificate(chain_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the key is neither ECDSA nor RSA")
    if key.public_key().public_numbers() != leaf.public_key().public_numbers():  # type: ignore[union-attr]
        raise ValueError("the key does not belong to the certificate")
    found = list(names)
    if not found:
        try:
            found = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
                x509.DNSName)
        except x509.ExtensionNotFound:
            found = [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return Certificate(tuple(n.lower().rstrip(".") for n in found), chain_pem, key_pem,
                       isinstance(key, ec.EllipticCurvePrivateKey), leaf.not_valid_after_utc, source)


def read_operator_pair(chain_file: str, key_file: str) -> Certificate:
    data: list[bytes] = []
    for path in (chain_file, key_file):
        try:
            data.append(Path(path).read_bytes())
        except OSError as exc:
            raise CertificateFileError(f"cannot read TLS {'key' if path == key_file else 'certificate'} "
                                       f"file {path}: {exc.strerror or exc}") from None
    try:
        return parse_certificate(data[0], data[1], chain_file)
    except ValueError as exc:
        raise CertificateFileError(f"cannot use TLS certificate {chain_file} with key file {key_file}: {exc}") from None


def self_signed(names: Iterable[str]) -> Certificate:
    """An ECDSA P-256 certificate for `names`, signed by its own key: the default when the operator has
    given none (clients that do not trust it see a certificate error, as with any unknown name)."""
    key = ec.generate_private_key(ec.SECP256R1())
    names = [n for n in dict.fromkeys(names) if n]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
                   .add_extension(x509.SubjectAlternativeName([_subject_name(n) for n in names]), critical=False)
                   .sign(key, hashes.SHA256()))
    return Certificate(tuple(names), certificate.public_bytes(serialization.Encoding.PEM),
                       key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()),
                       True, certificate.not_valid_after_utc, "self-signed")


def default_certificate_names(public_url: str, host: str) -> tuple[str, ...]:
    """The names the self-signed default certificate covers: localhost, the public URL's host and the address the
    edge listens on (`--host`, the one `assetcdn up` prints its https URL with) unless that is every address."""
    names = ["localhost", urlsplit(public_url).hostname or ""]
    try:
        if not ipaddress.ip_address(host).is_unspecified:
            names.append(host)
    except ValueError:
        names.append(host)  # a host name
    return tuple(n for n in dict.fromkeys(names) if n)


def _subject_name(name: str) -> x509.GeneralName:
    """An address as an IP address entry (a client never matches one against a DNS name), else a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _file_signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


ContextKey = tuple[tuple[bytes, bytes], ...]  # the (chain, key) of each certificate loaded into a context


@dataclass(frozen=True)
class SniTable:
    """What the SNI callback reads, replaced whole when a certificate changes. `contexts` and `parsed` are
    kept for the next build, which reuses what did not change."""

    exact: dict[str, ssl.SSLContext]
    wildcard: dict[str, ssl.SSLContext]  # "t.example.com" for *.t.example.com
    default: ssl.SSLContext
    single: bool  # every name has the default context
    contexts: dict[ContextKey, ssl.SSLContext]
    parsed: dict[tuple[str, tuple[str, ...]], Certificate]  # the TLS state's, by id and names


@dataclass(frozen=True)
class _Inputs:
    """What one build reads, taken on the event loop when it starts."""

    operator: Sequence[Certificate]
    entries: Sequence[CertificateEntry]
    keys: Mapping[str, bytes]
    self_signed: Certificate | None
    previous: SniTable | None


class CertificateStore:
    """The certificates of one worker and the SNI table built from them (see the module docstring)."""

    def __init__(self, settings: Settings, tls_state: EdgeTlsState, *, default_names: Iterable[str] = ("localhost",),
                 spill_dir: Path | None = None, self_signed_default: Certificate | None = None) -> None:
        """`spill_dir` is the edge's cache directory: where a key goes where there is no memfd, and the
        session ticket key file its workers share. `self_signed_default`: the self-signed certificate offered
        when the operator has none, made by the edge for all its workers (else one made here for `default_names`)."""
        tls = settings.section("tls")
        self.pairs = [(str(chain), str(key)) for chain, key in tls["certificates"]]
        self.reload_interval_s = float(tls["reload_interval_s"])
        self.tls_state = tls_state
        self.spill_dir = spill_dir
        self.operator = [read_operator_pair(chain, key) for chain, key in self.pairs]  # errors name the file
        self._signatures = self._file_signatures()
        self._failed: tuple[list[tuple[int, int, int] | None], str] | None = None  # the last pair said unusable
        self._self_signed = None if self.operator else self_signed_default or self_signed(default_names)
        # Session tickets sealed under keys every worker of the edge shares (assetcdn/edge/tls/tickets.py),
        # kept in the cache directory; without them (no cache directory, or OpenSSL out of reach) OpenSSL's
        # own random key of each worker's front context.
        self.ticket_rotation_s = float(tls["session_ticket_rotation_s"])
        self.tickets = (shared_ticket_keys(spill_dir / TICKET_KEY_FILE, self.ticket_rotation_s)
                        if spill_dir is not None else None)
        # The context every connection starts with (its session cache and ticket keys serve every name:
        # OpenSSL keeps them on the first context) is the default certificate's, whose SNI callback moves
        # the handshake on when another name has a context of its own. Without shared keys it is one
        # without a certificate, replaced every session_ticket_rotation_s: a new context, a new key.
        self._rotating_front = self._new_front() if self.tickets is None else None
        self._front_made = time.monotonic()
        self._tickets_until = 0.0  # wall clock: when the contexts' ticket keys change next
        self._watch: asyncio.Task[None] | None = None
        self.unreadable_names = UnreadableServerNames()
        # Builds are numbered as they start; a build that ends after a later one started is dropped (the
        # later one read newer inputs), so the table never goes back.
        self._started = self._installed = 0
        self._use(self._build(self._inputs(None)))
        tls_state.on_change.append(self._state_changed)

    def _file_signatures(self) -> list[tuple[int, int, int] | None]:
        return [_file_signature(p) for pair in self.pairs for p in pair]

    def _inputs(self, previous: SniTable | None) -> _Inputs:
        return _Inputs(tuple(self.operator), self.tls_state.certificates, dict(self.tls_state.keys),
                       self._self_signed, previous)

    async def _state_changed(self, _state: EdgeTlsState) -> None:
        await self.rebuild()

    async def rebuild(self) -> None:
        """Build the table again in a thread and swap it in on the loop; returns once a table at least
        this new is in place. Cancelling the caller does not stop the swap."""
        self._started += 1
        number = self._started
        built = asyncio.get_running_loop().run_in_executor(None, self._build, self._inputs(self.table))
        built.add_done_callback(lambda done: self._install(number, done))
        await asyncio.wait({built})

    def _install(self, number: int, built: asyncio.Future[SniTable]) -> None:
        if built.cancelled():
            return
        if (error := built.exception()) is not None:
            log.error("TLS: the certificates could not be loaded; still offering the previous ones",
                      exc_info=error)
            return
        if number > self._installed:
            self._installed = number
            self._use(built.result())

    def _use(self, table: SniTable) -> None:
        """Make `table` the one new handshakes read. Its default context is the one they start with (with
        shared ticket keys): it asks for the server name only when some name has another context, so with
        one certificate no handshake calls into Python for SNI. Set here, on the loop, never while a
        handshake on another thread reads it."""
        if self._rotating_front is None:
            table.default.sni_callback = None if table.single else self._choose
        self.table = table
        self._tickets_until = 0.0  # every context of the table gets the keys of now, at the next connection

    @staticmethod
    def _offered(inputs: _Inputs, parsed: dict[tuple[str, tuple[str, ...]], Certificate]) -> list[Certificate]:
        """Every certificate offered, in order of preference: the operator's, then the TLS state's (latest
        expiry first). The TLS state's are parsed into `parsed`, unless the previous table has them."""
        found = list(inputs.operator)
        from_state: list[Certificate] = []
        known_before = inputs.previous.parsed if inputs.previous else {}
        for entry in inputs.entries:
            key_pem = inputs.keys.get(entry.id)
            if key_pem is None:
                continue
            known = known_before.get((entry.id, entry.names))
            if known is not None and hmac.compare_digest(known.key_pem, key_pem):
                parsed[(entry.id, entry.names)] = known
                from_state.append(known)
                continue
            try:
                certificate = parse_certificate(entry.chain_pem.encode(), key_pem, f"TLS state {entry.id[:12]}",
                                                entry.names)
            except ValueError as exc:
                log.warning("certificate %s from control not offered: %s", entry.id[:12], exc)
                continue
            parsed[(entry.id, entry.names)] = certificate
            from_state.append(certificate)
        # During a renewal both may be listed for a name: the one that lasts longer first.
        found += sorted(from_state, key=lambda c: c.not_after, reverse=True)
        if inputs.self_signed is not None:
            found.append(inputs.self_signed)
        return found

    def _build(self, inputs: _Inputs) -> SniTable:
        """The table for `inputs`. Runs in a thread (but in __init__): it reads only `inputs` and writes
        only what it returns."""
        parsed: dict[tuple[str, tuple[str, ...]], Certificate] = {}
        certificates = self._offered(inputs, parsed)
        by_name: dict[str, list[Certificate]] = {}
        for certificate in certificates:
            for name in certificate.names:
                by_name.setdefault(name, []).append(certificate)
        contexts: dict[ContextKey, ssl.SSLContext] = {}
        before = inputs.previous.contexts if inputs.previous else {}
        exact: dict[str, ssl.SSLContext] = {}
        wildcard: dict[str, ssl.SSLContext] = {}
        for name, offered in by_name.items():
            context = self._context_for(self._per_key_type(offered), contexts, before)
            if context is None:
                continue
            if name.startswith("*."):
                wildcard[name[2:]] = context
            else:
                exact[name] = context
        first = inputs.operator[:1] or ([inputs.self_signed] if inputs.self_signed else [])
        default = (self._context_for(self._per_key_type(list(first)), contexts, before)
                   or (inputs.previous.default if inputs.previous else self._new_context()))
        log.info("TLS: %d certificate(s) for %d name(s)", len(certificates), len(exact) + len(wildcard))
        single = all(context is default for context in (*exact.values(), *wildcard.values()))
        return SniTable(exact, wildcard, default, single, contexts, parsed)

    @staticmethod
    def _per_key_type(offered: list[Certificate]) -> tuple[Certificate, ...]:
        """The first ECDSA and the first RSA certificate among `offered` (preference order kept)."""
        chosen: dict[bool, Certificate] = {}
        for certificate in offered:
            chosen.setdefault(certificate.ecdsa, certificate)
        return tuple(chosen.values())

    def _context_for(self, chosen: tuple[Certificate, ...], contexts: dict[ContextKey, ssl.SSLContext],
                     previous: dict[ContextKey, ssl.SSLContext]) -> ssl.SSLContext | None:
        if not chosen:
            return None
        key = tuple(c.ident for c in chosen)
        context = contexts.get(key) or previous.get(key)
        if context is None:
            context = self._new_context()
            try:
                for certificate in chosen:
                    _load_into(context, certificate, self.spill_dir)
            except (ssl.SSLError, OSError) as exc:
                log.warning("certificate from %s not offered: %s", ", ".join(c.source for c in chosen), exc)
                return None
        contexts[key] = context
        return context

    def context_for(self, server_name: str | None) -> ssl.SSLContext:
        table = self.table
        if server_name:
            name = server_name.lower().rstrip(".")
            context = table.exact.get(name)
            if context is not None:
                return context
            parent = name.partition(".")[2]
            if parent:
                context = table.wildcard.get(parent)
                if context is not None:
                    return context
        return table.default

    def _choose(self, connection: Any, server_name: str | None, _front: ssl.SSLContext) -> None:
        context = self.context_for(server_name)
        if context is not connection.context:  # staying costs nothing; a switch copies the certificates
            connection.context = context

    def _new_context(self) -> ssl.SSLContext:
        """A context of the edge's policy sealing tickets with the shared keys. OpenSSL asks the front
        context's keys only (the session's context); each SNI context gets them too, so no context of
        this worker ever seals under a key of its own."""
        context = new_context()
        if self.tickets is not None:
            try:
                self.tickets.install(context)
            except Unavailable as exc:  # checked at start on a context like this one: not expected
                log.error("TLS: session ticket keys not set on a context (%s)", exc)
        return context

    def _new_front(self) -> ssl.SSLContext:
        front = self._new_context()
        front.sni_callback = self._choose
        return front

    def _rekey(self) -> None:
        """The current period's ticket key (and, just after a rotation, the callback opening the previous
        period's tickets) on every context of the table, on the loop between handshakes."""
        assert self.tickets is not None
        table = self.table
        try:
            self._tickets_until = self.tickets.apply({id(c): c for c in (table.default, *table.contexts.values())}.values())
        except Unavailable as exc:  # checked at start: not expected
            log.error("TLS: session ticket keys not set (%s)", exc)
            self._tickets_until = float("inf")

    @property
    def front(self) -> ssl.SSLContext:
        return self.table.default if self._rotating_front is None else self._rotating_front

    def front_context(self) -> ssl.SSLContext:
        """The context a new connection starts with. Without shared ticket keys, a fresh one (so a fresh
        key) once the current one is `ticket_rotation_s` old: tickets made under the previous key no
        longer resume, those clients make one full handshake."""
        if self._rotating_front is None:
            if self.tickets is not None and time.time() >= self._tickets_until:
                self._rekey()
            return self.table.default
        if self.ticket_rotation_s > 0 and time.monotonic() - self._front_made >= self.ticket_rotation_s:
            self._rotating_front = self._new_front()
            self._front_made = time.monotonic()
        return self._rotating_front

    # --- operator files: read again when they change ----------------------------------------------

    async def reload_if_changed(self) -> bool:
        signatures = self._file_signatures()
        if signatures == self._signatures:
            return False
        try:
            operator = [read_operator_pair(chain, key) for chain, key in self.pairs]
        except CertificateFileError as exc:
            # Often a renewal half-written (a new certificate beside the old key): kept as it was, tried again at
            # every check (a permission put right changes no signature), said once until the files or the error
            # change (a pair left half-written would otherwise log a line per worker every reload_interval_s).
            if (signatures, str(exc)) != self._failed:
                self._failed = (signatures, str(exc))
                log.error("%s; still offering the previous certificates", exc)
            return False
        self._failed = None
        self._signatures = signatures
        self.operator = operator
        await self.rebuild()
        log.info("TLS: operator certificates read again")
        return True

    def start(self) -> None:
        self.unreadable_names.install()
        if self.pairs and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_files())

    def stop(self) -> None:
        self.unreadable_names.uninstall()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def _watch_files(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval_s)
            try:
                await self.reload_if_changed()
            except Exception:
                log.exception("reading the operator certificates again failed")


def _is_unreadable_server_name(report: sys.UnraisableHookArgs) -> bool:
    """CPython's report of a server name it could not decode: the UnicodeDecodeError of exactly the bytes
    it names as the object."""
    error = report.exc_value
    return (isinstance(error, UnicodeDecodeError) and isinstance(report.object, bytes)
            and error.object == report.object and report.err_msg is None)


class UnreadableServerNames:
    """The handshakes refused for a server name that is not ASCII, as one line per `interval_s` that
    counts the ones left out: those refused by the first-record check (:meth:`refused`), and, as this
    process's ``sys.unraisablehook``, those that reach OpenSSL (CPython fails them before any callback
    of ours and reports them here). Any other report goes to the hook this one replaced."""

    def __init__(self, interval_s: float = UNREADABLE_NAME_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.left_out = 0  # reports since the last line
        self._logged_at: float | None = None
        self._previous: Callable[[sys.UnraisableHookArgs], object] | None = None

    def install(self) -> None:
        if self._previous is None:
            self._previous = sys.unraisablehook
            sys.unraisablehook = self

    def uninstall(self) -> None:
        if self._previous is not None and sys.unraisablehook is self:
            sys.unraisablehook = self._previous
        self._previous = None

    def __call__(self, report: sys.UnraisableHookArgs) -> None:
        if not _is_unreadable_server_name(report):
            (self._previous or sys.__unraisablehook__)(report)
            return
        assert isinstance(report.object, bytes)
        self.refused(report.object)

    def refused(self, name: bytes) -> None:
        now = time.monotonic()
        if self._logged_at is not None and now - self._logged_at < self.interval_s:
            self.left_out += 1
            return
        log.warning("TLS: handshake refused, its server name (SNI) is not ASCII: %s; %d more since the last "
                    "such line (one line per %.0f s)", ascii(name[:64]), self.left_out, self.interval_s)
        self.left_out, self._logged_at = 0, now
