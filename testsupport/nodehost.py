"""Test hosts: several nodes on one machine, each in a network namespace of its own.

``scripts/testbed/nodehost.sh`` does the network (a namespace per node with
its node IP on a cluster switch, its pod CIDR routed through it, the host one
more port of the switch); this module drives it and runs on each host what a
node runs: a containerd testbed (``NodeTestbed``: ``containerd.sh start
--netns --pod-subnet``) and a pykubelet (``NodeKubelet``), both under
``nsenter --net`` and nothing else, so they keep the host's mount namespace
(the kubelet's volume mounts must be seen by containerd and runc).

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
from testsupport.kubelet_process import remove_everything
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
                         "--pod-subnet", self.host.pod_cidr)

    def start_daemon(self) -> None:
        self.start()


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

    def command(self) -> list[str]:
        # Inside the mount namespace KubeletProcess makes (masked kernel tunables): only
        # the network namespace changes, so its root directory's mounts still reach the host.
        return self.host.nsenter(super().command())

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
