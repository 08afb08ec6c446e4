"""CertificateIssuer: which names need a certificate, ordering and renewing them, and the TLS state the edges get.

The names are every custom domain plus the public URL's host when it is https://. Each has a row in the
certificate store saying when it is next due: at once when added, at two thirds of its certificate's lifetime
for a renewal, and after a failure by the `acme.retry_delays_s` backoff (or the CA's Retry-After, when longer).
While an order runs its HTTP-01 answers are in the TLS state, pushed to every edge before the CA is told to
validate, so whichever edge the CA reaches can answer. A new certificate, a removed name and a finished order
each publish a new state (a higher serial); edges that missed it pull it from control's `/_cluster/tls`.

The CA unreachable: the names stay as they are (certificates already issued keep being offered), health shows
`acme` unhealthy, the directory is probed until it answers, and the orders it interrupted are retried then.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assetcdn.control.acme.orders import OrderFailed
from assetcdn.control.acme.settings import AcmeSettings, public_host
from assetcdn.control.acme.store import (
    ACTIVE,
    FAILED,
    PROVISIONING,
    AcmeCertificates,
    CertificateRecord,
    describe_chain,
)
from assetcdn.control.publishing.edge_registry import EdgeRegistry
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.edge_config_store import EdgeConfigStore, zone_names
from assetcdn.shared.config import Settings
from assetcdn.shared.tls_state import TLS_STATE_PATH, CertificateEntry, TlsState

if TYPE_CHECKING:
    from assetcdn.control.acme.authority import CertificateAuthority

log = logging.getLogger(__name__)

ACME_DIR = "acme"  # <data dir>/acme: the account key (0600) and the trusted CA bundle
MAX_SLEEP_S = 60.0  # the loop looks again at least this often (expiry, clock changes)
CHALLENGE_PUSH_WAIT_S = 5.0  # an order waits this long for the edges to hold its answers before the CA asks
PROBE_INTERVAL_MAX_S = 30.0  # while the CA is unreachable its directory is asked at least this often
NO_EDGE_POLL_S = 1.0  # while no edge is registered, due orders wait and the loop looks again this often
# Said by a name due while no edge is registered (so none would hold its HTTP-01 answer when the CA looks).
NO_EDGE_REASON = ("no edge has registered with control yet (control has just started, or no edge runs): "
                  "the order starts once one has, so that the CA finds the challenge's answer")
WEEK_S = 7 * 86400  # the window of acme.max_orders_per_week

WantedNames = Callable[[], Awaitable[set[str]]]


def _wire_time(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CertificateIssuer:
    def __init__(self, settings: AcmeSettings, store: AcmeCertificates, authority: CertificateAuthority | None,
                 registry: EdgeRegistry, cluster_secret: str, wanted_names: WantedNames, push_wait_s: float,
                 public_host: str | None = None) -> None:
        self.settings = settings
        self.public_host = public_host  # server.public_url's host, when it is https:// and ACME is on
        self.store = store
        self.authority = authority
        self._registry = registry
        self._secret = cluster_secret
        self._wanted_names = wanted_names
        self._push_wait_s = push_wait_s
        self._entries: dict[str, CertificateEntry] = {}  # what edges are offered, sealed once per certificate
        self._challenges: dict[str, dict[str, str]] = {}  # hostname -> {token: key authorization}
        self._state = TlsState()
        self._orders: dict[str, asyncio.Task[None]] = {}
        self._nudge = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._publish_lock = asyncio.Lock()
        # The CA's reachability as last seen: None before any contact (health is not judged on a guess).
        self.ca_reachable: bool | None = None
        self.ca_error: str | None = None
        self._next_probe = 0.0
        self._waiting_for_ca: set[str] = set()  # names whose last attempt could not reach the CA

    # --- life cycle ---

    async def start(self) -> None:
        await self.store.open()
        await self._load_installed()
        await self.reconcile(publish=False)
        self._state = TlsState(await self.store.next_serial(), {}, tuple(self._entries.values()))
        if self.authority is not None:
            self._loop_task = asyncio.create_task(self._run())

    async def close(self) -> None:
        tasks = [t for t in (self._loop_task, *self._orders.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.authority is not None:
            self.authority.close()

    async def _load_installed(self) -> None:
        """Seal what is on disk for the edges; a name whose files are missing or broken is ordered again."""
        now = time.time()
        for hostname, record in (await self.store.records()).items():
            installed = await asyncio.to_thread(self.store.read, hostname)
            if installed is None:
                if record.status == ACTIVE or record.serial is not None:  # it had one: say so, and order anew
                    await self.store.failed(hostname, PROVISIONING, "the certificate files on control are missing or "
                                            "unusable; a new certificate is being ordered", record.attempts, now)
                continue
            self._entries[hostname] = self._seal(hostname, installed.key_pem, installed.chain_pem,
                                                 installed.not_after)
            if self.authority is not None and record.directory_url != self.settings.directory_url:
                # Another CA now (staging -> production): order from it at once; the old one serves meanwhile
                await self.store.due_now(hostname, now)

    def _seal(self, hostname: str, key_pem: bytes, chain_pem: str, not_after: float) -> CertificateEntry:
        return CertificateEntry.seal(self._secret, (hostname,), chain_pem, key_pem, _wire_time(not_after))

    # --- what edges get ---

    def state(self) -> TlsState:
        return self._state

    async def _next_message(self) -> dict[str, Any]:
        async with self._publish_lock:
            challenges = {token: answer for answers in self._challenges.values() for token, answer in answers.items()}
            self._state = TlsState(await self.store.next_serial(), challenges,
                                   tuple(self._entries[name] for name in sorted(self._entries)))
            return self._state.to_message()

    async def publish(self) -> None:
        """A new state (next serial) from the certificates and open challenges, sent to every edge."""
        message = await self._next_message()
        result = await self._registry.fan_out("tls", TLS_STATE_PATH, message, self._push_wait_s)
        if result.pending:
            log.info("TLS state %d not yet acknowledged by %s (they pull it on catch-up)", message["serial"],
                     ", ".join(result.pending))

    async def _open_challenges(self, hostname: str, answers: dict[str, str]) -> None:
        self._challenges[hostname] = answers
        result = await self._registry.fan_out("tls", TLS_STATE_PATH, await self._next_message(),
                                              CHALLENGE_PUSH_WAIT_S)
        if result.pending:
            log.warning("challenge for %s not yet held by %s; asking the CA to validate anyway", hostname,
                        ", ".join(result.pending))

    # --- which names ---

    async def reconcile(self, *, publish: bool = True) -> None:
        """Bring the certificate rows in line with the names served: new names are ordered at once, removed ones
        lose their order, certificate and key, and stop being offered to the edges (pushed before this returns)."""
        wanted = await self._wanted_names()
        records = await self.store.records()
        now = time.time()
        removed = False
        for hostname in set(records) - wanted:
            order = self._orders.pop(hostname, None)
            if order is not None:
                order.cancel()
            await self.store.forget(hostname)
            removed |= self._entries.pop(hostname, None) is not None
            removed |= self._challenges.pop(hostname, None) is not None
            self._waiting_for_ca.discard(hostname)
            log.info("certificate for %s removed (the name is no longer served)", hostname)
        for hostname in set(self.store.names_on_disk()) - wanted:
            await self.store.forget(hostname)  # files left by a stop between a removal's steps
        added = wanted - set(records)
        for hostname in sorted(added):
            await self.store.want(hostname, now)
        if removed and publish:
            await self.publish()
        if added:
            self._nudge.set()

    # --- the loop ---

    async def _run(self) -> None:
        while True:
            try:
                await self._turn()
            except Exception:  # the loop must outlive one bad turn; the next one tries again
                log.exception("certificate turn failed")
            sleep_s = await self._sleep_s()  # first: a stop while it reads would leave the wait's coroutine unawaited
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), sleep_s)
            self._nudge.clear()

    async def _sleep_s(self) -> float:
        now = time.time()
        due = [r.next_attempt_at for r in (await self.store.records()).values() if r.hostname not in self._orders]
        wake = min([*due, now + MAX_SLEEP_S])
        if self.ca_reachable is False:
            wake = min(wake, self._next_probe)
        if not self._registry.live_edges():
            wake = max(wake, now + NO_EDGE_POLL_S)  # due orders wait for an edge: looked at again, not in a spin
        return min(max(wake - now, 0.05), MAX_SLEEP_S)

    def _probe_interval(self) -> float:
        return min(self.settings.retry_delays_s[0], PROBE_INTERVAL_MAX_S)

    async def _turn(self) -> None:
        assert self.authority is not None
        now = time.time()
        if self.ca_reachable is False and now >= self._next_probe:
            try:
                await self.authority.reachable()
            except OrderFailed as failure:
                self.ca_error = failure.reason
                self._next_probe = time.time() + self._probe_interval()
            else:
                self._ca_answered()
                for hostname in self._waiting_for_ca:  # the outage, not the CA, stopped these: try them now
                    await self.store.due_now(hostname, now)
                self._waiting_for_ca.clear()
        records = await self.store.records()
        for record in records.values():
            if record.status == ACTIVE and record.not_after is not None and record.not_after <= now:
                await self.store.failed(record.hostname, FAILED, "the certificate expired and was not renewed: "
                                        f"{record.error or 'no renewal succeeded'}", record.attempts,
                                        record.next_attempt_at)
                if self._entries.pop(record.hostname, None) is not None:
                    await self.publish()
        if self.ca_reachable is False:
            return  # orders wait for the probe to find the CA again
        due = [r for r in records.values() if r.next_attempt_at <= now and r.hostname not in self._orders]
        if due and not self._registry.live_edges():
            # `assetcdn up` starts control before its edges, and a restarted control knows no edge until each one
            # heartbeats again: the challenge's answer would reach none, and the CA's look fail (a failed
            # validation counts against the name's hourly limit). The orders wait, saying why.
            for record in due:
                if record.error != NO_EDGE_REASON:
                    await self.store.failed(record.hostname, record.status, NO_EDGE_REASON, record.attempts,
                                            record.next_attempt_at)
            return
        budget = self.settings.max_orders_per_week
        started = await self.store.orders_since(now - WEEK_S) if budget else []
        # Renewals first: a certificate in use must not lapse while new names spend the budget.
        for record in sorted(due, key=lambda r: (r.status != ACTIVE, r.next_attempt_at)):
            if len(self._orders) >= self.settings.concurrency:
                break
            if budget and len(started) >= budget:
                await self._over_budget(record, started[len(started) - budget] + WEEK_S)
                continue
            if budget:
                await self.store.order_started(now, now - WEEK_S)
                started.append(now)
            task = asyncio.create_task(self._order(record))
            self._orders[record.hostname] = task
            task.add_done_callback(functools.partial(self._order_done, record.hostname))

    async def _over_budget(self, record: CertificateRecord, until: float) -> None:
        """The week's orders are spent: `record` waits, saying why, until the oldest counted order leaves the window."""
        reason = (f"the budget of {self.settings.max_orders_per_week} certificate orders a week "
                  "(acme.max_orders_per_week) is spent; this name is ordered when it has room again")
        log.warning("certificate order for %s waits for the weekly order budget until %s", record.hostname,
                    _wire_time(until))
        await self.store.failed(record.hostname, record.status, reason, record.attempts, until)

    def _order_done(self, hostname: str, task: asyncio.Task[None]) -> None:
        if self._orders.get(hostname) is task:
            del self._orders[hostname]
        if not task.cancelled() and task.exception() is not None:
            log.error("order for %s ended unexpectedly: %r", hostname, task.exception())
        self._nudge.set()

    def _ca_answered(self) -> None:
        if self.ca_reachable is False:
            log.info("the ACME CA answers again")
        self.ca_reachable, self.ca_error = True, None

    async def _order(self, record: CertificateRecord) -> None:
        assert self.authority is not None
        hostname = record.hostname
        try:
            issued = await self.authority.issue(hostname, lambda answers: self._open_challenges(hostname, answers))
            try:
                not_before, not_after, serial = describe_chain(issued.chain_pem, issued.key_pem)
            except ValueError as exc:
                raise OrderFailed(f"the CA's certificate could not be used ({exc})") from None
        except OrderFailed as failure:
            self._challenges.pop(hostname, None)
            await self._order_failed(record, failure)
            return
        except asyncio.CancelledError:
            self._challenges.pop(hostname, None)
            raise
        self._challenges.pop(hostname, None)
        self._ca_answered()
        if hostname not in await self._wanted_names():
            return  # removed while its order ran: reconcile() already forgot it
        await asyncio.to_thread(self.store.write, hostname, issued.key_pem, issued.chain_pem)
        self._entries[hostname] = self._seal(hostname, issued.key_pem, issued.chain_pem, not_after)
        # Pushed before the record says "active": a client that reads the status then finds the certificate
        # on every edge that answered the push (the others pull it on catch-up).
        await self.publish()  # the new certificate, and its answers withdrawn
        await self.store.installed(hostname, not_before, not_after, serial, self.settings.directory_url)
        log.info("certificate for %s installed (serial %s, valid until %s)", hostname, serial, _wire_time(not_after))

    async def _order_failed(self, record: CertificateRecord, failure: OrderFailed) -> None:
        hostname = record.hostname
        now = time.time()
        attempts = record.attempts + 1
        delay = max(self.settings.retry_delay(attempts), failure.retry_after_s or 0.0)
        if failure.ca_reached:
            status = ACTIVE if hostname in self._entries else FAILED
        else:
            status = ACTIVE if hostname in self._entries else record.status  # the CA did not say no
        log.warning("certificate order for %s failed (attempt %d, next in %.0f s): %s", hostname, attempts, delay,
                    failure.reason)
        # What a client reads follows what is already true: answers are withdrawn from the edges before the
        # record says "failed" (as a new certificate is pushed before it says "active"), and the record holds
        # the error before health says whether the CA answers.
        await self.publish()
        if await self.store.record(hostname) is not None:
            await self.store.failed(hostname, status, failure.reason, attempts, now + delay)
        if failure.ca_reached:
            self._ca_answered()
        else:
            self.ca_reachable, self.ca_error = False, failure.reason
            self._next_probe = now + self._probe_interval()
            self._waiting_for_ca.add(hostname)

    # --- what health and the API show ---

    def check(self) -> dict[str, Any]:
        """The `acme` health check: healthy unless the last contact with the CA failed."""
        check: dict[str, Any] = {"name": "acme", "configured": self.authority is not None, "method": "shape",
                                 "healthy": self.ca_reachable is not False}
        if self.authority is not None:
            check["ordersInFlight"] = len(self._orders)
            if self.ca_reachable is False:
                check["status"] = "degraded"
        return check

    def ca_problem(self) -> str | None:
        return self.ca_error if self.ca_reachable is False else None

    async def record(self, hostname: str) -> CertificateRecord | None:
        return await self.store.record(hostname)


