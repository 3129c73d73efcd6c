"""The registration server device plugins find at ``/var/lib/kubelet/device-plugins/kubelet.sock``
(upstream ``devicemanager/plugin/v1beta1/server.go``).

On start it removes the sockets left in the directory (every socket, not the
checkpoint or other files: plugins' old sockets are dead once the kubelet restarts,
and a plugin notices the new ``kubelet.sock`` and registers again), then serves
``Register``. A request is checked as upstream checks it (API version ``v1beta1``,
an extended resource name) and answered only once the kubelet has dialed the
plugin's socket and read its options, so a refused or unreachable plugin learns it
from its ``Register`` call.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio

from pykubelet import metrics
from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.api.proto import deviceplugin_v1beta1_pb2_grpc as pluginapi_grpc
from pykubelet.api.resources import is_extended_resource_name
from pykubelet.util import klog
from pykubelet.util.gotext import go_quote

# Upstream pluginapi.DevicePluginPath / KubeletSocket: fixed whatever --root-dir is.
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET_NAME = "kubelet.sock"
VERSION = "v1beta1"
SUPPORTED_VERSIONS = (VERSION,)

def registration_error(request: pluginapi.RegisterRequest) -> str | None:
    """Why upstream refuses ``request``, in its words (devicemanager ``types.go``: Go's ``%q``
    of the version and of the supported list); None when it is acceptable."""
    if request.version not in SUPPORTED_VERSIONS:
        supported = "[" + " ".join(go_quote(v) for v in SUPPORTED_VERSIONS) + "]"
        return (f"requested API version {go_quote(request.version)} is not supported by "
                f"kubelet. Supported versions are {supported}")
    if not is_extended_resource_name(request.resource_name):
        return f"the ResourceName {go_quote(request.resource_name)} is invalid"
    return None


# resource name, the plugin's socket path -> connected (raises when it cannot be).
ConnectPlugin = Callable[[str, str], Awaitable[None]]


class _Registration(pluginapi_grpc.RegistrationServicer):
    def __init__(self, socket_dir: str, connect: ConnectPlugin) -> None:
        self._socket_dir = socket_dir
        self._connect = connect

    async def Register(self, request: pluginapi.RegisterRequest,
                       context: grpc.aio.ServicerContext[object, object]) -> pluginapi.Empty:
        klog.info("Got registration request from device plugin with resource",
                  resourceName=request.resource_name)
        # Every request counts, accepted or not, as upstream counts them.
        metrics.DEVICE_PLUGIN_REGISTRATIONS.labels(request.resource_name).inc()
        problem = registration_error(request)
        if problem is not None:
            klog.error("Bad registration request from device plugin", problem,
                       resourceName=request.resource_name)
            await context.abort(grpc.StatusCode.UNKNOWN, problem)
        try:
            await self._connect(request.resource_name,
                                os.path.join(self._socket_dir, request.endpoint))
        except Exception as err:  # the plugin is told why, in its Register call
            klog.error("Error connecting to device plugin client", err,
                       resourceName=request.resource_name)
            await context.abort(grpc.StatusCode.UNKNOWN, str(err))
        return pluginapi.Empty()


def cleanup_plugin_directory(directory: str, keep: str) -> None:
    """Remove every socket in ``directory`` (upstream ``CleanupPluginDirectory``); ``keep``
    (the checkpoint's name), directories and other files stay."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name == keep:
            continue
        try:
            mode = os.lstat(path).st_mode
        except OSError as err:
            klog.error("Failed to stat file", err, path=path)
            continue
        if not stat.S_ISSOCK(mode):
            continue
        try:
            os.unlink(path)
        except OSError as err:
            klog.error("Failed to remove file", err, path=path)


class RegistrationServer:
    """``kubelet.sock`` served with grpc.aio; ``start`` again after ``stop`` to recreate it."""

    def __init__(self, socket_dir: str, connect: ConnectPlugin, *, keep: str) -> None:
        self.socket_dir = socket_dir
        self.socket_path = os.path.join(socket_dir, KUBELET_SOCKET_NAME)
        self._connect = connect
        self._keep = keep
        self._server: grpc.aio.Server | None = None
        # The socket's inode, to notice it removed or replaced under us.
        self._inode: int | None = None

    async def start(self) -> None:
        klog.info("Starting device plugin registration server", socket=self.socket_path)
        os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
        cleanup_plugin_directory(self.socket_dir, self._keep)
        server = grpc.aio.server()
        pluginapi_grpc.add_RegistrationServicer_to_server(
            _Registration(self.socket_dir, self._connect), server)
        if server.add_insecure_port(f"unix://{self.socket_path}") == 0:
            raise OSError(f"failed to listen to socket while starting device plugin "
                          f"registry: {self.socket_path}")
        await server.start()
        self._server = server
        self._inode = self._current_inode()

    def _current_inode(self) -> int | None:
        try:
            return os.stat(self.socket_path).st_ino
        except OSError:
            return None

    def socket_lost(self) -> bool:
        """Whether our socket was removed or replaced since ``start``."""
        return self._server is not None and self._current_inode() != self._inode

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        await server.stop(grace=None)
        klog.info("Stopping device plugin registration server")


__all__ = ["DEVICE_PLUGIN_DIR", "KUBELET_SOCKET_NAME", "SUPPORTED_VERSIONS", "VERSION",
           "RegistrationServer", "cleanup_plugin_directory",
           "registration_error"]
