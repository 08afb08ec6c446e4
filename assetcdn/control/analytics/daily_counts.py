"""A batch of adds to the daily counters, keyed as the tables are (assetcdn/control/analytics/tables.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable

from assetcdn.control.analytics.hits import MAX_HIT_BYTES, UNKNOWN_ZONE, Hit
from assetcdn.control.analytics.tables import CACHE_COLUMN, OTHER_PATH, stored_path, utc_day
from assetcdn.shared.analytics_keys import UNKNOWN_COUNTRY
from assetcdn.shared.deliveries import is_asset_delivery


class DailyCounts:
    """What one write adds to the daily counters, keyed as the tables are: built from single hits
    (``add_hit``) or from an edge's rollups (``add_zone``, ``add_path``, ``add_country``), so a write's
    work grows with its distinct keys, not with the hits they count."""

    __slots__ = ("zones", "paths", "countries", "errors")

    def __init__(self) -> None:
        # (date, zone) -> hits, bytes, HIT, MISS, STALE, BYPASS
        self.zones: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
        # (date, zone, path) -> requests, bytes, asset deliveries
        self.paths: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        self.countries: dict[tuple[str, str, str], int] = defaultdict(int)
        self.errors: dict[tuple[str, str, int, str], int] = defaultdict(int)

    def __bool__(self) -> bool:
        return bool(self.zones or self.paths or self.countries)

    def add_zone(self, day: str, zone: str, cache: str, requests: int, size: int) -> None:
        counters = self.zones[(day, zone)]
        counters[0] += requests
        counters[1] += size
        counters[2 + CACHE_COLUMN.get(cache, 1)] += requests

    def add_path(self, day: str, zone: str, path: str | None, status: int, requests: int, size: int) -> None:
        """``path`` None: the zone's "other" row, paths not named (an edge's own cap)."""
        stored = OTHER_PATH if path is None else stored_path(path)
        counters = self.paths[(day, zone, stored)]
        counters[0] += requests
        counters[1] += size
        if path is not None and is_asset_delivery(status, stored):
            counters[2] += requests
        if status >= 400:
            self.errors[(day, zone, status, stored)] += requests

    def in_zones(self, zones: Collection[str]) -> DailyCounts:
        """These counts with every zone not in ``zones`` as ``UNKNOWN_ZONE``, whose paths are all "other"."""
        if all(zone in zones for _, zone in self.zones) and all(zone in zones for _, zone, _ in self.paths) \
                and all(zone in zones for _, zone, _ in self.countries):
            return self
        counts = DailyCounts()
        for (day, zone), values in self.zones.items():
            counters = counts.zones[(day, zone if zone in zones else UNKNOWN_ZONE)]
            for index, value in enumerate(values):
                counters[index] += value
        for (day, zone, path), values in self.paths.items():
            known = zone in zones
            counters = counts.paths[(day, zone, path) if known else (day, UNKNOWN_ZONE, OTHER_PATH)]
            counters[0] += values[0]
            counters[1] += values[1]
            counters[2] += values[2] if known else 0
        for (day, zone, country), count in self.countries.items():
            counts.countries[(day, zone if zone in zones else UNKNOWN_ZONE, country)] += count
        for (day, zone, status, path), count in self.errors.items():
            key = (day, zone, status, path) if zone in zones else (day, UNKNOWN_ZONE, status, OTHER_PATH)
            counts.errors[key] += count
        return counts

    def fold_paths(self, day: str, zone: str, paths: Collection[str]) -> None:
        """Count ``paths`` of a zone's day (and their errors) in its "other" row."""
        other = self.paths[(day, zone, OTHER_PATH)]
        for path in paths:
            values = self.paths.pop((day, zone, path))
            other[0] += values[0]
            other[1] += values[1]
        for key in [key for key in self.errors if key[0] == day and key[1] == zone and key[3] in paths]:
            self.errors[(day, zone, key[2], OTHER_PATH)] += self.errors.pop(key)

    def fold_errors(self, day: str, zone: str, keys: Iterable[tuple[int, str]]) -> None:
        """Count the (status, path) error rows ``keys`` of a zone's day in its "other" row of that status."""
        for status, path in keys:
            self.errors[(day, zone, status, OTHER_PATH)] += self.errors.pop((day, zone, status, path))

    def add_country(self, day: str, zone: str, country: str, requests: int) -> None:
        country = country.upper() if len(country) == 2 and country.isalpha() else UNKNOWN_COUNTRY
        self.countries[(day, zone, country)] += requests

    def merge(self, other: DailyCounts) -> None:
        for zone_key, values in other.zones.items():
            counters = self.zones[zone_key]
            for index, value in enumerate(values):
                counters[index] += value
        for path_key, values in other.paths.items():
            counters = self.paths[path_key]
            for index, value in enumerate(values):
                counters[index] += value
        for country_key, count in other.countries.items():
            self.countries[country_key] += count
        for error_key, count in other.errors.items():
            self.errors[error_key] += count

    def add_hit(self, hit: Hit) -> None:
        day = utc_day(hit.timestamp).isoformat()
        size = max(0, min(int(hit.bytes), MAX_HIT_BYTES))  # callers validate; the store clamps anyway
        self.add_zone(day, hit.zone, hit.cache.upper(), 1, size)
        self.add_path(day, hit.zone, hit.path, hit.status, 1, size)
        self.add_country(day, hit.zone, hit.country, 1)
