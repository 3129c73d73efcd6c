"""A real ``pykubelet`` process for end-to-end tests and benchmarks, and what a user sees of it.

Tests and benchmarks drive pykubelet the way an operator does: write static pod files,
start the command with a KubeletConfiguration, read ``/pods`` on the
read-only port and the runtime's own view through CRI. Nothing is faked:
the process talks to the testbed's containerd.

What a kubelet would change on the host is kept from it. A test kubelet (this
one, the cluster tests' and the Go kubelet alike) runs in a mount namespace of
its own (``unshare --mount``, propagation unchanged): ``/`` and ``/proc`` are
made private there, and the kernel tunables it checks or sets at start-up
(``protectKernelDefaults``, ``KERNEL_TUNABLES``) are files of its base
directory bind-mounted over ``/proc/sys/<key>``, holding the wanted values
unless a test asks for others. Its root directory is the one mount it shares
with the host: a bind mount of the directory onto itself, made shared before
the kubelet starts, so that the volumes it mounts below (tmpfs volumes,
subPath bind mounts) are seen by containerd, which lives outside. A stop
unmounts that bind mount when no volume is left below it; else
``remove_everything`` (or the test process's exit) does, with the volumes.
No test kubelet creates iptables chains either (``makeIPTablesUtilChains``).

The device-plugin directory is fixed (``/var/lib/kubelet/device-plugins``,
upstream's ``pluginapi.DevicePluginPath``, whatever ``--root-dir`` says): in a
test kubelet's namespace it is a bind mount of a directory of its base
(``device_plugin_dir``), so kubelets running side by side never meet each
other's registration socket and the host's own directory stays as it was. A
test's device plugin sees the same directory there (testsupport/device_plugin.py).

A test may show its kubelet another machine's NUMA nodes (``write_numa_nodes`` and
``numa_node_mounts`` in ``extra_mounts``): a directory laid out as
``/sys/devices/system/node`` bound over it in the kubelet's namespace, so the
kubelet reads the node of each CPU from there while the CPUs themselves stay the
machine's own; the host's sysfs is not touched.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from pykubelet.cm.cgroups import CgroupError, CgroupManager, parse_cgroupfs_name
from pykubelet.cm.kernel_tunables import KERNEL_TUNABLES
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.volumemanager.mount import is_mount_point
from testsupport.polling import wait_until

NODE_NAME = "e2e-node"
# cgroupRoots created by this test process, removed by remove_everything.
_CGROUP_ROOTS: set[str] = set()
# The kubelets' root directories: the tmpfs volumes of pods that outlived their
# kubelet (a stopped kubelet leaves its pods, as upstream) are unmounted with them.
_ROOT_DIRS: set[Path] = set()
# Every test kubelet made by this process: a root bind mount is kept while its kubelet runs.
_KUBELETS: weakref.WeakSet[KubeletProcess] = weakref.WeakSet()
HEALTHZ_TIMEOUT_SECONDS = 30.0
# A sleep under a shell that exits on SIGTERM, as most servers do: stopping it is not held
# to the grace period, so its deletion measures the kubelet's own teardown.
TERM_EXITING_COMMAND = ("sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait")
# Where kubelets serve the device plugins' Registration socket (kubelet.sock) and dial the
# plugins' own sockets, whatever their root directory; each test kubelet has its own.
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# Where a kubelet reads which NUMA node each CPU is on (``nodeN/cpulist``).
SYS_NODE_DIR = Path("/sys/devices/system/node")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now. The probes stay bound until all are
    chosen: released one at a time, the kernel may hand the same port out twice."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def write_kernel_tunables(directory: Path, values: Mapping[str, int] | None = None) -> Path:
    """``directory`` laid out as ``/proc/sys`` for the kernel tunables: a file per key, with
    ``values`` where given and the kubelet's wanted value otherwise. A file already there is
    kept (it holds what a kubelet left in it, as the kernel would). Returns ``directory``:
    the ``sysctl_dir`` of an in-process ``ContainerManager``, or the masks of a test kubelet."""
    for key, wanted in KERNEL_TUNABLES.items():
        file = directory / key
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(f"{(values or {}).get(key, wanted)}\n")
    return directory


def read_kernel_tunables(directory: Path) -> dict[str, str]:
    """What the files of ``write_kernel_tunables`` (or ``/proc/sys``) hold now, by key."""
    return {key: (directory / key).read_text().strip() for key in KERNEL_TUNABLES}


def in_mount_namespace(argv: Sequence[str], mounts: Sequence[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own after ``mounts`` (shell lines; ``/`` is
    made private first, so what they mount on it stays in here). ``unshare`` and ``sh``
    both exec: the process's pid is ``argv``'s own."""
    # Propagation unchanged: a shared mount (the kubelet's root directory) stays a peer of
    # the host's.
    lines = ["set -e", "mount --make-private /", *mounts, "exec " + shlex.join(argv)]
    return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", "\n".join(lines)]


