"""Edge rules: the ``_headers`` and ``_redirects`` files, parsed once and matched on the hot path.

Syntax follows Cloudflare Pages (the platform the original service ran on):

``_headers``: a URL pattern at column 0 (``/path`` or ``https://host/path``; the port and scheme of a
request are ignored), then indented ``Name: value`` lines (attach) and ``! Name`` lines (detach).
``#`` starts a comment line. A pattern holds at most one ``*`` splat (any characters, ``/`` included)
and any number of ``:name`` placeholders (one path segment; one host label in a host). Values may use
``:splat`` and the placeholders. Every matching block applies, in file order: the first value for a
name replaces the response's own header, later values join it with ", "; a detach drops what earlier
blocks set and the response's own header.

``_redirects``: ``<from> <to> [status]`` per line, ``#`` comment lines. Status 301, 302, 303, 307,
308, or 200 (an internal rewrite to a path on this CDN; proxying to another host is refused). The
default status is 302, as on Cloudflare Pages. The first matching line wins. ``from`` is a path
(``*`` splat, ``:name`` placeholders); the request's query string is ignored when matching and is
appended to the location unless the destination carries its own query string. What a placeholder
takes from the request is percent-encoded where a URL may not hold it (``\\``, controls, ``#``...), and
it may not move the location to another host: a path destination must stay a path on this host (a
location starting ``//`` is scheme-relative), and a host named with placeholders must be a host name.
A request the line cannot map so is 400 ``InvalidPath`` (:func:`RedirectRules.match`).

Headers that decide how a browser runs a file (:data:`BROWSER_RUN_HEADERS`: ``Content-Type``,
``Content-Security-Policy``, ``X-Content-Type-Options``, ``Content-Disposition``), ``Set-Cookie``
(cookies ignore ports, so one set here would reach the dashboard's origin) and the headers that frame
or decode the message (:data:`FRAMING_HEADERS`: ``Content-Length``, ``Transfer-Encoding``,
``Connection``, ``Content-Encoding``...) may not be set or detached:
the sandbox of stored files (assetcdn/shared/content_security.py) is decided on the type we serve, and a
rule could otherwise make a browser run what that decision called passive.

Limits are Cloudflare's: ``_headers`` 100 rules and 2,000 characters per line; ``_redirects`` 2,000
static plus 100 dynamic rules and 1,000 characters per line. The caller checks the 100,000-character
content limit of POST /api/core/rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from assetcdn.shared.errors import ApiError

DEFAULT_REDIRECT_STATUS = 302
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
REWRITE_STATUS = 200
MAX_HEADER_RULES = 100
MAX_HEADER_LINE = 2000
MAX_STATIC_REDIRECTS = 2000
MAX_DYNAMIC_REDIRECTS = 100
MAX_REDIRECT_LINE = 1000
RULE_FILES = ("_headers", "_redirects")

_PLACEHOLDER = re.compile(r":([A-Za-z]\w*)")
# Validators are used with fullmatch ('$' would also accept a trailing newline).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST_PATTERN = re.compile(r"[A-Za-z0-9.*:_-]+")
_STATUS = re.compile(r"[0-9]{3}")  # ASCII digits: str.isdigit() accepts '²', which int() refuses
# Lower-case names a `_headers` rule may not touch (see the module's docstring).
BROWSER_RUN_HEADERS = frozenset({"content-type", "content-security-policy", "x-content-type-options",
                                 "content-disposition", "set-cookie"})
# How the message is framed and decoded: a second Content-Length or a Transfer-Encoding beside the real
# one makes a kept-alive client read a stored body's tail as the next response (one the sandbox never saw).
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
                             "trailer", "te", "proxy-connection", "content-encoding", "content-range"})
RESERVED_HEADERS = BROWSER_RUN_HEADERS | FRAMING_HEADERS


class RulesSyntaxError(ValueError):
    """A rule file that cannot be used; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


