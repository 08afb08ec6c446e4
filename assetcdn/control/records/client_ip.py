"""The client address of a control-plane request, for the audit and request logs.

Edges forward management calls with ``X-Forwarded-For`` (appending the address they saw). That
header is believed only from a trusted peer (loopback or a registered edge), and then read from
the right: each trusted hop is skipped and the first untrusted address is the client. Reading from
the left would let any caller write the address it likes into the audit log.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from aiohttp import web

from assetcdn.control.app_keys import REGISTRY

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    text = text.strip().strip("[]")
    if text.count(":") == 1 and "." in text:  # "1.2.3.4:5678"
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def edge_addresses(edge_urls: Iterable[str]) -> frozenset[Address]:
    """The IP addresses registered edges announced in their URLs (host names are not resolved)."""
    found = set()
    for url in edge_urls:
        host = urlsplit(url).hostname
        address = _address(host) if host else None
        if address is not None:
            found.add(address)
    return frozenset(found)


def client_ip(request: web.Request, trusted: frozenset[Address] = frozenset()) -> str:
    peer_text = request.remote or ""
    peer = _address(peer_text)
    if peer is None:
        return peer_text or "unknown"

    def is_trusted(address: Address) -> bool:
        return address.is_loopback or address in trusted

    if not is_trusted(peer):
        return str(peer)
    hops = [h for h in request.headers.get("X-Forwarded-For", "").split(",") if h.strip()]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            return str(peer)  # an unparseable hop: stop believing the chain
        if not is_trusted(address):
            return str(address)
    return str(_address(hops[0]) if hops else peer)


def request_ip(request: web.Request) -> str:
    """The client address of ``request``, believing the forwarding chain of loopback and registered edges."""
    registry = request.app.get(REGISTRY)
    trusted = edge_addresses(e.url for e in registry.edges.values()) if registry else frozenset()
    return client_ip(request, trusted)
