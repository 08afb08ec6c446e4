"""The cookies this CDN sets itself: the dashboard's session (assetcdn/control/identity/session.py issues them).

Cookies ignore ports, so a browser signed in to the dashboard sends them to the edges as well, on the same host
name: the edges never pass them to a pull zone's origin, nor one an origin sets to a client
(assetcdn/edge/origin_client.py, assetcdn/edge/states/pull.py)."""

from __future__ import annotations

SESSION_COOKIE = "cdn_session"
LOGGED_IN_COOKIE = "cdn_logged_in"
CDN_COOKIES = frozenset((SESSION_COOKIE, LOGGED_IN_COOKIE))


def is_cdn_cookie(pair: str) -> bool:
    """Whether a cookie (`name=value`, from a Cookie field or the start of a Set-Cookie) is one of the CDN's own."""
    return pair.partition("=")[0].strip() in CDN_COOKIES
