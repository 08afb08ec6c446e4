"""What an operator waits for after `assetcdn up`: the first chat answer and the demo videos.

    .venv/bin/python -m benchmarks.startup_bench [--rounds 2]

Each round starts a fresh `assetcdn up` (control plus one edge, demo content on, a new data
directory, free loopback ports) as `make run` does, and measures from the moment it prints
"assetcdn is up":

- chat: one POST /api/chat through the edge, as the Python client sends it; the time to its
  first SSE frame (metadata) and to its first token (the answer starts), and the whole answer;
- demo videos: the time until /api/stream?video=<video> (the master playlist) answers 200 for all three demo
  videos through the edge, and the time control's /api/health reports `demoVideos: ready`
  (seconds since "up" for both; the startup itself is reported too);
- demo stop: in this process, the demo videos' threads are told to stop 0.5, 3 and 6 s into making
  them, and the seconds until they have ended are reported (what control's exit waits for);
- Ctrl-C: in another fresh start, SIGINT right after "up" (the demo videos still being made), and
  the seconds until `assetcdn up` and its children have exited.

Everything is counted: the processes are the real ones, on this machine's cores as they are.
Record `uptime` beside the numbers: the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from assetcdn.control.video.demo import ensure_demo_videos
from assetcdn.control.video.outcome import Stopped
from tests.integration.harness import start_cdn

QUESTION = "How do I purge a file from the cache?"
VIDEOS = ("black", "mount_fuji", "nature")


def _chat(edge: str) -> tuple[float, float, float]:
    """Seconds to the first frame, to the first token frame, and to the end of the answer."""
    request = urllib.request.Request(f"{edge}/api/chat", data=json.dumps({"message": QUESTION}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    started = time.perf_counter()
    first = token = 0.0
    with urllib.request.urlopen(request, timeout=120) as resp:  # noqa: S310 (loopback)
        for line in resp:
            now = time.perf_counter() - started
            if line.startswith(b"event:") and not first:
                first = now
            if line.startswith(b"event: token") and not token:
                token = now
    return first, token, time.perf_counter() - started


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 (loopback)
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def _health(control: str) -> dict[str, object]:
    try:
        with urllib.request.urlopen(f"{control}/api/health", timeout=10) as resp:  # noqa: S310 (loopback)
            return dict(json.loads(resp.read()))
    except (urllib.error.URLError, OSError, ValueError):
        return {}


def one_round(tmp: Path) -> dict[str, float]:
    started = time.perf_counter()
    cdn = start_cdn(tmp, edges=1, demo=True)
    up = time.perf_counter()
    try:
        # The chat question goes at once, while the videos are polled: neither waits for the other.
        chat = ThreadPoolExecutor(1).submit(_chat, cdn.edge_urls[0])
        streamable = reported = 0.0
        pending = set(VIDEOS)
        while (pending or (not reported and time.perf_counter() - up < streamable + 10)) \
                and time.perf_counter() - up < 300:
            for video in list(pending):
                if _status(f"{cdn.edge_urls[0]}/api/stream?video={video}") == 200:
                    pending.discard(video)
            if not pending and not streamable:
                streamable = time.perf_counter() - up
            if not reported and _health(cdn.control_url).get("demoVideos") == "ready":
                reported = time.perf_counter() - up
            time.sleep(0.25)
        first, token, whole = chat.result()
    finally:
        cdn.stop()
    return {"startup_s": up - started, "chat_first_frame_s": first, "chat_first_token_s": token,
            "chat_answer_s": whole, "videos_streamable_s": streamable, "health_says_ready_s": reported}


def early_stop(tmp: Path) -> float:
    """Seconds from SIGINT (Ctrl-C) to `assetcdn up` having exited, sent right after it says it is up,
    while the demo videos are being made."""
    cdn = start_cdn(tmp, edges=1, demo=True)
    cdn.process.send_signal(signal.SIGINT)
    started = time.perf_counter()
    cdn.process.wait(timeout=120)
    return time.perf_counter() - started


def demo_stop_latency(tmp: Path, after_s: float) -> float:
    """Seconds from setting control's stop event to the demo video threads having ended, the stop set
    `after_s` into making them (in this process: what control's exit waits for)."""
    stop = threading.Event()
    maker = threading.Thread(target=_make, args=(tmp, stop))
    maker.start()
    time.sleep(after_s)
    stop.set()
    started = time.perf_counter()
    maker.join()
    return time.perf_counter() - started


def _make(tmp: Path, stop: threading.Event) -> None:
    with contextlib.suppress(Stopped):
        ensure_demo_videos(tmp, stop=stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
            result = one_round(Path(tmp))
        rounds.append(result)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()))  # noqa: T201
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
            rounds[i]["ctrl_c_to_exit_s"] = early_stop(Path(tmp))
        print(f"round {i + 1}: ctrl_c_to_exit_s {rounds[i]['ctrl_c_to_exit_s']:.2f}")  # noqa: T201
    for i in range(args.rounds):
        for after in (0.5, 3.0, 6.0):   # canvas building, source encoding, transcoding
            with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
                rounds[i][f"demo_stop_after_{after:g}s"] = demo_stop_latency(Path(tmp), after)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in rounds[i].items()  # noqa: T201
                                             if k.startswith("demo_stop")))
    for key in rounds[0]:
        print(f"median {key}: {statistics.median(r[key] for r in rounds):.2f}")  # noqa: T201


if __name__ == "__main__":
    main()
