"""HTTP caching conformance beside Varnish and nginx: the field's cache test suite, run unchanged.

    make conformance [OUT=<dir>]

The suite (npm package ``http-cache-tests``, pinned below) is installed into ``.conformance/``. Its origin
server runs on a free loopback port; each cache is put in front of it with the suite's own settings for
that cache and the suite's CLI runs every test through it:

- Varnish: ``-p default_ttl=0 -p default_grace=0 -p default_keep=3600``, a VCL that names the origin and
  nothing else (the suite's Docker image runs Debian's default VCL pointed at its origin);
- nginx: ``proxy_cache`` with ``proxy_cache_revalidate on`` and HTTP/1.1 to the origin, as the suite's
  nginx configuration;
- assetcdn: ``assetcdn up`` (one edge, as the test harness starts it), with a pull zone whose origin is the
  suite's origin; the suite's base URL is that zone's path (``/<zone>``), so the edge forwards the suite's
  ``/test/``, ``/config/`` and ``/state/`` requests to it. Loopback origins are allowed for this run only
  (``[origin] allow_loopback``).

The anchors are always run beside the edge, in the same run: ``--only GROUP`` (repeatable) narrows the
suite to some of its test groups (their ids, e.g. ``cc-freshness``; run with the tests they depend on,
through the suite's own runner, by ``cache_conformance_run.mjs``), never the caches compared. The edge's run starts once it serves the pull
zone: a known path of the suite's origin (``/test/<probe>``, which the origin answers 409) asked through
the zone until the origin's answer comes back, not the edge's 404.

Each cache's raw results (the CLI's JSON) are scored with the suite's own classification (its
``determineTestResult``: required pass or fail, optimal pass or fail, check yes or no, setup and
dependency failures apart) by ``cache_conformance_score.mjs``, and printed as one table. ``--out DIR``
keeps each cache's raw results there (``varnish.json``, ``nginx.json``, ``assetcdn.json``) so that anyone
can score them again. Traffic stays on 127.0.0.1; every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.measure import create_pull_zone, require_tools, tool_path
from benchmarks.nginx_conf import instance_conf
from tests.integration.harness import ACCOUNT, RunningCdn, free_port_block, start_cdn

ROOT = Path(__file__).resolve().parent.parent
SUITE_PACKAGE = "http-cache-tests"
SUITE_VERSION = "0.4.5"
INSTALL_DIR = ROOT / ".conformance"
SCORER = Path(__file__).with_name("cache_conformance_score.mjs")
RUNNER = Path(__file__).with_name("cache_conformance_run.mjs")
ZONE_WAIT_S = 60.0
# A test id the suite never configures: its origin answers /test/<it> 409 "Requests not found for <it>",
# and keeps no state for it.
ZONE_PROBE = "assetcdn-zone-probe"
VARNISH_PARAMETERS = ["-p", "default_ttl=0", "-p", "default_grace=0", "-p", "default_keep=3600"]
VCL = 'vcl 4.1;\nbackend default {{ .host = "127.0.0.1"; .port = "{port}"; }}\n'
# nginx's http block (benchmarks/nginx_conf.py `instance_conf`).
NGINX_CONF = """proxy_cache_path {directory}/cache levels=1:2 keys_zone=my-cache:8m max_size=1000m inactive=600m;
server {{
    listen 127.0.0.1:{listen};
    location / {{
        proxy_pass http://127.0.0.1:{origin};
        proxy_cache my-cache;
        proxy_cache_revalidate on;
        proxy_http_version 1.1;
    }}
}}
"""
# The suite's classes, as its scorer names them (required, optimal and check tests; a test whose
# dependency failed is counted apart, as cache-tests.fyi shows it).
COLUMNS = (("required ✅", "required pass"), ("required ⛔️", "required fail"), ("optimal ✅", "optimal pass"),
           ("optimal ⚠️", "optimal fail"), ("check Y", "check yes"), ("check N", "check no"))
OTHER_SYMBOLS = ("🔹", "⁉️", "⚪️", "↻", "-")


@dataclass(frozen=True, slots=True)
class Score:
    counts: dict[str, int]
    failed_required: list[str]

    def count(self, key: str) -> int:
        return self.counts.get(key, 0)

    def apart(self) -> int:
        """Setup, harness and dependency failures, retries and untested: in no column of their own."""
        return sum(n for key, n in self.counts.items() if key.split(" ", 1)[1] in OTHER_SYMBOLS)


def install_suite() -> Path:
    """The suite's package directory, installed from the npm registry once (pinned version)."""
    suite = INSTALL_DIR / "node_modules" / SUITE_PACKAGE
    installed = suite / "package.json"
    if not installed.exists() or json.loads(installed.read_text()).get("version") != SUITE_VERSION:
        INSTALL_DIR.mkdir(exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(INSTALL_DIR),
                        f"{SUITE_PACKAGE}@{SUITE_VERSION}"], check=True)
    return suite


def wait_listening(port: int, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode} before listening")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


