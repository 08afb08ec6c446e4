"""Pull zone settings an edge could not fill with (assetcdn/shared/pull_settings.py) stop it as it starts, naming
the setting: before, `[origin] pool_per_origin = 0` or a zero timeout started an edge whose every fill was 504, a
NaN timeout failed every fill under uvloop, `max_header_kb = 0` made every fill 502."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assetcdn.edge.origin_client import OriginLimits
from assetcdn.edge.server import EXIT_BAD_CONFIG
from assetcdn.shared.config import load_settings
from assetcdn.shared.pull_settings import check_https_settings, check_pull_settings
from tests.integration.harness import KEYS, free_port_block

BAD = [("ASSETCDN_ORIGIN_POOL_PER_ORIGIN", "0", r"\[origin\] pool_per_origin"),
       ("ASSETCDN_ORIGIN_POOL_PER_ORIGIN", "-3", r"\[origin\] pool_per_origin"),
       ("ASSETCDN_ORIGIN_CONNECT_TIMEOUT_S", "0", r"\[origin\] connect_timeout_s"),
       ("ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S", "-1", r"\[origin\] first_byte_timeout_s"),
       ("ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S", "nan", r"\[origin\] first_byte_timeout_s"),
       ("ASSETCDN_ORIGIN_IDLE_TIMEOUT_S", "0", r"\[origin\] idle_timeout_s"),
       ("ASSETCDN_ORIGIN_BODY_TIMEOUT_S", "nan", r"\[origin\] body_timeout_s"),
       ("ASSETCDN_TLS_SEND_TIMEOUT_S", "0", r"\[tls\] send_timeout_s"),
       ("ASSETCDN_ORIGIN_MAX_HEADER_KB", "0", r"\[origin\] max_header_kb"),
       ("ASSETCDN_ORIGIN_MAX_OBJECT_MB", "-1", r"\[origin\] max_object_mb"),
       ("ASSETCDN_ORIGIN_FORWARD_BODIES_MB", "inf", r"\[origin\] forward_bodies_mb"),
       ("ASSETCDN_ORIGIN_SOURCE_READS_MB", "nan", r"\[origin\] source_reads_mb"),
       ("ASSETCDN_ORIGIN_DNS_CACHE_S", "-1", r"\[origin\] dns_cache_s"),
       ("ASSETCDN_ORIGIN_SHIELD_RETRY_S", "nan", r"\[origin\] shield_retry_s")]


def test_the_shipped_settings_and_their_documented_limits_pass() -> None:
    check_pull_settings(load_settings(environ={}))
    check_pull_settings(load_settings(environ={"ASSETCDN_ORIGIN_DNS_CACHE_S": "0", "ASSETCDN_ORIGIN_MAX_OBJECT_MB": "0",
                                               "ASSETCDN_ORIGIN_POOL_PER_ORIGIN": "1",
                                               "ASSETCDN_ORIGIN_BODY_TIMEOUT_S": "inf"}))


@pytest.mark.parametrize(("name", "value", "named"), BAD)
def test_a_setting_no_fill_could_work_with_is_named(name: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        check_pull_settings(load_settings(environ={name: value}))


def test_a_setting_of_the_wrong_type_in_a_config_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "edge.toml"
    config.write_text('[origin]\nconnect_timeout_s = "soon"\n')
    with pytest.raises(ValueError, match=r"\[origin\] connect_timeout_s must be a number"):
        check_pull_settings(load_settings(config, environ={}))


@pytest.mark.parametrize(("name", "value", "named"), [BAD[0], BAD[4]])
def test_the_edge_does_not_start_with_it(tmp_path: Path, name: str, value: str, named: str) -> None:
    env = {**KEYS, "PATH": "/usr/bin:/bin", name: value}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(free_port_block(1)), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert named.replace("\\", "") in done.stderr


@pytest.mark.parametrize("value", ['"false"', '"no"', "0"])
def test_allow_loopback_that_is_not_true_or_false_is_named(tmp_path: Path, value: str) -> None:
    """Read with bool(), a quoted "false" let origins on loopback addresses through, at control (setting a zone's
    origin) and at the edges (connecting to it)."""
    config = tmp_path / "cdn.toml"
    config.write_text(f"[origin]\nallow_loopback = {value}\n")
    with pytest.raises(ValueError, match=r"\[origin\] allow_loopback must be true or false"):
        check_pull_settings(load_settings(config, environ={}))


def test_control_does_not_start_with_a_quoted_allow_loopback(tmp_path: Path) -> None:
    config = tmp_path / "cdn.toml"
    config.write_text('[origin]\nallow_loopback = "false"\n')
    port = free_port_block(2)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_SERVER_DASHBOARD_PORT": str(port + 1)}
    done = subprocess.run([sys.executable, "-m", "assetcdn.control", "--config", str(config), "--host", "127.0.0.1",
                           "--port", str(port), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "[origin] allow_loopback must be true or false" in done.stderr


def test_an_environment_variable_that_is_no_number_is_named() -> None:
    """It stopped `assetcdn up` and the edge with `invalid literal for int() with base 10: 'abc'` and nothing else."""
    with pytest.raises(ValueError, match=r"ASSETCDN_ORIGIN_POOL_PER_ORIGIN \(\[origin\] pool_per_origin\) must be a "
                                         r"number like 32, not 'abc'"):
        load_settings(environ={"ASSETCDN_ORIGIN_POOL_PER_ORIGIN": "abc"})
    with pytest.raises(ValueError, match=r"ASSETCDN_ORIGIN_CONNECT_TIMEOUT_S \(\[origin\] connect_timeout_s\)"):
        load_settings(environ={"ASSETCDN_ORIGIN_CONNECT_TIMEOUT_S": "soon"})


def test_a_size_in_mb_with_a_fraction_is_taken_from_the_environment_as_from_a_file(tmp_path: Path) -> None:
    """`max_object_mb = 0.5` in a config file is 512 KB; ASSETCDN_ORIGIN_MAX_OBJECT_MB=0.5 stopped the edge."""
    config = tmp_path / "edge.toml"
    config.write_text("[origin]\nmax_object_mb = 0.5\n")
    from_env = OriginLimits.from_settings(load_settings(environ={"ASSETCDN_ORIGIN_MAX_OBJECT_MB": "0.5"}))
    assert from_env.max_object_bytes == OriginLimits.from_settings(load_settings(config, environ={})).max_object_bytes
    assert from_env.max_object_bytes == 512 * 1024
    assert load_settings(environ={"ASSETCDN_EDGE_CACHE_SIZE_MB": "2048"}).get("edge", "cache_size_mb") == 2048


@pytest.mark.parametrize("value", ["y", "enabled", "ture"])
def test_an_environment_switch_that_is_neither_true_nor_false_is_named(value: str) -> None:
    """`ASSETCDN_TLS_REDIRECT_HTTP=y` was read as false: plain HTTP went on being answered, with no word said."""
    with pytest.raises(ValueError, match=r"ASSETCDN_TLS_REDIRECT_HTTP \(\[tls\] redirect_http\) must be true or false"):
        load_settings(environ={"ASSETCDN_TLS_REDIRECT_HTTP": value})


@pytest.mark.parametrize(("value", "read"), [("1", True), ("Yes", True), (" on ", True), ("TRUE", True),
                                             ("0", False), ("no", False), ("off", False), ("False", False),
                                             ("", False)])
def test_the_words_a_switch_takes(value: str, read: bool) -> None:
    assert load_settings(environ={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": value}).get("origin", "allow_loopback") is read


@pytest.mark.parametrize(("key", "value"), [("reload_interval_s", "0"), ("reload_interval_s", "-1"),
                                            ("reload_interval_s", "nan"), ("handshake_timeout_s", "0"),
                                            ("handshake_timeout_s", "-1"), ("handshake_timeout_s", "nan"),
                                            ("h2_idle_timeout_s", "0"), ("h2_idle_timeout_s", "nan"),
                                            ("h2_max_concurrent_streams", "0"), ("h2_max_header_list_size", "0"),
                                            ("h2_max_control_frames_per_s", "0"), ("h2_max_connections", "-1"),
                                            ("h2_max_resets_per_10s", "-1"), ("h2_max_concurrent_streams", "nan")])
def test_an_https_setting_no_connection_could_work_with_is_named(key: str, value: str) -> None:
    """A handshake timeout of 0 or less (or NaN) reset every https connection, each with a traceback in the log; an
    HTTP/2 limit of 0 (streams, header list, control frames) or -1 connections failed every HTTP/2 request."""
    with pytest.raises(ValueError, match=rf"\[tls\] {key} must be"):
        check_https_settings(load_settings(environ={f"ASSETCDN_TLS_{key.upper()}": value}))


@pytest.mark.parametrize(("key", "value"), [("redirect_port", "70000"), ("redirect_port", "-1"),
                                            ("redirect_port", "nan"), ("hsts_max_age_s", "nan"),
                                            ("hsts_max_age_s", "inf"), ("hsts_max_age_s", "-1")])
def test_a_redirect_port_or_hsts_age_no_answer_could_carry_is_named(key: str, value: str) -> None:
    """A redirect_port of 70000 or -1 sent every plain request to https://<host>:70000/..., a URL no client can
    follow; NaN, or an hsts_max_age_s of NaN or infinity, stopped every worker with a traceback naming no setting."""
    with pytest.raises(ValueError, match=rf"\[tls\] {key} must be"):
        check_https_settings(load_settings(environ={f"ASSETCDN_TLS_{key.upper()}": value}))


@pytest.mark.parametrize("value", ["-60", "nan"])
def test_a_ticket_rotation_below_0_is_named(value: str) -> None:
    """A negative or NaN session_ticket_rotation_s was taken as 0: one session ticket key for as long as the edge
    lives, never rotated, with no word said."""
    with pytest.raises(ValueError, match=r"\[tls\] session_ticket_rotation_s must"):
        check_https_settings(load_settings(environ={"ASSETCDN_TLS_SESSION_TICKET_ROTATION_S": value}))


def test_the_documented_https_limits_pass() -> None:
    check_https_settings(load_settings(environ={}))
    check_https_settings(load_settings(environ={"ASSETCDN_TLS_SESSION_TICKET_ROTATION_S": "0",
                                                "ASSETCDN_TLS_H2_MAX_CONNECTIONS": "0",
                                                "ASSETCDN_TLS_H2_MAX_RESETS_PER_10S": "0",
                                                "ASSETCDN_TLS_H2_MAX_CONCURRENT_STREAMS": "1",
                                                "ASSETCDN_TLS_REDIRECT_PORT": "65535",
                                                "ASSETCDN_TLS_HSTS_MAX_AGE_S": "0"}))


@pytest.mark.parametrize(("name", "said"), [("ASSETCDN_TLS_RELOAD_INTERVAL_S", "[tls] reload_interval_s must be above 0 seconds"),
                                           ("ASSETCDN_TLS_HANDSHAKE_TIMEOUT_S", "[tls] handshake_timeout_s must be above 0 seconds")])
def test_an_https_edge_does_not_start_with_a_time_of_0(tmp_path: Path, name: str, said: str) -> None:
    """With operator certificates a reload interval of 0 read their files again in a loop that never waited: a core
    per worker. A handshake timeout of 0 started the edge, and every https connection was reset."""
    port = free_port_block(2)
    env = {**KEYS, "PATH": "/usr/bin:/bin", name: "0"}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(port), "--https-port", str(port + 1), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert said in done.stderr


def test_control_does_not_start_with_a_quoted_webhooks_allow_loopback(tmp_path: Path) -> None:
    """The same for `[webhooks] allow_loopback`: a quoted "false" let webhooks be sent to loopback targets."""
    config = tmp_path / "cdn.toml"
    config.write_text('[webhooks]\nallow_loopback = "false"\n')
    port = free_port_block(2)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_SERVER_DASHBOARD_PORT": str(port + 1)}
    done = subprocess.run([sys.executable, "-m", "assetcdn.control", "--config", str(config), "--host", "127.0.0.1",
                           "--port", str(port), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "[webhooks] allow_loopback must be true or false" in done.stderr
