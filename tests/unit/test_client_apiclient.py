"""The three API clients against a local HTTP server: limits, timeouts, errors naming the server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio.client import CoreV1Api, VersionApi

from pykubelet.client import (
    ServerUnreachableError,
    apiclient,
    check_server,
    heartbeat_timeout,
    new_clients,
)
from pykubelet.client.apiclient import resource_of
from pykubelet.client.kubeconfig import load_rest_config
from pykubelet.config.defaults import default_configuration
from pykubelet.config.units import Duration
from pykubelet.metrics import API_CLIENT_REQUESTS
from pykubelet.util.reflector import ApiListWatch, Reflector
from tests.unit.loopback import closed_port, serve
from testsupport.polling import wait_until_async

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


class _SeenPods:
    """A reflector store that records the pods it hears of."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.changed = asyncio.Event()

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        self.changed.set()

    def add(self, obj: dict[str, Any]) -> None:
        self.names.append(obj["metadata"]["name"])
        self.changed.set()

    update = delete = add


class PodWatchServer:
    """Lists no pods; every open watch streams an ADDED event for each pod ``create``d."""

    def __init__(self) -> None:
        self.watches: list[web.Request] = []
        self._subscribers: list[asyncio.Queue[str | None]] = []

    def create(self, name: str) -> None:
        for queue in self._subscribers:
            queue.put_nowait(name)

    def close(self) -> None:
        for queue in self._subscribers:
            queue.put_nowait(None)

    def app(self) -> web.Application:
        application = web.Application()
        application.router.add_get("/api/v1/pods", self._pods)
        return application

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch", "").lower() != "true":
            return web.json_response({"kind": "PodList", "items": [],
                                      "metadata": {"resourceVersion": "1"}})
        self.watches.append(request)
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._subscribers.append(queue)
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            while (name := await queue.get()) is not None:
                event = {"type": "ADDED",
                         "object": {"metadata": {"name": name, "resourceVersion": "2"}}}
                await response.write(json.dumps(event).encode() + b"\n")
        self._subscribers.remove(queue)
        return response


async def test_a_watch_on_a_closed_pool_resumes_on_a_new_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After repeated heartbeat failures every connection is dropped; the pod watch of the
    main client must hear of new pods again, not sit silent on the closed pool until its
    read timeout (minutes)."""
    monkeypatch.setattr(apiclient, "OLD_POOL_GRACE_SECONDS", 0.0)
    server = PodWatchServer()
    store = _SeenPods()
    async with serve(server.app()) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        pods = CoreV1Api(clients.kube).list_pod_for_all_namespaces
        reflector = Reflector("pods", ApiListWatch(pods), store, backoff_initial=0.01,
                              rand=lambda: 0.0)
        task = asyncio.create_task(reflector.run())
        try:
            await wait_until_async(lambda: len(server.watches) == 1, 5, "the first watch")
            server.create("before")
            await wait_until_async(lambda: store.names == ["before"], 5, "the first pod")
            clients.close_all_connections()  # what the lease's repeated failures do
            await wait_until_async(lambda: len(server.watches) == 2, 5,
                                   "a new watch once the old pool was closed")
            server.create("after")
            await wait_until_async(lambda: store.names == ["before", "after"], 5,
                                   "the pod created after the pools were swapped")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            server.close()
            await clients.close()


def write_kubeconfig_for(tmp_path: Path, server: str) -> str:
    path = Path(write_kubeconfig(tmp_path, 1))
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_requests_do_not_read_the_environment_or_netrc_each_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aiohttp.client

    reads: list[str] = []
    monkeypatch.setattr(aiohttp.client, "netrc_from_env", lambda: reads.append("netrc"))

    def env_proxy(url: Any) -> Any:
        reads.append("proxy")
        raise LookupError("none")
    monkeypatch.setattr(aiohttp.client, "get_env_proxy_for_url", env_proxy)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text("machine 127.0.0.1 login u password p\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    seen: list[web.Request] = []
    async with serve(app(seen)) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            for _ in range(3):
                assert await check_server(clients.kube) == "v1.20.2"
            clients.close_all_connections()
            assert await check_server(clients.kube) == "v1.20.2"
        finally:
            await clients.close()
    assert reads == []
    # The kubeconfig's credentials, never the netrc's.
    assert {r.headers["Authorization"] for r in seen} == {"Bearer t0ken"}


async def test_a_proxy_named_by_the_environment_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[web.Request] = []
    async with serve(app(seen)) as port:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("http_proxy", raising=False)
        rest = await load_rest_config(write_kubeconfig_for(tmp_path, "http://api.invalid:6443"))
        clients = new_clients(rest, default_configuration())
        try:
            assert await check_server(clients.kube) == "v1.20.2"
            clients.close_all_connections()
            assert await check_server(clients.kube) == "v1.20.2"
        finally:
            await clients.close()
    # The proxy was asked for the API server's URL.
    assert [r.url.host for r in seen] == ["api.invalid", "api.invalid"]


async def test_no_proxy_keeps_the_api_server_direct(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[web.Request] = []
    async with serve(app(seen)) as port:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("http_proxy", raising=False)
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            assert await check_server(clients.kube) == "v1.20.2"
        finally:
            await clients.close()
    assert len(seen) == 1


async def test_answers_are_the_generated_clients_models(tmp_path: Path) -> None:
    from kubernetes_asyncio.client import V1Node

    from pykubelet.api.modelcodec import generated_decode

    node = {"metadata": {"name": "n1", "resourceVersion": "9",
                         "creationTimestamp": "2026-11-29T09:55:30Z"},
            "status": {"capacity": {"cpu": "2"}, "conditions": [
                {"type": "Ready", "status": "True",
                 "lastHeartbeatTime": "2026-11-29T09:55:30Z"}]}}

    async def read_node(request: web.Request) -> web.Response:
        return web.json_response(node)

    application = web.Application()
    application.router.add_get("/api/v1/nodes/n1", read_node)
    async with serve(application) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            got = await CoreV1Api(clients.kube).read_node("n1")
        finally:
            await clients.close()
    assert isinstance(got, V1Node)
    assert got == generated_decode(node, "V1Node")
    assert got.status.conditions[0].last_heartbeat_time == generated_decode(
        node, "V1Node").status.conditions[0].last_heartbeat_time