# -- patterns -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Pattern:
    regex: re.Pattern[str]
    names: frozenset[str]           # placeholder names, "splat" included when the pattern has one
    static: bool
    prefix: str                     # literal text before the first '*' or placeholder: a cheap pre-check


def _compile_part(text: str, segment: str, line: int, names: set[str], splats: list[int]) -> str:
    """Regex source for one part (host or path) of a URL pattern; ``segment`` is what a placeholder may hold."""
    out: list[str] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char == "*":
            splats.append(pos)
            if len(splats) > 1:
                raise RulesSyntaxError(line, "A URL pattern may hold only one '*' splat.")
            out.append("(?P<splat>(?s:.*))")  # any character, a decoded newline too: '/*' means every path
            pos += 1
            continue
        if char == ":":
            found = _PLACEHOLDER.match(text, pos)
            if found:
                name = found.group(1)
                if name == "splat":
                    raise RulesSyntaxError(line, "':splat' is reserved for the value of '*'; use '*' in the pattern.")
                if name in names:
                    raise RulesSyntaxError(line, f"The placeholder ':{name}' is used twice in one pattern.")
                names.add(name)
                out.append(f"(?P<{name}>{segment})")
                pos = found.end()
                continue
        out.append(re.escape(char))
        pos += 1
    return "".join(out)


def _compile_path(path: str, line: int) -> _Pattern:
    names: set[str] = set()
    splats: list[int] = []
    source = _compile_part(path, "[^/]+", line, names, splats)
    if splats:
        names.add("splat")
    return _Pattern(re.compile(source + r"\Z"), frozenset(names), not names, _literal_prefix(path))


def _literal_prefix(path: str) -> str:
    found = re.search(r"\*|:[A-Za-z]", path)
    return path[:found.start()] if found else path


def _substitute(template: str, groups: dict[str, str]) -> str:
    """``template`` with its placeholders filled from the (decoded) request path; control characters a
    path may carry percent-encoded (``%0d%0a`` must never reach a header value or a Location)."""
    return _PLACEHOLDER.sub(lambda m: _no_controls(groups.get(m.group(1), m.group(0))), template)


def _no_controls(text: str) -> str:
    return _ANY_CONTROL.sub(lambda m: f"%{ord(m.group()):02X}", text)


def _substitute_url(template: str, groups: dict[str, str]) -> str:
    """``template`` with its placeholders filled, each value escaped so it stays inside the URL part it lands in."""
    return _PLACEHOLDER.sub(lambda m: _url_escape(groups[m.group(1)]) if m.group(1) in groups else m.group(0),
                            template)


# What a placeholder's value may put into a Location as is: unreserved and sub-delimiters, ':', '@', '/'
# and a complete percent-escape. '\' (a '/' to browsers), '?', '#', controls and the rest are escaped.
_NOT_URL_SAFE = re.compile(r"[^A-Za-z0-9._~!$&'()*+,;=:@/%-]|%(?![0-9A-Fa-f]{2})")
_NOT_URL_QUERY_SAFE = re.compile(r"[^A-Za-z0-9._~!$&'()*+,;=:@/?%-]|%(?![0-9A-Fa-f]{2})")


def _url_escape(text: str, unsafe: re.Pattern[str] = _NOT_URL_SAFE) -> str:
    return unsafe.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass")), text)


