"""The plugin manager: sockets in ``plugins_registry`` found, registered with the handler
of their type, told the outcome, deregistered when they go, retried with back-off.

Most tests drive one pass at a time (``sync``, then ``wait_idle`` for the operations
it started) against fake plugins and a fake clock: no sleeps. The last ones use real
gRPC over Unix sockets: a fake device plugin that serves the registration API is
found by the running manager (woken by inotify: its periodic pass is an hour away)
and its devices reach the device manager, as a plugin that called ``Register`` on
``kubelet.sock`` would.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc.aio
import pytest

from pykubelet.api.proto import deviceplugin_v1beta1_pb2_grpc as pluginapi_grpc
from pykubelet.api.proto import pluginregistration_v1_pb2 as registerapi
from pykubelet.api.proto import pluginregistration_v1_pb2_grpc as registerapi_grpc
from pykubelet.cm.devicemanager import DeviceManager
from pykubelet.cm.devicemanager.plugin_handler import validation_error
from pykubelet.pluginmanager import (
    CSI_PLUGIN,
    DEVICE_PLUGIN,
    PluginInfo,
    PluginManager,
    registration_dir,
)
from pykubelet.pluginmanager.manager import BACKOFF_INITIAL
from tests.unit.test_devicemanager import RESOURCE, Clock, FakePlugin
from tests.unit.waiting import until


@pytest.fixture
def directory() -> Iterator[str]:
    # Unix socket paths are short; pytest's tmp_path may not be.
    made = tempfile.mkdtemp(prefix="pm", dir="/tmp")
    yield made
    shutil.rmtree(made, ignore_errors=True)


def make_socket(path: str) -> None:
    """A socket file at ``path``, as a plugin leaves it (nobody answers it here)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)


@dataclass
class FakeClient:
    """One plugin's registration API; what it was told is kept on its plugin."""

    plugin: FakeRegistrant

    async def get_info(self) -> PluginInfo:
        self.plugin.asked += 1
        if self.plugin.info_fails:
            raise ConnectionError("connection refused")
        return self.plugin.info

    async def notify(self, registered: bool, error: str) -> None:
        self.plugin.told.append((registered, error))

    async def close(self) -> None:
        pass


@dataclass
class FakeRegistrant:
    info: PluginInfo
    info_fails: bool = False
    asked: int = 0
    told: list[tuple[bool, str]] = field(default_factory=list)


@dataclass
class FakeHandler:
    refuse: str | None = None
    registered: list[tuple[str, str]] = field(default_factory=list)
    deregistered: list[tuple[str, str]] = field(default_factory=list)

    def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        if self.refuse is not None:
            raise ValueError(self.refuse)

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        self.registered.append((name, endpoint))

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        self.deregistered.append((name, endpoint))


