"""The cookies this CDN sets itself: the dashboard's session (assetcdn/control/identity/session.py issues them).

Cookies ignore ports, so a browser signed in to the dashboard sends them to the edges as well, on the same host
name: the edges never pass them to a pull zone's origin, nor one an origin sets to a client
(assetcdn/edge/origin_client.py, assetcdn/edge/states/pull.py). Nor, on the CDN's own hosts, an origin's cookie
set for other hosts than the request's (`set_for`), nor on a zone's custom domain one set for the base domain or a
domain above it (`domains_holding`), every zone's tenant host being below those (`may_set`)."""

from __future__ import annotations

from typing import TypeAlias

SESSION_COOKIE = "cdn_session"
LOGGED_IN_COOKIE = "cdn_logged_in"
CDN_COOKIES = frozenset((SESSION_COOKIE, LOGGED_IN_COOKIE))
# What a pull zone's origin may name in a cookie's Domain on a request's host (assetcdn/edge/site_config.py
# `EdgeConfig.cookie_host`), worked out once per host, not per cookie: a str, that host alone ("" none, host-only
# cookies alone); a frozenset, any domain but those (`domains_holding` the base domain, on a zone's custom domain);
# None, any.
CookieHost: TypeAlias = str | frozenset[str] | None


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


def domains_holding(host: str) -> frozenset[str]:
    """`host` and every domain it is below (`cdn.example.com`: it, `example.com` and `com`): those whose cookies
    browsers send to every host below `host`; an empty set for ""."""
    labels = host.split(".") if host else []
    return frozenset(".".join(labels[start:]) for start in range(len(labels)))


def may_set(set_cookie: str, cookie_host: CookieHost) -> bool:
    """Whether a Set-Cookie field's value sets its cookie only where `cookie_host` allows (`CookieHost`): for that
    host (`set_for`), for none of a set of domains (host-only, or its `cookie_domain` not among them), or anywhere."""
    if cookie_host is None:
        return True
    if isinstance(cookie_host, str):
        return set_for(set_cookie, cookie_host)
    domain = cookie_domain(set_cookie)
    return domain is None or domain not in cookie_host
