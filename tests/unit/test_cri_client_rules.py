"""The CRI client's call rules, checked against a fake runtime on a real unix socket.

The fake is a gRPC server implementing the CRI services the way a test
needs (answer, fail, hang); the client under test is the real one, so what is
checked is what kuberuntime will see: deadlines sent, errors raised, results.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from pykubelet.cri import (
    CRIError,
    ExecTimeoutError,
    ImagePullError,
    InvalidResponseError,
    RemoteImageService,
    RemoteRuntimeService,
    RuntimeUnavailableError,
    UnsupportedAPIError,
    is_not_found,
)
from tests.unit.waiting import until

REQUEST_TIMEOUT = 5.0


class FakeRuntime(api_pb2_grpc.RuntimeServiceServicer):
    """Records the deadline each call arrived with; behaviour is set per test."""

    def __init__(self) -> None:
        self.time_remaining: dict[str, float | None] = {}
        self.version_response = api_pb2.VersionResponse(
            version="0.1.0", runtime_name="fake", runtime_version="1.0",
            runtime_api_version="v1")
        self.sandbox_id = "sandbox-1"
        self.exec_response = api_pb2.ExecSyncResponse(stdout=b"out", stderr=b"err", exit_code=0)
        self.exec_abort: grpc.StatusCode | None = None
        self.exec_hang = False
        self.missing_containers: set[str] = set()
        self.exec_timeouts_sent: list[int] = []
        self.start_release = asyncio.Event()
        # Method -> "finished" or "cancelled", for handlers that wait.
        self.outcome: dict[str, str] = {}

    def _record(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.time_remaining[method] = context.time_remaining()

    async def Version(self, request: Any, context: Any) -> api_pb2.VersionResponse:
        self._record("Version", context)
        return self.version_response

    async def RunPodSandbox(self, request: Any, context: Any) -> api_pb2.RunPodSandboxResponse:
        self._record("RunPodSandbox", context)
        return api_pb2.RunPodSandboxResponse(pod_sandbox_id=self.sandbox_id)

    async def StopContainer(self, request: Any, context: Any) -> api_pb2.StopContainerResponse:
        self._record("StopContainer", context)
        return api_pb2.StopContainerResponse()

    async def ListContainers(self, request: Any, context: Any) -> api_pb2.ListContainersResponse:
        self._record("ListContainers", context)
        return api_pb2.ListContainersResponse(containers=[
            api_pb2.Container(id="c1", pod_sandbox_id=self.sandbox_id),
            api_pb2.Container(id="c2", pod_sandbox_id=self.sandbox_id)])

    async def ContainerStatus(self, request: Any,
                              context: Any) -> api_pb2.ContainerStatusResponse:
        self._record("ContainerStatus", context)
        if request.container_id in self.missing_containers:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"container {request.container_id!r}: not found")
        # Missing image and image_ref: a status the kubelet cannot use.
        return api_pb2.ContainerStatusResponse(status=api_pb2.ContainerStatus(
            id=request.container_id, metadata=api_pb2.ContainerMetadata(name="app"),
            created_at=1))

    async def ExecSync(self, request: Any, context: Any) -> api_pb2.ExecSyncResponse:
        self._record("ExecSync", context)
        self.exec_timeouts_sent.append(request.timeout)
        if self.exec_abort is not None:
            await context.abort(self.exec_abort, "timeout 1s exceeded: context deadline exceeded")
        if self.exec_hang:
            try:
                await asyncio.Event().wait()  # a runtime that never answers
            except asyncio.CancelledError:
                self.outcome["ExecSync"] = "cancelled"
                raise
        return self.exec_response

    async def StartContainer(self, request: Any,
                             context: Any) -> api_pb2.StartContainerResponse:
        self._record("StartContainer", context)
        try:
            await self.start_release.wait()
        except asyncio.CancelledError:
            self.outcome["StartContainer"] = "cancelled"
            raise
        self.outcome["StartContainer"] = "finished"
        return api_pb2.StartContainerResponse()

    async def Exec(self, request: Any, context: Any) -> api_pb2.ExecResponse:
        self._record("Exec", context)
        return api_pb2.ExecResponse(url="")


class FakeImages(api_pb2_grpc.ImageServiceServicer):
    def __init__(self) -> None:
        self.time_remaining: dict[str, float | None] = {}
        self.images = {"busybox:1.35": api_pb2.Image(id="sha256:b", size=1024,
                                                     repo_tags=["busybox:1.35"])}

    async def ImageStatus(self, request: Any, context: Any) -> api_pb2.ImageStatusResponse:
        self.time_remaining["ImageStatus"] = context.time_remaining()
        found = self.images.get(request.image.image)
        return api_pb2.ImageStatusResponse(image=found)

    async def PullImage(self, request: Any, context: Any) -> api_pb2.PullImageResponse:
        self.time_remaining["PullImage"] = context.time_remaining()
        if request.image.image == "broken:1":
            await context.abort(grpc.StatusCode.UNKNOWN,
                                'failed to pull and unpack image "broken:1": not there')
        return api_pb2.PullImageResponse(image_ref="sha256:pulled")

    async def ImageFsInfo(self, request: Any, context: Any) -> api_pb2.ImageFsInfoResponse:
        return api_pb2.ImageFsInfoResponse()


class Fixture:
    def __init__(self, socket_path: Path, runtime: FakeRuntime, images: FakeImages) -> None:
        self.socket_path = socket_path
        self.endpoint = f"unix://{socket_path}"
        self.runtime = runtime
        self.images = images


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[Fixture]:
    runtime, images = FakeRuntime(), FakeImages()
    server = grpc.aio.server()
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(runtime, server)
    api_pb2_grpc.add_ImageServiceServicer_to_server(images, server)
    socket_path = tmp_path / "cri.sock"
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    try:
        yield Fixture(socket_path, runtime, images)
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def runtime_client(fake: Fixture) -> AsyncIterator[RemoteRuntimeService]:
    client = RemoteRuntimeService(fake.endpoint, request_timeout=REQUEST_TIMEOUT)
    await client.connect()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def image_client(fake: Fixture) -> AsyncIterator[RemoteImageService]:
    client = RemoteImageService(str(fake.socket_path), request_timeout=REQUEST_TIMEOUT)
    await client.connect()
    try:
        yield client
    finally:
        await client.close()


# Connecting


async def test_missing_socket_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    socket_path = tmp_path / "containerd.sock"
    client = RemoteRuntimeService(f"unix://{socket_path}", request_timeout=120)
    started = time.monotonic()

    with pytest.raises(RuntimeUnavailableError) as caught:
        await client.connect()

    assert time.monotonic() - started < 2
    assert str(caught.value) == (f"container runtime endpoint unix://{socket_path} is not "
                                 f"reachable: socket file {socket_path} does not exist")
    await client.close()


async def test_socket_without_listener_is_refused_quickly(tmp_path: Path) -> None:
    socket_path = tmp_path / "stale.sock"
    # A socket file left behind by a runtime that died: bound, never listening.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(socket_path))
        client = RemoteRuntimeService(str(socket_path), request_timeout=60)
        started = time.monotonic()

        with pytest.raises(RuntimeUnavailableError) as caught:
            await client.connect()

    assert time.monotonic() - started < 10
    assert f"unix://{socket_path} is not reachable" in str(caught.value)
    assert "refused" in str(caught.value).lower()
    await client.close()


async def test_regular_file_at_endpoint_is_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "containerd.sock"
    path.write_text("")

    with pytest.raises(RuntimeUnavailableError, match="is not a unix socket"):
        await RemoteRuntimeService(str(path)).connect()


async def test_server_without_cri_v1_is_unsupported(tmp_path: Path) -> None:
    server = grpc.aio.server()  # serves nothing: every method is UNIMPLEMENTED
    socket_path = tmp_path / "old.sock"
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    client = RemoteRuntimeService(str(socket_path), request_timeout=REQUEST_TIMEOUT)
    try:
        with pytest.raises(UnsupportedAPIError, match="does not implement the CRI v1"):
            await client.connect()
    finally:
        await client.close()
        await server.stop(grace=None)


async def test_connect_returns_version_and_rejects_incomplete_answers(fake: Fixture) -> None:
    client = RemoteRuntimeService(fake.endpoint, request_timeout=REQUEST_TIMEOUT)
    try:
        version = await client.connect()
        assert (version.runtime_name, version.runtime_api_version) == ("fake", "v1")

        fake.runtime.version_response = api_pb2.VersionResponse(version="0.1.0")
        with pytest.raises(InvalidResponseError, match="missing RuntimeName"):
            await client.version()
    finally:
        await client.close()


# Deadlines


def _between(value: float | None, low: float, high: float) -> bool:
    # gRPC rounds the deadline it sends up a little, so allow some slack on top.
    return value is not None and low <= value <= high + 0.5


async def test_ordinary_calls_use_the_request_timeout(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    containers = await runtime_client.list_containers()

    assert [c.id for c in containers] == ["c1", "c2"]
    assert _between(fake.runtime.time_remaining["ListContainers"], 3, REQUEST_TIMEOUT)


async def test_sandbox_start_gets_twice_the_request_timeout(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    sandbox_id = await runtime_client.run_pod_sandbox(api_pb2.PodSandboxConfig())

    assert sandbox_id == "sandbox-1"
    assert _between(fake.runtime.time_remaining["RunPodSandbox"], REQUEST_TIMEOUT + 3,
                    2 * REQUEST_TIMEOUT)


async def test_stop_container_deadline_covers_the_grace_period(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    await runtime_client.stop_container("c1", timeout_seconds=30)

    assert _between(fake.runtime.time_remaining["StopContainer"], 30 + 3, 30 + REQUEST_TIMEOUT)


async def test_exec_sync_deadline_is_timeout_plus_request_timeout_or_none(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    result = await runtime_client.exec_sync("c1", ["true"], timeout_seconds=10)
    assert _between(fake.runtime.time_remaining["ExecSync"], 10 + 3, 10 + REQUEST_TIMEOUT)
    assert (result.stdout, result.stderr, result.exit_code) == (b"out", b"err", 0)

    await runtime_client.exec_sync("c1", ["true"], timeout_seconds=0)
    assert fake.runtime.time_remaining["ExecSync"] is None


async def test_exec_sync_fractional_timeout_does_not_become_unlimited(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    await runtime_client.exec_sync("c1", ["true"], timeout_seconds=0.5)
    await runtime_client.exec_sync("c1", ["true"], timeout_seconds=0)

    assert fake.runtime.exec_timeouts_sent == [1, 0]


async def test_pull_image_has_no_deadline_but_image_status_has(
        fake: Fixture, image_client: RemoteImageService) -> None:
    assert await image_client.pull_image("busybox:1.35") == "sha256:pulled"
    assert fake.images.time_remaining["PullImage"] is None

    await image_client.image_status("busybox:1.35")
    assert _between(fake.images.time_remaining["ImageStatus"], 3, REQUEST_TIMEOUT)


# Results and errors


async def test_exec_sync_reports_a_nonzero_exit_as_a_result(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    fake.runtime.exec_response = api_pb2.ExecSyncResponse(stderr=b"no", exit_code=7)

    result = await runtime_client.exec_sync("c1", ["false"], timeout_seconds=1)

    assert (result.exit_code, result.stderr) == (7, b"no")


async def test_exec_sync_timeout_from_runtime_is_a_timeout_error(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    fake.runtime.exec_abort = grpc.StatusCode.DEADLINE_EXCEEDED

    with pytest.raises(ExecTimeoutError) as caught:
        await runtime_client.exec_sync("c1", ["sleep", "9"], timeout_seconds=1)

    assert str(caught.value) == "command timed out: 'sleep 9' timed out after 1s"


async def test_exec_sync_runtime_ignoring_the_timeout_hits_the_client_deadline(
        fake: Fixture) -> None:
    fake.runtime.exec_hang = True
    client = RemoteRuntimeService(fake.endpoint, request_timeout=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(ExecTimeoutError):
            await client.exec_sync("c1", ["sleep", "9"], timeout_seconds=0.2)
    finally:
        await client.close()
    assert time.monotonic() - started < 3


async def test_not_found_is_recognisable_and_names_the_method(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    fake.runtime.missing_containers.add("gone")

    with pytest.raises(CRIError) as caught:
        await runtime_client.container_status("gone")

    assert is_not_found(caught.value)
    assert caught.value.method == "ContainerStatus"
    assert "ContainerStatus" in str(caught.value) and "NotFound" in str(caught.value)


async def test_incomplete_container_status_is_rejected(
        runtime_client: RemoteRuntimeService) -> None:
    with pytest.raises(InvalidResponseError, match=r"status\.Image is not set"):
        await runtime_client.container_status("c1")


async def test_streaming_call_without_url_is_an_error(
        runtime_client: RemoteRuntimeService) -> None:
    with pytest.raises(InvalidResponseError, match="URL is not set"):
        await runtime_client.exec(api_pb2.ExecRequest(container_id="c1", cmd=["sh"]))


async def test_image_status_of_absent_image_is_none(image_client: RemoteImageService) -> None:
    present = await image_client.image_status("busybox:1.35")

    assert present is not None and present.id == "sha256:b"
    assert await image_client.image_status("nothere:1") is None


async def test_failed_pull_shows_the_runtime_message(image_client: RemoteImageService) -> None:
    with pytest.raises(ImagePullError) as caught:
        await image_client.pull_image("broken:1")

    assert str(caught.value) == 'failed to pull and unpack image "broken:1": not there'
    assert caught.value.method == "PullImage"


async def test_calls_after_the_runtime_goes_away_are_unavailable(fake: Fixture) -> None:
    client = RemoteRuntimeService(fake.endpoint, request_timeout=REQUEST_TIMEOUT)
    await client.connect()
    fake.socket_path.unlink()
    try:
        await client.close()  # a fresh channel must dial the now missing socket
        with pytest.raises(RuntimeUnavailableError, match="is not reachable"):
            await client.list_containers()
    finally:
        await client.close()


# Cancellation


async def test_a_cancelled_start_runs_to_its_end_before_the_cancellation_is_raised(
        fake: Fixture, runtime_client: RemoteRuntimeService) -> None:
    fake.runtime.exec_hang = True
    start = asyncio.create_task(runtime_client.start_container("c1"))
    probe = asyncio.create_task(runtime_client.exec_sync("c1", ["true"], timeout_seconds=0))
    await until(lambda: {"StartContainer", "ExecSync"} <= set(fake.runtime.time_remaining),
                what="both calls at the runtime")

    start.cancel()
    probe.cancel()
    # The exec is cut short at the runtime (as every call that makes nothing) ...
    await until(lambda: fake.runtime.outcome.get("ExecSync") == "cancelled",
                what="the exec cancelled at the runtime")
    assert not start.done()
    assert "StartContainer" not in fake.runtime.outcome
    # ... the start is not: it ends as the runtime answers, then the caller is cancelled.
    fake.runtime.start_release.set()
    with pytest.raises(asyncio.CancelledError):
        await start
    assert fake.runtime.outcome["StartContainer"] == "finished"
