"""A deleted pod leaves no cgroup behind in any hierarchy, on a fake hybrid cgroupfs tree.

The tree stands for a cgroup v1 host with the unified hierarchy mounted too
(``/sys/fs/cgroup/{cpu,memory,pids,devices,freezer,systemd,unified}``): pykubelet
creates the pod cgroup in the controllers it limits, and the runtime (runc)
adds the pod's directory to every other hierarchy when it places the containers.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec

from pykubelet.cm import Capacity, CgroupManager, ContainerManager, NodeConfig
from pykubelet.cm.cgroups import V1, mounted_hierarchies

WRITTEN = ("cpu", "memory", "pids")
ONLY_THE_RUNTIME = ("devices", "freezer", "systemd", "unified")


def fake_host(tmp_path: Path) -> CgroupManager:
    mount = tmp_path / "cgroup"
    lines = []
    for index, name in enumerate((*WRITTEN, *ONLY_THE_RUNTIME)):
        (mount / name).mkdir(parents=True)
        fstype, options = (("cgroup2", "rw") if name == "unified" else
                           ("cgroup", "rw,name=systemd" if name == "systemd" else f"rw,{name}"))
        lines.append(f"{40 + index} 31 0:{30 + index} / {mount}/{name} rw,relatime - "
                     f"{fstype} {fstype} {options}")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("\n".join(lines) + "\n")
    return CgroupManager("cgroupfs", mount=str(mount), version=V1, mountinfo=str(mountinfo))


def best_effort_pod() -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="p", namespace="default", uid=str(uuid.uuid4())),
                 spec=V1PodSpec(containers=[V1Container(name="c", image="busybox")]))


def run_containers_like_runc(cgroups: CgroupManager, parent: str) -> None:
    """What the runtime does with a container below ``parent``: its cgroup in every hierarchy."""
    for hierarchy in cgroups.hierarchies:
        os.makedirs(os.path.join(hierarchy, parent.lstrip("/"), f"cri-{uuid.uuid4().hex[:8]}"))


def pod_dirs(cgroups: CgroupManager) -> dict[str, int]:
    return {os.path.basename(hierarchy): sum(
                1 for _, dirs, _ in os.walk(hierarchy) for d in dirs if d.startswith("pod"))
            for hierarchy in cgroups.hierarchies}


def test_every_mounted_cgroup_hierarchy_is_found_once(tmp_path: Path) -> None:
    text = "\n".join([
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw",
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
        "33 31 0:30 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd",
        "34 31 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
        "35 99 0:30 / /var/lib/x/systemd\\040copy rw - cgroup cgroup rw,name=systemd",
        "36 99 0:30 / /sys/fs/cgroup/systemd/again rw - cgroup cgroup rw,name=systemd",
        "37 23 0:40 / /sys/fs/cgroupish rw - cgroup cgroup rw,pids",
    ])
    assert mounted_hierarchies(text, "/sys/fs/cgroup") == [
        "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"]


def test_deleted_pods_leave_no_cgroup_in_any_hierarchy(tmp_path: Path) -> None:
    cgroups = fake_host(tmp_path)
    manager = ContainerManager(NodeConfig(), cgroups, Capacity({}))
    pods = [best_effort_pod() for _ in range(20)]
    for pod in pods:
        # Made without limits: the fake's limit files would be plain files, which rmdir keeps.
        cgroups.create(manager.pod_cgroup(pod))
        run_containers_like_runc(cgroups, manager.pod_cgroup_parent(pod))
    assert set(pod_dirs(cgroups).values()) == {20}

    removed = manager.remove_orphaned_pod_cgroups(keep={pods[0].metadata.uid})

    assert len(removed) == 19
    assert pod_dirs(cgroups) == {name: 1 for name in (*WRITTEN, *ONLY_THE_RUNTIME)}


def test_a_pod_cgroup_left_only_where_the_runtime_made_it_is_removed(tmp_path: Path) -> None:
    # The leak as it was on the hosts: gone from the written controllers, still in the rest.
    cgroups = fake_host(tmp_path)
    manager = ContainerManager(NodeConfig(), cgroups, Capacity({}))
    pod = best_effort_pod()
    for hierarchy in ONLY_THE_RUNTIME:
        (Path(cgroups.mount) / hierarchy / manager.pod_cgroup_parent(pod).lstrip("/")).mkdir(
            parents=True)

    assert set(manager.pod_cgroups_on_node()) == {pod.metadata.uid}
    assert manager.remove_orphaned_pod_cgroups(keep=set()) == [pod.metadata.uid]
    assert set(pod_dirs(cgroups).values()) == {0}
