"""Suite-wide fixtures and the run order. Module-specific fixtures live beside their tests."""

import gc
import os
from pathlib import Path

import pytest

from assetcdn.shared.http_server import as_served

# Tests' temporary directories (tmp_path) in memory where the machine has a tmpfs with room: the suite makes
# and removes thousands of data directories (a git repository, SQLite files in WAL mode, caches), and on a
# disk each costs its file creations, syncs and deletes in kernel time. The controller reads this before it
# hands each xdist worker its directory; a root chosen by the caller is kept.
MEMORY_TEMPROOT = Path("/dev/shm")
MEMORY_TEMPROOT_MIN_FREE = 4 * 1024 ** 3  # a container's default /dev/shm (64 MB) would fill


def _memory_temproot() -> None:
    if "PYTEST_DEBUG_TEMPROOT" in os.environ or not os.access(MEMORY_TEMPROOT, os.W_OK | os.X_OK):
        return
    stats = os.statvfs(MEMORY_TEMPROOT)
    if stats.f_bavail * stats.f_frsize >= MEMORY_TEMPROOT_MIN_FREE:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMPROOT)


_memory_temproot()

# aiohttp as the edge and control processes run it (assetcdn/shared/http_server.py `as_served`), in every test
# process from its start: set only by the modules that start an edge's hit site, a test's servers ran one way or
# the other by which module a worker ran before (a silent test server's close then waited out aiohttp's shutdown
# for a half-closed client's pending answer, 120 s).
as_served()

# `make test` hands out whole files (--dist loadfile --no-loadscope-reorder) in the order below: the longest
# files first (the slowest per-file times of the suite, the files that wait on real time or real processes among
# them), then every other file that starts real processes, each followed by one that does not
# (`pytest_collection_modifyitems`), then the rest. The long ones then overlap with the many short files instead
# of being the last to run while the other workers sit idle. Among the long ones, files that mostly wait on
# processes (shutdowns, ACME, browsers: "waits") alternate with files that keep a core busy ("CPU"): four
# waiting files side by side left the two cores 15-22 % idle for tens of seconds.
LONGEST_FIRST = (
    "control/acme/test_certificates.py",            # waits
    "edge/transform/test_decoded.py",               # CPU
    "edge/tls/test_tls_floods.py",                  # waits
    "test_openapi_fuzz.py",                         # CPU
    "integration/test_cache_conformance.py",        # waits
    "edge/routes/test_transform.py",                # CPU
    "integration/test_https_acme.py",               # waits
    "edge/transform/test_steps.py",                 # CPU
    "browser/test_dashboard_browser.py",            # waits
    "control/ai/test_ai_routes.py",                 # CPU
    "integration/test_shutdown.py",                 # waits
    "integration/test_up_ports.py",                 # CPU
    "edge/tls/test_session_resumption.py",          # waits
    "integration/test_shared_counters.py",          # CPU
    "integration/test_hostile_clients.py",          # waits
    "browser/test_hls_playback.py",                 # both
    "edge/tls/test_h2_conformance.py",              # waits
    "integration/test_edge_cluster.py",             # CPU
    "browser/test_https_acme_page.py",              # waits
    "integration/test_faults_kill_control.py",      # CPU
    "edge/routes/test_pull_zones.py",               # waits
    "control/video/test_transcode.py",              # CPU
    "edge/routes/test_proxied_bodies.py",           # waits (slow bodies): not the last file of the run
)
REAL_PROCESSES_FIRST = ("integration/", "browser/", "edge/tls/", "edge/transform/", "control/acme/", "counters/",
                        "control/chat/test_chat_through_edges.py", "shared/test_process.py")
TESTS = Path(__file__).parent


def _run_order(item: pytest.Item) -> int:
    path = item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
    if path in LONGEST_FIRST:
        return LONGEST_FIRST.index(path)
    return len(LONGEST_FIRST) + (0 if path.startswith(REAL_PROCESSES_FIRST) else 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole files in the run order above. After the longest files, each file that starts real processes is
    followed by one that does not: the in-process files keep the cores busy while the others wait on their
    processes (four waiting files side by side left a third of the cores idle for ten seconds at a time).
    The rest of the in-process files come last."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)  # a file's tests stay together and in their order
    ranked = sorted(files.values(), key=lambda tests: _run_order(tests[0]))  # stable
    longest = [tests for tests in ranked if _run_order(tests[0]) < len(LONGEST_FIRST)]
    real = [tests for tests in ranked if _run_order(tests[0]) == len(LONGEST_FIRST)]
    rest = [tests for tests in ranked if _run_order(tests[0]) > len(LONGEST_FIRST)]
    paired = [tests for pair in zip(real, rest, strict=False) for tests in pair]
    ordered = longest + paired + real[len(rest):] + rest[len(real):]
    items[:] = [item for tests in ordered for item in tests]


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported and collected so far lives to the end of the run: moved out of the collector's
    # reach, it is no longer traversed by every full collection a test's garbage triggers.
    gc.freeze()
