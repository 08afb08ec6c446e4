"""nginx's configurations in the benchmarks: `instance_conf`, what every nginx instance here has (pid, logs and
temporary files in the instance's own directory, no access log) around the benchmark's own ``http`` block
(origins and caching peers: pull_bench, pull_memory, cache_conformance); and `nginx_conf`, nginx as a
caching peer of the edge in the comparison benchmarks (hits_bench, https_bench): nginx's ``proxy_cache`` in
front of control's storage API with the access key, every response kept for an hour and marked ``X-Cache``,
its cache in the instance's directory. With ``tls`` it listens with TLS and HTTP/2 instead of plain HTTP/1.1.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

INSTANCE = """daemon off;
worker_processes {workers};
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
{http}
}}
"""

TEMPLATE = """sendfile on;
{nopush}
proxy_cache_path {directory}/cache levels=1:2 keys_zone=hits:64m max_size=4g inactive=2h use_temp_path=off;
{tls_http}
{upstream}
server {{
    listen 127.0.0.1:{listen}{listen_tls};
    {tls_server}
    location / {{
        proxy_pass http://{backend}{proxy_path};
        proxy_set_header AccessKey "{access_key}";
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_cache hits;
        proxy_cache_valid 200 1h;
        proxy_ignore_headers Cache-Control Expires Set-Cookie;
        add_header X-Cache $upstream_cache_status;
    }}
}}
"""


def instance_conf(directory: Path, http: str, *, workers: int = 1, connections: int = 4096) -> str:
    """A whole nginx.conf: what every instance here has, its files under ``directory``, with ``http`` (the
    benchmark's directives and servers) in its ``http`` block."""
    return INSTANCE.format(workers=workers, directory=directory, connections=connections,
                           http=textwrap.indent(http.strip("\n"), "    "))


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The certificate chain and private key nginx serves (PEM files)."""

    cert: Path
    key: Path


def nginx_conf(directory: Path, listen: int, control_port: int, access_key: str, *, workers: int = 1,
               tls: TlsFiles | None = None, proxy_path: str = "/api/storage/", keepalive: int = 0) -> str:
    """The configuration of one nginx instance listening on 127.0.0.1:``listen``, its files under
    ``directory``. ``proxy_path``: what the request path is appended to upstream (pull_bench: an origin's
    root); ``keepalive``: idle upstream connections kept per worker (0: a new connection per fetch)."""
    upstream = f"upstream backend {{ server 127.0.0.1:{control_port}; keepalive {keepalive}; }}" if keepalive else ""
    http = TEMPLATE.format(
        directory=directory, listen=listen, access_key=access_key, upstream=upstream,
        backend="backend" if keepalive else f"127.0.0.1:{control_port}", proxy_path=proxy_path,
        # tcp_nopush only acts with sendfile, which nginx uses for plain HTTP, not under TLS.
        nopush="tcp_nopush on;" if tls is None else "",
        tls_http="" if tls is None else ("ssl_protocols TLSv1.2 TLSv1.3;\n"
                                         "ssl_ciphers ECDHE+AESGCM:ECDHE+CHACHA20;\n"
                                         "ssl_session_cache shared:SSL:10m;"),
        listen_tls="" if tls is None else " ssl http2",
        tls_server="" if tls is None else (f"ssl_certificate {tls.cert};\n"
                                           f"    ssl_certificate_key {tls.key};"))
    text = instance_conf(directory, http, workers=workers)
    return "".join(line + "\n" for line in text.splitlines() if line.strip())  # without the unused slots
