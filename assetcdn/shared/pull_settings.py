"""The pull zone settings an edge cannot work with, refused as it starts (assetcdn/edge/server.py `main`; control's
start refuses a bad ``[origin] allow_loopback``, which it reads too): a value of the wrong type, NaN, a timeout of
zero or less, a pool of no connection, a size below zero. Each such value was taken before and broke every fill
instead (504 after the first-byte time for a pool of 0 or a zero timeout, 502 for ``max_header_kb = 0``, an
exception per request for a NaN timeout under uvloop) or stopped a worker with a traceback naming no setting (an
infinite size); a quoted "false" for ``allow_loopback`` was read as true."""

from __future__ import annotations

import math
from typing import Any

from assetcdn.shared.config import Settings

# Seconds that bound a wait: above 0 (an infinite one waits without bound, as asyncio and uvloop allow).
TIMEOUTS = (("origin", "connect_timeout_s"), ("origin", "first_byte_timeout_s"), ("origin", "idle_timeout_s"),
            ("origin", "body_timeout_s"), ("tls", "send_timeout_s"))
# Seconds of a memory: 0 or more (0 = none kept), not NaN.
DURATIONS = (("origin", "dns_cache_s"), ("origin", "shield_retry_s"))
# Sizes in MB: 0 or more and finite (they are turned into a whole number of bytes).
SIZES = (("origin", "max_object_mb"), ("origin", "forward_bodies_mb"), ("origin", "source_reads_mb"))


def _number(settings: Settings, section: str, key: str) -> float:
    value: Any = settings.get(section, key)
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"[{section}] {key} must be a number, not {value!r}") from None
    if math.isnan(number):
        raise ValueError(f"[{section}] {key} must be a number, not NaN")
    return number


def check_pull_settings(settings: Settings) -> None:
    """ValueError naming the first setting of `settings` a pull zone's fills could not work with."""
    for section, key in TIMEOUTS:
        if _number(settings, section, key) <= 0:
            raise ValueError(f"[{section}] {key} must be above 0 seconds, not {settings.get(section, key)!r}")
    for section, key in DURATIONS:
        if _number(settings, section, key) < 0:
            raise ValueError(f"[{section}] {key} must not be negative, not {settings.get(section, key)!r}")
    for section, key in SIZES:
        size = _number(settings, section, key)
        if size < 0 or math.isinf(size):
            raise ValueError(f"[{section}] {key} must be 0 or more MB, not {settings.get(section, key)!r}")
    header_kb = _number(settings, "origin", "max_header_kb")
    if header_kb <= 0 or math.isinf(header_kb):
        raise ValueError(f"[origin] max_header_kb must be above 0 KB, not {settings.get('origin', 'max_header_kb')!r}")
    pool = _number(settings, "origin", "pool_per_origin")
    try:
        int(settings.get("origin", "pool_per_origin"))  # as the edge reads it
    except (TypeError, ValueError, OverflowError):
        pool = 0
    if pool < 1:
        raise ValueError("[origin] pool_per_origin must be 1 or more connections, "
                         f"not {settings.get('origin', 'pool_per_origin')!r}")
    check_allow_loopback(settings)


# The intervals of an edge's calls to control (assetcdn/edge/control_client.py `run_sync_loop`): above 0 and finite.
# 0 (or less) asked control again without pause, from every worker; an infinite one never asked again.
CONTROL_INTERVALS = (("edge", "catchup_interval_s"), ("edge", "heartbeat_interval_s"), ("edge", "control_retry_s"))


def check_control_intervals(settings: Settings) -> None:
    """ValueError naming the first interval of an edge's calls to control that no wait could come of."""
    for section, key in CONTROL_INTERVALS:
        seconds = _number(settings, section, key)
        if seconds <= 0 or math.isinf(seconds):
            raise ValueError(f"[{section}] {key} must be above 0 seconds and finite, "
                             f"not {settings.get(section, key)!r}")


def check_allow_loopback(settings: Settings, section: str = "origin") -> None:
    """``[<section>] allow_loopback`` must be true or false: read with bool(), a quoted "false" in a config file would
    let origins (or webhook targets, ``section="webhooks"``) on loopback addresses through."""
    value = settings.get(section, "allow_loopback")
    if not isinstance(value, bool):
        raise ValueError(f"[{section}] allow_loopback must be true or false, not {value!r}")


# [tls] seconds checked when the edge serves https: above 0 (a reload interval of 0 stat()s the operator certificate
# files in a loop that never waits, a worker's whole core, and NaN ends that loop under uvloop, so renewed files are
# never read; a handshake timeout of 0 or NaN reset every https connection, each with a traceback; an HTTP/2 idle
# timeout of 0 closes a connection before its first request, NaN never closes an idle one).
HTTPS_TIMES = ("reload_interval_s", "handshake_timeout_s", "h2_idle_timeout_s")
# [tls] HTTP/2 counts and their least value: 0 streams, a header list of 0 bytes or 0 control frames a second failed
# every HTTP/2 request; 0 connections (no limit) and 0 resets (the first reset ends the connection) are meant.
HTTPS_COUNTS = (("h2_max_concurrent_streams", 1), ("h2_max_header_list_size", 1),
                ("h2_max_control_frames_per_s", 1), ("h2_max_connections", 0), ("h2_max_resets_per_10s", 0))


def check_https_settings(settings: Settings) -> None:
    """ValueError naming the first ``[tls]`` setting an https edge could not work with."""
    for key in HTTPS_TIMES:
        if _number(settings, "tls", key) <= 0:
            raise ValueError(f"[tls] {key} must be above 0 seconds, not {settings.get('tls', key)!r}")
    for key, least in HTTPS_COUNTS:
        count = _number(settings, "tls", key)
        if count < least or math.isinf(count):
            raise ValueError(f"[tls] {key} must be a whole number of {least} or more, not {settings.get('tls', key)!r}")
    # Outside 0-65535 every plain request was redirected to a URL no client can follow; NaN (or an infinite HSTS age)
    # stopped every worker with a traceback naming no setting.
    if not 0 <= _number(settings, "tls", "redirect_port") <= 65535:
        raise ValueError("[tls] redirect_port must be a port from 0 to 65535 (0: the https port), "
                         f"not {settings.get('tls', 'redirect_port')!r}")
    if _number(settings, "tls", "session_ticket_rotation_s") < 0:  # was taken as 0: one key, never rotated
        raise ValueError("[tls] session_ticket_rotation_s must be 0 (one key, never changed) or more seconds, "
                         f"not {settings.get('tls', 'session_ticket_rotation_s')!r}")
    age = _number(settings, "tls", "hsts_max_age_s")
    if age < 0 or math.isinf(age):
        raise ValueError(f"[tls] hsts_max_age_s must be 0 (not sent) or more seconds, not {settings.get('tls', 'hsts_max_age_s')!r}")
