"""One POST of an event to a receiver, through a client that reaches only allowed addresses.

Every delivery opens its own connection (no keep-alive, no DNS cache) and ``GuardedResolver`` resolves
its name once and checks the addresses, so the address connected to is the one checked at that
delivery; IP literals are checked here. Redirects are not followed (a 3xx is
a failed attempt), proxies from the environment are not used, cookies are not kept, and at most a
few KiB of a reply are read. Plain-http targets (development only) use a client whose resolver
accepts loopback addresses alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from dataclasses import dataclass

import aiohttp
from yarl import URL

from assetcdn.shared.address_guard import (
    GuardedResolver,
    HostResolver,
    check_address,
    literal_address,
    refusal_in,
)

USER_AGENT = "assetcdn-webhook/1.0"
REPLY_READ_MAX = 4096


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status: int | None = None
    error: str | None = None


def signature(secret: str, body: bytes) -> str:
    """The ``X-Webhook-Signature`` value: ``sha256=`` and the hex HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()




class Sender:
    def __init__(self, resolver: HostResolver, *, allow_loopback: bool, timeout_s: float) -> None:
        self._resolver = resolver
        self._allow_loopback = allow_loopback
        self._timeout_s = timeout_s
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def _session(self, scheme: str) -> aiohttp.ClientSession:
        session = self._sessions.get(scheme)
        if session is None:
            resolver = GuardedResolver(self._resolver, allow_loopback=self._allow_loopback,
                                       loopback_only=scheme == "http")
            # A new connection per delivery (no keep-alive, no DNS cache): every delivery resolves and checks.
            connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, limit=0, force_close=True)
            session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                                            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                                            trust_env=False)
            self._sessions[scheme] = session
        return session

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()

    def _refuse_before_connecting(self, url: URL) -> str | None:
        if url.scheme not in ("https", "http"):
            return f"the scheme {url.scheme!r} is not allowed"
        if url.scheme == "http" and not self._allow_loopback:
            return "plain http targets are allowed only with the development setting webhooks.allow_loopback"
        literal = literal_address(url.raw_host or "")
        if literal is not None:
            return check_address(literal, allow_loopback=self._allow_loopback, loopback_only=url.scheme == "http")
        return None

    async def post(self, target: str, body: bytes, headers: dict[str, str]) -> Outcome:
        url = URL(target)
        refused = self._refuse_before_connecting(url)
        if refused:
            return Outcome(False, None, f"refused: {refused}")
        try:
            async with self._session(url.scheme).post(url, data=body, headers=headers, allow_redirects=False) as resp:
                if 200 <= resp.status < 300:
                    # The status is the receiver's answer (docs/api-guide.md "Webhooks": any 2xx is a delivery):
                    # a reply body that then breaks off or stalls changes nothing, and the event was received.
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        await resp.content.read(REPLY_READ_MAX)  # the rest is not read: the connection is closed
                    return Outcome(True, resp.status)
                await resp.content.read(REPLY_READ_MAX)
                return Outcome(False, resp.status, f"HTTP {resp.status}")
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return Outcome(False, None, f"no answer within {self._timeout_s:g} s")
        except aiohttp.ClientConnectorError as exc:
            refusal = refusal_in(exc)
            if refusal is not None:
                return Outcome(False, None, f"refused: {refusal.message}")
            return Outcome(False, None, f"connection failed: {exc.os_error.strerror or type(exc.os_error).__name__}")
        except (aiohttp.ClientError, OSError) as exc:
            refusal = refusal_in(exc)
            if refusal is not None:
                return Outcome(False, None, f"refused: {refusal.message}")
            return Outcome(False, None, f"request failed: {type(exc).__name__}")
