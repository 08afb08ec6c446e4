"""Webhook targets (the address checks are assetcdn/shared/address_guard.py's, tested in
tests/shared/test_address_guard.py): private, loopback, link-local, metadata, multicast and reserved targets are refused at
registration and again at delivery time (a name that later resolves elsewhere is refused), and the
connection goes to the address that was checked. Names are answered by a resolver the test controls;
no traffic leaves loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.webhooks.sender import Sender
from assetcdn.shared.address_guard import GuardedResolver, RefusedTarget
from tests.control.expect import expect_error
from tests.control.webhooks.receiver import FakeResolver, Receiver
from tests.support.control import ACCESS, ACCOUNT
from tests.support.webhooks import eventually, make_app, register


@pytest.fixture
async def strict(aiohttp_client, data_dir: Path, resolver: FakeResolver) -> TestClient:  # type: ignore[no-untyped-def]
    """The production setting: no loopback, https only."""
    return await aiohttp_client(make_app(data_dir, resolver, allow_loopback=False))


async def test_registration_refuses_targets_that_resolve_to_private_addresses(strict: TestClient,
                                                                              resolver: FakeResolver) -> None:
    resolver.names.update({"private.example.com": ["10.0.0.5"], "metadata.example.com": ["169.254.169.254"],
                           "mixed.example.com": ["93.184.216.34", "192.168.0.7"],
                           "loop.example.com": ["127.0.0.1"], "public.example.com": ["93.184.216.34"]})
    for url in ("https://private.example.com/hook", "https://metadata.example.com/latest/meta-data",
                "https://mixed.example.com/", "https://loop.example.com/", "https://127.0.0.1/",
                "https://[::1]/", "https://169.254.169.254/", "https://[::ffff:10.0.0.1]/",
                "https://localhost/", "https://metadata.google.internal/", "https://unknown.example.com/"):
        resp = await strict.post("/api/webhooks", json={"url": url, "events": ["asset.created"]}, headers=ACCOUNT)
        await expect_error(resp, 400, "TargetRefused")
    resp = await strict.post("/api/webhooks", json={"url": "http://public.example.com/", "events": ["asset.created"]},
                             headers=ACCOUNT)
    await expect_error(resp, 400, "InvalidUrl")  # https only, without the development setting
    resp = await strict.get("/api/webhooks", headers=ACCOUNT)
    assert (await resp.json())["webhooks"] == []
    # A public target is accepted (nothing is sent to it: no event happens in this test).
    resp = await strict.post("/api/webhooks", json={"url": "https://public.example.com/hook",
                                                    "events": ["asset.created"]}, headers=ACCOUNT)
    assert resp.status == 201


async def test_a_refused_target_name_is_answered_without_the_address_it_resolves_to(strict: TestClient,
                                                                                   resolver: FakeResolver) -> None:
    """Naming the address (`'intranet.example.com' resolves to 10.20.30.40 ...`) let a webhooks:write token map
    what names mean inside control's network, one registration at a time; the answer says what kind it was."""
    resolver.names.update({"intranet.example.com": ["10.20.30.40"], "imds.example.com": ["169.254.169.254"]})
    for host, address, kind in (("intranet.example.com", "10.20.30.40", "private"),
                                ("imds.example.com", "169.254.169.254", "metadata")):
        resp = await strict.post("/api/webhooks", json={"url": f"https://{host}/hook", "events": ["asset.created"]},
                                 headers=ACCOUNT)
        body = await expect_error(resp, 400, "TargetRefused")
        assert address not in body["Message"] and kind in body["Message"], body["Message"]


async def test_a_loopback_target_refused_names_the_setting_that_allows_it(strict: TestClient,
                                                                         resolver: FakeResolver) -> None:
    """A receiver on the operator's own machine is refused outside development; the answer names the setting that
    lets it through (it said only "a development setting"), and a private network's answer names none."""
    resolver.names["hooks.localhost"] = ["127.0.0.1"]
    for url in ("https://127.0.0.1:8443/hook", "https://[::1]:8443/hook", "https://hooks.localhost/hook"):
        resp = await strict.post("/api/webhooks", json={"url": url, "events": ["asset.created"]}, headers=ACCOUNT)
        body = await expect_error(resp, 400, "TargetRefused")
        assert "ASSETCDN_WEBHOOKS_ALLOW_LOOPBACK=true" in body["Message"], body["Message"]
    resp = await strict.post("/api/webhooks", json={"url": "https://10.0.0.1/hook", "events": ["asset.created"]},
                             headers=ACCOUNT)
    assert "ALLOW_LOOPBACK" not in (await expect_error(resp, 400, "TargetRefused"))["Message"]


async def test_plain_http_is_refused_for_non_loopback_even_in_development(control: TestClient,
                                                                          resolver: FakeResolver) -> None:
    """Plain http goes to loopback only, so a public receiver is refused; the answer says to use https (it said
    "Deliveries go only to public addresses" about a public address, which left the caller nothing to change)."""
    resolver.names["public.example.com"] = ["93.184.216.34"]
    for url in ("http://public.example.com/", "http://93.184.216.34/hook"):
        resp = await control.post("/api/webhooks", json={"url": url, "events": ["asset.created"]}, headers=ACCOUNT)
        message = (await expect_error(resp, 400, "TargetRefused"))["Message"]
        assert "https" in message and "public addresses" not in message, message


