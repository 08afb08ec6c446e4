"""Origin shielding for pull zones: each URL is fetched from its origin by one edge worker, its shield, and the
other edges ask that shield instead of the origin, so an object new to the fleet costs the origin one request.

- **Which shield:** rendezvous (highest-random-weight) hashing of the URL's path (its zone and path: every query
  string of a path has the same shield) over the live edge workers control lists in its register and heartbeat
  answers (member name and cluster address). Every edge that holds the same list picks the same shield, and a
  worker joining or leaving moves only the paths it wins or held.
  ``[origin] shield`` overrides it: one edge's cluster address for every path, or ``"off"``.
- **The shield's side:** ``GET /_cluster/shield/<generation>/<zone><path>`` on the shield worker's cluster site
  (assetcdn/edge/routes/shield.py), signed with the cluster secret. The shield serves it with the pull serve
  sequence (its cache, its collapsing, its own zone config and origin) and never asks another shield; a
  request without a valid signature is refused, so a client cannot make a shield treat it as an edge's.
  A worker whose own fill of the path is asking a shield declines at once (`Shields.asking`) rather than wait for
  that fill: two edges that each take the other for the path's shield (their lists or settings differ), or an
  edge whose ``[origin] shield`` is its own worker by another address, would each wait for the other's answer.
  A worker that finds a shield request its own (`Shields.asked_by_itself`) takes the configured address for its
  own from then on.
  A shield behind the asking edge's generation (it may not have applied a purge yet) declines. That generation is
  the one whose purges the asking node has begun (``EdgeCache.purge_generation``), not only the one this worker
  has acknowledged: a fill made once a purge removed the URL here must not be answered with what it removed.
- **Failures:** a shield that cannot be connected to, times out, or answers with an error of its own (not an
  answer it relays) is marked down for ``shield_retry_s``; meanwhile, and for the request that found it so,
  the edge asks the origin itself. A client never sees a shield's failure. The origin's failure at the shield
  (no answer, a broken one) is not the shield's: the shield relays it (its 502 or 504 names the shield in
  Cache-Status), within ``SHIELD_FIRST_BYTE_SHARE`` of the first-byte time so that it arrives before the asking
  edge gives up on the shield, and the asking edge answers with it.
- **Unsafe methods** go to the origin directly. The paths their success invalidates on this edge are
  invalidated on their shields too (``POST /_cluster/shield-invalidate``, signed) before the client is answered,
  so this edge's next fill of them is not the copy it dropped.

The shield's answer is the fill's origin response: its Age counts, its validators are the origin's, and
its Cache-Status member is named ``assetcdn-shield``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import orjson
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from assetcdn.edge.cache.tags import pull_path_tag
from assetcdn.edge.origin_client import OriginClient, OriginError, OriginResponse, OriginTimeout
from assetcdn.edge.shield_address import OFF, shield_setting
from assetcdn.edge.site_config import PullZone
from assetcdn.edge.states.freshness import split_list
from assetcdn.shared.cluster import NONCE_HEADER, PREFIX, sign_request
from assetcdn.shared.config import Settings

log = logging.getLogger(__name__)
SHIELD_PATH = PREFIX + "/shield"
INVALIDATE_PATH = PREFIX + "/shield-invalidate"   # POST {"tags": [path tags]}: drop what an unsafe request changed
MAX_INVALIDATED = 16                # path tags one message carries (an unsafe request names at most three)
UNTOLD_LIMIT = 100_000              # path tags a shield may owe being told of (past it the oldest are let go)
SHIELD_AUDIENCE = "shield"         # what shield requests are signed for (any edge worker may be one)
SHIELD_CACHE = "assetcdn-shield"   # the shield's name in Cache-Status (RFC 9211)
# The share of the first-byte time a shield gives its origin for another edge's fill: its answer (the origin's, or
# its 504 saying the origin gave none) must reach that edge before the edge's own first-byte time for the shield
# runs out, which began earlier. A shield the edge gave up on is marked down for every zone's paths it shields.
SHIELD_FIRST_BYTE_SHARE = 0.9
# Set by the shield route once the request's signature holds: the fill goes to the origin, never to a shield.
FROM_EDGE = web.RequestKey("from_edge", bool)


def from_edge(request: web.Request) -> bool:
    """Whether `request` is another edge's signed shield request (answered from the origin, never a shield)."""
    return bool(request.get(FROM_EDGE))


