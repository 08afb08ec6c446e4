"""The [acme] settings: off by default, https directories only, the retry backoff, which public hosts a CA can
issue for, and a clear stop when the account key cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from assetcdn.control.acme.settings import AcmeSettings, public_host
from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.support.control import SECRETS


def test_acme_is_off_by_default_and_env_overrides_apply() -> None:
    assert not AcmeSettings.from_settings(load_settings(environ={})).enabled
    acme = AcmeSettings.from_settings(load_settings(environ={
        "ASSETCDN_ACME_DIRECTORY_URL": "https://acme-staging-v02.api.letsencrypt.org/directory",
        "ASSETCDN_ACME_RETRY_DELAYS_S": "5,50", "ASSETCDN_ACME_CONTACT_EMAIL": "ops@example.com"}))
    assert acme.enabled and acme.contact_email == "ops@example.com"
    assert [acme.retry_delay(n) for n in (1, 2, 3, 9)] == [5.0, 50.0, 50.0, 50.0]  # the last delay repeats
    same = AcmeSettings.from_settings(load_settings(environ={"ASSETCDN_ACME_RETRY_DELAYS_S": "[5, 50]"}))
    assert same.retry_delays_s == (5.0, 50.0)


@pytest.mark.parametrize("environ", [{"ASSETCDN_ACME_DIRECTORY_URL": "http://ca.example/dir"},
                                     {"ASSETCDN_ACME_RETRY_DELAYS_S": "0"}])
def test_a_plain_http_directory_or_a_zero_delay_stops_start_up(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="acme"):
        AcmeSettings.from_settings(load_settings(environ=environ))


@pytest.mark.parametrize(("url", "host"), [
    ("https://cdn.example.com", "cdn.example.com"), ("https://CDN.Example.com:8443/", "cdn.example.com"),
    ("http://cdn.example.com", None), ("https://127.0.0.1:8788", None), ("https://localhost:8788", None),
    ("https://[::1]/", None), ("", None), ("https://intranet", None)])
def test_only_an_https_public_url_on_a_public_name_gets_a_certificate(url: str, host: str | None) -> None:
    assert public_host(url) == host


async def test_an_unreadable_account_key_stops_start_up_with_an_error_naming_the_file(
        aiohttp_client: object, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "acme").mkdir(parents=True)
    key_file = data_dir / "acme" / "account.key"
    key_file.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    settings = load_settings(environ={"ASSETCDN_ACME_DIRECTORY_URL": "https://127.0.0.1:9/dir"})
    with pytest.raises(RuntimeError, match=str(key_file)):
        await aiohttp_client(create_app(settings, SECRETS, data_dir))  # type: ignore[operator]
