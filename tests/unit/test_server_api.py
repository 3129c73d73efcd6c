"""The kubelet API's HTTP contract: status codes and messages clients rely on (fake host)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from prometheus_client.parser import text_string_to_metric_families

from pykubelet.container import ContainerID
from pykubelet.cri.logstream import LogOptions, Writer
from pykubelet.metrics import KUBELET_REGISTRY
from pykubelet.server.auth import (
    AlwaysAllowAuthorizer,
    DelegatingAuthenticator,
    KubeletAuth,
    SubjectAccessReviewResult,
    TokenReviewResult,
    TokenWebhookAuthenticator,
    UserInfo,
    WebhookAuthorizer,
)
from pykubelet.server.server import (
    ContainerLogsError,
    KubeletAPIServer,
    ServerOptions,
    metric_paths,
)
from pykubelet.server.streaming import StreamOptions

POD = V1Pod(metadata=V1ObjectMeta(name="web", namespace="default", uid="uid-1"),
            spec=V1PodSpec(containers=[V1Container(name="app", image="busybox")]))


class Host:
    """A kubelet with one pod whose container printed two lines."""

    def __init__(self) -> None:
        self.log_options: LogOptions | None = None

    def get_pods(self) -> list[V1Pod]:
        return [POD]

    def get_pod_by_name(self, namespace: str, name: str) -> V1Pod | None:
        return POD if (namespace, name) == ("default", "web") else None

    async def get_running_pods(self) -> list[V1Pod]:
        return [POD]

    def container_log_target(self, pod: V1Pod, container_name: str,
                             previous: bool) -> ContainerID:
        if previous:
            raise ContainerLogsError('previous terminated container "app" in pod "web" not '
                                     'found')
        return ContainerID("containerd", "abc")

    async def get_container_logs(self, container_id: ContainerID, options: LogOptions,
                                 stdout: Writer | None, stderr: Writer | None) -> None:
        self.log_options = options
        if stdout is not None:
            await stdout(b"hello\n")
        if stderr is not None:
            await stderr(b"oops\n")

    async def get_exec(self, pod: V1Pod, uid: str, container_name: str, cmd: Sequence[str],
                       options: StreamOptions) -> str:
        raise AssertionError("not reached in these tests")

    get_attach = get_exec  # type: ignore[assignment]

    async def get_port_forward(self, pod: V1Pod, uid: str, ports: Sequence[int]) -> str:
        raise AssertionError("not reached in these tests")

    async def run_in_container(self, pod: V1Pod, uid: str, container_name: str,
                               cmd: Sequence[str]) -> bytes:
        return (" ".join(cmd) + "\n").encode()


class Tokens:
    async def review(self, token: str) -> TokenReviewResult:
        users = {"reader": UserInfo("reader"), "admin": UserInfo("admin")}
        return TokenReviewResult(token in users, users.get(token))


class Reviews:
    async def review(self, attributes: Any) -> SubjectAccessReviewResult:
        # admin may do anything; reader may only read stats.
        name = attributes.user.name
        return SubjectAccessReviewResult(
            allowed=name == "admin" or (name == "reader" and attributes.subresource == "stats"))


async def _client(server: KubeletAPIServer) -> TestClient:
    client = TestClient(TestServer(server.application()))
    await client.start_server()
    return client


def _options(tmp_path: Path, **overrides: Any) -> ServerOptions:
    options = ServerOptions(node_log_dir=str(tmp_path / "var-log"),
                            configz=lambda: {"kubeletconfig": {"port": 10250}},
                            metrics=metric_paths([KUBELET_REGISTRY], [], [], []))
    for key, value in overrides.items():
        setattr(options, key, value)
    return options


@pytest.fixture
async def webhook_client(tmp_path: Path) -> AsyncIterator[TestClient]:
    auth = KubeletAuth(DelegatingAuthenticator([TokenWebhookAuthenticator(Tokens(), 60)],
                                               anonymous=False),
                       WebhookAuthorizer(Reviews(), 300, 30), node_name="node-1")
    client = await _client(KubeletAPIServer(Host(), [], _options(tmp_path), auth=auth))
    yield client
    await client.close()


@pytest.fixture
async def open_client(tmp_path: Path) -> AsyncIterator[TestClient]:
    (tmp_path / "var-log" / "pods").mkdir(parents=True)
    (tmp_path / "var-log" / "syslog").write_text("node log line\n")
    (tmp_path / "secret").write_text("outside\n")
    (tmp_path / "var-log" / "escape").symlink_to(tmp_path / "secret")
    auth = KubeletAuth(DelegatingAuthenticator([], anonymous=True), AlwaysAllowAuthorizer(),
                       node_name="node-1")
    client = await _client(KubeletAPIServer(Host(), [], _options(tmp_path), auth=auth))
    yield client
    await client.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_no_credentials_is_401_unauthorized(webhook_client: TestClient) -> None:
    for path in ("/pods", "/healthz", "/nothing-here"):
        response = await webhook_client.get(path)
        assert (response.status, await response.text()) == (401, "Unauthorized")
    response = await webhook_client.get("/pods", headers=bearer("forged"))
    assert response.status == 401


async def test_forbidden_names_user_verb_and_subresources(webhook_client: TestClient) -> None:
    response = await webhook_client.get("/pods", headers=bearer("reader"))
    assert response.status == 403
    assert await response.text() == ("Forbidden (user=reader, verb=get, resource=nodes, "
                                     "subresource(s)=[pods proxy])\n")
    response = await webhook_client.post("/run/default/web/app?cmd=ls",
                                          headers=bearer("reader"))
    assert await response.text() == ("Forbidden (user=reader, verb=create, resource=nodes, "
                                     "subresource(s)=[proxy])\n")


async def test_allowed_subresource_goes_through(webhook_client: TestClient) -> None:
    response = await webhook_client.get("/stats/summary", headers=bearer("reader"))
    # Allowed; this server has no stats source, which is the handler's own answer.
    assert response.status == 500 and "stats are not available" in await response.text()
    response = await webhook_client.get("/pods", headers=bearer("admin"))
    assert response.status == 200
    assert (await response.json())["items"][0]["metadata"]["name"] == "web"


async def test_configz_has_the_upstream_shape(open_client: TestClient) -> None:
    response = await open_client.get("/configz")
    assert await response.json() == {"kubeletconfig": {"port": 10250}}


@pytest.mark.parametrize(("query", "status", "body"), [
    ("tailLines=x", 400, '{"message": "Unable to decode query."}'),
    ("sinceTime=yesterday", 400, '{"message": "Unable to decode query."}'),
    ("tailLines=-1", 422, '{"message": "Invalid request."}'),
    ("limitBytes=0", 422, '{"message": "Invalid request."}'),
    ("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", 422, '{"message": "Invalid request."}'),
    ("stream=Stdout", 400, 'unable to return the given log stream: "Stdout". Please enable '
                           "PodLogsQuerySplitStreams feature gate in kubelet"),
    ("previous=true", 400, 'previous terminated container "app" in pod "web" not found'),
])
async def test_container_log_query_errors(open_client: TestClient, query: str, status: int,
                                          body: str) -> None:
    response = await open_client.get(f"/containerLogs/default/web/app?{query}")
    assert (response.status, await response.text()) == (status, body)


async def test_container_logs_of_unknown_pod_or_container_are_404(
        open_client: TestClient) -> None:
    response = await open_client.get("/containerLogs/default/nope/app")
    assert (response.status, await response.text()) == (404, 'pod "nope" does not exist')
    response = await open_client.get("/containerLogs/default/web/db")
    assert (response.status, await response.text()) == (
        404, 'container "db" not found in pod "web"')


async def test_container_logs_stream_both_streams_with_the_options(
        open_client: TestClient, tmp_path: Path) -> None:
    response = await open_client.get(
        "/containerLogs/default/web/app?follow=true&tail=10&limitBytes=100&timestamps=1")
    assert response.status == 200
    assert await response.text() == "hello\noops\n"
    assert response.headers["Transfer-Encoding"] == "chunked"


async def test_split_streams_when_the_gate_is_on(tmp_path: Path) -> None:
    host = Host()
    auth = KubeletAuth(DelegatingAuthenticator([], True), AlwaysAllowAuthorizer(), "node-1")
    client = await _client(KubeletAPIServer(
        host, [], _options(tmp_path, split_log_streams=True), auth=auth))
    try:
        response = await client.get("/containerLogs/default/web/app?stream=Stderr")
        assert await response.text() == "oops\n"
        response = await client.get("/containerLogs/default/web/app?stream=Stderr&tailLines=1")
        assert response.status == 422
    finally:
        await client.close()


async def test_log_options_reach_the_runtime(tmp_path: Path) -> None:
    host = Host()
    auth = KubeletAuth(DelegatingAuthenticator([], True), AlwaysAllowAuthorizer(), "node-1")
    client = await _client(KubeletAPIServer(host, [], _options(tmp_path), auth=auth))
    try:
        await client.get("/containerLogs/default/web/app?follow=true&tailLines=10&"
                         "limitBytes=100&timestamps=true&sinceTime=2024-01-01T00:00:00Z")
    finally:
        await client.close()
    assert host.log_options is not None
    assert (host.log_options.follow, host.log_options.tail, host.log_options.limit_bytes,
            host.log_options.timestamps) == (True, 10, 100, True)
    assert host.log_options.since_nanos == 1704067200 * 1_000_000_000


async def test_debugging_handlers_off(tmp_path: Path) -> None:
    auth = KubeletAuth(DelegatingAuthenticator([], True), AlwaysAllowAuthorizer(), "node-1")
    client = await _client(KubeletAPIServer(
        Host(), [], _options(tmp_path, enable_debugging_handlers=False), auth=auth))
    try:
        for path in ("/exec/default/web/app", "/attach/default/web/app",
                     "/portForward/default/web", "/containerLogs/default/web/app",
                     "/runningpods/", "/logs/syslog", "/debug/pprof/profile"):
            response = await client.get(path)
            assert (response.status, await response.text()) == (
                405, "Debug endpoints are disabled.\n"), path
        assert (await client.get("/configz")).status == 404
        assert (await client.get("/pods")).status == 200
    finally:
        await client.close()


async def test_system_logs_are_served_and_traversal_is_refused(open_client: TestClient) -> None:
    response = await open_client.get("/logs/syslog")
    assert (response.status, await response.text()) == (200, "node log line\n")
    listing = await (await open_client.get("/logs/")).text()
    assert '<a href="syslog">syslog</a>' in listing and '<a href="pods/">pods/</a>' in listing
    response = await open_client.get("/logs/pods", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (301, "pods/")
    for path in ("/logs/../secret", "/logs/%2e%2e/secret", "/logs/pods/..%2f..%2fsecret"):
        response = await open_client.get(path)
        assert response.status in (400, 404), path
        assert "outside" not in await response.text()
    response = await open_client.get("/logs/escape")
    assert response.status == 404  # a link pointing out of the log directory


async def test_run_returns_the_output(open_client: TestClient) -> None:
    response = await open_client.post("/run/default/web/app?cmd=echo hi")
    assert (response.status, await response.text()) == (200, "echo hi\n")
    response = await open_client.post("/run/default/gone/app?cmd=ls")
    assert (response.status, await response.text()) == (404, "pod does not exist")


async def test_wrong_method_is_405_with_allow(open_client: TestClient) -> None:
    response = await open_client.post("/pods")
    assert response.status == 405
    assert "GET" in response.headers["Allow"].split(", ")


async def test_requests_are_counted_by_path_bucket(open_client: TestClient) -> None:
    await open_client.get("/pods")
    await open_client.get("/nothing-here")
    text = await (await open_client.get("/metrics")).text()
    samples = {(s.labels.get("path"), s.labels.get("server_type")): s.value
               for family in text_string_to_metric_families(text)
               if family.name == "kubelet_http_requests"
               for s in family.samples}
    assert samples[("pods", "readwrite")] >= 1
    assert samples[("other", "readwrite")] >= 1
