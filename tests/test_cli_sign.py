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


@pytest.mark.parametrize("ttl", ["0", "-5"])
def test_a_ttl_that_is_not_positive_is_refused_without_a_url(ttl: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`--ttl 0` or a negative one printed a URL that had expired as it was made (403 `URL expired`), exit 0."""
    (tmp_path / "secrets.env").write_text("ASSETCDN_SIGNED_URL_SECRET=from-file\n")
    with pytest.raises(SystemExit) as exited:
        main(["sign", "/demo/v1/private/x.pdf", "--ttl", ttl, "--data-dir", str(tmp_path)])
    assert exited.value.code == 2
    out = capsys.readouterr()
    assert out.out == "" and "--ttl" in out.err


@pytest.mark.parametrize("path", ["/demo/../x.pdf", "/demo//v1/private/x.pdf", "/demo/v1/\x00.pdf"])
def test_a_path_the_edge_refuses_is_refused_without_a_url(path: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A path /api/signed answers 403 `Invalid path format` (a `..`, an empty segment, NUL) was signed all the same."""
    (tmp_path / "secrets.env").write_text("ASSETCDN_SIGNED_URL_SECRET=from-file\n")
    assert main(["sign", path, "--data-dir", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "path" in out.err
