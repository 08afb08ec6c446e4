"""What control needs to know about the sentence model without loading it (assetcdn/control/search/encoder.py
imports numpy and tokenizers): the size of its vectors, the error that says it is unavailable, and where its
inflated weights are kept. A start with semantic search off never imports the encoder."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DIMENSIONS = 384


class ModelUnavailable(RuntimeError):
    """The model package is not installed (or its zip is unreadable): search answers fuzzy only."""


def model_cache_dir(configured: str = "", environ: Mapping[str, str] = os.environ) -> Path:
    """Where the inflated weights are kept: the setting when given, else $XDG_CACHE_HOME/assetcdn
    (an absolute path, as the XDG spec asks), else ~/.cache/assetcdn: the user's cache, as pip's."""
    if configured:
        return Path(configured).expanduser()
    xdg = environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "assetcdn"
