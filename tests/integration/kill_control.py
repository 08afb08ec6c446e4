"""The kill -9 scenarios, shared by the fault tests: uploads in flight
while the control plane is killed, then what a client may rely on afterwards."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from assetcdn.shared.paths import cdn_path_of
from tests.integration.faults import poll
from tests.integration.harness import ACCESS, free_port_block, up_env

LOCK = "refs/heads/main.lock"


@dataclass
class UploadOutcome:
    path: str            # the CDN path, /<zone>/v1/...
    body: bytes
    status: int | None = None  # None: no answer (the connection broke)

    @property
    def acknowledged(self) -> bool:
        return self.status == 201


@dataclass
class KillReport:
    outcomes: list[UploadOutcome] = field(default_factory=list)
    killed_after: int = 0  # acknowledgements before the kill

    @property
    def acknowledged(self) -> list[UploadOutcome]:
        return [o for o in self.outcomes if o.acknowledged]

    @property
    def unacknowledged(self) -> list[UploadOutcome]:
        return [o for o in self.outcomes if not o.acknowledged]


async def upload_and_kill(session: aiohttp.ClientSession, base_urls: list[str], zone: str, count: int,
                          kill: Callable[[], None], kill_after: int, prefix: str = "f") -> KillReport:
    """`count` concurrent uploads spread over `base_urls`; `kill()` runs when `kill_after` have been
    acknowledged. Every upload's outcome is recorded; none is retried."""
    report = KillReport([UploadOutcome(f"/{zone}/v1/docs/{prefix}{i:03d}.txt",
                                       f"{prefix}{i:03d} ".encode() + os.urandom(64 + i * 7).hex().encode())
                         for i in range(count)])
    acked = 0
    killed = False

    async def one(index: int, outcome: UploadOutcome) -> None:
        nonlocal acked, killed
        url = f"{base_urls[index % len(base_urls)]}/api/storage{outcome.path}"
        try:
            async with session.put(url, data=outcome.body, headers=ACCESS,
                                   timeout=aiohttp.ClientTimeout(total=60)) as resp:
                await resp.read()
                outcome.status = resp.status
        except (aiohttp.ClientError, TimeoutError):
            outcome.status = None
        if outcome.acknowledged:
            acked += 1
            if acked >= kill_after and not killed:
                killed = True
                report.killed_after = acked
                kill()

    await asyncio.gather(*(one(i, o) for i, o in enumerate(report.outcomes)))
    if not killed:
        report.killed_after = acked
        kill()
    return report


def git_files(repo: Path) -> dict[str, tuple[str, int]]:
    """CDN path -> (blob id, size) of every file on main, as git itself reads the repository."""
    listing = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "-r", "-l", "main"],
                             capture_output=True, text=True, check=True).stdout
    files = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _mode, _kind, blob, size = meta.split()
        files["/" + cdn_path_of(path)] = (blob, int(size))
    return files


def fsck(repo: Path) -> str:
    """`git fsck --full`'s complaints; "" when the repository is clean (dangling objects are not errors)."""
    result = subprocess.run(["git", "--git-dir", str(repo), "fsck", "--full", "--no-dangling"],
                            capture_output=True, text=True, check=False)
    return "" if result.returncode == 0 else result.stdout + result.stderr


async def catalog(session: aiohttp.ClientSession, base_url: str, zone: str) -> dict[str, int]:
    """CDN path -> size of every file of `zone` in GET /api/assets (the catalog), all pages."""
    found: dict[str, int] = {}
    page = 1
    while True:
        async with session.get(f"{base_url}/api/assets", params={"project": zone, "per_page": "200",
                                                                  "page": str(page)}, headers=ACCESS) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.json()
        found.update({"/" + item["path"].lstrip("/"): item["size"] for item in body["Data"]})
        if page >= body["Pagination"]["TotalPages"]:
            return found
        page += 1


async def stored(session: aiohttp.ClientSession, base_url: str, path: str) -> tuple[int, bytes]:
    async with session.get(f"{base_url}/api/storage{path}", headers=ACCESS) as resp:
        return resp.status, await resp.read()


