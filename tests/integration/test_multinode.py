"""Two pykubelet nodes on one machine, each on a test host of its own (nodehost.sh).

A control plane whose API server listens on the machine's address on the
test hosts' switch, two network namespaces with their node IPs and pod CIDRs,
a containerd, a pykubelet and a kube-proxy in each, and the cluster DNS
(testsupport/cluster_addons.py). What a user of a multi-node cluster
notices: both nodes Ready with their own addresses, pods on different nodes
reaching each other by pod IP, pods reaching the API server at its advertised
address (the ``kubernetes`` Service's endpoint), a hostNetwork pod on a
node seeing that node's network, not the machine's; Services reached by
ClusterIP from pods and nodes, by NodePort from another node, a ClientIP
session staying on one pod; Service names resolved from pods; and the
machine's own iptables and conntrack settings untouched by all of it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testsupport.cluster import api_pod, create, get_pod, is_ready, kubectl_get_nodes, unique
from testsupport.cluster_addons import (
    CLUSTER_DNS_IP,
    CLUSTER_DOMAIN,
    KUBELET_DNS_CONFIG,
    ClusterAddons,
    cluster_addons,
)
from testsupport.controlplane import ControlPlane
from testsupport.nodehost import Node, NodeHost, reachable_control_plane, running_nodes
from testsupport.polling import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

POD_RUNNING_WITHIN_SECONDS = 60.0
# kube-proxy applies a change within its minimum sync period (1 s) of seeing it.
SERVICE_PROGRAMMED_WITHIN_SECONDS = 30.0
DNS_ANSWERS_WITHIN_SECONDS = 30.0
# (busybox-static's own wget -T crashes: the time limit is busybox timeout's.)


def machine_settings() -> dict[str, str]:
    """What kube-proxy would change on the machine if it ran there: conntrack's limits
    and timeouts, and whether its chains exist in the machine's nat table."""
    settings = {path: Path(path).read_text().strip() for path in (
        "/proc/sys/net/netfilter/nf_conntrack_max",
        "/sys/module/nf_conntrack/parameters/hashsize",
        "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established",
        "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait",
        "/proc/sys/net/ipv4/conf/all/route_localnet")}
    nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                         check=True).stdout
    settings["kube-proxy chains in the machine's nat table"] = " ".join(sorted(
        {line.split()[0] for line in nat.splitlines()
         if line.startswith((":KUBE-SERVICES", ":KUBE-NODEPORTS", ":KUBE-SVC-"))}))
    return settings


@dataclass(frozen=True)
class TwoNodes:
    plane: ControlPlane
    nodes: list[Node]
    addons: ClusterAddons
    machine_before: dict[str, str]

    def running_pod(self, node: Node, script: str, *, labels: dict[str, str] | None = None,
                    **spec: Any) -> dict[str, Any]:
        """A busybox pod bound to ``node`` running ``script``, once Running with its IP."""
        name = unique("mn")
        manifest = api_pod(name, node.name, node.testbed.busybox_image, script, **spec)
        manifest["metadata"]["labels"] = labels or {}
        create(self.plane, manifest)

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
    machine_before = machine_settings()
    hosts = NodeHost.fresh_set(2)
    base = tmp_path_factory.mktemp("multinode")
    with contextlib.ExitStack() as stack:
        for host in hosts:
            stack.enter_context(host)
        plane = stack.enter_context(reachable_control_plane(hosts[0].host_address))
        nodes = stack.enter_context(
            running_nodes(plane, hosts, base, extra_config=KUBELET_DNS_CONFIG))
        addons = stack.enter_context(cluster_addons(plane, nodes, dir=base / "addons"))
        # The ServiceAccount admission plugin refuses pods until the namespace's default
        # account exists.
        wait_until(lambda: plane.kubectl("get", "serviceaccount", "default",
                                         check=False).returncode == 0,
                   60, "the default service account")
        yield TwoNodes(plane, nodes, addons, machine_before)


@dataclass(frozen=True)
class Web:
    """Two web pods (``a`` on node 1, ``b`` on node 2, each answering its own name), the
    Services in front of them, and a client pod on node 1."""

    client: dict[str, Any]
    services: dict[str, dict[str, Any]]

    def cluster_ip(self, name: str) -> str:
        return str(self.services[name]["spec"]["clusterIP"])


def web_server(answer: str) -> str:
    return (f"mkdir -p /www && echo {answer} > /www/index.html "
            "&& exec httpd -f -p 8080 -h /www")


