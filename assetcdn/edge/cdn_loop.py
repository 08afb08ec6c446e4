"""Requests that came back through a pull zone's own origin (RFC 8586, the CDN-Loop request field).

A pull zone whose origin leads back to the edges (its origin URL is the zone's own tenant host or custom domain,
or a CDN path of the zone) would have each fill ask the edges for the URL it is filling. The looped request joins
the flight it is part of (one origin request per URL) and waits for it, until the first-byte timeout answers both
504; a path prefix that grows at each pass never repeats a URL and goes round until a limit cuts it.

So every request to an origin carries ``CDN-Loop: <fleet>; zone=<zone>`` after what the client sent in that field
(RFC 8586 asks a CDN to append to it, never to remove it). ``<fleet>`` is a pseudonym of the edges of one control
(`fleet_id`: derived from the cluster secret, the same on every edge of a fleet, another in another fleet), so two
separate deployments in front of one another are no loop. A pull zone's request that names this fleet and zone is
one this zone forwarded: it is refused at once with 508 LoopDetected, before its URL's flight is joined. A zone
whose origin is another zone of the same edges is no loop, and a cycle through several zones is found where it
comes back to the first. A client that sends the field itself can only refuse its own request.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import TYPE_CHECKING

from multidict import MultiMapping

from assetcdn.shared.errors import ApiError

if TYPE_CHECKING:
    from assetcdn.edge.site_config import PullZone

FIELD = "CDN-Loop"
NAME = FIELD.lower()
HEAD_MARK = b"\n" + NAME.encode() + b":"  # a field line of it in a lower-cased HTTP/1.1 head


def fleet_id(cluster_secret: str) -> str:
    """The fleet's pseudonym in CDN-Loop: not the secret, nor anything that helps find it."""
    digest = hmac.new(cluster_secret.encode(), b"assetcdn cdn-loop pseudonym", hashlib.sha256).hexdigest()
    return f"assetcdn-{digest[:12]}"


def loop_token(fleet: str, zone: str) -> str:
    """What this fleet appends to CDN-Loop on the requests zone `zone` sends its origin (zone names are tokens)."""
    return f"{fleet}; zone={zone}"


def looped(values: Iterable[str], fleet: str, zone: str) -> bool:
    """Whether the CDN-Loop field lines `values` name `fleet` with `zone`: a request `zone` sent its origin.
    Lenient: an entry this cannot read names nothing."""
    fleet = fleet.lower()
    for value in values:
        for entry in value.split(","):
            cdn_id, _, params = entry.partition(";")
            if cdn_id.strip().lower() != fleet:
                continue
            for param in params.split(";"):
                name, _, found = param.partition("=")
                if name.strip().lower() == "zone" and found.strip().strip('"') == zone:
                    return True
    return False


def came_back(headers: MultiMapping[str], zone: PullZone) -> bool:
    """Whether a request to `zone` with header fields `headers` is one the zone sent its own origin (every route
    that fills from the zone's origin refuses it before it could wait for its own fill)."""
    return bool(zone.fleet) and FIELD in headers and looped(headers.getall(FIELD), zone.fleet, zone.name)


def carried(headers: MultiMapping[str]) -> tuple[tuple[str, str], ...]:
    """A request's CDN-Loop field lines, for a request the edge sends on its behalf that carries none of its other
    fields (a pull zone image's source): appended to, never dropped, they find a cycle through several zones
    where it comes back to the first."""
    return tuple((FIELD, value) for value in headers.getall(FIELD, ()))


def refusal_message(zone: str) -> str:
    """Why a request `zone` sent its origin is refused (508 LoopDetected), in any route's envelope."""
    return (f"This request was sent by pull zone '{zone}' to its own origin, which sent it back to the CDN: the "
            "zone's origin must be a server other than the zone's own hosts and paths.")


def loop_detected(zone: str) -> ApiError:
    return ApiError(508, "LoopDetected", refusal_message(zone), headers={"Cache-Control": "no-store"})
