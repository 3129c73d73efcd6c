"""The node's IPs as pods see them: ``status.hostIP`` in their env from the first start."""

from __future__ import annotations

from kubernetes_asyncio.client import V1Node, V1NodeAddress, V1NodeStatus, V1ObjectMeta

from pykubelet.api import pod_from_dict
from pykubelet.kubelet.node_info import node_host_ips
from pykubelet.kubelet.pod_sync import KubeletPodSyncer, PodSyncOptions
from pykubelet.kuberuntime.container_config import generate_container_config
from pykubelet.kuberuntime.manager import RuntimeManagerOptions

KUBELET_NODE_IP = "192.168.50.7"


def node_with(*addresses: tuple[str, str]) -> V1Node:
    return V1Node(metadata=V1ObjectMeta(name="node-a"), status=V1NodeStatus(
        addresses=[V1NodeAddress(type=kind, address=address) for kind, address in addresses]))


def test_node_host_ips_are_the_first_internal_ip_and_one_of_the_other_family() -> None:
    assert node_host_ips(None) == []
    assert node_host_ips(V1Node(metadata=V1ObjectMeta(name="node-a"))) == []
    assert node_host_ips(node_with(("Hostname", "node-a"))) == []
    assert node_host_ips(node_with(("Hostname", "node-a"), ("ExternalIP", "203.0.113.9"),
                                   ("InternalIP", "10.0.0.4"), ("InternalIP", "10.0.0.5"))
                         ) == ["10.0.0.4"]
    assert node_host_ips(node_with(("InternalIP", "fd00::4"), ("InternalIP", "10.0.0.4"),
                                   ("InternalIP", "10.0.0.5"))) == ["fd00::4", "10.0.0.4"]
    # ExternalIPs count after every InternalIP; what is not an IP is skipped.
    assert node_host_ips(node_with(("InternalIP", "not-an-ip"), ("ExternalIP", "fd00::9"),
                                   ("InternalIP", "10.0.0.4"))) == ["10.0.0.4", "fd00::9"]


def test_a_pods_first_container_sees_the_node_ip_before_its_status_or_the_node_has_one(
        ) -> None:
    """The first sync of a pod whose status has no hostIP, on a kubelet whose Node the
    API server has not listed yet: HOST_IP is the kubelet's node IP; once the Node
    lists its addresses, the Node's InternalIP, as upstream's ``getHostIPsAnyWay``."""
    node: V1Node | None = None
    syncer = KubeletPodSyncer(PodSyncOptions(root_dir="/unused", host_ip=KUBELET_NODE_IP),
                              None, None, None, None, None,  # none is read here
                              get_node=lambda: node,
                              is_pod_termination_requested=lambda uid: False,
                              abnormal_termination=lambda uid: None)
    opts = RuntimeManagerOptions(node_name="node-a").container_options()
    opts.host_ips = syncer.host_ips
    pod = pod_from_dict({
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-1"},
        "spec": {"nodeName": "node-a", "containers": [{
            "name": "app", "image": "busybox",
            "env": [{"name": "HOST_IP", "valueFrom": {"fieldRef": {
                "fieldPath": "status.hostIP"}}},
                    {"name": "HOST_IPS", "valueFrom": {"fieldRef": {
                        "fieldPath": "status.hostIPs"}}}]}]},
    })
    assert pod.status is None

    def env() -> dict[str, str]:
        config = generate_container_config(pod.spec.containers[0], pod, 0, "sha256:abc", opts)
        return {kv.key: kv.value for kv in config.envs}

    assert env() == {"HOST_IP": KUBELET_NODE_IP, "HOST_IPS": KUBELET_NODE_IP}
    node = node_with(("Hostname", "node-a"))  # registered, no status written yet
    assert env()["HOST_IP"] == KUBELET_NODE_IP
    node = node_with(("InternalIP", "10.0.0.4"), ("InternalIP", "fd00::4"),
                     ("Hostname", "node-a"))
    assert env() == {"HOST_IP": "10.0.0.4", "HOST_IPS": "10.0.0.4,fd00::4"}
    assert syncer.host_ips() == ["10.0.0.4", "fd00::4"]
