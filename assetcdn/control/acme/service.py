"""Certificates on the control app: the ACME issuer (orders, renewals, the TLS state edges pull) and
the context that starts and stops it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.acme.issuer import CertificateIssuer, open_issuer
from assetcdn.control.app_keys import DATA_DIR, SECRETS, SETTINGS, public_url_of
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.control.storage.service import DB, EDGE_CONFIG

CERTIFICATES = web.AppKey("certificates", CertificateIssuer)  # ACME orders and the TLS state edges get


@contextlib.asynccontextmanager
async def acme_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    issuer = await open_issuer(settings, public_url_of(settings), app[DATA_DIR], app[DB], app[REGISTRY],
                               app[EDGE_CONFIG], app[SECRETS].cluster_secret)
    app[CERTIFICATES] = issuer
    try:
        yield
    finally:
        await issuer.close()
