"""The upstream Go kubelet (v1.20, built from Debian's source) as a process beside pykubelet.

Benchmarks (``bench/peer.py``) and the conformance harness
(``testsupport/conformance.py``) run it on the same containerd testbed as
pykubelet, with the same handle (ports, manifests, ``/pods``), so that one
run compares the two; on a test host of ``nodehost.py`` it is
``NodeGoKubelet``. It is kept from touching the host as pykubelet is
(``KubeletProcess``): no iptables chains, its own root, cert, log and
cgroupRoot, and the same mount namespace of its own, where the kernel settings
it would otherwise rewrite (``protectKernelDefaults: false``; 1.20 wants the
same six as pykubelet's ``KERNEL_TUNABLES``) are files already holding the
values it wants, and whose one mount shared with the host
is its root directory (the volumes it mounts there must be seen by
containerd, or every container finds its secret, configMap and downward API
directories empty). Its fixed ``/var/lib/kubelet`` is covered there too, and
below it its device-plugin directory is its own ``device_plugin_dir``, as
pykubelet's. What it still leaves outside its base directory (cgroups, pod log
entries, that bind mount) ``remove_leftovers`` removes.
"""

from __future__ import annotations

import contextlib
import glob
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from pykubelet.cri.errors import CRIError
from pykubelet.volumemanager.mount import is_mount_point
from testsupport.kubelet_process import KubeletProcess, remove_everything
from testsupport.nodehost import NodeHost, launch_on_host
from testsupport.polling import wait_until

HEALTHZ_TIMEOUT_SECONDS = 60.0
# How long a stopped kubelet's pods may take to become removable.
REMOVE_SECONDS = 60.0
CGROUP_FS = Path("/sys/fs/cgroup")
# The Go kubelet 1.20 cannot be told another pod log directory.
GO_POD_LOGS = Path("/var/log/pods")
GO_CONTAINER_LOGS = Path("/var/log/containers")
GO_FIXED_DIR = Path("/var/lib/kubelet")


