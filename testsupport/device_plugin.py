"""Upstream's sample device plugin (1.20) beside a test kubelet, for the device manager's tests.

The plugin is upstream's own ``test/images/sample-device-plugin``, built with
the control plane (scripts/testbed/controlplane-build.sh), not a double: it
advertises ``example.com/resource`` with the healthy devices ``Dev-1`` and
``Dev-2``, and its Allocate creates ``/tmp/<device>`` on the host and answers
with a mount of that file at the same path in the container (the empty files
stay: every plugin on the machine shares them, as on a real node).

It serves its own socket in ``$PLUGIN_SOCK_DIR`` (``dp.<unix time>``) and
registers at the fixed ``/var/lib/kubelet/device-plugins/kubelet.sock``. Each
test kubelet has that directory to itself (``KubeletProcess.device_plugin_dir``,
bound over the fixed path in its mount namespace), so the plugin runs in a
mount namespace of its own where the same host directory is bound there too:
the kubelet and the plugin meet on each other's sockets, and neither touches
the host's directory. Since the host directory outlives the kubelet's
namespace, the plugin keeps seeing a restarted kubelet's new socket.

Unless that directory holds a ``DEPRECATION`` file: then the plugin does not
call Register but waits to be found by the kubelet's plugin watcher. The Go
kubelet 1.20 writes that file (devicemanager/manager.go, GetWatcherHandler);
recent upstream no longer does (its GetWatcherHandler hands over the
registration server as is), so pykubelet's need not. For a kubelet that writes
it (``KubeletProcess.device_plugin_deprecation``) the plugin serves its socket
in the kubelet's ``<root-dir>/plugins_registry``, as upstream's 1.20 node e2e
test has it. (Asked of the kubelet, not read from the directory: the Go
kubelet writes the file a moment after it serves ``kubelet.sock``.)

A test orders them as upstream's 1.20 node e2e test does
(test/e2e_node/device_plugin_test.go):

- start the plugin once the kubelet serves: a kubelet's device manager clears
  the directory when it starts (removing the plugin's socket), and the plugin
  gives up (exits) when it cannot register within 10 seconds;
- restart the plugin after a kubelet restart, once the kubelet serves again
  (upstream deletes and recreates the plugin's pod then): the 1.20 plugin
  registers once, at its start, and never notices a new ``kubelet.sock``
  (only a plugin watcher finds a plugin that was already there).

``start`` waits for ``kubelet.sock`` first; ``wait_registered`` then waits for
the kubelet to open the plugin's device stream (its ``ListAndWatch`` log line).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import weakref
from pathlib import Path

from testsupport.controlplane import ControlPlaneError, built_binary
from testsupport.kubelet_process import (
    DEVICE_PLUGIN_DIR,
    KubeletProcess,
    device_plugin_dir_mounts,
    in_mount_namespace,
)
from testsupport.polling import wait_until

BINARY_NAME = "sample-device-plugin"
# Below a kubelet's root directory: the sockets its plugin watcher probes.
PLUGINS_REGISTRY = "plugins_registry"
# The kubelet's device manager serves it once started (and cleared the directory).
KUBELET_SOCKET = "kubelet.sock"
KUBELET_SOCKET_TIMEOUT_SECONDS = 30.0
RESOURCE_NAME = "example.com/resource"
DEVICE_IDS = ("Dev-1", "Dev-2")
# The plugin logs this when the kubelet opens its device stream: the registration
# was accepted and the kubelet now knows the devices.
LIST_AND_WATCH_LOG = "ListAndWatch"
STOP_TIMEOUT_SECONDS = 10.0
# Registration alone may take the plugin's 10 s dial timeout; the stream follows.
REGISTER_TIMEOUT_SECONDS = 30.0
LOG_TAIL_CHARS = 4000
# Every plugin started by this test process: none outlives it.
_PLUGINS: weakref.WeakSet[DevicePlugin] = weakref.WeakSet()


def binary(build: bool = False) -> Path:
    """The plugin in the control plane's build (``built_binary``); with ``build`` it is
    built first when missing (root, minutes), as the ``control_plane`` fixture builds."""
    return built_binary(BINARY_NAME, "sample device plugin", build=build)


def missing_reason() -> str | None:
    """Why the plugin cannot run here (to skip a test with), or None when it is built."""
    try:
        binary()
    except ControlPlaneError as err:
        return str(err)
    return None


class DevicePlugin:
    """One sample plugin process serving ``kubelet``'s device-plugin directory."""

    def __init__(self, kubelet: KubeletProcess, *, program: Path) -> None:
        self.kubelet = kubelet
        self.program = program
        self.log_file = kubelet.base / "device-plugin.log"
        self.process: subprocess.Popen[bytes] | None = None
        # Where this run's lines begin in log_file (each restart appends).
        self._log_offset = 0
        _PLUGINS.add(self)

    def command(self) -> list[str]:
        return in_mount_namespace([str(self.program)],
                                  device_plugin_dir_mounts(self.kubelet.device_plugin_dir))

    def socket_dir(self) -> Path:
        """Where it serves its socket (as it sees it): the device-plugin directory, or the
        kubelet's plugins registry when the plugin will not call Register."""
        # As upstream's 1.20 sample plugin decides: by the file a 1.20 kubelet left there.
        if (self.kubelet.device_plugin_deprecation
                or (self.kubelet.device_plugin_dir / "DEPRECATION").exists()):
            return self.kubelet.root / PLUGINS_REGISTRY
        return DEVICE_PLUGIN_DIR

    def start(self) -> None:
        """Start it once the kubelet's device manager serves; it registers at once (see
        the module docstring)."""
        socket = self.kubelet.device_plugin_dir / KUBELET_SOCKET
        wait_until(socket.exists, KUBELET_SOCKET_TIMEOUT_SECONDS,
                   f"the kubelet's device manager to serve {socket}")
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        env = {**os.environ, "PLUGIN_SOCK_DIR": str(self.socket_dir())}
        log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                        env=env)
        log.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """Stop it (its socket file stays, as a crashed plugin's would); its exit status."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        """A new plugin process: what a test does after restarting the kubelet."""
        self.stop()
        self.start()

    def log_text(self) -> str:
        """Everything it logged, over all its runs."""
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def run_log_text(self) -> str:
        """What the current run logged."""
        if not self.log_file.exists():
            return ""
        with open(self.log_file, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def wait_registered(self, timeout: float = REGISTER_TIMEOUT_SECONDS) -> None:
        """Until the kubelet accepted this run's registration and opened the device stream;
        fails at once if the plugin exits (it does when registration fails)."""
        def tail() -> str:
            return f"device plugin log:\n{self.run_log_text()[-LOG_TAIL_CHARS:]}"

        def streaming() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"the device plugin exited ({self.process.returncode}) "
                                     f"before the kubelet listed its devices; {tail()}")
            return LIST_AND_WATCH_LOG in self.run_log_text()

        wait_until(streaming, timeout, f"the kubelet to list {RESOURCE_NAME}", on_timeout=tail)


def start(kubelet: KubeletProcess, *, program: Path | None = None) -> DevicePlugin:
    """A started sample plugin for ``kubelet`` (which must be serving already); ``program``
    defaults to the control plane's build (``binary``)."""
    plugin = DevicePlugin(kubelet, program=program or binary())
    plugin.start()
    return plugin


@atexit.register
def _stop_leftovers() -> None:
    """A plugin a test did not stop goes with the test process."""
    for plugin in list(_PLUGINS):
        if plugin.running():
            plugin.kill()