@pytest.fixture(scope="module")
def web(cluster: TwoNodes) -> Web:
    first, second = cluster.nodes
    app = unique("web")
    cluster.running_pod(first, web_server("served-by-a"), labels={"app": app, "side": "a"})
    cluster.running_pod(second, web_server("served-by-b"), labels={"app": app, "side": "b"})
    client = cluster.running_pod(first, "sleep 3600")
    only_b = {"app": app, "side": "b"}
    specs: dict[str, dict[str, Any]] = {
        # On node 2 only: a client on node 1 reaches it across nodes.
        f"{app}-b": {"selector": only_b},
        f"{app}-nodeport": {"selector": only_b, "type": "NodePort"},
        f"{app}-spread": {"selector": {"app": app}},
        f"{app}-sticky": {"selector": {"app": app}, "sessionAffinity": "ClientIP"},
    }
    services = {}
    for name, spec in specs.items():
        create(cluster.plane, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}], **spec}})
        services[name.removeprefix(f"{app}-")] = cluster.plane.kubectl_json(
            "get", "service", name)
    return Web(client, services)


def fetch_in_pod(cluster: TwoNodes, pod: dict[str, Any], url: str, times: int = 1) -> list[str]:
    """The answers to ``times`` GETs of ``url`` from ``pod`` (busybox wget), "" for a failure."""
    script = (f"for i in $(seq {times}); do timeout 5 wget -q -O - {url} || echo; done")
    _, output = cluster.exec(pod, "sh", "-c", script)
    return [line.strip() for line in output.splitlines()]


def answered(cluster: TwoNodes, pod: dict[str, Any], url: str,
             times: int = 1) -> list[str] | None:
    """``fetch_in_pod``'s answers when every request was answered, else None."""
    answers = fetch_in_pod(cluster, pod, url, times)
    return answers if len(answers) == times and all(answers) else None


def fetch_on_node(node: Node, url: str) -> str:
    """``url`` fetched by a process on ``node`` (its network namespace, as hostNetwork)."""
    result = node.host.run("curl", "-sS", "--max-time", "5", url)
    return result.stdout.strip() if result.returncode == 0 else result.stderr.strip()


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


def test_a_cluster_ip_service_reaches_a_pod_on_the_other_node(cluster: TwoNodes,
                                                             web: Web) -> None:
    ip = web.cluster_ip("b")
    url = f"http://{ip}/"
    answers = wait_until(lambda: answered(cluster, web.client, url),
                         SERVICE_PROGRAMMED_WITHIN_SECONDS, f"{url} from a pod on node 1")
    assert answers == ["served-by-b"]
    print(f"\npod on node 1 -> ClusterIP {ip}:80 -> pod on node 2: {answers}")
    # From node 1 itself (what a hostNetwork pod sees): kube-proxy's OUTPUT rules.
    assert fetch_on_node(cluster.nodes[0], url) == "served-by-b"


def test_a_node_port_is_reached_from_another_node(cluster: TwoNodes, web: Web) -> None:
    first, second = cluster.nodes
    node_port = web.services["nodeport"]["spec"]["ports"][0]["nodePort"]
    url = f"http://{first.host.node_ip}:{node_port}/"
    # node 2 -> node 1's NodePort -> (masqueraded) back to the pod on node 2.
    answer = wait_until(lambda: fetch_on_node(second, url) == "served-by-b" and "served-by-b",
                        SERVICE_PROGRAMMED_WITHIN_SECONDS, f"{url} from node 2",
                        on_timeout=lambda: fetch_on_node(second, url))
    print(f"\nnode 2 -> node 1's NodePort {url} -> pod on node 2: {answer}")


def test_client_ip_session_affinity_keeps_a_client_on_one_pod(cluster: TwoNodes,
                                                             web: Web) -> None:
    spread_url = f"http://{web.cluster_ip('spread')}/"
    # Without affinity the two pods share the requests: both are programmed on node 1.
    wait_until(lambda: set(fetch_in_pod(cluster, web.client, spread_url, times=10))
               == {"served-by-a", "served-by-b"},
               SERVICE_PROGRAMMED_WITHIN_SECONDS, f"both pods answering {spread_url}")
    sticky_url = f"http://{web.cluster_ip('sticky')}/"
    answers = wait_until(lambda: answered(cluster, web.client, sticky_url, times=10),
                         SERVICE_PROGRAMMED_WITHIN_SECONDS, f"{sticky_url} from a pod")
    assert answers is not None and len(set(answers)) == 1, answers
    print(f"\n10 requests to the ClientIP-affinity Service: all {answers[0]}")


