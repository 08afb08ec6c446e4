"""Edge configuration from control (`_headers` / `_redirects` rules, custom domains) and how a request's
host and path map to a CDN path. Applied by every delivery response, never by forwarded API calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from shared.edge_rules import EMPTY_RULES, RuleSet
from shared.paths import ZONE_NAME

FORWARDED = web.RequestKey("forwarded_to_control", bool)
NOT_DELIVERY = ("/api/health", "/metrics")


@dataclass(frozen=True)
class EdgeConfig:
    version: str | None = None
    rules: RuleSet = EMPTY_RULES
    domains: dict[str, str] = field(default_factory=dict)
    base_domain: str = ""

    @staticmethod
    def from_snapshot(snapshot: dict[str, Any]) -> EdgeConfig:
        return EdgeConfig(version=snapshot["version"],
                          rules=RuleSet.from_texts(snapshot.get("headers"), snapshot.get("redirects")),
                          domains={h.lower(): z for h, z in (snapshot.get("domains") or {}).items()},
                          base_domain=(snapshot.get("base_domain") or "").lower())

    def zone_for_host(self, host: str) -> str | None:
        """The tenant zone a Host header names: a custom domain, or `<zone>.<base domain>`."""
        name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
        if name in self.domains:
            return self.domains[name]
        suffix = "." + self.base_domain
        if self.base_domain and name.endswith(suffix):
            zone = name[: -len(suffix)]
            if ZONE_NAME.match(zone):
                return zone
        return None

    def cdn_path(self, host: str, path: str) -> str:
        """The CDN path a delivery request names: on a tenant host `/v1/...` means `/<zone>/v1/...`."""
        zone = self.zone_for_host(host)
        if zone and path.startswith("/v1/"):
            return f"/{zone}{path}"
        return path


def apply_header_rules(config: EdgeConfig, request: web.Request, response: web.StreamResponse) -> None:
    if not config.rules.headers or request.get(FORWARDED) or request.path in NOT_DELIVERY:
        return
    changes = config.rules.headers.for_path(request.path, request.host)
    if not changes:
        return
    for name in list(response.headers):
        if name.lower() in changes.remove:
            del response.headers[name]
    for name, value in changes.set.items():
        response.headers[name] = value
