"""Where certificates live on control: files in the data directory, and each name's state in SQLite.

``<data dir>/certificates/<hostname>/privkey.pem`` (0600, in a 0700 directory) and ``fullchain.pem`` (the
leaf first, then the CA's intermediates), written atomically; the key file is written first, and a pair that
does not match (a stop between the two) is treated as no certificate, so the name is simply ordered again.
The ``certificates`` table holds what the API shows (status, expiry, the CA's last reason) and when the next
attempt is due; a removed name loses its row and its directory.
"""

from __future__ import annotations

import datetime
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from assetcdn.control.acme.orders import write_private
from assetcdn.control.storage.database import Database
from assetcdn.shared.timestamps import as_iso_utc, utc_now_iso

log = logging.getLogger(__name__)

CERTIFICATES_DIR = "certificates"
KEY_FILE = "privkey.pem"
CHAIN_FILE = "fullchain.pem"
PROVISIONING, ACTIVE, FAILED = "provisioning", "active", "failed"
RENEW_AT_FRACTION = 2 / 3  # of a certificate's lifetime, as Let's Encrypt and certbot advise

SCHEMA = """
CREATE TABLE IF NOT EXISTS certificates (
    hostname TEXT PRIMARY KEY,
    status TEXT NOT NULL,              -- provisioning, active or failed
    not_before REAL,                   -- the certificate in use (Unix seconds), NULL before the first
    not_after REAL,
    serial TEXT,                       -- its serial number (hex), what the edges are told changed
    directory_url TEXT,                -- the ACME directory it came from: another one means order anew
    error TEXT,                        -- the CA's reason for the last failed attempt; NULL after a success
    attempts INTEGER NOT NULL DEFAULT 0,   -- failed attempts in a row
    next_attempt_at REAL NOT NULL,     -- when to order (first order, retry, or renewal at 2/3 of the lifetime)
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS acme_orders (
    started_at REAL NOT NULL           -- each order started (Unix seconds), for acme.max_orders_per_week
);
CREATE TABLE IF NOT EXISTS tls_state_serial (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    serial INTEGER NOT NULL            -- the last TlsState serial sent to edges: only grows, across restarts
);
"""


@dataclass(frozen=True)
class CertificateRecord:
    hostname: str
    status: str
    not_before: float | None
    not_after: float | None
    serial: str | None
    error: str | None
    attempts: int
    next_attempt_at: float
    directory_url: str | None = None

    @property
    def expires_iso(self) -> str | None:
        return _iso(self.not_after)

    @property
    def retry_iso(self) -> str | None:
        """When a failed name is tried again (None when nothing failed)."""
        return _iso(self.next_attempt_at) if self.error else None


@dataclass(frozen=True)
class InstalledCertificate:
    hostname: str
    key_pem: bytes
    chain_pem: str
    not_before: float
    not_after: float
    serial: str


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return as_iso_utc(datetime.datetime.fromtimestamp(moment, datetime.UTC).isoformat())


def renew_at(not_before: float, not_after: float) -> float:
    return not_before + (not_after - not_before) * RENEW_AT_FRACTION


def describe_chain(chain_pem: str, key_pem: bytes) -> tuple[float, float, str]:
    """(not_before, not_after, serial hex) of the chain's leaf; ValueError when the key is not the leaf's."""
    # Imported here: a control plane without certificates to describe starts without the X.509 modules.
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    leaf = x509.load_pem_x509_certificate(chain_pem.encode())
    key = serialization.load_pem_private_key(key_pem, password=None)
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if (leaf.public_key().public_bytes(serialization.Encoding.DER, pub)
            != key.public_key().public_bytes(serialization.Encoding.DER, pub)):
        raise ValueError("the private key does not belong to the certificate")
    return (leaf.not_valid_before_utc.timestamp(), leaf.not_valid_after_utc.timestamp(),
            format(leaf.serial_number, "x"))


