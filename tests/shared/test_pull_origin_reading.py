"""Origins as control stores them and edges read them (assetcdn/shared/pull_origin.py): the zones API's checks
grow (`parse_new_origin`), and what an older check let through is still read (`parse_origin`)."""

from __future__ import annotations

from typing import Any

import pytest

from assetcdn.shared.published_config import PublishedConfig
from assetcdn.shared.pull_origin import OriginProblem, parse_new_origin, parse_origin


@pytest.mark.parametrize("stored", [
    {"Url": "http://127.0.0.1:8080", "RequestHeaders": {"X_Forwarded_For": "a"}},
    {"Url": "http://127.0.0.1:8080", "RequestHeaders": {"X-A": "a", "x-a": "b"}},
    {"Url": "http://127.0.0.1:8080", "HostHeader": "localhost:0"},
    {"Url": "http://[::1%25lo]:8080"},
    {"Url": "https://" + "a." * 125 + "example"},
    {"Url": "http://127.0.0.1:8080", "HostHeader": "a." * 125 + "example"},
    {"Url": "http://127.0.0.1:8080", "RequestHeaders": {"X-Origin-Secret": "(set)"}},
    {"Url": "http://127.0.0.1:8080", "RequestHeaders": {"Proxy-Authorization": "Basic dXNlcjpwYXNz"}},
    {"Url": "http://127.0.0.1:8080", "RequestHeaders": {"Request-Range": "bytes=0-99"}},
])
def test_an_origin_accepted_before_a_check_was_added_is_still_read_as_stored_and_published(
        stored: dict[str, Any]) -> None:
    """What the zones API refuses now, control stored before and published to the edges: reading it back must
    not fail, or no zone's config could be listed or published, nor taken by an edge."""
    with pytest.raises(OriginProblem):
        parse_new_origin(stored)
    origin = parse_origin(stored)
    published = PublishedConfig.from_json({**PublishedConfig("v1").to_json(), "origins": {"kept": origin.to_json()}})
    assert published.origins["kept"] == origin
