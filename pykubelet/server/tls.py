"""The serving certificate and TLS settings of the kubelet API (upstream ``InitializeTLS``).

The API server, Prometheus and metrics-server reach the kubelet over HTTPS on
``port`` (10250). The certificate is either the operator's (``tlsCertFile`` /
``tlsPrivateKeyFile``) or, as upstream does when neither is set, a self-signed
pair generated once into ``--cert-dir`` (``kubelet.crt`` / ``kubelet.key``): a
throw-away CA valid from an hour ago (clock skew) for one year, and a serving
certificate it signs, written as the chain ``serving + CA``. An existing pair is
reused as long as it still loads and has not expired, so clients that pinned it
keep working across restarts.

``tlsMinVersion`` and ``tlsCipherSuites`` take Go's names (``VersionTLS12``,
``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``), which this module translates to
OpenSSL's; an unknown name stops start-up naming the field, an insecure suite
is logged as upstream does.

``authentication.x509.clientCAFile`` makes the server ask for client
certificates (the API server presents its ``--kubelet-client-certificate``)
and name the CAs it trusts in the request, as upstream's
``tls.RequestClientCert`` with ``ClientCAs`` does. As there, the handshake
does not verify them: a certificate from an unknown CA still connects, and the
x509 authenticator (``pykubelet.server.auth``) verifies the chain on every
request, so that a bad certificate is a 401 and a bearer token sent with it
still authenticates. Python's ``ssl`` can only verify client certificates in
the handshake (``CERT_OPTIONAL``), so the request-only mode is set through
libssl (see ``_request_client_certificates``); where that cannot be done the
handshake keeps verifying them, with a warning.
"""

from __future__ import annotations

import _ssl
import ctypes
import datetime
import functools
import ipaddress
import os
import ssl
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.util import klog
from pykubelet.util.atomic_file import write_file_atomically

SELF_SIGNED_CERT_NAME: Final = "kubelet.crt"
SELF_SIGNED_KEY_NAME: Final = "kubelet.key"
SELF_SIGNED_VALIDITY: Final = datetime.timedelta(days=365)
SELF_SIGNED_BACKDATE: Final = datetime.timedelta(hours=1)
RSA_KEY_BITS: Final = 2048

# Go's cipher suite names (crypto/tls, as the --tls-cipher-suites flag takes
# them) and the OpenSSL names of the same suites. TLS 1.3 suites are accepted
# but cannot be configured, in Go as in OpenSSL's cipher list.
CIPHER_SUITES: Final[dict[str, str]] = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    # Go's older spellings of the two ChaCha20 suites.
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
TLS13_CIPHER_SUITES: Final = frozenset({
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
# Go's tls.InsecureCipherSuites(): RC4, 3DES and the CBC-SHA256 suites.
INSECURE_CIPHER_SUITES: Final = frozenset({
    "TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"})

TLS_VERSIONS: Final[dict[str, ssl.TLSVersion]] = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}
# Go servers refuse anything older than TLS 1.2 unless told otherwise.
DEFAULT_MIN_VERSION: Final = "VersionTLS12"


class TLSConfigError(ValueError):
    """The TLS settings cannot be used; the message names the field or file."""


@dataclass
class TLSOptions:
    """What the HTTPS server needs (upstream ``server.TLSOptions``), names still Go's."""

    cert_file: str
    key_file: str
    min_version: str = DEFAULT_MIN_VERSION
    cipher_suites: list[str] = field(default_factory=list)
    client_ca_file: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        """A server context with these settings; TLSConfigError when a file or name is bad."""
        return build_ssl_context(self)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1 ("RSA PRIVATE KEY"), the block type upstream writes.
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def generate_self_signed_cert_key(host: str, alternate_ips: Sequence[str] = (),
                                  alternate_dns: Sequence[str] = ()) -> tuple[bytes, bytes]:
    """A CA and a serving certificate for ``host``, as PEM (chain, key).

    The chain is the serving certificate followed by the CA, so a client can
    pin the CA; the key is the serving certificate's. ``host`` becomes an IP
    SAN when it is an address, else a DNS SAN, followed by the alternates.
    """
    valid_from = _now() - SELF_SIGNED_BACKDATE
    valid_to = valid_from + SELF_SIGNED_VALIDITY
    stamp = int(time.time())

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{stamp}")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(valid_from).not_valid_after(valid_to)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=True, key_cert_sign=True,
            content_commitment=False, data_encipherment=False, key_agreement=False,
            crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for candidate in (host, *alternate_ips, *alternate_dns):
        if not candidate or candidate in seen:
            continue
        seen.add(candidate)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(candidate)))
        except ValueError:
            names.append(x509.DNSName(candidate))

    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(valid_from).not_valid_after(valid_to)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=True, key_cert_sign=False,
            content_commitment=False, data_encipherment=False, key_agreement=False,
            crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    chain = (cert.public_bytes(serialization.Encoding.PEM)
             + ca_cert.public_bytes(serialization.Encoding.PEM))
    return chain, _pem_key(key)


