"""The read-only port: ``/pods`` as a v1 PodList, health endpoints, debug paths off, binding."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_from_dict
from pykubelet.container import ContainerState
from pykubelet.server.readonly import ServerBindError, start_http_server
from pykubelet.server.server import KubeletAPIServer, ServerOptions
from pykubelet.status.manager import StatusManager
from tests.unit.test_status_generate import generate, instance, make_pod, runtime


class ManagedPods:
    """The pods the node runs, with the statuses recorded by a real status manager."""

    def __init__(self, pods: list[V1Pod], manager: StatusManager) -> None:
        self.pods = pods
        self.manager = manager

    def get_pods(self) -> list[V1Pod]:
        return [self.manager.pod_with_status(pod) for pod in self.pods]


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    pod = make_pod(restart_policy="Never")
    manager = StatusManager()
    manager.set_pod_status(pod, generate(pod, runtime(instance("app", ContainerState.RUNNING))))
    server = KubeletAPIServer(ManagedPods([pod], manager), checks=[],  # type: ignore[arg-type]
                              options=ServerOptions())
    test_client = TestClient(TestServer(server.application()))
    await test_client.start_server()
    yield test_client
    await test_client.close()


async def test_pods_endpoint_returns_a_pod_list_with_statuses(client: TestClient) -> None:
    response = await client.get("/pods")
    assert response.status == 200
    body = await response.json()
    assert (body["kind"], body["apiVersion"], body["metadata"]) == ("PodList", "v1", {})

    pods = [pod_from_dict(item) for item in body["items"]]
    assert [(p.metadata.namespace, p.metadata.name) for p in pods] == [("default", "web")]
    assert pods[0].spec.restart_policy == "Never"
    assert pods[0].status.phase == "Running"
    assert pods[0].status.container_statuses[0].container_id == "containerd://app-0"
    assert "restartPolicy" in body["items"][0]["spec"]


async def test_read_only_port_serves_health(client: TestClient) -> None:
    response = await client.get("/healthz")
    assert (response.status, await response.text()) == (200, "ok")


@pytest.mark.parametrize("path", ["/exec/default/web/app?command=ls&output=1",
                                  "/containerLogs/default/web/app", "/runningpods/",
                                  "/logs/", "/run/default/web/app", "/portForward/default/web"])
async def test_read_only_port_refuses_debugging_endpoints(client: TestClient, path: str) -> None:
    response = await client.post(path) if path.startswith("/run") else await client.get(path)
    assert response.status == 405
    assert await response.text() == "Debug endpoints are disabled.\n"


async def test_read_only_port_has_no_configz(client: TestClient) -> None:
    response = await client.get("/configz")
    assert response.status == 404


async def test_start_http_server_serves_and_reports_busy_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hi")

    runner = await start_http_server("127.0.0.1", port, [web.get("/", hello)])
    try:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{port}/") as response:
            assert await response.text() == "hi"

        with pytest.raises(ServerBindError, match=f"127.0.0.1:{port}"):
            await start_http_server("127.0.0.1", port, [])
    finally:
        await runner.cleanup()