def device_plugin_dir_mounts(host_dir: Path) -> list[str]:
    """Shell lines for ``in_mount_namespace`` that make ``host_dir`` the namespace's
    ``DEVICE_PLUGIN_DIR``. Its mount point is made where missing (an empty directory, on the
    host or in whatever covers ``/var/lib/kubelet`` there)."""
    target = shlex.quote(str(DEVICE_PLUGIN_DIR))
    # Private too when /var/lib or /var is a mount of its own, so the bind stays in here.
    # The last line: with mounts stacked on one path findmnt names each.
    return [f"mkdir -p {target}",
            f'mount --make-private "$(findmnt -n -o TARGET --target {target} | tail -n 1)"',
            f"mount --bind {shlex.quote(str(host_dir))} {target}"]


def write_numa_nodes(directory: Path, cpulists: Sequence[str]) -> Path:
    """``directory`` laid out as ``SYS_NODE_DIR`` for a machine with one NUMA node per entry
    of ``cpulists`` (node N's CPUs in the kernel's list format, ``0-3,8``): ``nodeN/cpulist``,
    any other node directory removed. Returns ``directory``, for ``numa_node_mounts``."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("node*"):
        shutil.rmtree(stale)
    for node, cpus in enumerate(cpulists):
        (directory / f"node{node}").mkdir(exist_ok=True)
        (directory / f"node{node}" / "cpulist").write_text(f"{cpus}\n")
    return directory


def numa_node_mounts(host_dir: Path) -> list[str]:
    """Shell lines for ``in_mount_namespace`` (a ``KubeletProcess.extra_mounts``) that make
    ``host_dir`` (``write_numa_nodes``) the namespace's ``SYS_NODE_DIR``."""
    target = shlex.quote(str(SYS_NODE_DIR))
    # /sys is a mount of its own, shared on systemd hosts: private, so the bind stays in here.
    return [f'mount --make-private "$(findmnt -n -o TARGET --target {target})"',
            f"mount --bind {shlex.quote(str(host_dir))} {target}"]


def masked_command(argv: Sequence[str], *, tunables: Path, extra_mounts: Sequence[str] = (),
                   device_plugin_dir: Path | None = None) -> list[str]:
    """``argv`` run in a mount namespace of its own whose ``/proc/sys`` kernel tunables are
    the files under ``tunables`` (see the module docstring), after ``extra_mounts`` (shell
    lines) and, given ``device_plugin_dir``, with that directory as its ``DEVICE_PLUGIN_DIR``."""
    lines = ["mount --make-rprivate /proc"]
    for key in KERNEL_TUNABLES:
        lines.append(f"mount --bind {shlex.quote(str(tunables / key))} /proc/sys/{key}")
    lines += extra_mounts
    if device_plugin_dir is not None:
        lines += device_plugin_dir_mounts(device_plugin_dir)
    return in_mount_namespace(argv, lines)


