"""Each test host has a mount namespace of its own (nodehost.sh), where the fixed paths a
kubelet insists on are the node's: the Go kubelet 1.20's /var/log/pods and
/var/log/containers (which it garbage-collects for pods it does not know, so two
such kubelets sharing them delete each other's logs), kubeadm's /etc/kubernetes,
/var/lib/kubelet and /var/lib/etcd. What a user notices: a program run on a node
(``nodehost.sh exec``) writes those paths, another node and the machine do not see
it, and once the nodes are deleted nothing of them is left on the machine.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.nodehost import NODEHOST_SCRIPT, NodeHost

# The paths a node has of its own, and a file a test writes in each.
NODE_OWN_PATHS = ("/etc/kubernetes", "/var/log/pods", "/var/log/containers",
                  "/var/lib/kubelet", "/var/lib/etcd", "/usr/libexec/kubernetes")


def on_node(host: NodeHost, script: str) -> str:
    """``script`` run by ``sh`` on ``host`` through ``nodehost.sh exec`` (as scripts do)."""
    result = subprocess.run([str(NODEHOST_SCRIPT), "exec", host.name, "--", "sh", "-ec", script],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def mount_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        return {line.split()[4] for line in info}


@pytest.fixture
def two_hosts() -> Iterator[list[NodeHost]]:
    hosts = NodeHost.fresh_set(2, prefix="mnt")
    with contextlib.ExitStack() as stack:
        for host in hosts:
            stack.enter_context(host)
        yield hosts


def test_each_host_sees_its_own_fixed_paths_and_the_machine_keeps_its_own(
        two_hosts: list[NodeHost]) -> None:
    machine_etc_kubernetes = Path("/etc/kubernetes").exists()
    mounts_before = mount_points()
    for host in two_hosts:
        on_node(host, "\n".join(f"mkdir -p {path} && echo {host.name} > {path}/written-by-test"
                                for path in NODE_OWN_PATHS))
    for host in two_hosts:
        seen = on_node(host, "\n".join(f"cat {path}/written-by-test" for path in NODE_OWN_PATHS))
        assert seen.split() == [host.name] * len(NODE_OWN_PATHS), seen
        # Where the node's writes went: its own directory (kubeadm-try.sh reads admin.conf
        # from upper_etc).
        assert (host.dir / "upper_etc/kubernetes/written-by-test").read_text() == f"{host.name}\n"
        assert (host.dir / "bind_var_log_pods/written-by-test").read_text() == f"{host.name}\n"
        # The rest of the machine's /etc is there as it is.
        assert on_node(host, "cat /etc/hostname") == Path("/etc/hostname").read_text()
        print(f"\n{host.name} ({host.mountns_path}):\n" + on_node(
            host, "for path in /etc /usr/libexec " + " ".join(NODE_OWN_PATHS[1:5])
            + "; do findmnt -n -o TARGET,FSTYPE,SOURCE --mountpoint $path; done"))
    for path in NODE_OWN_PATHS:
        assert not Path(path, "written-by-test").exists(), path
    assert Path("/etc/kubernetes").exists() == machine_etc_kubernetes
    # None of the nodes' overlays and bind mounts is the machine's (only their namespace
    # files are mounted here, below the nodes' directory).
    nodes_dir = str(two_hosts[0].dir.parent)
    mounts = mount_points()
    assert not {"/etc", "/usr/libexec", *NODE_OWN_PATHS} & (mounts - mounts_before)
    below = {point for point in mounts if point.startswith(f"{nodes_dir}/")}
    assert {host.mountns_path for host in two_hosts} <= below, below
    assert all(point.endswith("/mountns") for point in below), below


def test_a_host_runs_programs_in_its_network_too(two_hosts: list[NodeHost]) -> None:
    host = two_hosts[0]
    addresses = on_node(host, "ip -4 -o addr show dev eth0")
    assert f" {host.node_ip}/" in addresses, addresses
    status = subprocess.run([str(NODEHOST_SCRIPT), "status"], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    line = next(line for line in status.splitlines() if line.split()[0] == host.name)
    assert line.split()[1:] == [str(host.index), host.node_ip, host.pod_cidr,
                                host.mountns_path], line


def test_a_deleted_host_leaves_nothing_on_the_machine() -> None:
    mounts_before = mount_points()
    with NodeHost.fresh_set(1, prefix="mnt")[0] as host:
        on_node(host, "mkdir -p /etc/kubernetes && echo x > /var/log/pods/written-by-test")
        # A program still running on the node when it goes is ended with it.
        sleeper = subprocess.Popen([str(NODEHOST_SCRIPT), "exec", host.name, "--",
                                    "sleep", "600"])
        node_dir = host.dir
        assert node_dir.is_dir()
    try:
        assert sleeper.wait(timeout=30) != 0
    finally:
        sleeper.kill()
    assert not node_dir.exists()
    assert not Path("/var/log/pods/written-by-test").exists()
    new_mounts = mount_points() - mounts_before
    # The nodes' directory stays mounted only while another node (another test's) exists.
    assert not {point for point in new_mounts if point.startswith(str(node_dir))}, new_mounts
