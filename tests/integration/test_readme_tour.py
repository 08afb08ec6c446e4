"""The README's tour, run as a new user runs it: its shell commands, verbatim but for the base URL, with bash
against a real `assetcdn up` with demo content, each step's answer checked (status codes, the files it saves,
a real WebP); and the API guide's pull zone and purge examples, run the same way."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pyvips

from tests.integration.harness import KEYS, RunningCdn, free_port_block, made_demo_videos, start_cdn
from tests.prerequisites import installed_program

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
API_GUIDE = README.parent / "docs" / "api-guide.md"
# The API guide's sections whose examples a reader runs in order against their own `make run`: a pull zone of
# their own, then a tag purge within it.
GUIDE_SECTIONS = ("Pull zones: an edge in front of your own origin", "Edges, the cluster protocol, purges")
TOUR_URL = "http://127.0.0.1:8788"  # the base URL the README's tour is written for (`make run`'s default)
ORIGIN_PORT = "9000"  # the port of the tour's own origin (a pull zone's), run here on a free one
STATUS = "\n@status "
# Every curl of a step also writes the answer's status code after its output (a function the step's bash
# defines; the command itself is run as written).
CURL_STATUS = "curl() { command curl --write-out '\\n@status %{http_code}\\n' \"$@\"; }\n"


def tour_commands(readme: str) -> list[str]:
    """The commands of the README's ```sh blocks that use the tour's base URL, a command per line (lines
    ending in a backslash joined), comments and blank lines left out. A block may be indented (in a list item)."""
    commands = []
    for block in re.findall(r"^[ \t]*```sh\n(.*?)^[ \t]*```", readme, flags=re.S | re.M):
        if TOUR_URL not in block:
            continue
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip() and not command.lstrip().startswith("#"):
                commands.append(command.strip())
    return commands


@dataclass
class Step:
    command: str
    returncode: int
    output: str
    errors: str
    directory: Path
    cdn: RunningCdn
    origin_port: int

    @property
    def statuses(self) -> list[int]:
        return [int(line) for line in re.findall(r"^@status (\d+)$", self.output, flags=re.M)]

    @property
    def body(self) -> str:
        """What the step printed before the status code curl wrote."""
        return self.output.rsplit(STATUS, 1)[0]

    def json(self) -> dict:
        return json.loads(self.body)


def guide_sections(guide: str, titles: tuple[str, ...]) -> str:
    """The text of the API guide's `## ` sections of those titles, in the guide's order."""
    sections = re.split(r"^(?=## )", guide, flags=re.M)
    chosen = [section for section in sections if section.splitlines()[0].removeprefix("## ") in titles]
    assert len(chosen) == len(titles), f"the API guide has no section of each of {titles}"
    return "".join(chosen)


def run_step(command: str, directory: Path, cdn: RunningCdn, origin_port: int) -> Step:
    # Files a step reads must be there: a tour that uploads a file the clone does not have fails here.
    for name in re.findall(r"@(\S+)|sha256sum (\S+)", command):
        assert (directory / "".join(name)).is_file(), f"the tour reads {''.join(name)}, which it never made: {command}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSETCDN_")} | KEYS
    mapped = command.replace(TOUR_URL, cdn.edge_urls[0]).replace(ORIGIN_PORT, str(origin_port))
    result = subprocess.run(["bash", "-c", CURL_STATUS + mapped],
                            cwd=directory, env=env, capture_output=True, text=True, timeout=120, check=False)
    return Step(command, result.returncode, result.stdout, result.stderr, directory, cdn, origin_port)


def demo_svg(step: Step) -> None:
    assert step.statuses == [200] and "X-Cache: MISS" in step.output, step.output
    again = run_step(step.command, step.directory, step.cdn, step.origin_port)  # "(X-Cache: MISS, then HIT)"
    assert again.statuses == [200] and "X-Cache: HIT" in again.output, again.output


def zone_created(step: Step) -> None:
    assert step.statuses == [201], step.output
    assert step.json()["Name"] == "acme"


def demo_png_saved(step: Step) -> None:
    assert step.statuses == [200]
    assert (step.directory / "logo.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def uploaded(step: Step) -> None:
    data = (step.directory / "logo.png").read_bytes()
    assert step.statuses == [201], step.output
    answer = step.json()
    assert answer["Message"] == "File uploaded successfully"
    assert (answer["Length"], answer["Checksum"]) == (len(data), hashlib.sha256(data).hexdigest().upper())


def read_back(step: Step) -> None:
    assert step.statuses == [200], step.output
    assert re.search(r"^Content-Type: image/png", step.output, flags=re.M | re.I), step.output


def same_bytes(step: Step) -> None:
    assert step.output.strip() == "the same bytes"


def catalog(step: Step) -> None:
    assert step.statuses == [200], step.output
    size = (step.directory / "logo.png").stat().st_size
    assert [(a["path"], a["size"]) for a in step.json()["Data"]] == [("acme/v1/logos/logo.png", size)]


def small_webp(step: Step) -> None:
    assert step.statuses == [200], step.output
    data = (step.directory / "small.webp").read_bytes()
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    assert pyvips.Image.new_from_buffer(data, "").width == 200


def purged(step: Step) -> None:
    assert step.statuses == [200], step.output
    assert "project-acme" in step.body


def site_made(step: Step) -> None:
    assert (step.directory / "site" / "hello.txt").read_text() == "hello from my origin\n"


def origin_launched(step: Step) -> None:
    """The origin goes to the background, its output to /dev/null: the step itself prints nothing."""
    assert (step.output, step.errors) == ("", ""), step.output


def origin_listening(step: Step) -> None:
    """The wait the text gives right after launching the origin: once it is done, the origin takes connections
    (asked before, the next steps would meet a refused connection: the edge's 502 OriginUnreachable)."""
    assert "@status 200" in step.output, step.output
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", step.origin_port)) == 0


def pull_zone_created(name: str) -> Callable[[Step], None]:
    """The check of a step creating the pull zone `name` (the README's `mysite`, the guide's `site`)."""
    def check(step: Step) -> None:
        assert step.statuses == [201], step.output
        assert (step.json()["Name"], step.json()["Kind"]) == (name, "pull")
    return check


def pulled(body: str) -> Callable[[Step], None]:
    """The check of a step asking a pull zone for its origin's file, whose text is `body`: MISS, then HIT with Age."""
    def check(step: Step) -> None:
        assert step.statuses == [200] and "X-Cache: MISS" in step.output, step.output
        assert step.body.endswith(body), step.output
        again = run_step(step.command, step.directory, step.cdn, step.origin_port)
        assert again.statuses == [200] and "X-Cache: HIT" in again.output and "Age: " in again.output, again.output
    return check


def guide_site_made(step: Step) -> None:
    assert (step.directory / "site" / "hello.txt").read_text() == "hello\n"


def guide_tag_purged(step: Step) -> None:
    """The answer the guide shows under its example (its `...` standing for the fields it leaves out), for the
    pull zone the guide made: a reader who follows the guide has that zone, and no other."""
    assert step.statuses == [200], step.output
    shown = re.search(r"^\s*# (\{\"success\".*), \.\.\.\}$", API_GUIDE.read_text(), flags=re.M)
    assert shown, "the API guide no longer shows the tag purge's answer"
    documented = json.loads(shown.group(1) + "}")
    answer = step.json()
    assert {name: answer.get(name) for name in documented} == documented, step.output
    assert answer["zone"] == "site", step.output


# What each step of the tour must answer, in the tour's order: a step the tour adds needs its check here.
CHECKS: list[tuple[str, Callable[[Step], None]]] = [
    (r"^curl -i \S+/demo/v1/logos/logo\.svg$", demo_svg),
    (r"^curl -X POST (?!.*Origin).* \S+/api/core/zones$", zone_created),
    (r"^curl -f -o logo\.png \S+/demo/v1/logos/logo\.png$", demo_png_saved),
    (r"^curl -X PUT .*--data-binary @logo\.png \S+/api/storage/acme/v1/logos/logo\.png$", uploaded),
    (r"^curl -D - -o copy\.png \S+/acme/v1/logos/logo\.png$", read_back),
    (r"^cmp logo\.png copy\.png", same_bytes),
    (r"^curl -H .*api/assets\?project=acme'$", catalog),
    (r"^curl -f -o small\.webp '\S+/api/transform\?url=/acme/v1/logos/logo\.png&w=200&format=webp'$", small_webp),
    (r"^curl -X POST .* \S+/api/purge$", purged),
    (r"^mkdir -p site && echo .* > site/hello\.txt && touch -d '1 day ago' site/hello\.txt$", site_made),
    (r"^python3 -m http\.server 9000 --bind 127\.0\.0\.1 --directory site .*&$", origin_launched),
    (r"^until curl -s -o /dev/null http://127\.0\.0\.1:9000/; do sleep 0\.2; done", origin_listening),
    (r"^curl -X POST .*\"Origin\".* \S+/api/core/zones$", pull_zone_created("mysite")),
    (r"^curl -i \S+/mysite/hello\.txt$", pulled("hello from my origin\n")),
]


# What each example of the API guide's pull zone and purge sections must answer, in the guide's order.
GUIDE_CHECKS: list[tuple[str, Callable[[Step], None]]] = [
    (r"^mkdir -p site && echo 'hello' > site/hello\.txt && touch -d '1 day ago' site/hello\.txt$", guide_site_made),
    (r"^python3 -m http\.server 9000 --bind 127\.0\.0\.1 --directory site .*&$", origin_launched),
    (r"^until curl -s -o /dev/null http://127\.0\.0\.1:9000/; do sleep 0\.2; done", origin_listening),
    (r"^curl -X POST .*\"Origin\".* \S+/api/core/zones$", pull_zone_created("site")),
    (r"^curl -i \S+/site/hello\.txt\b", pulled("hello\n")),
    (r"^curl -X POST .*\"zone\".* \S+/api/purge$", guide_tag_purged),
]


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    installed_program("curl", "tests/integration/setup.sh")
    # The tour's pull zone has its origin on this machine: loopback origins allowed, as the README says to.
    running = start_cdn(tmp_path_factory.mktemp("tour"), demo=True, prepare=made_demo_videos,
                        env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"})
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def origin_port() -> Iterator[int]:
    """A free port for the tour's origin, whose server the tour starts in the background: stopped here."""
    port = free_port_block(1)
    yield port
    subprocess.run(["pkill", "-f", f"http.server {port} "], check=False)


def run_checked(commands: list[str], checks: list[tuple[str, Callable[[Step], None]]], what: str, tmp_path: Path,
                cdn: RunningCdn, origin_port: int) -> None:
    """Run `commands` in order, each checked by the one of `checks` whose pattern it matches; every check once, in
    its order (`what`: what a command is, in the failure's words)."""
    checked = []
    for command in commands:
        found = [(pattern, check) for pattern, check in checks if re.search(pattern, command)]
        assert len(found) == 1, f"{what} this test does not check: {command!r}"
        step = run_step(command, tmp_path, cdn, origin_port)
        assert step.returncode == 0, (command, step.output, step.errors)
        found[0][1](step)
        checked.append(found[0][0])
    assert checked == [pattern for pattern, _ in checks]  # every step, in its order


def test_the_readme_tour_works_step_by_step(cdn: RunningCdn, tmp_path: Path, origin_port: int) -> None:
    run_checked(tour_commands(README.read_text()), CHECKS, "a tour step", tmp_path, cdn, origin_port)


def test_the_api_guides_pull_zone_and_purge_examples_work(cdn: RunningCdn, tmp_path: Path, origin_port: int) -> None:
    run_checked(tour_commands(guide_sections(API_GUIDE.read_text(), GUIDE_SECTIONS)), GUIDE_CHECKS,
                "an example of the API guide", tmp_path, cdn, origin_port)
