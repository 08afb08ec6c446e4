"""A test certificate authority made with `cryptography`: leaf certificates (ECDSA or RSA) for given names,
as PEM bytes or files, and the CA's own certificate for clients to trust."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    chain_pem: bytes
    key_pem: bytes
    serial: int

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        chain, key = directory / f"{stem}.pem", directory / f"{stem}.key"
        chain.write_bytes(self.chain_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return chain, key


class TestCa:
    __test__ = False  # not a test class

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "assetcdn test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                            .not_valid_before(now - datetime.timedelta(days=1))
                            .not_valid_after(now + datetime.timedelta(days=30))
                            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                         content_commitment=False, key_encipherment=False,
                                                         data_encipherment=False, key_agreement=False,
                                                         encipher_only=False, decipher_only=False), critical=True)
                            .sign(self.key, hashes.SHA256()))
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def write_root(self, directory: Path) -> Path:
        path = directory / "test-ca.pem"
        path.write_bytes(self.pem)
        return path

    def issue(self, *names: str, rsa_key: bool = False, days: int = 10) -> Issued:
        key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
            rsa.generate_private_key(65537, 2048) if rsa_key else ec.generate_private_key(ec.SECP256R1()))
        now = datetime.datetime.now(datetime.UTC)
        serial = x509.random_serial_number()
        leaf = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self.certificate.subject).public_key(key.public_key()).serial_number(serial)
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return Issued(leaf.public_bytes(serialization.Encoding.PEM) + self.pem, key_pem, serial)
