"""The CRI v1 ``RuntimeService`` client: sandboxes, containers, exec and stats.

The kubelet drives the container runtime only through these calls, so this
module owns the rules every call must follow, as the Go kubelet's remote
runtime client does: a per-call deadline derived from
``runtimeRequestTimeout`` (with the documented exceptions for sandbox start,
container stop and exec), a check that answers carry the fields the CRI
requires, one log line per call at ``--v=10`` and an error log per failure,
and the translation of gRPC failures into ``CRIError`` values that name the
method. Results are the generated protobuf messages, not copies of them.

It also owns the endpoint: parsing ``unix:///path`` and failing fast, with a
message naming the socket, when the runtime is not there at all.

Calls that make something in the runtime (``RUN_TO_END``) are not cut short
when the caller is cancelled (a pod deleted while it starts cancels its sync):
the call runs to its end and the cancellation takes effect after it. Cut
short, containerd can keep the task of a container whose ``StartContainer``
was cancelled while the task was being made, report the container exited
(code 128) and refuse every later removal with "cannot delete running task",
so the pod's sandbox and container stay for good.
"""

from __future__ import annotations

import asyncio
import math
import os
import stat
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio
from cri_api.v1 import api_pb2, api_pb2_grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from pykubelet.cri.errors import (
    CRIError,
    ExecTimeoutError,
    InvalidResponseError,
    RuntimeUnavailableError,
    UnsupportedAPIError,
    from_rpc_error,
)
from pykubelet.metrics import record_runtime_operation
from pykubelet.util import klog

DEFAULT_REQUEST_TIMEOUT = 120.0
"""``runtimeRequestTimeout``'s default (2m), in seconds."""

# The CRI lets runtimes answer with up to 16 MiB (exec output, big listings);
# gRPC's own default of 4 MiB would reject those answers.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

# Reconnect quickly after the runtime restarts: gRPC's default backoff grows
# to two minutes, during which every call would fail as unavailable.
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    # Each channel owns its connections: a closed channel's successor dials the
    # socket again instead of reusing a connection another channel still holds.
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 3000),
]

_UNIX_SCHEME = "unix://"

# The calls that make runtime objects: once sent, each runs to its end (see above).
RUN_TO_END = frozenset({"RunPodSandbox", "CreateContainer", "StartContainer"})

T = TypeVar("T")


async def run_to_end(call: Awaitable[T]) -> T:
    """Await ``call``; a cancellation that comes meanwhile is raised once it has ended."""
    task = asyncio.ensure_future(call)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # the answer no longer matters: mark it read
        raise asyncio.CancelledError
    return task.result()

# The version the kubelet announces in VersionRequest (the Go kubelet's
# kubeRuntimeAPIVersion); runtimes answer with their own CRI version.
KUBE_RUNTIME_API_VERSION = "0.1.0"

# An identical failure for the same object is logged once per this period:
# PLEG and the status manager ask about a broken container every second.
_IDENTICAL_ERROR_LOG_PERIOD = 60.0
# ErrorLogThrottle sweeps out expired records once it holds this many (or twice what the
# last sweep kept).
_THROTTLE_SWEEP_SIZE = 256


def parse_endpoint(endpoint: str) -> str:
    """The socket path of a CRI endpoint given as ``unix:///path`` or ``/path``.

    Only unix sockets are supported, as by the Go kubelet on Linux.
    """
    if endpoint.startswith(_UNIX_SCHEME):
        path = endpoint[len(_UNIX_SCHEME):]
    elif "://" in endpoint:
        scheme = endpoint.split("://", 1)[0]
        raise ValueError(f"container runtime endpoint {endpoint!r}: protocol {scheme!r} "
                         f"is not supported, only unix sockets (unix:///path) are")
    else:
        path = endpoint
    if not path.startswith("/"):
        raise ValueError(f"container runtime endpoint {endpoint!r}: expected an absolute "
                         f"socket path such as unix:///run/containerd/containerd.sock")
    return path


