"""Authentication and authorization decisions of the kubelet API (fake review endpoints)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.server.auth import (
    ANONYMOUS,
    AlwaysAllowAuthorizer,
    Attributes,
    AuthConfigError,
    AuthenticationError,
    AuthorizationError,
    AuthRequest,
    DelegatingAuthenticator,
    SubjectAccessReviewResult,
    TokenReviewResult,
    TokenWebhookAuthenticator,
    UserInfo,
    WebhookAuthorizer,
    X509Authenticator,
    build_auth,
    request_attributes,
)
from testsupport.pki import TestCA


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tokens:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.valid = {"good": UserInfo("system:serviceaccount:ns:sa", "uid-1",
                                       ("system:serviceaccounts",))}

    async def review(self, token: str) -> TokenReviewResult:
        self.calls.append(token)
        user = self.valid.get(token)
        return TokenReviewResult(user is not None, user)


class Reviews:
    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed
        self.calls: list[Attributes] = []
        self.fail = False

    async def review(self, attributes: Attributes) -> SubjectAccessReviewResult:
        self.calls.append(attributes)
        if self.fail:
            raise ConnectionError("apiserver down")
        return SubjectAccessReviewResult(allowed=attributes.subresource in self.allowed)


def request(headers: dict[str, str] | None = None,
            certs: tuple[bytes, ...] = ()) -> AuthRequest:
    return AuthRequest("GET", "/pods", headers or {}, certs)


def sent(cert_file: Path) -> tuple[bytes, ...]:
    """What a client holding ``cert_file`` presents: its certificate, then the chain."""
    return tuple(cert.public_bytes(serialization.Encoding.DER)
                 for cert in x509.load_pem_x509_certificates(cert_file.read_bytes()))


def trusting(*cas: TestCA) -> X509Authenticator:
    return X509Authenticator([ca.cert for ca in cas])


async def test_client_certificate_names_user_and_groups(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    client = ca.client("system:kube-apiserver", ("system:masters", "ops"))
    user = await trusting(ca).authenticate(request(certs=sent(client.cert_file)))
    assert user == UserInfo("system:kube-apiserver", groups=("system:masters", "ops"))
    assert await trusting(ca).authenticate(request()) is None


async def test_certificate_from_an_unknown_ca_does_not_authenticate(tmp_path: Path) -> None:
    cluster, other = TestCA(tmp_path / "cluster", "cluster"), TestCA(tmp_path / "other", "other")
    stranger = other.client("system:kube-apiserver", ("system:masters",))
    leaf = x509.load_pem_x509_certificate(stranger.cert_file.read_bytes())
    with pytest.raises(AuthenticationError) as raised:
        await trusting(cluster).authenticate(request(certs=sent(stranger.cert_file)))
    assert str(raised.value) == (f"verifying certificate SN={leaf.serial_number}, SKID=, AKID= "
                                 f"failed: x509: certificate signed by unknown authority")
    # A bundle of several CAs: any of them will do.
    assert await trusting(cluster, other).authenticate(request(certs=sent(stranger.cert_file)))


async def test_a_ca_of_the_same_name_is_not_the_trusted_one(tmp_path: Path) -> None:
    cluster, impostor = TestCA(tmp_path / "a", "cluster"), TestCA(tmp_path / "b", "cluster")
    forged = impostor.client("system:kube-apiserver", ("system:masters",))
    with pytest.raises(AuthenticationError, match="signed by unknown authority"):
        await trusting(cluster).authenticate(request(certs=sent(forged.cert_file)))


class WallClock:
    def __init__(self) -> None:
        self.now = datetime.datetime.now(datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now


@pytest.mark.parametrize(("hours", "relation"), [(25, "after"), (-2, "before")])
async def test_expired_and_not_yet_valid_certificates_do_not_authenticate(
        tmp_path: Path, hours: int, relation: str) -> None:
    ca = TestCA(tmp_path)
    certs = sent(ca.client("alice").cert_file)
    clock = WallClock()
    authenticator = X509Authenticator([ca.cert], clock=clock)
    if hours > 0:  # accepted (and remembered) while valid, refused once expired
        assert await authenticator.authenticate(request(certs=certs)) == UserInfo("alice")
    clock.now += datetime.timedelta(hours=hours)
    with pytest.raises(AuthenticationError,
                       match=f"has expired or is not yet valid: current time .* is {relation}"):
        await authenticator.authenticate(request(certs=certs))


async def test_an_expired_ca_does_not_vouch_for_anyone(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)  # valid for a day
    client = ca.client("alice", valid=(datetime.timedelta(hours=-1), datetime.timedelta(days=3)))
    clock = WallClock()
    authenticator = X509Authenticator([ca.cert], clock=clock)
    assert await authenticator.authenticate(request(certs=sent(client.cert_file)))
    clock.now += datetime.timedelta(days=2)
    with pytest.raises(AuthenticationError, match="unknown authority"):
        await authenticator.authenticate(request(certs=sent(client.cert_file)))


@pytest.mark.parametrize(("usages", "authenticates"), [
    ((ExtendedKeyUsageOID.CLIENT_AUTH,), True),
    ((ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH), True),
    ((ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,), True),
    ((), True),  # no extended key usage at all: any use, as in Go
    ((ExtendedKeyUsageOID.SERVER_AUTH,), False),
    ((ExtendedKeyUsageOID.CODE_SIGNING,), False),
])
async def test_the_certificate_must_be_good_for_client_authentication(
        tmp_path: Path, usages: tuple[x509.ObjectIdentifier, ...], authenticates: bool) -> None:
    ca = TestCA(tmp_path)
    client = ca.client("alice", usages=usages)
    authenticate = trusting(ca).authenticate(request(certs=sent(client.cert_file)))
    if authenticates:
        assert await authenticate == UserInfo("alice")
    else:
        with pytest.raises(AuthenticationError,
                           match="x509: certificate specifies an incompatible key usage"):
            await authenticate


async def test_intermediate_cas_sent_by_the_client_complete_the_chain(tmp_path: Path) -> None:
    root = TestCA(tmp_path / "root", "root")
    intermediate = TestCA(tmp_path / "intermediate", "intermediate", issuer=root)
    client = intermediate.client("alice", ("devs",))
    assert await trusting(root).authenticate(request(certs=sent(client.cert_file))) == \
        UserInfo("alice", groups=("devs",))
    # Without the intermediate there is no path to the root.
    with pytest.raises(AuthenticationError, match="unknown authority"):
        await trusting(root).authenticate(request(certs=sent(client.cert_file)[:1]))


async def test_a_client_certificate_cannot_sign_for_another(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    holder = ca.client("alice")
    holder_cert = x509.load_pem_x509_certificate(holder.cert_file.read_bytes())
    holder_key = serialization.load_pem_private_key(holder.key_file.read_bytes(), None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    minted = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "admin")]))
              .issuer_name(holder_cert.subject).public_key(key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(hours=1))
              .sign(holder_key, hashes.SHA256()))  # type: ignore[arg-type]
    chain = (minted.public_bytes(serialization.Encoding.DER), *sent(holder.cert_file))
    with pytest.raises(AuthenticationError, match="unknown authority"):
        await trusting(ca).authenticate(request(certs=chain))


def _kubeadm_style_pair() -> tuple[x509.Certificate, bytes]:
    """An RSA cluster CA and an API server kubelet-client certificate shaped as kubeadm and
    scripts/testbed/controlplane.sh make them: key identifiers, critical key usage and
    basic constraints, clientAuth, no subject alternative names."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.KeyUsage(
              digital_signature=True, key_encipherment=True, key_cert_sign=True,
              content_commitment=False, data_encipherment=False, key_agreement=False,
              crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(0x1234)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_encipherment=True, key_cert_sign=False,
                content_commitment=False, data_encipherment=False, key_agreement=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return ca, leaf.public_bytes(serialization.Encoding.DER)


