"""Typed application state of an edge worker (aiohttp AppKeys)."""

from __future__ import annotations

from aiohttp import ClientSession, web

from assetcdn.edge.image_pool import ImagePool
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.proxied_body import ForwardSpool
from assetcdn.shared.config import Settings
from assetcdn.shared.counter_store import Counters
from assetcdn.shared.secrets import Secrets

NODE = web.AppKey("node", EdgeNode)
SETTINGS = web.AppKey("settings", Settings)
SECRETS = web.AppKey("secrets", Secrets)
PROXY_SESSION = web.AppKey("proxy_session", ClientSession)
IMAGE_POOL = web.AppKey("image_pool", ImagePool)
COUNTERS = web.AppKey("counters", Counters)  # every limit the edge enforces (assetcdn/shared/counter_store.py)
FORWARD_SPOOL = web.AppKey("forward_spool", ForwardSpool)  # temporary space of forwarded bodies (assetcdn/edge/proxied_body.py)
