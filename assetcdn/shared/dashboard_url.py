"""Where the dashboard is opened: what control checks sign-ins and passkeys against, and what
`assetcdn up` prints, so the two never disagree."""

from __future__ import annotations

import ipaddress

from assetcdn.shared.config import Settings


def dashboard_url(settings: Settings) -> str:
    """``dashboard.public_url``, else http://localhost:<dashboard_port> for a loopback or IP host (browsers
    allow passkeys on `localhost`, never on an IP address), else http://<host>:<dashboard_port>."""
    if configured := settings.get("dashboard", "public_url"):
        return str(configured).rstrip("/")
    host = settings.get("server", "host")
    try:
        ipaddress.ip_address(host)
        host = "localhost"
    except ValueError:
        pass
    return f"http://{host}:{settings.get('server', 'dashboard_port')}"
