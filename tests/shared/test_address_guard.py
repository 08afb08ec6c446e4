"""Which addresses the service may connect to for a caller (assetcdn/shared/address_guard.py): only public
ones, also when wrapped in an IPv6 form; loopback only under a development setting; names of private
networks refused before any lookup."""

from __future__ import annotations

import pytest

from assetcdn.shared.address_guard import address_problem, name_problem

REFUSED = ["10.0.0.5", "172.16.3.4", "192.168.1.1", "127.0.0.1", "127.8.9.10", "::1", "169.254.169.254",
           "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "fe80::1", "fe80::1%eth0", "224.0.0.1",
           "ff02::1", "0.0.0.0", "::", "100.64.0.1", "240.0.0.1", "255.255.255.255", "198.18.0.1",
           "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "2002:a00:1::1", "64:ff9b::a00:1",
           "fc00::1", "2001:db8::1", "not-an-address"]
ALLOWED = ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"]


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
