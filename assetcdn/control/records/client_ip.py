"""The client address of a control-plane request, for the audit and request logs and the per-client limits.

Edges forward management calls with ``X-Forwarded-For`` (appending the address they saw) and sign that
header with the cluster secret (``X-Cluster-Forwarded``, assetcdn/shared/cluster.py). The header is
believed only from such a signed call or from a peer in ``control.trusted_proxies`` (a reverse proxy in
front of control), and then read from the right: each configured proxy is skipped and the first other
address is the client. A peer's address alone (loopback included: any local process) earns no trust, and
reading from the left would let any caller write the address it likes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from aiohttp import web

from assetcdn.control.app_keys import SECRETS
from assetcdn.shared.cluster import FORWARDED_HEADER, forwarded_signed

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Proxies = tuple[Network, ...]

# control.trusted_proxies, parsed once (set by assetcdn.control.app.create_app).
TRUSTED_PROXIES: web.AppKey[Proxies] = web.AppKey("trusted_proxies")


def trusted_proxies(raw: object) -> Proxies:
    """control.trusted_proxies: addresses or networks (CIDR), a TOML list or comma-separated text. A bad
    entry stops start-up (ValueError) rather than trusting less, or more, than the operator meant."""
    items: Iterable[object] = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]
    networks = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"control.trusted_proxies: {text!r} is not an IP address or network") from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    text = text.strip().strip("[]")
    if text.count(":") == 1 and "." in text:  # "1.2.3.4:5678"
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def client_ip(request: web.Request, proxies: Proxies = (), cluster_secret: str | None = None) -> str:
    peer_text = request.remote or ""
    peer = _address(peer_text)
    if peer is None:
        return peer_text or "unknown"

    def is_proxy(address: Address) -> bool:
        return any(address in network for network in proxies)

    forwarded = ", ".join(request.headers.getall("X-Forwarded-For", []))
    from_edge = cluster_secret is not None and FORWARDED_HEADER in request.headers and forwarded_signed(
        cluster_secret, forwarded, request.headers[FORWARDED_HEADER])
    if not from_edge and not is_proxy(peer):
        return str(peer)
    hops = [h for h in forwarded.split(",") if h.strip()]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            return str(peer)  # an unparseable hop: stop believing the chain
        if not is_proxy(address):
            return str(address)
    return str(_address(hops[0]) if hops else peer)


def request_ip(request: web.Request) -> str:
    """The client address of ``request``: forwarded by a signed edge call or a configured proxy, else the peer."""
    return client_ip(request, request.app.get(TRUSTED_PROXIES, ()), request.app[SECRETS].cluster_secret)
