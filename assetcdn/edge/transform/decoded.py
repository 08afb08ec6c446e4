"""Decoded sources an image worker keeps between jobs, so one picture is decoded once for its variants.

A page with responsive images asks for one picture at six widths in two or three formats; every
one of those misses would otherwise decode the same source again. Each worker process keeps a
bounded LRU of sources already decoded (8-bit sRGB, colour-managed, in memory), keyed by the
SHA-256 of the source's bytes (the manifest's, which the edge verified the bytes against, sent
with the job; hashed in the worker only when a caller has none), their length, and the
shrink-on-load level they were decoded at: JPEG decodes at
1/1, 1/2, 1/4 or 1/8 of its size and WebP at any scale, so a 320 px variant of a 4000 px photo
decodes 1,000 px of it, and a later 960 px one decodes again at a larger level. A variant is
made from the smallest kept level that still has the pixels it needs (a larger one serves a
smaller variant: resizing from memory costs less than decoding again). A source asked for at a
larger level than it is kept at is decoded a second time at the whole size (level 1) when that
fits, replacing its smaller decodes: at most two decodes per picture whatever order its srcset
arrives in, and a single small variant still decodes only what it needs. Entries are counted by
their pixels' bytes; the cache never holds more than its bound (an entry larger than the
bound is not kept at all).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyvips

# Shrink-on-load levels, largest first, with libvips' own rule for choosing one: leave at least a
# factor of two to the lanczos3 resize after the block shrink, which alone would alias.
LEVELS = (8, 4, 2, 1)
SCALED_DECODE_FORMATS = frozenset({"jpeg", "webp"})


def level_for(source_format: str, source_size: tuple[int, int], target: tuple[int, int] | None) -> int:
    """The shrink-on-load level to decode `source_size` at to make `target` (None: the whole source)."""
    if target is None or source_format not in SCALED_DECODE_FORMATS:
        return 1
    factor = min(source_size[0] / max(target[0], 1), source_size[1] / max(target[1], 1))
    return next(level for level in LEVELS if factor >= 2 * level or level == 1)


def image_bytes(image: pyvips.Image) -> int:
    """What an image held in memory costs: its pixels."""
    sizes = {"uchar": 1, "char": 1, "ushort": 2, "short": 2, "uint": 4, "int": 4, "float": 4,
             "complex": 8, "double": 8, "dpcomplex": 16}
    return int(image.width * image.height * image.bands * sizes.get(image.format, 8))


@dataclass(frozen=True, slots=True)
class DecodedKey:
    digest: bytes     # SHA-256 of the source's bytes, then their length
    level: int        # shrink-on-load level it was decoded at


class DecodedSources:
    """A bounded LRU of decoded sources (one per worker process; never shared between threads)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(int(max_bytes), 0)
        self._entries: OrderedDict[DecodedKey, pyvips.Image] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def set_bound(self, max_bytes: int) -> None:
        self.max_bytes = max(int(max_bytes), 0)
        while self._entries and self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= image_bytes(evicted)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes, level: int) -> tuple[pyvips.Image, int] | None:
        """The kept decode of `digest` closest to `level` that is at least as large, with its level."""
        for candidate in (lv for lv in LEVELS if lv <= level):
            key = DecodedKey(digest, candidate)
            image = self._entries.get(key)
            if image is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return image, candidate
        self.misses += 1
        return None

    def holds_smaller(self, digest: bytes, level: int) -> bool:
        """Whether `digest` is kept only at levels smaller than `level` needs (a miss for it, not the first)."""
        return any(DecodedKey(digest, candidate) in self._entries for candidate in LEVELS if candidate > level)

    def put(self, digest: bytes, level: int, image: pyvips.Image) -> None:
        """Keep `image` (already in memory) in place of the source's smaller decodes, dropping the least
        recently used entries to stay in bounds."""
        cost = image_bytes(image)
        if cost > self.max_bytes:
            return
        for candidate in LEVELS:
            if candidate >= level:   # the same level, or a smaller decode this one now serves
                old = self._entries.pop(DecodedKey(digest, candidate), None)
                if old is not None:
                    self._bytes -= image_bytes(old)
        key = DecodedKey(digest, level)
        while self._entries and self._bytes + cost > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= image_bytes(evicted)
        self._entries[key] = image
        self._bytes += cost

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