# A shield's own refusals that say nothing of its health: it does not know the zone yet, or is behind, or it waited
# for a fill of the URL under way there for as long as this edge has, or for one that kept nothing to share (409
# ShieldFilling, pull.py `through_flight`: a large body the origin sends slowly, a `private` answer), or it is asking
# a shield of its own for the path (409 ShieldLoop, `Shields.asking`: the two edges disagree on the path's shield, or
# the asking edge's shield address is its own); or the request is one it refuses (a client's fields it cannot take:
# 400, 413, 414, 417, 431), which the origin is asked instead, this once. Counted against the shield, a client could
# turn shielding off for everyone.
PASSING_REFUSALS = frozenset((400, 404, 409, 413, 414, 417, 431))


@dataclass(frozen=True, slots=True)
class Peer:
    name: str   # the worker's member name (`edge-1/0`), or the configured address
    url: str    # its cluster site, without a trailing slash


def rendezvous(key: str, peers: tuple[Peer, ...]) -> Peer | None:
    """The peer with the highest hash of (its name, `key`)."""
    if len(peers) < 2:  # no hash to compare
        return peers[0] if peers else None
    best, best_score = None, -1
    for peer in peers:
        score = int.from_bytes(hashlib.blake2b(f"{peer.name}\n{key}".encode(), digest_size=8).digest(), "big")
        if score > best_score:
            best, best_score = peer, score
    return best


def relayed(headers: list[tuple[str, str]]) -> str | None:
    """The shield's own Cache-Status member when the answer is one it relays (from its cache or the origin), not an
    error of its own: the shield names itself last in its Cache-Status. None otherwise."""
    members = split_list([value for name, value in headers if name == "cache-status"])
    return members[-1] if members and members[-1].split(";", 1)[0].strip() == SHIELD_CACHE else None


def stale_at_shield(headers: list[tuple[str, str]]) -> bool:
    """Whether an answer is a shield's stale copy (within its stale-while-revalidate, or its stale-if-error while the
    origin failed it): the shield's own Cache-Status member says it answered from its cache (`hit`) after all
    forwarding the request (`fwd`), as assetcdn/edge/states/pull.py writes it for a stale copy; or it answered
    from its cache with no time to live left (`ttl` 0 or less: a stale copy a client's `max-stale` took, which is
    answered as a hit). Its 304 confirms the asking edge's copy against that copy, not the origin's."""
    member = relayed(headers)
    if member is None:
        return False
    parameters = {name.strip().lower(): value.strip() for name, _, value in
                  (parameter.partition("=") for parameter in member.split(";")[1:])}
    if "hit" not in parameters:
        return False
    ttl = parameters.get("ttl", "")
    return "fwd" in parameters or (ttl.removeprefix("-").isdigit() and int(ttl) <= 0)


# The Cache-Status `detail` of a shield's answer that says its origin gave no answer (assetcdn/edge/states/pull.py
# `origin_failed`), and whether it was for want of time.
ORIGIN_FAILURES = {"origin-timeout": True, "origin-unreachable": False}


def origin_failed_at_shield(status: int, member: str) -> OriginError | None:
    """The origin's failure a shield relays (its 502 or 504 whose Cache-Status `member`, the shield's own, has the
    `detail` `ORIGIN_FAILURES` names), or None."""
    if status not in (502, 504):
        return None
    parameters = {key.strip().lower(): value.strip() for key, _, value in
                  (parameter.partition("=") for parameter in member.split(";")[1:])}
    timeout = ORIGIN_FAILURES.get(parameters.get("detail", ""))
    if timeout is None:
        return None
    why = f"the origin gave the shield no answer ({parameters['detail']})"
    return OriginTimeout(why) if timeout else OriginError(why)


