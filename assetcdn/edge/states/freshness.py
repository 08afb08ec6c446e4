"""HTTP caching rules (RFC 9111, with RFC 9213's CDN-Cache-Control and RFC 5861's stale extensions) over a
stored response's head: whether a response may be stored, how long it is fresh, how old it is, whether a
request may be answered with it, and how a 304 updates it.

Pure functions of header lists and clock readings (no I/O, no aiohttp), so the serve sequence and the hit
path read one definition. Header names are lower-case; a field's several lines are kept as several
entries, in order. The cache is a shared cache: `s-maxage`, `proxy-revalidate` and `private` apply.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from email.utils import formatdate, parsedate_to_datetime, parsedate_tz

from assetcdn.shared.decimal_fields import bounded_decimal

Headers = Sequence[tuple[str, str]]

# RFC 9111 1.2.2: a delta-seconds too large to represent (or a sum that overflows) is taken as 2^31.
MAX_DELTA = 2**31
# RFC 9110 15.1: the statuses that may be stored with a heuristic lifetime (no explicit freshness).
HEURISTIC_STATUSES = frozenset((200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501))
# Errors about a request's own form, not its URL: a malformed or too long field, a body too large, an expectation
# (RFC 9110 15.5.1, 15.5.14, 15.5.18, RFC 6585 5), and a precondition that failed (15.5.13: the request's own
# conditions; the edge sends its origin none but its revalidations' If-None-Match and If-Modified-Since, which a
# GET's origin answers 304, never 412, when they hold); and about its sender or its moment: a request that took the
# origin too long to receive (408, 15.5.9) or one of too many (429, RFC 6585 4: an origin rate-limiting a client, or
# this edge). Never stored, whatever their freshness: kept under the URL, one client's bad request would have every
# client of the URL answered with its error for the answer's lifetime (an origin that puts Cache-Control on every
# status, say); nor do they replace a stored copy, which stays for stale-if-error. RFC 9111 lets a cache store them;
# it need not.
REQUEST_ERRORS = frozenset((400, 408, 412, 413, 417, 429, 431))
# Final statuses whose meaning this cache knows (RFC 9110 15): the ones `must-understand` may store.
UNDERSTOOD_STATUSES = frozenset((200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501))
HEURISTIC_FRACTION = 0.1         # of the time since Last-Modified (RFC 9111 4.2.2's suggestion)
HEURISTIC_MAX = 24 * 3600.0      # a heuristic lifetime above a day would need a Warning (RFC 7234): capped
# The most request fields a stored response may vary on: every request for its URL, a hit too, finds each of them
# in its own fields to pick its variant, so an origin's Vary of thousands of names would cost every such request
# that many look-ups. Real Vary fields name a handful; a response naming more is passed on, not stored.
MAX_VARY_FIELDS = 32
# The most bytes of caching directives read of one message (its Cache-Control lines, or the fields targeted at
# this cache): a stored response's are read again at every look-up on the application's path, where a head full
# of them (up to about 1 MB) cost each request for the URL some 0.3 s of the worker's event loop. A message with
# more is read as `no-store`: a response is passed on, never stored; a request is answered, its response not kept.
MAX_DIRECTIVE_BYTES = 16 * 1024
TOO_MANY_DIRECTIVES: dict[str, str | None] = {"no-store": None}
# The cache's own reading of a response: a field targeted at it when one is present (RFC 9213's
# CDN-Cache-Control, then the Edge Architecture note's Surrogate-Control), else Cache-Control.
TARGETED_FIELDS = ("cdn-cache-control", "surrogate-control")
# This cache's device token in Surrogate-Control (`max-age=60;assetcdn`), announced to origins in every
# request's Surrogate-Capability field.
SURROGATE_TOKEN = "assetcdn"
SURROGATE_CAPABILITY = f'{SURROGATE_TOKEN}="Surrogate/1.0"'
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE"))
# RFC 5861 4: the origin's answers that count as an error, in which a stale response may answer (stale-if-error).
# Other 5xx (501 Not Implemented, 505 HTTP Version Not Supported, ...) are the origin's answer, passed on.
ERROR_STATUSES = frozenset((500, 502, 503, 504))
# Never stored, and never updated from a 304 (RFC 9111 3.1, 3.2; RFC 9110 7.6.1).
UNSTORED_FIELDS = frozenset(("connection", "keep-alive", "proxy-connection", "te", "transfer-encoding", "upgrade",
                             "proxy-authenticate", "proxy-authentication-info", "proxy-authorization"))
# The fields an origin names a response's purge tags in (space- or comma-separated), and how long their values may
# be together: each tag costs an index row on disk and memory with every copy, so a response naming more (16 KB,
# the bound Cloudflare and Fastly put on these fields) is passed on, not stored. Kept without some of its tags,
# it would outlive a purge of the tags left out.
TAG_FIELDS = ("cache-tag", "surrogate-key")
MAX_TAG_BYTES = 16 * 1024
# What describes the stored bytes themselves stays as stored when a 304 updates the head.
NOT_UPDATED_BY_304 = frozenset(("content-length", "content-encoding", "content-md5", "content-range", "etag"))
# What a qualified `no-cache="..."` or `private="..."` cannot keep out of a stored copy: the stored bytes are coded
# so, and answered without it they would be another content (gzip bytes taken as the text they compress). A directive
# naming it is read as its unqualified form (RFC 9111 5.2.2.4 and 5.2.2.7 note that caches commonly do so): `private`
# is not stored, `no-cache` validated before every reuse, the field kept.
CODING_FIELDS = frozenset(("content-encoding",))


def field_values(headers: Headers, name: str) -> list[str]:
    return [value for field, value in headers if field == name]


def first_value(headers: Headers, name: str) -> str | None:
    for field, value in headers:
        if field == name:
            return value
    return None


def split_list(values: Iterable[str]) -> list[str]:
    """The members of a comma-separated list field, across its lines; commas inside quotes do not split."""
    members: list[str] = []
    for value in values:
        if '"' not in value:  # no quoted string: every comma splits
            members += [member.strip() for member in value.split(",")]
            continue
        current: list[str] = []
        quoted = escaped = False
        for char in value:
            if escaped:
                escaped = False
            elif char == "\\" and quoted:
                escaped = True
            elif char == '"':
                quoted = not quoted
            elif char == "," and not quoted:
                members.append("".join(current).strip())
                current = []
                continue
            current.append(char)
        members.append("".join(current).strip())
    return [member for member in members if member]


# The directives whose argument names fields (RFC 9111 5.2.2.4, 5.2.2.7): each of their occurrences binds the cache.
FIELD_LISTING = frozenset(("no-cache", "private"))


def parse_directives(values: Iterable[str], *, last_wins: bool = False) -> dict[str, str | None]:
    """Cache-Control (or a targeted field) as {directive: argument or None}; names are case-insensitive,
    quoted arguments are unquoted, and the first of a repeated directive wins (RFC 9111 4.2.1), or the last with
    `last_wins` (CDN-Cache-Control, a structured-field dictionary: RFC 9213 2.1, RFC 8941 3.2), but for the
    field-listing `no-cache` and `private` (FIELD_LISTING): every occurrence is obeyed, so an unqualified one
    anywhere makes the directive unqualified, and qualified ones name all their fields together (read first
    wins, `private="X-User", private` was stored for every client, and `private="A", private="B"` kept B)."""
    directives: dict[str, str | None] = {}
    for member in split_list(values):
        name, sep, argument = member.partition("=")
        name = name.strip().lower()
        if not name:
            continue
        value: str | None = None
        if sep:
            value = argument.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if name in FIELD_LISTING and name in directives:
            listed = directives[name]
            directives[name] = f"{listed}, {value}" if listed and value else None
        elif last_wins:
            directives[name] = value
        else:
            directives.setdefault(name, value)
    return directives


def delta_seconds(value: str | None) -> int | None:
    """A directive's delta-seconds (RFC 9111 1.2.2), or None when it has none or it is not digits; at most
    MAX_DELTA, as a larger one counts. One of more digits than MAX_DELTA's is larger whatever they are (and may
    be longer than int() converts: 4,300 digits)."""
    if value is None or not value.isdigit() or not value.isascii():
        return None
    return bounded_decimal(value, MAX_DELTA)


def http_date(value: str | None) -> float | None:
    """An HTTP-date (IMF-fixdate, and the obsolete RFC 850 and asctime forms) as a Unix time; None if invalid."""
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return _leap_second(value)
    if moment.tzinfo is None:  # "-0000": a time in UTC of unknown local zone
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _leap_second(value: str) -> float | None:
    """`http_date` of a date whose second is 60, which RFC 9110 5.6.7 allows (a leap second) and datetime refuses:
    the second before the next minute, which Unix time (no leap seconds) counts as that minute's first; None for
    anything else `http_date` could not read."""
    if ":60" not in value:
        return None
    parts = parsedate_tz(value.strip())
    if parts is None or parts[5] != 60 or not (0 <= parts[3] <= 23 and 0 <= parts[4] <= 59):
        return None
    earlier, found = LEAP_SECOND.subn(r"\1:59", value, count=1)
    moment = http_date(earlier) if found else None
    return None if moment is None else moment + 1.0


LEAP_SECOND = re.compile(r"\b(\d\d?:\d\d):60\b")


_DAY, _MONTH, _TIME = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)", r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)", r"\d\d:\d\d:\d\d"
# RFC 9110 5.6.7's HTTP-date, as written (case-sensitive): IMF-fixdate, rfc850-date and asctime-date, nothing else.
HTTP_DATE = re.compile(rf"{_DAY}, \d\d {_MONTH} \d{{4}} {_TIME} GMT"
                       rf"|(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), \d\d-{_MONTH}-\d\d {_TIME} GMT"
                       rf"|{_DAY} {_MONTH} (?:\d\d| \d) {_TIME} \d{{4}}")


def request_http_date(value: str) -> float | None:
    """A request's HTTP-date (If-Modified-Since) as a Unix time; None when it is not one as RFC 9110 5.6.7 writes it.
    A recipient must ignore a condition whose date is invalid (RFC 9110 13.1.3): `http_date`, lenient as a reader
    of the stored responses' dates is, takes a time without seconds, another zone (`EST`), text after the date or a
    list's first date for one, and a client's such value answered 304 when the stored response is newer."""
    return http_date(value) if HTTP_DATE.fullmatch(value) else None


def listed_fields(argument: str | None) -> frozenset[str]:
    """The field names of a qualified `no-cache="a, b"` or `private="a"` (empty: the unqualified form, also when
    it names a field of CODING_FIELDS)."""
    if not argument:
        return frozenset()
    names = frozenset(name.strip().lower() for name in argument.split(",") if name.strip())
    return frozenset() if names & CODING_FIELDS else names


Directives = tuple[dict[str, str | None], bool]  # `response_directives`: (directives, targeted)


def response_directives(headers: Headers) -> Directives:
    """(directives, targeted): the response's caching directives for this cache. A non-empty targeted field
    (CDN-Cache-Control) replaces Cache-Control and Expires (RFC 9213 2.1)."""
    # One pass over the head: every fill and revalidation reads its directives more than once.
    cache_control: list[str] = []
    targeted: list[tuple[str, str]] = []
    size = 0
    for name, value in headers:
        if name == "cache-control":
            cache_control.append(value)
            size += len(value)
        elif name in TARGETED_FIELDS:
            targeted.append((name, value))
            size += len(value)
    if size > MAX_DIRECTIVE_BYTES:
        return dict(TOO_MANY_DIRECTIVES), False
    for name in TARGETED_FIELDS if targeted else ():
        values = field_values(targeted, name)
        if values:
            # CDN-Cache-Control is a dictionary, whose repeated key has its last value (`max-age=600, max-age=0`
            # is 0); Surrogate-Control is read as Cache-Control is.
            directives = (parse_directives(values, last_wins=True) if name != "surrogate-control"
                          else surrogate_directives(values))
            if directives:
                return directives, True
    return parse_directives(cache_control), False


def surrogate_directives(values: Iterable[str]) -> dict[str, str | None]:
    """Surrogate-Control's caching directives meant for this cache: those with no `;device` target, and those whose
    target is this cache's token. `no-store-remote` is `no-store` here: it binds the surrogates away from the origin,
    those of a CDN (the Edge Architecture note, 2.2.2). `content="ESI/1.0"` asks for processing, not caching (2.2.4):
    a field naming nothing else gives no directives, and Cache-Control is read (it replaced Cache-Control's
    `private` or `max-age` with none at all). `max-age=60+300` is fresh for 60 s, then usable stale for 300 s more
    while the origin fails (2.2.3): `max-age=60` with `stale-if-error=300` (read whole, it was no number: never
    fresh)."""
    kept = []
    for member in split_list(values):
        directive, _, target = member.partition(";")
        if not target or target.strip().lower() == SURROGATE_TOKEN:
            kept.append(directive)
    directives = parse_directives(kept)
    directives.pop("content", None)
    if "no-store-remote" in directives:
        directives.setdefault("no-store", None)
    max_age = directives.get("max-age")
    if max_age is not None and "+" in max_age:
        fresh, _, stale = max_age.partition("+")
        directives["max-age"] = fresh.strip()
        directives.setdefault("stale-if-error", stale.strip())
    return directives


def request_directives(headers: Headers) -> dict[str, str | None]:
    """The request's Cache-Control; a `Pragma: no-cache` counts as `no-cache` when it has none (RFC 9111 5.4)."""
    values = field_values(headers, "cache-control")
    if values:
        return parse_directives(values) if sum(map(len, values)) <= MAX_DIRECTIVE_BYTES else dict(TOO_MANY_DIRECTIVES)
    pragma = field_values(headers, "pragma")
    if not pragma:  # most requests: no directives at all
        return {}
    if sum(map(len, pragma)) > MAX_DIRECTIVE_BYTES:
        return dict(TOO_MANY_DIRECTIVES)
    if any(member.lower() == "no-cache" for member in split_list(pragma)):
        return {"no-cache": None}
    return {}


