"""What both processes' servers are started with (assetcdn/shared/http_server.py): the header deadline and the
grace requests in flight get when the process stops, both from the settings."""

from __future__ import annotations

from assetcdn.shared.config import load_settings
from assetcdn.shared.http_server import server_options


def test_the_stop_grace_of_requests_in_flight_is_the_setting() -> None:
    assert server_options(load_settings(environ={}))["shutdown_timeout"] == 3.0
    shortened = load_settings(environ={"ASSETCDN_SERVER_SHUTDOWN_GRACE_S": "0.25"})
    assert server_options(shortened)["shutdown_timeout"] == 0.25


def test_the_header_deadline_is_the_setting() -> None:
    options = server_options(load_settings(environ={"ASSETCDN_SERVER_HEADER_TIMEOUT_S": "7"}))
    assert options["keepalive_timeout"] == 7.0