async def check_after_restart(session: aiohttp.ClientSession, control_url: str, report: KillReport,
                              repo: Path) -> list[str]:
    """What a client may rely on after the kill and restart; returns the violations (empty: all held)."""
    problems = []
    for outcome in report.outcomes:
        status, data = await stored(session, control_url, outcome.path)
        if outcome.acknowledged and (status, data) != (200, outcome.body):
            problems.append(f"acknowledged {outcome.path} lost: {status} {data[:80]!r}")
        elif not outcome.acknowledged and status != 404 and (status, data) != (200, outcome.body):
            problems.append(f"unacknowledged {outcome.path} neither absent nor complete: {status}")
    if complaint := fsck(repo):
        problems.append(f"git fsck: {complaint}")
    return problems


@dataclass
class ControlProcess:
    """One `python -m assetcdn.control` outside `assetcdn up`, restarted by the caller."""
    data_dir: Path
    log_path: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        # Its dashboard port too: the default (8787) is one port for every suite on the machine.
        self.port = free_port_block(2)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "assetcdn.control", "--data-dir", str(self.data_dir), "--host", "127.0.0.1",
                 "--port", str(self.port), "--dashboard-port", str(self.port + 1)],
                env=up_env({"ASSETCDN_SEARCH_SEMANTIC": "false"}), stdout=log, stderr=subprocess.STDOUT)

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        async def ready() -> bool | None:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"control exited with {self.process.returncode}:\n"
                                     f"{self.log_path.read_text()[-3000:]}")
            async with session.get(f"{self.url}/api/health") as resp:
                return True if resp.status == 200 else None

        await poll(ready, timeout_s=60, what="control healthy", interval_s=0.1)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def kill_when_locked(pid: int, repo: Path, within_s: float) -> subprocess.Popen[bytes]:
    """A watcher process that SIGKILLs `pid` while `<repo>/refs/heads/main.lock` exists (libgit2 is then
    between writing the new ref and renaming it into place), or regardless once told the writes are over
    (`kill_now`) or after `within_s`. The lock lives
    for microseconds: the watcher stops the process (SIGSTOP) the moment it sees the lock and kills it only if
    the lock is still there once every thread has stopped; otherwise it lets the process go on and watches for
    the next one: the signal of a kill on sight mostly arrives after the rename."""
    script = ("import os, signal, sys, time\n"
              "pid, lock, until = int(sys.argv[1]), sys.argv[2], time.monotonic() + float(sys.argv[3])\n"
              "def state(task):\n"
              "    try:\n"
              "        with open(f'/proc/{pid}/task/{task}/stat') as stat:\n"
              "            return stat.read().rsplit(')', 1)[1].split()[0]\n"
              "    except (OSError, IndexError):\n"
              "        return 'X'\n"
              "def all_stopped():\n"
              "    try:\n"
              "        tasks = os.listdir(f'/proc/{pid}/task')\n"
              "    except OSError:\n"
              "        return True\n"
              "    return all(state(task) in 'tTZX' for task in tasks)\n"
              "over = []\n"
              "signal.signal(signal.SIGUSR1, lambda *_: over.append(True))\n"
              "print('ready', flush=True)\n"
              "while time.monotonic() < until and not over:\n"
              "    if os.path.exists(lock):\n"
              "        os.kill(pid, signal.SIGSTOP)\n"
              "        while not all_stopped() and time.monotonic() < until:\n"
              "            pass\n"
              "        if os.path.exists(lock):\n"
              "            break\n"
              "        os.kill(pid, signal.SIGCONT)\n"
              "os.kill(pid, signal.SIGKILL)\n")
    watcher = subprocess.Popen([sys.executable, "-c", script, str(pid), str(repo / LOCK), str(within_s)],
                               stdout=subprocess.PIPE)
    assert watcher.stdout is not None and watcher.stdout.readline() == b"ready\n"
    return watcher


def kill_now(watcher: subprocess.Popen[bytes]) -> None:
    """Tells a `kill_when_locked` watcher that no more writes come: it kills at once instead of watching on."""
    watcher.send_signal(signal.SIGUSR1)


def wait_exit(process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
