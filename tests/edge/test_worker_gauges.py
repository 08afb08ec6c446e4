"""The gauges an edge node's /metrics reads over its workers' files (assetcdn/shared/metrics.py), after the edge reaped
a worker that ended (assetcdn/edge/server.py `forget_live_gauges`). Each worker here is a process of its own that
sets its gauges in the node's multiprocess directory, as an edge worker does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

from assetcdn.edge.server import forget_live_gauges

WORKER = """
import os, sys
from assetcdn.shared.metrics import Metrics
metrics = Metrics("edge")
metrics.manifest_generation.labels("edge").set(int(sys.argv[1]))
metrics.body_spool_peak_bytes.labels("edge").set(int(sys.argv[2]))
print(os.getpid())
"""


def worker(metrics_dir: Path, generation: int, peak: int) -> int:
    """A worker that applied `generation` and whose forwarded bodies held `peak` bytes at most; its pid."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    done = subprocess.run([sys.executable, "-c", WORKER, str(generation), str(peak)], env=env, check=True,
                          capture_output=True, text=True, timeout=60)
    return int(done.stdout)


def node_metrics(metrics_dir: Path) -> dict[str, float]:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(metrics_dir))  # type: ignore[no-untyped-call]
    text = generate_latest(registry).decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name in ("assetcdn_manifest_generation", "assetcdn_edge_body_spool_peak_bytes")}


def test_a_reaped_workers_generation_leaves_the_node_and_its_peak_stays(tmp_path: Path) -> None:
    # Two workers at generation 7; one is killed (its peak, 5 MB, was the node's largest) and reaped; control's
    # history was then lost and numbers started again, so the workers hold generation 2. The node reported 7,
    # held by no running worker, for as long as the edge ran.
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    killed = worker(metrics_dir, 7, 5_000_000)
    forget_live_gauges(metrics_dir, killed)
    worker(metrics_dir, 2, 1_000)
    worker(metrics_dir, 2, 0)  # the killed worker's successor
    assert node_metrics(metrics_dir) == {"assetcdn_manifest_generation": 2,
                                         "assetcdn_edge_body_spool_peak_bytes": 5_000_000}