# host[:port] of a built location: a name (IDN letters allowed, as an operator may write them) or an IP literal.
# No userinfo, '\', '%' or second ':', so a value filled into the host cannot name some other host.
_LOCATION_AUTHORITY = re.compile(r"(?:[\w-]+(?:\.[\w-]+)*\.?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
# Where a destination names a host: 'http(s)://' or a scheme-relative '//' (or '/\', which browsers read so).
_HOST_PREFIX = re.compile(r"(?:https?:)?[/\\]{2}")
_AUTHORITY_END = re.compile(r"[/\\?#]")


def _split_destination(destination: str) -> tuple[str, str, str]:
    """(scheme and '//', host[:port], the rest) of a destination naming a host; ('', '', destination) for a path."""
    found = _HOST_PREFIX.match(destination)
    if found is None:
        return "", "", destination
    end = _AUTHORITY_END.search(destination, found.end())
    split = end.start() if end else len(destination)
    return found.group(), destination[found.end():split], destination[split:]


def _uses_placeholders(template: str, names: frozenset[str]) -> bool:
    return any(m.group(1) in names for m in _PLACEHOLDER.finditer(template))


def _normalise_path(path: str) -> tuple[str, str]:
    """(path with a leading slash, query string without '?')."""
    path, _, query = path.partition("?")
    if not path.startswith("/"):
        path = "/" + path
    return path, query


# -- _headers -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HeaderChanges:
    """What the rules do to one response.

    Apply ``remove`` first (delete those headers, lower-case names), then ``set`` (replace each
    header by the given value; names keep the case of the first rule that set them).
    """

    set: dict[str, str] = field(default_factory=dict)
    remove: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.set or self.remove)


NO_HEADER_CHANGES = HeaderChanges()


@dataclass(frozen=True, slots=True)
class HeaderRule:
    line: int
    pattern: str
    host: re.Pattern[str] | None      # None: any host
    path: re.Pattern[str]
    prefix: str
    names: frozenset[str]
    # In file order: (lower-case name, display name, value or None for a detach, value has placeholders)
    actions: tuple[tuple[str, str, str | None, bool], ...]

    def match(self, path: str, host: str | None) -> dict[str, str] | None:
        if not path.startswith(self.prefix):
            return None
        host_match: re.Match[str] | None = None
        if self.host is not None:
            if host is None:
                return None
            host_match = self.host.match(host.split(":", 1)[0])
            if host_match is None:
                return None
        path_match = self.path.match(path)
        if path_match is None:
            return None
        groups = path_match.groupdict()
        if host_match is not None:
            groups.update({k: v for k, v in host_match.groupdict().items() if v is not None})
        return groups


@dataclass(frozen=True, slots=True)
class HeaderRules:
    rules: tuple[HeaderRule, ...] = ()

    def __len__(self) -> int:
        return len(self.rules)

    def for_path(self, path: str, host: str | None = None) -> HeaderChanges:
        """Header changes for a request path (leading slash optional, query string ignored).

        Rules written with an absolute URL apply only when ``host`` (the request's Host, port
        ignored) matches.
        """
        if not self.rules:
            return NO_HEADER_CHANGES
        path, _ = _normalise_path(path)
        values: dict[str, tuple[str, str]] = {}
        removed: set[str] = set()
        for rule in self.rules:
            groups = rule.match(path, host)
            if groups is None:
                continue
            for key, name, value, dynamic in rule.actions:
                if value is None:
                    values.pop(key, None)
                    removed.add(key)
                    continue
                if dynamic:
                    value = _substitute(value, groups)
                if key in values:
                    first_name, joined = values[key]
                    values[key] = (first_name, f"{joined}, {value}")
                else:
                    values[key] = (name, value)
        if not values and not removed:
            return NO_HEADER_CHANGES
        return HeaderChanges(dict(values.values()), frozenset(removed))