class NotStored(enum.Enum):
    """Why a response is not stored (for Cache-Status's `detail`, and tests)."""

    METHOD = "method"
    STATUS = "status"
    NO_STORE = "no-store"
    PRIVATE = "private"
    AUTHORIZATION = "authorization"
    SET_COOKIE = "set-cookie"
    VARY_STAR = "vary-star"
    VARY_TOO_MANY = "vary-too-many"
    NO_FRESHNESS = "no-freshness"
    TOO_LARGE = "too-large"
    TOO_MANY_TAGS = "too-many-tags"
    REQUEST_ERROR = "request-error"  # REQUEST_ERRORS


def not_storable(method: str, status: int, request_headers: Headers, response_headers: Headers, *,
                 store_set_cookie: bool = False, parsed: Directives | None = None) -> NotStored | None:
    """None when this shared cache may store the response (RFC 9111 3), else why not. `parsed`: the response's
    `response_directives`, when the caller has them."""
    if method not in ("GET", "HEAD"):
        return NotStored.METHOD
    directives, targeted = response_directives(response_headers) if parsed is None else parsed
    if "must-understand" in directives:
        if status not in UNDERSTOOD_STATUSES:
            return NotStored.STATUS
    elif "no-store" in directives:
        return NotStored.NO_STORE
    if status < 200 or status in (206, 304) or status >= 600:
        return NotStored.STATUS
    if status in REQUEST_ERRORS:
        return NotStored.REQUEST_ERROR
    if "no-store" in request_directives(request_headers):
        return NotStored.NO_STORE
    if "private" in directives and not listed_fields(directives["private"]):
        return NotStored.PRIVATE
    if first_value(request_headers, "authorization") is not None and not (
            "must-revalidate" in directives or "public" in directives or "s-maxage" in directives):
        return NotStored.AUTHORIZATION
    if not store_set_cookie and first_value(response_headers, "set-cookie") is not None:
        return NotStored.SET_COOKIE
    vary = vary_fields(response_headers)
    if vary is None:
        return NotStored.VARY_STAR
    if len(vary) > MAX_VARY_FIELDS:
        return NotStored.VARY_TOO_MANY
    explicit = ("public" in directives or "max-age" in directives or "s-maxage" in directives
                or (not targeted and first_value(response_headers, "expires") is not None))
    if not explicit and status not in HEURISTIC_STATUSES:
        return NotStored.NO_FRESHNESS
    if tag_field_bytes(response_headers) > MAX_TAG_BYTES:
        return NotStored.TOO_MANY_TAGS
    return None


