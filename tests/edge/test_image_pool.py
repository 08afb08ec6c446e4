"""The image pool: jobs run in worker processes that are killed and replaced when they overrun
their time or memory budget, a full queue is a 503, and close() leaves no process behind."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pyvips

from assetcdn.edge.image_pool import QUEUE_FACTOR, ImagePool, JobFailed
from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.jobs import transform_variant
from assetcdn.edge.transform.options import parse_transform_options
from assetcdn.shared.errors import LegacyError
from tests.edge import pool_jobs


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _pool(concurrency: int = 1, *, budget: float = 30.0, memory_mb: int = 1024) -> ImagePool:
    return ImagePool(concurrency, TransformLimits(time_budget_s=budget), memory_limit_mb=memory_mb)


async def test_jobs_run_in_worker_processes_and_a_full_queue_is_refused(tmp_path: Path) -> None:
    pool = _pool(1)
    release = tmp_path / "release"
    try:
        pool.start()
        jobs = [asyncio.ensure_future(pool.run(pool_jobs.wait_then_pid, str(release))) for _ in range(QUEUE_FACTOR)]
        await asyncio.sleep(0)
        assert pool.queued == QUEUE_FACTOR
        with pytest.raises(LegacyError) as refused:
            await pool.run(pool_jobs.worker_pid)
        assert refused.value.status == 503 and refused.value.headers["Retry-After"] == "1"
        assert not isinstance(refused.value, JobFailed)   # the pool's refusal, not the input's fault
        release.touch()
        pids = set(await asyncio.gather(*jobs))
        assert pool.queued == 0
        assert pids == set(pool.worker_pids) and os.getpid() not in pids   # one worker, never this process
    finally:
        release.touch()
        await pool.close()


async def test_a_job_over_the_time_budget_is_killed_and_its_worker_replaced() -> None:
    pool = _pool(1, budget=0.5)
    try:
        first = await pool.run(pool_jobs.worker_pid)
        with pytest.raises(JobFailed) as overrun:
            await pool.run(pool_jobs.never_ends)
        assert overrun.value.status == 503 and "time budget of 0.5 s" in overrun.value.error
        assert not _alive(first)
        second = await pool.run(pool_jobs.worker_pid)
        assert second != first and pool.worker_pids == [second]
    finally:
        await pool.close()


async def test_a_job_that_waits_past_the_budget_without_computing_is_answered() -> None:
    # The budget is CPU time: a job held off the cores (here: asleep) for longer is not over it.
    pool = _pool(1, budget=1.0)
    try:
        first = await pool.run(pool_jobs.worker_pid)
        assert await pool.run(pool_jobs.sleep_then_pid, 2.5) == first
        assert _alive(first) and pool.worker_pids == [first]
    finally:
        await pool.close()


async def test_a_job_over_the_memory_limit_is_killed_and_its_worker_replaced() -> None:
    pool = _pool(1, memory_mb=300)
    try:
        first = await pool.run(pool_jobs.worker_pid)
        with pytest.raises(JobFailed) as overrun:
            await pool.run(pool_jobs.hold_memory, 600)
        assert overrun.value.status == 503 and "memory budget of 300 MB" in overrun.value.error
        assert not _alive(first)
        assert await pool.run(pool_jobs.worker_pid) != first
    finally:
        await pool.close()


async def test_a_jobs_own_error_comes_back_and_the_worker_stays() -> None:
    pool = _pool(1)
    try:
        first = await pool.run(pool_jobs.worker_pid)
        with pytest.raises(JobFailed) as refused:
            await pool.run(pool_jobs.refuse, 422, "cannot decode")
        assert (refused.value.status, refused.value.error, refused.value.headers) == (422, "cannot decode",
                                                                                      {"Retry-After": "7"})
        with pytest.raises(JobFailed) as broken:
            await pool.run(pool_jobs.break_down)
        assert broken.value.status == 500 and broken.value.error == "Transform failed: internal error"
        assert await pool.run(pool_jobs.worker_pid) == first
    finally:
        await pool.close()


async def test_a_crashed_worker_answers_503_and_is_replaced() -> None:
    pool = _pool(1)
    try:
        first = await pool.run(pool_jobs.worker_pid)
        with pytest.raises(JobFailed) as crashed:
            await pool.run(pool_jobs.crash)
        assert crashed.value.status == 503
        assert await pool.run(pool_jobs.worker_pid) != first
    finally:
        await pool.close()


# An edge stand-in: a pool of two started workers; prints their pids and its fork server's, then waits.
EDGE = """
import asyncio, os, sys
from assetcdn.edge.image_pool import ImagePool
from tests.edge import pool_jobs