def mount_points_under(roots: Sequence[Path], *, including_roots: bool) -> list[str]:
    """Mount points below ``roots`` (and the roots themselves if asked), deepest first."""
    resolved = [str(root.resolve()) for root in roots]
    prefixes = tuple(f"{root}/" for root in resolved)
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        points = [fields[4] for line in info if len(fields := line.split()) > 4
                  and (fields[4].startswith(prefixes)
                       or (including_roots and fields[4] in resolved))]
    return sorted(points, key=len, reverse=True)


def share_root_dir(root: Path) -> None:
    """Make a kubelet's root directory a shared mount of its own (once), the peer through
    which the kubelet's volume mounts reach the host's mount namespace."""
    root.mkdir(parents=True, exist_ok=True)
    if not is_mount_point(str(root)):
        subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
        # Out of the peer group of the mount it was made from (a shared / on systemd
        # hosts): the kubelet's mounts below propagate to the host's copy alone.
        subprocess.run(["mount", "--make-private", str(root)], check=True)
    subprocess.run(["mount", "--make-shared", str(root)], check=True)


def masked_exec(argv: Sequence[str], *, base: Path, root_dir: Path) -> None:
    """Replace this process with ``argv`` (a kubelet) masked as a test kubelet is: its
    kernel tunables the files under ``base/kernel-tunables``, its device-plugin directory
    ``base/device-plugins``, its root directory ``root_dir`` shared with the host (the
    module docstring says why). For scripts that start kubelets (scripts/run-cluster.sh):
    ``python -m testsupport.kubelet_process --base DIR --root-dir DIR -- ARGV...``."""
    share_root_dir(root_dir)
    tunables = write_kernel_tunables(base / "kernel-tunables")
    device_plugin_dir: Path | None = base / "device-plugins"
    if DEVICE_PLUGIN_DIR.is_relative_to(root_dir):
        # /var/lib/kubelet is its root (a test host's own, kubeadm's): the directory is
        # already its own, and masking it would make the root, whose mounts reach the
        # runtime, private.
        device_plugin_dir = None
    else:
        base.joinpath("device-plugins").mkdir(parents=True, exist_ok=True)
    command = masked_command(argv, tunables=tunables, device_plugin_dir=device_plugin_dir)
    os.execvp(command[0], command)