def tag_field_bytes(headers: Headers) -> int:
    """How long the values of a message's purge tag fields (TAG_FIELDS) are together."""
    tag_bytes = 0  # a loop, not sum() over a generator: this runs on every fill
    for name, value in headers:
        if name in TAG_FIELDS:
            tag_bytes += len(value)
    return tag_bytes


def qualified_fields(directives: Mapping[str, str | None]) -> frozenset[str]:
    """The field names a response's qualified `private="..."` and `no-cache="..."` name (RFC 9111 5.2.2.4, 5.2.2.7):
    kept out of what a shared cache stores, and so out of what it answers later requests with."""
    return listed_fields(directives.get("private")) | listed_fields(directives.get("no-cache"))


def stored_headers(response_headers: Headers, parsed: Directives | None = None) -> tuple[tuple[str, str], ...]:
    """The fields kept with a stored response: connection-specific ones and those named by a qualified
    `private` or `no-cache` are left out (RFC 9111 3.1, 5.2.2.4, 5.2.2.7). `parsed`: as `not_storable`'s."""
    named = qualified_fields((response_directives(response_headers) if parsed is None else parsed)[0])
    connection = field_values(response_headers, "connection")
    if connection:
        named |= {member.lower() for member in split_list(connection)}
    dropped = UNSTORED_FIELDS if named <= UNSTORED_FIELDS else UNSTORED_FIELDS | named
    return tuple([field for field in response_headers if field[0] not in dropped])


