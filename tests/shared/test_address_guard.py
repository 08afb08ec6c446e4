"""Which addresses the service may connect to for a caller (assetcdn/shared/address_guard.py): only public
ones, also when wrapped in an IPv6 form; loopback only under a development setting; names of private
networks refused before any lookup."""

from __future__ import annotations

import pytest

from assetcdn.shared.address_guard import address_problem, literal_address, name_problem

REFUSED = ["10.0.0.5", "172.16.3.4", "192.168.1.1", "127.0.0.1", "127.8.9.10", "::1", "169.254.169.254",
           "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "fe80::1", "fe80::1%eth0", "224.0.0.1",
           "ff02::1", "0.0.0.0", "::", "100.64.0.1", "240.0.0.1", "255.255.255.255", "198.18.0.1",
           "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "2002:a00:1::1", "64:ff9b::a00:1",
           "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b::6440:1", "64:ff9b:1::808:808",
           "fc00::1", "2001:db8::1", "not-an-address",
           # Not globally routable, though Python 3.11's `is_global` says so: IPv6 site-local, 3fff::/20 and
           # ORCHIDv2; and Azure's metadata and DNS address.
           "fec0::1", "fec0:0:0:ffff::1", "3fff::1", "2001:20::1", "168.63.129.16"]
# NAT64's well-known prefix (RFC 6052) carries the IPv4 address a DNS64 resolver found for an IPv4-only origin:
# judged by that address, as an edge on an IPv6-only network reaches public IPv4 hosts through it. Its local-use
# prefix 64:ff9b:1::/48 (RFC 8215) stays refused: where it carries the IPv4 address is each network's choice.
ALLOWED = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "64:ff9b::5db8:d822"]


@pytest.mark.parametrize("address", REFUSED)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert address_problem(address, allow_loopback=False)


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_problem(address, allow_loopback=False) is None


def test_the_development_setting_allows_loopback_only() -> None:
    assert address_problem("127.0.0.1", allow_loopback=True) is None
    assert address_problem("::1", allow_loopback=True) is None
    for address in ("10.0.0.5", "169.254.169.254", "192.168.1.1", "0.0.0.0"):
        assert address_problem(address, allow_loopback=True)


def test_names_of_private_networks_are_refused_before_any_lookup() -> None:
    for name in ("localhost", "api.localhost", "metadata.google.internal", "db.internal", "printer.local",
                 "metadata", "intranet"):
        assert name_problem(name, allow_loopback=False), name
    assert name_problem("localhost", allow_loopback=True) is None
    assert name_problem("hooks.example.com", allow_loopback=False) is None


@pytest.mark.parametrize(("host", "address"), [
    ("127.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("2130706433", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"), ("10.1", "10.0.0.1"), ("0300.0250.0.1", "192.168.0.1"),
    ("169.254.43518", "169.254.169.254"), ("[::1]", "::1"), ("93.184.216.34", "93.184.216.34"),
    ("example.com", None), ("1e100.net", None), ("3com.4u", None), ("999.1.1.1", None)])
def test_every_spelling_a_resolver_reads_as_an_ipv4_address_is_that_literal(host: str, address: str | None) -> None:
    """Checked as a name, `127.1` would pass for a host name (it has a dot), yet every resolver reads it as
    127.0.0.1: it is that address, checked as one."""
    assert literal_address(host) == address
