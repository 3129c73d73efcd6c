"""resolv.conf and /etc/hosts inside containers, per dnsPolicy, on real containerd.

A standalone pykubelet with ``clusterDNS`` and ``clusterDomain`` set runs pods
that print their ``/etc/resolv.conf`` and ``/etc/hosts``; the test reads the
container log as ``kubectl logs`` shows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_volumes import wait_log
from testsupport.kubelet_process import KubeletProcess, busybox_pod, remove_everything
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

CLUSTER_DNS = "10.96.0.10"
PRINT = "cat /etc/resolv.conf; echo ---; cat /etc/hosts; echo DONE; sleep 3600"


@pytest.fixture
def dns_kubelet(testbed: Testbed, tmp_path: Path) -> Iterator[KubeletProcess]:
    node_resolv = tmp_path / "node-resolv.conf"
    node_resolv.write_text("nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n")
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local",
        "resolvConf": str(node_resolv)})
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
        remove_everything(testbed.endpoint)


def test_resolv_conf_and_hosts_per_dns_policy(dns_kubelet: KubeletProcess,
                                              testbed: Testbed) -> None:
    kubelet = dns_kubelet
    app = {"name": "app", "command": ["sh", "-c", PRINT]}
    kubelet.write_pod(busybox_pod(
        "first", [app], testbed.busybox_image, dnsPolicy="ClusterFirst",
        hostAliases=[{"ip": "192.0.2.7", "hostnames": ["db.internal", "db"]}]))
    kubelet.write_pod(busybox_pod("node", [app], testbed.busybox_image, dnsPolicy="Default"))
    kubelet.write_pod(busybox_pod(
        "custom", [app], testbed.busybox_image, dnsPolicy="None",
        dnsConfig={"nameservers": ["192.0.2.99"], "searches": ["my.example"],
                   "options": [{"name": "ndots", "value": "2"}]}))

    first = wait_log(kubelet, "first", "app", "DONE")
    resolv, hosts = first.split("---", 1)
    assert f"nameserver {CLUSTER_DNS}" in resolv
    assert ("search default.svc.cluster.local svc.cluster.local cluster.local corp.example"
            in resolv)
    assert "options ndots:5" in resolv
    assert "192.0.2.53" not in resolv
    ip = kubelet.wait_for(lambda: kubelet.status("first").get("podIP"), 30, "pod IP")
    pod_line = next(line for line in hosts.splitlines() if line.startswith(ip))
    assert "first-e2e-node" in pod_line.split()
    alias_line = next(line for line in hosts.splitlines() if line.startswith("192.0.2.7"))
    assert alias_line.split()[1:] == ["db.internal", "db"]

    node = wait_log(kubelet, "node", "app", "DONE").split("---", 1)[0]
    assert "nameserver 192.0.2.53" in node and "search corp.example" in node
    assert CLUSTER_DNS not in node

    custom = wait_log(kubelet, "custom", "app", "DONE").split("---", 1)[0]
    assert "nameserver 192.0.2.99" in custom
    assert "search my.example" in custom and "options ndots:2" in custom
    assert CLUSTER_DNS not in custom and "192.0.2.53" not in custom
