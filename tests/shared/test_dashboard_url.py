"""Where the dashboard is opened: the address `assetcdn up` prints is the one control checks sign-ins against."""

from __future__ import annotations

import pytest

from assetcdn.shared.config import load_settings
from assetcdn.shared.dashboard_url import dashboard_url


@pytest.mark.parametrize(("environ", "url"), [
    ({"ASSETCDN_SERVER_HOST": "127.0.0.1", "ASSETCDN_SERVER_DASHBOARD_PORT": "8790"}, "http://localhost:8790"),
    ({"ASSETCDN_SERVER_HOST": "::1", "ASSETCDN_SERVER_DASHBOARD_PORT": "8790"}, "http://localhost:8790"),
    ({"ASSETCDN_SERVER_HOST": "cdn.internal", "ASSETCDN_SERVER_DASHBOARD_PORT": "8790"}, "http://cdn.internal:8790"),
    ({"ASSETCDN_DASHBOARD_PUBLIC_URL": "https://dash.example.com/"}, "https://dash.example.com"),
])
def test_an_ip_host_becomes_localhost_where_browsers_allow_passkeys(environ: dict[str, str], url: str) -> None:
    assert dashboard_url(load_settings(environ=environ)) == url