async def test_a_name_that_resolves_elsewhere_at_delivery_time_is_refused(control: TestClient, zone: str,
                                                                          receiver: Receiver,
                                                                          resolver: FakeResolver) -> None:
    hook = await register(control, receiver, "a", ["asset.created"])  # receiver.test -> 127.0.0.1
    resp = await control.put("/api/storage/akande/v1/logos/one.txt", data=b"1", headers=ACCESS)
    assert resp.status == 201
    await receiver.wait(lambda: len(receiver.delivered("a")) == 1)

    for address in ("10.0.0.5", "169.254.169.254"):  # DNS now answers with a private or metadata address
        resolver.names["receiver.test"] = [address]
        resp = await control.put(f"/api/storage/akande/v1/logos/{address}.txt", data=b"2", headers=ACCESS)
        assert resp.status == 201

        async def refused(address: str = address) -> dict | None:
            resp = await control.get("/api/webhooks/deliveries", params={"id": hook["id"]}, headers=ACCOUNT)
            found = [d for d in (await resp.json())["deliveries"]
                     if d["payload"]["data"]["path"].endswith(f"/{address}.txt") and d["attempts"] >= 1]
            return found[0] if found else None

        delivery = await eventually(refused)
        assert delivery["state"] != "delivered" and delivery["lastStatus"] is None
        # Why, not the address: the delivery log is read with a webhooks:read token.
        assert delivery["lastError"].startswith("refused: 'receiver.test' resolves to an address that may not be "
                                                "reached: ") and address not in delivery["lastError"]
    assert receiver.arrivals["a"] == 1


async def test_the_connection_goes_to_the_address_that_was_checked(receiver: Receiver) -> None:
    """A second lookup answering another address (rebinding) is never used: one lookup per connection."""
    resolver = FakeResolver()
    # 127.0.0.2 is loopback (allowed) but nothing listens there: a second lookup would make the post fail.
    resolver.queued["receiver.test"] = [["127.0.0.1"], ["127.0.0.2"], ["127.0.0.2"]]
    receiver.secrets["a"] = "s"
    sender = Sender(resolver, allow_loopback=True, timeout_s=5)
    try:
        outcome = await sender.post(receiver.url("a"), b"{}", {"X-Webhook-Signature": "sha256=x"})
    finally:
        await sender.close()
    assert resolver.lookups == ["receiver.test"]
    assert receiver.arrivals["a"] == 1 and outcome.status == 401  # reached (the signature was wrong)


async def test_the_guarded_resolver_refuses_before_any_connection() -> None:
    resolver = FakeResolver()
    resolver.names["rebind.example.com"] = ["93.184.216.34", "10.1.2.3"]
    guarded = GuardedResolver(resolver, allow_loopback=True)
    with pytest.raises(RefusedTarget, match="rebind.example.com' resolves to an address that may not be reached: "
                                            "a private address"):
        await guarded.resolve("rebind.example.com", 443)
    resolver.names["rebind.example.com"] = ["93.184.216.34"]
    assert [r["host"] for r in await guarded.resolve("rebind.example.com", 443)] == ["93.184.216.34"]
    http_only_loopback = GuardedResolver(resolver, allow_loopback=True, loopback_only=True)
    with pytest.raises(RefusedTarget, match="loopback"):
        await http_only_loopback.resolve("rebind.example.com", 80)


async def test_plain_http_is_refused_at_delivery_time_once_the_development_setting_is_off(
        receiver: Receiver) -> None:
    sender = Sender(FakeResolver(), allow_loopback=False, timeout_s=5)
    try:
        outcome = await sender.post(receiver.url("a", host="127.0.0.1"), b"{}", {})
    finally:
        await sender.close()
    assert not outcome.ok and outcome.error and outcome.error.startswith("refused: ")
    assert receiver.arrivals["a"] == 0




async def test_a_target_spelling_an_ipv4_address_otherwise_than_as_four_numbers_is_refused_when_registered(
        control: TestClient, zone: str, receiver: Receiver) -> None:
    """`http://2130706433:PORT/`, `127.1`, `0x7f.0.0.1` or `127.0.0.1.` are 127.0.0.1 to every resolver, but the
    delivery client refuses some of them outright (aiohttp: "not a canonical IPv4 address"): registration took
    them (201), and every delivery then failed, down to the dead letters. They are refused when registered (400
    InvalidUrl, naming the address's usual form); that form is taken and gets its deliveries."""
    for host in ("2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1", "127.0.0.1."):
        resp = await control.post("/api/webhooks", headers=ACCOUNT, json={"url": receiver.url("numeric", host=host),
                                                                          "events": ["asset.created"]})
        body = await expect_error(resp, 400, "InvalidUrl")
        assert "127.0.0.1" in body["error"]["message"], host
    resp = await control.post("/api/webhooks", headers=ACCOUNT, json={"url": receiver.url("dotted", host="127.0.0.1"),
                                                                      "events": ["asset.created"]})
    assert resp.status == 201, await resp.text()
    receiver.secrets["dotted"] = (await resp.json())["secret"]
    resp = await control.put("/api/storage/akande/v1/logos/numeric.txt", data=b"1", headers=ACCESS)
    assert resp.status == 201
    await receiver.wait(lambda: len(receiver.delivered("dotted")) == 1)
