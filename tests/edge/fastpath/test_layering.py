"""What the hit path is built from: the functions the application's routes call, never the application
module itself (assetcdn/edge/app.py sits above both and wires them together)."""

from __future__ import annotations

import subprocess
import sys


def test_the_hit_path_imports_nothing_of_the_application_module() -> None:
    # A fresh interpreter: in this one the fixtures have imported the application already.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, assetcdn.edge.fastpath.hit_server, assetcdn.edge.fastpath.prepared; "
                               "print('assetcdn.edge.app' in sys.modules)"],
        capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == "False"
