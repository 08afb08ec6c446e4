"""The bounded pool image work runs in: worker PROCESSES, killed and replaced when they overrun.

Transforms, format conversions and placeholders never run in the edge's own process:
- time: a job whose worker has spent `time_budget_s` plus KILL_GRACE_S seconds of CPU since it was
  handed over is killed with its process and answers 503. The pipeline's own deadline (CPU time too,
  assetcdn/edge/transform/budgets.py) usually answers first; the kill is for work nothing can interrupt
  (librsvg drawing an SVG's filters). Time spent waiting for a core busy with other programs is not
  the input's cost and does not count; a job still unanswered after WALL_BACKSTOP times that much wall
  time (a worker stuck without computing) is killed all the same.
- memory: a worker whose RSS passes `memory_limit_mb` while it works is killed the same way
  (503). One that ends a job above RECYCLE_FRACTION of the limit, or has run MAX_JOBS_PER_WORKER
  jobs, is replaced: the allocator keeps what a large job took, and the edge's own memory never
  holds decoded pixels.
- queue: more than QUEUE_FACTOR waiting jobs per worker are refused with 503 rather than left
  to grow (every queued job holds its source bytes).
- affinity: a job may name its source (`affinity`, the source's content id). Jobs for one source go
  to the worker that last ran one, which keeps that source decoded (assetcdn/edge/transform/decoded.py):
  a picture's srcset variants then cost one decode, not one per worker. A job waits for that worker
  while it is busy, unless another job already waits for it (then any worker takes it, so one
  picture can still keep two workers busy); a worker that died or was replaced is no one's home.
  When such a job's last argument is the source's bytes, the worker keeps them (a bounded LRU, a
  quarter of its decode cache): the next job for that source is sent without them, and a worker
  that no longer has them asks for them before it starts.
Workers are forked by multiprocessing's fork server, never by the threaded edge (forking it is
unsafe): the fork server is a fresh, single-threaded process that loads Python, libvips and the
pipeline (PRELOAD) once per edge, so a worker starts in milliseconds, and a worker killed for an
overrun or recycled is replaced as fast. Processes are started from a launcher thread, never on
the event loop (the first waits for the fork server to load). A worker dies with its fork server
(PR_SET_PDEATHSIG), which exits when the edge does; close() stops workers within a bounded time.
What a worker process runs is assetcdn/edge/image_worker.py; what /proc says of it (RSS, CPU time),
assetcdn/edge/process_stats.py.

A job is a module-level function (sent by reference) and its arguments: see
assetcdn/edge/transform/jobs.py. Its own failure (a 4xx from the pipeline, an overrun, a crash) raises
JobFailed, which callers may remember (assetcdn/edge/failed_variants.py): the same input fails the same
way. A refusal by the pool itself (busy, closed, a worker that would not start) is a plain
LegacyError 503.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from assetcdn.edge.failed_variants import FailedVariants
from assetcdn.edge.image_worker import KEPT_SOURCES_SHARE, NEED_SOURCE, PRELOAD, READY, worker_main
from assetcdn.edge.process_stats import cpu_seconds, rss_bytes
from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.shared.config import Settings
from assetcdn.shared.errors import LegacyError

log = logging.getLogger(__name__)
T = TypeVar("T")

QUEUE_FACTOR = 32
KILL_GRACE_S = 0.5            # CPU seconds past the time budget before the parent kills the worker
WALL_BACKSTOP = 6             # x (budget + grace) of wall time: the bound for a job that does not compute
WATCH_INTERVAL_S = 0.05       # how often a running job's RSS is read
START_TIMEOUT_S = 60.0        # a new worker must be ready (Python and libvips loaded) within this
STOP_TIMEOUT_S = 2.0          # close(): SIGTERM, then SIGKILL after this
RECYCLE_FRACTION = 0.5
MAX_JOBS_PER_WORKER = 1000
# Sources whose last worker the pool remembers (a content id and a reference each).
MAX_HOMES = 4096


class JobFailed(LegacyError):
    """A job's own failure: its input fails the same way next time (negative-cacheable)."""


