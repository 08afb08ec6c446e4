"""The manifest's entries refusing to be passed over whole: an answer that must read only a directory's or a zone's
files (through the manifest's index, assetcdn/control/storage/directory_index.py) fails with a 500 otherwise."""

from __future__ import annotations

from typing import Any, NoReturn

from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import MANIFEST
from assetcdn.shared.manifest import ManifestEntry


class PassedOver(dict[str, ManifestEntry]):
    """The manifest's entries, look-ups only."""

    def _whole(self, *_args: Any) -> NoReturn:
        raise AssertionError("passed over the whole manifest")

    __iter__ = items = values = keys = _whole  # type: ignore[assignment]


class PassedOverOrder(list[ManifestEntry]):
    """One of the catalog's kept orders, slices and binary searches only."""

    def __iter__(self) -> NoReturn:
        raise AssertionError("passed over a whole order of the catalog")


def refuse_passes(control: TestClient, orders: bool = False) -> None:
    """From now on, control's manifest refuses to be passed over whole (until its next build at start); with `orders`,
    so do the catalog's orders of every file (assetcdn/control/storage/catalog_orders.py) until a change of more files
    than are moved in place."""
    manifest = control.app[MANIFEST]
    manifest.entries = PassedOver(manifest.entries)
    if orders:
        whole = manifest.catalog._whole
        for sort, order in whole.items():
            whole[sort] = PassedOverOrder(order)
