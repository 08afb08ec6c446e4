"""Identity on the control app: API tokens, dashboard sessions, passkeys and sign-in, the credential
check every route declares; their tables and the context that opens them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.app_keys import COUNTERS, DASHBOARD, SECRETS, SETTINGS
from assetcdn.control.identity import session, tokens
from assetcdn.control.identity.auth import AUTHENTICATOR, Authenticator
from assetcdn.control.identity.login_attempts import CounterAttemptLimiter
from assetcdn.control.identity.passkeys import store as passkey_store
from assetcdn.control.identity.passkeys.ceremony import PasskeyCeremonies, user_handle
from assetcdn.control.identity.passkeys.store import PasskeyStore, PendingChallenges
from assetcdn.control.identity.session import SessionBook
from assetcdn.control.identity.signin import SignIn
from assetcdn.control.identity.tokens import TokenStore
from assetcdn.control.records.service import AUDIT
from assetcdn.control.storage.service import DB
from assetcdn.shared.limits import login_failures_per_client

TOKENS = web.AppKey("tokens", TokenStore)
SESSIONS = web.AppKey("sessions", SessionBook)
# The token scopes every one of whose routes accepts the session: what a dashboard session may grant.
SESSION_SCOPES: web.AppKey[frozenset[str]] = web.AppKey("session_scopes")
SIGN_IN = web.AppKey("sign_in", SignIn)
PASSKEYS = web.AppKey("passkeys", PasskeyCeremonies)


@contextlib.asynccontextmanager
async def identity_context(app: web.Application) -> AsyncIterator[None]:
    db, secrets, dashboard = app[DB], app[SECRETS], app[DASHBOARD]
    await db.script(tokens.SCHEMA + session.SCHEMA + passkey_store.SCHEMA)
    app[TOKENS] = TokenStore(db)
    app[SESSIONS] = SessionBook(db, secrets.session_secret, dashboard.session_ttl_s)
    app[AUTHENTICATOR] = Authenticator(secrets, app[TOKENS].lookup, app[SESSIONS], dashboard)
    app[PASSKEYS] = PasskeyCeremonies(dashboard, PasskeyStore(db), PendingChallenges(),
                                      user_handle(secrets.session_secret))
    app[SIGN_IN] = SignIn(secrets.dashboard_secret,
                          CounterAttemptLimiter(app[COUNTERS], login_failures_per_client(app[SETTINGS])),
                          app[SESSIONS], app[PASSKEYS], app[AUDIT])
    yield
