"""A throw-away certificate authority for the kubelet API's TLS client authentication.

Tests and the kubelet API benchmark play the API server (whose
``--kubelet-client-certificate`` is signed by the cluster CA the kubelet trusts
through ``clientCAFile``) and strangers (certificates from a CA the kubelet
does not know, expired ones, ones for another usage). A CA may be an
intermediate of another (``issuer``): its clients' certificate files then hold
the chain up to, not including, the root.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class ClientCert:
    cert_file: Path
    key_file: Path


class TestCA:
    __test__ = False

    def __init__(self, directory: Path, name: str = "test-ca", *,
                 issuer: TestCA | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert: x509.Certificate = (
            x509.CertificateBuilder().subject_name(subject)
            .issuer_name(issuer.cert.subject if issuer else subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(hours=1))
            .not_valid_after(_now() + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_encipherment=False, key_cert_sign=True,
                content_commitment=False, data_encipherment=False, key_agreement=False,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(issuer.key if issuer else self.key, hashes.SHA256()))
        # What a client sends after its own certificate: the CAs below the root.
        self.chain: tuple[x509.Certificate, ...] = (
            (self.cert, *issuer.chain) if issuer else ())
        self.cert_file = directory / f"{name}.crt"
        self.cert_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def client(self, common_name: str, organizations: tuple[str, ...] = (),
               file_name: str | None = None, *,
               usages: tuple[x509.ObjectIdentifier, ...] = (ExtendedKeyUsageOID.CLIENT_AUTH,),
               valid: tuple[datetime.timedelta, datetime.timedelta] | None = None,
               ) -> ClientCert:
        """A client certificate; an empty ``common_name`` leaves the attribute out,
        ``usages`` () the extension, ``valid`` is (from, until) relative to now
        (default: from an hour ago for a day)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        if common_name:
            attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        valid_from, valid_until = valid or (datetime.timedelta(hours=-1),
                                            datetime.timedelta(days=1))
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() + valid_from)
            .not_valid_after(_now() + valid_until))
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        stem = file_name or common_name.replace(":", "_") or "no-common-name"
        cert_file, key_file = self.directory / f"{stem}.crt", self.directory / f"{stem}.key"
        cert_file.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM)
                                       for c in (cert, *self.chain)))
        key_file.write_bytes(_pem_key(key))
        return ClientCert(cert_file, key_file)
