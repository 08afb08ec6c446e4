"""A URL of a listening host and port: an IPv6 address in brackets (RFC 3986 3.2.2), so that `--host ::1`
gives `http://[::1]:8788`, which every client parses, rather than `http://::1:8788`, which none does."""

from __future__ import annotations


def host_url(host: str, port: int | str, scheme: str = "http") -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{scheme}://{shown}:{port}"
