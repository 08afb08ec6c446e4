"""``[access_log]`` as configured, checked without the access log's own machinery (assetcdn/edge/access_log.py, which
needs aiohttp through assetcdn/shared/middleware.py): an edge started with several workers checks it before it
starts any, in a process that serves nothing and so has no use for the web framework (14 MiB of its memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OUTPUTS = ("off", "stdout", "file")


def access_log_output(section: dict[str, Any]) -> str:
    """``[access_log] output``: one of OUTPUTS; ValueError for anything else."""
    output = str(section.get("output", "off")).strip().lower()
    if output not in OUTPUTS:
        raise ValueError(f"[access_log] output must be one of {', '.join(OUTPUTS)}, not {output!r}")
    return output


def access_log_directory(section: dict[str, Any], default_directory: Path) -> Path:
    """``[access_log] directory``, or `default_directory` when it is empty."""
    directory = str(section.get("directory", "")).strip()
    return Path(directory) if directory else default_directory


def check_access_log(section: dict[str, Any], default_directory: Path) -> None:
    """ValueError naming the ``[access_log]`` setting an edge could not log with (an output it does not have, a
    directory that cannot be made), as the edge starts (assetcdn/edge/server.py): its workers would each stop on it."""
    if access_log_output(section) != "file":
        return
    directory = access_log_directory(section, default_directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"[access_log] directory {str(directory)!r} cannot be made: {exc.strerror or exc}") from None
