"""Test hosts: several nodes on one machine, each in a network and a mount namespace of its own.

``scripts/testbed/nodehost.sh`` makes them (a network namespace per node with
its node IP on a cluster switch, its pod CIDR routed through it, the host one
more port of the switch; a mount namespace per node where the fixed paths
kubelets insist on, /var/log/pods, /var/log/containers, /var/lib/kubelet,
/var/lib/etcd, /etc, are the node's own); this module drives it and runs on
each host what a node runs: a containerd testbed (``NodeTestbed``:
``containerd.sh start --netns --pod-subnet --mountns``) and a pykubelet
(``NodeKubelet``), both in the node's two namespaces. The kubelet then gets
its masked mount namespace (``kubelet_process.masked_command``) on top of the
node's, its root directory a shared mount made in the node's namespace
(``launch_on_host``), so that its volume mounts reach containerd there. Those
mounts are never seen from the machine's namespace and go with the node's.

A node's kubelet listens on every address of its namespace, on the ports a
test kubelet always gets; the test process reaches them at the node IP. Its
``--node-ip`` is the node IP, its cgroupRoot one of its own (``KubeletProcess``
picks a fresh one per kubelet).

``running_nodes`` starts a whole set on a control plane whose API server pods
reach: ``reachable_control_plane`` (``ControlPlane(advertise_address=...)``, the host's
address on the switch).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testsupport.cluster import ClusterKubelet, unique
from testsupport.controlplane import ControlPlane, running_control_plane
from testsupport.kubelet_process import (
    KubeletProcess,
    remove_everything,
)
from testsupport.testbed import (
    DEFAULT_IMAGES_DIR,
    SCRIPTS_DIR,
    Testbed,
    TestbedError,
    run_script,
    script_failure,
)

NODEHOST_SCRIPT = SCRIPTS_DIR / "nodehost.sh"
SCRIPT_TIMEOUT_SECONDS = 60.0
MAX_INDEX = 200


class NodeHostError(RuntimeError):
    """nodehost.sh failed; the message includes its output."""


def _nodehost(*args: str) -> str:
    argv = [str(NODEHOST_SCRIPT), *args]
    result = run_script(argv, env=dict(os.environ), timeout=SCRIPT_TIMEOUT_SECONDS,
                        failed=lambda what, output: NodeHostError(
                            script_failure(argv, what, output)))
    return result.stdout


def _facts(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def used_indexes() -> set[int]:
    """The indexes of the test hosts there are now (``nodehost.sh status``)."""
    used = set()
    for line in _nodehost("status").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].isdigit():
            used.add(int(fields[1]))
    return used


class NodeHost:
    """One test host: network namespace ``pykn-NAME``, node IP, pod CIDR (nodehost.sh)."""

    def __init__(self, name: str, index: int) -> None:
        self.name = name
        self.index = index
        self._facts: dict[str, str] = {}

    @classmethod
    def fresh_set(cls, count: int, prefix: str = "pyk") -> list[NodeHost]:
        """``count`` hosts with new names and indexes no host on the machine has now."""
        used = used_indexes()
        free = [index for index in range(1, MAX_INDEX + 1) if index not in used][:count]
        if len(free) < count:
            raise NodeHostError(f"no {count} free test-host indexes (taken: {sorted(used)})")
        return [cls(unique(prefix), index) for index in free]

    @classmethod
    def existing(cls, name: str) -> NodeHost:
        """The test host ``name`` someone else created (``nodehost.sh env``)."""
        facts = _facts(_nodehost("env", name))
        host = cls(name, int(facts["NODE_INDEX"]))
        host._facts = facts
        return host

    def create(self) -> None:
        self._facts = _facts(_nodehost("create", self.name, str(self.index)))

    def delete(self) -> None:
        """Remove the namespace (ending what still runs in it) and the routes to its pods."""
        _nodehost("delete", self.name)
        self._facts = {}

    def __enter__(self) -> NodeHost:
        try:
            self.create()
        except BaseException:
            with contextlib.suppress(NodeHostError):
                self.delete()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.delete()

    def _fact(self, key: str) -> str:
        if key not in self._facts:
            raise NodeHostError(f"test host {self.name} is not created (no {key})")
        return self._facts[key]

    @property
    def netns_path(self) -> str:
        """``/run/netns/pykn-NAME``, as ``nsenter --net=`` takes it."""
        return self._fact("NODE_NETNS_PATH")

    @property
    def mountns_path(self) -> str:
        """The node's mount namespace file, as ``nsenter --mount=`` takes it."""
        path = self._fact("NODE_MOUNTNS_PATH")
        if not path:
            raise NodeHostError(f"test host {self.name} has no mount namespace")
        return path

    @property
    def dir(self) -> Path:
        """The node's directory: what its mount namespace binds and overlays
        (``bind_var_log_pods``, ``upper_etc``, ...)."""
        return Path(self._fact("NODE_DIR"))

    @property
    def node_ip(self) -> str:
        return self._fact("NODE_IP")

    @property
    def pod_cidr(self) -> str:
        return self._fact("POD_CIDR")

    @property
    def host_address(self) -> str:
        """The machine's own address on the switch: what nodes and pods reach it at."""
        return self._fact("HOST_ADDRESS")

    def nsenter(self, argv: list[str]) -> list[str]:
        """``argv`` run in this host's network namespace (mounts stay the machine's)."""
        return ["nsenter", f"--net={self.netns_path}", *argv]

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` run in this host's mount and network namespaces: as on the node."""
        # Entering a mount namespace moves to its root: the working directory kept.
        return ["nsenter", f"--mount={self.mountns_path}", f"--net={self.netns_path}",
                f"--wd={os.getcwd()}", *argv]

    def share_dir(self, path: Path) -> None:
        """Make ``path`` a shared mount of its own in the host's mount namespace (once): a
        kubelet's root directory, through which the volumes it mounts in its masked
        namespace reach containerd in the host's."""
        path.mkdir(parents=True, exist_ok=True)
        script = ('mountpoint -q "$1" || { mount --bind "$1" "$1" && mount --make-private "$1"; }'
                  '\nmount --make-shared "$1"')
        subprocess.run(["nsenter", f"--mount={self.mountns_path}", "sh", "-ec", script, "sh",
                        str(path)], check=True, capture_output=True, timeout=30)

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command on this host (its network namespace); never raises on its status."""
        return subprocess.run(self.nsenter(list(argv)), capture_output=True, text=True,
                              timeout=timeout, check=False)


class NodeTestbed(Testbed):
    """A containerd testbed running in ``host``'s namespace, its pods in its pod CIDR."""

    __test__ = False

    def __init__(self, host: NodeHost, dir: str | Path | None = None,
                 images_dir: str | Path = DEFAULT_IMAGES_DIR) -> None:
        super().__init__(dir or Path("/tmp") / f"pkt-{secrets.token_hex(4)}", images_dir)
        self.host = host

    def start(self) -> None:
        # containerd.sh keeps the options in DIR/network: a later start (start_daemon
        # after stop_daemon) and stop find them there.
        self._containerd("start", "--netns", self.host.netns_path,
                         "--pod-subnet", self.host.pod_cidr,
                         "--mountns", self.host.mountns_path)

    def start_daemon(self) -> None:
        self.start()


def launch_on_host(kubelet: KubeletProcess, host: NodeHost) -> None:
    """``KubeletProcess.launch`` on ``host``: the kubelet masked as every test kubelet is,
    but in a mount namespace made from the host's (and in its network), its root directory
    shared there. Not waiting for it to serve."""
    host.share_dir(kubelet.root)
    kubelet.spawn(host.enter(kubelet.masked_argv()))


class NodeKubelet(ClusterKubelet):
    """pykubelet on test host ``host`` (``--node-ip`` its node IP), as node ``node_name``.

    The kubelet API authenticates the API server by the cluster CA's client
    certificate and allows what it asks (``kubectl logs``/``exec`` through the
    API server work); no webhooks.
    """

    def __init__(self, host: NodeHost, base: Path, endpoint: str, plane: ControlPlane,
                 node_name: str, *, kubeconfig: Path | None = None,
                 extra_config: dict[str, Any] | None = None,
                 extra_args: list[str] | None = None) -> None:
        # Read by serving_config, which the base class calls.
        self.host = host
        self._client_ca = plane.ca_cert
        super().__init__(base, endpoint, plane, node_name, kubeconfig=kubeconfig,
                         extra_config=extra_config,
                         extra_args=["--node-ip", host.node_ip, *(extra_args or [])])

    def serving_config(self) -> dict[str, Any]:
        return {
            **super().serving_config(),
            # Every address of the node's namespace: the API server comes to the node IP.
            "address": "0.0.0.0",
            "healthzBindAddress": "0.0.0.0",
            "authentication": {"x509": {"clientCAFile": str(self._client_ca)},
                               "anonymous": {"enabled": False},
                               "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
        }

    def launch(self) -> None:
        launch_on_host(self, self.host)

    def share_root_dir(self) -> None:
        self.host.share_dir(self.root)

    def _get(self, port: int, path: str, timeout: float) -> str:
        with urllib.request.urlopen(f"http://{self.host.node_ip}:{port}{path}",
                                    timeout=timeout) as response:
            return str(response.read().decode())

    def healthz(self) -> str | None:
        try:
            return self._get(self.healthz_port, "/healthz", 2)
        except OSError:
            return None

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self._get(self.read_only_port, "/pods", 5)).get("items") or []
        return items

    def metrics(self) -> str:
        return self._get(self.read_only_port, "/metrics", 5)


def reachable_control_plane(address: str) -> contextlib.AbstractContextManager[ControlPlane]:
    """A fresh control plane whose API server listens on and advertises ``address`` (an
    address of this machine, e.g. ``NodeHost.host_address``): the ``kubernetes`` Service's
    endpoint, reachable from every test host and pod. Built first if need be."""
    return running_control_plane(advertise_address=address)


@dataclass(frozen=True)
class Node:
    """One running node: its test host, containerd and kubelet."""

    host: NodeHost
    testbed: NodeTestbed
    kubelet: NodeKubelet

    @property
    def name(self) -> str:
        return self.kubelet.node_name


@contextlib.contextmanager
def running_nodes(plane: ControlPlane, hosts: list[NodeHost], base: Path, *,
                  extra_config: dict[str, Any] | None = None) -> Iterator[list[Node]]:
    """A containerd and a pykubelet on each of ``hosts`` (created already), joined to
    ``plane`` with node credentials, once every Node is Ready. Afterwards the kubelets are
    stopped, their Nodes deleted, their pods and testbeds removed."""
    nodes: list[Node] = []
    # Every kubelet stops before any testbed goes: removing a testbed's pods also removes
    # the cgroup trees of every kubelet this process started.
    with contextlib.ExitStack() as testbeds, contextlib.ExitStack() as kubelets:
        for host in hosts:
            testbed = NodeTestbed(host)
            testbeds.callback(remove_testbed, testbed)
            testbed.build_images()
            testbed.start()
            name = host.name
            kubelet = NodeKubelet(host, base / name, testbed.endpoint, plane, name,
                                  kubeconfig=plane.node_kubeconfig(name),
                                  extra_config=extra_config)
            kubelets.callback(_stop_kubelet, kubelet)
            kubelet.start()
            nodes.append(Node(host, testbed, kubelet))
        for node in nodes:
            node.kubelet.wait_ready(60)
        yield nodes


def _stop_kubelet(kubelet: NodeKubelet) -> None:
    kubelet.stop()
    kubelet.delete_node()


def remove_testbed(testbed: NodeTestbed) -> None:
    """Stop ``testbed`` and remove all it ran; nothing raised (a clean-up step)."""
    if testbed.is_running():
        # Through CRI first: CNI releases the addresses; then the kubelets' volumes and
        # cgroup trees (remove_everything), then the daemon and its directory.
        with contextlib.suppress(Exception):
            remove_everything(testbed.endpoint)
    with contextlib.suppress(TestbedError):
        testbed.stop()
