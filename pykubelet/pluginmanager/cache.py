"""What the plugin manager wants and what it has (upstream ``pluginmanager/cache``).

The desired state is the registration directory as last read: each plugin socket
with its identity. The actual state is the plugins registered with a handler. A
socket removed and created again at the same path (a restarted plugin) has a new
identity, so it is deregistered and registered anew, as upstream tells the two
apart by the time of the create event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

# The plugin types of the registration API (upstream ``pluginregistration/v1`` constants).
CSI_PLUGIN = "CSIPlugin"
DEVICE_PLUGIN = "DevicePlugin"
DRA_PLUGIN = "DRAPlugin"


class SocketId(NamedTuple):
    """One socket file: the same path created again is another one."""

    device: int
    inode: int
    changed_ns: int


class PluginHandler(Protocol):
    """What a subsystem provides for one plugin type (upstream ``cache.PluginHandler``).

    ``validate_plugin`` raises ``ValueError`` (its message goes to the plugin) for a
    plugin it refuses; ``register_plugin`` raises when the plugin cannot be used;
    ``deregister_plugin`` is called once the plugin's socket is gone.
    """

    def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None: ...

    async def register_plugin(self, name: str, endpoint: str,
                              versions: Sequence[str]) -> None: ...

    async def deregister_plugin(self, name: str, endpoint: str) -> None: ...


@dataclass(frozen=True)
class PluginInfo:
    """A plugin's answer to ``GetInfo``."""

    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


@dataclass(frozen=True)
class RegisteredPlugin:
    """A plugin of the actual state: the socket it was found at and who took it."""

    socket_path: str
    socket_id: SocketId
    name: str
    endpoint: str
    handler: PluginHandler


__all__ = ["CSI_PLUGIN", "DEVICE_PLUGIN", "DRA_PLUGIN", "PluginHandler", "PluginInfo",
           "RegisteredPlugin", "SocketId"]
