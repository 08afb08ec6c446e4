"""A writer killed mid-commit leaves libgit2's lock and temporary files behind: the next control plane
clears them (holding the repository's writer lock), and a second live control plane cannot start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.storage.git_store import BRANCH, GitStore, RepositoryInUse
from assetcdn.shared.config import load_settings
from tests.support.control import ACCESS, ACCOUNT, SECRETS


def _leave_dead_writer_debris(repo: Path, head: str) -> None:
    """What libgit2 leaves when its process dies during `create_commit`: the ref's lock file (libgit2
    writes the new id into `<ref>.lock`, fsyncs it and renames it over the ref; killed before the
    rename, the lock stays, here half-written) and a loose object still under its temporary name."""
    (repo / (BRANCH + ".lock")).write_text(head[:17])
    (repo / "objects" / "tmp_object_git2_Xa91Qz").write_bytes(b"x\x01+)JMU\x00")


def _fsck(repo: Path) -> str:
    """`git fsck` of the repository: its complaints, or "" when it is clean."""
    fsck = subprocess.run(["git", "--git-dir", str(repo), "fsck", "--full", "--no-dangling"],
                          capture_output=True, text=True, check=False)
    return "" if fsck.returncode == 0 else fsck.stdout + fsck.stderr


def _open_in_another_process(repo: Path) -> int:
    """Exit status of a process that opens the repository as a writer: 7 when refused as in use."""
    probe = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                            "from assetcdn.control.storage.git_store import GitStore, RepositoryInUse\n"
                            "try:\n GitStore(Path(sys.argv[1]))\nexcept RepositoryInUse:\n sys.exit(7)",
                            str(repo)], capture_output=True, text=True, check=False)
    return probe.returncode


async def test_a_lock_left_by_a_dead_writer_does_not_block_writes_after_restart(tmp_path: Path) -> None:
    repo = tmp_path / "repo.git"
    git = GitStore(repo)
    first = await git.commit({"a.txt": b"one"}, "first")
    git.close()
    _leave_dead_writer_debris(repo, first.commit_id)

    git = GitStore(repo)
    try:
        assert sorted(git.recovered) == ["objects/tmp_object_git2_Xa91Qz", "refs/heads/main.lock"]
        second = await git.commit({"a.txt": b"two"}, "second")
        assert git.head_commit_id() == second.commit_id
        assert git.read_file("a.txt")[1] == b"two"
    finally:
        git.close()
    assert _fsck(repo) == ""


async def test_a_second_writer_cannot_open_the_repository_or_touch_a_live_writers_lock(tmp_path: Path) -> None:
    repo = tmp_path / "repo.git"
    live = GitStore(repo)
    try:
        await live.commit({"a.txt": b"one"}, "first")
        in_progress = repo / (BRANCH + ".lock")  # as if the live writer were in the middle of a commit
        in_progress.write_text("")
        with pytest.raises(RepositoryInUse, match="another control plane"):
            GitStore(repo)
        # Another process (a second `python -m assetcdn.control`) is refused the same way.
        assert _open_in_another_process(repo) == 7
        assert in_progress.exists()
        in_progress.unlink()
        await live.commit({"a.txt": b"two"}, "second")
    finally:
        live.close()
    GitStore(repo).close()  # released with the store (and by the kernel when a process dies)


async def test_a_damaged_branch_is_restored_to_the_newest_recorded_commit(aiohttp_client, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    settings = load_settings(environ={})
    control: TestClient = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    assert (await control.post("/api/core/zones", json={"Name": "kept"}, headers=ACCOUNT)).status == 201
    resp = await control.put("/api/storage/kept/v1/logos/a.txt", data=b"acknowledged", headers=ACCESS)
    assert resp.status == 201
    await control.close()
    (data_dir / "repo.git" / BRANCH).write_bytes(b"")  # a ref emptied by a crash of the machine

    control = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    resp = await control.get("/api/storage/kept/v1/logos/a.txt", headers=ACCESS)
    assert (resp.status, await resp.read()) == (200, b"acknowledged")
    resp = await control.put("/api/storage/kept/v1/logos/b.txt", data=b"after", headers=ACCESS)
    assert resp.status == 201, await resp.text()
