"""Path rules. Storage paths carry `clients/` (or `stocks/`); CDN and catalog paths do not.

CDN path of a zone file: ``<zone>/v1/<category>/<file>``; of a stock file: ``stocks/<...>``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

# Validators end in \Z, not $: '$' also matches before a trailing newline ("zone\n" would pass).
ZONE_NAME = re.compile(r"[a-z0-9-]{2,64}\Z")
RESERVED_ZONE_NAMES = frozenset({
    "stocks", "shared", "website", "functions", "api", "dashboard", "dist", "content", "global", "clients",
    "node_modules", ".git", ".github",
    # Names the edges read as another path: on a zone's own host `/v1/...` is short for `/<zone>/v1/...`
    # (assetcdn/edge/site_config.py `tenant_path`), so a zone `v1` could not be named in full there; `/metrics` is
    # the edges' own route (`EDGE_PATHS`), a pull zone `metrics`'s `/<zone>` on the default host. Refused for new
    # zones only: one made before keeps working.
    "v1", "metrics",
})
# Compared case-insensitively and without trailing dots and spaces (".GIT", ".git." and ".git " are
# the same name to git on Windows and macOS checkouts, and git refuses them); "git~1" is the
# 8.3 short name of ".git". A segment of dots and spaces only is "." or ".." on some file system.
FORBIDDEN_SEGMENTS = frozenset({".git", ".github", "node_modules", "git~1", ""})
SEGMENT = re.compile(r"[A-Za-z0-9._@+=,~() -]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_PATH_LENGTH = 1024
ZONE_CATEGORIES = ("banners", "github", "icons", "logos", "titles")
STOCK_ROOT = "stocks"
CLIENT_ROOT = "clients"
SCAFFOLD_FILE = ".gitkeep"  # keeps an empty directory in git (a zone's categories, a folder made empty); never listed


def zone_scaffold_paths(zone: str) -> tuple[str, ...]:
    """The files that make a zone (repository paths): an empty ``v1/<category>/`` directory per standard category."""
    return tuple(f"{CLIENT_ROOT}/{zone}/v1/{category}/{SCAFFOLD_FILE}" for category in ZONE_CATEGORIES)


class InvalidPath(ValueError):
    """A path a client sent that must be refused with 400."""


def _check_bounds(path: str) -> None:
    """What no path is, stored or pulled: empty, too long, with a NUL, a backslash or a control character."""
    if not path:
        raise InvalidPath("The path is empty.")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidPath(f"The path is longer than {MAX_PATH_LENGTH} characters.")
    if "\x00" in path or "\\" in path:
        raise InvalidPath("The path contains a NUL byte or a backslash.")
    if _CONTROL.search(path):
        raise InvalidPath("The path contains control characters (a newline, tab or similar).")


def _check_segments(path: str) -> list[str]:
    _check_bounds(path)
    if "%" in path:
        # Reject anything that still decodes: encoded traversal (%2e%2e, %2f) after the router decoded once.
        if unquote(path) != path:
            raise InvalidPath("The path contains percent-encoded characters.")
    segments = path.split("/")
    for segment in segments:
        if segment == "":
            raise InvalidPath("The path contains an empty segment ('//' or a leading or trailing '/').")
        if segment.rstrip(". ").lower() in FORBIDDEN_SEGMENTS:
            raise InvalidPath(f"The path segment '{segment}' is not allowed.")
        if not SEGMENT.fullmatch(segment):
            raise InvalidPath(f"The path segment '{segment}' contains characters that are not allowed.")
    return segments


def check_pull_path(path: str) -> None:
    """Refuse a pull zone's path (decoded, no leading slash) that no origin request should be made of, as a
    transform or placeholder source: the bounds and dot segments of `_check_segments`, but any other character
    of the origin's names (`café.png`, `a&b.png`, `100%.png`), which the edge percent-encodes for the origin
    (assetcdn/edge/states/pull_source.py). `?` and `#` stay refused: a source names no query."""
    _check_bounds(path)
    if "?" in path or "#" in path:
        raise InvalidPath("The path contains a query or fragment ('?' or '#').")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPath("The path is not UTF-8 (a lone surrogate).") from None
    for segment in path.split("/"):
        if segment == "":
            raise InvalidPath("The path contains an empty segment ('//' or a leading or trailing '/').")
        plain = unquote(segment) if "%" in segment else segment  # `%2e%2e`: `..` to an origin decoding twice
        if segment.rstrip(". ") == "" or plain.partition(";")[0] in (".", "..") or "/" in plain or "\\" in plain:
            raise InvalidPath(f"The path segment '{segment}' is not allowed.")


@dataclass(frozen=True)
class StoragePath:
    """A validated path in the repository (``clients/<zone>/...`` or ``stocks/...``)."""

    repo_path: str

    @property
    def segments(self) -> list[str]:
        return self.repo_path.split("/")

    @property
    def zone(self) -> str | None:
        parts = self.segments
        return parts[1] if parts[0] == CLIENT_ROOT and len(parts) > 1 else None

    @property
    def cdn_path(self) -> str:
        return cdn_path_of(self.repo_path)

    @property
    def client_path(self) -> str:
        """The path as clients address it in responses: without the `clients/` prefix."""
        return self.cdn_path


def parse_storage_path(raw: str, *, directory: bool = False) -> StoragePath:
    """Validate a client-supplied storage path and map it into the repository.

    ``akande/v1/logos/x.svg`` and ``clients/akande/v1/logos/x.svg`` both map to the latter;
    ``stocks/...`` stays as it is.
    """
    path = raw
    if directory and path.endswith("/"):
        path = path[:-1]  # exactly one: 'a//' keeps its empty segment and is refused
    if path.startswith("/"):
        path = path[1:]
    if directory and path == "":
        return StoragePath("")
    segments = _check_segments(path)
    if segments[0] not in (CLIENT_ROOT, STOCK_ROOT):
        segments = [CLIENT_ROOT, *segments]
    if segments[0] == CLIENT_ROOT and len(segments) < 2:
        if directory:
            return StoragePath(CLIENT_ROOT)
        raise InvalidPath("A storage path names a zone: '<zone>/v1/<category>/<file>'.")
    return StoragePath("/".join(segments))


def parse_cdn_path(raw: str) -> str:
    """Validate a CDN path (``<zone>/v1/...`` or ``stocks/...``, leading slash tolerated) and return it normalised."""
    path = raw[1:] if raw.startswith("/") else raw
    _check_segments(path)
    if path.split("/", 1)[0] == CLIENT_ROOT:
        raise InvalidPath("CDN paths do not carry the 'clients/' prefix.")
    return path


def repo_path_of(cdn_path: str) -> str:
    return cdn_path if cdn_path.split("/", 1)[0] == STOCK_ROOT else f"{CLIENT_ROOT}/{cdn_path}"


def cdn_path_of(repo_path: str) -> str:
    if repo_path.startswith(CLIENT_ROOT + "/"):
        return repo_path[len(CLIENT_ROOT) + 1:]
    return repo_path


def has_extension(path: str) -> bool:
    return "." in posixpath.basename(path.rstrip("/"))


def validate_zone_name(name: str) -> str | None:
    """Return an error message, or None when the name may be used for a new zone."""
    if not isinstance(name, str) or not ZONE_NAME.fullmatch(name):
        return "Zone name must match ^[a-z0-9-]{2,64}$ (lower-case letters, digits and hyphens, 2 to 64 characters)."
    if name in RESERVED_ZONE_NAMES:
        return f"Zone name '{name}' is reserved. Reserved names: {', '.join(sorted(RESERVED_ZONE_NAMES))}."
    return None