class GoKubeletProcess(KubeletProcess):
    """The upstream Go kubelet, with the same handle (ports, manifests, /pods) as pykubelet's."""

    healthz_timeout = HEALTHZ_TIMEOUT_SECONDS
    device_plugin_deprecation = True

    def __init__(self, base: Path, endpoint: str, binary: Path, node_name: str,
                 extra_config: dict[str, Any], extra_args: list[str]) -> None:
        super().__init__(base, endpoint, node_name=node_name, extra_args=extra_args)
        self.binary = binary
        self.cgroup_root = f"/{base.parent.name}-{base.name}"
        self.log_dir = base / "klog"
        config: dict[str, Any] = {
            **self.serving_config(),
            "authentication": {"webhook": {"enabled": False}, "anonymous": {"enabled": True}},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "protectKernelDefaults": False,
            **extra_config,
        }
        self.config_path.write_text(yaml.safe_dump(config))

    def command(self) -> list[str]:
        return [str(self.binary), "--config", str(self.config_path),
                "--root-dir", str(self.root), "--cert-dir", str(self.cert_dir),
                "--hostname-override", self.node_name, "--node-ip", "127.0.0.1",
                "--container-runtime", "remote",
                "--container-runtime-endpoint", self.endpoint,
                "--log-dir", str(self.log_dir), *self.extra_args]

    def extra_mounts(self) -> list[str]:
        """Its device-plugin directory (sockets and the device manager's checkpoint) is
        fixed below /var/lib/kubelet in 1.20: cover that with a directory of ours, so that
        nothing it writes there reaches the host's, before ``device_plugin_dir`` is bound
        in it. The mount point is made on the host where missing (an empty directory, left
        there: another test kubelet may be using it)."""
        GO_FIXED_DIR.mkdir(parents=True, exist_ok=True)
        own = self.base / "var-lib-kubelet"
        own.mkdir(exist_ok=True)
        # Private too when /var/lib or /var is a mount of its own.
        return [f'mount --make-private "$(findmnt -n -o TARGET --target {GO_FIXED_DIR})"',
                f"mount --bind {shlex.quote(str(own))} {GO_FIXED_DIR}"]

    def start(self) -> None:
        # 1.20 refuses to start unless its cgroupRoot already exists in every hierarchy.
        for hierarchy in cgroup_hierarchies():
            (hierarchy / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.launch()
        self.wait_healthy()

    def remove_leftovers(self) -> None:
        """What it made outside its base directory: cgroups and pod log entries."""
        # It also makes its tree in the hybrid host's cgroup v2 hierarchy, unasked.
        for hierarchy in (*cgroup_hierarchies(), CGROUP_FS / "unified"):
            remove_cgroup_tree(hierarchy / self.cgroup_root.lstrip("/"))
        remove_container_log_links(self.node_name)
        # Its static pods', in whatever namespace (their names end in the node's).
        for path in glob.glob(str(GO_POD_LOGS / f"*_*-{self.node_name}_*")):
            shutil.rmtree(path, ignore_errors=True)
        if is_mount_point(str(self.root)):
            subprocess.run(["umount", "--lazy", "--recursive", str(self.root)], check=False)


def remove_container_log_links(node_name: str) -> None:
    """The /var/log/containers links a kubelet left for its static pods."""
    for path in glob.glob(str(GO_CONTAINER_LOGS / f"*-{node_name}_*_*.log")):
        Path(path).unlink(missing_ok=True)


@contextlib.contextmanager
def standalone_go_kubelet(base: Path, endpoint: str, binary: Path,
                          node_name: str) -> Iterator[GoKubeletProcess]:
    """The Go kubelet running standalone (static pods only) as ``node_name``; stopped
    afterwards, its pods removed through CRI and its leftovers with them."""
    kubelet = GoKubeletProcess(base, endpoint, binary, node_name, {}, [])
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()

        def removed() -> bool:
            remove_everything(endpoint)
            return True

        try:
            # A container the stopped kubelet was still starting cannot be removed yet.
            wait_until(removed, REMOVE_SECONDS, "the Go kubelet's pods removed",
                       interval=2, ignore=(CRIError,))
        finally:
            kubelet.remove_leftovers()


def cgroup_hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (symlinked co-mounts such as cpu,cpuacct counted once)."""
    return [path for path in sorted(CGROUP_FS.iterdir())
            if path.is_dir() and not path.is_symlink() and path.name != "unified"]


def remove_cgroup_tree(path: Path) -> None:
    """rmdir bottom-up; a cgroup still holding a process stays (and is reported)."""
    if not path.is_dir():
        return
    for child in sorted((p for p in path.rglob("*") if p.is_dir()),
                        key=lambda p: len(p.parts), reverse=True):
        try:
            child.rmdir()
        except OSError as err:
            print(f"cannot remove cgroup {child}: {err}", file=sys.stderr)
    try:
        path.rmdir()
    except OSError as err:
        print(f"cannot remove cgroup {path}: {err}", file=sys.stderr)


class NodeGoKubelet(GoKubeletProcess):
    """The Go kubelet on test host ``host`` (``nodehost.py``), as ``NodeKubelet`` runs pykubelet.

    In the host's network and mount namespaces (``nodehost.launch_on_host``),
    then a mount namespace of its own as ``KubeletProcess``'s (the kernel
    tunables masked, its root directory shared with containerd in the host's):
    the fixed /var/log/pods and /var/log/containers it writes and
    garbage-collects are its host's, never another Go kubelet's or the
    machine's. ``--node-ip`` the node IP, its own root directory and cgroup
    root as beside pykubelet. The iptables it sees
    are the node's own; ``makeIPTablesUtilChains`` stays off as for every test
    kubelet (kube-proxy makes its chains itself). It listens on every address of
    the node's namespace: the API server and this process reach it at the node IP.
    """

    def __init__(self, host: NodeHost, base: Path, endpoint: str, binary: Path,
                 node_name: str, extra_config: dict[str, Any], extra_args: list[str]) -> None:
        # Read by serving_config, which the base class calls.
        self.host = host
        super().__init__(base, endpoint, binary, node_name, extra_config,
                         [*extra_args, "--node-ip", host.node_ip])

    def serving_config(self) -> dict[str, Any]:
        return {**super().serving_config(), "address": "0.0.0.0",
                "healthzBindAddress": "0.0.0.0"}

    def extra_mounts(self) -> list[str]:
        # /var/lib/kubelet is the host's own already (nodehost.sh): nothing to cover. (A
        # second mount stacked on it would also give the device-plugin lines of
        # masked_command two mount points for one findmnt --target.)
        return []

    def launch(self) -> None:
        launch_on_host(self, self.host)

    def share_root_dir(self) -> None:
        self.host.share_dir(self.root)

    def healthz(self) -> str | None:
        try:
            with urllib.request.urlopen(f"http://{self.host.node_ip}:{self.healthz_port}/healthz",
                                        timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            return None
