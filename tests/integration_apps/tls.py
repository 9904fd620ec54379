"""Certificates for HTTPS test servers on loopback, made with the `cryptography` package.

`CertificateAuthority("old")` is a CA of its own (a key and a self-signed CA certificate);
`issue(folder)` writes a server certificate for 127.0.0.1 signed by it and its key, for uvicorn's
``ssl_certfile``/``ssl_keyfile``. The CA certificate's PEM (`pem`) is what a client trusts.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: What a CA's key may do: sign certificates (and revocation lists).
_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A CA whose certificate passes Python's strict verification (VERIFY_X509_STRICT)."""

    def __init__(self, name: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(f"PTE test CA {name}"))
            .issuer_name(_name(f"PTE test CA {name}"))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_CA_USAGE, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
        """A server certificate for `host` signed by this CA, and its key: (certfile, keyfile) in `folder`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        issuer_key = self.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_key), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        certfile, keyfile = folder / f"{host}.crt", folder / f"{host}.key"
        certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        keyfile.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return certfile, keyfile
