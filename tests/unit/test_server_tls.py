"""The kubelet API's serving certificate and TLS settings (``initialize_tls``)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.server import tls
from pykubelet.server.tls import TLSConfigError, TLSOptions, initialize_tls
from testsupport.pki import ClientCert, TestCA

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _init(cert_dir: Path, **overrides: object) -> TLSOptions:
    args: dict[str, object] = dict(
        cert_dir=str(cert_dir), host_name="node-1", tls_cert_file="", tls_private_key_file="",
        tls_min_version="", tls_cipher_suites=[], client_ca_file="",
        alternate_ips=["10.0.0.7", "127.0.0.1"])
    args.update(overrides)
    return initialize_tls(**args)  # type: ignore[arg-type]


def test_self_signed_pair_is_a_ca_and_a_serving_cert_with_the_node_names(tmp_path: Path) -> None:
    options = _init(tmp_path / "pki")
    assert options.cert_file == str(tmp_path / "pki" / "kubelet.crt")
    assert options.key_file == str(tmp_path / "pki" / "kubelet.key")
    assert (tmp_path / "pki" / "kubelet.key").stat().st_mode & 0o777 == 0o600

    serving, ca = x509.load_pem_x509_certificates(Path(options.cert_file).read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert serving.issuer == ca.subject
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value.startswith(
        "node-1-ca@")
    usages = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"node-1", "localhost"}
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("10.0.0.7"), ipaddress.ip_address("127.0.0.1")}
    # Valid from an hour ago (clock skew) for a year.
    now = datetime.datetime.now(datetime.UTC)
    assert now - datetime.timedelta(minutes=65) < serving.not_valid_before_utc < now
    assert serving.not_valid_after_utc - serving.not_valid_before_utc == datetime.timedelta(
        days=365)


def test_a_usable_pair_is_reused_and_a_broken_one_replaced(tmp_path: Path) -> None:
    first = _init(tmp_path)
    original = Path(first.cert_file).read_bytes()
    _init(tmp_path)
    assert Path(first.cert_file).read_bytes() == original

    Path(first.key_file).write_text("garbage")
    _init(tmp_path)
    assert Path(first.cert_file).read_bytes() != original
    assert tls.usable_cert_and_key(first.cert_file, first.key_file) is None


def test_a_failed_write_of_the_serving_pair_is_a_tls_error_leaving_no_stray_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(TLSConfigError, match="unable to write self signed cert"):
        _init(tmp_path / "pki")
    assert list((tmp_path / "pki").iterdir()) == []


def test_expired_pair_is_regenerated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=800)
    monkeypatch.setattr(tls, "_now", lambda: past)
    options = _init(tmp_path)
    monkeypatch.undo()
    assert "expired" in (tls.usable_cert_and_key(options.cert_file, options.key_file) or "")
    _init(tmp_path)
    assert tls.usable_cert_and_key(options.cert_file, options.key_file) is None


def test_operator_files_are_used_as_given(tmp_path: Path) -> None:
    options = _init(tmp_path / "unused", tls_cert_file="/etc/k/serving.crt",
                    tls_private_key_file="/etc/k/serving.key")
    assert (options.cert_file, options.key_file) == ("/etc/k/serving.crt", "/etc/k/serving.key")
    assert not (tmp_path / "unused").exists()


def test_server_tls_bootstrap_generates_nothing(tmp_path: Path) -> None:
    _init(tmp_path / "pki", server_tls_bootstrap=True)
    assert not (tmp_path / "pki").exists()


def test_unknown_cipher_suite_and_version_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match=r"tlsCipherSuites.*TLS_BOGUS"):
        _init(tmp_path, tls_cipher_suites=["TLS_BOGUS"])
    with pytest.raises(TLSConfigError, match="tlsMinVersion"):
        _init(tmp_path, tls_min_version="VersionTLS99")
    with pytest.raises(TLSConfigError, match="clientCAFile"):
        _init(tmp_path, client_ca_file=str(tmp_path / "missing-ca.crt"))


def test_go_names_map_to_openssl_ones() -> None:
    assert tls.check_cipher_suites(["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                                    "TLS_AES_128_GCM_SHA256"]) == ["ECDHE-RSA-AES128-GCM-SHA256"]


async def _handshake(options: TLSOptions, client: ssl.SSLContext) -> str:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=options.ssl_context())
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        version = writer.get_extra_info("ssl_object").version()
        assert await reader.read() == b"ok"
        writer.close()
        return str(version)
    finally:
        server.close()
        await server.wait_closed()


def _client(options: TLSOptions) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=options.cert_file)
    context.check_hostname = True
    return context


async def test_the_self_signed_certificate_verifies_for_localhost(tmp_path: Path) -> None:
    options = _init(tmp_path)
    client = _client(options)
    # The CA in the chain is what a client pins; the serving cert names 127.0.0.1.
    assert await _handshake(options, client) in ("TLSv1.2", "TLSv1.3")


async def test_min_version_is_enforced(tmp_path: Path) -> None:
    options = _init(tmp_path, tls_min_version="VersionTLS13")
    old_client = _client(options)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await _handshake(options, old_client)
    assert await _handshake(options, _client(options)) == "TLSv1.3"


async def test_cipher_suites_restrict_tls12(tmp_path: Path) -> None:
    options = _init(tmp_path, tls_cipher_suites=["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"])
    client = _client(options)
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    client.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await _handshake(options, client)
    client = _client(options)
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    assert await _handshake(options, client) == "TLSv1.2"


# -- serverTLSBootstrap: the certificate changes while the server listens ---------------------


def _ca_pair(tmp_path: Path, name: str) -> tuple[Path, ssl.SSLContext]:
    """A self-signed pair for 127.0.0.1 in ``tmp_path/name.*`` and a client that pins it."""
    chain, key = tls.generate_self_signed_cert_key(name, ["127.0.0.1"])
    cert_file = tmp_path / f"{name}.crt"
    cert_file.write_bytes(chain)
    (tmp_path / f"{name}.key").write_bytes(key)
    return cert_file, ssl.create_default_context(cafile=str(cert_file))


async def test_serving_context_presents_the_newest_certificate_to_new_connections(
        tmp_path: Path) -> None:
    first, first_client = _ca_pair(tmp_path, "first")
    second, second_client = _ca_pair(tmp_path, "second")
    serving = tls.ServingContext(TLSOptions(cert_file="", key_file=""))
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=serving.context)
    port = server.sockets[0].getsockname()[1]

    async def connect(client: ssl.SSLContext) -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        opened.append((reader, writer))
        assert await reader.readexactly(2) == b"ok"
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return str(x509.load_der_x509_certificate(der).subject.rfc4514_string())

    try:
        # No certificate yet: the handshake is refused.
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            await connect(first_client)
        serving.load(str(first), str(tmp_path / "first.key"))
        assert (await connect(first_client)).startswith("CN=first@")
        # The rotated pair is served on the next connection, without a restart;
        # the old pair's clients no longer verify.
        serving.load(str(second), str(tmp_path / "second.key"))
        assert (await connect(second_client)).startswith("CN=second@")
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect(first_client)
        # A bad pair is refused and the current one stays.
        with pytest.raises(TLSConfigError):
            serving.load(str(first), str(tmp_path / "second.key"))
        assert (await connect(second_client)).startswith("CN=second@")
    finally:
        for _, writer in opened:
            writer.close()
        server.close()
        await server.wait_closed()


def _client_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA and a client certificate (CN=operator) it signs: (ca, cert, key) files."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "operator")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = tmp_path / "client-ca.crt", tmp_path / "client.crt", tmp_path / "client.key"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


async def test_serving_context_passes_client_certificates_on(tmp_path: Path) -> None:
    serving_cert, client = _ca_pair(tmp_path, "serving")
    ca_file, cert_file, key_file = _client_pair(tmp_path)
    client.load_cert_chain(str(cert_file), str(key_file))
    serving = tls.ServingContext(TLSOptions(cert_file="", key_file="",
                                            client_ca_file=str(ca_file)))
    serving.load(str(serving_cert), str(tmp_path / "serving.key"))
    seen: list[bytes | None] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=serving.context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        await reader.read()
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert seen and seen[0] is not None
    assert x509.load_der_x509_certificate(seen[0]).subject.rfc4514_string() == "CN=operator"


# -- client certificates: asked for in the handshake, verified by the authenticator ----------


async def _certificates_seen(server_context: ssl.SSLContext,
                             client: ssl.SSLContext) -> tuple[bytes, ...]:
    """What the server's handler got as the client's certificates; the handshake's error
    if there was one."""
    seen: list[tuple[bytes, ...]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(tls.peer_certificates(writer.get_extra_info("ssl_object")))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        # TLS 1.3: the server judges the client's certificate after the client's
        # side of the handshake is done; a refusal shows on the first read.
        answer = await reader.read()
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    if answer != b"ok":
        raise ConnectionResetError("the server ended the connection")
    return seen[0]


def _with_certificate(client: ssl.SSLContext, holder: ClientCert) -> ssl.SSLContext:
    client.load_cert_chain(str(holder.cert_file), str(holder.key_file))
    return client


def _subjects(certificates: tuple[bytes, ...]) -> list[str]:
    return [x509.load_der_x509_certificate(der).subject.rfc4514_string()
            for der in certificates]


async def test_a_certificate_from_an_unknown_ca_completes_the_handshake(tmp_path: Path) -> None:
    cluster = TestCA(tmp_path / "cluster", "cluster")
    options = _init(tmp_path / "pki", client_ca_file=str(cluster.cert_file))
    stranger = TestCA(tmp_path / "other", "other").client("intruder")
    # The handler gets the certificate: the authenticator, not the handshake, refuses it.
    seen = await _certificates_seen(options.ssl_context(),
                                    _with_certificate(_client(options), stranger))
    assert _subjects(seen) == ["CN=intruder"]
    member = cluster.client("member")
    seen = await _certificates_seen(options.ssl_context(),
                                    _with_certificate(_client(options), member))
    assert _subjects(seen) == ["CN=member"]
    assert await _certificates_seen(options.ssl_context(), _client(options)) == ()


async def test_the_chain_a_client_sends_reaches_the_authenticator(tmp_path: Path) -> None:
    root = TestCA(tmp_path / "root", "root")
    intermediate = TestCA(tmp_path / "intermediate", "intermediate", issuer=root)
    options = _init(tmp_path / "pki", client_ca_file=str(root.cert_file))
    client = _with_certificate(_client(options), intermediate.client("alice"))
    seen = await _certificates_seen(options.ssl_context(), client)
    assert _subjects(seen) == ["CN=alice", "CN=intermediate"]


async def test_serving_context_asks_for_client_certificates_without_verifying_them(
        tmp_path: Path) -> None:
    serving_cert, client = _ca_pair(tmp_path, "serving")
    cluster = TestCA(tmp_path / "cluster", "cluster")
    serving = tls.ServingContext(TLSOptions(cert_file="", key_file="",
                                            client_ca_file=str(cluster.cert_file)))
    serving.load(str(serving_cert), str(tmp_path / "serving.key"))
    stranger = TestCA(tmp_path / "other", "other").client("intruder")
    seen = await _certificates_seen(serving.context, _with_certificate(client, stranger))
    assert _subjects(seen) == ["CN=intruder"]


async def test_without_access_to_libssl_the_handshake_verifies_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(tls, "_libssl", lambda: "no libssl here")
    caplog.set_level(logging.WARNING, logger="pykubelet")
    cluster = TestCA(tmp_path / "cluster", "cluster")
    options = _init(tmp_path / "pki", client_ca_file=str(cluster.cert_file))
    context = options.ssl_context()
    assert any("verified in the TLS handshake" in record.getMessage()
               and "no libssl here" in record.getMessage() for record in caplog.records)
    stranger = TestCA(tmp_path / "other", "other").client("intruder")
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await _certificates_seen(context, _with_certificate(_client(options), stranger))
    member = cluster.client("member")
    seen = await _certificates_seen(context, _with_certificate(_client(options), member))
    assert _subjects(seen) == ["CN=member"]


def test_the_ssl_ctx_is_used_only_where_it_is_recognised() -> None:
    if isinstance(tls._libssl(), str):
        pytest.skip(f"no libssl to check against: {tls._libssl()}")
    # A context that asks for no certificate does not show the verify mode the
    # check expects: it is left alone.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    reason = tls._request_client_certificates(context, "/nonexistent")
    assert reason == "the SSLContext's SSL_CTX is not where CPython keeps it"
