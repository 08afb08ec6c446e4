"""The cookies this CDN sets itself: the dashboard's session (assetcdn/control/identity/session.py issues them).

Cookies ignore ports, so a browser signed in to the dashboard sends them to the edges as well, on the same host
name: the edges never pass them to a pull zone's origin, nor one an origin sets to a client
(assetcdn/edge/origin_client.py, assetcdn/edge/states/pull.py). Nor, on the CDN's own hosts, an origin's cookie
set for other hosts than the request's (`set_for`)."""

from __future__ import annotations

SESSION_COOKIE = "cdn_session"
LOGGED_IN_COOKIE = "cdn_logged_in"
CDN_COOKIES = frozenset((SESSION_COOKIE, LOGGED_IN_COOKIE))


def is_cdn_cookie(pair: str) -> bool:
    """Whether a cookie (`name=value`, from a Cookie field or the start of a Set-Cookie) is one of the CDN's own."""
    return pair.partition("=")[0].strip() in CDN_COOKIES


def cookie_domain(set_cookie: str) -> str | None:
    """The domain a Set-Cookie field's value sets its cookie for, as a browser reads its Domain attribute (RFC 6265
    5.2.3, 5.3): the last one with a value (attribute names without case, spaces and tabs around names and values
    trimmed), without one leading dot, in lower case; None for a host-only cookie (no Domain with a value). "" for
    `Domain=.`, which names no host."""
    if ";" not in set_cookie:
        return None
    domain = None
    for attribute in set_cookie.split(";")[1:]:  # the name-value pair is what comes before the first `;`
        name, _, value = attribute.partition("=")
        if name.strip(" \t").lower() == "domain":
            value = value.strip(" \t")
            if value:  # an empty value: the attribute ignored
                domain = value
    return None if domain is None else domain.removeprefix(".").lower()


def set_for(set_cookie: str, host: str) -> bool:
    """Whether a Set-Cookie field's value sets its cookie for `host` (and the hosts below it) and no other: a
    host-only cookie, or one whose Domain names `host` (`cookie_domain`). `host` "": host-only cookies alone."""
    domain = cookie_domain(set_cookie)
    return domain is None or (domain == host and domain != "")