def vary_fields(headers: Headers) -> tuple[str, ...] | None:
    """The request fields a response varies on, lower-case and sorted; None for `Vary: *` (never reused)."""
    values = field_values(headers, "vary")
    if not values:
        return ()
    names = {member.lower() for member in split_list(values)}
    if "*" in names:
        return None
    return tuple(sorted(names))


# The request fields defined as one value, not a comma-separated list (RFC 9110 5.6.1, 5.3), whose values a Vary key
# compares as sent: `Tool, Kit/1` and `Tool,Kit/1` are two User-Agents an origin may tell apart, and a Cookie's or
# Authorization's commas are no list's. Any other field is compared as a list (RFC 9111 4.1): the same members,
# spaced otherwise or sent on several lines (which RFC 9110 5.3 allows a list field only), are the same request.
SINGLE_VALUE_FIELDS = frozenset((
    "authorization", "content-length", "content-type", "cookie", "date", "from", "host", "if-modified-since",
    "if-range", "if-unmodified-since", "max-forwards", "origin", "proxy-authorization", "range", "referer",
    "user-agent"))


def secondary_key(fields: Sequence[str], request_headers: Headers) -> str:
    """The values a request has for `fields`, one line each (RFC 9111 4.1): a list field's lines combined and the
    whitespace around its commas dropped, a field of one value (SINGLE_VALUE_FIELDS) as sent, its lines apart; an
    absent field differs from an empty one. `request_headers`' names are lower-case with `_` read as `-`
    (`Varied.fields` in assetcdn/edge/states/pull.py), and so is a name of `fields` when it is looked up (the key
    keeps it as the origin wrote it)."""
    parts = []
    for name in fields:
        lowered = name.replace("_", "-") if "_" in name else name
        values = field_values(request_headers, lowered)
        if not values:
            parts.append(name + "\x00")
        elif lowered in SINGLE_VALUE_FIELDS:  # a field value holds no CR (RFC 9110 5.5): its lines stay apart
            parts.append(name + ":" + "\r".join(values))
        else:
            parts.append(name + ":" + ",".join(member for member in split_list(values)))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Freshness:
    """What the cache needs of a stored response's head to serve it, computed once when it is stored (or
    updated by a 304): RFC 9111 4.2's lifetime and initial age, and the directives that limit reuse."""

    lifetime: float            # freshness lifetime, seconds (4.2.1)
    initial_age: float         # corrected_initial_age (4.2.3)
    response_time: float       # when the response was received (this cache's clock, Unix time)
    no_cache: bool             # unqualified no-cache: validated before every reuse
    must_revalidate: bool      # must-revalidate, proxy-revalidate or s-maxage: never served stale
    stale_while_revalidate: float
    stale_if_error: float

    def age(self, now: float) -> float:
        """current_age (4.2.3): what the Age header says."""
        return self.initial_age + max(0.0, now - self.response_time)

    def fresh_until(self) -> float:
        """The moment the response becomes stale."""
        return self.response_time + self.lifetime - self.initial_age

    def staleness(self, now: float) -> float:
        """Seconds past the freshness lifetime (negative while fresh)."""
        return self.age(now) - self.lifetime


