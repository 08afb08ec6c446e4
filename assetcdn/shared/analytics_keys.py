"""What analytics counts a delivery under, the same where it is counted (the edge's delivery log,
assetcdn/edge/delivery_log.py) and where the counts are kept (control, assetcdn/control/analytics/)."""

from __future__ import annotations

UNKNOWN_COUNTRY = "XX"   # the country of a request whose country header is missing or not two letters
# The longest path (without its leading slash) control keeps under its name, in a count or a request log entry. A
# pull zone's paths are its origin's, as long as a request line allows: an edge counts a longer one in its zone's
# "other" row and logs it cut to this length.
MAX_PATH_LENGTH = 2048


def zone_of(path: str) -> str:
    """The zone a delivery of the CDN path `path` is counted under: its first segment (``stocks`` for the
    stock pool, ``api`` for /api/transform and the like)."""
    return path.lstrip("/").split("/", 1)[0]