class KubeletProcess:
    """One pykubelet with its own root, log dir, manifests dir and ports."""

    healthz_timeout = HEALTHZ_TIMEOUT_SECONDS
    # Whether it writes a DEPRECATION file into its device-plugin directory, which tells
    # plugins to wait for its plugin watcher instead of calling Register (the Go 1.20 one).
    device_plugin_deprecation = False

    def __init__(self, base: Path, endpoint: str, extra_config: dict[str, Any] | None = None,
                 extra_args: list[str] | None = None, ports: tuple[int, int] | None = None,
                 node_name: str = NODE_NAME, *,
                 kernel_tunables: Mapping[str, int] | None = None) -> None:
        """``kernel_tunables``: the masked kernel tunables' values at the first start, by
        key (tests only; the kubelet's wanted values otherwise)."""
        _KUBELETS.add(self)
        self.base = base
        self.kernel_tunables_dir = base / "kernel-tunables"
        self.starting_kernel_tunables = dict(kernel_tunables or {})
        self.node_name = node_name
        self.endpoint = endpoint
        self.manifests = base / "manifests"
        self.root = base / "root"
        _ROOT_DIRS.add(self.root)
        self.logs_dir = base / "pod-logs"
        self.log_file = base / "kubelet.log"
        # The host's side of its DEVICE_PLUGIN_DIR: kept across restarts, as a node's is.
        self.device_plugin_dir = base / "device-plugins"
        chosen = [port for port in free_ports(5) if port not in (ports or ())]
        self.read_only_port, self.healthz_port = ports or (chosen[0], chosen[1])
        self.port = chosen[2]
        self.cert_dir = base / "pki"
        self.manifests.mkdir(parents=True, exist_ok=True)
        self.device_plugin_dir.mkdir(exist_ok=True)
        config: dict[str, Any] = {
            **self.serving_config(),
            "fileCheckFrequency": "20s",
            "podLogsDir": str(self.logs_dir),
            "containerRuntimeEndpoint": endpoint,
            "syncFrequency": "10s",
            # The test machines run cgroup v1, which the default (true) refuses.
            "failCgroupV1": False,
            # Each kubelet owns a private cgroup tree: kubelets of parallel tests must
            # never see (and clean up) each other's pod cgroups.
            "cgroupRoot": f"/pykubelet-e2e-{secrets.token_hex(4)}",
        }
        config.update(extra_config or {})
        self.cgroup_root = str(config.get("cgroupRoot") or "")
        self.ensure_cgroup_root()
        self.config_path = base / "kubelet.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    def serving_config(self) -> dict[str, Any]:
        """Where a test kubelet listens and what it serves: loopback, its own ports, the
        static pods of its manifests directory, and the kubelet API on its own port with
        no webhooks (standalone: there is no API server to ask)."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "readOnlyPort": self.read_only_port,
            "port": self.port,
            "authentication": {"webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "staticPodPath": str(self.manifests),
            # The host's iptables are not a test's to change.
            "makeIPTablesUtilChains": False,
        }

    # -- process ------------------------------------------------------------

    def ensure_cgroup_root(self) -> None:
        """The cgroupRoot must exist before the kubelet starts (as upstream requires): made
        here, for tests that run this configuration in their own process too, and again at
        each start, since a stop removes it once it is empty."""
        if self.cgroup_root and self.cgroup_root != "/":
            CgroupManager().create(parse_cgroupfs_name(self.cgroup_root))
            _CGROUP_ROOTS.add(self.cgroup_root)

    def command(self) -> list[str]:
        """The kubelet's command line."""
        return [sys.executable, "-m", "pykubelet", "--config", str(self.config_path),
                "--root-dir", str(self.root), "--cert-dir", str(self.cert_dir),
                "--hostname-override", self.node_name,
                "--node-ip", "127.0.0.1", "--v=4", *self.extra_args]

    def extra_mounts(self) -> list[str]:
        """Shell lines run in the kubelet's mount namespace before it starts, after the
        kernel tunables are masked and before its device-plugin directory is bound (what
        else a kubelet must not change on the host)."""
        return []

    def start(self) -> None:
        self.ensure_cgroup_root()
        self.launch()
        self.wait_healthy()

    def launch(self) -> None:
        """Start the process in its own mount namespace (the module docstring says why),
        not waiting for it to serve."""
        self.share_root_dir()
        self.spawn(self.masked_argv())

    def masked_argv(self) -> list[str]:
        """The kubelet's command masked (its kernel tunables' files written first)."""
        write_kernel_tunables(self.kernel_tunables_dir, self.starting_kernel_tunables)
        return masked_command(self.command(), tunables=self.kernel_tunables_dir,
                              extra_mounts=self.extra_mounts(),
                              device_plugin_dir=self.device_plugin_dir)

    def spawn(self, command: Sequence[str]) -> None:
        """Run ``command`` as the kubelet's process, its output to the kubelet's log."""
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self) -> None:
        try:
            self.wait_for(lambda: self.healthz() == "ok", self.healthz_timeout,
                          "kubelet healthz")
        except BaseException:
            self.stop()  # a kubelet that never became healthy must not outlive the test
            raise

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def masked_kernel_tunables(self) -> dict[str, str]:
        """What the kubelet sees in its ``/proc/sys`` for each kernel tunable, by key."""
        return read_kernel_tunables(self.kernel_tunables_dir)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(5)
        _remove_cgroup_root_if_empty(self.cgroup_root)
        self.release_root_dir()
        return code

    def share_root_dir(self) -> None:
        share_root_dir(self.root)

    def release_root_dir(self) -> None:
        """Unmount the root directory's bind mount unless a volume is still mounted below
        it (the pods outlive their kubelet; the next kubelet on this root adopts them) or
        another kubelet runs on the same root."""
        if any(k is not self and k.root == self.root and k.running() for k in list(_KUBELETS)):
            return
        if not mount_points_under([self.root], including_roots=False):
            for point in mount_points_under([self.root], including_roots=True):
                subprocess.run(["umount", point], check=False, capture_output=True)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    # -- manifests ------------------------------------------------------------

    def write_pod(self, manifest: dict[str, Any], filename: str | None = None) -> Path:
        path = self.manifests / (filename or f"{manifest['metadata']['name']}.yaml")
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(yaml.safe_dump(manifest))
        os.replace(tmp, path)
        return path

    # -- what a user sees -----------------------------------------------------

    def healthz(self) -> str | None:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.healthz_port}/healthz", timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            return None

    def probe_metrics(self) -> str:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.read_only_port}/metrics/probes", timeout=5) as response:
            return str(response.read().decode())

    def events(self, reason: str) -> list[str]:
        """Event lines logged with this reason (in standalone mode events go to the log)."""
        return [line for line in self.log_text().splitlines()
                if '"Event occurred"' in line and f'reason="{reason}"' in line]

    def pods(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.read_only_port}/pods", timeout=5) as response:
            body = json.loads(response.read())
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def pod(self, name: str) -> dict[str, Any] | None:
        full = f"{name}-{self.node_name}"
        return next((p for p in self.pods() if p["metadata"]["name"] == full), None)

    def status(self, name: str) -> dict[str, Any]:
        pod = self.pod(name)
        return (pod or {}).get("status") or {}

    def container_status(self, name: str, container: str, init: bool = False) -> dict[str, Any]:
        key = "initContainerStatuses" if init else "containerStatuses"
        for status in self.status(name).get(key) or []:
            if status["name"] == container:
                return dict(status)
        return {}

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        """``polling.wait_until`` that stops at once if pykubelet exits, and ends in its log.

        A condition reading what is not there yet (a file, a status field) is polled again.
        """
        def alive_and_condition() -> Any:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"pykubelet exited ({self.process.returncode}) while "
                                     f"waiting for {what}:\n{self.log_text()[-4000:]}")
            return condition()

        return wait_until(alive_and_condition, timeout, what,
                          ignore=(OSError, KeyError, TypeError, ValueError),
                          on_timeout=lambda: f"kubelet log tail:\n{self.log_text()[-4000:]}")

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
        return dict(self.wait_for(
            lambda: (s := self.status(name)).get("phase") == phase and s, timeout,
            f"pod {name} phase {phase}"))

    def wait_log_lines(self, name: str, container: str, count: int,
                       timeout: float = 30) -> None:
        """Until the runtime's log files of static pod ``name``'s ``container`` hold ``count``
        lines: what a test of log reading needs written first (Running comes sooner)."""
        pattern = f"default_{name}-{self.node_name}_*/{container}/*.log"

        def written() -> bool:
            return sum(len(path.read_bytes().splitlines())
                       for path in self.logs_dir.glob(pattern)) >= count
        self.wait_for(written, timeout, f"{count} log lines of {name}/{container}")