def freshness_lifetime(status: int, headers: Headers, response_time: float, *,
                       heuristic: bool = True) -> float:
    """RFC 9111 4.2.1 for a shared cache: s-maxage, max-age, Expires minus Date, else a heuristic from
    Last-Modified for the statuses that allow one. An invalid max-age or Expires means already stale."""
    directives, targeted = response_directives(headers)
    for name in ("s-maxage", "max-age"):
        if name in directives:
            seconds = delta_seconds(directives[name])
            return 0.0 if seconds is None else float(seconds)
    if not targeted:
        expires_values = field_values(headers, "expires")
        if expires_values:
            expires = http_date(expires_values[0])
            if expires is None:
                return 0.0
            date = http_date(first_value(headers, "date"))
            return max(0.0, expires - (response_time if date is None else date))
    if heuristic and status in HEURISTIC_STATUSES and "no-cache" not in directives:
        last_modified = http_date(first_value(headers, "last-modified"))
        if last_modified is not None:
            date = http_date(first_value(headers, "date"))
            since = (response_time if date is None else date) - last_modified
            if since > 0:
                return min(since * HEURISTIC_FRACTION, HEURISTIC_MAX)
    return 0.0


def age_value(headers: Headers) -> int:
    """The Age a response arrived with: one field line holding one non-negative integer. Anything else
    (a list, a parameter, a sign, a fraction, two lines) cannot be trusted, so the response counts as
    having been cached for as long as an age can be (RFC 9111 5.1: the cache must not treat it as fresh)."""
    values = field_values(headers, "age")
    if not values:
        return 0
    seconds = delta_seconds(values[0].strip()) if len(values) == 1 else None
    return MAX_DELTA if seconds is None else seconds