def usable_cert_and_key(cert_file: str, key_file: str) -> str | None:
    """Why the pair at these paths cannot be served, or None when it can.

    A pair is usable when both files read, the first certificate parses, has
    not expired, and belongs to the private key.
    """
    try:
        with open(cert_file, "rb") as file:
            cert_pem = file.read()
        with open(key_file, "rb") as file:
            key_pem = file.read()
    except FileNotFoundError as err:
        return f"{err.filename} does not exist"
    except OSError as err:
        return f"cannot read {err.filename}: {err.strerror}"
    try:
        certs = x509.load_pem_x509_certificates(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as err:
        return f"cannot parse {cert_file} or {key_file}: {err}"
    cert = certs[0]
    if cert.not_valid_after_utc <= _now():
        return f"{cert_file} expired at {cert.not_valid_after_utc.isoformat()}"
    public = key.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    certified = cert.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    if public != certified:
        return f"{key_file} is not the private key of {cert_file}"
    return None


def check_cipher_suites(names: Sequence[str]) -> list[str]:
    """The OpenSSL names of Go cipher suite names (TLS 1.3 ones dropped); TLSConfigError."""
    openssl: list[str] = []
    for name in names:
        if name in TLS13_CIPHER_SUITES:
            continue
        if name not in CIPHER_SUITES:
            raise TLSConfigError(f"tlsCipherSuites (--tls-cipher-suites): Cipher suite {name} "
                                 f"not supported or doesn't exist")
        openssl.append(CIPHER_SUITES[name])
    return openssl


def initialize_tls(cert_dir: str, host_name: str, *, tls_cert_file: str = "",
                   tls_private_key_file: str = "", tls_min_version: str = "",
                   tls_cipher_suites: Sequence[str] = (), client_ca_file: str = "",
                   server_tls_bootstrap: bool = False,
                   alternate_ips: Sequence[str] = (),
                   alternate_dns: Sequence[str] = ("localhost",)) -> TLSOptions:
    """Upstream ``InitializeTLS``: the serving pair (generated if needed) and the TLS settings.

    The settings are keyword-only (most are file names, easily swapped); an
    empty string is an unset option, as in ``KubeletConfiguration``.

    With ``server_tls_bootstrap`` no file is generated: the certificate
    manager obtains the serving certificate from the API server instead, and
    the returned options name where it keeps it.
    """
    cert_file, key_file = tls_cert_file, tls_private_key_file
    if not cert_file and not key_file:
        cert_file = os.path.join(cert_dir, SELF_SIGNED_CERT_NAME)
        key_file = os.path.join(cert_dir, SELF_SIGNED_KEY_NAME)
        if not server_tls_bootstrap:
            problem = usable_cert_and_key(cert_file, key_file)
            if problem is not None:
                klog.info("Generating a self-signed serving certificate", reason=problem,
                          certFile=cert_file, host=host_name)
                try:
                    chain, key = generate_self_signed_cert_key(host_name, alternate_ips,
                                                               alternate_dns)
                    write_file_atomically(cert_file, chain, mode=0o644, make_parents=True)
                    write_file_atomically(key_file, key, mode=0o600, make_parents=True)
                except OSError as err:
                    raise TLSConfigError(f"unable to write self signed cert to {cert_dir} "
                                         f"(--cert-dir): {err}") from err
            else:
                klog.v(2).info("Reusing the serving certificate", certFile=cert_file)

    check_cipher_suites(tls_cipher_suites)
    for name in tls_cipher_suites:
        if name in INSECURE_CIPHER_SUITES:
            klog.info("Use of insecure cipher detected.", cipher=name)
    min_version = tls_min_version or DEFAULT_MIN_VERSION
    if min_version not in TLS_VERSIONS:
        raise TLSConfigError(f"tlsMinVersion (--tls-min-version): unknown tls version "
                             f"{min_version!r}")
    if min_version == "VersionTLS13" and tls_cipher_suites:
        klog.info("Warning: TLS 1.3 cipher suites are not configurable, ignoring "
                  "--tls-cipher-suites")
    if client_ca_file and not os.access(client_ca_file, os.R_OK):
        raise TLSConfigError(f"unable to load client CA file {client_ca_file} "
                             f"(authentication.x509.clientCAFile): cannot read it")
    return TLSOptions(cert_file=cert_file, key_file=key_file, min_version=min_version,
                      cipher_suites=list(tls_cipher_suites), client_ca_file=client_ca_file)


def _configure(context: ssl.SSLContext, options: TLSOptions) -> None:
    """Version, cipher suites, client CA and ALPN of ``options`` (HTTP/1.1 only: SPDY
    upgrades need it)."""
    context.minimum_version = TLS_VERSIONS[options.min_version or DEFAULT_MIN_VERSION]
    suites = check_cipher_suites(options.cipher_suites)
    if suites and options.min_version != "VersionTLS13":
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError as err:
            raise TLSConfigError(f"tlsCipherSuites (--tls-cipher-suites): none of "
                                 f"{', '.join(options.cipher_suites)} is available in this "
                                 f"OpenSSL: {err}") from err
    if options.client_ca_file:
        try:
            context.load_verify_locations(cafile=options.client_ca_file)
        except (OSError, ssl.SSLError) as err:
            raise TLSConfigError(f"unable to load client CA file {options.client_ca_file} "
                                 f"(authentication.x509.clientCAFile): {err}") from err
        # Ask for a client certificate without requiring one: requests without
        # one go on to token or anonymous authentication.
        context.verify_mode = ssl.CERT_OPTIONAL
        problem = _request_client_certificates(context, options.client_ca_file)
        if problem is not None:
            _warn_verified_in_handshake(problem)
    context.set_alpn_protocols(["http/1.1"])


# -- client certificates: requested in the handshake, verified per request -----------------
#
# Go's tls.RequestClientCert sends a CertificateRequest naming the client CAs
# and accepts whatever certificate comes back; Python's ssl has no such mode.
# OpenSSL does: a certificate verification callback that accepts every chain
# (the client still proves it holds the key, in CertificateVerify). The
# SSL_CTX behind an SSLContext is not exposed, so it is read from the
# object: CPython's SSLContext struct has the SSL_CTX pointer as its first
# member, right after the object header (3.11 to 3.13 checked). That is
# checked before use: the libssl must be the ssl module's own (found through
# the _ssl extension, same version string), and the pointer must show the
# options and verify mode the SSLContext reports.

_SSL_VERIFY_PEER: Final = 0x01
_CertVerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _accept_any_chain(_store_ctx: int | None, _arg: int | None) -> int:
    # The x509 authenticator verifies the chain on every request instead.
    return 1


# Lives as long as the process: every SSL_CTX it is installed on points at it.
_ACCEPT_ANY_CHAIN: Final = _CertVerifyCallback(_accept_any_chain)


@dataclass(frozen=True)
class _LibSSL:
    """The few libssl functions the request-only mode needs."""

    lib: ctypes.CDLL

    def options(self, ctx: int) -> int:
        return int(self.lib.SSL_CTX_get_options(ctx))

    def verify_mode(self, ctx: int) -> int:
        return int(self.lib.SSL_CTX_get_verify_mode(ctx))

    def accept_any_chain(self, ctx: int) -> None:
        self.lib.SSL_CTX_set_cert_verify_callback(ctx, _ACCEPT_ANY_CHAIN, None)

    def advertise_client_cas(self, ctx: int, ca_file: str) -> bool:
        names = self.lib.SSL_load_client_CA_file(os.fsencode(ca_file))
        if not names:
            return False
        self.lib.SSL_CTX_set_client_CA_list(ctx, names)  # takes the list
        return True


@functools.cache
def _libssl() -> _LibSSL | str:
    """The libssl the ssl module runs on, or why it cannot be used."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    try:
        # Symbols looked up through _ssl's handle resolve in the libssl it was
        # linked against, not in some other copy on the library path.
        lib = ctypes.CDLL(getattr(_ssl, "__file__", None))
        signatures = {
            "OpenSSL_version": ([ctypes.c_int], ctypes.c_char_p),
            "SSL_CTX_get_options": ([ctypes.c_void_p], ctypes.c_uint64),
            "SSL_CTX_get_verify_mode": ([ctypes.c_void_p], ctypes.c_int),
            "SSL_CTX_set_cert_verify_callback": (
                [ctypes.c_void_p, _CertVerifyCallback, ctypes.c_void_p], None),
            "SSL_load_client_CA_file": ([ctypes.c_char_p], ctypes.c_void_p),
            "SSL_CTX_set_client_CA_list": ([ctypes.c_void_p, ctypes.c_void_p], None),
        }
        for name, (argtypes, restype) in signatures.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, restype
    except (OSError, AttributeError) as err:
        return f"cannot reach the ssl module's libssl: {err}"
    version = (lib.OpenSSL_version(0) or b"").decode(errors="replace")  # OPENSSL_VERSION
    if version != ssl.OPENSSL_VERSION:
        return f"the libssl found is {version!r}, the ssl module reports {ssl.OPENSSL_VERSION!r}"
    return _LibSSL(lib)


def _ssl_ctx(context: ssl.SSLContext) -> int | None:
    """The SSL_CTX pointer of ``context`` (CPython layout, checked by the caller)."""
    return ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value


def _request_client_certificates(context: ssl.SSLContext, ca_file: str) -> str | None:
    """Make ``context`` request client certificates without verifying them, naming the CAs
    of ``ca_file``; why it could not, or None.

    ``context`` must already ask for certificates (``CERT_OPTIONAL``); when
    this fails it stays that way, i.e. OpenSSL verifies them in the handshake.
    """
    libssl = _libssl()
    if isinstance(libssl, str):
        return libssl
    ctx = _ssl_ctx(context)
    if not ctx:
        return "the SSLContext holds no SSL_CTX where CPython keeps it"
    if (libssl.options(ctx) != int(context.options)
            or libssl.verify_mode(ctx) != _SSL_VERIFY_PEER):
        return "the SSLContext's SSL_CTX is not where CPython keeps it"
    if not libssl.advertise_client_cas(ctx, ca_file):
        return f"libssl cannot read the CA names of {ca_file}"
    libssl.accept_any_chain(ctx)
    return None


@functools.cache
def _warn_verified_in_handshake(reason: str) -> None:
    klog.warning("Client certificates are verified in the TLS handshake: a certificate from "
                 "a CA outside authentication.x509.clientCAFile ends the connection instead "
                 "of being answered 401", reason=reason)


def peer_certificates(ssl_object: ssl.SSLObject | None) -> tuple[bytes, ...]:
    """The DER certificates the client sent, its own first, then the chain it sent with it
    (Go's ``PeerCertificates``); empty without a client certificate.
    """
    if ssl_object is None:
        return ()
    leaf = ssl_object.getpeercert(binary_form=True)
    if not leaf:
        return ()
    sent = _unverified_chain(ssl_object)
    # The server side of OpenSSL keeps the client's own certificate apart from
    # the chain; Python puts it first.
    return (bytes(leaf), *(der for der in sent if der != leaf))


def _unverified_chain(ssl_object: ssl.SSLObject) -> list[bytes]:
    public = getattr(ssl_object, "get_unverified_chain", None)  # Python 3.13+
    if public is not None:
        return [bytes(der) for der in public() or ()]
    # Python 3.10 to 3.12 have it on the _ssl object only.
    private = getattr(getattr(ssl_object, "_sslobj", None), "get_unverified_chain", None)
    if private is None:
        return []
    return [cert.public_bytes(_ssl.ENCODING_DER) for cert in private() or ()
            if cert is not None]


def build_ssl_context(options: TLSOptions) -> ssl.SSLContext:
    """The server-side ``SSLContext`` for ``options``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, options)
    try:
        context.load_cert_chain(options.cert_file, options.key_file)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"cannot load the serving certificate {options.cert_file} and key "
                             f"{options.key_file} (tlsCertFile/tlsPrivateKeyFile): {err}") from err
    return context


