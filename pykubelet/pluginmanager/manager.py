"""The plugin manager the kubelet holds (upstream ``pluginmanager/plugin_manager.go`` and
``reconciler``).

``run`` creates ``<root-dir>/plugins_registry`` (0750) and then, every
``RECONCILE_PERIOD`` or as soon as inotify or a finished operation wakes it, makes
one pass (``sync``): read the directory (the desired state, ``pluginwatcher``), then
reconcile it with the registered plugins (the actual state), deregistrations first:

- a registered plugin whose socket is gone, or was created again, is deregistered;
- a socket not registered yet is registered (``operationexecutor``), unless its last
  attempt failed less than the back-off ago (0.5 s doubling to upstream's 2 min 2 s;
  a socket created again starts over).

Each operation runs as a task of its own, at most one per socket at a time (a plugin
that takes its 10 s dial timeout holds up no other); ``wait_idle`` awaits them (for
tests). Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from pykubelet.pluginmanager.cache import PluginHandler, RegisteredPlugin, SocketId
from pykubelet.pluginmanager.operationexecutor import (
    ClientFactory,
    GrpcRegistrationClient,
    register_plugin,
    unregister_plugin,
)
from pykubelet.pluginmanager.pluginwatcher import DirectoryWaker, scan
from pykubelet.util import klog
from pykubelet.util.backoff import Backoff

# Upstream's pluginRegistrationDir, below --root-dir.
PLUGINS_REGISTRY_DIR_NAME = "plugins_registry"
# Upstream's reconciler loop period.
RECONCILE_PERIOD = 1.0
# Upstream's exponential back-off of a failing operation.
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 2 * 60.0 + 2.0
# Passes come no closer than this, whatever is due.
MIN_PASS_INTERVAL = 0.01


def registration_dir(root_dir: str) -> str:
    """Where plugins put their registration sockets."""
    return os.path.join(root_dir, PLUGINS_REGISTRY_DIR_NAME)


class PluginManager:
    def __init__(self, *, directory: str, handlers: Mapping[str, PluginHandler],
                 client_factory: ClientFactory = GrpcRegistrationClient,  # tests only
                 clock: Callable[[], float] = time.monotonic,  # tests only
                 reconcile_period: float = RECONCILE_PERIOD) -> None:
        self.directory = directory
        self._handlers = dict(handlers)
        self._client_factory = client_factory
        self._reconcile_period = reconcile_period
        self._clock = clock
        self._backoff = Backoff(BACKOFF_INITIAL, BACKOFF_MAX, clock=clock)
        # The desired state: the sockets the directory held at the last pass.
        self._desired: dict[str, SocketId] = {}
        # The actual state: the plugins registered, by socket path.
        self._actual: dict[str, RegisteredPlugin] = {}
        # The socket each back-off entry is for (a new socket at the path starts over),
        # and when it may be tried again.
        self._failed: dict[str, SocketId] = {}
        self._retry_at: dict[str, float] = {}
        self._pending: dict[str, asyncio.Task[None]] = {}
        # Set when an operation ends, so the next pass comes at once.
        self._wake = asyncio.Event()

    # -- what others read -------------------------------------------------------------------

    def registered(self) -> dict[str, RegisteredPlugin]:
        """The registered plugins by socket path."""
        return dict(self._actual)

    # -- the actual state (the operations' side) --------------------------------------------

    def add(self, plugin: RegisteredPlugin) -> None:
        self._actual[plugin.socket_path] = plugin

    def remove(self, socket_path: str) -> None:
        self._actual.pop(socket_path, None)

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch the registration directory and reconcile until cancelled."""
        klog.info("Starting Kubelet Plugin Manager", path=self.directory)
        await asyncio.to_thread(os.makedirs, self.directory, 0o750, exist_ok=True)
        waker = DirectoryWaker()
        # Watched before the first read, so that no socket slips in between.
        waker.watch([self.directory])
        try:
            while True:
                directories = self.sync()
                waker.watch(directories)
                self._wake.clear()
                await waker.wait(self.next_pass_in(), self._wake)
        finally:
            waker.close()
            await self.stop()

    def next_pass_in(self) -> float:
        """Seconds until the next pass is due: the period, or sooner when a failed
        registration's back-off runs out."""
        now = self._clock()
        due = [at - now for path, at in self._retry_at.items() if path not in self._pending]
        return max(MIN_PASS_INTERVAL, min([self._reconcile_period, *due]))

    def sync(self) -> list[str]:
        """One pass: read the directory, then reconcile; the directories read (to watch)."""
        try:
            self._desired, directories = scan(self.directory)
        except OSError as err:
            # Keep the last desired state: a directory that cannot be read is no reason
            # to deregister every plugin.
            klog.error("Failed to read the plugin registration directory", err,
                       path=self.directory)
            directories = []
        self.reconcile()
        return directories

    def reconcile(self) -> None:
        """Start the operations that bring the actual state to the desired one."""
        for path, plugin in list(self._actual.items()):
            if self._desired.get(path) == plugin.socket_id or path in self._pending:
                continue
            klog.v(4).info("Plugin socket gone or replaced, deregistering", path=path,
                           plugin=plugin.name)
            self._start(path, unregister_plugin(plugin, actual=self))
        for path, socket_id in self._desired.items():
            if path in self._actual or path in self._pending:
                continue
            if self._failed.get(path) not in (None, socket_id):
                self._forget_failure(path)
            if self._backoff.is_in_backoff_since_update(path):
                continue
            klog.v(4).info("Registering plugin at socket", path=path)
            self._start(path, self._register(path, socket_id))
        for path in set(self._failed) - set(self._desired):
            self._forget_failure(path)

    async def _register(self, path: str, socket_id: SocketId) -> None:
        try:
            await register_plugin(path, socket_id, handlers=self._handlers, actual=self,
                                  client_factory=self._client_factory)
        except Exception as err:
            self._backoff.next(path)
            self._failed[path] = socket_id
            self._retry_at[path] = self._clock() + self._backoff.get(path)
            klog.error("operationExecutor.RegisterPlugin failed", err, path=path,
                       retryIn=f"{self._backoff.get(path):g}s")
            return
        self._forget_failure(path)

    def _forget_failure(self, path: str) -> None:
        self._backoff.reset(path)
        self._failed.pop(path, None)
        self._retry_at.pop(path, None)

    def _start(self, path: str, operation: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(operation, name=f"plugin-manager-operation:{path}")
        self._pending[path] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._pending.get(path) is task:
                del self._pending[path]
            self._wake.set()
            if not task.cancelled() and task.exception() is not None:
                klog.error("Plugin manager operation crashed", task.exception(), path=path)

        task.add_done_callback(done)

    async def wait_idle(self) -> None:
        """Until no operation is running (tests)."""
        while self._pending:
            await asyncio.wait(list(self._pending.values()))

    async def stop(self) -> None:
        """Cancel the running operations (registered plugins stay with their handlers)."""
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["BACKOFF_INITIAL", "BACKOFF_MAX", "PLUGINS_REGISTRY_DIR_NAME", "RECONCILE_PERIOD",
           "PluginManager", "registration_dir"]
