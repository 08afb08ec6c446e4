"""The PROXY protocol (versions 1 and 2, HAProxy's proxy-protocol.txt) on the edge's public ports.

A load balancer that forwards TCP (HAProxy ``send-proxy-v2``, a cloud TCP balancer) puts one header in
front of the client's bytes naming the client's address. With ``[edge] proxy_protocol`` on, each new
connection of the http and https ports starts with :class:`ProxyHeaderReader`, which reads that header
before HTTP, and on the https port before TLS (the header precedes the ClientHello):

- from a peer in ``proxy_protocol_trusted`` the header is parsed and the address it carries becomes
  the connection's client address wherever the peer address is used (limits, the access log, the
  delivery log, the X-Forwarded-For sent to control): the connection's protocol is made only then, on
  a transport that reports that address as its ``peername`` (``ClientTransport``; the hit path's own
  connection is told directly, so its writes go to the socket as they do without a header). A LOCAL
  command (a balancer's health check) or an UNSPEC/UDP/UNIX source keeps the peer's own address.
  Without a header the connection goes on as the peer's own (``optional``) or is closed (``required``).
- from any other peer the connection's protocol starts at once, with its own deadlines, and only its
  first bytes are looked at: a connection that starts with a PROXY header is closed, unanswered;
  anything else goes on as without the setting.

The first byte from a trusted peer must come within ``header_timeout_s`` (as a request head must), and
the whole header within ``proxy_protocol_timeout_s`` of it; a malformed, oversized or incomplete
header closes the connection. Closed connections are counted by reason in
``assetcdn_edge_proxy_header_refusals_total`` and logged at most one line per REFUSAL_LOG_INTERVAL_S per process.
With the setting off no reader is made: a connection starts as it always did.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from assetcdn.shared.config import Settings

if TYPE_CHECKING:  # an edge with several workers checks the setting in a process that imports no aiohttp
    from prometheus_client import Counter

log = logging.getLogger(__name__)

MODES = ("off", "optional", "required")
V1_PREFIX = b"PROXY "
V1_MAX = 107                 # the longest version 1 line, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = 16                # signature, version and command, family and protocol, length
V2_MAX_LENGTH = 2048         # addresses and TLVs after the fixed part; more is refused
V2_LOCAL, V2_PROXY = 0, 1
TCP4, TCP6 = 0x11, 0x21
# Families (high nibble: UNSPEC, INET, INET6, UNIX) by transport (low nibble: UNSPEC, STREAM, DGRAM).
V2_FAMILIES = frozenset(family << 4 | proto for family in range(4) for proto in range(3))
REFUSAL_LOG_INTERVAL_S = 60.0

# Why a connection was closed at its header (the metric's `reason` label).
UNTRUSTED = "untrusted"      # a header from a peer not in proxy_protocol_trusted
MALFORMED = "malformed"      # a header that does not parse, is too long, or ends before it is whole
TIMEOUT = "timeout"          # a header not whole within proxy_protocol_timeout_s of its first byte
MISSING = "missing"          # required, and a trusted peer's connection did not start with a header

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Peername = tuple[str, int] | tuple[str, int, int, int]


class Malformed(ValueError):
    """A PROXY header that cannot be accepted."""


def starts_with_header(data: bytes) -> bool | None:
    """Whether `data` starts with a PROXY header's signature (either version); None: too short to tell."""
    if data[:12] == V2_SIGNATURE or data[:6] == V1_PREFIX:
        return True
    if V2_SIGNATURE.startswith(data[:12]) or V1_PREFIX.startswith(data[:6]):
        return None
    return False


def parse_header(data: bytes) -> tuple[int, Peername | None] | None:
    """(length of the header at the start of `data`, the client address it names or None for the peer's
    own), or None while more bytes are needed. `data` starts with a signature (`starts_with_header`).
    Raises Malformed."""
    if data[:1] == b"P":
        return _parse_v1(data)
    return _parse_v2(data)


