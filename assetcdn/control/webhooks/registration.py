"""POST /api/webhooks bodies: ``{url, events, secret?}``, checked before anything is stored.

The URL must be https (http only to loopback, under the development setting), at most 2048
characters, without user name or password or fragment; its host must resolve to allowed addresses
only (assetcdn/shared/address_guard.py), which the sender checks again for every delivery. ``events`` is a non-empty
list of known event types. ``secret``, when given, is 32 to 256 printable ASCII characters; else one
is generated. The URL is parsed as the HTTP client will parse it (yarl), so the host checked is the
host connected to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yarl import URL

from assetcdn.control.webhooks.events import EVENT_TYPES
from assetcdn.shared.address_guard import (
    HTTP_LOOPBACK_ONLY,
    LOOPBACK_REFUSED,
    HostResolver,
    RefusedTarget,
    check_address,
    checked_addresses,
    literal_address,
)
from assetcdn.shared.errors import ApiError, bad_request

MAX_URL_LENGTH = 2048
SECRET_MIN, SECRET_MAX = 32, 256


@dataclass(frozen=True)
class WebhookRequest:
    url: str
    events: tuple[str, ...]
    secret: str | None


def _invalid_url(message: str) -> ApiError:
    return bad_request(message, target="url", code="InvalidUrl")


def parse_target(raw: Any, *, allow_loopback: bool) -> URL:
    """The URL as the client will use it, when its form is acceptable (the addresses are checked apart)."""
    if not isinstance(raw, str) or not raw:
        raise bad_request("'url' is required: the https URL that receives the events.", target="url",
                          code="MissingUrl")
    if len(raw) > MAX_URL_LENGTH:
        raise _invalid_url(f"'url' must be at most {MAX_URL_LENGTH} characters.")
    if not raw.isascii() or not raw.isprintable() or " " in raw:
        raise _invalid_url("'url' must be ASCII without spaces or control characters (percent-encode the rest).")
    try:
        url = URL(raw)
    except ValueError:
        raise _invalid_url("'url' is not a valid URL.") from None
    if url.scheme not in ("https", "http") or not url.raw_host:
        raise _invalid_url("'url' must be an absolute https URL, e.g. https://hooks.example.com/assetcdn.")
    if url.scheme == "http" and not allow_loopback:
        raise _invalid_url("'url' must use https (plain http is allowed only to loopback, with the development "
                           "setting webhooks.allow_loopback).")
    if url.user is not None or url.password is not None:
        raise _invalid_url("'url' must not carry a user name or password; authenticate with the signature.")
    if url.fragment:
        raise _invalid_url("'url' must not have a fragment (#...).")
    try:
        url.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise _invalid_url("'url' has an invalid port.") from None
    # IPv4 spelt otherwise than as four decimal numbers (`127.1`, `2130706433`, a trailing dot) is that address
    # to a resolver, but the delivery client refuses some such spellings outright (aiohttp: "not a canonical IPv4
    # address"): every delivery would fail. Refused here, for the usual form.
    literal = literal_address(url.raw_host)
    if literal is not None and ":" not in literal and literal != url.raw_host:
        raise _invalid_url(f"'url' must write its IPv4 address as four decimal numbers: {literal}, not "
                           f"{url.raw_host}.")
    return url


def parse_webhook_request(body: Any, *, allow_loopback: bool) -> tuple[WebhookRequest, URL]:
    if not isinstance(body, dict):
        raise bad_request('The body must be a JSON object: {"url": "https://...", "events": ["asset.created"]}.',
                          code="InvalidBody")
    url = parse_target(body.get("url"), allow_loopback=allow_loopback)
    events = body.get("events")
    allowed = ", ".join(EVENT_TYPES)
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise bad_request(f"'events' must be a non-empty array of event types: {allowed}.", target="events",
                          code="InvalidEvents")
    unknown = [e for e in events if e not in EVENT_TYPES]
    if unknown:
        raise bad_request(f"Unknown event types: {', '.join(unknown)}. Allowed: {allowed}.", target="events",
                          code="InvalidEvents", invalid=unknown)
    secret = body.get("secret")
    if secret is not None:
        if (not isinstance(secret, str) or not SECRET_MIN <= len(secret) <= SECRET_MAX or not secret.isascii()
                or not secret.isprintable()):
            raise bad_request(f"'secret' must be {SECRET_MIN} to {SECRET_MAX} printable ASCII characters "
                              "(or omit it and one is generated).", target="secret", code="InvalidSecret")
    return WebhookRequest(str(url), tuple(dict.fromkeys(events)), secret), url


async def check_target(url: URL, resolver: HostResolver, *, allow_loopback: bool) -> None:
    """Refuse (400 TargetRefused) a target whose host is, or resolves to, an address deliveries may not reach."""
    host = url.raw_host or ""
    loopback_only = url.scheme == "http"
    literal = literal_address(host)
    try:
        if literal is not None:
            problem = check_address(literal, allow_loopback=allow_loopback, loopback_only=loopback_only)
            if problem:
                raise RefusedTarget(problem)
        else:
            await checked_addresses(resolver, host, allow_loopback=allow_loopback, loopback_only=loopback_only)
    except RefusedTarget as exc:
        hint = (" For a receiver on this machine, in development only, start control with [webhooks] allow_loopback"
                " = true (ASSETCDN_WEBHOOKS_ALLOW_LOOPBACK=true)." if LOOPBACK_REFUSED in exc.message else "")
        # A public address refused to plain http: https is what the caller changes, not the address.
        why = (" Use https for a receiver that is not on this machine." if HTTP_LOOPBACK_ONLY in exc.message
               else " Deliveries go only to public addresses.")
        raise bad_request(f"The webhook URL is refused: {exc.message}.{why}{hint}", target="url",
                          code="TargetRefused") from None
