"""One registered device plugin, as the kubelet talks to it (upstream ``endpoint.go`` and
``plugin/v1beta1/client.go``).

The kubelet dials the plugin's socket, reads its options, and follows ``ListAndWatch``
for as long as the stream lasts; the allocation calls go over the same channel. An
endpoint whose stream ended is *stopped* and its channel closed (a plugin that never
comes back is not dialed again; one that does registers anew and gets a new
endpoint): its calls fail with upstream's "endpoint ... has been stopped", and once
``ENDPOINT_STOP_GRACE_PERIOD`` has passed its resource is dropped from the node. An
endpoint restored from the checkpoint at start is stopped from the outset, waiting
for its plugin to register again.

A failed call reaches the admit handler and the container start as
``DeviceAllocationError``, in upstream's words (``plugin_call``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.api.proto import deviceplugin_v1beta1_pb2_grpc as pluginapi_grpc

# Upstream endpointStopGracePeriod: how long a stopped plugin's resource stays on the node.
ENDPOINT_STOP_GRACE_PERIOD = 5 * 60.0
# Upstream KubeletPreStartContainerRPCTimeoutInSecs.
PRE_START_CONTAINER_TIMEOUT = 30.0
# Upstream's client dials a registering plugin for at most 10 s.
DIAL_TIMEOUT = 10.0


class EndpointStoppedError(Exception):
    def __init__(self, resource: str) -> None:
        super().__init__(f"endpoint {resource} has been stopped")


class DeviceAllocationError(Exception):
    """A container's devices cannot be allocated (or readied); the message is upstream's."""


def rpc_error_text(err: grpc.aio.AioRpcError) -> str:
    """A gRPC error as Go's client prints it."""
    code = "".join(word.capitalize() for word in err.code().name.split("_"))
    return f"rpc error: code = {code} desc = {err.details()}"


_Answer = TypeVar("_Answer")


async def plugin_call(rpc: str, call: Awaitable[_Answer]) -> _Answer:
    """A plugin's answer, or ``DeviceAllocationError`` in upstream's words for that RPC."""
    try:
        return await call
    except grpc.aio.AioRpcError as err:
        raise DeviceAllocationError(
            f"device plugin {rpc} rpc failed with err: {rpc_error_text(err)}") from err
    except EndpointStoppedError as err:
        raise DeviceAllocationError(f"device plugin {rpc} rpc failed with err: {err}") from err


class Endpoint:
    """A plugin's channel (None for one restored from the checkpoint) and its stop time."""

    def __init__(self, resource: str, socket_path: str | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self._clock = clock
        self.options = pluginapi.DevicePluginOptions()
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self.stop_time: float | None = None if socket_path is not None else clock()
        if socket_path is not None:
            self._channel = grpc.aio.insecure_channel(f"unix://{socket_path}")
            self._stub = pluginapi_grpc.DevicePluginStub(self._channel)

    def __repr__(self) -> str:
        return f"Endpoint({self.resource}, {self.socket_path})"

    async def connect(self) -> None:
        """Dial the plugin and read its options (upstream ``Connect`` and ``PluginConnected``)."""
        assert self._channel is not None and self._stub is not None
        if not os.path.exists(self.socket_path or ""):
            # gRPC would retry a missing socket until the dial timeout; say it at once.
            raise ConnectionError(
                f"failed to dial device plugin: {self.socket_path}: no such socket")
        try:
            await asyncio.wait_for(self._channel.channel_ready(), DIAL_TIMEOUT)
        except TimeoutError as err:
            raise ConnectionError(
                f"failed to dial device plugin: {self.socket_path}: timed out") from err
        try:
            self.options = await self._stub.GetDevicePluginOptions(pluginapi.Empty(),
                                                                   timeout=DIAL_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            raise ConnectionError(
                f"failed to get device plugin options: {err.details()}") from err

    def list_and_watch(self) -> Any:
        """The plugin's device list stream (an async iterator of ``ListAndWatchResponse``)."""
        assert self._stub is not None
        return self._stub.ListAndWatch(pluginapi.Empty())

    def set_stopped(self) -> None:
        if self.stop_time is None:
            self.stop_time = self._clock()

    def is_stopped(self) -> bool:
        return self.stop_time is not None

    def stop_grace_period_expired(self, grace_period: float) -> bool:
        return self.stop_time is not None and self._clock() - self.stop_time > grace_period

    def is_closed(self) -> bool:
        """Whether the channel is gone (nothing dials the plugin any more)."""
        return self._channel is None

    async def close(self) -> None:
        """Stop the endpoint and close its channel; its calls fail from now on."""
        self.set_stopped()
        self._stub = None
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    # -- the calls the manager makes ------------------------------------------------------

    def _live_stub(self) -> Any:
        if self.is_stopped() or self._stub is None:
            raise EndpointStoppedError(self.resource)
        return self._stub

    async def get_preferred_allocation(self, available: Sequence[str],
                                       must_include: Sequence[str],
                                       size: int) -> pluginapi.PreferredAllocationResponse:
        request = pluginapi.PreferredAllocationRequest(container_requests=[
            pluginapi.ContainerPreferredAllocationRequest(
                available_deviceIDs=list(available), must_include_deviceIDs=list(must_include),
                allocation_size=size)])
        response: pluginapi.PreferredAllocationResponse = \
            await self._live_stub().GetPreferredAllocation(request)
        return response

    async def allocate(self, devices: Sequence[str]) -> pluginapi.AllocateResponse:
        request = pluginapi.AllocateRequest(container_requests=[
            pluginapi.ContainerAllocateRequest(devices_ids=list(devices))])
        response: pluginapi.AllocateResponse = await self._live_stub().Allocate(request)
        return response

    async def pre_start_container(self, devices: Sequence[str]) -> None:
        await self._live_stub().PreStartContainer(
            pluginapi.PreStartContainerRequest(devices_ids=list(devices)),
            timeout=PRE_START_CONTAINER_TIMEOUT)


__all__ = ["DIAL_TIMEOUT", "ENDPOINT_STOP_GRACE_PERIOD", "PRE_START_CONTAINER_TIMEOUT",
           "DeviceAllocationError", "Endpoint", "EndpointStoppedError", "plugin_call",
           "rpc_error_text"]
