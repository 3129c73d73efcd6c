"""The plugin manager (upstream ``pkg/kubelet/pluginmanager``): plugins that register
by putting a socket in ``<root-dir>/plugins_registry``.

The kubelet finds each socket there, asks the plugin what it is (``GetInfo`` of the
``pluginregistration`` v1 API: ``pykubelet/api/proto/pluginregistration_v1.proto``),
hands it to the handler of its type, tells it the outcome
(``NotifyRegistrationStatus``), and has the handler let go of it when its socket
goes. The only handler is the device manager's, for ``DevicePlugin``s (device
plugins that see ``DEPRECATION`` in the device-plugin directory, which the Go
kubelet 1.20 writes, register this way); ``CSIPlugin`` and ``DRAPlugin`` plugins
are told that no handler takes them.

``pluginwatcher`` reads the directory (the desired state) and wakes the manager on
changes, ``operationexecutor`` registers and deregisters one plugin, ``cache``
holds the types both share, and ``manager`` is the ``PluginManager`` the kubelet
runs: the reconciler between the two states, with the back-off of failed attempts.
"""

from pykubelet.pluginmanager.cache import (
    CSI_PLUGIN,
    DEVICE_PLUGIN,
    DRA_PLUGIN,
    PluginHandler,
    PluginInfo,
    RegisteredPlugin,
)
from pykubelet.pluginmanager.manager import (
    PLUGINS_REGISTRY_DIR_NAME,
    PluginManager,
    registration_dir,
)

__all__ = ["CSI_PLUGIN", "DEVICE_PLUGIN", "DRA_PLUGIN", "PLUGINS_REGISTRY_DIR_NAME",
           "PluginHandler", "PluginInfo", "PluginManager", "RegisteredPlugin",
           "registration_dir"]