def corrected_initial_age(headers: Headers, request_time: float, response_time: float) -> float:
    """RFC 9111 4.2.3: the age a response had when it arrived, from its Date and Age."""
    date = http_date(first_value(headers, "date"))
    apparent_age = max(0.0, response_time - date) if date is not None else 0.0
    age_value_ = age_value(headers)
    response_delay = max(0.0, response_time - request_time)
    return float(min(max(apparent_age, age_value_ + response_delay), MAX_DELTA))


def freshness(status: int, headers: Headers, request_time: float, response_time: float) -> Freshness:
    directives, _ = response_directives(headers)
    no_cache = "no-cache" in directives and not listed_fields(directives["no-cache"])
    return Freshness(
        lifetime=freshness_lifetime(status, headers, response_time),
        initial_age=corrected_initial_age(headers, request_time, response_time),
        response_time=response_time,
        no_cache=no_cache,
        must_revalidate=("must-revalidate" in directives or "proxy-revalidate" in directives
                         or "s-maxage" in directives),
        stale_while_revalidate=float(delta_seconds(directives.get("stale-while-revalidate")) or 0),
        stale_if_error=float(delta_seconds(directives.get("stale-if-error")) or 0),
    )


class Reuse(enum.Enum):
    """How a stored response may answer a request (RFC 9111 4)."""

    FRESH = "fresh"                    # as it is
    STALE_REVALIDATING = "swr"         # as it is, stale, while it is revalidated in the background (RFC 5861)
    VALIDATE = "validate"              # only after the origin confirmed it (a conditional request)


