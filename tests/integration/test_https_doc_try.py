"""docs/https.md's try on one machine, run as an operator runs it: its shell commands, verbatim but for the https
port, with bash against a real `assetcdn up --https-port` with demo content and no certificate of its own. The
doc's first example named a `ca.pem` and a `cdn.example.com` it never said where to get; the self-signed default
certificate `up` serves then named only localhost, so even a client trusting it failed the name check for the
https://127.0.0.1:P URL `up` prints."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import RunningCdn, free_port_block, made_demo_videos, start_cdn
from tests.prerequisites import installed_program

pytestmark = pytest.mark.integration

HTTPS_DOC = Path(__file__).resolve().parents[2] / "docs" / "https.md"
DOC_PORT = "8443"  # the https port the doc's commands are written for
CURL_VERSION = "\n@http %{http_code} %{http_version}\n"


def try_commands(doc: str) -> list[str]:
    """The commands of the doc's ```sh block that fetches the edge's own certificate, `up` itself left out (the
    test starts it), comments cut off."""
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", doc, flags=re.S | re.M) if "openssl s_client" in b]
    assert len(blocks) == 1, "docs/https.md has no single block trying https on one machine"
    lines = [line.split("  #", 1)[0].strip() for line in blocks[0].splitlines()]
    assert lines[0] == f"assetcdn up --https-port {DOC_PORT}"
    return [line for line in lines[1:] if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    installed_program("curl", "tests/integration/setup.sh")
    installed_program("openssl", "tests/integration/setup.sh")
    running = start_cdn(tmp_path_factory.mktemp("https-doc"), demo=True, prepare=made_demo_videos,
                        env_extra={"ASSETCDN_TLS_HTTPS_PORT": str(free_port_block(1))})
    try:
        yield running
    finally:
        running.stop()


def test_the_https_docs_try_on_one_machine_works(cdn: RunningCdn, tmp_path: Path) -> None:
    commands = try_commands(HTTPS_DOC.read_text())
    answers = []
    for command in commands:
        run = command.replace(f":{DOC_PORT}", f":{cdn.https_port}")
        if run.startswith("curl "):
            run = f"curl --silent --show-error --output /dev/null --write-out '{CURL_VERSION}' " + run[len("curl "):]
        done = subprocess.run(["bash", "-c", run], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        answers.extend(re.findall(r"^@http (\d+) (\S+)$", done.stdout, flags=re.M))
    assert "BEGIN CERTIFICATE" in (tmp_path / "ca.pem").read_text()
    # Each curl verified the edge's certificate for the URL's name, and got the logo over the protocol it says.
    assert answers == [("200", "2"), ("200", "1.1")], commands