async def main():
    pool = ImagePool(2)
    pool.start()
    pids = [await pool.run(pool_jobs.worker_pid) for _ in range(2)]
    print(*pool.worker_pids, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def test_workers_are_forked_by_a_fork_server_and_go_when_the_edge_is_killed() -> None:
    edge = subprocess.Popen([sys.executable, "-c", EDGE], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[2])
    try:
        assert edge.stdout is not None
        workers = [int(pid) for pid in edge.stdout.readline().split()]
        assert len(workers) == 2, edge.poll()
        servers = {_parent_of(pid) for pid in workers}
        # Never forked by the (threaded) edge itself: by one fork server, which the edge started.
        assert len(servers) == 1 and edge.pid not in servers and {_parent_of(s) for s in servers} == {edge.pid}
        edge.send_signal(signal.SIGKILL)   # no chance to stop anything itself
        edge.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in (*workers, *servers)):
            assert time.monotonic() < deadline, "a worker or the fork server outlived a killed edge"
            time.sleep(0.05)
    finally:
        if edge.poll() is None:
            edge.kill()
            edge.wait()


async def test_close_stops_every_worker_and_later_jobs_are_refused() -> None:
    pool = _pool(2, budget=60.0)
    pool.start()
    workers = pool.worker_pids
    assert len(workers) == 2 and await pool.run(pool_jobs.worker_pid) in workers
    running = [asyncio.ensure_future(pool.run(pool_jobs.never_ends)) for _ in range(2)]
    waiting = asyncio.ensure_future(pool.run(pool_jobs.never_ends))
    await asyncio.sleep(0)
    assert pool.queued == 3
    await pool.close()
    assert [pid for pid in workers if _alive(pid)] == []
    for job in (*running, waiting):
        with pytest.raises(LegacyError) as stopped:
            await job
        assert stopped.value.status == 503
    with pytest.raises(LegacyError) as refused:
        await pool.run(pool_jobs.worker_pid)
    assert refused.value.status == 503


async def test_a_worker_keeps_decoded_sources_between_jobs_within_its_bound() -> None:
    photo = (pyvips.Image.gaussnoise(1600, 1200, seed=1).cast("uchar").bandjoin([64, 128])
             .copy(interpretation="srgb").jpegsave_buffer(Q=85))
    limits = TransformLimits(time_budget_s=30.0)
    pool = ImagePool(1, limits, decoded_cache_mb=16)
    try:
        for width, fmt in (("800", "webp"), ("400", "jpeg"), ("640", "webp")):
            opts = parse_transform_options({"url": "akande/v1/banners/x.jpg", "w": width})
            variant = await pool.run(transform_variant, "jpeg", opts, fmt, limits, photo)
            assert variant.content_type == f"image/{fmt}"
        bound, entries, hits, misses = await pool.run(pool_jobs.kept_decodes)
        # The full-size decode (1600x1200x3, 5.5 MB) served the two smaller variants.
        assert (bound, entries, hits, misses) == (16 * 1024 * 1024, 1, 2, 1)
        assert await pool.run(pool_jobs.vips_threads) == max(1, len(os.sched_getaffinity(0)))
    finally:
        await pool.close()


