"""Who may call the kubelet API, and for what (upstream ``BuildAuth`` and ``server/auth.go``).

Every request on the authenticated port goes through two steps, as in the Go
kubelet:

* **Authentication** turns the request into a user: a client certificate that
  chains to a CA of ``authentication.x509.clientCAFile`` (CommonName is the
  user, Organizations the groups), or a bearer token the API server vouches
  for through a ``TokenReview`` (cached for ``webhook.cacheTTL``). The TLS
  handshake only asks for the certificate (``pykubelet.server.tls``); it is
  verified here, on every request, as upstream's x509 authenticator does
  with Go's ``x509.Verify``: the chain the client sent, up to a CA of the
  bundle, every certificate within its validity period, CAs with
  ``basicConstraints`` CA, and the ``clientAuth`` extended key usage wherever
  the extension is present. A certificate that does not verify does not
  authenticate; the next authenticator (the bearer token) still may.
  Authenticated users gain the group ``system:authenticated``. A request with
  no credentials at all becomes ``system:anonymous`` (group
  ``system:unauthenticated``) when ``anonymous.enabled``; a request with *bad*
  credentials and no good ones never does: it is 401, as upstream.
* **Authorization** maps the request to attributes on the node object (verb
  from the HTTP method, resource ``nodes``, the node's name, a subresource
  from the path: ``stats``, ``metrics``, ``log``, ``checkpoint``, ``spec``,
  else ``proxy``; with ``KubeletFineGrainedAuthz`` ``pods``, ``healthz`` and
  ``configz`` are asked first with ``proxy`` as the fallback) and asks the
  authorizer: ``AlwaysAllow``, or the API server through a
  ``SubjectAccessReview`` whose answers are cached for
  ``cacheAuthorizedTTL`` / ``cacheUnauthorizedTTL``.

The HTTP side (status codes and messages) lives in ``pykubelet.server.server``;
this module only decides.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    Policy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from pykubelet.util import klog

ANONYMOUS_USER: Final = "system:anonymous"
UNAUTHENTICATED_GROUP: Final = "system:unauthenticated"
AUTHENTICATED_GROUP: Final = "system:authenticated"

MODE_ALWAYS_ALLOW: Final = "AlwaysAllow"
MODE_WEBHOOK: Final = "Webhook"

# Paths whose requests get a subresource of their own (upstream's path constants).
STATS_PATH: Final = "/stats/"
METRICS_PATH: Final = "/metrics"
LOGS_PATH: Final = "/logs/"
CHECKPOINT_PATH: Final = "/checkpoint/"
SPEC_PATH: Final = "/spec/"
PODS_PATH: Final = "/pods"
RUNNING_PODS_PATH: Final = "/runningpods/"
HEALTHZ_PATH: Final = "/healthz"
CONFIGZ_PATH: Final = "/configz"

_VERBS: Final = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}
_WEBSOCKET_TOKEN_PREFIX: Final = "base64url.bearer.authorization.k8s.io."

# Bounds on the decision caches: enough for every client of one node.
_TOKEN_CACHE_SIZE: Final = 4096
_DECISION_CACHE_SIZE: Final = 8192
_CERTIFICATE_CACHE_SIZE: Final = 1024
# Transient webhook failures are retried this often, with growing pauses.
_WEBHOOK_ATTEMPTS: Final = 3
_WEBHOOK_RETRY_PAUSE: Final = 0.2


class AuthenticationError(Exception):
    """Credentials were presented but could not be verified (answered with 401)."""


class AuthorizationError(Exception):
    """The authorizer could not decide (answered with 500)."""


@dataclass(frozen=True)
class UserInfo:
    """An authenticated caller (upstream ``user.Info``)."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


ANONYMOUS: Final = UserInfo(ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))