def busybox_pod(name: str, containers: list[dict[str, Any]], image: str,
                **spec: Any) -> dict[str, Any]:
    def with_image(container: dict[str, Any]) -> dict[str, Any]:
        return {"image": image, **container}

    body: dict[str, Any] = {"containers": [with_image(c) for c in containers]}
    if "initContainers" in spec:
        spec["initContainers"] = [with_image(c) for c in spec["initContainers"]]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def runtime_view(endpoint: str) -> dict[str, Any]:
    """The runtime's own view: sandboxes and containers by pod UID label."""

    async def collect() -> dict[str, Any]:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            sandboxes = await service.list_pod_sandboxes()
            containers = await service.list_containers()
        finally:
            await service.close()
        return {"sandboxes": sandboxes, "containers": containers}

    return asyncio.run(collect())


def exec_in(endpoint: str, container_id: str, *command: str) -> int:
    """Run a command in a container through CRI (as ``kubectl exec`` would); its exit code."""
    cid = container_id.split("://", 1)[-1]

    async def run() -> int:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            result = await service.exec_sync(cid, list(command), 10)
        finally:
            await service.close()
        return result.exit_code

    return asyncio.run(run())


def _remove_cgroup_root_if_empty(root: str) -> None:
    """A stopped kubelet's tree goes at once when no pod outlived it (none was adopted)."""
    if root not in _CGROUP_ROOTS:
        return
    cgroups = CgroupManager()
    name = parse_cgroupfs_name(root)
    with contextlib.suppress(CgroupError, OSError):
        if not cgroups.pids(name):
            cgroups.destroy(name)
            _CGROUP_ROOTS.discard(root)


