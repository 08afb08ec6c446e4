"""A manifest generation on its way to the edges: one typed message for a push and a catch-up answer,
the same on the wire as before it had a type, and refused whole when it is malformed."""

from __future__ import annotations

from typing import Any

import pytest

from assetcdn.shared.generation_push import (
    GenerationPush,
    GenerationPushError,
    PushedChange,
    PushedPurge,
)
from assetcdn.shared.manifest import ManifestChange, make_entry

LOGO = make_entry("akande/v1/logos/logo.svg", 120, "a" * 64, "b" * 40, "2026-04-04T12:00:00.000Z")
BANNER = make_entry("akande/v1/banners/top.png", 4096, "c" * 64, "d" * 40, "2026-04-04T12:00:00.000Z")
ADDED = ManifestChange(LOGO.path, LOGO)
REMOVED = ManifestChange(BANNER.path, None, BANNER.tags)


def test_a_push_of_one_generation_round_trips() -> None:
    push = GenerationPush.of_generation(8, "e" * 40, "44bb2e9930cdc822", [ADDED, REMOVED], {"tags": ["type-logos"]})
    assert push.changes == (PushedChange(8, ADDED), PushedChange(8, REMOVED))
    assert push.purges == (PushedPurge(8, tags=("type-logos",)),)
    assert GenerationPush.from_json(push.to_json()) == push


def test_a_catch_up_answer_and_a_snapshot_round_trip() -> None:
    delta = GenerationPush(9, "e" * 40, "v", (PushedChange(7, ADDED),),
                           (PushedPurge(8, urls=("https://cdn.example/akande/v1/logos/logo.svg",)),
                            PushedPurge(9, everything=True)), tls_serial=3)
    snapshot = GenerationPush(9, "e" * 40, "v", entries=(LOGO, BANNER), tls_serial=0)
    for message in (delta, snapshot):
        assert GenerationPush.from_json(message.to_json()) == message
    assert snapshot.full and not delta.full


def test_a_prefix_purge_and_a_soft_purge_round_trip() -> None:
    push = GenerationPush.of_generation(8, None, "v", [], {"prefixes": ["/shop/img/"], "soft": True})
    assert push.purges == (PushedPurge(8, prefixes=("/shop/img/",), soft=True),)
    assert push.to_json()["purges"] == [{"prefixes": ["/shop/img/"], "soft": True, "generation": 8}]
    assert GenerationPush.from_json(push.to_json()) == push
    with pytest.raises(GenerationPushError, match="everything or soft"):
        GenerationPush.from_json({**push.to_json(), "purges": [{"tags": ["a"], "soft": "yes"}]})


def test_a_tag_purge_scoped_to_a_zone_round_trips_and_one_without_a_zone_is_unscoped() -> None:
    push = GenerationPush.of_generation(8, None, "v", [], {"tags": ["home"], "zone": "shop", "soft": True})
    assert push.purges == (PushedPurge(8, tags=("home",), soft=True, zone="shop"),)
    assert push.to_json()["purges"] == [{"tags": ["home"], "zone": "shop", "soft": True, "generation": 8}]
    assert GenerationPush.from_json(push.to_json()) == push
    # A message of a control that had no scope (or an unscoped purge) names no zone: every zone's copies.
    unscoped = GenerationPush.from_json({"generation": 8, "commit": None, "purges": [{"tags": ["home"]}]})
    assert unscoped.purges == (PushedPurge(8, tags=("home",)),) and unscoped.purges[0].zone is None
    assert "zone" not in unscoped.to_json()["purges"][0]


def test_the_wire_form_is_what_control_sent_before_the_type() -> None:
    answer = GenerationPush(9, "e" * 40, "v", (PushedChange(7, ADDED),), (PushedPurge(8, tags=("type-logos",)),),
                            tls_serial=3).to_json()
    assert answer == {"v": 1, "generation": 9, "commit": "e" * 40, "full": False, "config_version": "v",
                      "tls_serial": 3, "changes": [{**ADDED.to_json(), "generation": 7}],
                      "purges": [{"tags": ["type-logos"], "generation": 8}]}


def test_a_push_without_the_fields_an_older_control_did_not_send_reads_as_it_meant() -> None:
    # No version, no `full`, items without their generation: a delta whose items are all of its generation.
    old = {"generation": 8, "commit": None, "changes": [ADDED.to_json()], "purges": [{"everything": True}]}
    assert GenerationPush.from_json(old) == GenerationPush(8, None, None, (PushedChange(8, ADDED),),
                                                           (PushedPurge(8, everything=True),))


def _push(**fields: Any) -> dict[str, Any]:
    return {**GenerationPush.of_generation(8, "e" * 40, "v", [ADDED], {"tags": ["type-logos"]}).to_json(), **fields}


def _entry(**fields: Any) -> dict[str, Any]:
    return {**LOGO.to_json(), **fields}


@pytest.mark.parametrize(("message", "says"), [
    ([], "JSON object"),
    (_push(v=2), "version 2"),
    (_push(v=True), "version True"),
    (_push(generation=None), "generation"),
    (_push(generation="8"), "generation"),
    (_push(generation=-1), "generation"),
    (_push(generation=True), "generation"),
    (_push(commit=7), "commit"),
    (_push(config_version=["v"]), "config_version"),
    (_push(full="no"), "full"),
    (_push(tls_serial=1.5), "tls_serial"),
    (_push(changes={"path": LOGO.path}), "changes"),
    (_push(changes=[{"entry": None}]), "path"),
    (_push(changes=[{"path": LOGO.path, "entry": _entry(size="120")}]), "size"),
    (_push(changes=[{"path": LOGO.path, "entry": _entry(tags="project-akande")}]), "tags"),
    (_push(changes=[{"path": LOGO.path, "entry": _entry(sha256=None)}]), "must be text"),
    (_push(changes=[{"path": LOGO.path, "entry": None, "previous_tags": [1]}]), "previous_tags"),
    (_push(changes=[{**ADDED.to_json(), "generation": 9}]), "change of generation 9 in a push of generation 8"),
    (_push(purges=[["type-logos"]]), "purge command"),
    (_push(purges=[{"tags": "type-logos"}]), "tags"),
    (_push(purges=[{"urls": [None]}]), "urls"),
    (_push(purges=[{"everything": 1}]), "everything"),
    (_push(purges=[{"tags": ["home"], "zone": ["shop"]}]), "zone is not a zone name"),
    (_push(purges=[{"tags": ["home"], "zone": ""}]), "zone is not a zone name"),
    (_push(purges=[{"urls": ["/shop/a.txt"], "zone": "shop"}]), "zone scopes tags only"),
    (_push(purges=[{"everything": True, "zone": "shop"}]), "zone scopes tags only"),
    (_push(purges=[{"tags": ["home"], "prefixes": ["/shop/"], "zone": "shop"}]), "zone scopes tags only"),
    (_push(full=True), "entries"),
    (_push(full=True, entries=[_entry()]), "not changes or purges"),
    (_push(full=True, changes=[], purges=[], entries=[{**_entry(), "size": None}]), "size"),
])
def test_a_malformed_push_is_refused_with_what_is_wrong(message: object, says: str) -> None:
    with pytest.raises(GenerationPushError, match=says):
        GenerationPush.from_json(message)
