"""The CRI v1 gRPC client: how pykubelet talks to the container runtime.

``RemoteRuntimeService`` and ``RemoteImageService`` speak CRI v1 to a
runtime such as containerd over its unix socket, with the Go kubelet's
per-call deadlines and errors that name the failed method. ``logfile`` reads
the container log files the runtime writes. The ``RuntimeService`` and
``ImageService`` Protocols below are the seam for ``kuberuntime``: code
against them, and use fakes of them in unit tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cri_api.v1 import api_pb2

from pykubelet.cri.errors import (
    CRIError,
    ExecTimeoutError,
    InvalidResponseError,
    RuntimeUnavailableError,
    UnsupportedAPIError,
    is_not_found,
)
from pykubelet.cri.image import ImagePullError, RemoteImageService
from pykubelet.cri.logfile import LogLine, parse_log_line, read_log_lines, read_log_tail
from pykubelet.cri.runtime import (
    DEFAULT_REQUEST_TIMEOUT,
    ExecSyncResult,
    RemoteRuntimeService,
    endpoint_url,
    parse_endpoint,
)


class RuntimeService(Protocol):
    """The CRI runtime calls the kubelet makes (implemented by ``RemoteRuntimeService``)."""

    async def connect(self) -> api_pb2.VersionResponse:
        """Reach the runtime and check it speaks CRI v1; one clear error when it does not."""
        ...

    async def close(self) -> None: ...

    async def version(self) -> api_pb2.VersionResponse: ...

    async def status(self, verbose: bool = False) -> api_pb2.StatusResponse: ...

    async def runtime_config(self) -> api_pb2.RuntimeConfigResponse: ...

    async def run_pod_sandbox(self, config: api_pb2.PodSandboxConfig,
                              runtime_handler: str = "") -> str: ...

    async def stop_pod_sandbox(self, sandbox_id: str) -> None: ...

    async def remove_pod_sandbox(self, sandbox_id: str) -> None: ...

    async def pod_sandbox_status(self, sandbox_id: str,
                                 verbose: bool = False) -> api_pb2.PodSandboxStatusResponse: ...

    async def list_pod_sandboxes(
            self, filter: api_pb2.PodSandboxFilter | None = None) -> list[api_pb2.PodSandbox]: ...

    async def create_container(self, sandbox_id: str, config: api_pb2.ContainerConfig,
                               sandbox_config: api_pb2.PodSandboxConfig) -> str: ...

    async def start_container(self, container_id: str) -> None: ...

    async def stop_container(self, container_id: str, timeout_seconds: int) -> None: ...

    async def remove_container(self, container_id: str) -> None: ...

    async def list_containers(
            self, filter: api_pb2.ContainerFilter | None = None) -> list[api_pb2.Container]: ...

    async def container_status(self, container_id: str,
                               verbose: bool = False) -> api_pb2.ContainerStatusResponse: ...

    async def update_container_resources(self, container_id: str,
                                         linux: api_pb2.LinuxContainerResources) -> None: ...

    async def reopen_container_log(self, container_id: str) -> None: ...

    async def exec_sync(self, container_id: str, cmd: Sequence[str],
                        timeout_seconds: float) -> ExecSyncResult: ...

    async def exec(self, request: api_pb2.ExecRequest) -> str: ...

    async def attach(self, request: api_pb2.AttachRequest) -> str: ...

    async def port_forward(self, request: api_pb2.PortForwardRequest) -> str: ...

    async def container_stats(self, container_id: str) -> api_pb2.ContainerStats: ...

    async def list_container_stats(
            self, filter: api_pb2.ContainerStatsFilter | None = None,
    ) -> list[api_pb2.ContainerStats]: ...

    async def list_pod_sandbox_stats(
            self, filter: api_pb2.PodSandboxStatsFilter | None = None,
    ) -> list[api_pb2.PodSandboxStats]: ...


class ImageService(Protocol):
    """The CRI image calls the kubelet makes (implemented by ``RemoteImageService``)."""

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def list_images(
            self, filter: api_pb2.ImageFilter | None = None) -> list[api_pb2.Image]: ...

    async def image_status(self, image: str, verbose: bool = False) -> api_pb2.Image | None: ...

    async def pull_image(self, image: str, auth: api_pb2.AuthConfig | None = None,
                         sandbox_config: api_pb2.PodSandboxConfig | None = None) -> str: ...

    async def remove_image(self, image: str) -> None: ...

    async def image_fs_info(self) -> api_pb2.ImageFsInfoResponse: ...


__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "CRIError",
    "ExecSyncResult",
    "ExecTimeoutError",
    "ImagePullError",
    "ImageService",
    "InvalidResponseError",
    "LogLine",
    "RemoteImageService",
    "RemoteRuntimeService",
    "RuntimeService",
    "RuntimeUnavailableError",
    "UnsupportedAPIError",
    "endpoint_url",
    "is_not_found",
    "parse_endpoint",
    "parse_log_line",
    "read_log_lines",
    "read_log_tail",
]
