"""Path rules: storage paths carry `clients/`, CDN paths do not; traversal and odd names are refused."""

from __future__ import annotations

import pytest

from assetcdn.shared.paths import (
    RESERVED_ZONE_NAMES,
    InvalidPath,
    cdn_path_of,
    has_extension,
    parse_cdn_path,
    parse_storage_path,
    repo_path_of,
    validate_zone_name,
)

SPEC_RESERVED = ["stocks", "shared", "website", "functions", "api", "dashboard", "dist", "content", "global", "clients"]


@pytest.mark.parametrize(("raw", "repo_path", "zone", "cdn_path"), [
    ("akande/v1/logos/logo.svg", "clients/akande/v1/logos/logo.svg", "akande", "akande/v1/logos/logo.svg"),
    ("clients/akande/v1/logos/logo.svg", "clients/akande/v1/logos/logo.svg", "akande", "akande/v1/logos/logo.svg"),
    ("/akande/v1/logos/logo.svg", "clients/akande/v1/logos/logo.svg", "akande", "akande/v1/logos/logo.svg"),
    ("stocks/images/sky.webp", "stocks/images/sky.webp", None, "stocks/images/sky.webp"),
    ("akande/v1/logos/logo (dark)@2x.svg", "clients/akande/v1/logos/logo (dark)@2x.svg", "akande",
     "akande/v1/logos/logo (dark)@2x.svg"),
])
def test_storage_paths_map_into_the_repository(raw: str, repo_path: str, zone: str | None, cdn_path: str) -> None:
    path = parse_storage_path(raw)
    assert (path.repo_path, path.zone, path.cdn_path, path.client_path) == (repo_path, zone, cdn_path, cdn_path)


@pytest.mark.parametrize(("raw", "repo_path"), [
    ("", ""), ("/", ""), ("akande/", "clients/akande"), ("akande/v1", "clients/akande/v1"),
    ("clients/", "clients"), ("stocks/", "stocks"),
])
def test_directory_paths(raw: str, repo_path: str) -> None:
    assert parse_storage_path(raw, directory=True).repo_path == repo_path


@pytest.mark.parametrize("raw", [
    "akande/../x.svg", "../x.svg", "akande/v1/..", "akande/./x.svg",
    "akande/v1/%2e%2e/x.svg", "akande/v1/%2E%2E/x.svg", "akande/%252e%252e/x.svg", "akande/v1/%2fetc.svg",
    "akande/v1/x\x00.svg", "akande\\v1\\x.svg", "akande//v1/x.svg", "akande/v1/x.svg/", "//akande/x.svg",
    "akande/.git/config", ".git/HEAD", "akande/.github/workflows/x.yml", "akande/node_modules/x.js",
    "akande/v1/<x>.svg", "akande/v1/x;rm.svg", "akande/v1/é.svg", "a" * 1025, "", "clients",
    # Spellings git takes for .git (case, trailing dots and spaces, the 8.3 short name) and the other
    # forbidden names in any case; segments of dots and spaces only.
    "akande/.GIT/x.svg", "akande/.Git/x.svg", "akande/.git./x.svg", "akande/.git /x.svg", "akande/GIT~1/x.svg",
    "akande/git~1 ./x.svg", "akande/.GitHub/x.yml", "akande/NODE_MODULES/x.js", "akande/.../x.svg",
    "akande/.. /x.svg",
    # Control characters: '$' let a trailing newline through.
    "akande/v1/x.svg\n", "akande\n/v1/x.svg", "akande/v1/x\r.svg", "akande/v1/x\x7f.svg", "akande/v1/x\x85.svg",
])
def test_refused_storage_paths(raw: str) -> None:
    with pytest.raises(InvalidPath):
        parse_storage_path(raw)


@pytest.mark.parametrize("raw", ["akande//", "akande/v1//", "akande/../", "%2e%2e/", ".git/", ".GIT/", "akande\n/"])
def test_refused_directory_paths(raw: str) -> None:
    with pytest.raises(InvalidPath):
        parse_storage_path(raw, directory=True)


def test_cdn_paths() -> None:
    assert parse_cdn_path("/akande/v1/logos/logo.svg") == "akande/v1/logos/logo.svg"
    assert parse_cdn_path("stocks/images/sky.webp") == "stocks/images/sky.webp"
    for raw in ("clients/akande/v1/logos/logo.svg", "akande/../x.svg", "akande//x.svg", "", "/"):
        with pytest.raises(InvalidPath):
            parse_cdn_path(raw)


def test_repo_and_cdn_paths_round_trip() -> None:
    for cdn_path in ("akande/v1/logos/logo.svg", "stocks/images/sky.webp"):
        assert cdn_path_of(repo_path_of(cdn_path)) == cdn_path
    assert repo_path_of("akande/v1/logos/logo.svg") == "clients/akande/v1/logos/logo.svg"
    assert repo_path_of("stocks/x.png") == "stocks/x.png"


@pytest.mark.parametrize(("path", "expected"), [
    ("akande/v1/logos/logo.svg", True), ("akande/v1/logos", False), ("akande/v1/logos/", False),
    ("akande/v1.0/logos", False), (".gitkeep", True), ("", False),
])
def test_has_extension(path: str, expected: bool) -> None:
    assert has_extension(path) is expected


@pytest.mark.parametrize("name", SPEC_RESERVED)
def test_spec_reserved_zone_names_are_refused(name: str) -> None:
    assert name in RESERVED_ZONE_NAMES
    problem = validate_zone_name(name)
    assert problem is not None and "reserved" in problem


@pytest.mark.parametrize("name", ["a", "x" * 65, "Akande", "ak_ande", "ak.ande", "", "ak/x", ".git"])
def test_zone_names_outside_the_pattern_are_refused(name: str) -> None:
    assert validate_zone_name(name) is not None


@pytest.mark.parametrize("name", ["ab", "akande", "brand-2", "9" * 64, "--"])
def test_zone_names_in_the_pattern_are_accepted(name: str) -> None:
    assert validate_zone_name(name) is None


@pytest.mark.parametrize("name", ["nlzone\n", "akande\n", "ak\nande", "Akande", "a"])
def test_zone_names_are_matched_whole(name: str) -> None:
    assert validate_zone_name(name) is not None


@pytest.mark.parametrize("raw", ["akande/v1/.gitkeep", "akande/v1/git~2/x.svg", "akande/v1/.git.svg",
                                 "akande/v1/x.git/y.svg", "stocks/images/a.b.c.png"])
def test_names_git_accepts_stay_allowed(raw: str) -> None:
    assert parse_storage_path(raw).repo_path.endswith(raw.split("/", 1)[1])
