"""Which CDN-Loop field values name a pull zone of this fleet (assetcdn/edge/cdn_loop.py; RFC 8586's syntax:
entries separated by commas, each a CDN's id and its parameters)."""

from __future__ import annotations

import pytest

from assetcdn.edge.cdn_loop import fleet_id, looped


@pytest.mark.parametrize(("values", "expected"), [
    (["assetcdn-abc; zone=img"], True),
    (["other, assetcdn-abc;zone=img;x=1"], True),
    (["other", 'ASSETCDN-ABC ; zone="img"'], True),
    (["assetcdn-abc; zone=img2"], False),
    (["assetcdn-abc"], False),
    (["assetcdn-abcd; zone=img"], False),
    (["zone=img; assetcdn-abc"], False),
    (["", ",,;", "assetcdn-abc; zone"], False),
])
def test_which_cdn_loop_values_name_a_zone_of_the_fleet(values: list[str], expected: bool) -> None:
    assert looped(values, "assetcdn-abc", "img") is expected


def test_the_fleet_id_is_the_same_for_one_secret_and_shows_nothing_of_it() -> None:
    assert fleet_id("secret-one") == fleet_id("secret-one") != fleet_id("secret-two")
    assert "secret" not in fleet_id("secret-one") and len(fleet_id("secret-one")) == len("assetcdn-") + 12
