"""A cache entry's metadata: what it was stored with comes back whole, however it is held."""

from __future__ import annotations

import pytest

from assetcdn.edge.cache.entry import CachedObject


@pytest.mark.parametrize("value", ["max-age=60", "odd\0value"])  # packed in one string, or kept as tuples
def test_fields_give_what_the_properties_give(value: str) -> None:
    obj = CachedObject(key="k", content_type="image/png", etag='"e"', tags=("a", "b"), size=1, stored_at=1.0,
                       body=b"x", headers=(("cache-control", value), ("x-one", "1")))
    assert obj.fields() == (obj.content_type, obj.etag, obj.tags, obj.headers)
    assert obj.fields() == ("image/png", '"e"', ("a", "b"), (("cache-control", value), ("x-one", "1")))
    bare = CachedObject(key="k", content_type="", etag="", tags=(), size=1, stored_at=1.0, body=b"x")
    assert bare.fields() == ("", "", (), ())


@pytest.mark.parametrize("tags", [(), ("a",), ("a", "b", "c")])
@pytest.mark.parametrize("headers", [(), (("x-one", "1"),), (("cache-control", "max-age=60"), ("etag", '"e"'))])
def test_tags_and_headers_come_back_whatever_their_counts(tags: tuple[str, ...],
                                                          headers: tuple[tuple[str, str], ...]) -> None:
    obj = CachedObject(key="k", content_type="text/plain", etag='"e"', tags=tags, size=1, stored_at=1.0, body=b"x",
                       headers=headers)
    assert (obj.tags, obj.headers, obj.content_type, obj.etag) == (tags, headers, "text/plain", '"e"')
