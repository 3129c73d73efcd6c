"""Admission: which pods the node refuses, with the reason and message the API will show."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Node

from pykubelet.api import from_dict, pod_from_dict
from pykubelet.api.kubetypes import CONFIG_SOURCE_ANNOTATION_KEY
from pykubelet.config.types import Taint
from pykubelet.kubelet.node_info import LocalNode
from pykubelet.lifecycle.admission import (
    PodAdmitAttributes,
    PredicateAdmitHandler,
    SysctlAllowlist,
    normalize_sysctl_name,
    safe_sysctl_allowlist,
)


def node(labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         **allocatable: str) -> V1Node:
    return from_dict({
        "metadata": {"name": "n1", "labels": labels or {"kubernetes.io/os": "linux"}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10",
                                   "ephemeral-storage": "10Gi", **allocatable}},
    }, V1Node)


def pod(name: str = "p", source: str = "api", requests: dict[str, str] | None = None,
        ports: list[dict[str, Any]] | None = None, **spec: Any) -> Any:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": requests}
    if ports:
        container["ports"] = ports
    return pod_from_dict({
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "annotations": {CONFIG_SOURCE_ANNOTATION_KEY: source}},
        "spec": {"nodeName": "n1", "containers": [container], **spec}})


def admit(candidate: Any, others: list[Any] | None = None,
          the_node: V1Node | None = None) -> tuple[bool, str, str]:
    handler = PredicateAdmitHandler(lambda: the_node or node())
    # The handlers' checks are pure; the coroutine runs at once.
    result = asyncio.run(handler.admit(PodAdmitAttributes(candidate, others or [])))
    return result.admit, result.reason, result.message


def test_a_pod_that_fits_is_admitted() -> None:
    assert admit(pod(requests={"cpu": "500m", "memory": "1Gi"})) == (True, "", "")


def test_too_many_pods_is_out_of_pods() -> None:
    others = [pod(f"o{i}") for i in range(10)]
    assert admit(pod(), others) == (
        False, "OutOfpods",
        "Node didn't have enough resource: pods, requested: 1, used: 10, capacity: 10")


def test_cpu_requests_beyond_allocatable_minus_running_pods() -> None:
    running = [pod("big", requests={"cpu": "1500m"})]
    assert admit(pod(requests={"cpu": "600m"}), running) == (
        False, "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000")


def test_memory_requests_beyond_allocatable() -> None:
    ok, reason, message = admit(pod(requests={"memory": "5Gi"}))
    assert (ok, reason) == (False, "OutOfmemory")
    assert message == ("Node didn't have enough resource: memory, requested: 5368709120, "
                       "used: 0, capacity: 4294967296")


def test_init_container_peak_counts_not_the_sum() -> None:
    init = [{"name": "i", "image": "busybox", "resources": {"requests": {"cpu": "1800m"}}}]
    assert admit(pod(requests={"cpu": "500m"}, initContainers=init))[0]
    init[0]["resources"]["requests"]["cpu"] = "2100m"
    assert admit(pod(requests={"cpu": "500m"}, initContainers=init))[1] == "OutOfcpu"


def test_unknown_extended_resources_are_left_to_the_cluster_but_known_ones_count() -> None:
    assert admit(pod(requests={"example.com/widget": "1"}))[0]
    ok, reason, _ = admit(pod(requests={"example.com/widget": "2"}),
                          the_node=node(**{"example.com/widget": "1"}))
    assert (ok, reason) == (False, "OutOfexample.com/widget")


@pytest.mark.parametrize("name", ["example.com/gpu", "vendor.io/fpga"])
def test_an_extended_resource_the_node_does_not_offer_does_not_stop_admission(name: str) -> None:
    assert admit(pod(requests={name: "1"})) == (True, "", "")


@pytest.mark.parametrize("name", ["kubernetes.io/foo", "hugepages-2Mi"])
def test_a_non_extended_resource_the_node_does_not_offer_refuses_the_pod(name: str) -> None:
    ok, reason, _ = admit(pod(requests={name: "1"}))
    assert (ok, reason) == (False, f"OutOf{name}")


def test_node_selector_mismatch() -> None:
    assert admit(pod(nodeSelector={"disk": "ssd"})) == (
        False, "NodeAffinity",
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
    assert admit(pod(nodeSelector={"disk": "ssd"}),
                 the_node=node({"disk": "ssd"}))[0]


@pytest.mark.parametrize(("operator", "values", "labels", "fits"), [
    ("In", ["a", "b"], {"zone": "b"}, True),
    ("In", ["a"], {"zone": "b"}, False),
    ("NotIn", ["a"], {}, True),
    ("Exists", [], {"zone": "x"}, True),
    ("DoesNotExist", [], {"zone": "x"}, False),
    ("Gt", ["3"], {"zone": "4"}, True),
    ("Lt", ["3"], {"zone": "4"}, False),
])
def test_required_node_affinity_operators(operator: str, values: list[str],
                                          labels: dict[str, str], fits: bool) -> None:
    requirement: dict[str, Any] = {"key": "zone", "operator": operator}
    if values:
        requirement["values"] = values
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}}
    assert admit(pod(affinity=affinity), the_node=node(labels))[0] is fits


def test_match_fields_select_the_node_by_name() -> None:
    def on(name: str) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [name]}]}]}}}
    assert admit(pod(affinity=on("n1")))[0]
    assert admit(pod(affinity=on("n2")))[1] == "NodeAffinity"


def test_a_pod_bound_to_another_node_is_refused() -> None:
    candidate = pod()
    candidate.spec.node_name = "other"
    assert admit(candidate)[1:] == (
        "NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")


def test_host_port_conflicts() -> None:
    web = pod("web", ports=[{"containerPort": 80, "hostPort": 8080}])
    same = pod("same", ports=[{"containerPort": 80, "hostPort": 8080}])
    udp = pod("udp", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}])
    other_ip = pod("ip", ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}])
    assert admit(same, [web])[1:] == (
        "NodePorts",
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
    assert admit(udp, [web])[0]
    # 0.0.0.0 overlaps every address.
    assert not admit(other_ip, [web])[0]
    assert admit(pod("x", ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.2"}]),
                 [other_ip])[0]


def test_no_execute_taints_need_a_toleration_except_for_static_pods() -> None:
    tainted = node(taints=[{"key": "dedicated", "value": "db", "effect": "NoExecute"},
                           {"key": "other", "effect": "NoSchedule"}])
    assert admit(pod(), the_node=tainted)[1:] == (
        "TaintToleration",
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
    tolerating = pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db",
                                   "effect": "NoExecute"}])
    assert admit(tolerating, the_node=tainted)[0]
    assert admit(pod(tolerations=[{"operator": "Exists"}]), the_node=tainted)[0]
    assert admit(pod(source="file"), the_node=tainted)[0]


def test_pod_os_must_be_linux() -> None:
    assert admit(pod(os={"name": "windows"}))[1] == "PodOSNotSupported"


def test_the_local_node_describes_labels_taints_and_allocatable() -> None:
    local = LocalNode("n1", hostname="Host-1", node_labels={"disk": "ssd"},
                      taints=[Taint(key="k", value="v", effect="NoExecute")],
                      allocatable=lambda: {"cpu": "4", "memory": "1Gi", "pods": "3"})
    described = local.node()
    assert described.metadata.labels["kubernetes.io/hostname"] == "host-1"
    assert described.metadata.labels["disk"] == "ssd"
    assert described.status.allocatable["pods"] == "3"
    tolerant = pod(nodeSelector={"disk": "ssd"}, tolerations=[{"operator": "Exists"}])
    assert admit(tolerant, the_node=described)[0]
    assert admit(pod(), the_node=described)[1] == "TaintToleration"


# --- sysctls ----------------------------------------------------------------------------------


def sysctl_pod(*names: str, **spec: Any) -> Any:
    return pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


async def test_safe_sysctls_are_admitted_and_others_forbidden() -> None:
    allowlist = SysctlAllowlist(safe_sysctl_allowlist((5, 10)))
    assert (await allowlist.admit(
        PodAdmitAttributes(sysctl_pod("net.ipv4.tcp_syncookies")))).admit
    result = await allowlist.admit(PodAdmitAttributes(sysctl_pod("kernel.msgmax")))
    assert (result.admit, result.reason, result.message) == (
        False, "SysctlForbidden", 'forbidden sysctl: "kernel.msgmax" not allowlisted')


async def test_unsafe_sysctls_allowed_by_the_node_and_host_namespaces() -> None:
    allowlist = SysctlAllowlist(["kernel.msg*", "net.core.somaxconn"])
    assert (await allowlist.admit(PodAdmitAttributes(sysctl_pod("kernel.msgmax")))).admit
    result = await allowlist.admit(PodAdmitAttributes(sysctl_pod("net.core.somaxconn",
                                                           hostNetwork=True)))
    assert result.message == ('forbidden sysctl: "net.core.somaxconn" not allowed with host '
                              'Net enabled')
    with pytest.raises(ValueError, match="not known to be namespaced"):
        SysctlAllowlist(["vm.swappiness"])


def test_slash_separated_sysctl_names_are_normalized() -> None:
    assert normalize_sysctl_name("net/ipv4/conf/eth0.100/rp_filter") == \
        "net.ipv4.conf.eth0/100.rp_filter"
    assert normalize_sysctl_name("net.ipv4.tcp_syncookies") == "net.ipv4.tcp_syncookies"
    assert "net.ipv4.tcp_keepalive_time" not in safe_sysctl_allowlist((4, 4))