@contextmanager
def running(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A server process listening on `port`, stopped (its whole process group) on the way out."""
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    try:
        wait_listening(port, process)
        yield process
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def suite_origin(suite: Path, port: int, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """The suite's origin server on `port` (it reads its settings as npm passes them)."""
    return ["node", str(suite / "server" / "server.mjs")], {
        **os.environ, "npm_config_port": str(port), "npm_config_protocol": "http",
        "npm_config_pidfile": str(workdir / "origin.pid")}


def suite_groups(suite: Path) -> list[str]:
    """The ids of the suite's test groups, as its CLI runs them."""
    completed = subprocess.run(["node", str(RUNNER), str(suite), "--groups"], check=True, capture_output=True,
                               timeout=60)
    groups: list[str] = json.loads(completed.stdout)
    return groups


def run_suite(suite: Path, base: str, groups: list[str] | None = None) -> dict[str, object]:
    """The suite's CLI through the cache at `base` (only the tests of `groups` when given): its raw results."""
    command = (["npm", "run", "--silent", "cli", f"--base={base}"] if groups is None
               else ["node", "--no-warnings", str(RUNNER), str(suite), base, ",".join(groups)])
    completed = subprocess.run(command, cwd=suite, check=True, capture_output=True, timeout=900)
    results: dict[str, object] = json.loads(completed.stdout)
    return results


def score(suite: Path, results_file: Path, groups: list[str] | None = None) -> Score:
    only = [",".join(groups)] if groups else []
    completed = subprocess.run(["node", str(SCORER), str(suite), str(results_file), *only], check=True,
                               capture_output=True, timeout=60)
    data = json.loads(completed.stdout)
    return Score(data["counts"], data["failed"]["required"])


def varnish(workdir: Path, port: int, origin: int) -> list[str]:
    vcl = workdir / "suite.vcl"
    vcl.write_text(VCL.format(port=origin))
    varnishd = tool_path("varnishd")
    return [varnishd, "-F", "-a", f"127.0.0.1:{port}", "-f", str(vcl), "-n", str(workdir / "varnish"),
            *VARNISH_PARAMETERS, "-s", "malloc,64M"]


def nginx(workdir: Path, port: int, origin: int) -> list[str]:
    directory = workdir / "nginx"
    directory.mkdir()
    os.chmod(directory, 0o777)  # nginx's workers run as www-data
    conf = directory / "nginx.conf"
    conf.write_text(instance_conf(directory, NGINX_CONF.format(directory=directory, listen=port, origin=origin),
                                  connections=1024))
    return [tool_path("nginx"), "-c", str(conf)]


Anchor = Callable[[Path, int, int], list[str]]
ANCHORS: dict[str, Anchor] = {"varnish": varnish, "nginx": nginx}
CACHES = ("assetcdn", *ANCHORS)
PULL_ZONE = "conformance"


@contextmanager
def assetcdn(workdir: Path, origin: int) -> Iterator[str]:
    """`assetcdn up` with a pull zone in front of the suite's origin; yields the suite's base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    cdn: RunningCdn = start_cdn(workdir, env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
    try:
        asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, PULL_ZONE, f"http://127.0.0.1:{origin}", cdn.data_dir))
        base = f"{cdn.edge_urls[0]}/{PULL_ZONE}"
        wait_zone_served(base)
        yield base
    finally:
        cdn.stop()


def wait_zone_served(base: str, timeout_s: float = ZONE_WAIT_S) -> None:
    """Returns once the edge forwards the zone's requests to the suite's origin: ZONE_PROBE's test path, asked
    at ``base``, comes back with the origin's own answer (not the edge's 404 for a zone it does not have)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/test/{ZONE_PROBE}", timeout=10) as answer:
                status, body = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read()
        except OSError as error:
            status, body = 0, str(error).encode()
        if status == 409 and f"Requests not found for {ZONE_PROBE}".encode() in body:
            return
        last = f"{status} {body[:200]!r}"
        time.sleep(0.1)  # the edge takes the zone from control's next configuration push: nothing to wait on
    raise RuntimeError(f"the edge did not serve the pull zone within {timeout_s:.0f} s (last answer: {last})")


def table(scores: dict[str, Score]) -> str:
    header = "| Cache | " + " | ".join(title for _, title in COLUMNS) + " | apart |"
    lines = [header, "|---" + "|---:" * (len(COLUMNS) + 1) + "|"]
    for name, result in scores.items():
        cells = " | ".join(str(result.count(key)) for key, _ in COLUMNS)
        lines.append(f"| {name} | {cells} | {result.apart()} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="keep each cache's raw results (<cache>.json) here")
    parser.add_argument("--only", action="append", metavar="GROUP",
                        help="run only this test group of the suite (its id, e.g. cc-freshness; repeatable) "
                             "through every cache; the anchors always run")
    args = parser.parse_args(argv)
    require_tools(("node", "npm", "varnishd", "nginx"), "conformance")
    suite = install_suite()
    groups: list[str] | None = args.only
    if groups is not None and (unknown := sorted(set(groups) - set(suite_groups(suite)))):
        parser.error(f"--only: no test group {', '.join(unknown)} (the suite's: {', '.join(suite_groups(suite))})")
    scores: dict[str, Score] = {}
    with tempfile.TemporaryDirectory(prefix="cache-conformance-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        origin_port = free_port_block(2)
        cache_port = origin_port + 1
        command, env = suite_origin(suite, origin_port, workdir)
        with running(command, origin_port, env):
            for name in CACHES:
                cache_dir = workdir / name
                cache_dir.mkdir()
                os.chmod(cache_dir, 0o755)
                if name == "assetcdn":
                    with assetcdn(cache_dir, origin_port) as base:
                        results = run_suite(suite, base, groups)
                else:
                    with running(ANCHORS[name](cache_dir, cache_port, origin_port), cache_port):
                        results = run_suite(suite, f"http://127.0.0.1:{cache_port}", groups)
                raw = (args.out or cache_dir) / f"{name}.json"
                raw.parent.mkdir(parents=True, exist_ok=True)
                raw.write_text(json.dumps(results, indent=2))
                scores[name] = score(suite, raw, groups)
                print(f"{name}: done", file=sys.stderr)
    print(f"http-cache-tests {SUITE_VERSION}, scored with its own classification; "
          f"{'test groups ' + ', '.join(groups) if groups else 'every test'}, every cache in this run\n")
    print(table(scores))
    for name, result in scores.items():
        print(f"\n{name}: required failures: {', '.join(result.failed_required) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