@dataclass(frozen=True)
class AuthRequest:
    """The parts of an HTTP request authentication looks at."""

    method: str
    path: str
    headers: Mapping[str, str]
    # The DER certificates the client sent in the TLS handshake, its own first
    # (Go's PeerCertificates); not verified there.
    peer_certificates: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (upstream ``authorizer.AttributesRecord``)."""

    user: UserInfo
    verb: str
    resource: str
    subresource: str
    name: str
    path: str
    namespace: str = ""
    api_group: str = ""
    api_version: str = "v1"
    resource_request: bool = True


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class Authenticator(Protocol):
    async def authenticate(self, request: AuthRequest) -> UserInfo | None:
        """The user behind ``request``; None without credentials of this kind.

        Raises ``AuthenticationError`` for credentials that do not check out.
        """
        ...


class Authorizer(Protocol):
    async def authorize(self, attributes: Attributes) -> Decision:
        """Allow or not; ``AuthorizationError`` when no decision could be made."""
        ...


# -- caching -----------------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """A bounded map whose entries expire; the oldest entry goes first when full."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._max = max_entries
        self._clock = clock

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= self._clock():
            del self._entries[key]
            return None
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


# -- authentication ------------------------------------------------------------

# Go's x509 errors, which upstream logs as the reason a certificate did not authenticate.
_UNKNOWN_AUTHORITY: Final = "x509: certificate signed by unknown authority"
_INCOMPATIBLE_USAGE: Final = "x509: certificate specifies an incompatible key usage"


def _allows_client_auth(_policy: Policy, _cert: x509.Certificate,
                        usage: x509.ExtendedKeyUsage | None) -> None:
    # Without the extension a certificate is good for any use, as in Go.
    if usage is None or ExtendedKeyUsageOID.CLIENT_AUTH in usage \
            or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usage:
        return
    raise ValueError(_INCOMPATIBLE_USAGE)


def _may_sign(_policy: Policy, _cert: x509.Certificate,
              constraints: x509.BasicConstraints) -> None:
    if not constraints.ca:
        raise ValueError("x509: certificate is not authorized to sign other certificates")


# What Go's x509.Verify with KeyUsages [ClientAuth] looks at, and no more: the
# web PKI defaults of cryptography's verifier would also demand a SAN and key
# identifiers, which the API server's kubelet client certificate (and
# kubeadm's) does not have. Unknown critical extensions are refused either way.
_CA_POLICY: Final = (
    ExtensionPolicy.permit_all()
    .require_present(x509.BasicConstraints, Criticality.AGNOSTIC, _may_sign)
    .may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _allows_client_auth))
_CLIENT_POLICY: Final = ExtensionPolicy.permit_all().may_be_present(
    x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _allows_client_auth)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _colon_hex(data: bytes | None) -> str:
    return ":".join(f"{byte:02X}" for byte in data or b"")


