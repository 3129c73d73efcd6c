"""Registering and deregistering one plugin (upstream ``pluginmanager/operationexecutor``).

Registration, as upstream's operation generator does it:

1. dial the socket (10 s) and ask ``GetInfo`` (1 s); a failure here is only logged
   and retried (the plugin is not told: it could not be asked);
2. the handler of the plugin's type; none (pykubelet has no CSI or DRA handler):
   the plugin is told so with ``NotifyRegistrationStatus(false, why)``;
3. the handler validates the name, endpoint (the socket itself when empty) and
   versions; a refusal is sent to the plugin the same way;
4. the plugin enters the actual state before the handler registers it, so that
   its socket's removal during a slow registration still deregisters it;
5. the handler registers it; a failure is sent to the plugin, and it leaves the
   actual state again so it is retried (upstream leaves it there and never
   retries until the socket is created again);
6. ``NotifyRegistrationStatus(true)``. A plugin that cannot take that news stays
   registered: it is in use already.

Every failure raises ``RegistrationError`` with upstream's wording; the manager
retries with back-off. Deregistration takes the plugin out of the actual state,
then has its handler let go of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import grpc
import grpc.aio

from pykubelet.api.proto import pluginregistration_v1_pb2 as registerapi
from pykubelet.api.proto import pluginregistration_v1_pb2_grpc as registerapi_grpc
from pykubelet.pluginmanager.cache import PluginHandler, PluginInfo, RegisteredPlugin, SocketId
from pykubelet.util import klog

# Upstream dialTimeoutDuration, GetInfo's timeout and notifyTimeoutDuration.
DIAL_TIMEOUT = 10.0
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0


class RegistrationError(Exception):
    """A registration that failed; the manager logs it and retries after a back-off."""


class RegistrationClient(Protocol):
    """The plugin's registration API on its socket."""

    async def get_info(self) -> PluginInfo: ...

    async def notify(self, registered: bool, error: str) -> None: ...

    async def close(self) -> None: ...


# A socket path -> a client of the plugin serving it.
ClientFactory = Callable[[str], RegistrationClient]


class GrpcRegistrationClient:
    """``pluginregistration.Registration`` over the plugin's Unix socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._channel = grpc.aio.insecure_channel(f"unix://{socket_path}")
        self._stub: Any = registerapi_grpc.RegistrationStub(self._channel)

    async def get_info(self) -> PluginInfo:
        try:
            await asyncio.wait_for(self._channel.channel_ready(), DIAL_TIMEOUT)
        except TimeoutError as err:
            raise RegistrationError(
                f"RegisterPlugin error -- dial failed at socket {self.socket_path}, err: "
                f"failed to dial socket {self.socket_path}, err: timed out") from err
        try:
            info: registerapi.PluginInfo = await self._stub.GetInfo(
                registerapi.InfoRequest(), timeout=GET_INFO_TIMEOUT)
        except grpc.aio.AioRpcError as err:
            raise RegistrationError(
                f"RegisterPlugin error -- failed to get plugin info using RPC GetInfo at "
                f"socket {self.socket_path}, err: {err.details()}") from err
        return PluginInfo(type=info.type, name=info.name, endpoint=info.endpoint,
                          supported_versions=tuple(info.supported_versions))

    async def notify(self, registered: bool, error: str) -> None:
        await self._stub.NotifyRegistrationStatus(
            registerapi.RegistrationStatus(plugin_registered=registered, error=error),
            timeout=NOTIFY_TIMEOUT)

    async def close(self) -> None:
        await self._channel.close()


class ActualState(Protocol):
    """The part of the actual state the operations change."""

    def add(self, plugin: RegisteredPlugin) -> None: ...

    def remove(self, socket_path: str) -> None: ...


async def _refuse(client: RegistrationClient, socket_path: str, why: str) -> RegistrationError:
    """Tell the plugin ``why`` it is not registered; the error to raise."""
    try:
        await client.notify(False, why)
    except Exception as err:  # the plugin gone or broken: the error says both
        return RegistrationError(f"{why}: {err}")
    return RegistrationError(why)


async def register_plugin(socket_path: str, socket_id: SocketId, *,
                          handlers: Mapping[str, PluginHandler], actual: ActualState,
                          client_factory: ClientFactory) -> None:
    """Register the plugin serving ``socket_path`` (the module docstring's steps)."""
    client = client_factory(socket_path)
    try:
        try:
            info = await client.get_info()
        except RegistrationError:
            raise
        except Exception as err:
            raise RegistrationError(
                f"RegisterPlugin error -- failed to get plugin info using RPC GetInfo at "
                f"socket {socket_path}, err: {err}") from err
        handler = handlers.get(info.type)
        if handler is None:
            raise await _refuse(client, socket_path,
                                f"RegisterPlugin error -- no handler registered for plugin "
                                f"type: {info.type} at socket {socket_path}")
        endpoint = info.endpoint or socket_path
        try:
            handler.validate_plugin(info.name, endpoint, info.supported_versions)
        except ValueError as err:
            raise await _refuse(client, socket_path,
                                f"RegisterPlugin error -- plugin validation failed with "
                                f"err: {err}") from err
        actual.add(RegisteredPlugin(socket_path, socket_id, info.name, endpoint, handler))
        try:
            await handler.register_plugin(info.name, endpoint, info.supported_versions)
        except Exception as err:
            actual.remove(socket_path)
            raise await _refuse(client, socket_path,
                                f"RegisterPlugin error -- plugin registration failed with "
                                f"err: {err}") from err
        try:
            await client.notify(True, "")
        except Exception as err:
            klog.error("Failed to send registration status to plugin", err,
                       path=socket_path, plugin=info.name)
        klog.info("Plugin registered", path=socket_path, type=info.type, plugin=info.name,
                  endpoint=endpoint)
    finally:
        await client.close()


async def unregister_plugin(plugin: RegisteredPlugin, *, actual: ActualState) -> None:
    """The plugin's socket is gone (or was replaced): out of the actual state first, so a
    new socket at the path registers anew, then its handler lets go of it."""
    actual.remove(plugin.socket_path)
    await plugin.handler.deregister_plugin(plugin.name, plugin.endpoint)
    klog.info("Plugin deregistered", path=plugin.socket_path, plugin=plugin.name)


__all__ = ["DIAL_TIMEOUT", "GET_INFO_TIMEOUT", "NOTIFY_TIMEOUT", "ActualState",
           "ClientFactory", "GrpcRegistrationClient", "RegistrationClient",
           "RegistrationError", "register_plugin", "unregister_plugin"]
