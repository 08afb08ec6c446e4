"""Which addresses the service may connect to on a caller's behalf (webhook targets, pull-zone origins): no
request to a private network.

An address is refused unless it is globally routable: private, loopback, link-local (cloud metadata
at 169.254.169.254 among them), multicast, reserved, unspecified and shared (CGNAT) ranges are all
refused, also when wrapped in an IPv6 form (IPv4-mapped, NAT64, 6to4, Teredo). Loopback is allowed
only where the caller's own setting says so (``webhooks.allow_loopback``, ``origin.allow_loopback``).

Names are checked by what they resolve to, at registration and again for every connection: the
resolver handed to the HTTP client (``GuardedResolver``) resolves once, checks every address and
returns only those, so the connection goes to an address that was checked (no DNS rebinding between
check and connect); TLS and the Host header keep the name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Protocol

from aiohttp.abc import AbstractResolver, ResolveResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16"))
# Ranges that are not globally routable which Python 3.11's `is_global` still counts as global: IPv6 site-local
# (deprecated, still routed inside some sites), the IPv6 documentation prefix 3fff::/20 and ORCHIDv2.
NOT_GLOBAL = tuple(ipaddress.ip_network(n) for n in ("fec0::/10", "3fff::/20", "2001:20::/28"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix; the local-use 64:ff9b:1::/48 is refused
# Names that only ever mean a private network (checked before any lookup).
PRIVATE_SUFFIXES = (".local", ".internal", ".localdomain", ".home.arpa", ".intranet", ".lan")
PRIVATE_NAMES = frozenset({"metadata", "instance-data", "metadata.google.internal"})
LOOKUP_TIMEOUT_S = 5.0


class RefusedTarget(OSError):
    """A target the guard refuses; an OSError so the HTTP client reports it as a failed connection."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UnresolvedTarget(RefusedTarget):
    """A target whose name gave no address (not found, the lookup failed or did not end): refused as the guard
    refuses, but nothing the guard judged (an origin's requests count it as a failed connection)."""


def refusal_in(exc: BaseException) -> RefusedTarget | None:
    """The guard's refusal behind an HTTP client's connection error, if that is what it was."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, RefusedTarget):
            return seen
        seen = getattr(seen, "os_error", None) or seen.__cause__
    return None


def _forms(ip: IPAddress) -> Iterable[IPAddress]:
    """The address and every IPv4 address it carries (a check of the outer form alone can be bypassed). A NAT64
    address of the well-known prefix is the IPv4 address it carries alone: the prefix reaches IPv4 hosts through
    the network's translator (Python counts it in the reserved ``::/8``, which would refuse every one of them)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip in NAT64:
        yield ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        return
    yield ip
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            yield ip.ipv4_mapped
        if ip.sixtofour is not None:
            yield ip.sixtofour
        if ip.teredo is not None:
            yield from ip.teredo


# Why a loopback address or name is refused, in every refusal of one: the services that take a target from an
# operator (control's zone and webhook APIs) find it there, and name the setting that lets it through.
LOOPBACK_REFUSED = "allowed only where a development setting allows it"
# Why a public address is refused to plain http (a webhook in development): only https leaves this machine.
HTTP_LOOPBACK_ONLY = "plain http is allowed only to loopback"


def address_problem(address: str, *, allow_loopback: bool) -> str | None:
    """Why the service may not connect to `address`, or None when it may."""
    kind = refused_kind(address, allow_loopback=allow_loopback)
    return None if kind is None else f"{address} is {kind}"


def refused_kind(address: str, *, allow_loopback: bool) -> str | None:
    """What kind of address `address` is when the service may not connect to it ("a private address"), or None
    when it may: `address_problem` without the address, for a name's refusal (`checked_addresses`)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone id is no part of the address
    except ValueError:
        return "no IP address"
    for form in _forms(ip):
        if form in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if form.is_loopback:
            if allow_loopback:
                continue
            return f"a loopback address ({LOOPBACK_REFUSED})"
        if form.is_unspecified:
            return "the unspecified address"
        if form.is_link_local:
            return "a link-local address"
        if form.is_multicast:
            return "a multicast address"
        if form.is_private:
            return "a private address"
        if form.is_reserved or not form.is_global or any(form in network for network in NOT_GLOBAL
                                                         if network.version == form.version):
            return "not a public address"
    return None


def is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    forms = list(_forms(ip))
    return any(form.is_loopback for form in forms)


def name_problem(host: str, *, allow_loopback: bool) -> str | None:
    """Why the host name itself is refused, before any lookup (names that only mean a private network)."""
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return None if allow_loopback else f"'{host}' is a loopback name ({LOOPBACK_REFUSED})"
    if name in PRIVATE_NAMES or name.endswith(PRIVATE_SUFFIXES) or "." not in name:
        return f"'{host}' is a name of a private network"
    return None


def literal_address(host: str) -> str | None:
    """The address when `host` is an IP literal (URL form, IPv6 in brackets or not), else None. IPv4 in any
    spelling a resolver takes as a number (``127.1``, ``0x7f.1``, ``0177.0.0.1``, ``2130706433``, a trailing
    dot) is that address, in dotted-quad form: checked by name, it would pass for a host name."""
    candidate = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(candidate.split("%", 1)[0])
    except ValueError:
        numeric = candidate[:-1] if candidate.endswith(".") else candidate
        if not numeric or not numeric.isascii() or not all(part and part[0].isdigit() for part in numeric.split(".")):
            return None
        try:
            return socket.inet_ntoa(socket.inet_aton(numeric))
        except OSError:
            return None
    return candidate


class HostResolver(Protocol):
    """Where names are looked up: the system's resolver, or one a test controls."""

    async def addresses(self, host: str) -> list[str]: ...