async def test_the_api_servers_kubelet_client_certificate_authenticates() -> None:
    ca, leaf = _kubeadm_style_pair()
    user = await X509Authenticator([ca]).authenticate(request(certs=(leaf,)))
    assert user == UserInfo("kube-apiserver-kubelet-client", groups=("system:masters",))


async def test_unknown_ca_errors_name_the_certificate_as_upstream_does() -> None:
    _, leaf = _kubeadm_style_pair()
    other, _ = _kubeadm_style_pair()
    identifiers = x509.load_der_x509_certificate(leaf).extensions.get_extension_for_class(
        x509.AuthorityKeyIdentifier).value.key_identifier
    assert identifiers is not None
    akid = ":".join(f"{b:02X}" for b in identifiers)
    with pytest.raises(AuthenticationError) as raised:
        await X509Authenticator([other]).authenticate(request(certs=(leaf,)))
    assert str(raised.value).startswith(f"verifying certificate SN=4660, SKID=, AKID={akid} "
                                        f"failed: x509: certificate signed by unknown authority")


async def test_a_verified_certificate_without_a_common_name_names_no_user(
        tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    client = ca.client("", ("devs",))
    assert await trusting(ca).authenticate(request(certs=sent(client.cert_file))) is None


async def test_a_bad_certificate_with_a_good_token_is_the_tokens_user(tmp_path: Path) -> None:
    cluster, other = TestCA(tmp_path / "cluster", "cluster"), TestCA(tmp_path / "other", "other")
    stranger = sent(other.client("intruder").cert_file)
    authenticator = DelegatingAuthenticator(
        [trusting(cluster), TokenWebhookAuthenticator(Tokens(), 60)], anonymous=True)
    user = await authenticator.authenticate(
        request({"Authorization": "Bearer good"}, certs=stranger))
    assert user is not None and user.name == "system:serviceaccount:ns:sa"
    # Alone, the bad certificate is a failure, never the anonymous user.
    with pytest.raises(AuthenticationError, match="unknown authority"):
        await authenticator.authenticate(request(certs=stranger))


def test_an_unreadable_client_ca_bundle_names_the_field(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.crt"
    garbage.write_text("not a certificate")
    for path in (garbage, tmp_path / "missing.crt"):
        with pytest.raises(AuthConfigError,
                           match=f"unable to load client CA file {path} "
                                 r"\(authentication.x509.clientCAFile\)"):
            build_auth("n", None, anonymous=False, webhook_authentication=False,
                       token_cache_ttl=120, client_ca_file=str(path),
                       authorization_mode="AlwaysAllow", authorized_ttl=300,
                       unauthorized_ttl=30, fine_grained=True)


async def test_bearer_tokens_are_reviewed_once_per_ttl() -> None:
    tokens, clock = Tokens(), Clock()
    auth = TokenWebhookAuthenticator(tokens, cache_ttl=120, clock=clock)
    good = request({"Authorization": "Bearer good"})
    user = await auth.authenticate(good)
    assert user is not None and user.name == "system:serviceaccount:ns:sa"
    await auth.authenticate(good)
    assert tokens.calls == ["good"]
    clock.now += 121
    await auth.authenticate(good)
    assert tokens.calls == ["good", "good"]


async def test_bad_token_is_an_error_not_anonymous(tmp_path: Path) -> None:
    tokens = Tokens()
    authenticator = DelegatingAuthenticator(
        [trusting(TestCA(tmp_path)), TokenWebhookAuthenticator(tokens, 60)], anonymous=True)
    with pytest.raises(AuthenticationError, match="invalid bearer token"):
        await authenticator.authenticate(request({"Authorization": "Bearer stolen"}))
    # No credentials at all: the anonymous user, only when enabled.
    assert await authenticator.authenticate(request()) == ANONYMOUS
    closed = DelegatingAuthenticator([TokenWebhookAuthenticator(tokens, 60)], anonymous=False)
    assert await closed.authenticate(request()) is None


async def test_authenticated_users_join_system_authenticated() -> None:
    authenticator = DelegatingAuthenticator([TokenWebhookAuthenticator(Tokens(), 60)], False)
    user = await authenticator.authenticate(request({"Authorization": "bearer good"}))
    assert user is not None
    assert user.groups == ("system:serviceaccounts", "system:authenticated")


async def test_websocket_clients_pass_the_token_as_a_subprotocol() -> None:
    tokens = Tokens()
    auth = TokenWebhookAuthenticator(tokens, 60)
    # base64url("good") without padding
    headers = {"Sec-WebSocket-Protocol": "v4.channel.k8s.io, "
                                         "base64url.bearer.authorization.k8s.io.Z29vZA"}
    user = await auth.authenticate(request(headers))
    assert user is not None and tokens.calls == ["good"]


@pytest.mark.parametrize(("method", "path", "fine", "expected"), [
    ("GET", "/stats/summary", True, ("get", ["stats"])),
    ("GET", "/metrics", True, ("get", ["metrics"])),
    ("GET", "/metrics/cadvisor", True, ("get", ["metrics"])),
    ("GET", "/logs/syslog", True, ("get", ["log"])),
    ("GET", "/spec/", True, ("get", ["spec"])),
    ("GET", "/pods", True, ("get", ["pods", "proxy"])),
    ("GET", "/runningpods/", True, ("get", ["pods", "proxy"])),
    ("GET", "/healthz", True, ("get", ["healthz", "proxy"])),
    ("GET", "/configz", True, ("get", ["configz", "proxy"])),
    ("GET", "/configz", False, ("get", ["proxy"])),
    ("POST", "/exec/ns/pod/c", True, ("create", ["proxy"])),
    ("GET", "/containerLogs/ns/pod/c", True, ("get", ["proxy"])),
    ("PUT", "/debug/flags/v", True, ("update", ["proxy"])),
    ("GET", "/statsfoo", True, ("get", ["proxy"])),
])
def test_request_attributes_map_paths_to_node_subresources(
        method: str, path: str, fine: bool, expected: tuple[str, list[str]]) -> None:
    attrs = request_attributes("node-1", ANONYMOUS, method, path, fine)
    assert {(a.verb, a.resource, a.name, a.api_version) for a in attrs} == {
        (expected[0], "nodes", "node-1", "v1")}
    assert [a.subresource for a in attrs] == expected[1]


def _attrs(subresource: str, user: str = "alice") -> Attributes:
    return Attributes(UserInfo(user), "get", "nodes", subresource, "node-1", "/x")


async def test_webhook_decisions_are_cached_for_their_own_ttls() -> None:
    reviews, clock = Reviews({"stats"}), Clock()
    authorizer = WebhookAuthorizer(reviews, authorized_ttl=300, unauthorized_ttl=30, clock=clock)
    assert (await authorizer.authorize(_attrs("stats"))).allowed
    assert not (await authorizer.authorize(_attrs("proxy"))).allowed
    await authorizer.authorize(_attrs("stats"))
    await authorizer.authorize(_attrs("proxy"))
    assert len(reviews.calls) == 2
    clock.now += 31  # the denial expired, the approval did not
    reviews.allowed.add("proxy")
    assert (await authorizer.authorize(_attrs("proxy"))).allowed
    await authorizer.authorize(_attrs("stats"))
    assert len(reviews.calls) == 3
    # Another user is another question.
    await authorizer.authorize(_attrs("stats", user="bob"))
    assert len(reviews.calls) == 4


async def test_webhook_failure_is_an_authorization_error() -> None:
    reviews = Reviews(set())
    reviews.fail = True
    with pytest.raises(AuthorizationError, match="apiserver down"):
        await WebhookAuthorizer(reviews, 300, 30).authorize(_attrs("proxy"))


def test_build_auth_refuses_webhooks_without_a_client() -> None:
    common = dict(anonymous=False, token_cache_ttl=120, client_ca_file="", authorized_ttl=300,
                  unauthorized_ttl=30, fine_grained=True)
    with pytest.raises(AuthConfigError, match="cannot use webhook authentication"):
        build_auth("n", None, webhook_authentication=True, authorization_mode="AlwaysAllow",
                   **common)  # type: ignore[arg-type]
    with pytest.raises(AuthConfigError, match="cannot use webhook authorization"):
        build_auth("n", None, webhook_authentication=False, authorization_mode="Webhook",
                   **common)  # type: ignore[arg-type]
    with pytest.raises(AuthConfigError, match="unknown authorization mode RBAC"):
        build_auth("n", None, webhook_authentication=False, authorization_mode="RBAC",
                   **common)  # type: ignore[arg-type]
    auth = build_auth("n", None, webhook_authentication=False, authorization_mode="AlwaysAllow",
                      **common)  # type: ignore[arg-type]
    assert isinstance(auth.authorizer, AlwaysAllowAuthorizer)
