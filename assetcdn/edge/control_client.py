"""The edge side of the cluster protocol: register, heartbeat, catch up, fetch blobs by content id.

Calls fall in two kinds. The background sync (register, heartbeat, catch-up, config) always asks
control, with the short `probe_timeout_s`, and tells the circuit breaker (assetcdn/edge/circuit_breaker.py)
how it went: a hung or dead control is noticed within one catch-up interval plus that timeout, with
no client traffic (two failures in a row by default, so one slow heartbeat on a busy machine does not
turn misses into 503s). Calls made for a client (blob fetches on a miss, analytics) ask the breaker first:
while it is open they fail at once, and one already waiting gives up the moment it opens, so no
client waits out `origin_timeout_s` for a control plane known to be unreachable.

Only failed calls say control is unreachable, never silence: an edge whose own event loop did not run for a
while (busy, starved of CPU, paused) has not asked control, and a timeout that fired that late may have left
control's answer unread, so neither makes the edge call control down (`reachable`, `_late_timeout_excused`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
import orjson

from assetcdn.edge.circuit_breaker import CircuitBreaker
from assetcdn.shared.cluster import PREFIX, PROTOCOL_VERSION, sign_request
from assetcdn.shared.generation_push import GenerationPush
from assetcdn.shared.published_config import PublishedConfig
from assetcdn.shared.secrets import secret_fingerprint
from assetcdn.shared.tls_state import TLS_STATE_PATH

log = logging.getLogger(__name__)
T = TypeVar("T")
GATEWAY_FAILURES = frozenset({502, 503, 504})  # answers that mean control itself is not there
MAX_EDGES = 4096  # edge workers taken from control's list
# A timeout that fires more than this many seconds after it was due fired late: the edge's own loop did not
# run meanwhile, and control's answer may have arrived unread. Far above a loaded loop's usual delay.
LATE_TIMEOUT_S = 1.0
# Control's answer to a call whose signature it does not take: a cluster secret that is not control's (an old one, a
# typo), or a clock too far from control's for the signature's window (assetcdn/shared/cluster.py).
REFUSED = 401
REFUSED_HINT = ("control refuses this edge's signed calls (401): its cluster secret (ASSETCDN_CLUSTER_SECRET) is "
                "not control's, or its clock is more than a minute from control's")
SIGNED_URL_DIFFERS = ("this edge's signed-URL secret (ASSETCDN_SIGNED_URL_SECRET) is not control's: the URLs signed "
                      "with control's are refused here (403)")


class ControlUnavailable(Exception):
    """Control could not be reached or answered with a server error. `answered`: it did answer (a 5xx
    other than 502-504), so it is up, only failing this call."""

    def __init__(self, message: str, *, answered: bool = False, slow: bool = False, late: bool = False,
                 refused: bool = False) -> None:
        super().__init__(message)
        self.answered = answered
        self.refused = refused  # control answered 401: it does not take this edge's signature
        self.slow = slow  # it took a timeout to find out (hung or cut off, not refusing)
        self.late = late  # that timeout fired late (LATE_TIMEOUT_S): the edge's loop was not running


class NotFoundAtControl(Exception):
    """Control answered 404: it does not hold the requested content id (or does not know the endpoint)."""


class ControlClient:
    def __init__(self, control_url: str, cluster_secret: str, timeout_s: float, keepalive_s: float = 15.0, *,
                 probe_timeout_s: float = 2.0, breaker: CircuitBreaker | None = None,
                 signed_url_secret: str | None = None) -> None:
        self.control_url = control_url.rstrip("/")
        self._secret = cluster_secret
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=min(timeout_s, 2.0))
        self._probe_timeout = aiohttp.ClientTimeout(total=min(probe_timeout_s, timeout_s),
                                                    connect=min(probe_timeout_s, timeout_s, 2.0))
        self._keepalive_s = keepalive_s  # shorter than control's idle limit (assetcdn/shared/http_server.py)
        self.breaker = breaker or CircuitBreaker()
        self.session: aiohttp.ClientSession | None = None
        self.started_at = time.monotonic()
        self.last_success = 0.0
        self.last_error = ""
        # When the first call that failed (and counted) since control last answered was asked; None: none has.
        self.failing_since: float | None = None
        self._late_excused_at: float | None = None  # when a late timeout was last excused, since the last answer
        self.generation_seen = 0  # the newest generation control reported (heartbeat, catch-up)
        # The live edge workers control last listed (register, heartbeat): (member name, cluster URL) pairs.
        self.edges: tuple[tuple[str, str], ...] = ()
        self._probing = 0  # background calls under way
        # Why control refuses this edge's signed calls (REFUSED_HINT), from the second refusal in a row until a
        # signed call is answered again; "" while it takes them. Such an edge learns of no purge: not reachable.
        self.refused = ""
        self._refusals = 0
        # This edge's signed-URL secret as control's registration answer names it (secret_fingerprint), and
        # SIGNED_URL_DIFFERS while control's is another; "" while they are the same, or not compared.
        self._signed_url = (secret_fingerprint(cluster_secret, "signed_url_secret", signed_url_secret)
                            if signed_url_secret is not None else None)
        self.secrets_differ = ""

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False,
                                             connector=aiohttp.TCPConnector(keepalive_timeout=self._keepalive_s))

    async def close(self) -> None:
        if self.session:
            await self.session.close()

    @property
    def cluster_secret(self) -> str:
        return self._secret

    def reachable(self, within_s: float) -> bool:
        """Control has answered since this process started and is not known to be down: the breaker is not
        open, and calls to it have not been failing, with no answer between, for more than `within_s`. Time in
        which no call was made (this edge's loop did not run) is not counted against it."""
        if self.refused or self.breaker.state == "open" or not self.last_success:
            return False
        return self.failing_since is None or time.monotonic() - self.failing_since <= within_s

    def refuses_client_call(self, *, claim: bool = True) -> bool:
        """Whether a call made for a client (a miss's blob, a forwarded management call) is refused now: while the
        breaker refuses calls, and while the background sync is trying a control known down (it is the probe then,
        and a client need not wait on a second). A call let through while the breaker is open claims its half-open
        probe; it gives up when the breaker opens again (`breaker.tripped`). `claim` False: only whether it would be
        refused, for a call that may yet never ask control (its request body still to come), which would hold the
        probe without reporting."""
        breaker = self.breaker
        return (not breaker.available() or (self._probing > 0 and breaker.fails_fast)
                or (claim and not breaker.allow()))

    def seconds_since_contact(self) -> float:
        """Since control last answered, or since this process started when it has not yet."""
        return time.monotonic() - max(self.last_success, self.started_at)

    async def _exchange(self, method: str, path_qs: str, body: bytes, headers: dict[str, str],
                        limits: aiohttp.ClientTimeout | None) -> bytes:
        assert self.session is not None
        limits = limits or self._timeout
        started = time.monotonic()
        try:
            async with self.session.request(method, self.control_url + PREFIX + path_qs, data=body or None,
                                            headers=headers, timeout=limits) as resp:
                data = await resp.read()
                if resp.status == 404:
                    raise NotFoundAtControl(path_qs)
                if resp.status == REFUSED:  # counted as a failure: control is there, but this edge is cut off
                    raise ControlUnavailable(f"{REFUSED_HINT} (to {path_qs})", refused=True)
                if resp.status != 200:
                    raise ControlUnavailable(f"control answered {resp.status} to {path_qs}",
                                             answered=resp.status not in GATEWAY_FAILURES)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise unanswered(exc, limits, started) from exc
        return data

    async def until_tripped(self, call: asyncio.Future[T], begun: Callable[[], bool] = lambda: False) -> T:
        """The call's result, unless the breaker opens first (another call found control down): then give up at
        once (ControlUnavailable) rather than wait out this call's own timeout; unless `begun` says its answer has
        begun coming (a forwarded call's, being relayed), which is waited for to its end."""
        tripped = asyncio.ensure_future(self.breaker.tripped())
        try:
            await asyncio.wait((call, tripped), return_when=asyncio.FIRST_COMPLETED)
            if not call.done() and begun():
                return await call
        finally:
            tripped.cancel()
            if not call.done():
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await call
        if call.cancelled():
            raise ControlUnavailable("control became unreachable while waiting for it", slow=True)
        return call.result()

    async def _request(self, method: str, path_qs: str, message: dict[str, Any] | None = None, *,
                       probe: bool = False) -> bytes:
        """`probe`: a background sync call (always made, short timeout); otherwise a call for a client,
        refused at once while the breaker is open."""
        # While control counts as down a client's call is refused at once, and also when the background
        # sync is trying control right now: it is the probe then, and a client need not wait on a second.
        if not probe and self.refuses_client_call():
            raise ControlUnavailable(f"control is unreachable (for {self.seconds_since_contact():.1f} s; "
                                     f"last error: {self.last_error or 'none'}); not asking")
        body = orjson.dumps({"v": PROTOCOL_VERSION, **message}) if message is not None else b""
        headers = sign_request(self._secret, method, PREFIX + path_qs, body)
        asked_at = time.monotonic()
        if message is not None:
            headers["Content-Type"] = "application/json"
        try:
            if probe:
                self._probing += 1
                try:
                    data = await self._exchange(method, path_qs, body, headers, self._probe_timeout)
                finally:
                    self._probing -= 1
            else:
                data = await self.until_tripped(
                    asyncio.ensure_future(self._exchange(method, path_qs, body, headers, None)))
        except ControlUnavailable as exc:
            self.failed_call(exc, asked_at)
            raise
        except NotFoundAtControl:
            self._answered()
            self._signature_taken()
            raise
        self._answered()
        self._signature_taken()
        return data

    def failed_call(self, exc: ControlUnavailable, asked_at: float) -> None:
        """Tell the breaker of a call asked at `asked_at` that failed: the edge's own, or one it forwarded for a
        client that control did not answer (assetcdn/edge/proxy.py), which may have been the half-open probe."""
        if exc.answered:
            self._answered()
            return
        if exc.refused:
            self._refused()
        self.last_error = str(exc)
        # A call that failed while another one got an answer says control is slow, not down: only
        # failures newer than the last answer count towards opening the breaker.
        if self.last_success <= asked_at and not self._late_timeout_excused(exc, asked_at):
            self.breaker.failed(slow=exc.slow)
            if self.failing_since is None:
                self.failing_since = asked_at

    def _refused(self) -> None:
        """A signed call answered 401. The second in a row (one may be a replayed nonce: a request sent again on a
        kept connection) makes this edge unreachable for control until a signed call is answered, said once."""
        self._refusals += 1
        if self._refusals >= 2 and not self.refused:
            self.refused = REFUSED_HINT
            log.error("%s; this edge learns of no purge or change until it is given control's", REFUSED_HINT)

    def _signature_taken(self) -> None:
        if self.refused:
            log.warning("control takes this edge's signed calls again")
        self.refused = ""
        self._refusals = 0

    def heard_from(self) -> None:
        """Control reached this edge (a signed push), or answered a call forwarded to it (assetcdn/edge/proxy.py):
        it is up, whatever our own calls last concluded."""
        self._answered()

    def _late_timeout_excused(self, exc: ControlUnavailable, asked_at: float) -> bool:
        """Whether a failure is a timeout that fired late, which says this edge's loop stalled, not that
        control was silent. Every call caught in one stall is excused; a call asked after that stall and late
        again before control answers counts, so a loop that is always late cannot hide a control that is down."""
        if not exc.late:
            return False
        if self._late_excused_at is None:
            self._late_excused_at = time.monotonic()
            return True
        return asked_at < self._late_excused_at

    def _answered(self) -> None:
        self.last_success = time.monotonic()
        self.failing_since = None
        self._late_excused_at = None
        self.breaker.succeeded()

    def _saw_generation(self, reply: dict[str, Any]) -> dict[str, Any]:
        generation = reply.get("generation")
        if isinstance(generation, int):
            self.generation_seen = max(self.generation_seen, generation)
        edges = reply.get("edges")
        if isinstance(edges, list):  # a control older than shielding lists none: the list is kept as it was
            self.edges = tuple(sorted((edge["name"], edge["url"]) for edge in edges[:MAX_EDGES] if
                                      isinstance(edge, dict) and isinstance(edge.get("name"), str)
                                      and isinstance(edge.get("url"), str)
                                      and edge["url"].startswith(("http://", "https://"))))
        return reply

    async def register(self, name: str, url: str, generation: int) -> dict[str, Any]:
        reply = self._saw_generation(orjson.loads(await self._request(
            "POST", "/register", {"name": name, "url": url, "generation": generation}, probe=True)))
        self._compare_secrets(reply.get("secrets"))
        return reply

    def _compare_secrets(self, theirs: object) -> None:
        """Whether the secrets control names in its registration answer are this edge's; said once (a control older
        than this names none)."""
        if self._signed_url is None or not isinstance(theirs, dict) or "signed_url_secret" not in theirs:
            return
        differs = not hmac.compare_digest(str(theirs["signed_url_secret"]), self._signed_url)
        if differs and not self.secrets_differ:
            log.error("%s; give it the one in control's secrets.env", SIGNED_URL_DIFFERS)
        self.secrets_differ = SIGNED_URL_DIFFERS if differs else ""

    async def heartbeat(self, name: str, generation: int, url: str = "") -> dict[str, Any]:
        """`url`: the cluster address this worker registered, by which control tells two edges that share a name."""
        message: dict[str, Any] = {"name": name, "generation": generation, **({"url": url} if url else {})}
        return self._saw_generation(orjson.loads(await self._request("POST", "/heartbeat", message, probe=True)))

    async def leave(self, name: str, url: str) -> bool:
        """This worker is stopping: control forgets it (`name` registered at `url`); whether it had it."""
        reply = orjson.loads(await self._request("POST", "/leave", {"name": name, "url": url}, probe=True))
        return bool(reply.get("left")) if isinstance(reply, dict) else False

    async def changes_since(self, generation: int) -> GenerationPush:
        """Control's catch-up answer, decoded once here (GenerationPushError on a malformed one)."""
        answer = GenerationPush.from_json(orjson.loads(await self._request("GET", f"/changes?since={generation}",
                                                                           probe=True)))
        self.generation_seen = max(self.generation_seen, answer.generation)
        return answer

    async def config(self) -> PublishedConfig:
        """Control's published config, parsed once here (ValueError on a malformed one)."""
        return PublishedConfig.from_json(orjson.loads(await self._request("GET", "/config", probe=True)))

    async def tls_state(self) -> dict[str, Any]:
        """Control's TLS state message (assetcdn/shared/tls_state.py); NotFoundAtControl from a control
        that has none to give (one older than TLS state)."""
        message: dict[str, Any] = orjson.loads(await self._request("GET", TLS_STATE_PATH, probe=True))
        return message

    async def fetch_blob(self, blob_id: str) -> bytes:
        return await self._request("GET", f"/blobs/{blob_id}")

    async def send(self, path: str, message: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = orjson.loads(await self._request("POST", path, message))
        return reply


def unanswered(exc: aiohttp.ClientError | TimeoutError | OSError, limits: aiohttp.ClientTimeout,
               started: float) -> ControlUnavailable:
    """What a call begun at `started` under `limits` that got no answer from control says of it: a timeout
    (`slow`: hung or cut off, and whether it fired late) or a refused or broken connection."""
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError):
        return ControlUnavailable(message, slow=True, late=_fired_late(exc, limits, started))
    return ControlUnavailable(message)


def _fired_late(exc: TimeoutError, limits: aiohttp.ClientTimeout, started: float) -> bool:
    """Whether the timeout that ended a call begun at `started` fired well after it was due (its connect
    limit for a connection that was not made, else its total)."""
    limit = limits.connect if isinstance(exc, aiohttp.ConnectionTimeoutError) else limits.total
    return limit is not None and time.monotonic() - started > limit + LATE_TIMEOUT_S


async def run_sync_loop(client: ControlClient, *, name: str, url: str, get_generation: Callable[[], int],
                        catch_up: Callable[[], Any], interval_s: float, heartbeat_s: float,
                        retry_s: float | None = None, first_round: asyncio.Event | None = None) -> None:
    """Register, then heartbeat and catch up on a short timer until cancelled; survive control restarts.
    While control cannot be reached it is asked again every `retry_s` (jittered, so edges do not all
    arrive together), which is how an edge catches up soon after a partition heals. `first_round` is set once
    the first registration and catch-up are done, or have failed."""
    registered = False
    last_heartbeat = 0.0
    retry_s = interval_s if retry_s is None else min(retry_s, interval_s)
    while True:
        delay = interval_s
        try:
            if not registered:
                await client.register(name, url, get_generation())
                registered = True
            await catch_up()
            if time.monotonic() - last_heartbeat >= heartbeat_s:
                reply = await client.heartbeat(name, get_generation(), url)
                last_heartbeat = time.monotonic()
                if not reply.get("known"):
                    registered = False  # control restarted and forgot us
                    continue
        except ControlUnavailable as exc:
            log.debug("control unreachable: %s", exc)
            registered = False
            delay = retry_s * random.uniform(0.5, 1.0)  # noqa: S311 (jitter, not a secret)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sync with control failed")
        finally:
            if first_round is not None:
                first_round.set()
        await asyncio.sleep(delay)
