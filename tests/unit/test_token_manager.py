"""The service-account token manager: cache keys, the 80 % / 24 h refresh rule, failures."""

from __future__ import annotations

import datetime

import pytest
from kubernetes_asyncio.client import AuthenticationV1TokenRequest

from pykubelet.token import TokenKey, TokenManager

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class FakeTokenApi:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.requests: list[tuple[str, str, AuthenticationV1TokenRequest]] = []
        self.fail = False

    async def __call__(self, namespace: str, name: str,
                       body: AuthenticationV1TokenRequest) -> tuple[str, datetime.datetime]:
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        self.requests.append((namespace, name, body))
        lifetime = datetime.timedelta(seconds=body.spec.expiration_seconds)
        return f"token-{len(self.requests)}", self.clock.now + lifetime


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


def key(expiration: int = 3600, audiences: tuple[str, ...] = ("vault",)) -> TokenKey:
    return TokenKey("ns", "sa", audiences, expiration, "pod", "uid-1")


async def test_token_is_cached_and_refreshed_after_80_percent_of_its_lifetime() -> None:
    clock = Clock()
    api = FakeTokenApi(clock)
    manager = TokenManager(api, clock=clock, jitter=lambda: 0.0)
    assert await manager.get_service_account_token(key()) == "token-1"
    namespace, name, body = api.requests[0]
    assert (namespace, name) == ("ns", "sa")
    assert body.spec.audiences == ["vault"] and body.spec.expiration_seconds == 3600
    ref = body.spec.bound_object_ref
    assert (ref.kind, ref.name, ref.uid) == ("Pod", "pod", "uid-1")
    clock.advance(0.8 * 3600 - 1)
    assert await manager.get_service_account_token(key()) == "token-1"
    clock.advance(2)
    assert await manager.get_service_account_token(key()) == "token-2"
    # Another audience is another token.
    assert await manager.get_service_account_token(key(audiences=("other",))) == "token-3"


async def test_long_lived_tokens_are_refreshed_after_24_hours() -> None:
    clock = Clock()
    api = FakeTokenApi(clock)
    manager = TokenManager(api, clock=clock, jitter=lambda: 0.0)
    week = 7 * 24 * 3600
    await manager.get_service_account_token(key(week))
    clock.advance(24 * 3600 - 1)
    assert await manager.get_service_account_token(key(week)) == "token-1"
    clock.advance(2)
    assert await manager.get_service_account_token(key(week)) == "token-2"


async def test_a_failed_refresh_serves_the_valid_cached_token() -> None:
    clock = Clock()
    api = FakeTokenApi(clock)
    manager = TokenManager(api, clock=clock, jitter=lambda: 0.0)
    await manager.get_service_account_token(key())
    api.fail = True
    clock.advance(0.9 * 3600)
    assert await manager.get_service_account_token(key()) == "token-1"
    clock.advance(0.2 * 3600)  # now expired
    with pytest.raises(ConnectionError):
        await manager.get_service_account_token(key())


async def test_pod_tokens_and_expired_tokens_are_dropped() -> None:
    clock = Clock()
    api = FakeTokenApi(clock)
    manager = TokenManager(api, clock=clock, jitter=lambda: 0.0)
    await manager.get_service_account_token(key())
    manager.delete_pod_tokens("uid-1")
    assert await manager.get_service_account_token(key()) == "token-2"
    clock.advance(3601)
    manager.cleanup()
    api.fail = True
    with pytest.raises(ConnectionError):
        await manager.get_service_account_token(key())
