"""Authentication and authorization decisions of the kubelet API (fake review endpoints)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

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


def request(headers: dict[str, str] | None = None, cert: bytes | None = None) -> AuthRequest:
    return AuthRequest("GET", "/pods", headers or {}, cert)


async def test_client_certificate_names_user_and_groups(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    client = ca.client("system:kube-apiserver", ("system:masters", "ops"))
    der = x509.load_pem_x509_certificate(client.cert_file.read_bytes()).public_bytes(
        serialization.Encoding.DER)
    user = await X509Authenticator().authenticate(request(cert=der))
    assert user == UserInfo("system:kube-apiserver", groups=("system:masters", "ops"))
    assert await X509Authenticator().authenticate(request()) is None


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


async def test_bad_token_is_an_error_not_anonymous() -> None:
    tokens = Tokens()
    authenticator = DelegatingAuthenticator(
        [X509Authenticator(), TokenWebhookAuthenticator(tokens, 60)], anonymous=True)
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