def certificate_identifier(cert: x509.Certificate) -> str:
    """Serial number and key identifiers, as upstream names a certificate in its errors."""
    try:
        skid = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        skid = None
    try:
        akid = cert.extensions.get_extension_for_class(
            x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        akid = None
    return f"SN={cert.serial_number}, SKID={_colon_hex(skid)}, AKID={_colon_hex(akid)}"


class X509Authenticator:
    """Users from client certificates that chain to the client CA bundle (upstream
    ``x509.Authenticator`` with ``CommonNameUserConversion``).

    A chain that verified is remembered until the first of its certificates
    expires: the bundle does not change while the kubelet runs, so neither can
    the answer, and a caller's requests after its first cost no verification
    (v1.35 verifies on every request, upstream's later code once per
    connection). Chains that failed are not remembered.
    """

    def __init__(self, client_cas: Sequence[x509.Certificate],
                 clock: Callable[[], datetime.datetime] = _utcnow) -> None:  # clock: tests only
        self._store = Store(list(client_cas))
        self._ca_subjects = frozenset(ca.subject for ca in client_cas)
        self._clock = clock
        # Keyed by the certificates sent; expiry on the certificates' own (wall) clock.
        self._verified: ExpiringCache[bytes, UserInfo] = ExpiringCache(
            _CERTIFICATE_CACHE_SIZE, lambda: self._clock().timestamp())

    @classmethod
    def from_file(cls, path: str) -> X509Authenticator:
        """The CAs of a PEM bundle (``clientCAFile``); AuthConfigError naming it."""
        try:
            with open(path, "rb") as file:
                cas = x509.load_pem_x509_certificates(file.read())
        except (OSError, ValueError) as err:
            raise AuthConfigError(f"unable to load client CA file {path} "
                                  f"(authentication.x509.clientCAFile): {err}") from err
        return cls(cas)

    async def authenticate(self, request: AuthRequest) -> UserInfo | None:
        if not request.peer_certificates:
            return None
        key = hashlib.sha256(b"".join(len(der).to_bytes(4, "big") + der
                                      for der in request.peer_certificates)).digest()
        known = self._verified.get(key)
        if known is not None:
            return known
        try:
            leaf, *intermediates = (x509.load_der_x509_certificate(der)
                                    for der in request.peer_certificates)
        except ValueError as err:
            raise AuthenticationError(f"x509: cannot parse client certificate: {err}") from err
        now = self._clock()
        problem, chain = self._verify(leaf, intermediates, now)
        if problem is not None:
            raise AuthenticationError(f"verifying certificate {certificate_identifier(leaf)} "
                                      f"failed: {problem}")
        common_names = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if not common_names or not str(common_names[0].value):
            return None
        groups = tuple(str(a.value) for a in
                       leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))
        user = UserInfo(name=str(common_names[0].value), groups=groups)
        until = min(cert.not_valid_after_utc for cert in chain)
        self._verified.put(key, user, (until - now).total_seconds())
        return user

    def _verify(self, leaf: x509.Certificate, intermediates: list[x509.Certificate],
                now: datetime.datetime) -> tuple[str | None, list[x509.Certificate]]:
        """Why the chain does not verify at ``now``, in Go's words where Go has them, or
        None and the verified chain (the client's certificate up to a CA of the bundle)."""
        if now < leaf.not_valid_before_utc:
            return (f"x509: certificate has expired or is not yet valid: current time "
                    f"{_rfc3339(now)} is before {_rfc3339(leaf.not_valid_before_utc)}"), []
        if now > leaf.not_valid_after_utc:
            return (f"x509: certificate has expired or is not yet valid: current time "
                    f"{_rfc3339(now)} is after {_rfc3339(leaf.not_valid_after_utc)}"), []
        verifier = (PolicyBuilder().store(self._store).time(now)
                    .extension_policies(ca_policy=_CA_POLICY, ee_policy=_CLIENT_POLICY)
                    .build_client_verifier())
        try:
            verified = verifier.verify(leaf, intermediates)
        except VerificationError as err:
            detail = str(err)
            if _INCOMPATIBLE_USAGE in detail:
                return _INCOMPATIBLE_USAGE, []
            if leaf.issuer not in self._ca_subjects | {c.subject for c in intermediates}:
                return _UNKNOWN_AUTHORITY, []
            return f"{_UNKNOWN_AUTHORITY} (possibly because of {detail})", []
        return None, verified.chain


@dataclass(frozen=True)
class TokenReviewResult:
    authenticated: bool
    user: UserInfo | None = None
    error: str = ""


class TokenReviewer(Protocol):
    """Sends a ``TokenReview`` to the API server."""

    async def review(self, token: str) -> TokenReviewResult: ...


class SubjectAccessReviewer(Protocol):
    """Sends a ``SubjectAccessReview`` to the API server."""

    async def review(self, attributes: Attributes) -> SubjectAccessReviewResult: ...


@dataclass(frozen=True)
class SubjectAccessReviewResult:
    allowed: bool
    denied: bool = False
    reason: str = ""
    evaluation_error: str = ""