def _parse_url_pattern(text: str, line: int) -> tuple[re.Pattern[str] | None, _Pattern]:
    if any(c.isspace() for c in text):
        raise RulesSyntaxError(line, "A URL pattern may not contain spaces; put each header on its own indented line.")
    host_regex: re.Pattern[str] | None = None
    host_names: set[str] = set()
    splats: list[int] = []
    if text.startswith("https://"):
        rest = text[len("https://"):]
        host, slash, path = rest.partition("/")
        if not host or not _HOST_PATTERN.fullmatch(host):
            raise RulesSyntaxError(line, f"'{text}' does not name a host after 'https://'.")
        if re.search(r":\d", host):
            raise RulesSyntaxError(line, "Absolute URLs may not specify a port.")
        host_regex = re.compile(_compile_part(host, "[^./]+", line, host_names, splats) + r"\Z", re.IGNORECASE)
        path = slash + path if slash else "/"
    elif "://" in text:
        raise RulesSyntaxError(line, "Absolute URLs must begin with 'https://'.")
    elif text.startswith("/"):
        path = text
    else:
        raise RulesSyntaxError(line, f"Expected a URL pattern starting with '/' or 'https://', found '{text}'.")
    path_names: set[str] = set(host_names)
    path_source = _compile_part(path, "[^/]+", line, path_names, splats)
    names = path_names | ({"splat"} if splats else set())
    return host_regex, _Pattern(re.compile(path_source + r"\Z"), frozenset(names), not names,
                                _literal_prefix(path))


def _refused_name(name: str, line: int) -> RulesSyntaxError | None:
    if name.lower() in BROWSER_RUN_HEADERS:
        return RulesSyntaxError(line, f"'{name}' decides how browsers run a file (or sets a cookie); "
                                      "_headers rules may not set or remove it.")
    if name.lower() in FRAMING_HEADERS:
        return RulesSyntaxError(line, f"'{name}' decides how the response is framed or decoded; "
                                      "_headers rules may not set or remove it.")
    return None


def parse_headers(text: str | None, *, strict: bool = True) -> HeaderRules:
    """Parse a ``_headers`` file; raises ``RulesSyntaxError`` on the first bad line.

    ``strict=False`` (the edge loading what control published) skips lines naming a header in
    :data:`RESERVED_HEADERS` instead of refusing them, so a file published before they were
    refused still applies its other lines and never those."""
    if not text:
        return HeaderRules()
    rules: list[HeaderRule] = []
    current: tuple[int, str, re.Pattern[str] | None, _Pattern] | None = None
    actions: list[tuple[str, str, str | None, bool]] = []
    skipped = False

    def close_block() -> None:
        if current is None:
            return
        line, pattern, host, path = current
        if not actions:
            if skipped:
                return
            raise RulesSyntaxError(line, f"The URL pattern '{pattern}' has no indented header lines under it.")
        rules.append(HeaderRule(line, pattern, host, path.regex, path.prefix, path.names, tuple(actions)))

    for number, raw in enumerate(text.splitlines(), start=1):
        if len(raw) > MAX_HEADER_LINE:
            raise RulesSyntaxError(number, f"The line is longer than {MAX_HEADER_LINE} characters.")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not raw[0].isspace():
            close_block()
            actions = []
            skipped = False
            if len(rules) >= MAX_HEADER_RULES:
                raise RulesSyntaxError(number, f"A _headers file may hold at most {MAX_HEADER_RULES} rules.")
            host, path = _parse_url_pattern(stripped, number)
            current = (number, stripped, host, path)
            continue
        if current is None:
            raise RulesSyntaxError(number, "A header line must follow a URL pattern line (patterns start at column 0).")
        names = current[3].names
        if stripped.startswith("!"):
            name = stripped[1:].strip()
            if not _HEADER_NAME.fullmatch(name):
                raise RulesSyntaxError(number, f"'{name}' is not a valid header name to detach; write '! Header-Name'.")
            if (refused := _refused_name(name, number)) is not None:
                if strict:
                    raise refused
                skipped = True
                continue
            actions.append((name.lower(), name, None, False))
            continue
        name, colon, value = stripped.partition(":")
        name, value = name.strip(), value.strip()
        if not colon:
            raise RulesSyntaxError(number, f"Expected 'Name: value' or '! Name', found '{stripped}'.")
        if not _HEADER_NAME.fullmatch(name):
            raise RulesSyntaxError(number, f"'{name}' is not a valid header name.")
        if not value:
            raise RulesSyntaxError(number, f"The header '{name}' has no value; use '! {name}' to remove a header.")
        if _CONTROL.search(value):
            raise RulesSyntaxError(number, f"The value of '{name}' contains control characters.")
        if (refused := _refused_name(name, number)) is not None:
            if strict:
                raise refused
            skipped = True
            continue
        actions.append((name.lower(), name, value, _uses_placeholders(value, names)))
    close_block()
    return HeaderRules(tuple(rules))