def endpoint_url(endpoint: str) -> str:
    """The canonical ``unix:///path`` spelling of an endpoint."""
    return _UNIX_SCHEME + parse_endpoint(endpoint)


def check_socket(endpoint: str) -> None:
    """Raise ``RuntimeUnavailableError`` at once when no socket file is at the endpoint.

    gRPC would otherwise keep retrying the missing path until the deadline.
    """
    url = endpoint_url(endpoint)
    path = parse_endpoint(endpoint)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise RuntimeUnavailableError(url, f"socket file {path} does not exist") from None
    except OSError as err:
        raise RuntimeUnavailableError(url, f"cannot stat socket file {path}: {err}") from err
    if not stat.S_ISSOCK(mode):
        raise RuntimeUnavailableError(url, f"{path} exists but is not a unix socket")


class OneLine:
    """Renders a protobuf message on one line, only if a log line is actually written."""

    __slots__ = ("message",)

    def __init__(self, message: Message | None) -> None:
        self.message = message

    def __str__(self) -> str:
        if self.message is None:
            return "nil"
        return text_format.MessageToString(self.message, as_one_line=True)


class ErrorLogThrottle:
    """Remembers the last error logged per object so repeats are logged once a minute.

    A container that is gone is never cleared (no stop or remove comes for it), so
    records older than the period, which hold nothing back any more, are dropped
    whenever the table has doubled since the last sweep."""

    def __init__(self, period: float = _IDENTICAL_ERROR_LOG_PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._period = period
        self._clock = clock
        self._last: dict[str, tuple[str, float]] = {}
        self._sweep_at = _THROTTLE_SWEEP_SIZE

    def should_log(self, message: str, object_id: str) -> bool:
        now = self._clock()
        previous = self._last.get(object_id)
        if previous is not None and previous[0] == message and now - previous[1] < self._period:
            return False
        self._last[object_id] = (message, now)
        if len(self._last) >= self._sweep_at:
            self._last = {key: record for key, record in self._last.items()
                          if now - record[1] < self._period}
            self._sweep_at = max(_THROTTLE_SWEEP_SIZE, 2 * len(self._last))
        return True

    def size(self) -> int:
        return len(self._last)

    def clear(self, object_id: str) -> None:
        self._last.pop(object_id, None)


class GrpcConnection:
    """One gRPC channel to the runtime socket and the error/deadline plumbing of a call.

    Shared by the runtime and image clients, which talk to the same endpoint.
    """

    _log_prefix = "[RemoteService]"
    _service_noun = "runtime service"

    def __init__(self, endpoint: str, request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        self.endpoint = endpoint_url(endpoint)
        self.socket_path = parse_endpoint(endpoint)
        self.request_timeout = request_timeout
        self._channel: grpc.aio.Channel | None = None

    def _open_channel(self) -> grpc.aio.Channel:
        # Created lazily because a grpc.aio channel belongs to the running loop.
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.endpoint, options=_CHANNEL_OPTIONS)
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    async def _invoke(self, stub: Any, method: str, request: Message,
                      timeout: float | None) -> Any:
        """Call ``method`` with ``timeout`` seconds (None: no deadline); raise ``CRIError``.

        Every call is counted in the ``kubelet_runtime_operations_*`` metrics.
        """
        started = time.monotonic()
        failed = True
        try:
            call = getattr(stub, method)(request, timeout=timeout)
            response = await (run_to_end(call) if method in RUN_TO_END else call)
            failed = False
            return response
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(method, err, self.endpoint) from err
        finally:
            record_runtime_operation(method, started, failed,
                                     getattr(request, "runtime_handler", ""))

    async def _call(self, method: str, request: Message, *, timeout: float | None,
                    names: Mapping[str, Any] | None = None,
                    call_log: Mapping[str, Any] | None = None,
                    failure_log: Mapping[str, Any] | None = None,
                    invalid: Callable[[Any], str | None] | None = None,
                    answer: Callable[[Any], Mapping[str, Any]] | None = None,
                    log_failure_if: Callable[[CRIError], bool] | None = None,
                    translate: Callable[[CRIError], CRIError] | None = None) -> Any:
        """One CRI call by the rules every call follows; returns the runtime's answer.

        ``names`` (the objects the call is about) go on each of its log lines:
        the call at ``--v=10`` (``call_log`` instead, when given; otherwise
        ``names`` and the ``timeout``), the error line of a failure
        (``failure_log`` instead, when given; only when ``log_failure_if``
        allows it) and the answer at ``--v=10`` with what ``answer`` picks
        from it. ``timeout`` is the deadline in seconds (None: none).

        A failed RPC raises its ``CRIError``, or what ``translate`` makes of
        it; an answer of which ``invalid`` says what is wrong raises
        ``InvalidResponseError`` with that text.
        """
        names = names or {}
        self._log_call(method, **(call_log if call_log is not None
                                  else {**names, "timeout": timeout}))

        def fail(err: CRIError) -> None:
            if log_failure_if is None or log_failure_if(err):
                self._log_failure(err, method,
                                  **(failure_log if failure_log is not None else names))

        try:
            response = await self._invoke(self._stub(), method, request, timeout)
        except CRIError as err:
            fail(err)
            translated = err if translate is None else translate(err)
            if translated is err:
                raise
            raise translated from err
        problem = None if invalid is None else invalid(response)
        if problem is not None:
            rejected = InvalidResponseError(method, problem)
            fail(rejected)
            raise rejected
        self._log_response(method, **names, **({} if answer is None else answer(response)))
        return response

    async def _list(self, method: str, request: Message, field: str,
                    filter: Message | None) -> list[Any]:
        """A List* call with the request timeout; returns the repeated ``field`` of the answer."""
        response = await self._call(method, request, timeout=self.request_timeout,
                                    names={"filter": OneLine(filter)},
                                    answer=lambda r: {"items": len(getattr(r, field))})
        return list(getattr(response, field))

    def _stub(self) -> Any:
        """The service's generated stub on the open channel (each service has its own)."""
        raise NotImplementedError

    def _log_call(self, method: str, **pairs: Any) -> None:
        klog.v(10).info(f"{self._log_prefix} {method}", **pairs)

    def _log_response(self, method: str, **pairs: Any) -> None:
        klog.v(10).info(f"{self._log_prefix} {method} Response", **pairs)

    def _log_failure(self, err: BaseException, method: str, **pairs: Any) -> None:
        klog.error(f"{method} from {self._service_noun} failed", err, **pairs)


@dataclass(frozen=True)
class ExecSyncResult:
    """What a command run with ``exec_sync`` printed and how it exited."""

    stdout: bytes
    stderr: bytes
    exit_code: int


class RemoteRuntimeService(GrpcConnection):
    """An asyncio client of the CRI v1 ``RuntimeService`` on a unix socket."""

    _log_prefix = "[RemoteRuntimeService]"
    _service_noun = "runtime service"

    def __init__(self, endpoint: str, request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        super().__init__(endpoint, request_timeout)
        self._error_throttle = ErrorLogThrottle()
        self._stub_instance: Any = None

    def _stub(self) -> Any:
        if self._stub_instance is None or self._channel is None:
            self._stub_instance = api_pb2_grpc.RuntimeServiceStub(self._open_channel())
        return self._stub_instance

    async def connect(self) -> api_pb2.VersionResponse:
        """Check the socket, then ask for the CRI v1 version; fails with one clear error."""
        klog.v(3).info("Connecting to runtime service", endpoint=self.endpoint)
        check_socket(self.endpoint)
        try:
            response = await self.version()
        except RuntimeUnavailableError:
            raise
        except CRIError as err:
            if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RuntimeUnavailableError(
                    self.endpoint,
                    f"no answer to the CRI Version call within {self.request_timeout:g}s",
                ) from err
            if err.code == grpc.StatusCode.UNIMPLEMENTED and not isinstance(
                    err, UnsupportedAPIError):
                raise UnsupportedAPIError(self.endpoint, err.details) from err
            raise
        klog.v(2).info("Validated CRI v1 runtime API", runtimeName=response.runtime_name,
                       runtimeVersion=response.runtime_version,
                       runtimeApiVersion=response.runtime_api_version)
        return response

    async def version(self) -> api_pb2.VersionResponse:
        response: api_pb2.VersionResponse = await self._call(
            "Version", api_pb2.VersionRequest(version=KUBE_RUNTIME_API_VERSION),
            timeout=self.request_timeout, invalid=_version_problem,
            answer=lambda r: {"version": OneLine(r)})
        return response

    async def status(self, verbose: bool = False) -> api_pb2.StatusResponse:
        response: api_pb2.StatusResponse = await self._call(
            "Status", api_pb2.StatusRequest(verbose=verbose), timeout=self.request_timeout,
            invalid=lambda r: (None if r.HasField("status") and len(r.status.conditions) >= 2
                               else "RuntimeReady or NetworkReady condition are not set"),
            answer=lambda r: {"status": OneLine(r.status)})
        return response

    async def runtime_config(self) -> api_pb2.RuntimeConfigResponse:
        """The runtime's Linux settings (its cgroup driver); Unimplemented on containerd < 1.7."""
        response: api_pb2.RuntimeConfigResponse = await self._call(
            "RuntimeConfig", api_pb2.RuntimeConfigRequest(), timeout=self.request_timeout,
            answer=lambda r: {"config": OneLine(r)})
        return response

    # Sandboxes

    async def run_pod_sandbox(self, config: api_pb2.PodSandboxConfig,
                              runtime_handler: str = "") -> str:
        # Starting a sandbox includes network setup, so it gets twice the
        # normal deadline, as in the Go kubelet (4m by default).
        timeout = self.request_timeout * 2
        response: api_pb2.RunPodSandboxResponse = await self._call(
            "RunPodSandbox",
            api_pb2.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler),
            timeout=timeout,
            call_log={"config": OneLine(config), "runtimeHandler": runtime_handler,
                      "timeout": timeout},
            invalid=lambda r: (None if r.pod_sandbox_id else
                               f"PodSandboxId is not set for sandbox {OneLine(config.metadata)}"),
            answer=lambda r: {"podSandboxID": r.pod_sandbox_id})
        return response.pod_sandbox_id

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        await self._simple_call("StopPodSandbox",
                                api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id),
                                podSandboxID=sandbox_id)

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        await self._simple_call("RemovePodSandbox",
                                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id),
                                podSandboxID=sandbox_id)

    async def pod_sandbox_status(self, sandbox_id: str,
                                 verbose: bool = False) -> api_pb2.PodSandboxStatusResponse:
        response: api_pb2.PodSandboxStatusResponse = await self._call(
            "PodSandboxStatus",
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=verbose),
            timeout=self.request_timeout, names={"podSandboxID": sandbox_id},
            invalid=lambda r: _sandbox_status_problem(r.status) if r.HasField("status") else None,
            # Upstream stays silent about failed calls here: callers ask about
            # sandboxes that may be gone. Answers it cannot use are logged.
            log_failure_if=lambda err: isinstance(err, InvalidResponseError),
            answer=lambda r: {"status": OneLine(r.status)})
        return response

    async def list_pod_sandboxes(
            self, filter: api_pb2.PodSandboxFilter | None = None) -> list[api_pb2.PodSandbox]:
        return await self._list("ListPodSandbox", api_pb2.ListPodSandboxRequest(filter=filter),
                                "items", filter)

    # Containers

    async def create_container(self, sandbox_id: str, config: api_pb2.ContainerConfig,
                               sandbox_config: api_pb2.PodSandboxConfig) -> str:
        request = api_pb2.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config,
                                                 sandbox_config=sandbox_config)
        response: api_pb2.CreateContainerResponse = await self._call(
            "CreateContainer", request, timeout=self.request_timeout,
            names={"podSandboxID": sandbox_id},
            invalid=lambda r: (None if r.container_id else
                               f"ContainerId is not set for container {OneLine(config.metadata)}"),
            answer=lambda r: {"containerID": r.container_id})
        return response.container_id

    async def start_container(self, container_id: str) -> None:
        await self._simple_call("StartContainer",
                                api_pb2.StartContainerRequest(container_id=container_id),
                                containerID=container_id)

    async def stop_container(self, container_id: str, timeout_seconds: int) -> None:
        # The runtime waits up to the grace period before SIGKILL, so the
        # deadline must cover it plus the usual time for the call itself.
        self._error_throttle.clear(container_id)
        await self._simple_call(
            "StopContainer",
            api_pb2.StopContainerRequest(container_id=container_id, timeout=timeout_seconds),
            deadline=self.request_timeout + max(timeout_seconds, 0),
            containerID=container_id, gracePeriod=timeout_seconds)

    async def remove_container(self, container_id: str) -> None:
        self._error_throttle.clear(container_id)
        await self._simple_call("RemoveContainer",
                                api_pb2.RemoveContainerRequest(container_id=container_id),
                                containerID=container_id)

    async def list_containers(
            self, filter: api_pb2.ContainerFilter | None = None) -> list[api_pb2.Container]:
        return await self._list("ListContainers", api_pb2.ListContainersRequest(filter=filter),
                                "containers", filter)

    async def container_status(self, container_id: str,
                               verbose: bool = False) -> api_pb2.ContainerStatusResponse:
        response: api_pb2.ContainerStatusResponse = await self._call(
            "ContainerStatus",
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=verbose),
            timeout=self.request_timeout, names={"containerID": container_id},
            invalid=lambda r: (_container_status_problem(r.status) if r.HasField("status")
                               else None),
            log_failure_if=lambda err: self._error_throttle.should_log(str(err), container_id),
            answer=lambda r: {"status": OneLine(r.status)})
        self._error_throttle.clear(container_id)
        return response

    async def update_container_resources(self, container_id: str,
                                         linux: api_pb2.LinuxContainerResources) -> None:
        await self._simple_call(
            "UpdateContainerResources",
            api_pb2.UpdateContainerResourcesRequest(container_id=container_id, linux=linux),
            containerID=container_id)

    async def reopen_container_log(self, container_id: str) -> None:
        await self._simple_call("ReopenContainerLog",
                                api_pb2.ReopenContainerLogRequest(container_id=container_id),
                                containerID=container_id)

    # Exec, attach, port-forward

    async def exec_sync(self, container_id: str, cmd: Sequence[str],
                        timeout_seconds: float) -> ExecSyncResult:
        """Run ``cmd`` in the container and wait for it; a non-zero exit is not an error.

        With ``timeout_seconds`` > 0 the runtime kills the command at that
        point and ``ExecTimeoutError`` is raised; 0 means no limit at all.
        """
        # Leave the runtime the usual request time on top of the command's
        # own timeout to kill it and clean up; with no timeout, wait forever.
        deadline = self.request_timeout + timeout_seconds if timeout_seconds > 0 else None
        # Rounded up: a fraction of a second must not become 0, which the
        # runtime reads as "no timeout".
        request = api_pb2.ExecSyncRequest(container_id=container_id, cmd=list(cmd),
                                          timeout=math.ceil(timeout_seconds))

        def timed_out(err: CRIError) -> CRIError:
            if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return ExecTimeoutError(" ".join(cmd), timeout_seconds, err.details)
            return err

        response: api_pb2.ExecSyncResponse = await self._call(
            "ExecSync", request, timeout=deadline, names={"containerID": container_id},
            call_log={"containerID": container_id, "timeout": timeout_seconds},
            failure_log={"containerID": container_id, "cmd": list(cmd)},
            translate=timed_out, answer=lambda r: {"exitCode": r.exit_code})
        return ExecSyncResult(stdout=response.stdout, stderr=response.stderr,
                              exit_code=response.exit_code)

    async def exec(self, request: api_pb2.ExecRequest) -> str:
        """Ask the runtime's streaming server for an exec session; returns its URL."""
        return await self._streaming_url("Exec", request, containerID=request.container_id)

    async def attach(self, request: api_pb2.AttachRequest) -> str:
        return await self._streaming_url("Attach", request, containerID=request.container_id)

    async def port_forward(self, request: api_pb2.PortForwardRequest) -> str:
        return await self._streaming_url("PortForward", request,
                                         podSandboxID=request.pod_sandbox_id)

    # Stats

    async def container_stats(self, container_id: str) -> api_pb2.ContainerStats:
        response: api_pb2.ContainerStatsResponse = await self._call(
            "ContainerStats", api_pb2.ContainerStatsRequest(container_id=container_id),
            timeout=self.request_timeout, names={"containerID": container_id},
            log_failure_if=lambda err: self._error_throttle.should_log(str(err), container_id),
            answer=lambda r: {"stats": OneLine(r.stats)})
        self._error_throttle.clear(container_id)
        return response.stats

    async def list_container_stats(
            self, filter: api_pb2.ContainerStatsFilter | None = None,
    ) -> list[api_pb2.ContainerStats]:
        request = api_pb2.ListContainerStatsRequest(filter=filter)
        return await self._list("ListContainerStats", request, "stats", filter)

    async def list_pod_sandbox_stats(
            self, filter: api_pb2.PodSandboxStatsFilter | None = None,
    ) -> list[api_pb2.PodSandboxStats]:
        request = api_pb2.ListPodSandboxStatsRequest(filter=filter)
        return await self._list("ListPodSandboxStats", request, "stats", filter)

    # Plumbing shared by the calls above

    async def _simple_call(self, method: str, request: Message, deadline: float | None = None,
                           **log_pairs: Any) -> None:
        """A call whose answer is empty, with the request timeout unless ``deadline`` is given."""
        timeout = self.request_timeout if deadline is None else deadline
        await self._call(method, request, timeout=timeout, names=log_pairs,
                         call_log={"timeout": timeout, **log_pairs})

    async def _streaming_url(self, method: str, request: Message, **log_pairs: Any) -> str:
        response = await self._call(
            method, request, timeout=self.request_timeout, names=log_pairs,
            call_log={"timeout": self.request_timeout, **log_pairs},
            invalid=lambda r: None if r.url else "URL is not set")
        url: str = response.url
        return url


