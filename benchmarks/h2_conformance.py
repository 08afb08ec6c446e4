"""HTTP/2 conformance of the edge's https port beside nginx's (``make h2spec``).

h2spec (github.com/summerwind/h2spec), the field's suite, is run when it is on the PATH: as part of the tests of
tests/edge/tls/test_h2_conformance.py (``test_h2spec_tool``). Where it is not (docs/https.md, "HTTP/2
conformance", says why it cannot be had on every machine), this says so and the same file's cases, h2spec's own
written as tests, give the count. Both runs go against a real `assetcdn up` and against nginx with ``ssl http2``
(set up as benchmarks/https_bench.py sets it up), each from its own pytest process; the pass counts are printed
side by side. Both servers are treated alike: the same cases, the same wait for every answer, none marked as an
expected failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = "tests/edge/tls/test_h2_conformance.py"
TARGETS = ("edge", "nginx")


def unavailable() -> str | None:
    """Why h2spec cannot run here; None when it can."""
    if shutil.which("h2spec"):
        return None
    go = "Go is not installed" if shutil.which("go") is None else "Go is installed"
    return ("h2spec is not on the PATH. It is packaged in neither Debian (`apt-cache policy h2spec` prints "
            "nothing), PyPI (`pip download h2spec`: \"No matching distribution found for h2spec\") nor npm "
            "(`npm view h2spec`: \"404 Not Found - GET https://registry.npmjs.org/h2spec\"); "
            "`go install github.com/summerwind/h2spec/cmd/h2spec@latest` needs the Go module proxy "
            f"(proxy.golang.org), which this machine cannot reach ({go}). Running h2spec's cases as tests instead.")


def run(target: str, report: Path) -> Counter[str]:
    """Outcomes (passed, failed, skipped) of the cases against ``target``, per h2spec group too."""
    env = {**os.environ, "H2_CONFORMANCE_TARGET": target, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--no-header",
                    f"--junitxml={report}", TESTS], cwd=ROOT, env=env, check=False)
    counts: Counter[str] = Counter()
    for testcase in ElementTree.parse(report).iter("testcase"):
        name = testcase.get("name", "")
        group = name.partition("[")[2].partition("/")[0]
        if not group:  # test_h2spec_tool: h2spec itself, counted apart
            group = "tool"
        children = {child.tag: child for child in testcase}
        if "skipped" in children:
            outcome = "skipped"
        elif "failure" in children or "error" in children:
            outcome = "failed"
        else:
            outcome = "passed"
        counts[f"{group} {outcome}"] += 1
        if group != "tool":
            counts[outcome] += 1
    return counts


def cases(counts: Counter[str], prefix: str) -> int:
    return sum(counts[prefix + outcome] for outcome in ("passed", "failed", "skipped"))


def main() -> int:
    reason = unavailable()
    if reason:
        print(f"h2spec: {reason}", flush=True)
    results: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory(prefix="h2-conformance-") as tmp:
        for target in TARGETS:
            print(f"# {target}", flush=True)
            results[target] = run(target, Path(tmp) / f"{target}.xml")
    print("\nHTTP/2 conformance (h2spec's generic, http2 and hpack cases"
          + (", and h2spec itself" if reason is None else " rewritten as tests: not h2spec itself") + ")")
    print("(the same cases, waits and expectations for both servers)")
    print(f"{'server':8} {'passed':>7} {'failed':>7} {'skipped':>8}   per group (passed/cases)")
    for target, counts in results.items():
        total = cases(counts, "")
        groups = ", ".join(f"{group} {counts[f'{group} passed']}/{cases(counts, group + ' ')}"
                           for group in ("generic", "http2", "hpack"))
        print(f"{target:8} {counts['passed']:>7} {counts['failed']:>7} {counts['skipped']:>8}"
              f"   of {total}: {groups}")
        if counts["tool passed"] or counts["tool failed"]:
            print(f"{'':8} h2spec itself: {'passed' if counts['tool passed'] else 'failed (see the pytest output above)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
