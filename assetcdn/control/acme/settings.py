"""The `[acme]` section of the configuration, read once into a typed value."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from assetcdn.shared.config import Settings


def _delays(raw: Any) -> tuple[float, ...]:
    """A list from TOML, or the comma-separated text an environment variable carries."""
    items = raw.split(",") if isinstance(raw, str) else [raw] if isinstance(raw, int | float) else list(raw)
    delays = tuple(float(item) for item in items if str(item).strip())
    if not delays or any(delay <= 0 for delay in delays):
        raise ValueError("acme.retry_delays_s must list at least one delay, each above 0 seconds")
    return delays


def public_host(public_url: str) -> str | None:
    """The host of an https:// public URL that a CA can issue for (not an IP address or localhost), or None."""
    parts = urlsplit(public_url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme != "https" or not host or "." not in host:
        return None
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if host == "localhost" or host.endswith(".localhost"):
        return None
    return host


@dataclass(frozen=True)
class AcmeSettings:
    directory_url: str
    contact_email: str
    ca_bundle: str
    retry_delays_s: tuple[float, ...]
    order_timeout_s: float
    concurrency: int
    max_orders_per_week: int = 0  # orders started in any 7 days, renewals and retries included; 0 = no budget

    @property
    def enabled(self) -> bool:
        return bool(self.directory_url)

    def retry_delay(self, attempts: int) -> float:
        """The wait after the `attempts`-th failure in a row (1-based); the last delay repeats."""
        return self.retry_delays_s[min(max(attempts, 1), len(self.retry_delays_s)) - 1]

    @classmethod
    def from_settings(cls, settings: Settings) -> AcmeSettings:
        section = settings.section("acme")
        directory = str(section["directory_url"]).strip()
        if directory and urlsplit(directory).scheme != "https":
            raise ValueError(f"acme.directory_url must be an https:// URL, not {directory!r}")
        return cls(directory_url=directory, contact_email=str(section["contact_email"]).strip(),
                   ca_bundle=str(section["ca_bundle"]).strip(), retry_delays_s=_delays(section["retry_delays_s"]),
                   order_timeout_s=float(section["order_timeout_s"]), concurrency=max(int(section["concurrency"]), 1),
                   max_orders_per_week=max(int(section["max_orders_per_week"]), 0))
