"""What a control plane loads at start: none of the libraries only some requests use (image analysis, the SVG
kit, the demo images, certificate parsing, numpy and tokenizers for search and chat), each tens of milliseconds
of every start and megabytes of memory."""

from __future__ import annotations

import subprocess
import sys

NOT_AT_START = ("pyvips", "PIL", "pillow_heif", "cv2", "onnxruntime", "av", "cryptography.x509", "numpy", "tokenizers")


def test_a_control_plane_starts_without_libvips_pillow_opencv_x509_or_numpy() -> None:
    # A fresh interpreter: in this one other tests have imported them already. `python -m assetcdn.control`
    # imports these two before it serves.
    code = ("import sys\nimport assetcdn.control.__main__, assetcdn.control.app\n"
            f"print(sorted(name for name in {NOT_AT_START!r} if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert loaded.stdout.strip() == "[]"
