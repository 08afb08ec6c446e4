"""Suite-wide fixtures and the run order. Module-specific fixtures live beside their tests."""

from pathlib import Path

import pytest

# `make test` hands out whole files (--dist loadfile --no-loadscope-reorder) in the order below: the
# longest files first (the slowest of a full run's per-file times: mostly waiting on real processes), then
# every other file that starts real processes, then the rest. The long ones then overlap with the many short files
# instead of being the last to run while the other workers sit idle.
LONGEST_FIRST = (
    "integration/test_shutdown.py", "integration/test_https_acme.py", "control/acme/test_certificates.py",
    "test_openapi_fuzz.py", "integration/test_shared_counters.py", "edge/routes/test_transform.py",
    "edge/transform/test_decoded.py", "integration/test_faults_kill_control.py", "integration/test_demo_content.py",
    "browser/test_hls_playback.py", "browser/test_dashboard_browser.py", "integration/test_hostile_clients.py",
    "edge/transform/test_steps.py", "browser/test_https_acme_page.py", "integration/test_edge_cluster.py",
    "edge/tls/test_https_shutdown.py", "edge/test_image_pool.py", "integration/test_wheel_install.py",
    "control/video/test_transcode.py",
)
REAL_PROCESSES_FIRST = ("integration/", "browser/", "edge/tls/", "edge/transform/", "control/acme/")
TESTS = Path(__file__).parent


def _run_order(item: pytest.Item) -> int:
    path = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
    if path in LONGEST_FIRST:
        return LONGEST_FIRST.index(path)
    return len(LONGEST_FIRST) + (0 if path.startswith(REAL_PROCESSES_FIRST) else 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_run_order)  # stable: a file's tests stay together and in their order