class Shields:
    def __init__(self, settings: Settings, member: str, secret: str, origins: OriginClient,
                 edges: Callable[[], tuple[tuple[str, str], ...]], generation: Callable[[], int]) -> None:
        section = settings.section("origin")
        configured = shield_setting(section["shield"])
        self.mode = OFF if configured == OFF else "configured" if configured else "fleet"
        self._configured = Peer(configured, configured) if self.mode == "configured" else None
        self._retry_s = float(section["shield_retry_s"])
        self._member = member
        # The member names of this edge's other workers begin so (`edge-1/0`, `edge-1/1`): none of them is a shield
        # of this worker's fills (they share its disk tier, and their own purges). With `shield_siblings` the
        # workers take turns at a URL's fill instead, by the edge's fill lock (`shares_fills`).
        self._siblings = member.rpartition("/")[0] + "/"
        self.shares_fills = self.mode == "fleet" and bool(section["shield_siblings"])
        self._secret = secret
        self._origins = origins
        self._edges = edges
        self._generation = generation
        self.own_url = ""                       # this worker's cluster site (set when it starts)
        self._down: dict[str, float] = {}       # shield url -> monotonic time it may be asked again
        # Shield name -> the path tags this edge invalidated that it could not tell that shield (down, or the
        # message failed), oldest first, each with the count of the remembering that put it there (a catch-up
        # lets go of a tag only when no newer failure remembered it again meanwhile); and the shields being told
        # them now. By name, not address: a worker started again may listen at another address (`cluster_port =
        # 0`), its disk tier still holding what it was not told of.
        self._untold: dict[str, dict[str, int]] = {}
        self._remembered = 0
        self._telling: dict[str, asyncio.Task[None]] = {}
        self._listed: tuple[tuple[str, str], ...] = ()
        self._peers: tuple[Peer, ...] = ()
        # Path tags a fill of this worker is asking their shield for now, and how many fills ask (`asking`); the
        # nonces of those requests (`asked_by_itself`).
        self._asking: dict[str, int] = {}
        self._nonces: set[str] = set()
        self._configured_is_self = False  # `[origin] shield` found to lead to this worker (`asked_by_itself`)

    def peers(self) -> tuple[Peer, ...]:
        listed = self._edges()
        if listed is not self._listed:  # control's list changes rarely: made into peers once per change
            self._listed, self._peers = listed, tuple(Peer(name, url.rstrip("/")) for name, url in listed)
        return self._peers

    def shield_for(self, tag: str) -> Peer | None:
        """The shield of a pull zone path (its path tag: every query string of a path has the same shield, so
        an invalidation of the path reaches the one edge worker that may hold it); None when this worker is
        it, or shielding is off, or it is another worker of this edge: this worker fills it itself (with
        ``[origin] shield_siblings``, taking turns with the other workers: assetcdn/edge/cache/fill_lock.py), and an
        invalidation here reaches that worker through the node's purge log."""
        if self._configured is not None:
            return None if self._configured_is_self or self._configured.url == self.own_url else self._configured
        if self.mode == OFF:
            return None
        peer = rendezvous(tag, self.peers())
        if peer is None or peer.name == self._member:
            return None
        return None if peer.name.startswith(self._siblings) else peer

    def status(self) -> dict[str, object]:
        """What health shows: how shields are chosen, among how many workers, and how many are marked down."""
        now = time.monotonic()
        known = len(self.peers()) if self.mode == "fleet" else int(self.mode == "configured")
        return {"mode": self.mode, "edges": known, "down": sum(until > now for until in self._down.values())}

    def _is_down(self, peer: Peer) -> bool:
        until = self._down.get(peer.url)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        del self._down[peer.url]
        return False

    def _mark_down(self, peer: Peer, why: str) -> None:
        if not self._is_down(peer):
            log.warning("shield %s marked down for %g s (the origin is asked directly): %s", peer.name,
                        self._retry_s, why)
        self._down[peer.url] = time.monotonic() + self._retry_s

    async def fill(self, zone: PullZone, path: str, query: str, headers: CIMultiDict[str], *,
                   from_edge: bool = False) -> OriginResponse:
        """A cache fill's response for `path` (and its raw `query`) of `zone` (GET, `headers` as for the origin):
        from the path's shield when there is one up, else, or when it fails, from the origin. `from_edge`: the
        request is itself another edge's shield request (this worker is the shield: the origin it is)."""
        if not from_edge:
            tag = pull_path_tag(zone.name, path)  # the tag an invalidation names
            peer = self.shield_for(tag)
            if peer is not None and not self._is_down(peer):
                untold = self._untold.get(peer.name)
                if untold and tag in untold:  # the shield may hold what this edge invalidated: not asked till told
                    self._catch_up(peer)
                else:
                    asking = self._asking
                    asking[tag] = asking.get(tag, 0) + 1
                    try:
                        response = await self._ask(peer, zone, path, query, headers)
                    finally:
                        if asking[tag] == 1:
                            del asking[tag]
                        else:
                            asking[tag] -= 1
                    if response is not None:
                        return response
        first_byte_s = self._origins.limits.first_byte_timeout_s * (SHIELD_FIRST_BYTE_SHARE if from_edge else 1.0)
        return await self._origins.request(zone.origin, "GET", zone.origin.target(path, query), headers,
                                           first_byte_timeout_s=first_byte_s)

    def asking(self, tag: str) -> bool:
        """Whether a fill of this worker is asking the shield of the path of `tag` for it now, waiting for its head:
        this worker is no shield of that path in its own view, and a shield request for it (an edge that sees it
        otherwise, or this worker by another address of its own) must not wait for that fill, which waits for a
        shield, maybe the one that asks, maybe this very request (the shield route declines it, 409 ShieldLoop)."""
        return tag in self._asking

    def asked_by_itself(self, nonce: str) -> bool:
        """Whether a shield request this worker's cluster site got (its signature's `nonce`) is one this worker sent:
        ``[origin] shield`` names it by another address than the one it registered (a DNS name, a NAT address). From
        then on it takes that address for its own, and asks the origin itself."""
        if nonce not in self._nonces:
            return False
        if self._configured is not None and not self._configured_is_self:
            self._configured_is_self = True
            log.warning("[origin] shield %s is this worker (registered as %s): it asks the origin itself",
                        self._configured.url, self.own_url)
        return True

    async def _ask(self, peer: Peer, zone: PullZone, path: str, query: str,
                   headers: CIMultiDict[str]) -> OriginResponse | None:
        """The shield's answer, or None (the shield marked down when it failed)."""
        path_qs = f"{SHIELD_PATH}/{self._generation()}/{zone.name}{path}" + (f"?{query}" if query else "")
        sent = CIMultiDict(headers)
        for name, _ in zone.origin.request_headers:  # the zone's secrets for its origin: the shield adds its own
            sent.popall(name, None)
        signed = sign_request(self._secret, "GET", path_qs, audience=SHIELD_AUDIENCE)
        sent.update(signed)
        nonce = signed[NONCE_HEADER]
        self._nonces.add(nonce)
        try:
            response = await self._origins.peer_request(URL(peer.url + path_qs, encoded=True), sent)
        except OriginError as exc:
            self._mark_down(peer, str(exc))
            return None
        finally:
            self._nonces.discard(nonce)
        member = relayed(response.headers)
        if member is not None:
            failed = origin_failed_at_shield(response.status, member)
            if failed is not None:  # the origin's failure, not the shield's: this fill's, as if it were its own
                response.release()
                raise failed
            if response.status != 304 or "If-None-Match" in headers or "If-Modified-Since" in headers:
                response.body_failed = partial(self._mark_down, peer)  # a body it cuts short: passed over too
                response.stale = stale_at_shield(response.headers)
                return response
            # A 304 to a request with no validators answers nothing this edge asked: a shield that is wrong.
            response.release()
            self._mark_down(peer, "it answered 304 to a request without validators")
            return None
        response.release()
        if response.status not in PASSING_REFUSALS:
            self._mark_down(peer, f"it answered {response.status} itself")
        return None

    async def invalidated(self, tags: list[str]) -> None:
        """Pull zone paths (their path tags) this edge invalidated after an unsafe request (RFC 9111 4.4): their
        shields drop them too, before the request is answered, so what this edge fills next is not the copy it
        dropped. A shield that cannot be told (down, or the message fails) is marked down, and the paths it was
        not told of are remembered: this edge asks the origin for them, not that shield, until it is told."""
        by_shield: dict[Peer, list[str]] = {}
        for tag in tags[:MAX_INVALIDATED]:
            peer = self.shield_for(tag)
            if peer is None:
                continue
            if self._is_down(peer):
                self._remember(peer, [tag])
            else:
                by_shield.setdefault(peer, []).append(tag)
        await asyncio.gather(*(self._tell(peer, shield_tags) for peer, shield_tags in by_shield.items()))

    def _remember(self, peer: Peer, tags: list[str]) -> None:
        untold = self._untold.setdefault(peer.name, {})
        self._remembered += 1
        for tag in tags:
            untold.pop(tag, None)  # to the newest end
            untold[tag] = self._remembered
        if len(untold) > UNTOLD_LIMIT:  # a tenth let go at once: not a copy of them all per invalidation
            log.warning("shield %s owes more than %d invalidations: the oldest are let go", peer.name, UNTOLD_LIMIT)
            for tag in list(itertools.islice(untold, len(untold) - UNTOLD_LIMIT + UNTOLD_LIMIT // 10)):
                del untold[tag]

    def _catch_up(self, peer: Peer) -> None:
        """Tell `peer`, in the background, the invalidations it was not told of (one catch-up at a time)."""
        if peer.name not in self._telling:
            task = asyncio.get_running_loop().create_task(self._tell_untold(peer), name=f"shield-catch-up {peer.name}")
            self._telling[peer.name] = task
            task.add_done_callback(lambda _task: self._telling.pop(peer.name, None))

    async def _tell_untold(self, peer: Peer) -> None:
        untold = self._untold.get(peer.name, {})
        try:
            while untold and not self._is_down(peer):
                sent = dict(itertools.islice(untold.items(), MAX_INVALIDATED))
                if not await self._tell(peer, list(sent)):
                    return
                for tag, remembered in sent.items():
                    if untold.get(tag) == remembered:  # not remembered again while it was being told
                        del untold[tag]
            if not untold and self._untold.get(peer.name) is untold:
                del self._untold[peer.name]
        except Exception:  # a catch-up never fails a request; the tags stay owed, told by the next one
            log.exception("telling shield %s what it missed failed", peer.name)

    async def _tell(self, peer: Peer, tags: list[str]) -> bool:
        """Send `peer` the path tags `tags` to drop; whether it took them (else they are remembered)."""
        body = orjson.dumps({"tags": tags})
        headers = {"Content-Type": "application/json",
                   **sign_request(self._secret, "POST", INVALIDATE_PATH, body, audience=SHIELD_AUDIENCE)}
        try:
            response = await self._origins.peer_request(URL(peer.url + INVALIDATE_PATH, encoded=True), headers,
                                                        "POST", body)
        except OriginError as exc:
            self._mark_down(peer, str(exc))
            self._remember(peer, tags)
            return False
        response.release()
        if response.status != 200:
            self._mark_down(peer, f"it answered {response.status} to an invalidation")
            self._remember(peer, tags)
            return False
        return True