async def open_issuer(settings: Settings, public_url: str, data_dir: Path, db: Database,
                      registry: EdgeRegistry, edge_config: EdgeConfigStore, cluster_secret: str) -> CertificateIssuer:
    """The issuer of this control plane, started: with `[acme] directory_url` empty it only keeps the (empty)
    state the edges pull, and forgets the certificates of names no longer served."""
    acme = AcmeSettings.from_settings(settings)
    authority: CertificateAuthority | None = None
    if acme.enabled:
        # The ACME client (acme, josepy, requests) loads only here: a control plane without ACME never pays it.
        from assetcdn.control.acme.authority import CertificateAuthority
        authority = CertificateAuthority(acme, data_dir / ACME_DIR)
    own_host = public_host(public_url) if acme.enabled else None

    async def wanted() -> set[str]:
        # The names served: not those a zone's deletion stopped before removing left to a zone that is gone.
        zones = set(await zone_names(edge_config.git))
        names = {domain.hostname for domain in await edge_config.domains() if domain.zone in zones}
        if own_host is not None:
            names.add(own_host)
        return names

    issuer = CertificateIssuer(acme, AcmeCertificates(db, data_dir), authority, registry, cluster_secret, wanted,
                               settings.get("control", "push_wait_ms") / 1000, own_host)
    try:
        await issuer.start()
    except BaseException:
        await issuer.close()
        raise
    return issuer