class SystemResolver:
    async def addresses(self, host: str) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class CachingResolver:
    """`resolver`'s answers kept `ttl_s` per name (the system's resolver gives no TTL: a short fixed time, as
    nginx's ``resolver valid=``), at most `names` names (the least recently asked goes first), with one lookup
    per name under way however many connections wait for it. A failed lookup is not kept. The addresses are
    still checked for every connection (``checked_addresses``): what is kept is the lookup, not the verdict, so a
    name that moves to a refused address is refused once its kept answer expires. A lookup under way for
    `give_up_s` (the bound each connection waits, LOOKUP_TIMEOUT_S) is one whose name does not answer: a new
    connection to it is refused at once (TimeoutError) until that lookup ends, rather than each waiting its whole
    bound for the same hung lookup."""

    def __init__(self, resolver: HostResolver, *, ttl_s: float, names: int = 1024,
                 clock: Callable[[], float] = time.monotonic, give_up_s: float = LOOKUP_TIMEOUT_S) -> None:
        self._resolver = resolver
        self._ttl_s = ttl_s
        self._names = names
        self._clock = clock
        self._give_up_s = give_up_s
        self._kept: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self._under_way: dict[str, tuple[float, asyncio.Future[list[str]]]] = {}  # since when, the lookup

    async def addresses(self, host: str) -> list[str]:
        kept = self._kept.get(host)
        if kept is not None:
            if kept[0] > self._clock():
                self._kept.move_to_end(host)
                return list(kept[1])
            del self._kept[host]
        under_way = self._under_way.get(host)
        if under_way is None:
            lookup: asyncio.Future[list[str]] = asyncio.ensure_future(self._look_up(host))
            self._under_way[host] = (self._clock(), lookup)
            lookup.add_done_callback(_retrieved)
        else:
            since, lookup = under_way
            if self._clock() - since >= self._give_up_s:
                raise TimeoutError(f"the lookup of '{host}' has not ended in {self._give_up_s:g} s")
        # A waiter that gives up (its own bound, its request gone) leaves the lookup to the others.
        return list(await asyncio.shield(lookup))

    async def _look_up(self, host: str) -> list[str]:
        try:
            addresses = await self._resolver.addresses(host)
        finally:
            del self._under_way[host]
        if self._ttl_s > 0:
            self._kept[host] = (self._clock() + self._ttl_s, addresses)
            self._kept.move_to_end(host)
            while len(self._kept) > self._names:
                self._kept.popitem(last=False)
        return addresses


def _retrieved(lookup: asyncio.Future[list[str]]) -> None:
    """A lookup's failure is its waiters' to raise; read here too, so that one every waiter gave up on is not
    logged as an exception never retrieved."""
    if not lookup.cancelled():
        lookup.exception()


async def checked_addresses(resolver: HostResolver, host: str, *, allow_loopback: bool,
                            loopback_only: bool = False) -> list[str]:
    """Resolve `host` once and return its addresses when every one of them is allowed; else RefusedTarget.

    `loopback_only`: plain-http targets (development only) must resolve to loopback addresses alone."""
    problem = name_problem(host, allow_loopback=allow_loopback)
    if problem:
        raise RefusedTarget(problem)
    try:
        async with asyncio.timeout(LOOKUP_TIMEOUT_S):
            addresses = await resolver.addresses(host)
    except TimeoutError:
        raise UnresolvedTarget(f"'{host}' could not be resolved within {LOOKUP_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise UnresolvedTarget(f"'{host}' could not be resolved ({exc.strerror or exc})") from None
    if not addresses:
        raise UnresolvedTarget(f"'{host}' has no address")
    for address in addresses:
        # Not the address itself: the refusal reaches whoever named the host (a webhook's 400, a pull zone's 502),
        # who could otherwise learn what names mean inside the network the service runs in.
        refused = checked_kind(address, allow_loopback=allow_loopback, loopback_only=loopback_only)
        if refused:
            raise RefusedTarget(f"'{host}' resolves to an address that may not be reached: {refused}")
    return addresses


def check_address(address: str, *, allow_loopback: bool, loopback_only: bool = False) -> str | None:
    kind = checked_kind(address, allow_loopback=allow_loopback, loopback_only=loopback_only)
    return None if kind is None else f"{address} is {kind}"


def checked_kind(address: str, *, allow_loopback: bool, loopback_only: bool = False) -> str | None:
    """`check_address` without the address: what kind of address it is, when refused."""
    if loopback_only and not is_loopback(address):
        return f"not a loopback address ({HTTP_LOOPBACK_ONLY})"
    return refused_kind(address, allow_loopback=allow_loopback)


class GuardedResolver(AbstractResolver):
    """The HTTP client's resolver: resolves once, refuses if any address is not allowed, and hands the
    checked addresses to the connection (pinning it to them)."""

    def __init__(self, resolver: HostResolver, *, allow_loopback: bool, loopback_only: bool = False) -> None:
        self._resolver = resolver
        self._allow_loopback = allow_loopback
        self._loopback_only = loopback_only

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        addresses = await checked_addresses(self._resolver, host, allow_loopback=self._allow_loopback,
                                            loopback_only=self._loopback_only)
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [{"hostname": host, "host": address, "port": port,
                 "family": socket.AF_INET6 if ":" in address else socket.AF_INET, "proto": 0, "flags": flags}
                for address in addresses]

    async def close(self) -> None:
        return None
