"""The field's HTTP cache test suite (npm `http-cache-tests`), run unchanged through a pull zone of a real
`assetcdn up`, as `make conformance` runs it (benchmarks/cache_conformance.py), scored with the suite's own
classification. Its one required failure is the documented one (docs/known-gaps.md); any other is a
regression. The suite comes from the npm registry: without npm, or when the registry cannot be reached,
the test skips and says why."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.cache_conformance import (
    assetcdn,
    install_suite,
    run_suite,
    running,
    score,
    suite_origin,
)
from tests.integration.harness import free_port_block

pytestmark = pytest.mark.integration

# The required failures docs/known-gaps.md gives the reasons of: the suite's test that contradicts its neighbours
# (`Age: 0,7200` fresh, `0, 0` stale), and the two that ask for an origin's Clear-Site-Data on the edges' default
# host, which every zone shares (a policy of that whole host, which one zone's origin may not set there).
DOCUMENTED_FAILURES = {"age-parse-prefix", "headers-store-Clear-Site-Data", "304-etag-update-response-Clear-Site-Data"}
REQUIRED_PASSES_AT_LEAST = 150
# Runs of the suite before a shortfall of passes fails this test. Many of the suite's tests keep a response for 1-2 s
# from a Date in whole seconds, and RFC 9111's age adds the response's delay: on a machine loaded by a `make test`
# pair a copy can be stale before the suite's next request, whose setup then fails ("does not come from cache",
# which the suite scores apart from a failure) and the edge rightly asks the origin. A second run of the suite,
# seconds later, is not loaded alike. A required failure is asserted in every run: it never gets a second chance.
RUNS = 2


def test_the_cache_suite_passes_through_a_pull_zone(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run the cache test suite (Debian: nodejs, npm)")
    try:
        suite = install_suite()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"the cache test suite could not be installed from the npm registry ({exc})")
    origin_port = free_port_block(1)
    command, env = suite_origin(suite, origin_port, tmp_path)
    with running(command, origin_port, env), assetcdn(tmp_path / "cdn", origin_port) as base:
        for attempt in range(RUNS):
            results = run_suite(suite, base)  # every test on URLs of its own: a second run finds nothing of the first
            raw = tmp_path / f"assetcdn-{attempt}.json"
            raw.write_text(json.dumps(results))
            scored = score(suite, raw)
            # A required test the edge fails, beside the documented ones, fails this test in any run.
            assert set(scored.failed_required) <= DOCUMENTED_FAILURES, scored.failed_required
            if scored.count("required ✅") >= REQUIRED_PASSES_AT_LEAST:
                return
    # On a failure, every result that is not a pass, with the suite's own words: the raw files go with tmp_path.
    not_passed = "\n".join(f"{name}: {result}" for name, result in sorted(results.items()) if result is not True)
    assert scored.count("required ✅") >= REQUIRED_PASSES_AT_LEAST, f"{scored.counts}\n{not_passed}"
