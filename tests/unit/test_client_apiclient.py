"""The three API clients against a local HTTP server: limits, timeouts, errors naming the server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio.client import CoreV1Api, VersionApi

from pykubelet.client import ServerUnreachableError, check_server, heartbeat_timeout, new_clients
from pykubelet.client.apiclient import resource_of
from pykubelet.client.kubeconfig import load_rest_config
from pykubelet.config.defaults import default_configuration
from pykubelet.config.units import Duration
from pykubelet.metrics import API_CLIENT_REQUESTS
from tests.unit.loopback import closed_port, serve

VERSION = {"major": "1", "minor": "20", "gitVersion": "v1.20.2", "gitCommit": "x",
           "gitTreeState": "clean", "buildDate": "2021-01-01T00:00:00Z", "goVersion": "go1.19",
           "compiler": "gc", "platform": "linux/amd64"}


def write_kubeconfig(tmp_path: Path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    return str(path)


def app(seen: list[web.Request], held: asyncio.Event | None = None) -> web.Application:
    """``held``: the server answers only once it is set."""

    async def version(request: web.Request) -> web.Response:
        seen.append(request)
        if held is not None:
            await held.wait()
        return web.json_response(VERSION)

    application = web.Application()
    application.router.add_get("/version/", version)
    application.router.add_get("/version", version)
    return application


async def test_main_client_is_throttled_heartbeat_is_not(tmp_path: Path) -> None:
    seen: list[web.Request] = []
    async with serve(app(seen)) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        config = default_configuration()
        config.kube_api_qps, config.kube_api_burst = 10, 2
        clients = new_clients(rest, config)
        try:
            started = time.monotonic()
            await asyncio.gather(*(VersionApi(clients.kube).get_code() for _ in range(6)))
            throttled = time.monotonic() - started
            started = time.monotonic()
            await asyncio.gather(*(VersionApi(clients.heartbeat).get_code() for _ in range(6)))
            unthrottled = time.monotonic() - started
        finally:
            await clients.close()
    # Two at once, four more at 10 a second.
    assert throttled >= 0.35
    assert unthrottled < 0.3
    assert seen[0].headers["Authorization"] == "Bearer t0ken"
    assert seen[0].headers["User-Agent"].startswith("pykubelet/v1.")


async def test_heartbeat_requests_time_out(tmp_path: Path) -> None:
    answer = asyncio.Event()
    async with serve(app([], held=answer)) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        config = default_configuration()
        config.node_status_update_frequency = Duration.of(milliseconds=300)
        assert heartbeat_timeout(config) == pytest.approx(0.3)
        clients = new_clients(rest, config)
        try:
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await VersionApi(clients.heartbeat).get_code()
            # The server never answers: only the heartbeat client's own timeout ends the wait.
            assert time.monotonic() - started < 5
        finally:
            answer.set()
            await clients.close()


async def test_unreachable_server_is_named(tmp_path: Path) -> None:
    port = closed_port()
    path = write_kubeconfig(tmp_path, port)
    rest = await load_rest_config(path)
    clients = new_clients(rest, default_configuration())
    try:
        with pytest.raises(ServerUnreachableError) as caught:
            await check_server(clients.kube)
    finally:
        await clients.close()
    message = str(caught.value)
    assert f"http://127.0.0.1:{port}" in message
    assert path in message


async def test_requests_are_counted_and_pools_can_be_replaced(tmp_path: Path) -> None:
    seen: list[web.Request] = []
    async with serve(app(seen)) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        counter = API_CLIENT_REQUESTS.labels(client="heartbeat", resource="version",
                                             method="GET", code="200")
        before = counter._value.get()
        try:
            assert await check_server(clients.heartbeat) == "v1.20.2"
            clients.close_all_connections()
            assert await check_server(clients.heartbeat) == "v1.20.2"
        finally:
            await clients.close()
        assert counter._value.get() == before + 2


async def test_api_errors_surface_with_their_status(tmp_path: Path) -> None:
    async with serve(web.Application()) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            with pytest.raises(Exception) as caught:
                await CoreV1Api(clients.kube).read_node("n1")
        finally:
            await clients.close()
    assert getattr(caught.value, "status", None) == 404


@pytest.mark.parametrize(("path", "resource"), [
    ("/api/v1/nodes/n1/status", "nodes/status"),
    ("/api/v1/nodes", "nodes"),
    ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "leases"),
    ("/api/v1/namespaces/default/pods/p/status", "pods/status"),
    ("/api/v1/namespaces/default", "namespaces"),
    ("/version", "version"),
])
def test_resource_of(path: str, resource: str) -> None:
    assert resource_of(path) == resource
