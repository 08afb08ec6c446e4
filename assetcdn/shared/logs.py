"""Logging set-up shared by both processes. Secrets are never passed to loggers."""

from __future__ import annotations

import logging


def configure_logging(role: str) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s")
    # libvips reports every operation at INFO: keep it to warnings.
    logging.getLogger("pyvips").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