def _parse_v1(data: bytes) -> tuple[int, Peername | None] | None:
    end = data.find(b"\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX:
            raise Malformed(f"a version 1 line longer than {V1_MAX} bytes")
        return None
    if data[end - 1:end] != b"\r":
        raise Malformed("a version 1 line not ended by CRLF")
    words = data[len(V1_PREFIX):end - 1].split(b" ")
    if words[0] == b"UNKNOWN":  # the rest, if any, is to be ignored
        return end + 1, None
    if words[0] not in (b"TCP4", b"TCP6") or len(words) != 5:
        raise Malformed("a version 1 line that is neither TCP4, TCP6 nor UNKNOWN with two addresses and ports")
    version = 4 if words[0] == b"TCP4" else 6
    source = _v1_address(words[1], version)
    _v1_address(words[2], version)
    port = _v1_port(words[3])
    _v1_port(words[4])
    return end + 1, _peername(source, port)


def _v1_address(word: bytes, version: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        address = ipaddress.ip_address(word.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise Malformed(f"not an IP address: {word[:45]!r}") from None
    if address.version != version or "%" in str(address):
        raise Malformed(f"not an IPv{version} address: {word[:45]!r}")
    return address


def _v1_port(word: bytes) -> int:
    if not word.isdigit() or len(word) > 5 or int(word) > 65535:
        raise Malformed(f"not a port: {word[:8]!r}")
    return int(word)


def _parse_v2(data: bytes) -> tuple[int, Peername | None] | None:
    if len(data) < V2_FIXED:
        return None
    version, command = data[12] >> 4, data[12] & 0x0F
    if version != 2 or command not in (V2_LOCAL, V2_PROXY):
        raise Malformed(f"version 2 header with version {version}, command {command}")
    family = data[13]
    if family not in V2_FAMILIES:
        raise Malformed(f"version 2 header with family and protocol {family:#04x}")
    length = int.from_bytes(data[14:16])
    if length > V2_MAX_LENGTH:
        raise Malformed(f"version 2 header of {length} bytes (at most {V2_MAX_LENGTH})")
    end = V2_FIXED + length
    if len(data) < end:
        return None
    # LOCAL: the balancer's own connection (a health check); its address block, if any, is ignored, as
    # are the other families, whose addresses are no IP client's, and the TLVs after the addresses.
    if command == V2_LOCAL or family not in (TCP4, TCP6):
        return end, None
    size, kind = (12, socket.AF_INET) if family == TCP4 else (36, socket.AF_INET6)
    if length < size:
        raise Malformed(f"version 2 header too short for its addresses ({length} bytes)")
    half = (size - 4) // 2
    source = ipaddress.ip_address(socket.inet_ntop(kind, data[V2_FIXED:V2_FIXED + half]))
    port = int.from_bytes(data[V2_FIXED + 2 * half:V2_FIXED + 2 * half + 2])
    return end, _peername(source, port)


def _peername(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> Peername:
    """The peername a socket would give: an IPv4 client behind a dual-stack balancer (an IPv4-mapped IPv6
    source) as the IPv4 address, so it is not counted in one IPv6 /64 with every other IPv4 client."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            return str(address), port, 0, 0
        address = address.ipv4_mapped
    return str(address), port


def trusted_networks(raw: object) -> tuple[Network, ...]:
    """edge.proxy_protocol_trusted: addresses or networks (CIDR), a TOML list or comma-separated text. A bad
    entry stops start-up (ValueError) rather than trusting less, or more, than the operator meant."""
    items: Iterable[object] = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]
    networks = []
    for item in items:
        text = str(item).strip()
        if text:
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise ValueError(f"edge.proxy_protocol_trusted: {text!r} is not an IP address or network") from None
    return tuple(networks)


class RefusalLog:
    """One log line per `interval_s` for the connections closed at their header, counting the ones it
    left out; one per process (REFUSAL_LOG), whichever port refused them."""

    def __init__(self, interval_s: float = REFUSAL_LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.left_out = 0
        self._logged_at: float | None = None

    def refused(self, reason: str, peer: Any, detail: str) -> None:
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < self.interval_s:
            self.left_out += 1
            return
        log.warning("PROXY protocol: connection from %s closed (%s: %s); %d more since the last such line "
                    "(one line per %.0f s)", peer[0] if isinstance(peer, tuple) else "?", reason, detail,
                    self.left_out, self.interval_s)
        self.left_out, self._logged_at = 0, now


REFUSAL_LOG = RefusalLog()


@dataclass
class ProxyPolicy:
    """What a listener does with PROXY headers (``[edge] proxy_protocol*``)."""

    required: bool
    trusted: tuple[Network, ...]
    first_byte_timeout_s: float   # from the connection opening, for a trusted peer
    header_timeout_s: float       # from the header's first byte
    counter: Counter | None = None  # assetcdn_edge_proxy_header_refusals_total
    refusal_log: RefusalLog = field(default_factory=lambda: REFUSAL_LOG)

    def refused(self, reason: str, peer: Any, detail: str) -> None:
        if self.counter is not None:
            self.counter.labels(reason).inc()
        self.refusal_log.refused(reason, peer, detail)

    def trusts(self, peer: Any) -> bool:
        if not isinstance(peer, tuple):
            return False
        try:
            address = ipaddress.ip_address(peer[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack listener's IPv4 peer
        return any(address in network for network in self.trusted)


def proxy_policy(settings: Settings, counter: Counter | None = None) -> ProxyPolicy | None:
    """The policy ``[edge]`` sets, None when the PROXY protocol is off. Raises ValueError for a bad setting."""
    edge = settings.section("edge")
    mode = str(edge["proxy_protocol"]).strip().lower()
    if mode not in MODES:
        raise ValueError(f"edge.proxy_protocol must be one of {', '.join(MODES)}, not {mode!r}")
    trusted = trusted_networks(edge["proxy_protocol_trusted"])
    if mode == "off":
        return None
    if not trusted:
        raise ValueError(f"edge.proxy_protocol is {mode!r} but edge.proxy_protocol_trusted names no address: "
                         "no balancer's header would be believed")
    timeout_s = float(edge["proxy_protocol_timeout_s"])
    if timeout_s <= 0:
        raise ValueError("edge.proxy_protocol_timeout_s must be above 0")
    return ProxyPolicy(mode == "required", trusted, float(settings.get("server", "header_timeout_s")), timeout_s,
                       counter)


class ForwardingTransport(asyncio.Transport):
    """A transport in front of another, with a ``peername`` of its own: what the subclass does not change
    (the write buffer's size and marks, whether it reads, the other extra info) is the one beneath's."""

    __slots__ = ("_transport", "_peername")

    def __init__(self, transport: asyncio.Transport, peername: Peername) -> None:
        super().__init__()
        self._transport = transport
        self._peername = peername

    @property
    def lag_places(self) -> Any:
        """The one beneath's (an HTTP/2 stream's connection: assetcdn/edge/tls/h2.py); None for a connection's own."""
        return getattr(self._transport, "lag_places", None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._peername
        return self._transport.get_extra_info(name, default)

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


class ClientTransport(ForwardingTransport):
    """The connection's transport as its protocol sees it once a PROXY header named the client: the same
    socket, whose ``peername`` is the client's address. Under TLS it is what uvloop's TLS protocol
    reads and writes, so every layer above (HTTP/1.1, HTTP/2 streams, aiohttp) asks it for the address."""

    __slots__ = ()

    def write(self, data: Any) -> None:
        self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._transport.writelines(list_of_data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._transport.close()

    def abort(self) -> None:
        self._transport.abort()

    def _force_close(self, exc: BaseException | None) -> None:
        # What uvloop's TLS protocol calls on the transport beneath it to end a connection at once.
        force_close = getattr(self._transport, "_force_close", None)
        if force_close is not None:
            force_close(exc)
        else:
            self._transport.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._transport.write_eof()


class ProxyHeaderReader(asyncio.Protocol):
    """A connection's protocol until its PROXY header is read (see the module docstring); then the one
    `make` gives, which takes over the transport. A protocol with a ``client_address(peername)`` method
    (the hit path's HitProtocol) is given the transport itself and told the address; any other gets a
    ClientTransport."""

    __slots__ = ("policy", "make", "transport", "peer", "inner", "held", "timer")

    def __init__(self, policy: ProxyPolicy, make: Callable[[], asyncio.Protocol]) -> None:
        self.policy = policy
        self.make = make
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.inner: asyncio.Protocol | None = None  # made at once for an untrusted peer
        self.held = b""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport, not a subclass
        self.peer = transport.get_extra_info("peername")
        if self.policy.trusts(self.peer):
            self.timer = asyncio.get_running_loop().call_later(self.policy.first_byte_timeout_s, self._expired)
        else:
            # Its own address: its protocol starts now, deadlines and all; only the first bytes wait here.
            self.inner = self.make()
            self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        held = self.held + data if self.held else data
        transport = self.transport
        assert transport is not None
        header = starts_with_header(held)
        if self.inner is not None:  # untrusted
            if header is None:
                self.held = held
            elif header:
                self.held = b""
                self._refuse(UNTRUSTED, "a PROXY header from an address not in edge.proxy_protocol_trusted")
            else:
                self.held = b""
                transport.set_protocol(self.inner)
                self.inner.data_received(held)
            return
        if header is False:
            if self.policy.required:
                self.held = b""
                self._refuse(MISSING, "no PROXY header, and edge.proxy_protocol is required")
            else:
                self._start(None, held)
            return
        try:
            parsed = parse_header(held) if header else None
        except Malformed as exc:
            self.held = b""
            self._refuse(MALFORMED, str(exc))
            return
        if parsed is None:
            if not self.held and self.timer is not None:  # the header began: the rest comes soon or never
                self.timer.cancel()
                self.timer = asyncio.get_running_loop().call_later(self.policy.header_timeout_s, self._expired)
            self.held = held
            return
        length, client = parsed
        self._start(client, held[length:])

    def _start(self, client: Peername | None, rest: bytes) -> None:
        """The connection's protocol takes over, as `client`'s (None: the peer's own), with `rest`."""
        transport = self.transport
        assert transport is not None
        self.held = b""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        inner = self.inner = self.make()
        transport.set_protocol(inner)
        if client is None:
            inner.connection_made(transport)
        else:
            told = getattr(inner, "client_address", None)
            if told is not None:
                inner.connection_made(transport)
                told(client)
            else:
                inner.connection_made(ClientTransport(transport, client))
        if rest and not transport.is_closing():
            inner.data_received(rest)

    def _refuse(self, reason: str, detail: str) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.policy.refused(reason, self.peer, detail)
        if self.transport is not None:
            self.transport.close()

    def _expired(self) -> None:
        self.timer = None
        if self.held:  # a header begun and not finished in time
            self.held = b""
            self._refuse(TIMEOUT, f"no whole header within {self.policy.header_timeout_s:g} s")
        elif self.transport is not None:  # nothing sent at all: closed as an idle connection is
            self.transport.close()

    def eof_received(self) -> bool | None:
        if self.inner is None:
            if self.held:
                self.held = b""
                self._refuse(MALFORMED, "the connection ended inside the header")
            return None
        if self.held and self.transport is not None:  # untrusted: what it sent is not a header
            held, self.held = self.held, b""
            self.transport.set_protocol(self.inner)
            self.inner.data_received(held)
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.transport = None
        self.held = b""
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()