class ServingContext:
    """The listening context of ``serverTLSBootstrap`` (upstream's ``GetCertificate``).

    The certificate manager obtains and renews the serving certificate while
    the server runs; ``load`` makes a pair current, and every TLS handshake
    from then on presents it: the listening context hands each connection, in
    its server-name callback (called for every ClientHello, with or without
    SNI), the context of the newest pair. Connections already open keep the
    certificate they were set up with. Before the first certificate arrives
    handshakes fail, as upstream's do.
    """

    def __init__(self, options: TLSOptions) -> None:
        self._options = options
        self._current: ssl.SSLContext | None = None
        self.cert_file = ""
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _configure(self.context, options)
        self.context.sni_callback = self._select
        self._warned = False

    def load(self, cert_file: str, key_file: str) -> None:
        """Serve this pair on new connections; TLSConfigError (old pair kept) if it is bad."""
        self._current = build_ssl_context(replace(self._options, cert_file=cert_file,
                                                  key_file=key_file))
        self.cert_file = cert_file
        klog.v(2).info("Serving certificate loaded for new connections", certFile=cert_file)

    @property
    def ready(self) -> bool:
        return self._current is not None

    def _select(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                _context: ssl.SSLContext) -> int | None:
        current = self._current
        if current is None:
            if not self._warned:
                klog.error("TLS handshake refused: no serving certificate available for the "
                           "kubelet")
                self._warned = True
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        connection.context = current
        return None


__all__ = [
    "CIPHER_SUITES",
    "INSECURE_CIPHER_SUITES",
    "ServingContext",
    "TLSConfigError",
    "TLSOptions",
    "build_ssl_context",
    "check_cipher_suites",
    "generate_self_signed_cert_key",
    "initialize_tls",
    "peer_certificates",
    "usable_cert_and_key",
]