async def test_workers_share_the_cores_between_their_libvips_threads() -> None:
    pool = ImagePool(2, TransformLimits(time_budget_s=30.0))
    try:
        threads = await asyncio.gather(pool.run(pool_jobs.vips_threads), pool.run(pool_jobs.vips_threads))
        assert set(threads) == {max(1, len(os.sched_getaffinity(0)) // 2)}
        assert await pool.run(pool_jobs.kept_decodes) == (0, 0, 0, 0)   # the cache is off unless configured
    finally:
        await pool.close()


def _photo(seed: int) -> bytes:
    return (pyvips.Image.gaussnoise(1600, 1200, seed=seed).cast("uchar").bandjoin([64, 128])
            .copy(interpretation="srgb").jpegsave_buffer(Q=85))


async def test_jobs_for_one_source_go_to_the_worker_that_holds_its_decode() -> None:
    photos = {"first": _photo(1), "second": _photo(2)}
    limits = TransformLimits(time_budget_s=30.0)
    pool = ImagePool(2, limits, decoded_cache_mb=32)
    try:
        pids: dict[str, set[int]] = {name: set() for name in photos}
        for width in ("1200", "300", "800", "500"):   # the two pictures' srcsets interleaved
            for name, photo in photos.items():
                opts = parse_transform_options({"url": f"akande/v1/banners/{name}.jpg", "w": width})
                await pool.run(transform_variant, "jpeg", opts, "webp", limits, photo, affinity=name)
                pids[name].add(await pool.run(pool_jobs.worker_pid, affinity=name))
        assert all(len(workers) == 1 for workers in pids.values())   # one worker per picture
        kept = {pid: await pool.run(pool_jobs.kept_decodes, affinity=name)
                for name, (pid,) in ((name, tuple(workers)) for name, workers in pids.items())}
        # Each picture was decoded once, by its own worker, for its four variants.
        assert sum(misses for _, _, _, misses in kept.values()) == 2
        assert sum(hits for _, _, hits, _ in kept.values()) == 6
    finally:
        await pool.close()


async def test_a_busy_home_keeps_one_job_waiting_and_sends_the_next_to_another_worker(tmp_path: Path) -> None:
    pool = _pool(2)
    release = tmp_path / "release"
    try:
        held = asyncio.ensure_future(pool.run(pool_jobs.wait_then_pid, str(release), affinity="photo"))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(pool.run(pool_jobs.worker_pid, affinity="photo"))
        await asyncio.sleep(0)
        assert pool.queued == 2
        # Its home is busy and already has a job waiting: another worker answers at once.
        other = await pool.run(pool_jobs.worker_pid, affinity="photo")
        assert not held.done() and not waiting.done()   # the waiting job stays for its home
        release.touch()
        home = await held
        assert await waiting == home and other != home
        assert await pool.run(pool_jobs.worker_pid, affinity="photo") == home   # the home did not move
    finally:
        release.touch()
        await pool.close()


async def test_a_source_whose_worker_died_is_still_answered_by_another() -> None:
    pool = _pool(2)
    try:
        home = await pool.run(pool_jobs.worker_pid, affinity="photo")
        with pytest.raises(JobFailed) as crashed:
            await pool.run(pool_jobs.crash, affinity="photo")
        assert crashed.value.status == 503
        again = await pool.run(pool_jobs.worker_pid, affinity="photo")
        assert again != home and again in pool.worker_pids and home not in pool.worker_pids
        assert await pool.run(pool_jobs.worker_pid, affinity="photo") == again   # its new home
    finally:
        await pool.close()


async def test_a_source_already_sent_is_not_sent_again_and_a_dropped_one_is_asked_for() -> None:
    # A 1 MB decode cache keeps 256 KB of source bytes: one 200 KB source at a time.
    pool = ImagePool(1, TransformLimits(time_budget_s=30.0), decoded_cache_mb=1)
    first, second = b"a" * 200_000, b"b" * 200_000
    try:
        assert await pool.run(pool_jobs.source_length, first, affinity="first") == 200_000
        (worker,) = pool._workers
        sent: list[int] = []
        send = worker.conn.send

        def measured_send(message: object) -> None:
            sent.append(len(pickle.dumps(message)))
            send(message)

        worker.conn.send = measured_send  # type: ignore[method-assign,assignment]
        assert await pool.run(pool_jobs.source_length, first, affinity="first") == 200_000
        assert sent[-1] < 10_000                       # held by the worker: sent without its bytes
        assert await pool.run(pool_jobs.source_length, second, affinity="second") == 200_000
        # `first` was dropped for `second` in the worker: it asks, and the job still gets its bytes.
        assert await pool.run(pool_jobs.source_length, first, affinity="first") == 200_000
        assert sent[-2] < 10_000 and sent[-1] > 200_000
    finally:
        await pool.close()


async def test_a_worker_that_keeps_no_sources_is_always_sent_the_bytes() -> None:
    pool = _pool(1)   # no decode cache: no kept sources either
    try:
        assert await pool.run(pool_jobs.source_length, b"a" * 1000, affinity="first") == 1000
        (worker,) = pool._workers
        sent: list[object] = []
        send = worker.conn.send

        def recorded_send(message: object) -> None:
            sent.append(message)
            send(message)

        worker.conn.send = recorded_send  # type: ignore[method-assign,assignment]
        assert await pool.run(pool_jobs.source_length, b"a" * 1000, affinity="first") == 1000
        assert len(sent) == 1   # one message with the bytes, no round trip to ask for them
    finally:
        await pool.close()
