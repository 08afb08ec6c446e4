"""Schemathesis, short run, against a live instance (control and an edge, demo content) for every operation with
every credential scheme: no 5xx, and every answer as documented. The long run is `make fuzz`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import RunningCdn, made_demo_videos, start_cdn
from tests.openapi_fuzz import (
    NOT_FUZZED,
    SCHEMES,
    SHORT,
    credentials,
    run_scheme,
    scheme_document,
    url_for,
)
from tests.schemathesis_forks import Schemathesis
from tests.support.openapi import documented

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningCdn, dict[str, str], Path]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    cdn = start_cdn(tmp, edges=1, demo=True, semantic_search=True, prepare=made_demo_videos)
    try:
        yield cdn, asyncio.run(credentials(cdn)), tmp / "work"
    finally:
        cdn.stop()


@pytest.fixture(scope="module")
def runner() -> Iterator[Schemathesis]:
    with Schemathesis() as forks:
        yield forks


def test_every_scheme_covers_operations_and_every_operation_is_covered() -> None:
    covered = {(path, method) for scheme in SCHEMES for path, ops in scheme_document(scheme)["paths"].items()
               for method in ops}
    assert all(scheme_document(scheme)["paths"] for scheme in SCHEMES)
    assert covered == {(path, method) for method, path in documented() if (method, path) not in NOT_FUZZED}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fuzzing_finds_no_server_error_and_no_undocumented_answer(
        live: tuple[RunningCdn, dict[str, str], Path], runner: Schemathesis, scheme: str) -> None:
    cdn, values, work = live
    result = run_scheme(runner, url_for(cdn, scheme), scheme, values, work, seed=1, **SHORT)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stdout[-15000:] + result.stderr[-3000:]
    assert "unhandled error" not in cdn.log_path.read_text()  # what a 5xx from either process logs