def reuse(stored: Freshness, request: Mapping[str, str | None], now: float, *,
          stale_while_revalidate: bool = True) -> Reuse:
    """Whether a stored response may answer a request with these Cache-Control directives (`request_directives`)."""
    if stored.no_cache or "no-cache" in request:
        return Reuse.VALIDATE
    age = stored.age(now)
    if "max-age" in request:
        limit = delta_seconds(request["max-age"])
        if limit is None or age > limit:
            return Reuse.VALIDATE
    remaining = stored.lifetime - age
    if "min-fresh" in request:
        wanted = delta_seconds(request["min-fresh"])
        if wanted is None or remaining < wanted:
            return Reuse.VALIDATE
    if remaining > 0:
        return Reuse.FRESH
    if stored.must_revalidate:
        return Reuse.VALIDATE
    if "max-stale" in request:
        allowed = request["max-stale"]
        stale_for = delta_seconds(allowed)
        if allowed is None or (stale_for is not None and -remaining <= stale_for):
            return Reuse.FRESH
    if stale_while_revalidate and -remaining <= stored.stale_while_revalidate:
        return Reuse.STALE_REVALIDATING
    return Reuse.VALIDATE


def fresh_for_plain_requests_until(stored: Freshness) -> float:
    """The moment from which a request without directives of its own is no longer answered with the stored
    response as it is: ``reuse(stored, {}, now) is Reuse.FRESH`` exactly while ``now`` is before it (the hit
    path compares one number per request instead of calling `reuse`)."""
    if stored.no_cache or stored.lifetime <= stored.initial_age:
        return -math.inf
    return stored.fresh_until()


def usable_on_error(stored: Freshness, request: Mapping[str, str | None], now: float) -> bool:
    """Whether a stale response may answer when the origin cannot be reached or answers 500, 502, 503 or 504
    (`ERROR_STATUSES`; RFC 5861 4; RFC 9111 4.2.4: never for must-revalidate). The request's own stale-if-error
    may widen or narrow it."""
    if stored.must_revalidate or stored.no_cache or "no-cache" in request:
        return False
    bound = stored.stale_if_error
    if "stale-if-error" in request:
        asked = delta_seconds(request["stale-if-error"])
        if asked is not None:
            bound = float(asked)
    return stored.staleness(now) <= bound


def validators(headers: Headers) -> list[tuple[str, str]]:
    """The conditional request fields that revalidate a stored response (RFC 9111 4.3.1)."""
    conditions = []
    etag = first_value(headers, "etag")
    if etag is not None:
        conditions.append(("if-none-match", etag))
    last_modified = first_value(headers, "last-modified")
    if last_modified is not None:
        conditions.append(("if-modified-since", last_modified))
    return conditions


def _opaque(tag: str) -> str:
    tag = tag.strip()
    return tag[2:] if tag.startswith("W/") else tag