class AcmeCertificates:
    def __init__(self, db: Database, data_dir: Path) -> None:
        self.db = db
        self.root = data_dir / CERTIFICATES_DIR

    async def open(self) -> None:
        await self.db.script(SCHEMA)

    def _dir(self, hostname: str) -> Path:
        # Hostnames reach here validated (assetcdn/control/routes/domains.py): labels of [a-z0-9-] and dots.
        if not hostname or "/" in hostname or hostname.startswith("."):
            raise ValueError(f"not a hostname: {hostname!r}")
        return self.root / hostname

    # --- rows ---

    async def records(self) -> dict[str, CertificateRecord]:
        rows = await self.db.fetch("SELECT hostname, status, not_before, not_after, serial, error, attempts, "
                                   "next_attempt_at, directory_url FROM certificates")
        return {r[0]: CertificateRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in rows}

    async def record(self, hostname: str) -> CertificateRecord | None:
        return (await self.records()).get(hostname)  # a handful of rows per installation

    async def want(self, hostname: str, now: float) -> None:
        """A row for a name that should have a certificate (kept as it is when there is one)."""
        await self.db.write("INSERT OR IGNORE INTO certificates (hostname, status, attempts, next_attempt_at, "
                            "updated_at) VALUES (?, ?, 0, ?, ?)", (hostname, PROVISIONING, now, utc_now_iso()))

    async def installed(self, hostname: str, not_before: float, not_after: float, serial: str,
                        directory_url: str) -> None:
        await self.db.write(
            "UPDATE certificates SET status = ?, not_before = ?, not_after = ?, serial = ?, directory_url = ?, "
            "error = NULL, attempts = 0, next_attempt_at = ?, updated_at = ? WHERE hostname = ?",
            (ACTIVE, not_before, not_after, serial, directory_url, renew_at(not_before, not_after), utc_now_iso(),
             hostname))

    async def failed(self, hostname: str, status: str, error: str, attempts: int, next_attempt_at: float) -> None:
        await self.db.write("UPDATE certificates SET status = ?, error = ?, attempts = ?, next_attempt_at = ?, "
                            "updated_at = ? WHERE hostname = ?",
                            (status, error, attempts, next_attempt_at, utc_now_iso(), hostname))

    async def due_now(self, hostname: str, now: float) -> None:
        """Order this name at the next turn (its certificate files are missing or unusable)."""
        await self.db.write("UPDATE certificates SET next_attempt_at = ? WHERE hostname = ?", (now, hostname))

    async def forget(self, hostname: str) -> None:
        """The name is no longer served: its row, certificate and private key go."""
        await self.db.write("DELETE FROM certificates WHERE hostname = ?", (hostname,))
        shutil.rmtree(self._dir(hostname), ignore_errors=True)

    async def orders_since(self, since: float) -> list[float]:
        """When each order started at or after `since`, oldest first."""
        rows = await self.db.fetch("SELECT started_at FROM acme_orders WHERE started_at >= ? ORDER BY started_at",
                                   (since,))
        return [float(row[0]) for row in rows]

    async def order_started(self, at: float, keep_since: float) -> None:
        """Count an order against the budget; those started before `keep_since` no longer count and go."""
        async with self.db.transaction() as tx:
            await tx.execute("DELETE FROM acme_orders WHERE started_at < ?", (keep_since,))
            await tx.execute("INSERT INTO acme_orders (started_at) VALUES (?)", (at,))

    async def next_serial(self) -> int:
        async with self.db.transaction() as tx:
            await tx.execute("INSERT INTO tls_state_serial (id, serial) VALUES (1, 1) "
                             "ON CONFLICT (id) DO UPDATE SET serial = serial + 1")
            rows = await tx.fetch("SELECT serial FROM tls_state_serial WHERE id = 1")
        return int(rows[0][0])

    # --- files ---

    def write(self, hostname: str, key_pem: bytes, chain_pem: str) -> None:
        directory = self._dir(hostname)
        write_private(directory / KEY_FILE, key_pem)
        write_private(directory / CHAIN_FILE, chain_pem.encode())

    def read(self, hostname: str) -> InstalledCertificate | None:
        """The certificate on disk for `hostname`, or None when absent, unreadable or not a matching pair."""
        directory = self._dir(hostname)
        try:
            key_pem = (directory / KEY_FILE).read_bytes()
            chain_pem = (directory / CHAIN_FILE).read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.error("certificate files of %s in %s cannot be read (%s); ordering a new one", hostname, directory,
                      exc.strerror or type(exc).__name__)
            return None
        try:
            not_before, not_after, serial = describe_chain(chain_pem, key_pem)
        except ValueError as exc:
            log.error("certificate files of %s in %s are not usable (%s); ordering a new one", hostname, directory,
                      type(exc).__name__)
            return None
        return InstalledCertificate(hostname, key_pem, chain_pem, not_before, not_after, serial)

    def names_on_disk(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())
