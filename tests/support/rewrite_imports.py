"""Rewrite imports of test helpers from their old homes (a conftest.py or a test module) to tests/support/.

    python tests/support/rewrite_imports.py FILE...     # rewrites the files in place
    python tests/support/rewrite_imports.py --list      # prints the mapping, one `old -> new` a line

Only `from MODULE import NAME` statements whose MODULE and NAME are in MOVED change; names a statement imports
that did not move stay with their module. Comments inside a rewritten statement are dropped, and the new lines
are not sorted: run `ruff check --fix FILE...` afterwards.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/support/ is two levels down
# "old module.NAME" -> the module the name lives in now (the name itself is unchanged).
MOVED: dict[str, str] = {
    # the control plane's secrets and headers
    **{f"tests.control.conftest.{name}": "tests.support.control"
       for name in ("SECRETS", "ACCESS", "ACCOUNT", "METRICS", "forwarded_for", "control_with_zone")},
    # the in-process control and edge, waiting, and the images the edge tests upload
    **{f"tests.edge.routes.conftest.{name}": "tests.support.cdn"
       for name in ("PURGE", "ZONE", "Cdn", "CdnFactory", "control_and_edge_app", "register_and_make_zone",
                    "start_cdn_apps", "shared_cdn_apps")},
    **{f"tests.edge.routes.conftest.{name}": "tests.support.wait" for name in ("WAIT_S", "wait_until")},
    **{f"tests.edge.routes.conftest.{name}": "tests.support.images"
       for name in ("FRAMES", "photo_jpeg", "solid_png", "black_png", "animated_gif", "animated_webp", "LOGO_SVG",
                    "decode", "loader", "frames")},
    # the in-process control and edge on the hit path's own site, with a raw HTTP/1.1 client
    **{f"tests.edge.fastpath.conftest.{name}": "tests.support.hit_cdn"
       for name in ("READ_S", "Response", "RawConnection", "request_bytes", "HitCdn", "HitCdnFactory",
                    "start_hit_cdn", "shared_hit_cdn")},
    **{f"tests.edge.fastpath.conftest.{name}": "tests.support.control" for name in ("ACCESS", "ACCOUNT", "METRICS")},
    **{f"tests.edge.fastpath.conftest.{name}": "tests.support.cdn" for name in ("PURGE", "ZONE")},
    # PROXY protocol headers, and the bound on what the kernel takes for a client that reads nothing
    **{f"tests.edge.fastpath.test_proxy_protocol.{name}": "tests.support.proxy_protocol"
       for name in ("UNTRUSTED", "v1", "v2")},
    **{f"tests.edge.fastpath.test_counted_as_sent.{name}": "tests.support.sockets"
       for name in ("RCVBUF", "send_buffer_max", "REALLY_WRITTEN_MAX")},
    "tests.edge.fastpath.test_counted_as_sent.access_lines": "tests.support.hit_cdn",
    # a real `assetcdn up` with an https port, and the client side of handshakes
    **{f"tests.edge.tls.conftest.{name}": "tests.support.https"
       for name in ("ZONE", "HANDSHAKE_TIMEOUT_S", "HSTS_MAX_AGE_S", "MAX_RESETS", "HttpsCdn", "start_https_cdn")},
    **{f"tests.edge.tls.test_certificate_store.{name}": "tests.support.https" for name in ("peer_certificate", "unverified")},
    **{f"tests.edge.tls.test_unreadable_server_names.{name}": "tests.support.https"
       for name in ("PLACEHOLDER", "NOT_ASCII", "client_hello_naming")},
    # scripted origins and the pull-zone tests' CDN (the `pull` fixture is in tests/edge/routes/conftest.py)
    **{f"tests.edge.routes.test_pull_zones.{name}": "tests.support.origins"
       for name in ("ZONE", "PREFIX", "HOST_HEADER", "SECRET", "TENANT_HOST", "FIRST_BYTE_TIMEOUT_S", "MAX_OBJECT_MB",
                    "BODY_TIMEOUT_S", "LONG", "Handler", "Seen", "ScriptedOrigin", "Pull", "serve_origin",
                    "add_pull_zone")},
    "tests.edge.routes.test_tenant_hosts.raw_status": "tests.support.cdn",
    # analytics batches, the request log's pages, the analytics tests' zones
    **{f"tests.control.analytics.test_analytics_api.{name}": "tests.support.analytics"
       for name in ("ANALYTICS_KEY", "BATCH_PATH", "hit", "send_batch")},
    "tests.control.analytics.test_analytics_rollups.send_v2": "tests.support.analytics",
    "tests.control.records.test_request_log.page": "tests.support.analytics",
    **{f"tests.control.analytics.conftest.{name}": "tests.support.analytics" for name in ("ZONES", "with_zones")},
    # the search, AI and chat tests' control planes: what they upload and how they read the answers
    "tests.control.search.conftest.MakeControl": "tests.support.control",
    "tests.control.ai.conftest.MakeControl": "tests.support.control",
    **{f"tests.control.search.conftest.{name}": "tests.support.search" for name in ("add_zone", "upload", "search")},
    **{f"tests.control.ai.conftest.{name}": "tests.support.photos"
       for name in ("jpeg", "png", "astronaut_jpeg", "coffee_jpeg", "face_on_plain_background", "text_banner",
                    "require_tesseract", "upload")},
    **{f"tests.control.chat.test_chat.{name}": "tests.support.chat" for name in ("parse_sse", "answer_text")},
    # the webhook tests' control plane and API calls
    **{f"tests.control.webhooks.conftest.{name}": "tests.support.webhooks"
       for name in ("SECRETS", "FAST", "ALL_EVENTS", "make_app", "register", "eventually", "deliveries")},
    "tests.control.storage.conftest.SMALL_LIMIT": "tests.support.control",
    "tests.browser.conftest.serve_dashboard": "tests.support.control",
    "tests.browser.conftest.loopback_listener": "tests.support.sockets",
    # the transform tests' source images
    **{f"tests.edge.transform.conftest.{name}": "tests.support.transform_images"
       for name in ("PHOTO_SIZE", "FACE_SIZE", "FACE_CENTER", "FRAMES", "load")},
    # the API reference's operations
    **{f"tests.test_openapi_routes.{name}": "tests.support.openapi" for name in ("METHODS", "documented")},
}


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module `node` imports from, a relative import resolved against `package` (the file's)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def rewrite(source: str, package: str = "") -> str:
    """`source` with every moved name imported from its new module; `package` is the file's package."""
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        old = absolute(node, package)
        if not any(f"{old}.{alias.name}" in MOVED for alias in node.names):
            continue
        spelled = "." * node.level + (node.module or "")
        by_module: dict[str, list[str]] = {}
        for alias in node.names:
            module = MOVED.get(f"{old}.{alias.name}", spelled)
            name = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
            by_module.setdefault(module, []).append(name)
        indent = " " * node.col_offset
        text = "".join(f"{indent}from {module} import {', '.join(names)}\n" for module, names in by_module.items())
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, text))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    return "".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        sys.stdout.write("".join(f"{old} -> {new}.{old.rsplit('.', 1)[1]}\n" for old, new in MOVED.items()))
        return 0
    if not argv:
        sys.stderr.write(__doc__ or "")
        return 2
    for name in argv:
        path = Path(name)
        before = path.read_text()
        try:
            package = ".".join(path.resolve().parent.relative_to(ROOT).parts)
        except ValueError:  # outside the checkout: relative imports are left as they are
            package = ""
        after = rewrite(before, package)
        if after != before:
            path.write_text(after)
            sys.stderr.write(f"rewrote {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
