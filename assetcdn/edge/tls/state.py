"""The TLS state this worker applies (assetcdn/shared/tls_state.py): what control pushed or answered last.

A message is applied whole and only when its serial is higher than the one held, after every key in it
unsealed with the cluster secret (one that does not: the whole message is refused, nothing changes).
Unsealed keys stay in this process's memory; the file written (0600, in the cache dir) is the message as
received, keys still sealed, so a restarted edge offers its certificates before control answers.

Checking, unsealing and writing a message run in a thread, and so does what the listeners build from it
(the certificate store's SSL contexts, assetcdn/edge/tls/certificates.py): with thousands of certificates
that is a second of work, which on the event loop would hold every request of the worker. Messages are
applied one at a time, in the order they come.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from assetcdn.shared.tls_state import CertificateEntry, TlsState, TlsStateError

log = logging.getLogger(__name__)
STATE_FILE_MODE = 0o600


class EdgeTlsState:
    def __init__(self, cluster_secret: str, state_file: Path | None = None) -> None:
        self._secret = cluster_secret
        self.state_file = state_file
        self.state = TlsState()
        self.keys: dict[str, bytes] = {}  # certificate id -> unsealed private key (PEM)
        # Awaited after each change; a listener does its heavy work off the loop (see the module docstring).
        self.on_change: list[Callable[[EdgeTlsState], Awaitable[None]]] = []
        self._applying = asyncio.Lock()

    @property
    def serial(self) -> int:
        return self.state.serial

    @property
    def certificates(self) -> tuple[CertificateEntry, ...]:
        return self.state.certificates

    def challenge(self, token: str) -> str | None:
        """The key authorization for an ACME HTTP-01 token, if control published one."""
        return self.state.challenges.get(token)

    async def apply(self, message: Mapping[str, Any], *, persist: bool = True) -> bool:
        """Apply a TLS state message; False when it is not newer than the one held. Raises TlsStateError
        (nothing applied) when it is malformed or a key does not unseal. Returns once the listeners have
        taken it in (new handshakes are offered its certificates)."""
        async with self._applying:
            unsealed = await asyncio.to_thread(self._unsealed, message, self.state.serial, persist)
            if unsealed is None:
                return False
            self.state, self.keys = unsealed
            self._applied(unsealed[0])
            for listener in list(self.on_change):
                try:
                    await listener(self)
                except Exception:
                    log.exception("applying TLS state %d failed in a listener", self.state.serial)
            return True

    def _unsealed(self, message: Mapping[str, Any], held: int,
                  persist: bool) -> tuple[TlsState, dict[str, bytes]] | None:
        state = TlsState.from_message(message)
        if state.serial <= held:
            return None
        keys = {entry.id: entry.key_pem(self._secret) for entry in state.certificates}
        if persist:
            self._persist(state)
        return state, keys

    @staticmethod
    def _applied(state: TlsState) -> None:
        log.info("TLS state %d applied: %d certificate(s), %d challenge(s)", state.serial,
                 len(state.certificates), len(state.challenges))

    def load_persisted(self) -> None:
        """The state this worker wrote last, applied at start: before anything listens (the certificate
        store reads the state when it is made) and before requests are served, so on the spot."""
        if self.state_file is None:
            return
        try:
            unsealed = self._unsealed(orjson.loads(self.state_file.read_bytes()), self.state.serial, False)
        except FileNotFoundError:
            return
        except (orjson.JSONDecodeError, TlsStateError) as exc:
            # Another cluster secret, or a file from an older version: control's answer replaces it.
            log.warning("ignoring the stored TLS state %s: %s", self.state_file, exc)
            return
        if unsealed is not None:
            self.state, self.keys = unsealed
            self._applied(unsealed[0])

    def _persist(self, state: TlsState) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_name(f"{self.state_file.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, STATE_FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(orjson.dumps(state.to_message()))
        os.replace(tmp, self.state_file)
