"""Conditional request fields read alike by the edge's deliveries (assetcdn/edge/states/deliver.py) and control's
storage API (assetcdn/control/routes/storage.py): If-None-Match, If-Match and a field sent on several lines."""

from __future__ import annotations

import re

from aiohttp import web

# The members of an If-None-Match list: entity-tags, whose opaque part may hold a comma (RFC 9110 8.8.3), or a bare
# token (`*`, or a tag a client sent unquoted, compared as if quoted).
ENTITY_TAG = re.compile(r'(?:W/)?("[^"]*"|[^\s,"]+)')


def etag_matches(if_none_match: str, etag: str | None) -> bool:
    """Whether If-None-Match names ``etag``, the one the answer carries (None: it carries none). One member is
    compared as it is (the hit path's conditional requests: no regular expression); a list is read member by member
    (`ENTITY_TAG`: an entity-tag may hold a comma). The comparison is weak (RFC 9110 13.1.2): neither side's `W/`
    counts, the answer's (a `_headers` rule's `ETag: W/"v5"`) as little as the request's."""
    if etag is not None and if_none_match == etag:  # the commonest: the very ETag sent back
        return True
    value = if_none_match.strip()
    if value == "*":
        return True
    if "," not in value:  # one member, or malformed (`w/"x"`): equal to the ETag as given, or weakly equal
        return etag is not None and (value == etag or
                                     value.removeprefix("W/").strip('"') == etag.removeprefix("W/").strip('"'))
    candidates = ENTITY_TAG.findall(value)
    if "*" in candidates:  # beside tags (not valid, but several lines joined may give it): any version
        return True
    if etag is None:
        return False
    if value == etag:  # the very field value it was given, a malformed one too
        return True
    bare = etag.removeprefix("W/").strip('"')
    return any(candidate.strip('"') == bare for candidate in candidates)


def joined_field(request: web.BaseRequest, name: str) -> str | None:
    """A request field's value, its several lines joined as one list (RFC 9110 5.3); None when it has none. A
    field that is no list (Range, If-Range, If-Modified-Since) then reads as the invalid value several lines of it
    are: the range ignored, the If-Range not holding, the date ignored."""
    lines = request.headers.getall(name, None)
    return None if lines is None else ", ".join(lines)


def if_match_holds(if_match: str, etag: str | None) -> bool:
    """Whether If-Match names ``etag``, the ETag the answer carries, by strong comparison (RFC 9110 13.1.1): ``*``
    holds for any file served, a weak ETag never does."""
    candidates = [candidate.strip() for candidate in if_match.split(",")]
    if "*" in candidates:  # alone, or beside tags (not valid, but several lines joined may give it): holds
        return True
    if etag is None or etag.startswith("W/"):
        return False
    return etag in candidates
