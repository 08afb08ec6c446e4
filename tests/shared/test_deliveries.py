"""What counts as a delivery is defined once, for the edge (rules, delivery log) and control (top assets)."""

import pytest

from assetcdn.shared.deliveries import is_asset_delivery, is_delivery


@pytest.mark.parametrize(("path", "forwarded", "expected"), [
    ("/akande/v1/logos/logo.svg", False, True),
    ("/api/transform", False, True),          # the edge's own answer: rules apply, the log keeps it
    ("/api/upload", True, False),             # forwarded to control: control's answer, not a delivery
    ("/api/health", False, False),
    ("/metrics", False, False),
    ("/_cluster/push", False, False),
    ("/.well-known/acme-challenge/token", False, False),  # the edge's answer to a CA: no `_headers` rule applies
])
def test_a_request_is_a_delivery_when_the_edge_answers_it_from_its_own_routes(
        path: str, forwarded: bool, expected: bool) -> None:
    assert is_delivery(path, forwarded=forwarded) is expected


@pytest.mark.parametrize(("status", "path", "expected"), [
    (200, "akande/v1/logos/logo.svg", True),
    (206, "akande/v1/video/a.mp4", True),
    (304, "akande/v1/logos/logo.svg", True),
    (404, "akande/v1/logos/missing.svg", False),
    (302, "akande/old", False),
    (200, "api/transform", False),            # a delivery, but not of a file: not a top asset
    (200, "", False),
])
def test_top_assets_count_deliveries_of_files_only(status: int, path: str, expected: bool) -> None:
    assert is_asset_delivery(status, path) is expected
