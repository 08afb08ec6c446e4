"""Counts kept outside the metrics (the edge's hit path) reach /metrics when the metrics flush."""

from __future__ import annotations

from prometheus_client import generate_latest

from assetcdn.shared.metrics import LATENCY_BUCKETS, Metrics


def sample(metrics: Metrics, name: str, *labels: str) -> float:
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(name) and all(label in line for label in labels):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_source_is_collected_on_every_flush_until_removed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics = Metrics("edge")
    pending = {"count": 3}

    def collect() -> None:
        if pending["count"]:
            observations: list[float] = [0] * (len(LATENCY_BUCKETS) + 2)
            observations[0] = pending["count"]
            observations[-1] = 0.0005 * pending["count"]
            metrics.add_requests("/{path}", "GET", "200", pending["count"])
            metrics.add_latencies("/{path}", observations)
            pending["count"] = 0

    metrics.add_source(collect)
    metrics.count_request("/{path}", "GET", "200", 0.002)  # the application's own count adds up with it
    metrics.render()
    assert sample(metrics, "assetcdn_requests_total", 'route="/{path}"', 'method="GET"', 'status="200"') == 4
    assert sample(metrics, "assetcdn_request_seconds_count", 'route="/{path}"') == 4
    assert sample(metrics, "assetcdn_request_seconds_bucket", 'route="/{path}"', 'le="0.001"') == 3
    assert sample(metrics, "assetcdn_request_seconds_sum", 'route="/{path}"') == 0.0015 + 0.002

    metrics.remove_source(collect)
    pending["count"] = 5
    metrics.flush()
    assert sample(metrics, "assetcdn_requests_total", 'route="/{path}"', 'status="200"') == 4
