"""The feeds of fills' first clients (assetcdn/edge/states/feed.py `ClientFeed`) that an in-process edge makes,
recorded for a test, and whether one has sent its client all it was given and waits for its fill."""

from __future__ import annotations

from typing import Any

import pytest

from assetcdn.edge.states import pull as pull_states
from assetcdn.edge.states.feed import ClientFeed


def record_feeds(monkeypatch: pytest.MonkeyPatch) -> list[ClientFeed]:
    """The feeds the edge's fills make from now on (`pull.keep`), in order, until the test ends."""
    made: list[ClientFeed] = []

    class Recorded(ClientFeed):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(pull_states, "ClientFeed", Recorded)
    return made


def waits_for_its_fill(feed: ClientFeed) -> bool:
    """Whether `feed` sent its client all it was given and its task waits for the fill's next chunk (or its end):
    a lagging client's feed is given nothing more until the fill ends."""
    more = feed._more  # the feed's task's wait, which nothing else shows
    return not feed._items and more is not None and not more.done()
