"""The `[dashboard]` settings, read once: where the dashboard is used from, the passkey relying party,
the session cookie's lifetime and flags, and the sign-in failure limit.

The dashboard has an origin of its own (control's `server.dashboard_port`, assetcdn/control/identity/dashboard_origin.py),
apart from the edges' that serve stored files. Browsers refuse an IP address as a WebAuthn
relying-party id, so the default dashboard URL is http://localhost:<dashboard_port> (passkeys with rp id
`localhost`), and http://<host>:<dashboard_port> is allowed beside it for password sign-in.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from assetcdn.shared.config import Settings

DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_origin(text: str) -> str | None:
    """`scheme://host[:port]` in the form browsers send in `Origin` (lower case, default port
    dropped), or None when `text` is not an http(s) origin (a path, credentials or query included)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not host or parts.username is not None or parts.password is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    shown_host = f"[{host}]" if ":" in host else host
    if port is None or port == DEFAULT_PORTS[scheme]:
        return f"{scheme}://{shown_host}"
    return f"{scheme}://{shown_host}:{port}"


def within_domain(host: str, domain: str) -> bool:
    return host == domain or host.endswith("." + domain)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class DashboardConfig:
    origins: tuple[str, ...]       # canonical origins allowed for session changes and passkey ceremonies
    rp_id: str
    rp_name: str
    secure_cookies: bool
    session_ttl_s: int
    login_max_failures: int
    login_window_s: int

    @classmethod
    def from_settings(cls, settings: Settings, dashboard_url: str) -> DashboardConfig:
        """``dashboard_url``: where the dashboard is opened (assetcdn/shared/dashboard_url.py)."""
        section = settings.section("dashboard")
        public = canonical_origin(dashboard_url)
        if public is None:
            raise ValueError(f"dashboard.public_url {dashboard_url!r} is not an http(s) URL")
        public_parts = urlsplit(public)
        public_host = public_parts.hostname or ""
        configured = [o for o in str(section["origins"]).split(",") if o.strip()]
        if configured:
            origins: list[str] = []
            for text in configured:
                origin = canonical_origin(text)
                if origin is None:
                    raise ValueError(f"[dashboard] origins: {text.strip()!r} is not an origin "
                                     "(scheme://host[:port], no path)")
                origins.append(origin)
        else:
            origins = [public]
            port = f":{public_parts.port}" if public_parts.port else ""
            if _is_ip(public_host):
                origins.append(f"{public_parts.scheme}://localhost{port}")
            server_host = str(settings.get("server", "host"))
            if public_host == "localhost" and not section["public_url"] and _is_ip(server_host):
                shown = f"[{server_host}]" if ":" in server_host else server_host
                origins.append(f"{public_parts.scheme}://{shown}{port}")
        rp_id = str(section["passkey_rp_id"]).strip().lower() or (
            "localhost" if _is_ip(public_host) else public_host)
        if _is_ip(rp_id.strip("[]")):
            raise ValueError(f"[dashboard] passkey_rp_id {rp_id!r}: browsers refuse an IP address as a "
                             "relying-party id; use a domain name (or localhost)")
        for name in ("session_ttl_s", "login_max_failures", "login_window_s"):
            if int(section[name]) < 1:
                raise ValueError(f"[dashboard] {name} must be at least 1")
        return cls(origins=tuple(dict.fromkeys(origins)), rp_id=rp_id, rp_name=str(section["passkey_rp_name"]),
                   secure_cookies=bool(section["secure_cookies"]), session_ttl_s=int(section["session_ttl_s"]),
                   login_max_failures=int(section["login_max_failures"]),
                   login_window_s=int(section["login_window_s"]))

    @property
    def passkey_origins(self) -> tuple[str, ...]:
        """The origins on the relying party's domain: the only ones a browser runs its ceremonies on."""
        return tuple(o for o in self.origins if within_domain(urlsplit(o).hostname or "", self.rp_id))

    def allows_origin(self, origin: str | None) -> bool:
        return origin is not None and canonical_origin(origin) in self.origins

    def cookie_dropped_on(self, origin: str) -> bool:
        """Whether a browser on `origin` drops the session cookie: it is Secure, and browsers keep a Secure cookie
        set over plain HTTP only on localhost (and its subdomains) and loopback addresses."""
        parts = urlsplit(origin)
        if not self.secure_cookies or parts.scheme != "http":
            return False
        host = (parts.hostname or "").lower()
        if within_domain(host, "localhost"):
            return False
        try:
            return not ipaddress.ip_address(host).is_loopback
        except ValueError:
            return True
