"""The data directory and the secrets file are their owner's only, and no secret value reaches a log."""

from __future__ import annotations

import logging
import stat
from dataclasses import fields
from pathlib import Path

import pytest

from assetcdn.shared.secrets import SECRETS_FILE, Secrets, load_or_create_secrets


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_dir_is_0700_and_the_secrets_file_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    secrets, generated = load_or_create_secrets(data_dir, environ={})
    assert _mode(data_dir) == 0o700
    assert _mode(data_dir / SECRETS_FILE) == 0o600
    assert sorted(generated) == sorted(Secrets.env_name(f.name) for f in fields(Secrets))
    assert secrets.metrics_key and secrets.metrics_key in (data_dir / SECRETS_FILE).read_text()


def test_an_existing_open_data_dir_and_secrets_file_are_tightened_and_said_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    secrets_file = data_dir / SECRETS_FILE
    secrets_file.write_text("ASSETCDN_ACCOUNT_KEY=operator-chosen-account-key\n")
    secrets_file.chmod(0o644)
    caplog.set_level(logging.WARNING)
    secrets, generated = load_or_create_secrets(data_dir, environ={})
    assert secrets.account_key == "operator-chosen-account-key"
    assert "ASSETCDN_ACCOUNT_KEY" not in generated
    assert _mode(data_dir) == 0o700
    assert _mode(secrets_file) == 0o600
    assert "was mode 0755; tightened to 0700" in caplog.text
    assert "was mode 0644; tightened to 0600" in caplog.text
    for value in secrets.as_env().values():
        assert value not in caplog.text


def test_a_private_data_dir_is_left_as_it_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    caplog.set_level(logging.WARNING)
    load_or_create_secrets(data_dir, environ={})
    assert caplog.text == ""
    assert _mode(data_dir) == 0o700
