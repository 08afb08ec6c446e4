"""What the edge forwards to control arrives as the client sent it."""

from __future__ import annotations

from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import ACCESS


async def test_an_oversize_upload_through_the_edge_is_refused_from_its_content_length(
        make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_CONTROL_MAX_UPLOAD_BYTES="1000")
    resp = await cdn.edge.put(f"/api/storage/{ZONE}/v1/logos/big.bin", data=b"x" * 5000, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 413
    assert "5000 bytes" in body["Message"]  # sized from Content-Length, before the body is read
    assert body["MaxSize"] == 1000
