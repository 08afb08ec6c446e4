"""The configuration control publishes to every edge besides the manifest, as both sides see it:
the `_headers` / `_redirects` rule files, the custom domains, the CDN's own hosts under the base domain and the
pull zones' origins (assetcdn/shared/pull_origin.py) (built by assetcdn/control/storage/edge_config_store.py,
applied by assetcdn/edge/site_config.py).

It crosses the wire (GET /api/cluster/config) and sits on an edge's disk as `to_json`; an edge parses
it once with `from_json`. Its version is a hash of its content, so an edge compares one string on
every push or catch-up and fetches the config only when it changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from assetcdn.shared.pull_origin import PullOrigin, parse_origin


@dataclass(frozen=True, slots=True)
class PublishedConfig:
    version: str
    headers: str | None = None      # the `_headers` file, None when the repository has none
    redirects: str | None = None    # the `_redirects` file
    domains: Mapping[str, str] = field(default_factory=dict)   # custom hostname -> zone
    base_domain: str = ""           # `<zone>.<base domain>` names a zone's tenant host ("" when unset)
    origins: Mapping[str, PullOrigin] = field(default_factory=dict)  # pull zone -> its origin
    # The CDN's own hosts that are `<label>.<base domain>` (the public URL's, the CNAME target's, ...): the default
    # host, never a zone's tenant host (sorted; empty when none is under the base domain).
    own_hosts: tuple[str, ...] = ()

    @staticmethod
    def build(*, headers: str | None, redirects: str | None, domains: Mapping[str, str],
              base_domain: str, origins: Mapping[str, PullOrigin] | None = None,
              own_hosts: tuple[str, ...] = ()) -> PublishedConfig:
        """The config of this content, with its version: the first 16 hex of the SHA-256 of its
        fields as sorted-key JSON (edges compare it as an opaque string)."""
        origins = dict(origins or {})
        body: dict[str, Any] = {"headers": headers, "redirects": redirects, "domains": dict(domains),
                                "base_domain": base_domain}
        if origins:  # a config without pull zones keeps the version it had before they existed
            body["origins"] = {zone: origin.to_json() for zone, origin in origins.items()}
        if own_hosts:  # likewise: a config with none keeps its version
            body["own_hosts"] = list(own_hosts)
        version = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
        return PublishedConfig(version=version, headers=headers, redirects=redirects, domains=dict(domains),
                               base_domain=base_domain, origins=origins, own_hosts=tuple(own_hosts))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": self.version, "headers": self.headers, "redirects": self.redirects,
                                "domains": dict(self.domains), "base_domain": self.base_domain}
        if self.origins:  # without pull zones, the form edges of before them read and wrote
            data["origins"] = {zone: origin.to_json() for zone, origin in self.origins.items()}
        if self.own_hosts:
            data["own_hosts"] = list(self.own_hosts)
        return data

    @staticmethod
    def from_json(data: object) -> PublishedConfig:
        """Parse what control sent (or an edge kept); ValueError on a malformed message. Fields a
        config written before they existed lacks take their empty value."""
        if not isinstance(data, dict):
            raise ValueError("the published config is not a JSON object")
        version, domains = data.get("version"), data.get("domains") or {}
        base_domain = data.get("base_domain") or ""
        headers, redirects = data.get("headers"), data.get("redirects")
        if not isinstance(version, str) or not version:
            raise ValueError("the published config has no version")
        if not all(text is None or isinstance(text, str) for text in (headers, redirects)):
            raise ValueError("the published config's rule files are not text")
        if not isinstance(domains, dict) or not all(isinstance(h, str) and isinstance(z, str)
                                                    for h, z in domains.items()):
            raise ValueError("the published config's domains are not a map of hostname to zone")
        if not isinstance(base_domain, str):
            raise ValueError("the published config's base domain is not text")
        origins = data.get("origins") or {}
        if not isinstance(origins, dict) or not all(isinstance(zone, str) for zone in origins):
            raise ValueError("the published config's origins are not a map of zone to origin")
        own_hosts = data.get("own_hosts") or []
        if not isinstance(own_hosts, list) or not all(isinstance(host, str) for host in own_hosts):
            raise ValueError("the published config's own hosts are not a list of hostnames")
        return PublishedConfig(version=version, headers=headers, redirects=redirects, domains=domains,
                               base_domain=base_domain,
                               origins={zone: parse_origin(origin) for zone, origin in origins.items()},
                               own_hosts=tuple(own_hosts))
