"""Device plugins found by the plugin watcher (upstream ``plugin/v1beta1/handler.go``).

A plugin that sees ``DEPRECATION`` in the device-plugin directory does not call
``Register`` on ``kubelet.sock``: it puts its socket in
``<root-dir>/plugins_registry`` and the plugin manager (``pykubelet/pluginmanager``)
asks it what it is. A ``DevicePlugin`` lands here: checked as upstream checks it (a
supported API version among the plugin's, an extended resource name), then connected
by the registry exactly as a plugin that called ``Register`` (dial, options,
``ListAndWatch``); its socket's removal stops it.

pykubelet does not write ``DEPRECATION`` itself: plugins that would then wait for
the watcher keep registering on ``kubelet.sock``, which both paths serve.
"""

from __future__ import annotations

from collections.abc import Sequence

from pykubelet.api.resources import is_extended_resource_name
from pykubelet.cm.devicemanager.registry import PluginRegistry
from pykubelet.cm.devicemanager.server import SUPPORTED_VERSIONS, VERSION
from pykubelet.util import klog
from pykubelet.util.gotext import go_quote


class PluginValidationError(ValueError):
    """A plugin the device manager refuses; the message is upstream's."""


def validation_error(name: str, versions: Sequence[str]) -> str | None:
    """Why upstream's device manager refuses a watched plugin, in its words (Go's ``%v``
    of the plugin's versions); None when it is acceptable."""
    if not any(version in SUPPORTED_VERSIONS for version in versions):
        return (f"manager version, {VERSION}, is not among plugin supported versions "
                f"[{' '.join(versions)}]")
    if not is_extended_resource_name(name):
        return (f"invalid name of device plugin socket: the ResourceName {go_quote(name)} "
                f"is invalid")
    return None


class DevicePluginHandler:
    """The plugin manager's handler for plugins of type ``DevicePlugin``: ``name`` is the
    resource, ``endpoint`` the socket of the plugin's device plugin API."""

    def __init__(self, registry: PluginRegistry) -> None:
        self._registry = registry

    def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        klog.v(2).info("Got plugin at endpoint with versions", plugin=name, endpoint=endpoint,
                       versions=list(versions))
        problem = validation_error(name, versions)
        if problem is not None:
            raise PluginValidationError(problem)

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        klog.v(2).info("Registering plugin at endpoint", plugin=name, endpoint=endpoint)
        await self._registry.register_plugin(name, endpoint)

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        klog.v(2).info("Deregistering plugin", plugin=name, endpoint=endpoint)
        await self._registry.deregister_plugin(name, endpoint)


__all__ = ["DevicePluginHandler", "PluginValidationError", "validation_error"]