class PoolBusy(LegacyError):
    """A job the pool refused before running it (its queue full, or the pool closing): nothing was done."""


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection
    launched: Future[None]   # process.start() in the launcher thread
    ready: bool = False
    jobs: int = 0
    # Content ids whose bytes this worker was last sent (it may have dropped some since: it asks).
    sources: OrderedDict[str, None] = field(default_factory=OrderedDict)

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def kill(self) -> None:
        """SIGKILL and reap (a killed process exits at once)."""
        if _was_launched(self):
            self.process.kill()
            self.process.join(STOP_TIMEOUT_S)
        self.conn.close()


@dataclass(eq=False)
class _Waiter:
    """A job waiting for a worker: for `home` only, or for any worker (None)."""
    future: asyncio.Future[_Worker | None]
    home: _Worker | None


@dataclass
class _Outcome:
    result: Any = None
    error: LegacyError | None = None
    replace: bool = False          # the worker is gone (or must go): start another in its place


class ImagePool:
    def __init__(self, concurrency: int, limits: TransformLimits | None = None, *,
                 memory_limit_mb: int = 1024, failure_ttl_s: float = 60.0, decoded_cache_mb: int = 0) -> None:
        self.concurrency = max(int(concurrency), 1)
        self.limits = limits or TransformLimits()
        self.memory_limit_bytes = int(memory_limit_mb) * 1024 * 1024
        self.decoded_cache_bytes = int(decoded_cache_mb) * 1024 * 1024
        self.kept_sources_bytes = self.decoded_cache_bytes // KEPT_SOURCES_SHARE
        # The workers share the cores the edge may use: libvips threads beyond a worker's share would
        # only take turns with the other workers' (and cost switches), never finish a job sooner.
        self.vips_threads = max(1, len(os.sched_getaffinity(0)) // self.concurrency)
        self.max_queued = self.concurrency * QUEUE_FACTOR
        self.failed = FailedVariants(failure_ttl_s)
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(PRELOAD))
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-start")
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="image")
        self._started = False
        self._idle: list[_Worker] = []              # ready for a job; touched on the event loop only
        self._waiting: deque[_Waiter] = deque()     # jobs waiting for a worker, oldest first
        self._homes: OrderedDict[str, _Worker] = OrderedDict()   # source -> the worker that holds its decode
        self._workers: set[_Worker] = set()
        self._queued = 0   # touched on the event loop only
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Settings) -> ImagePool:
        transform = settings.section("transform")
        return cls(transform["concurrency"], TransformLimits.from_settings(transform),
                   memory_limit_mb=transform["worker_memory_mb"], failure_ttl_s=transform["failure_ttl_s"],
                   decoded_cache_mb=transform["decoded_cache_mb"])

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def worker_pids(self) -> list[int]:
        """The workers' process ids (waiting for any still being started)."""
        return sorted(worker.pid for worker in self._workers if _was_launched(worker, START_TIMEOUT_S))

    def start(self) -> None:
        """Start every worker now (on the event loop's thread; the launcher thread forks them)."""
        if not self._started:
            self._started = True
            self._idle.extend(self._spawn() for _ in range(self.concurrency))

    def _spawn(self) -> _Worker:
        # On the event loop's thread; the fork server forks the process, asked by the launcher thread.
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=worker_main, daemon=True,
                                         args=(theirs, os.getpid(), self.decoded_cache_bytes, self.vips_threads),
                                         name="assetcdn-image")
        worker = _Worker(process, ours, self._launcher.submit(_launch, process, theirs))
        self._workers.add(worker)
        return worker

    async def run(self, work: Callable[..., T], *args: Any, affinity: str | None = None) -> T:
        """`work(*args)` in a worker process; JobFailed for its failure, PoolBusy (503) when refused.

        `affinity` names the source the job decodes: jobs naming the same one go to the same worker."""
        if self._closed:
            raise self._closing()
        if self._queued >= self.max_queued:
            raise PoolBusy(503, f"This edge is busy with {self._queued} image jobs; retry shortly.",
                           headers={"Retry-After": "1"})
        self.start()
        self._queued += 1
        try:
            worker = await self._acquire(affinity)
            if affinity is not None:
                self._remember_home(affinity, worker)
            loop = asyncio.get_running_loop()
            # A job whose last argument is the source's bytes may find them already in the worker
            # (only if it can keep them: else every job would cost a round trip to ask for them).
            keeps = bool(args) and isinstance(args[-1], bytes) and len(args[-1]) <= self.kept_sources_bytes
            source_id = affinity if keeps else None
            job = self._executor.submit(self._serve, worker, work, args, source_id)
            # The worker comes back (or is replaced) when the job ends, even if this waiter was cancelled.
            job.add_done_callback(lambda done: self._call_on_loop(loop, self._job_done, worker, done))
            outcome = await asyncio.wrap_future(job)
        finally:
            self._queued -= 1
        if outcome.error is not None:
            raise outcome.error
        return outcome.result  # type: ignore[no-any-return]

    @staticmethod
    def _closing() -> PoolBusy:
        return PoolBusy(503, "This edge is shutting down; retry shortly.", headers={"Retry-After": "1"})

    def _home_of(self, affinity: str | None) -> _Worker | None:
        home = self._homes.get(affinity) if affinity is not None else None
        return home if home in self._workers else None

    def _remember_home(self, affinity: str, worker: _Worker) -> None:
        # The first worker to run a source keeps it as home while alive: a fallback job elsewhere
        # does not move it (the home still holds the decode).
        if self._home_of(affinity) is None:
            self._homes[affinity] = worker
        self._homes.move_to_end(affinity)
        while len(self._homes) > MAX_HOMES:
            self._homes.popitem(last=False)

    async def _acquire(self, affinity: str | None) -> _Worker:
        home = self._home_of(affinity)
        if home is not None and home in self._idle:
            self._idle.remove(home)
            return home
        if home is not None and any(waiter.home is home for waiter in self._waiting):
            home = None   # its worker is busy and already has a job waiting: take any
        if home is None and self._idle:
            return self._idle.pop(0)
        waiter = _Waiter(asyncio.get_running_loop().create_future(), home)
        self._waiting.append(waiter)
        try:
            worker = await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():
                handed = waiter.future.result()
                if handed is not None:
                    self._give(handed)   # handed a worker just as it was cancelled
            raise
        if worker is None:
            raise self._closing()
        return worker

    def _give(self, worker: _Worker) -> None:
        """A free worker to the oldest job waiting for it, else the oldest waiting for any, else idle."""
        chosen = next((waiter for waiter in self._waiting if waiter.home is worker), None)
        if chosen is None:
            chosen = next((waiter for waiter in self._waiting if waiter.home is None), None)
        if chosen is None:
            self._idle.append(worker)
            return
        self._waiting.remove(chosen)
        chosen.future.set_result(worker)

    @staticmethod
    def _call_on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:   # the loop is closed: the edge is gone, and its workers with it
            pass

    def _job_done(self, worker: _Worker, job: Future[_Outcome]) -> None:
        replace = job.cancelled() or job.exception() is not None or job.result().replace
        if replace:
            self._workers.discard(worker)
            if worker.process.is_alive():   # the job broke before it reached the worker
                worker.process.kill()
            worker.conn.close()
            for waiter in self._waiting:    # its decodes are gone with it: any worker will do
                if waiter.home is worker:
                    waiter.home = None
        if self._closed:
            if not replace and worker in self._workers:
                self._stop_later(worker)
            return
        self._give(self._spawn() if replace else worker)

    # --- in a pool thread: one job on one worker ------------------------------------------------

    def _serve(self, worker: _Worker, work: Callable[..., Any], args: tuple[Any, ...],
               source_id: str | None) -> _Outcome:
        if not worker.ready and not self._wait_ready(worker):
            return _Outcome(error=LegacyError(503, "The image worker could not be started; retry shortly.",
                                              headers={"Retry-After": "1"}), replace=True)
        try:
            if source_id is not None and source_id in worker.sources:
                worker.conn.send((work, (*args[:-1], None), source_id))   # it holds the bytes: not again
            else:
                worker.conn.send((work, args, source_id))
            if source_id is not None:
                worker.sources[source_id] = None
                worker.sources.move_to_end(source_id)
                while len(worker.sources) > MAX_HOMES:
                    worker.sources.popitem(last=False)
            allowed = self.limits.time_budget_s + KILL_GRACE_S
            cpu_deadline = cpu_seconds(worker.pid) + allowed
            wall_deadline = time.monotonic() + allowed * WALL_BACKSTOP
            while True:
                if cpu_seconds(worker.pid) > cpu_deadline or time.monotonic() > wall_deadline:
                    worker.kill()
                    return _Outcome(error=self._over_time(), replace=True)
                if worker.conn.poll(WATCH_INTERVAL_S):
                    kind, payload = worker.conn.recv()
                    if kind != NEED_SOURCE:
                        break
                    worker.conn.send(args[-1])   # it had dropped them
                    continue
                if rss_bytes(worker.pid) > self.memory_limit_bytes:
                    worker.kill()
                    return _Outcome(error=self._over_memory(), replace=True)
        except (EOFError, OSError):   # the worker died (crashed, or close() stopped it)
            worker.kill()
            return _Outcome(error=self._stopped(), replace=True)
        worker.jobs += 1
        recycle = (worker.jobs >= MAX_JOBS_PER_WORKER
                   or rss_bytes(worker.pid) > self.memory_limit_bytes * RECYCLE_FRACTION)
        if recycle:
            worker.kill()
        if kind == "ok":
            return _Outcome(result=payload, replace=recycle)
        if kind == "refused":
            status, error, message, extra, headers = payload
            return _Outcome(error=JobFailed(status, error, message, extra, headers), replace=recycle)
        log.error("image job %s failed in worker %d:\n%s", getattr(work, "__name__", work), worker.pid, payload)
        return _Outcome(error=JobFailed(500, "Transform failed: internal error"), replace=recycle)

    def _wait_ready(self, worker: _Worker) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            worker.launched.result(START_TIMEOUT_S)
            if worker.conn.poll(max(deadline - time.monotonic(), 0)) and worker.conn.recv() == READY:
                worker.ready = True
                return True
        except Exception:   # the launch failed or timed out, or the worker died while it loaded
            log.exception("image worker %d did not start (exit code %s)", worker.pid, worker.process.exitcode)
        else:
            log.error("image worker %d did not start (exit code %s)", worker.pid, worker.process.exitcode)
        worker.kill()
        return False

    def _over_time(self) -> JobFailed:
        return JobFailed(503, f"The transform exceeded its time budget of {self.limits.time_budget_s:g} s and was "
                         "stopped. Ask for a smaller size or a faster format, or retry later.",
                         headers={"Retry-After": "1"})

    def _over_memory(self) -> JobFailed:
        limit_mb = self.memory_limit_bytes // (1024 * 1024)
        return JobFailed(503, f"The transform exceeded its memory budget of {limit_mb} MB and was stopped. "
                         "Ask for a smaller size, or retry later.", headers={"Retry-After": "1"})

    @staticmethod
    def _stopped() -> JobFailed:
        return JobFailed(503, "The image worker stopped while transforming this image.",
                         headers={"Retry-After": "1"})

    # --- shutdown ---------------------------------------------------------------------------------

    def _stop_later(self, worker: _Worker) -> None:
        self._workers.discard(worker)
        worker.conn.close()
        # No wait: its fork server reaps it. One still being launched is killed once it is.
        worker.launched.add_done_callback(functools.partial(_kill_if_started, worker.process))

    async def close(self) -> None:
        """Stop every worker: SIGTERM, then SIGKILL after STOP_TIMEOUT_S. Running jobs answer 503."""
        self._closed = True
        self._idle.clear()
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.future.done():
                waiter.future.set_result(None)
        workers = list(self._workers)
        self._workers.clear()
        self._launcher.shutdown(wait=False, cancel_futures=True)   # a worker not yet launched never starts
        await asyncio.to_thread(_stop_processes, workers)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _launch(process: BaseProcess, theirs: Connection) -> None:
    try:
        process.start()
    finally:
        theirs.close()


def _kill_if_started(process: BaseProcess, _launch: Future[None]) -> None:
    if process.pid is not None:
        process.kill()


def _was_launched(worker: _Worker, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Whether the worker's process was started (waiting up to `timeout_s` for a launch under way)."""
    try:
        worker.launched.result(timeout_s)
    except Exception:
        return False
    return worker.process.pid is not None


def _stop_processes(workers: list[_Worker]) -> None:
    processes = []
    for worker in workers:
        if _was_launched(worker):
            processes.append(worker.process)
        else:   # still being launched after STOP_TIMEOUT_S (a fork server slow to load): killed once it is
            worker.launched.add_done_callback(functools.partial(_kill_if_started, worker.process))
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(STOP_TIMEOUT_S)
