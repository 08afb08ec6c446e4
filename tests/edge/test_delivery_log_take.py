"""Delivery-log batches: one dict per entry, HIT_FIELDS in order, at most BATCH per batch, oldest first."""

from __future__ import annotations

from assetcdn.edge.delivery_log import BATCH, HIT_FIELDS, DeliveryLog


def test_take_makes_dicts_of_hit_fields_in_order_and_at_most_a_batch() -> None:
    log = DeliveryLog("cf-ipcountry", node="edge-0")
    entries = [(float(i), f"z/v1/{i}.txt", "z", 200, i, "HIT", "FR", "GET", f"id-{i}", "127.0.0.1")
               for i in range(BATCH + 3)]
    log.buffer.extend(entries)
    first = log.take()
    assert len(first) == BATCH
    assert [list(item) for item in first[:2]] == [list(HIT_FIELDS)] * 2
    assert [tuple(item.values()) for item in first] == entries[:BATCH]
    assert [tuple(item.values()) for item in log.take()] == entries[BATCH:]
    assert log.take() == []
