"""`assetcdn sign PATH --ttl N` prints a URL whose signature /api/signed accepts."""

from __future__ import annotations

import math
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from assetcdn.cli import main
from assetcdn.shared.signing import signature_matches


def test_sign_prints_a_verifiable_url_from_the_data_dir_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSETCDN_SIGNED_URL_SECRET", raising=False)
    (tmp_path / "secrets.env").write_text("ASSETCDN_SIGNED_URL_SECRET=from-file\n")
    before = int(time.time())
    assert main(["sign", "/demo/v1/logos/logo.svg", "--ttl", "60", "--data-dir", str(tmp_path),
                 "--base-url", "https://cdn.example"]) == 0
    url = urlsplit(capsys.readouterr().out.strip())
    assert (url.scheme, url.netloc, url.path) == ("https", "cdn.example", "/api/signed")
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["path"] == "/demo/v1/logos/logo.svg"
    assert before + 60 <= int(query["expires"]) <= math.ceil(time.time()) + 60
    assert signature_matches("from-file", query["path"], query["expires"], query["sig"])
    assert not signature_matches("other-secret", query["path"], query["expires"], query["sig"])


def test_sign_without_a_secret_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSETCDN_SIGNED_URL_SECRET", raising=False)
    assert main(["sign", "/x.png", "--data-dir", str(tmp_path)]) == 2
    assert "no signed-URL secret" in capsys.readouterr().err