def test_pods_resolve_service_names_through_the_cluster_dns(cluster: TwoNodes,
                                                           web: Web) -> None:
    status, resolv_conf = cluster.exec(web.client, "cat", "/etc/resolv.conf")
    assert status == 0, resolv_conf
    assert f"nameserver {CLUSTER_DNS_IP}" in resolv_conf, resolv_conf
    assert f"search default.svc.{CLUSTER_DOMAIN}" in resolv_conf, resolv_conf
    service = web.services["b"]["metadata"]["name"]
    for name, address in ((f"kubernetes.default.svc.{CLUSTER_DOMAIN}", "10.96.0.1"),
                          (f"{service}.default.svc.{CLUSTER_DOMAIN}", web.cluster_ip("b"))):
        def resolved(name: str = name, address: str = address) -> str | None:
            status, output = cluster.exec(web.client, "nslookup", name)
            return output if status == 0 and f"Address: {address}" in output else None

        output = wait_until(resolved, DNS_ANSWERS_WITHIN_SECONDS, f"{name} from a pod")
        print(f"\nnslookup {name} in a pod on node 1:\n{output}")


def test_nodes_query_the_cluster_dns_over_tcp(cluster: TwoNodes) -> None:
    # Through node 2's kube-proxy to the server on the machine: its INPUT lets it in.
    name = f"kubernetes.default.svc.{CLUSTER_DOMAIN}"
    result = cluster.nodes[1].host.run("dig", "+tcp", "+short", "+time=3", "+tries=2",
                                       f"@{CLUSTER_DNS_IP}", name)
    assert (result.returncode, result.stdout.strip()) == (0, "10.96.0.1"), result
    print(f"\ndig +tcp @{CLUSTER_DNS_IP} {name} on node 2: {result.stdout.strip()} "
          f"(served at {cluster.addons.dns_endpoint})")


def test_the_machine_keeps_its_own_conntrack_settings_and_iptables(cluster: TwoNodes) -> None:
    assert machine_settings() == cluster.machine_before
    # Each node's kube-proxy programs its own namespace.
    for proxy in cluster.addons.proxies:
        assert ":KUBE-SERVICES" in proxy.nat_rules(), proxy.node_name



def test_a_pods_volumes_reach_its_containers_and_its_logs_are_its_nodes(
        cluster: TwoNodes) -> None:
    # The kubelet mounts them in its own mount namespace, containerd runs in the node's:
    # a secret's tmpfs, the service-account token and a subPath bind must all get there,
    # and the container's log must be where the kubelet reads it (kubectl logs).
    second = cluster.nodes[1]
    image = second.testbed.busybox_image
    secret = unique("mn-secret")
    cluster.plane.kubectl("create", "secret", "generic", secret, "--from-literal=key=from-secret")
    script = ("cat /secret/key && echo && cat /sub/file "
              "&& test -s /var/run/secrets/kubernetes.io/serviceaccount/token "
              "&& echo token-present && sleep 3600")
    pod = cluster.running_pod(
        second, script, automount=True,
        volumes=[{"name": "secret", "secret": {"secretName": secret}},
                 {"name": "scratch", "emptyDir": {}}],
        initContainers=[{"name": "prepare", "image": image,
                         "command": ["sh", "-c", "mkdir -p /scratch/dir "
                                     "&& echo from-sub-path > /scratch/dir/file"],
                         "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
        containers=[{"name": "app", "image": image, "command": ["sh", "-c", script],
                     "volumeMounts": [{"name": "secret", "mountPath": "/secret"},
                                      {"name": "scratch", "mountPath": "/sub",
                                       "subPath": "dir"}]}])
    name = pod["metadata"]["name"]

    def logs() -> str | None:
        output = str(cluster.plane.kubectl("logs", name, check=False).stdout)
        return output if output.endswith("token-present\n") else None

    def shown() -> str:
        result = cluster.plane.kubectl("logs", name, check=False)
        return (f"kubectl logs: {result.stdout}{result.stderr}\n"
                + cluster.plane.kubectl("describe", "pod", name, check=False).stdout)

    output = wait_until(logs, POD_RUNNING_WITHIN_SECONDS, f"the logs of {name}",
                        on_timeout=shown)
    assert output == "from-secret\nfrom-sub-path\ntoken-present\n", output
    print(f"\nkubectl logs {name} (node 2):\n{output}")