# -- _redirects -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Redirect:
    """The outcome of a matching ``_redirects`` line. Status 200 means rewrite to ``location`` internally."""

    status: int
    location: str
    line: int

    @property
    def is_rewrite(self) -> bool:
        return self.status == REWRITE_STATUS


@dataclass(frozen=True, slots=True)
class RedirectRule:
    line: int
    source: str
    destination: str
    status: int
    pattern: _Pattern
    dynamic_destination: bool
    # The destination split by _split_destination: scheme and '//', host[:port] (both '' for a path), the rest.
    scheme: str = ""
    authority: str = ""
    rest: str = ""
    dynamic_authority: bool = False

    def location(self, groups: dict[str, str], query: str) -> str | None:
        """The location for a match; None when the values would move it off the destination's host."""
        authority, rest = self.authority, self.rest
        if self.dynamic_destination:
            rest = _substitute_url(rest, groups)
            if self.dynamic_authority:
                authority = _substitute_url(authority, groups)
                if not _LOCATION_AUTHORITY.fullmatch(authority):
                    return None
            elif not self.scheme and rest[1:2] in ("/", "\\"):  # a value made the path '//host': scheme-relative
                return None
        location = self.scheme + authority + rest
        if query and "?" not in location:
            location, hash_mark, fragment = location.partition("#")
            location = f"{location}?{_url_escape(query, _NOT_URL_QUERY_SAFE)}{hash_mark}{fragment}"
        return location


@dataclass(frozen=True, slots=True)
class RedirectRules:
    rules: tuple[RedirectRule, ...] = ()
    # Exact-path rules by source, first occurrence only, for a dictionary lookup before the regex scan.
    static: dict[str, int] = field(default_factory=dict)
    dynamic: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.rules)

    def match(self, path: str) -> Redirect | None:
        """The first rule (in file order) matching ``path``; leading slash optional, query string kept for the location.

        Raises ``ApiError`` 400 ``InvalidPath`` when the matching rule cannot build a location on its
        destination's host from this path (see the module docstring), whoever answers the request."""
        found = self._find(path)
        if found is None:
            return None
        rule, groups, query = found
        location = rule.location(groups, query)
        if location is None:
            where = f"'{rule.scheme}{rule.authority}'" if rule.scheme else "this host"
            raise ApiError(400, "InvalidPath", f"Invalid asset path: the _redirects rule on line {rule.line} "
                                               f"cannot map it to a URL on {where}.", target="path")
        return Redirect(rule.status, location, rule.line)

    def matches(self, path: str) -> bool:
        """Whether a rule matches ``path`` (its location is not built)."""
        return self._find(path) is not None

    def _find(self, path: str) -> tuple[RedirectRule, dict[str, str], str] | None:
        if not self.rules:
            return None
        path, query = _normalise_path(path)
        static_index = self.static.get(path)
        for index in self.dynamic:
            if static_index is not None and index > static_index:
                break
            rule = self.rules[index]
            if not path.startswith(rule.pattern.prefix):
                continue
            found = rule.pattern.regex.match(path)
            if found is not None:
                return rule, found.groupdict(), query
        if static_index is None:
            return None
        return self.rules[static_index], {}, query


