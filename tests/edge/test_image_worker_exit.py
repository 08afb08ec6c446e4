"""An image worker whose edge worker died (killed, crashed) ends quietly: its connection to the edge is reset, and it
printed two tracebacks into the edge's log (the reset, then the broken pipe of its answer to nobody) for each of
the edge worker's image workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GONE_EDGE = """
import os
from assetcdn.edge.image_worker import READY, worker_main

class Reset:
    def send(self, message):
        if message != READY:
            raise BrokenPipeError(32, "Broken pipe")

    def recv(self):
        raise ConnectionResetError(104, "Connection reset by peer")

worker_main(Reset(), os.getppid())
"""


def test_an_image_worker_whose_edge_went_ends_without_a_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", GONE_EDGE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, "")