def _version_problem(response: api_pb2.VersionResponse) -> str | None:
    missing = [name for name, value in (
        ("Version", response.version),
        ("RuntimeName", response.runtime_name),
        ("RuntimeApiVersion", response.runtime_api_version),
        ("RuntimeVersion", response.runtime_version)) if not value]
    if missing:
        return f"not all fields are set in VersionResponse (missing {', '.join(missing)})"
    return None


def _sandbox_status_problem(status: api_pb2.PodSandboxStatus) -> str | None:
    """What a sandbox status lacks of what the kubelet keys pods on, if anything."""
    if not status.id:
        return "status.Id is not set"
    if not status.HasField("metadata"):
        return "status.Metadata is not set"
    meta = status.metadata
    if not (meta.name and meta.namespace and meta.uid):
        return (f"metadata.Name, metadata.Namespace or metadata.Uid is not in metadata "
                f"{OneLine(meta)}")
    if not status.created_at:
        return "status.CreatedAt is not set"
    return None


def _container_status_problem(status: api_pb2.ContainerStatus) -> str | None:
    """What a container status lacks of what the kubelet builds pod status from, if anything."""
    if not status.id:
        return "status.Id is not set"
    if not status.HasField("metadata"):
        return "status.Metadata is not set"
    if not status.metadata.name:
        return f"metadata.Name is not in metadata {OneLine(status.metadata)}"
    if not status.created_at:
        return "status.CreatedAt is not set"
    if not status.HasField("image") or not status.image.image:
        return "status.Image is not set"
    if not status.image_ref:
        return "status.ImageRef is not set"
    return None


__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "ExecSyncResult",
    "RemoteRuntimeService",
    "check_socket",
    "endpoint_url",
    "parse_endpoint",
]
