"""Records on the control app: the audit log and the request log, and the context that opens them and
prunes both on their retention."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.records.audit import AuditLog
from assetcdn.control.records.request_log import RequestLog
from assetcdn.control.records.retention import pruning
from assetcdn.control.storage.service import DB

AUDIT = web.AppKey("audit", AuditLog)
REQUEST_LOG = web.AppKey("request_log", RequestLog)  # made with the app: its middleware sees every request


@contextlib.asynccontextmanager
async def records_context(app: web.Application) -> AsyncIterator[None]:
    db = app[DB]
    audit = AuditLog(db)
    await audit.open()
    app[AUDIT] = audit
    request_log = app[REQUEST_LOG]
    await request_log.open(db)
    try:
        async with pruning([("audit", audit.prune), ("request log", request_log.prune)]):
            yield
    finally:
        await request_log.close()

