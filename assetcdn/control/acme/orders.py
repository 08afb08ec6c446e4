"""What the issuer and the certificate store need of an order without loading the ACME client: its failure
and the owner-only writes of keys. Control loads this at every start; `acme`, `josepy` and `requests` load
only with `authority`, imported when `[acme] directory_url` is set (most installations never order)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

KEY_FILE_MODE = 0o600


class OrderFailed(Exception):
    """An order that did not end in a certificate: the CA's reason, whether the CA answered at all, and how
    long it asked us to wait (Retry-After), if it did."""

    def __init__(self, reason: str, *, ca_reached: bool = True, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.ca_reached = ca_reached
        self.retry_after_s = retry_after_s


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` readable by its owner only, replacing it atomically (never a half-written key)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, KEY_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
