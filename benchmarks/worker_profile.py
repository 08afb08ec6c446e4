"""cProfile inside an edge worker, for the profiling scripts (benchmarks/profile_h2.py, benchmarks/profile_fill.py).

py-spy is not a dependency, so the worker profiles itself: `hook` writes a ``sitecustomize`` module into a
directory that the caller puts first on the PYTHONPATH of ``assetcdn up``'s processes, with `ENV` naming the file
the statistics go to. In the edge worker (its command line names ``edge-0``) it profiles from SIGUSR1 (a fresh
profile) to SIGUSR2 (the statistics written); before the first SIGUSR1 the worker runs unprofiled.
"""

from __future__ import annotations

from pathlib import Path

ENV = "WORKER_PROFILE_OUT"

SITECUSTOMIZE = f"""
import cProfile, os, signal, sys
if any("edge-0" in arg for arg in sys.argv) and os.environ.get("{ENV}"):
    _profile = cProfile.Profile()
    def _dump(_signum, _frame):
        _profile.disable()
        _profile.dump_stats(os.environ["{ENV}"])
    def _start(_signum, _frame):
        _profile.clear()
        _profile.enable()
    signal.signal(signal.SIGUSR2, _dump)
    signal.signal(signal.SIGUSR1, _start)
"""


def hook(directory: Path) -> Path:
    """The directory (made under `directory`) holding the ``sitecustomize`` module, to put first on PYTHONPATH."""
    path = directory / "hook"
    path.mkdir()
    (path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return path
