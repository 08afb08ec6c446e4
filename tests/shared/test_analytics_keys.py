"""The zone a delivery counts under is decided once, for the edge that counts it and control that keeps it."""

from __future__ import annotations

import pytest

from assetcdn.shared.analytics_keys import zone_of


@pytest.mark.parametrize(("path", "zone"), [
    ("akande/v1/logos/logo.svg", "akande"),
    ("/akande/v1/logos/logo.svg", "akande"),    # as a client's analytics call names it
    ("stocks/icons/star.svg", "stocks"),
    ("api/transform", "api"),
    ("", ""),
])
def test_the_zone_of_a_path_is_its_first_segment(path: str, zone: str) -> None:
    assert zone_of(path) == zone
