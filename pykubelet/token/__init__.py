"""Service-account tokens for pods, through TokenRequest (upstream ``pkg/kubelet/token``).

A projected ``serviceAccountToken`` source asks for a token of the pod's
service account with an audience and a lifetime, bound to the pod (it dies
with the pod). The token manager caches one token per (service account,
audiences, lifetime, bound pod) and asks the API server for a new one when
the cached one is too old, as upstream: once 80 % of its lifetime has passed,
or after 24 hours, with a few seconds of random jitter so that many pods do
not refresh in the same instant. Expired tokens are dropped by ``cleanup``;
a pod's tokens are dropped with ``delete_pod_tokens``. When a refresh fails
and the cached token is still valid, the cached token is served.
"""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kubernetes_asyncio.client import (
    AuthenticationV1TokenRequest,
    CoreV1Api,
    V1BoundObjectReference,
    V1TokenRequestSpec,
)

from pykubelet.util import klog

MAX_TTL = datetime.timedelta(hours=24)
MAX_JITTER_SECONDS = 10.0
REFRESH_FRACTION = 0.2
DEFAULT_EXPIRATION_SECONDS = 3600
# How often expired tokens are dropped from the cache.
CLEANUP_PERIOD = 60.0


@dataclass(frozen=True)
class TokenKey:
    namespace: str
    service_account: str
    audiences: tuple[str, ...]
    expiration_seconds: int
    pod_name: str
    pod_uid: str


@dataclass
class Token:
    token: str
    expiration: datetime.datetime
    expiration_seconds: int


# (namespace, service account, TokenRequest body) -> (token, expiration).
RequestToken = Callable[[str, str, AuthenticationV1TokenRequest],
                        Awaitable[tuple[str, datetime.datetime]]]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class TokenManager:
    def __init__(self, request: RequestToken,
                 clock: Callable[[], datetime.datetime] = _now,
                 jitter: Callable[[], float] = random.random) -> None:
        self._request = request
        self._clock = clock
        self._jitter = jitter
        self._cache: dict[TokenKey, Token] = {}

    @classmethod
    def for_api(cls, api: CoreV1Api) -> TokenManager:
        async def request(namespace: str, name: str,
                          body: AuthenticationV1TokenRequest) -> tuple[str, datetime.datetime]:
            answer = await api.create_namespaced_service_account_token(name, namespace, body)
            return str(answer.status.token), answer.status.expiration_timestamp
        return cls(request)

    def requires_refresh(self, token: Token) -> bool:
        now = self._clock()
        jitter = datetime.timedelta(seconds=self._jitter() * MAX_JITTER_SECONDS)
        issued = token.expiration - datetime.timedelta(seconds=token.expiration_seconds)
        if now > issued + MAX_TTL - jitter:
            return True
        margin = datetime.timedelta(seconds=token.expiration_seconds * REFRESH_FRACTION)
        return now > token.expiration - margin - jitter

    async def get_service_account_token(self, key: TokenKey) -> str:
        cached = self._cache.get(key)
        if cached is not None and not self.requires_refresh(cached):
            return cached.token
        body = AuthenticationV1TokenRequest(spec=V1TokenRequestSpec(
            audiences=list(key.audiences), expiration_seconds=key.expiration_seconds,
            bound_object_ref=V1BoundObjectReference(api_version="v1", kind="Pod",
                                                    name=key.pod_name, uid=key.pod_uid)))
        try:
            token, expiration = await self._request(key.namespace, key.service_account, body)
        except Exception as err:
            if cached is not None and self._clock() < cached.expiration:
                klog.error("Couldn't update token", err, cacheKey=str(key))
                return cached.token
            raise
        if expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=datetime.UTC)
        self._cache[key] = Token(token, expiration, key.expiration_seconds)
        return token

    def delete_pod_tokens(self, uid: str) -> None:
        for key in [k for k in self._cache if k.pod_uid == uid]:
            del self._cache[key]

    async def run(self, period: float = CLEANUP_PERIOD) -> None:
        while True:
            await asyncio.sleep(period)
            self.cleanup()

    def cleanup(self) -> None:
        now = self._clock()
        for key in [k for k, t in self._cache.items() if now > t.expiration]:
            del self._cache[key]


__all__ = ["DEFAULT_EXPIRATION_SECONDS", "Token", "TokenKey", "TokenManager"]