class World:
    """A manager over ``directory`` with fake plugins by socket path and a fake clock."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.plugins: dict[str, FakeRegistrant] = {}
        self.handler = FakeHandler()
        self.clock = Clock()
        self.manager = PluginManager(directory=directory,
                                     handlers={DEVICE_PLUGIN: self.handler},
                                     client_factory=lambda path: FakeClient(self.plugins[path]),
                                     clock=self.clock, reconcile_period=60)

    def plugin(self, name: str, *, type: str = DEVICE_PLUGIN, endpoint: str = "",
               info_fails: bool = False) -> tuple[str, FakeRegistrant]:
        path = os.path.join(self.directory, name)
        plugin = FakeRegistrant(PluginInfo(type, RESOURCE, endpoint, ("v1beta1",)),
                                info_fails=info_fails)
        self.plugins[path] = plugin
        make_socket(path)
        return path, plugin

    async def step(self, seconds: float = 0.0) -> None:
        """Time passes, then one pass and the operations it started."""
        self.clock.now += seconds
        self.manager.sync()
        await self.manager.wait_idle()


@pytest.fixture
def world(directory: str) -> World:
    return World(directory)


async def test_a_new_socket_is_registered_and_told_so(world: World) -> None:
    path, plugin = world.plugin("dp.1")
    await world.step()
    # The endpoint is the socket itself when the plugin names none.
    assert world.handler.registered == [(RESOURCE, path)]
    assert plugin.told == [(True, "")]
    assert list(world.manager.registered()) == [path]
    # Registered once: later passes leave it alone.
    await world.step(10)
    assert world.handler.registered == [(RESOURCE, path)]
    assert plugin.asked == 1


async def test_the_plugins_own_endpoint_goes_to_the_handler(world: World) -> None:
    world.plugin("dp.1", endpoint="/run/elsewhere.sock")
    await world.step()
    assert world.handler.registered == [(RESOURCE, "/run/elsewhere.sock")]


async def test_a_removed_socket_is_deregistered(world: World) -> None:
    path, _ = world.plugin("dp.1")
    await world.step()
    os.unlink(path)
    await world.step()
    assert world.handler.deregistered == [(RESOURCE, path)]
    assert world.manager.registered() == {}


async def test_a_socket_created_again_is_registered_anew(world: World) -> None:
    path, plugin = world.plugin("dp.1")
    await world.step()
    os.unlink(path)
    make_socket(path)  # the plugin restarted between two passes
    await world.step()  # deregistered first...
    await world.step()  # ...then registered again
    assert world.handler.deregistered == [(RESOURCE, path)]
    assert world.handler.registered == [(RESOURCE, path), (RESOURCE, path)]
    assert plugin.told == [(True, ""), (True, "")]


async def test_hidden_files_directories_and_plain_files_are_not_plugins(world: World) -> None:
    world.plugin(".hidden")
    open(os.path.join(world.directory, "notes"), "w").close()
    os.mkdir(os.path.join(world.directory, "vendor"))
    nested, _ = world.plugin("vendor/dp.2")
    await world.step()
    # Sockets in subdirectories count, as upstream walks them.
    assert world.handler.registered == [(RESOURCE, nested)]


async def test_a_failing_get_info_is_retried_with_back_off(world: World) -> None:
    path, plugin = world.plugin("dp.1", info_fails=True)
    await world.step()
    assert (plugin.asked, world.manager.registered()) == (1, {})
    # Not before the back-off (0.5 s, then doubling) has passed.
    await world.step(BACKOFF_INITIAL / 2)
    assert plugin.asked == 1
    await world.step(BACKOFF_INITIAL)
    assert plugin.asked == 2
    await world.step(BACKOFF_INITIAL * 1.5)
    assert plugin.asked == 2
    await world.step(BACKOFF_INITIAL)
    assert plugin.asked == 3
    # The running loop's next pass comes when the back-off runs out, not a period later.
    assert world.manager.next_pass_in() == pytest.approx(BACKOFF_INITIAL * 4)
    # The plugin could not be asked, so it is not told either (as upstream).
    assert plugin.told == []
    # Once it answers, it is registered.
    plugin.info_fails = False
    await world.step(10)
    assert world.handler.registered == [(RESOURCE, path)]
    assert plugin.told == [(True, "")]


async def test_a_refused_plugin_is_told_why_and_retried_with_back_off(world: World) -> None:
    world.handler.refuse = "manager version, v1beta1, is not among plugin supported versions [v2]"
    _, plugin = world.plugin("dp.1")
    await world.step()
    assert plugin.told == [(False, "RegisterPlugin error -- plugin validation failed with err: "
                                   "manager version, v1beta1, is not among plugin supported "
                                   "versions [v2]")]
    await world.step(BACKOFF_INITIAL / 2)
    assert len(plugin.told) == 1
    await world.step(BACKOFF_INITIAL)
    assert len(plugin.told) == 2 and plugin.told[-1][0] is False
    assert world.handler.registered == []


async def test_a_new_socket_does_not_wait_for_the_old_ones_back_off(world: World) -> None:
    path, plugin = world.plugin("dp.1", info_fails=True)
    for _ in range(5):
        await world.step(100)
    assert plugin.asked == 5
    os.unlink(path)
    make_socket(path)
    plugin.info_fails = False
    await world.step()
    assert world.handler.registered == [(RESOURCE, path)]


async def test_a_plugin_of_a_type_nobody_handles_is_told_so(world: World) -> None:
    path, plugin = world.plugin("csi.sock", type=CSI_PLUGIN)
    await world.step()
    assert plugin.told == [(False, f"RegisterPlugin error -- no handler registered for plugin "
                                   f"type: CSIPlugin at socket {path}")]
    assert world.manager.registered() == {}


def test_device_plugins_are_validated_as_upstream_does() -> None:
    assert validation_error(RESOURCE, ["v1beta1"]) is None
    assert validation_error(RESOURCE, ["v1alpha", "v1beta1"]) is None
    assert validation_error(RESOURCE, ["v1", "v2"]) == (
        "manager version, v1beta1, is not among plugin supported versions [v1 v2]")
    assert validation_error("cpu", ["v1beta1"]) == (
        'invalid name of device plugin socket: the ResourceName "cpu" is invalid')


# -- real sockets: a device plugin found in plugins_registry ---------------------------------


class WatchedDevicePlugin(FakePlugin, registerapi_grpc.RegistrationServicer):
    """A device plugin that waits to be found: the registration API on its socket too."""

    def __init__(self, directory: str, name: str, *, versions: Sequence[str] = ("v1beta1",)
                 ) -> None:
        super().__init__(directory, name)
        self.versions = list(versions)
        self.statuses: list[tuple[bool, str]] = []

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pluginapi_grpc.add_DevicePluginServicer_to_server(self, self._server)
        registerapi_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return registerapi.PluginInfo(type=DEVICE_PLUGIN, name=RESOURCE, endpoint=self.socket,
                                      supported_versions=self.versions)

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        return registerapi.RegistrationStatusResponse()


class Kubelet:
    """The device manager and the plugin manager, both running, over temporary directories."""

    def __init__(self, root: str) -> None:
        self.devices = DeviceManager(active_pods=list, sources_ready=lambda: True,
                                     numa_nodes=(0,), plugin_dir=os.path.join(root, "dp"),
                                     running_containers=self._running, clock=Clock(),
                                     housekeeping_period=0.05)
        # No periodic pass within a test: only inotify can wake the manager in time.
        self.plugins = PluginManager(directory=registration_dir(root),
                                     handlers={DEVICE_PLUGIN: self.devices.plugin_handler},
                                     reconcile_period=3600)
        self._tasks: list[asyncio.Task[None]] = []

    @staticmethod
    async def _running() -> set[tuple[str, str]]:
        return set()

    async def start(self) -> None:
        await self.devices.start()
        self._tasks = [asyncio.create_task(self.devices.run()),
                       asyncio.create_task(self.plugins.run())]
        await until(lambda: os.path.isdir(self.plugins.directory),
                    what="plugins_registry created")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.wait(self._tasks)

    def capacity(self) -> tuple[int | None, int | None]:
        capacity, allocatable, _ = self.devices.get_capacity()
        return capacity.get(RESOURCE), allocatable.get(RESOURCE)


@pytest.fixture
async def kubelet(directory: str) -> AsyncIterator[Kubelet]:
    started = Kubelet(directory)
    await started.start()
    yield started
    await started.stop()


async def test_the_registry_directory_is_made_private_to_root(kubelet: Kubelet) -> None:
    assert os.stat(kubelet.plugins.directory).st_mode & 0o777 == 0o750


async def test_a_watched_device_plugin_gets_its_devices_on_the_node(kubelet: Kubelet) -> None:
    plugin = WatchedDevicePlugin(kubelet.plugins.directory, "dp.1")
    await plugin.start()
    try:
        await until(lambda: kubelet.capacity() == (2, 2), what="the plugin's devices")
        assert plugin.statuses == [(True, "")]
        # Its health reaches the node through the ListAndWatch stream, as for Register.
        plugin.set_health("dev-1", "Unhealthy")
        await until(lambda: kubelet.capacity() == (2, 1), what="one device unhealthy")

        # Its socket removed (the plugin still streaming, so only the watcher can tell):
        # its devices are unhealthy at once, capacity stays for the grace period.
        os.unlink(plugin.socket)
        await until(lambda: kubelet.capacity() == (2, 0), what="the plugin deregistered")
        assert kubelet.plugins.registered() == {}
    finally:
        await plugin.stop()


async def test_a_watched_plugin_of_an_unsupported_version_is_told_why(
        kubelet: Kubelet) -> None:
    plugin = WatchedDevicePlugin(kubelet.plugins.directory, "dp.1", versions=("v1alpha",))
    await plugin.start()
    try:
        await until(lambda: plugin.statuses, what="the plugin told")
        assert plugin.statuses[0] == (
            False, "RegisterPlugin error -- plugin validation failed with err: manager "
                   "version, v1beta1, is not among plugin supported versions [v1alpha]")
        assert kubelet.capacity() == (None, None)
    finally:
        await plugin.stop()