async def _with_retries(call: Callable[[], Any], what: str) -> Any:
    """Retry transient webhook failures (connection errors, 5xx and 429) a few times."""
    for attempt in range(_WEBHOOK_ATTEMPTS):
        try:
            return await call()
        except Exception as err:
            status = getattr(err, "status", None)
            transient = status is None or status == 429 or int(status) >= 500
            if not transient or attempt == _WEBHOOK_ATTEMPTS - 1:
                raise
            klog.v(2).info(f"{what} failed, retrying", err=err, attempt=attempt + 1)
            await asyncio.sleep(_WEBHOOK_RETRY_PAUSE * (2 ** attempt))
    raise AssertionError("unreachable")


class TokenWebhookAuthenticator:
    """Bearer tokens checked by the API server's ``TokenReview``, results cached.

    The token comes from ``Authorization: Bearer <token>`` or, for WebSocket
    clients that cannot set headers, from a ``base64url.bearer.authorization.k8s.io.<token>``
    WebSocket subprotocol.
    """

    def __init__(self, reviewer: TokenReviewer, cache_ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reviewer = reviewer
        self._ttl = cache_ttl
        self._cache: ExpiringCache[str, TokenReviewResult] = ExpiringCache(_TOKEN_CACHE_SIZE,
                                                                           clock)

    @staticmethod
    def bearer_token(request: AuthRequest) -> str | None:
        header = request.headers.get("Authorization", "").strip()
        if header:
            parts = header.split(" ", 2)
            if len(parts) >= 2 and parts[0].lower() == "bearer" and parts[1]:
                return parts[1]
            return None
        protocols = request.headers.get("Sec-WebSocket-Protocol", "")
        for proto in (p.strip() for p in protocols.split(",")):
            if proto.startswith(_WEBSOCKET_TOKEN_PREFIX):
                encoded = proto[len(_WEBSOCKET_TOKEN_PREFIX):]
                try:
                    token = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
                    return token.decode()
                except (binascii.Error, UnicodeDecodeError):
                    return None
        return None

    async def authenticate(self, request: AuthRequest) -> UserInfo | None:
        token = self.bearer_token(request)
        if token is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        result = self._cache.get(key)
        if result is None:
            try:
                result = await _with_retries(lambda: self._reviewer.review(token), "TokenReview")
            except Exception as err:
                raise AuthenticationError(f"token review failed: {err}") from err
            self._cache.put(key, result, self._ttl)
        if not result.authenticated or result.user is None:
            raise AuthenticationError(result.error or "invalid bearer token")
        return result.user


class DelegatingAuthenticator:
    """x509, then tokens; ``system:authenticated`` added; anonymous only without credentials."""

    def __init__(self, authenticators: Sequence[Authenticator], anonymous: bool) -> None:
        self._authenticators = list(authenticators)
        self._anonymous = anonymous

    async def authenticate(self, request: AuthRequest) -> UserInfo | None:
        errors: list[str] = []
        for authenticator in self._authenticators:
            try:
                user = await authenticator.authenticate(request)
            except AuthenticationError as err:
                errors.append(str(err))
                continue
            if user is not None:
                if AUTHENTICATED_GROUP not in user.groups:
                    user = UserInfo(user.name, user.uid, (*user.groups, AUTHENTICATED_GROUP),
                                    user.extra)
                return user
        if errors:
            raise AuthenticationError("; ".join(errors))
        return ANONYMOUS if self._anonymous else None


# -- authorization -------------------------------------------------------------

class AlwaysAllowAuthorizer:
    async def authorize(self, attributes: Attributes) -> Decision:
        return Decision(True)


class WebhookAuthorizer:
    """``SubjectAccessReview`` decisions, allowed and denied ones cached for their TTLs."""

    def __init__(self, reviewer: SubjectAccessReviewer, authorized_ttl: float,
                 unauthorized_ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._reviewer = reviewer
        self._authorized_ttl = authorized_ttl
        self._unauthorized_ttl = unauthorized_ttl
        self._cache: ExpiringCache[str, SubjectAccessReviewResult] = ExpiringCache(
            _DECISION_CACHE_SIZE, clock)

    @staticmethod
    def _key(attributes: Attributes) -> str:
        user = attributes.user
        return json.dumps([user.name, user.uid, sorted(user.groups),
                           sorted((k, list(v)) for k, v in user.extra.items()),
                           attributes.verb, attributes.api_group, attributes.api_version,
                           attributes.resource, attributes.subresource, attributes.namespace,
                           attributes.name])

    async def authorize(self, attributes: Attributes) -> Decision:
        key = self._key(attributes)
        result = self._cache.get(key)
        if result is None:
            try:
                result = await _with_retries(lambda: self._reviewer.review(attributes),
                                             "SubjectAccessReview")
            except Exception as err:
                raise AuthorizationError(str(err)) from err
            ttl = self._authorized_ttl if result.allowed else self._unauthorized_ttl
            self._cache.put(key, result, ttl)
        if result.allowed and result.denied:
            raise AuthorizationError("webhook subject access review returned both allow and "
                                     "deny response")
        if result.evaluation_error:
            klog.v(2).info("SubjectAccessReview evaluation error",
                           error=result.evaluation_error)
        return Decision(result.allowed and not result.denied, result.reason)


def _is_subpath(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] == "/")


def request_attributes(node_name: str, user: UserInfo, method: str, path: str,
                       fine_grained: bool) -> list[Attributes]:
    """The attributes to authorize, most specific first (upstream ``GetRequestAttributes``).

    The request is allowed when any of them is.
    """
    verb = _VERBS.get(method.upper(), "")

    def attrs(subresource: str) -> Attributes:
        return Attributes(user=user, verb=verb, resource="nodes", subresource=subresource,
                          name=node_name, path=path)

    for prefix, subresource in ((STATS_PATH, "stats"), (METRICS_PATH, "metrics"),
                                (LOGS_PATH, "log"), (CHECKPOINT_PATH, "checkpoint"),
                                (SPEC_PATH, "spec")):
        if _is_subpath(path, prefix):
            return [attrs(subresource)]
    for prefix, subresource in ((PODS_PATH, "pods"), (RUNNING_PODS_PATH, "pods"),
                                (HEALTHZ_PATH, "healthz"), (CONFIGZ_PATH, "configz")):
        if _is_subpath(path, prefix):
            return [attrs(subresource), attrs("proxy")] if fine_grained else [attrs("proxy")]
    return [attrs("proxy")]


@dataclass
class KubeletAuth:
    """Authenticator, attribute getter and authorizer of the authenticated port."""

    authenticator: Authenticator
    authorizer: Authorizer
    node_name: str
    fine_grained: bool = True

    async def authenticate(self, request: AuthRequest) -> UserInfo | None:
        return await self.authenticator.authenticate(request)

    def request_attributes(self, user: UserInfo, method: str, path: str) -> list[Attributes]:
        attributes = request_attributes(self.node_name, user, method, path, self.fine_grained)
        for attr in attributes:
            klog.v(5).info("Node request attributes", user=attr.user.name, verb=attr.verb,
                           resource=attr.resource, subresource=attr.subresource)
        return attributes

    async def authorize(self, attributes: Attributes) -> Decision:
        return await self.authorizer.authorize(attributes)


# -- the API server's review endpoints ----------------------------------------------

class ApiTokenReviewer:
    """``TokenReview`` through a kubernetes_asyncio ``ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio.client import AuthenticationV1Api

        self._api = AuthenticationV1Api(api_client)

    async def review(self, token: str) -> TokenReviewResult:
        from kubernetes_asyncio.client import V1TokenReview, V1TokenReviewSpec

        body = V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                             spec=V1TokenReviewSpec(token=token))
        answer = await self._api.create_token_review(body)
        status = answer.status
        if status is None or not status.authenticated or status.user is None:
            return TokenReviewResult(False, error=(status.error or "") if status else "")
        user = status.user
        extra = {key: tuple(values or ()) for key, values in (user.extra or {}).items()}
        return TokenReviewResult(True, UserInfo(name=user.username or "", uid=user.uid or "",
                                                groups=tuple(user.groups or ()), extra=extra))


class ApiSubjectAccessReviewer:
    """``SubjectAccessReview`` through a kubernetes_asyncio ``ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio.client import AuthorizationV1Api

        self._api = AuthorizationV1Api(api_client)

    async def review(self, attributes: Attributes) -> SubjectAccessReviewResult:
        from kubernetes_asyncio.client import (
            V1ResourceAttributes,
            V1SubjectAccessReview,
            V1SubjectAccessReviewSpec,
        )

        user = attributes.user
        spec = V1SubjectAccessReviewSpec(
            user=user.name, uid=user.uid or None, groups=list(user.groups) or None,
            extra={key: list(values) for key, values in user.extra.items()} or None,
            resource_attributes=V1ResourceAttributes(
                namespace=attributes.namespace, verb=attributes.verb,
                group=attributes.api_group, version=attributes.api_version,
                resource=attributes.resource, subresource=attributes.subresource,
                name=attributes.name))
        body = V1SubjectAccessReview(api_version="authorization.k8s.io/v1",
                                     kind="SubjectAccessReview", spec=spec)
        answer = await self._api.create_subject_access_review(body)
        status = answer.status
        return SubjectAccessReviewResult(
            allowed=bool(status.allowed), denied=bool(status.denied),
            reason=status.reason or "", evaluation_error=status.evaluation_error or "")


class AuthConfigError(ValueError):
    """The authentication/authorization settings cannot be served."""


def build_auth(node_name: str, api_client: Any | None, *, anonymous: bool,
               webhook_authentication: bool, token_cache_ttl: float, client_ca_file: str,
               authorization_mode: str, authorized_ttl: float, unauthorized_ttl: float,
               fine_grained: bool) -> KubeletAuth:
    """Upstream ``BuildAuth``: the authenticator and authorizer the configuration asks for.

    ``api_client`` is the kubelet's API client, None in standalone mode; the
    webhooks cannot work without it, which stops start-up as upstream does.
    """
    authenticators: list[Authenticator] = []
    if client_ca_file:
        authenticators.append(X509Authenticator.from_file(client_ca_file))
    if webhook_authentication:
        if api_client is None:
            raise AuthConfigError("no client provided, cannot use webhook authentication "
                                  "(authentication.webhook.enabled needs --kubeconfig)")
        authenticators.append(TokenWebhookAuthenticator(ApiTokenReviewer(api_client),
                                                        token_cache_ttl))
    authenticator = DelegatingAuthenticator(authenticators, anonymous)

    authorizer: Authorizer
    if authorization_mode == MODE_ALWAYS_ALLOW:
        authorizer = AlwaysAllowAuthorizer()
    elif authorization_mode == MODE_WEBHOOK:
        if api_client is None:
            raise AuthConfigError("no client provided, cannot use webhook authorization "
                                  "(authorization.mode Webhook needs --kubeconfig)")
        authorizer = WebhookAuthorizer(ApiSubjectAccessReviewer(api_client), authorized_ttl,
                                       unauthorized_ttl)
    elif not authorization_mode:
        raise AuthConfigError("no authorization mode specified (authorization.mode)")
    else:
        raise AuthConfigError(f"unknown authorization mode {authorization_mode} "
                              f"(authorization.mode)")
    return KubeletAuth(authenticator, authorizer, node_name, fine_grained)


__all__ = [
    "ANONYMOUS",
    "AlwaysAllowAuthorizer",
    "Attributes",
    "AuthConfigError",
    "AuthRequest",
    "AuthenticationError",
    "Authenticator",
    "AuthorizationError",
    "Authorizer",
    "Decision",
    "DelegatingAuthenticator",
    "ExpiringCache",
    "KubeletAuth",
    "SubjectAccessReviewResult",
    "TokenReviewResult",
    "TokenWebhookAuthenticator",
    "WebhookAuthorizer",
    "X509Authenticator",
    "build_auth",
    "certificate_identifier",
    "request_attributes",
]
