"""A real ACME server for tests: Pebble (Let's Encrypt's test CA) with pebble-challtestsrv as its DNS, on loopback.

Pebble validates HTTP-01 by fetching ``http://<name>:<http_port>/.well-known/acme-challenge/<token>`` where
the name resolves through challtestsrv, which answers every name with 127.0.0.1 (or what `point` set for a
name). Both run on free loopback ports with state in a temporary directory, and are stopped by the test.
Without the Debian package the test skips and says why, except under CI=true, where `make setup` must have
installed it (tests/support/acme/setup.sh) and a missing one fails the test.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.harness import free_port_block
from tests.prerequisites import installed_program

START_TIMEOUT_S = 30.0
PORTS = 5  # Pebble's directory, management and TLS-ALPN ports, the mock DNS server's and its management's


def pebble_binaries() -> tuple[str, str]:
    return (installed_program("pebble", "tests/support/acme/setup.sh"),
            installed_program("pebble-challtestsrv", "tests/support/acme/setup.sh"))


def free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1 (the mock DNS listens on both), below the ephemeral
    range: an outgoing connection of a test beside this one can take a port bind(0) chose before Pebble
    binds it."""
    return free_port_block(1, udp=True)


def _listener_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed P-256 certificate for Pebble's own https listener (127.0.0.1 and localhost)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pebble test listener")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                               x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "listener.pem", directory / "listener.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class Pebble:
    directory: Path
    http_port: int
    validity_s: int | None = None
    port: int = 0
    management_port: int = 0
    dns_port: int = 0
    dns_management_port: int = 0
    tls_port: int = 0
    listener_cert: Path = field(default_factory=Path)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def directory_url(self) -> str:
        return f"https://127.0.0.1:{self.port}/dir"

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.listener_cert))

    def prepare(self) -> None:
        """Choose the ports and make the listener certificate, so a client can be configured before the CA
        starts. A restart keeps both, as a CA back from an outage does."""
        pebble_binaries()
        if self.port:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.listener_cert, _ = _listener_certificate(self.directory)
        # One block for the five listeners: ports drawn one by one can draw the same port twice.
        base = free_port_block(PORTS, udp=True)
        self.port, self.management_port, self.dns_port, self.dns_management_port, self.tls_port = range(base, base + PORTS)

    def start(self) -> None:
        pebble, challtestsrv = pebble_binaries()
        self.prepare()
        listener_key = self.directory / "listener.key"
        config: dict[str, object] = {
            "listenAddress": f"127.0.0.1:{self.port}", "managementListenAddress": f"127.0.0.1:{self.management_port}",
            "certificate": str(self.listener_cert), "privateKey": str(listener_key), "httpPort": self.http_port,
            "tlsPort": self.tls_port, "ocspResponderURL": "", "externalAccountBindingRequired": False}
        if self.validity_s is not None:
            config["certificateValidityPeriod"] = self.validity_s
        (self.directory / "pebble.json").write_text(json.dumps({"pebble": config}))
        log = open(self.directory / "pebble.log", "ab")  # noqa: SIM115 (the servers write it while they run)
        # No nonce is refused at random and no authorization reused: every order is validated, deterministically.
        env = {**os.environ, "PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0", "PEBBLE_AUTHZREUSE": "0"}
        self.processes.append(subprocess.Popen(
            [challtestsrv, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dns01", f"127.0.0.1:{self.dns_port}",
             "-http01", "", "-https01", "", "-tlsalpn01", "", "-management", f"127.0.0.1:{self.dns_management_port}"],
            stdout=log, stderr=subprocess.STDOUT))
        self.processes.append(subprocess.Popen(
            [pebble, "-config", str(self.directory / "pebble.json"), "-dnsserver", f"127.0.0.1:{self.dns_port}"],
            stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("pebble did not start:\n" + self.log()[-3000:])
            time.sleep(0.1)

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.directory_url, timeout=2, context=self._context()) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def root_pem(self) -> str:
        """The root that issued chains end at (made anew by every Pebble start)."""
        with urllib.request.urlopen(f"https://127.0.0.1:{self.management_port}/roots/0", timeout=5,
                                    context=self._context()) as resp:
            return str(resp.read().decode())

    def point(self, hostname: str, address: str) -> None:
        """Make the mock DNS answer `hostname` with `address` (instead of 127.0.0.1)."""
        body = json.dumps({"host": hostname.rstrip(".") + ".", "addresses": [address]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.dns_management_port}/add-a", data=body,
                                         method="POST")
        with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310 (loopback)
            assert resp.status == 200

    def log(self) -> str:
        path = self.directory / "pebble.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