def parse_redirects(text: str | None) -> RedirectRules:
    """Parse a ``_redirects`` file; raises ``RulesSyntaxError`` on the first bad line."""
    if not text:
        return RedirectRules()
    rules: list[RedirectRule] = []
    static: dict[str, int] = {}
    dynamic: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(stripped) > MAX_REDIRECT_LINE:
            raise RulesSyntaxError(number, f"A redirect line may be at most {MAX_REDIRECT_LINE} characters.")
        parts = stripped.split()
        if len(parts) not in (2, 3):
            raise RulesSyntaxError(number, "Expected '<from> <to> [status]'.")
        source, destination = parts[0], parts[1]
        if _CONTROL.search(stripped):
            raise RulesSyntaxError(number, "A redirect line may not contain control characters.")
        status = DEFAULT_REDIRECT_STATUS
        if len(parts) == 3:
            if not _STATUS.fullmatch(parts[2]) or int(parts[2]) not in REDIRECT_STATUSES | {REWRITE_STATUS}:
                raise RulesSyntaxError(number, f"Status '{parts[2]}' is not supported; use 301, 302, 303, 307, 308 or 200.")
            status = int(parts[2])
        if not source.startswith("/"):
            raise RulesSyntaxError(number, f"The source '{source}' must be a path starting with '/' (domain-level redirects are not supported).")
        absolute = re.match(r"^https?://[^/\s]+", destination) is not None
        if not absolute and not destination.startswith("/"):
            raise RulesSyntaxError(number, f"The destination '{destination}' must be a path starting with '/' or an http(s) URL.")
        if status == REWRITE_STATUS and absolute:
            raise RulesSyntaxError(number, "A 200 rule rewrites to a path on this CDN; proxying to another host is not supported.")
        if "?" in source or "#" in source:
            raise RulesSyntaxError(number, "The source may not hold a query string or a fragment; they are ignored when matching.")
        pattern = _compile_path(source, number)
        if "splat" in _placeholders_in(destination) and "splat" not in pattern.names:
            raise RulesSyntaxError(number, "The destination uses ':splat' but the source has no '*'.")
        if pattern.static and source == destination.partition("?")[0] and not absolute:
            raise RulesSyntaxError(number, f"'{source}' redirects to itself.")
        index = len(rules)
        if pattern.static:
            if len(rules) - len(dynamic) >= MAX_STATIC_REDIRECTS:
                raise RulesSyntaxError(number, f"A _redirects file may hold at most {MAX_STATIC_REDIRECTS} static rules.")
            static.setdefault(source, index)
        else:
            if len(dynamic) >= MAX_DYNAMIC_REDIRECTS:
                raise RulesSyntaxError(number, f"A _redirects file may hold at most {MAX_DYNAMIC_REDIRECTS} rules with '*' or placeholders.")
            dynamic.append(index)
        scheme, authority, rest = _split_destination(destination)
        rules.append(RedirectRule(number, source, destination, status, pattern,
                                  _uses_placeholders(destination, pattern.names), scheme, authority, rest,
                                  # an empty host ('///:splat') is the rest's first segment to a browser
                                  bool(scheme) and (not authority or _uses_placeholders(authority, pattern.names))))
    return RedirectRules(tuple(rules), static, tuple(dynamic))


def _placeholders_in(text: str) -> set[str]:
    return {m.group(1) for m in _PLACEHOLDER.finditer(text)}


# -- both files -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RuleSet:
    """The edge rules of one manifest generation."""

    headers: HeaderRules = field(default_factory=HeaderRules)
    redirects: RedirectRules = field(default_factory=RedirectRules)

    @classmethod
    def from_texts(cls, headers: str | None, redirects: str | None, *, strict: bool = True) -> RuleSet:
        """Build both; a syntax error carries the line and names nothing else (the caller knows the file).
        ``strict=False``: see :func:`parse_headers`."""
        return cls(parse_headers(headers, strict=strict), parse_redirects(redirects))


EMPTY_RULES = RuleSet()


def parse_rule_file(file_name: str, text: str) -> HeaderRules | RedirectRules:
    """Validate the content of POST /api/core/rules by file name (``_headers`` or ``_redirects``)."""
    if file_name == "_headers":
        return parse_headers(text)
    if file_name == "_redirects":
        return parse_redirects(text)
    raise ValueError(f"File must be one of {', '.join(RULE_FILES)}.")
