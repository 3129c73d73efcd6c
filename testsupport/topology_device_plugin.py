"""A device plugin that says which NUMA node each of its devices sits on.

Upstream's sample device plugin (testsupport/device_plugin.py) reports no topology, so
a kubelet's topology manager has nothing to align its devices with. This one is a
small but real plugin, speaking the v1beta1 device-plugin API over gRPC like any
vendor's: it advertises one resource whose devices are all healthy, each on the
NUMA node it is given (``Device.topology``), and its Allocate answers with the
environment variable ``NUMA_DEVICE`` naming the devices handed out (comma
separated), so a container can print which one it got. It asks for no preferred
allocation and no pre-start call.

Run as ``python -m testsupport.topology_device_plugin --resource R --device ID=NODE
...``, it behaves as the sample plugin does: it serves its socket in
``$PLUGIN_SOCK_DIR`` (the fixed device-plugin directory by default), registers at the
fixed ``kubelet.sock`` there, logs ``ListAndWatch`` when the kubelet opens its device
stream, and exits 1 when it cannot register (the kubelet refused it or did not answer
within 10 seconds), 0 on SIGTERM.

``start`` runs it beside a test kubelet the way the sample plugin is run (it is a
``device_plugin.DevicePlugin``): in a mount namespace of its own where the kubelet's
device-plugin directory is bound at the fixed path, once the kubelet serves; it is
killed with the test process if a test did not stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from pykubelet.api.proto import deviceplugin_v1beta1_pb2 as pluginapi
from pykubelet.api.proto import deviceplugin_v1beta1_pb2_grpc as pluginapi_grpc
from testsupport import device_plugin
from testsupport.kubelet_process import (
    DEVICE_PLUGIN_DIR,
    KubeletProcess,
    device_plugin_dir_mounts,
    in_mount_namespace,
)

MODULE = "testsupport.topology_device_plugin"
REPO_ROOT = Path(__file__).resolve().parent.parent
RESOURCE_NAME = "example.com/numa-device"
# What Allocate puts in the container's environment: the devices it was given.
DEVICE_ENV = "NUMA_DEVICE"
API_VERSION = "v1beta1"
# As upstream's sample plugin: registration that takes longer has failed.
REGISTER_TIMEOUT_SECONDS = 10.0

log = logging.getLogger(MODULE)


class _Servicer(pluginapi_grpc.DevicePluginServicer):
    """The plugin's answers: its fixed devices, and the environment naming them."""

    def __init__(self, devices: Mapping[str, int]) -> None:
        self.devices = dict(devices)

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pluginapi.DevicePluginOptions()

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
        log.info("ListAndWatch: the kubelet reads the devices %s", self.devices)
        yield pluginapi.ListAndWatchResponse(devices=[
            pluginapi.Device(ID=device, health="Healthy", topology=pluginapi.TopologyInfo(
                nodes=[pluginapi.NUMANode(ID=node)]))
            for device, node in self.devices.items()])
        # The devices never change: the stream stays open until the plugin stops.
        await asyncio.Event().wait()

    async def Allocate(self, request: Any, context: Any) -> Any:
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            log.info("Allocate %s", ids)
            responses.append(pluginapi.ContainerAllocateResponse(
                envs={DEVICE_ENV: ",".join(ids)}))
        return pluginapi.AllocateResponse(container_responses=responses)

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pluginapi.PreStartContainerResponse()


async def serve(*, resource: str, devices: Mapping[str, int], socket_dir: Path) -> int:
    """Serve, register, and run until SIGTERM (0); 1 when registration fails."""
    endpoint = f"{resource.replace('/', '_')}.sock"
    socket_path = socket_dir / endpoint
    socket_path.unlink(missing_ok=True)
    server = grpc.aio.server()
    pluginapi_grpc.add_DevicePluginServicer_to_server(_Servicer(devices), server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    try:
        # Served first: the kubelet dials the plugin back before Register returns.
        registration = DEVICE_PLUGIN_DIR / device_plugin.KUBELET_SOCKET
        async with grpc.aio.insecure_channel(f"unix://{registration}") as channel:
            try:
                await pluginapi_grpc.RegistrationStub(channel).Register(
                    pluginapi.RegisterRequest(version=API_VERSION, endpoint=endpoint,
                                              resource_name=resource),
                    timeout=REGISTER_TIMEOUT_SECONDS, wait_for_ready=True)
            except grpc.aio.AioRpcError as err:
                log.error("Registration at %s failed: %s %s", registration, err.code(),
                          err.details())
                return 1
        log.info("Registered %s at %s, serving %s", resource, registration, socket_path)
        await stopping.wait()
        return 0
    finally:
        await server.stop(grace=None)
        socket_path.unlink(missing_ok=True)


def parse_device(text: str) -> tuple[str, int]:
    device, _, node = text.partition("=")
    if not device or not node.isdigit():
        raise argparse.ArgumentTypeError(f"want ID=NUMA-NODE, got {text!r}")
    return device, int(node)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resource", default=RESOURCE_NAME)
    parser.add_argument("--device", dest="devices", type=parse_device, action="append",
                        required=True, metavar="ID=NUMA-NODE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    socket_dir = Path(os.environ.get("PLUGIN_SOCK_DIR") or DEVICE_PLUGIN_DIR)
    return asyncio.run(serve(resource=args.resource, devices=dict(args.devices),
                             socket_dir=socket_dir))


class TopologyDevicePlugin(device_plugin.DevicePlugin):
    """This plugin run beside ``kubelet``: started, stopped and waited on as the sample
    plugin is (``device_plugin.DevicePlugin``)."""

    def __init__(self, kubelet: KubeletProcess, *, devices: Mapping[str, int],
                 resource: str = RESOURCE_NAME) -> None:
        super().__init__(kubelet, program=Path(sys.executable))
        self.devices = dict(devices)
        self.resource = resource
        self.log_file = kubelet.base / "topology-device-plugin.log"

    def command(self) -> list[str]:
        # This checkout's testsupport, whatever the directory the test runs in.
        argv = ["env", f"PYTHONPATH={REPO_ROOT}", sys.executable, "-m", MODULE,
                "--resource", self.resource,
                *(f"--device={device}={node}" for device, node in self.devices.items())]
        return in_mount_namespace(argv, device_plugin_dir_mounts(self.kubelet.device_plugin_dir))


def start(kubelet: KubeletProcess, *, devices: Mapping[str, int],
          resource: str = RESOURCE_NAME) -> TopologyDevicePlugin:
    """A started plugin for ``kubelet`` (which must be serving already) with ``devices``
    (device ID -> its NUMA node)."""
    plugin = TopologyDevicePlugin(kubelet, devices=devices, resource=resource)
    plugin.start()
    return plugin


if __name__ == "__main__":
    sys.exit(main())