def validated_by(stored_headers_: Headers, not_modified_headers: Headers) -> bool:
    """Whether a 304 is about this stored response (RFC 9111 4.3.4): its ETag, when it has one, matches; without
    one, when the stored response has no ETag either (so it was asked with If-Modified-Since alone), its
    Last-Modified, when it has one, is the stored one. An older file the origin went back to meets the
    If-Modified-Since of the newer one stored, and its 304 names its own Last-Modified."""
    etag = first_value(not_modified_headers, "etag")
    stored_etag = first_value(stored_headers_, "etag")
    if etag is None:
        if stored_etag is not None:
            return True
        modified, stored_modified = (first_value(not_modified_headers, "last-modified"),
                                     first_value(stored_headers_, "last-modified"))
        if modified is None or stored_modified is None or modified.strip() == stored_modified.strip():
            return True
        moment = http_date(modified)  # the same moment written another way (a date form RFC 9110 5.6.7 allows)
        return moment is not None and moment == http_date(stored_modified)
    return stored_etag is not None and _opaque(stored_etag) == _opaque(etag)


def updated_headers(stored: Headers, not_modified: Headers, received: float | None = None) -> tuple[tuple[str, str], ...]:
    """The stored fields updated by a 304 (RFC 9111 3.2): each field it carries replaces the stored one,
    except the ones that describe the stored content, which stays as it was. A 304 without a Date is dated
    `received`, when it arrived (RFC 9110 6.6.1): the stored Date, the first response's, would count the time
    since then in the refreshed response's age (RFC 9111 4.2.3), leaving it as old as before it was confirmed.
    The fields the updated head's own qualified `no-cache="..."` or `private="..."` names are left out, the stored
    ones too (RFC 9111 5.2.2.4, 5.2.2.7): kept from the first response, they would go out on every hit after it.
    The stored Age goes whether or not the 304 has one: it is the first exchange's, and beside the 304's clocks it
    would count that age again in the confirmed response's (4.2.3's age_value; the 304's own Age replaces it)."""
    incoming = [(name, value) for name, value in stored_headers(not_modified) if name not in NOT_UPDATED_BY_304]
    if received is not None and first_value(not_modified, "date") is None:
        incoming.append(("date", formatdate(received, usegmt=True)))
    replaced = {name for name, _ in incoming} | {"age"}
    return stored_headers([(name, value) for name, value in stored if name not in replaced] + incoming)


def withheld_fields(head: Headers, not_modified: Headers) -> tuple[tuple[str, str], ...]:
    """The fields of a 304 that the updated head's (`updated_headers`) qualified `no-cache="..."` or `private="..."`
    keeps out of the stored copy: they are still the answer of the request the 304 came for (RFC 9111 5.2.2.4 and
    5.2.2.7 bind the stored copy and later requests, not this one), as a first response's are its own client's."""
    named = qualified_fields(response_directives(head)[0])
    if not named:
        return ()
    connection = field_values(not_modified, "connection")
    skipped = UNSTORED_FIELDS | NOT_UPDATED_BY_304 | {member.lower() for member in split_list(connection)}
    return tuple((name, value) for name, value in not_modified if name in named and name not in skipped)


def dated(headers: Headers, received: float) -> Headers:
    """`headers`, dated `received` (when the response arrived) when it came without a Date: a recipient with a
    clock that caches it appends one (RFC 9110 6.6.1). A copy kept without it would be answered dated when it is
    answered, beside an Age that counts the time since it arrived: a cache behind this one (another edge asking
    this one as its shield, a browser) would count that time twice against its Expires or heuristic lifetime."""
    if first_value(headers, "date") is not None:
        return headers
    return (*headers, ("date", formatdate(received, usegmt=True)))


def invalidates(method: str, status: int) -> bool:
    """An unsafe request whose answer is not an error invalidates what it names (RFC 9111 4.4)."""
    return method not in SAFE_METHODS and 200 <= status < 400
