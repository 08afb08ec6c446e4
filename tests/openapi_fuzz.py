"""Schemathesis against a live instance, through the edge (so control's endpoints are fuzzed through the
forwarder too), once per credential scheme of the document and once with none.

Each run sees only the operations that accept its scheme (the public ones for the run without credentials),
with that scheme alone in their `security`, so every operation is exercised with every scheme it accepts.
The checks: no 5xx, and every status, content type, header and body as documented; with credentials, also
that the operation refuses a request without them (`ignored_auth`).

    .venv/bin/python -m tests.openapi_fuzz [--max-examples N] [--seed N]   (`make fuzz`: the long run)

The short run is tests/test_openapi_fuzz.py, part of `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from assetcdn.control.identity.tokens import SCOPES
from assetcdn.shared.openapi import document
from assetcdn.shared.secrets import SECRETS_FILE
from tests.control.identity.signin_client import session_from
from tests.integration.harness import ACCOUNT, KEYS, RunningCdn, made_demo_videos, start_cdn
from tests.schemathesis_forks import Schemathesis

PUBLIC = "public"
SCHEMES = ("AccessKey", "AccountKey", "PurgeKey", "AnalyticsKey", "BearerToken", "SessionCookie", "MetricsKey",
           PUBLIC)
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance")
AUTH_CHECKS = ("ignored_auth",)
# Not fuzzed: registering a webhook makes the service POST to the URL given, and generated URLs name hosts
# off this machine (tests/control/webhooks cover registration against loopback receivers instead).
NOT_FUZZED = frozenset({("post", "/api/webhooks")})
# Documented 5xx answers that are the operation's contract, not a failure.
EXPECTED_5XX = {"/api/ai/background-remove": "501"}  # no offline segmentation model: 501 NotImplemented
SHORT = {"max_examples": 2, "phases": "examples,fuzzing"}
LONG = {"max_examples": 100, "phases": "examples,coverage,fuzzing,stateful"}


def scheme_document(scheme: str) -> dict[str, Any]:
    """The served document cut down to the operations that accept `scheme` (PUBLIC: need no credential),
    each requiring that scheme alone."""
    doc = copy.deepcopy(document())
    paths: dict[str, Any] = {}
    for path, operations in doc["paths"].items():
        kept = {}
        for method, operation in operations.items():
            if (method, path) in NOT_FUZZED:
                continue
            security = operation.get("security", doc.get("security", []))
            if scheme == PUBLIC:
                if not security or {} in security:
                    kept[method] = {**operation, "security": []}
            else:
                for requirement in security:
                    if list(requirement) == [scheme]:
                        # A credential that is optional (deep health) stays optional.
                        optional = [{}] if {} in security else []
                        kept[method] = {**operation, "security": [*optional, requirement]}
        if kept:
            paths[path] = kept
    doc["paths"] = paths
    return doc


def config_text(scheme: str, credentials: dict[str, str]) -> str:
    text = "".join(f'[[operations]]\ninclude-path = "{path}"\n'
                   f'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "{status}"]\n\n'
                   for path, status in EXPECTED_5XX.items())
    if scheme == PUBLIC:
        return text
    field = "bearer" if scheme in ("BearerToken", "MetricsKey") else "api_key"
    return text + f'[auth.openapi.{scheme}]\n{field} = "{credentials[scheme]}"\n'


def _dashboard_password(cdn: RunningCdn) -> str:
    for line in (cdn.data_dir / SECRETS_FILE).read_text().splitlines():
        if line.startswith("ASSETCDN_DASHBOARD_SECRET="):
            return line.split("=", 1)[1]
    raise AssertionError("no dashboard secret in secrets.env")


async def credentials(cdn: RunningCdn) -> dict[str, str]:
    """A value for each scheme: the instance's keys, a Bearer token with every scope, and the session of a
    password sign-in."""
    base = cdn.edge_urls[0]
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/api/tokens", headers=ACCOUNT,
                                json={"name": "fuzz", "scopes": list(SCOPES)}) as resp:
            assert resp.status == 201, await resp.text()
            token = (await resp.json())["Token"]["secret"]
        async with session.post(f"{cdn.dashboard_url}/dashboard/login", data={"password": _dashboard_password(cdn)},
                                headers={"Origin": cdn.dashboard_url}, allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            cookie = session_from(resp)
    return {"AccessKey": KEYS["ASSETCDN_ACCESS_KEY"], "AccountKey": KEYS["ASSETCDN_ACCOUNT_KEY"],
            "PurgeKey": KEYS["ASSETCDN_PURGE_KEY"], "AnalyticsKey": KEYS["ASSETCDN_ANALYTICS_KEY"],
            "MetricsKey": KEYS["ASSETCDN_METRICS_KEY"], "BearerToken": token, "SessionCookie": cookie}


def url_for(cdn: RunningCdn, scheme: str) -> str:
    """Where a scheme is used: the session on the dashboard's own origin (the only one that honours it),
    everything else on an edge."""
    return cdn.dashboard_url if scheme == "SessionCookie" else cdn.edge_urls[0]


def run_scheme(runner: Schemathesis, base_url: str, scheme: str, values: dict[str, str], work: Path, *,
               max_examples: int, phases: str, seed: int, workers: int = 1) -> subprocess.CompletedProcess[str]:
    """One schemathesis run (forked by `runner`); its exit status is 0 when every check passed."""
    work.mkdir(parents=True, exist_ok=True)
    schema = work / f"openapi-{scheme}.json"
    schema.write_text(json.dumps(scheme_document(scheme)))
    config = work / f"schemathesis-{scheme}.toml"
    config.write_text(config_text(scheme, values))
    checks = CHECKS + (AUTH_CHECKS if scheme != PUBLIC else ())
    # A session changes state only for requests from the dashboard's own origin (the CSRF check).
    origin = ["--header", f"Origin: {base_url}"] if scheme == "SessionCookie" else []
    argv = ["--config-file", str(config), "run", str(schema), "--url", base_url, *origin,
            "--checks", ",".join(checks), "--max-examples", str(max_examples), "--phases", phases,
            "--seed", str(seed), "--workers", str(workers), "--no-color",
            "--report", "junit", "--report-dir", str(work / f"report-{scheme}")]
    return runner.run(argv, work, work / f"schemathesis-{scheme}")


def summary(result: subprocess.CompletedProcess[str]) -> str:
    """The run's closing lines (test cases run, failures) for a report."""
    lines = result.stdout.splitlines()
    return "\n".join(line for line in lines if "generated" in line or "passed" in line or "failed" in line
                     or "error" in line.lower())[-2000:]


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=LONG["max_examples"])
    parser.add_argument("--phases", default=LONG["phases"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    status = 0
    with tempfile.TemporaryDirectory(prefix="assetcdn-fuzz-") as tmp:
        cdn = start_cdn(Path(tmp), edges=1, demo=True, semantic_search=True, prepare=made_demo_videos)
        try:
            values = await credentials(cdn)
            with Schemathesis() as runner:
                for scheme in SCHEMES:
                    result = run_scheme(runner, url_for(cdn, scheme), scheme, values, Path(tmp) / "work",
                                        max_examples=args.max_examples, phases=args.phases, seed=args.seed)
                    _say(f"== {scheme}: {'ok' if result.returncode == 0 else 'FAILED'}\n{summary(result)}")
                    if result.returncode != 0:
                        _say(result.stdout[-20000:])
                        status = 1
        finally:
            cdn.stop()
    return status


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