def unmount_pod_volumes() -> None:
    """Unmount the volumes left under this process's kubelet roots (deepest first), then
    the roots' shared bind mounts, but for those of kubelets still running."""
    if not _ROOT_DIRS:
        return
    for point in mount_points_under(sorted(_ROOT_DIRS), including_roots=False):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    running = [k.root for k in list(_KUBELETS) if k.running()]
    idle = [root for root in sorted(_ROOT_DIRS) if root not in running]
    for point in mount_points_under(idle, including_roots=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@atexit.register
def _remove_leftovers() -> None:
    """Whatever a test left (pods that outlived their kubelet) goes with the test process:
    cgroups, volumes, root bind mounts."""
    for root in sorted(_CGROUP_ROOTS):
        with contextlib.suppress(CgroupError, OSError):
            CgroupManager().destroy(parse_cgroupfs_name(root))
    _CGROUP_ROOTS.clear()
    with contextlib.suppress(OSError):
        unmount_pod_volumes()


def remove_everything(endpoint: str) -> None:
    """Stop and remove every sandbox in the testbed, so tests do not leak pods."""

    async def clean() -> None:
        service = RemoteRuntimeService(endpoint, 60)
        await service.connect()
        try:
            for sandbox in await service.list_pod_sandboxes():
                await service.stop_pod_sandbox(sandbox.id)
                await service.remove_pod_sandbox(sandbox.id)
        finally:
            await service.close()

    asyncio.run(clean())
    unmount_pod_volumes()
    # The kubelets' private cgroup trees go once their pods are gone (pods outlive a
    # kubelet restart, so a stopped kubelet's tree stays until here).
    for root in sorted(_CGROUP_ROOTS):
        with contextlib.suppress(CgroupError):
            CgroupManager().destroy(parse_cgroupfs_name(root))
    _CGROUP_ROOTS.clear()


@contextlib.contextmanager
def running_kubelet(base: Path, endpoint: str,
                    extra_config: dict[str, Any] | None = None) -> Iterator[KubeletProcess]:
    """A started pykubelet; stopped, and every pod of the testbed removed, afterwards."""
    process = KubeletProcess(base, endpoint, extra_config=extra_config)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        remove_everything(endpoint)


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m testsupport.kubelet_process",
        description="Run a kubelet command masked as a test kubelet (masked_exec).")
    parser.add_argument("--base", type=Path, required=True,
                        help="the kubelet's own directory (its masks are made there)")
    parser.add_argument("--root-dir", type=Path, required=True,
                        help="the kubelet's --root-dir")
    parser.add_argument("command", nargs="+", help="the kubelet's command line (after --)")
    args = parser.parse_args(argv)
    masked_exec(args.command, base=args.base, root_dir=args.root_dir)


if __name__ == "__main__":
    main()
