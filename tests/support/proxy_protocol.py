"""PROXY protocol headers (versions 1 and 2) as a balancer in front of the edge sends them."""

from __future__ import annotations

import ipaddress

from assetcdn.edge.fastpath.proxy_protocol import V2_SIGNATURE

UNTRUSTED = "127.0.0.2"  # a loopback address of its own: not in the trusted list of the tests' settings


def v1(client: str, port: int = 40001) -> bytes:
    family, server = ("TCP4", "127.0.0.1") if ipaddress.ip_address(client).version == 4 else ("TCP6", "::1")
    return f"PROXY {family} {client} {server} {port} 80\r\n".encode()


def v2(client: str | None, port: int = 40002, *, local: bool = False, tlvs: bytes = b"") -> bytes:
    """A version 2 header: PROXY over TCP4 or TCP6 from `client`, or LOCAL (`local`, no addresses)."""
    if local or client is None:
        return V2_SIGNATURE + bytes((0x20, 0x00)) + len(tlvs).to_bytes(2) + tlvs
    source = ipaddress.ip_address(client)
    family = 0x11 if source.version == 4 else 0x21
    server = ipaddress.ip_address("127.0.0.1" if source.version == 4 else "::1")
    body = source.packed + server.packed + port.to_bytes(2) + (80).to_bytes(2) + tlvs
    return V2_SIGNATURE + bytes((0x21, family)) + len(body).to_bytes(2) + body
