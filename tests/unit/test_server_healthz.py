"""``/healthz`` answers like every Kubernetes component's health endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from pykubelet.server.healthz import HealthChecker, healthz_routes


@dataclass
class SwitchableCheck:
    name: str
    failure: str | None = None

    def check(self) -> str | None:
        return self.failure


class ExplodingCheck:
    name = "plugins"

    def check(self) -> str | None:
        raise RuntimeError("registry closed")


async def serve(checks: Sequence[HealthChecker]) -> TestClient:
    app = web.Application()
    app.add_routes(healthz_routes(checks))
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
def syncloop() -> SwitchableCheck:
    return SwitchableCheck("syncloop")


@pytest.fixture
async def client(syncloop: SwitchableCheck) -> AsyncIterator[TestClient]:
    test_client = await serve([syncloop])
    yield test_client
    await test_client.close()


async def test_healthy_node_answers_ok(client: TestClient) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    assert await response.text() == "ok"
    assert response.headers["Content-Type"].startswith("text/plain")
    assert (await (await client.get("/healthz/ping")).text()) == "ok"


async def test_verbose_lists_every_check(client: TestClient) -> None:
    response = await client.get("/healthz?verbose")
    assert response.status == 200
    assert await response.text() == "[+]ping ok\n[+]syncloop ok\nhealthz check passed\n"


async def test_failing_check_fails_the_aggregate_without_leaking_details(
        client: TestClient, syncloop: SwitchableCheck) -> None:
    syncloop.failure = "sync loop took longer than expected"
    response = await client.get("/healthz")
    assert response.status == 500
    assert await response.text() == (
        "[+]ping ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n")

    single = await client.get("/healthz/syncloop")
    assert single.status == 500
    assert "sync loop took longer than expected" in await single.text()
    assert (await client.get("/healthz/ping")).status == 200

    syncloop.failure = None
    assert (await client.get("/healthz")).status == 200


async def test_excluded_check_does_not_fail_the_aggregate(
        client: TestClient, syncloop: SwitchableCheck) -> None:
    syncloop.failure = "stuck"
    response = await client.get("/healthz?exclude=syncloop&verbose")
    assert response.status == 200
    assert "[+]syncloop excluded: ok" in await response.text()


async def test_a_crashing_check_counts_as_failed() -> None:
    test_client = await serve([ExplodingCheck()])
    try:
        assert (await test_client.get("/healthz")).status == 500
        single = await test_client.get("/healthz/plugins")
        assert "registry closed" in await single.text()
    finally:
        await test_client.close()
