"""The `[webhooks]` section of the configuration, read once into a typed value."""

from __future__ import annotations

from dataclasses import dataclass

from assetcdn.shared.config import Settings, delays_setting


@dataclass(frozen=True)
class WebhookSettings:
    allow_loopback: bool
    timeout_s: float
    retry_delays_s: tuple[float, ...]
    concurrency_per_target: int
    concurrency_total: int
    max_webhooks: int
    retention_days: int

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookSettings:
        section = settings.section("webhooks")
        per_target = max(int(section["concurrency_per_target"]), 1)
        return cls(
            allow_loopback=bool(section["allow_loopback"]),
            timeout_s=float(section["timeout_s"]),
            retry_delays_s=delays_setting(section["retry_delays_s"], "webhooks.retry_delays_s", retries_required=False),
            concurrency_per_target=per_target,
            # Above the per-target bound, so a target that uses all of its slots leaves room for others.
            concurrency_total=max(int(section["concurrency_total"]), per_target + 1),
            max_webhooks=int(section["max_webhooks"]),
            retention_days=int(section["retention_days"]),
        )
