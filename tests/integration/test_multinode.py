"""Two pykubelet nodes on one machine, each on a test host of its own (nodehost.sh).

A control plane whose API server listens on the machine's address on the
test hosts' switch, two network namespaces with their node IPs and pod CIDRs,
a containerd and a pykubelet in each. What a user of a multi-node cluster
notices: both nodes Ready with their own addresses, pods on different nodes
reaching each other by pod IP, pods reaching the API server at its advertised
address (the ``kubernetes`` Service's endpoint), and a hostNetwork pod on a
node seeing that node's network, not the machine's.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testsupport.cluster import api_pod, create, get_pod, is_ready, kubectl_get_nodes, unique
from testsupport.controlplane import ControlPlane
from testsupport.nodehost import Node, NodeHost, reachable_control_plane, running_nodes
from testsupport.polling import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

POD_RUNNING_WITHIN_SECONDS = 60.0
# (busybox-static's own wget -T crashes: the time limit is busybox timeout's.)


@dataclass(frozen=True)
class TwoNodes:
    plane: ControlPlane
    nodes: list[Node]

    def running_pod(self, node: Node, script: str, **spec: Any) -> dict[str, Any]:
        """A busybox pod bound to ``node`` running ``script``, once Running with its IP."""
        name = unique("mn")
        create(self.plane, api_pod(name, node.name, node.testbed.busybox_image, script, **spec))

        def running() -> dict[str, Any] | None:
            pod = get_pod(self.plane, name)
            status = (pod or {}).get("status") or {}
            return pod if status.get("phase") == "Running" and status.get("podIP") else None

        pod = wait_until(running, POD_RUNNING_WITHIN_SECONDS, f"pod {name} Running on {node.name}")
        assert pod is not None
        return pod

    def exec(self, pod: dict[str, Any], *command: str) -> tuple[int, str]:
        """``kubectl exec`` (through the API server to the pod's kubelet): status, output."""
        result = self.plane.kubectl("exec", pod["metadata"]["name"], "--", *command,
                                    check=False)
        return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    hosts = NodeHost.fresh_set(2)
    with contextlib.ExitStack() as stack:
        for host in hosts:
            stack.enter_context(host)
        plane = stack.enter_context(reachable_control_plane(hosts[0].host_address))
        nodes = stack.enter_context(
            running_nodes(plane, hosts, tmp_path_factory.mktemp("multinode")))
        # The ServiceAccount admission plugin refuses pods until the namespace's default
        # account exists.
        wait_until(lambda: plane.kubectl("get", "serviceaccount", "default",
                                         check=False).returncode == 0,
                   60, "the default service account")
        yield TwoNodes(plane, nodes)


def internal_ip(node: dict[str, Any]) -> str | None:
    return next((a["address"] for a in node["status"].get("addresses") or []
                 if a["type"] == "InternalIP"), None)


def test_both_nodes_are_ready_with_their_own_node_ips(cluster: TwoNodes) -> None:
    shown = kubectl_get_nodes(cluster.plane)
    for node in cluster.nodes:
        api_node = node.kubelet.node()
        assert api_node is not None and is_ready(api_node), shown
        assert internal_ip(api_node) == node.host.node_ip, api_node["status"]["addresses"]
        assert node.name in shown
    print(f"\n{shown}")


def test_a_pod_reaches_a_pod_on_the_other_node_by_pod_ip(cluster: TwoNodes) -> None:
    first, second = cluster.nodes
    server = cluster.running_pod(second, "mkdir -p /www && echo served-by-node-2 "
                                 "> /www/index.html && exec httpd -f -p 8080 -h /www")
    client = cluster.running_pod(first, "sleep 3600")
    server_ip, client_ip = server["status"]["podIP"], client["status"]["podIP"]
    assert ipaddress.ip_address(server_ip) in ipaddress.ip_network(second.host.pod_cidr)
    assert ipaddress.ip_address(client_ip) in ipaddress.ip_network(first.host.pod_cidr)

    status, output = cluster.exec(client, "ping", "-c", "2", "-W", "3", server_ip)
    assert status == 0, output
    print(f"\nping {client_ip} (node 1) -> {server_ip} (node 2):\n{output}")
    status, output = cluster.exec(client, "timeout", "10", "wget", "-q", "-O", "-",
                                  f"http://{server_ip}:8080/")
    assert (status, output.strip()) == (0, "served-by-node-2")


def test_a_pod_reaches_the_api_server_at_its_advertised_address(cluster: TwoNodes) -> None:
    endpoints = cluster.plane.kubectl_json("get", "endpoints", "kubernetes")
    subset = endpoints["subsets"][0]
    address, port = subset["addresses"][0]["ip"], subset["ports"][0]["port"]
    assert address == cluster.nodes[0].host.host_address
    client = cluster.running_pod(cluster.nodes[1], "sleep 3600")

    status, output = cluster.exec(client, "timeout", "10", "wget", "-q", "-O", "-",
                                  "--no-check-certificate", f"https://{address}:{port}/version")
    assert status == 0 and '"gitVersion"' in output, output
    print(f"\npod on node 2 -> https://{address}:{port}/version:\n{output}")


def test_a_host_network_pod_sees_its_nodes_ip(cluster: TwoNodes) -> None:
    first = cluster.nodes[0]
    pod = cluster.running_pod(first, "sleep 3600", hostNetwork=True)
    assert pod["status"]["podIP"] == first.host.node_ip

    status, output = cluster.exec(pod, "ip", "-4", "-o", "addr", "show")
    assert status == 0, output
    addresses = {line.split()[3].split("/")[0] for line in output.splitlines()
                 if " inet " in line}
    # Its node's: loopback, the node IP and its pod bridge's gateway; not the machine's.
    gateway = str(next(ipaddress.ip_network(first.host.pod_cidr).hosts()))
    assert first.host.node_ip in addresses, output
    assert addresses <= {"127.0.0.1", first.host.node_ip, gateway}, output
    print(f"\nhostNetwork pod on node 1 sees {sorted(addresses)}")
