"""Which edge worker shields a pull zone URL (assetcdn/edge/shield.py): every edge picks the same one whatever
order it learnt the workers in, a worker joining or leaving moves only the URLs it wins or held, and an
``[origin] shield`` the edge could not use stops it at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assetcdn.edge.origin_client import OriginClient, OriginLimits
from assetcdn.edge.server import EXIT_BAD_CONFIG
from assetcdn.edge.shield import Peer, Shields, rendezvous
from assetcdn.edge.shield_address import shield_setting
from assetcdn.edge.states.keys import pull_key
from assetcdn.shared.config import load_settings
from tests.integration.harness import KEYS, free_port_block

KEYS_OF_URLS = [pull_key("site", f"/img/{i}.jpg", "") for i in range(3000)]
FLEET = tuple(Peer(f"edge-{node}/{worker}", f"http://10.0.0.{node}:{9788 + worker}")
              for node in range(4) for worker in range(2))


def shields(peers: tuple[Peer, ...]) -> dict[str, Peer | None]:
    return {key: rendezvous(key, peers) for key in KEYS_OF_URLS}


def test_every_edge_picks_the_same_shield_whatever_the_order_of_its_list() -> None:
    assert shields(FLEET) == shields(tuple(reversed(FLEET)))
    assert len(set(shields(FLEET).values())) == len(FLEET)  # every worker shields some URLs


def test_a_worker_joining_takes_only_urls_and_one_leaving_gives_away_only_its_own() -> None:
    before = shields(FLEET)
    joined = Peer("edge-9/0", "http://10.0.0.9:9788")
    after = shields((*FLEET, joined))
    moved = {key for key in KEYS_OF_URLS if after[key] != before[key]}
    assert moved and all(after[key] == joined for key in moved)
    left = FLEET[3]
    without = shields(tuple(peer for peer in FLEET if peer != left))
    assert {key for key in KEYS_OF_URLS if without[key] != before[key]} == \
        {key for key in KEYS_OF_URLS if before[key] == left}


@pytest.mark.parametrize("siblings", [True, False])
def test_a_worker_fills_what_its_own_edge_shields_and_asks_other_edges(siblings: bool) -> None:
    """The URLs the fleet's choice gives to another worker of this edge (edge-1) are this worker's to fetch (None: it
    asks the origin itself, with `[origin] shield_siblings` taking turns with that worker by the edge's fill lock),
    never asked of that worker; those of other edges' workers still go to them. Only the shared fills follow the
    setting."""
    settings = load_settings(environ={"ASSETCDN_ORIGIN_SHIELD_SIBLINGS": str(siblings).lower()})
    here = Shields(settings, "edge-1/0", "secret", OriginClient(OriginLimits()), lambda: tuple(
        (peer.name, peer.url) for peer in FLEET), lambda: 1)
    chosen = {key: rendezvous(key, FLEET) for key in KEYS_OF_URLS}
    by_sibling = [key for key, peer in chosen.items() if peer is not None and peer.name == "edge-1/1"]
    elsewhere = [key for key, peer in chosen.items() if peer is not None and not peer.name.startswith("edge-1/")]
    assert by_sibling and elsewhere
    assert {here.shield_for(key) for key in by_sibling} == {None}
    assert here.shares_fills is siblings
    assert all(here.shield_for(key) == chosen[key] for key in elsewhere)
    assert all(here.shield_for(key) is None for key, peer in chosen.items() if peer == FLEET[2])  # its own


@pytest.mark.parametrize("shield", ["off", "http://10.0.0.21:9788"])
def test_the_workers_of_an_edge_share_fills_only_with_the_fleets_choice(shield: str) -> None:
    """With shielding off every worker asks the origin itself, as the setting says; with a configured shield the
    workers ask it (maybe a worker of this very edge, which must not wait for the worker that asks it)."""
    settings = load_settings(environ={"ASSETCDN_ORIGIN_SHIELD": shield})
    here = Shields(settings, "edge-1/0", "secret", OriginClient(OriginLimits()), lambda: tuple(
        (peer.name, peer.url) for peer in FLEET), lambda: 1)
    assert here.shares_fills is False


@pytest.mark.parametrize("value", ["ftp://10.0.0.21:9788", "10.0.0.21:9788", "http://10.0.0.21:9788/path",
                                   "http://user@10.0.0.21:9788", "on", "http://10.0.0.21:9788?",
                                   "http://10.0.0.21:9788#", "http://10 .0.0.21:9788", "http://10.0.0.21:0",
                                   "http://:pw@10.0.0.21:9788"])
def test_a_shield_setting_that_is_no_cluster_address_stops_the_edge(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match=r"\[origin\] shield"):
        shield_setting(value)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_ORIGIN_SHIELD": value}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(free_port_block(1)), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert "[origin] shield" in done.stderr


@pytest.mark.parametrize(("value", "kept"), [("", ""), ("off", "off"), ("http://10.0.0.21:9788/", "http://10.0.0.21:9788")])
def test_the_shield_settings_an_edge_starts_with(value: str, kept: str) -> None:
    assert shield_setting(value) == kept


async def test_a_catch_up_keeps_an_invalidation_remembered_again_while_it_was_being_told() -> None:
    """A catch-up tells a shield the path it missed; meanwhile a newer write of that path fails to reach the shield
    (remembered again). The catch-up's success answers the older write only: the path stays owed."""
    settings = load_settings(environ={"ASSETCDN_ORIGIN_SHIELD": "http://10.0.0.21:9788"})  # never connected to
    shields = Shields(settings, "edge-0/0", "secret", OriginClient(OriginLimits()), lambda: (), lambda: 1)
    peer = shields.shield_for("path:site/doc.txt")
    assert peer is not None
    shields._remember(peer, ["path:site/doc.txt"])
    told: list[list[str]] = []

    async def tell(to: Peer, tags: list[str]) -> bool:
        told.append(tags)
        if not told[1:]:  # the newer write's message failed meanwhile: as `_tell` does then
            shields._mark_down(to, "the newer message failed")
            shields._remember(to, ["path:site/doc.txt"])
        return True

    shields._tell = tell  # type: ignore[method-assign,assignment]
    await shields._tell_untold(peer)
    assert told == [["path:site/doc.txt"]]
    assert "path:site/doc.txt" in shields._untold[peer.url]
