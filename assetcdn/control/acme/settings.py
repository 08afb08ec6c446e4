"""The `[acme]` section of the configuration, read once into a typed value."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from assetcdn.shared.config import Settings, delays_setting


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
                   ca_bundle=str(section["ca_bundle"]).strip(), retry_delays_s=delays_setting(section["retry_delays_s"], "acme.retry_delays_s", retries_required=True),
                   order_timeout_s=float(section["order_timeout_s"]), concurrency=max(int(section["concurrency"]), 1),
                   max_orders_per_week=max(int(section["max_orders_per_week"]), 0))
