"""A commit's events come from the commit alone (its changes and its trailer), with stable ids; the
history walk that finds commits a killed process left unrecorded; the settings' retry delays."""

from __future__ import annotations

from pathlib import Path

import pytest

from assetcdn.control.storage.git_store import FileChange, GitStore, LoggedCommit
from assetcdn.control.webhooks.events import (
    change_of,
    commit_events,
    pipeline_run,
    with_trailer,
    zone_created,
    zone_deleted,
)
from assetcdn.control.webhooks.settings import WebhookSettings
from assetcdn.shared.config import load_settings


def logged(message: str, *changes: FileChange, sizes: dict[str, int] | None = None) -> LoggedCommit:
    return LoggedCommit("c" * 40, message, "2026-04-01T00:00:00.000Z", changes, sizes or {})


def test_trailers_name_the_kind_of_change() -> None:
    message = with_trailer("Create zone akande with its v1 directories", zone_created("akande"))
    assert message.splitlines()[0] == "Create zone akande with its v1 directories"
    assert change_of(message) == zone_created("akande")
    assert change_of(with_trailer("Pipeline", pipeline_run("stock", "logo_1"))) == pipeline_run("stock", "logo_1")
    assert change_of("Upload a.txt via Storage API") is None
    assert with_trailer("Upload", None) == "Upload"


def test_file_changes_become_asset_and_rules_events() -> None:
    events = commit_events(logged(
        "Batch upload",
        FileChange("clients/akande/v1/logos/new.svg", None, "b1"),
        FileChange("clients/akande/v1/logos/old.svg", "a2", "b2"),
        FileChange("clients/akande/v1/logos/gone.svg", "a3", None),
        FileChange("clients/akande/v1/logos/.gitkeep", None, "b4"),
        FileChange("stocks/images/s.png", None, "b5"),
        FileChange("_headers", "a6", None),
        sizes={"clients/akande/v1/logos/new.svg": 10, "clients/akande/v1/logos/old.svg": 20, "stocks/images/s.png": 5}))
    assert [(e.event, e.data) for e in events] == [
        ("rules.updated", {"file": "_headers", "action": "removed", "commit": "c" * 40}),
        ("asset.deleted", {"path": "/akande/v1/logos/gone.svg"}),
        ("asset.created", {"path": "/akande/v1/logos/new.svg", "size": 10}),
        ("asset.updated", {"path": "/akande/v1/logos/old.svg", "size": 20}),
        ("asset.created", {"path": "/stocks/images/s.png", "size": 5}),
    ]
    assert [e.id for e in events] == [f"{'c' * 40}-{n}" for n in range(5)]
    assert all(e.timestamp == "2026-04-01T00:00:00.000Z" for e in events)


def test_zone_and_pipeline_commits_give_their_own_events() -> None:
    scaffold = FileChange("clients/akande/v1/logos/.gitkeep", None, "b1")
    assert [(e.event, e.data) for e in commit_events(logged(with_trailer("x", zone_created("akande")), scaffold))] \
        == [("zone.created", {"zone": "akande"})]
    deleted = commit_events(logged(with_trailer("x", zone_deleted("akande")),
                                   FileChange("clients/akande/v1/logos/.gitkeep", "a1", None),
                                   FileChange("clients/akande/v1/logos/a.svg", "a2", None)))
    assert [(e.event, e.data) for e in deleted] == [("zone.deleted", {"zone": "akande", "filesRemoved": 1})]
    piped = commit_events(logged(with_trailer("x", pipeline_run("stock", "logo")),
                                 FileChange("stocks/images/logo.svg", None, "b1")))
    assert [(e.event, e.data) for e in piped] == [("pipeline.completed", {
        "mode": "stock", "name": "logo", "zone": "stocks", "commit": "c" * 40, "files": ["stocks/images/logo.svg"]})]


async def test_the_history_walk_finds_the_commits_after_a_known_one(tmp_path: Path) -> None:
    git = GitStore(tmp_path / "repo.git")
    try:
        first = (await git.commit({"clients/a/v1/logos/x.txt": b"x"}, "one")).commit_id
        second = (await git.commit({"clients/a/v1/logos/x.txt": b"xy", "clients/a/v1/logos/y.txt": b"y"},
                                   "two")).commit_id
        third = (await git.commit({"clients/a/v1/logos/y.txt": None}, "three")).commit_id
        assert [c.commit_id for c in await git.run(git.commits_since, None, 10)] == [first, second, third]
        since_first = await git.run(git.commits_since, first, 10)
        assert [c.commit_id for c in since_first] == [second, third]
        assert sorted(since_first[0].changes, key=lambda c: c.path)[0].old_blob is not None
        assert since_first[0].sizes == {"clients/a/v1/logos/x.txt": 2, "clients/a/v1/logos/y.txt": 1}
        assert since_first[1].changes[0].new_blob is None and since_first[1].message == "three"
        assert await git.run(git.commits_since, third, 10) == []
        assert await git.run(git.commits_since, first, 1) is None  # not within the limit
        assert await git.run(git.commits_since, "0" * 40, 10) is None  # not in the history at all
    finally:
        git.close()


@pytest.mark.parametrize(("raw", "expected"), [([1, 5, 25, 125], (1.0, 5.0, 25.0, 125.0)),
                                               ("0.5, 2", (0.5, 2.0)), ("", ())])
def test_retry_delays_come_from_toml_or_the_environment(raw: object, expected: tuple[float, ...]) -> None:
    settings = load_settings(environ={}).with_overrides("webhooks", retry_delays_s=raw)
    assert WebhookSettings.from_settings(settings).retry_delays_s == expected


def test_the_defaults_are_the_documented_ones() -> None:
    settings = WebhookSettings.from_settings(load_settings(environ={}))
    assert settings.retry_delays_s == (1.0, 5.0, 25.0, 125.0) and settings.timeout_s == 5.0
    assert settings.allow_loopback is False
    assert settings.concurrency_total > settings.concurrency_per_target
    env = load_settings(environ={"ASSETCDN_WEBHOOKS_RETRY_DELAYS_S": "0.1,0.2"})
    assert WebhookSettings.from_settings(env).retry_delays_s == (0.1, 0.2)


def test_one_retry_delay_from_the_environment_is_read_as_acmes_is() -> None:
    env = load_settings(environ={"ASSETCDN_WEBHOOKS_RETRY_DELAYS_S": "5"})   # TOML reads it as a number
    assert WebhookSettings.from_settings(env).retry_delays_s == (5.0,)
