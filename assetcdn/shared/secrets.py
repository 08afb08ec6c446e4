"""Keys and secrets: taken from the environment, else generated once into DATA_DIR/secrets.env (0600).

The data directory holds the repository, the database and the secrets: it is created 0700, and an
existing one that group or others can reach is tightened to 0700 (with a warning saying so), as is a
secrets file readable by anyone but its owner (to 0600). No secret value is ever logged or printed.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass, fields
from pathlib import Path

log = logging.getLogger(__name__)

SECRETS_FILE = "secrets.env"
TOKEN_PREFIX = "cdnsk_"  # control's API tokens (assetcdn/control/identity/tokens.py) begin so
DATA_DIR_MODE = 0o700
SECRET_FILE_MODE = 0o600
PRIVATE_UMASK = 0o077  # files and directories a process creates are its owner's only


def field_bytes(value: str) -> bytes:
    """A request field's value as the bytes the client sent: the servers read a field as UTF-8 with surrogate escapes
    for the bytes that are not, which a plain ``encode()`` refuses (a 500 for a key sent as ``\\xff``)."""
    return value.encode("utf-8", "surrogateescape")


def secret_matches(supplied: str | None, expected: str) -> bool:
    """Whether a key a request carries (a field's value, whatever its bytes) is `expected`, compared in constant
    time; never for an empty `supplied` or `expected`."""
    return bool(supplied) and bool(expected) and hmac.compare_digest(field_bytes(supplied or ""), expected.encode())


def secret_fingerprint(cluster_secret: str, name: str, value: str) -> str:
    """What control tells an edge of one of the secrets they must share (`name`: its Secrets field), and the edge
    compares with its own: an HMAC under the cluster secret, which says whether the two are equal and nothing of
    either to anyone without the cluster secret."""
    return hmac.new(cluster_secret.encode(), f"assetcdn-secret:{name}:{value}".encode(), "sha256").hexdigest()


@dataclass(frozen=True)
class Secrets:
    access_key: str
    account_key: str
    purge_key: str
    analytics_key: str
    signed_url_secret: str
    cluster_secret: str
    session_secret: str
    # Derives the key that encrypts webhook signing secrets at rest; empty = webhooks cannot be registered.
    webhook_secret_key: str = ""
    metrics_key: str = ""  # Bearer credential for /metrics and deep health (Prometheus `authorization`)
    dashboard_secret: str = ""  # the password of POST /dashboard/login; empty = password sign-in refused

    @staticmethod
    def env_name(field_name: str) -> str:
        return "ASSETCDN_" + field_name.upper()

    def as_env(self) -> dict[str, str]:
        return {self.env_name(f.name): getattr(self, f.name) for f in fields(self)}


def _read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
    return values


def _tighten(path: Path, mode: int, what: str) -> str | None:
    """chmod `path` to `mode` when group or others have any access; a note saying what happened, or None."""
    current = stat.S_IMODE(path.stat().st_mode)
    if not current & 0o077:
        return None
    try:
        os.chmod(path, mode)
    except OSError as exc:
        return f"{what} {path} is mode {current:04o} and could not be tightened ({exc}): make it {mode:04o}"
    return f"{what} {path} was mode {current:04o}; tightened to {mode:04o}"


def secure_data_dir(data_dir: Path) -> list[str]:
    """Create the data directory 0700, or tighten an existing one (and its secrets file) that others can
    reach. Returns what was changed or could not be, for the caller to report."""
    data_dir = Path(data_dir)
    try:
        data_dir.mkdir(mode=DATA_DIR_MODE, parents=True)
    except FileExistsError:
        pass
    else:
        os.chmod(data_dir, DATA_DIR_MODE)  # mkdir's mode is subject to the umask; make it exact
    notes = [_tighten(data_dir, DATA_DIR_MODE, "data directory")]
    secrets_path = data_dir / SECRETS_FILE
    if secrets_path.exists():
        notes.append(_tighten(secrets_path, SECRET_FILE_MODE, "secrets file"))
    return [note for note in notes if note]


def private_umask() -> None:
    """From now on this process (and the children it starts) creates files 0600 and directories 0700."""
    os.umask(PRIVATE_UMASK)


def load_or_create_secrets(data_dir: Path, environ: dict[str, str] | None = None) -> tuple[Secrets, list[str]]:
    """Return the secrets and the names of those generated now (never logged: they stay in the file).

    Also makes the data directory private (see `secure_data_dir`); what it tightened is logged."""
    environ = dict(os.environ if environ is None else environ)
    for note in secure_data_dir(data_dir):
        log.warning("%s", note)
    path = Path(data_dir) / SECRETS_FILE
    stored = _read_env_file(path)
    values: dict[str, str] = {}
    generated: list[str] = []
    for f in fields(Secrets):
        name = Secrets.env_name(f.name)
        if environ.get(name):
            values[f.name] = environ[name]
        elif stored.get(name):
            values[f.name] = stored[name]
        else:
            values[f.name] = secrets.token_hex(24)
            generated.append(name)
    if generated:
        merged = {**stored, **{n: values[f.name] for f in fields(Secrets)
                               if (n := Secrets.env_name(f.name)) in generated}}
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_FILE_MODE)
        os.fchmod(fd, SECRET_FILE_MODE)  # a leftover .tmp from an interrupted start may have another mode
        with os.fdopen(fd, "w") as fh:
            fh.write("# Generated by assetcdn on first start. Keep private.\n")
            fh.writelines(f"{k}={v}\n" for k, v in sorted(merged.items()))
        os.replace(tmp, path)
        os.chmod(path, SECRET_FILE_MODE)
    return Secrets(**values), generated


EDGE_SECRET_FIELDS = ("cluster_secret", "signed_url_secret")


def load_edge_secrets(data_dir: Path | None = None, environ: dict[str, str] | None = None) -> Secrets:
    """An edge needs only the cluster secret and the signed-URL secret: from the environment, else from
    a secrets.env beside it; the metrics key too if its /metrics is to be read. The public keys stay with
    control."""
    environ = dict(os.environ if environ is None else environ)
    stored = _read_env_file(Path(data_dir) / SECRETS_FILE) if data_dir else {}
    values = {}
    for f in fields(Secrets):
        name = Secrets.env_name(f.name)
        values[f.name] = environ.get(name) or stored.get(name) or ""
    missing = [Secrets.env_name(n) for n in EDGE_SECRET_FIELDS if not values[n]]
    if missing:
        raise SystemExit(f"edge: missing secrets {', '.join(missing)} (set them in the environment)")
    return Secrets(**values)


def signed_url_secret(data_dir: Path | None = None, environ: dict[str, str] | None = None) -> str | None:
    """The signed-URL secret from the environment, else from DATA_DIR/secrets.env (for `assetcdn sign`)."""
    environ = dict(os.environ if environ is None else environ)
    name = Secrets.env_name("signed_url_secret")
    stored = _read_env_file(Path(data_dir) / SECRETS_FILE) if data_dir else {}
    return environ.get(name) or stored.get(name) or None
