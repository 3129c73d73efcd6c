"""persistentVolumeClaim volumes: claims resolved with upstream's messages, local and hostPath
PVs mounted, and a PV's files never deleted by a teardown."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    V1Container,
    V1Node,
    V1ObjectMeta,
    V1PersistentVolumeClaimVolumeSource,
    V1Pod,
    V1PodSecurityContext,
    V1PodSpec,
    V1Volume,
    V1VolumeDevice,
    V1VolumeMount,
)

from pykubelet.kubelet.getters import RootDirs
from pykubelet.kubelet.node_info import LocalNode, NodeView
from pykubelet.kubelet.volume_host import PersistentVolumeReader, VolumeHost
from pykubelet.volumemanager import FAILED_MOUNT, VolumeManager, VolumeMountError
from pykubelet.volumemanager.mount import is_mount_point
from pykubelet.volumemanager.persistent import (
    MOUNT_OPTIONS_ANNOTATION,
    ClaimNotReady,
    mount_options,
    resolve_claim,
)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
NS = "ns"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "") -> None:
        self.events.append((event_type, reason, message))


class Api:
    """The API server's claims and volumes, as the reader's GETs see them."""

    def __init__(self) -> None:
        self.claims: dict[str, dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}

    async def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(name)

    async def volume(self, name: str) -> dict[str, Any] | None:
        return self.volumes.get(name)

    def add_claim(self, name: str, *, phase: str = "Pending") -> None:
        self.claims[name] = {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                                          "finalizers": ["kubernetes.io/pvc-protection"]},
                             "spec": {}, "status": {"phase": phase}}

    def bind(self, claim: str, pv: str, source: dict[str, Any], **spec: Any) -> None:
        """What the controller manager's PV binder does."""
        self.volumes[pv] = {"metadata": {"name": pv}, "spec": {
            **source, "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "claimRef": {"namespace": NS, "name": claim, "uid": f"uid-{claim}"}, **spec}}
        self.claims[claim]["spec"]["volumeName"] = pv
        self.claims[claim]["status"]["phase"] = "Bound"


class NodeCache:
    """The kubelet's watch of its own Node: None until the Node is seen."""

    def __init__(self, labels: dict[str, str] | None) -> None:
        self.node = None if labels is None else V1Node(
            metadata=V1ObjectMeta(name="node-a", labels=labels))

    def get(self) -> V1Node | None:
        return self.node

    def has_synced(self) -> bool:
        return True


def host(api: Api, node: NodeCache | None = None) -> VolumeHost:
    view = NodeView(LocalNode("node-a", allocatable=dict), node or NodeCache({}))
    return VolumeHost(lambda: (1000, 1 << 30),
                      persistent_volumes=PersistentVolumeReader(api.claim, api.volume),
                      node_view=view)


def on_host(name: str) -> dict[str, Any]:
    """A PV's node affinity to the node whose hostname label is ``name``."""
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [name]}]}]}}


def pod(uid: str, claim: str, *, read_only: bool = False, devices: bool = False,
        fs_group: int | None = None) -> V1Pod:
    container = V1Container(name="c")
    if devices:
        container.volume_devices = [V1VolumeDevice(name="data", device_path="/dev/xvda")]
    else:
        container.volume_mounts = [V1VolumeMount(name="data", mount_path="/data")]
    volume = V1Volume(name="data", persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(
        claim_name=claim, read_only=read_only))
    return V1Pod(metadata=V1ObjectMeta(name=f"pod-{uid}", namespace=NS, uid=uid),
                 spec=V1PodSpec(containers=[container], volumes=[volume],
                                security_context=V1PodSecurityContext(fs_group=fs_group)))


async def resolve_error(api: Api, p: V1Pod) -> str:
    volume = p.spec.volumes[0]
    with pytest.raises(ClaimNotReady) as caught:
        await resolve_claim(p, volume, host(api))
    return str(caught.value)


async def test_a_claim_that_cannot_be_used_yet_says_why_in_upstreams_words(
        tmp_path: Path) -> None:
    api = Api()
    prefix = "error processing PVC ns/data-0: "
    assert await resolve_error(api, pod("u", "data-0")) == (
        prefix + 'failed to fetch PVC from API server: persistentvolumeclaims "data-0" '
        "not found")
    api.add_claim("data-0")
    assert await resolve_error(api, pod("u", "data-0")) == prefix + "PVC is not bound"
    api.claims["data-0"]["status"]["phase"] = "Bound"
    assert await resolve_error(api, pod("u", "data-0")) == (
        prefix + "PVC has empty pvc.Spec.VolumeName")
    api.claims["data-0"]["spec"]["volumeName"] = "pv-a"
    assert await resolve_error(api, pod("u", "data-0")) == (
        prefix + 'failed to fetch PV pv-a from API server: persistentvolumes "pv-a" not found')
    api.bind("data-0", "pv-a", {"hostPath": {"path": str(tmp_path)}})
    api.volumes["pv-a"]["spec"]["claimRef"]["uid"] = "someone-else"
    assert await resolve_error(api, pod("u", "data-0")) == (
        prefix + "found PV object pv-a but its pv.Spec.ClaimRef.UID someone-else does not "
        "point to claim.UID uid-data-0")
    del api.volumes["pv-a"]["spec"]["claimRef"]
    assert "has a nil pv.Spec.ClaimRef" in await resolve_error(api, pod("u", "data-0"))
    # Deleted while no pod used it: the protection finalizer is gone, so it is going away.
    api.bind("data-0", "pv-a", {"hostPath": {"path": str(tmp_path)}})
    api.claims["data-0"]["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z",
                                            finalizers=[])
    assert await resolve_error(api, pod("u", "data-0")) == prefix + "PVC is being deleted"
    # With the finalizer (a pod still uses it) the claim is still good.
    api.claims["data-0"]["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
    bound = await resolve_claim(pod("u", "data-0"), pod("u", "data-0").spec.volumes[0],
                                host(api))
    assert bound.pv_name == "pv-a" and bound.plugin == "kubernetes.io~host-path"


async def test_unsupported_volume_sources_and_modes_are_named(tmp_path: Path) -> None:
    api = Api()
    api.add_claim("nfs")
    api.bind("nfs", "pv-nfs", {"nfs": {"server": "10.0.0.1", "path": "/export"}})
    assert "this one's source is nfs" in await resolve_error(api, pod("u", "nfs"))
    api.add_claim("blk")
    api.bind("blk", "pv-blk", {"local": {"path": "/dev/sdb"}}, volumeMode="Block")
    assert await resolve_error(api, pod("u", "blk")) == (
        "volume data has volumeMode Block, but is specified in volumeMounts")
    assert await resolve_error(api, pod("u", "blk", devices=True)) == (
        'failed to get Plugin from volumeSpec for volume "pv-blk" err=no volume plugin '
        "matched: volume data has volumeMode Block, and pykubelet maps no raw block devices "
        "into containers")
    api.add_claim("fs")
    api.bind("fs", "pv-fs", {"local": {"path": str(tmp_path)}})
    assert await resolve_error(api, pod("u", "fs", devices=True)) == (
        "volume data has volumeMode Filesystem, but is specified in volumeDevices")


async def test_a_block_pv_leaves_the_pod_waiting_with_a_warning_naming_it_every_sync(
        tmp_path: Path) -> None:
    """pykubelet maps no raw block devices: the pod is not started without its device,
    and every sync says why (the PV and the pod's volume), as upstream's populator does
    for a volume no plugin can map."""
    api, recorder = Api(), Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path)), recorder, host(api))
    api.add_claim("blk")
    api.bind("blk", "pv-blk", {"local": {"path": "/dev/sdb"}}, volumeMode="Block")
    p = pod("u1", "blk", devices=True)
    for _ in range(2):
        with pytest.raises(VolumeMountError):
            await volumes.wait_for_attach_and_mount(p)
    expected = ("Unable to attach or mount volumes: unmounted volumes=[data], unattached "
                "volumes=[], failed to process volumes=[data]: failed to get Plugin from "
                'volumeSpec for volume "pv-blk" err=no volume plugin matched: volume data has '
                "volumeMode Block, and pykubelet maps no raw block devices into containers")
    assert recorder.events == [("Warning", FAILED_MOUNT, expected)] * 2


async def test_a_local_filesystem_pv_on_a_block_device_is_refused_naming_the_pv(
        tmp_path: Path) -> None:
    device = tmp_path / "sdb"
    try:
        os.mknod(device, 0o600 | stat.S_IFBLK, os.makedev(7, 250))
    except PermissionError:
        pytest.skip("making a block device node needs CAP_MKNOD")
    api, recorder = Api(), Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path / "root")), recorder, host(api))
    api.add_claim("data-0")
    api.bind("data-0", "pv-disk", {"local": {"path": str(device)}})
    with pytest.raises(VolumeMountError):
        await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert recorder.events == [(
        "Warning", FAILED_MOUNT,
        f'MountVolume.NewMounter initialization failed for volume "pv-disk" : {device} is a '
        "block device: pykubelet mounts only local PersistentVolumes that are directories")]


async def test_a_hostpath_pv_with_mount_options_is_refused_as_upstream_does(
        tmp_path: Path) -> None:
    api, recorder = Api(), Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path / "root")), recorder, host(api))
    data = tmp_path / "pv-data"
    api.add_claim("data-0")
    api.bind("data-0", "pv-a", {"hostPath": {"path": str(data), "type": "DirectoryOrCreate"}},
             mountOptions=["noexec"])
    with pytest.raises(VolumeMountError):
        await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert recorder.events == [("Warning", FAILED_MOUNT,
                                'MountVolume.MountOptionSupport check failed for volume '
                                '"pv-a" : Mount options are not supported for this volume '
                                "type")]
    assert not data.exists()
    # Options dropped from the PV: the next sync mounts it.
    del api.volumes["pv-a"]["spec"]["mountOptions"]
    await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert data.is_dir()


def test_a_pvs_mount_options_come_from_its_annotation_first() -> None:
    spec = {"mountOptions": ["noexec", "nosuid", "noexec"]}
    assert mount_options({"spec": spec}) == ("noexec", "nosuid")
    annotated = {"metadata": {"annotations": {MOUNT_OPTIONS_ANNOTATION: "ro,nodev"}},
                 "spec": spec}
    assert mount_options(annotated) == ("ro", "nodev")
    assert mount_options({"spec": {}}) == ()


async def test_an_unbound_claim_blocks_the_pod_until_a_pv_binds_it(tmp_path: Path) -> None:
    api, recorder = Api(), Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path / "root")), recorder, host(api))
    api.add_claim("data-0")
    p = pod("u1", "data-0", read_only=True)
    with pytest.raises(VolumeMountError) as caught:
        await volumes.wait_for_attach_and_mount(p)
    expected = ("unmounted volumes=[data], unattached volumes=[], failed to process "
                "volumes=[data]: error processing PVC ns/data-0: PVC is not bound")
    assert str(caught.value) == expected
    assert recorder.events == [("Warning", FAILED_MOUNT,
                                f"Unable to attach or mount volumes: {expected}")]
    # The next sync after the binder bound it: the hostPath PV is the container's mount,
    # read-only as the claim source says.
    data = tmp_path / "pv-data"
    api.bind("data-0", "pv-a", {"hostPath": {"path": str(data), "type": "DirectoryOrCreate"}})
    await volumes.wait_for_attach_and_mount(p)
    mounts = volumes.mounts_for(p, p.spec.containers[0], {})
    assert [(m.host_path, m.readonly) for m in mounts] == [(str(data), True)]
    assert data.is_dir()


async def test_standalone_kubelet_refuses_a_claim_with_a_clear_event(tmp_path: Path) -> None:
    recorder = Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path)), recorder, VolumeHost(lambda: (1, 1)))
    with pytest.raises(VolumeMountError):
        await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert 'cannot read persistentvolumeclaim "data-0": this kubelet runs without an API ' \
        "server" in recorder.events[0][2]


async def test_a_missing_local_path_is_a_new_mounter_failure(tmp_path: Path) -> None:
    api, recorder = Api(), Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path)), recorder, host(api))
    api.add_claim("data-0")
    api.bind("data-0", "pv-a", {"local": {"path": str(tmp_path / "absent")}})
    with pytest.raises(VolumeMountError):
        await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert recorder.events == [("Warning", FAILED_MOUNT,
                                'MountVolume.NewMounter initialization failed for volume '
                                f'"pv-a" : path "{tmp_path / "absent"}" does not exist')]


async def test_teardown_never_deletes_what_is_under_a_pv_mount_point(tmp_path: Path) -> None:
    """A local PV's mount point that still holds files (a mount this kubelet cannot see,
    found on disk after a restart) is left alone with the pod directory around it."""
    volumes = VolumeManager(RootDirs(str(tmp_path)), Recorder(), None,
                            pod_runtime_removed=lambda uid: True)
    point = tmp_path / "pods" / "u1" / "volumes" / "kubernetes.io~local-volume" / "pv-a"
    point.mkdir(parents=True)
    (point / "database").write_text("precious")
    await volumes.reconcile()
    assert (point / "database").read_text() == "precious"
    with volumes.pod_dir_removal("u1") as removable:
        assert not removable  # so the pod directory is not removed either
    assert (point / "database").read_text() == "precious"


@root_only
async def test_a_local_pv_is_bind_mounted_and_unmounted_with_its_data_kept(
        tmp_path: Path) -> None:
    api, recorder, removed = Api(), Recorder(), set[str]()
    volumes = VolumeManager(RootDirs(str(tmp_path / "root")), recorder, host(api),
                            pod_runtime_removed=lambda uid: uid in removed)
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "old").write_text("kept")
    api.add_claim("data-0")
    api.add_claim("data-ro")
    api.bind("data-0", "pv-a", {"local": {"path": str(disk)}})
    api.bind("data-ro", "pv-b", {"local": {"path": str(disk)}})
    writer, reader = pod("u1", "data-0", fs_group=2000), pod("u2", "data-ro", read_only=True)
    await volumes.wait_for_attach_and_mount(writer)
    await volumes.wait_for_attach_and_mount(reader)
    base = tmp_path / "root" / "pods"
    point = base / "u1" / "volumes" / "kubernetes.io~local-volume" / "pv-a"
    assert is_mount_point(str(point)) and (point / "old").read_text() == "kept"
    assert os.stat(disk).st_gid == 2000  # fsGroup on the first read-write mount
    (point / "new").write_text("written by the pod")
    read_only_point = base / "u2" / "volumes" / "kubernetes.io~local-volume" / "pv-b"
    with pytest.raises(OSError):
        (read_only_point / "nope").write_text("x")
    assert recorder.events == []
    # A second sync finds it mounted and mounts nothing again.
    await volumes.wait_for_attach_and_mount(writer)
    removed.update({"u1", "u2"})
    await volumes.reconcile()
    assert not point.exists() and not read_only_point.exists()
    with volumes.pod_dir_removal("u1") as removable:
        assert removable
    assert sorted(os.listdir(disk)) == ["new", "old"]


@root_only
async def test_a_local_pvs_mount_options_are_the_flags_of_its_mount(tmp_path: Path) -> None:
    api, recorder = Api(), Recorder()
    volumes = VolumeManager(RootDirs(str(tmp_path / "root")), recorder, host(api))
    disk = tmp_path / "disk"
    disk.mkdir()
    disk_flags = os.statvfs(disk).f_flag
    api.add_claim("data-0")
    # nfsvers is a file system's own option: a bind mount cannot take it (logged).
    api.bind("data-0", "pv-a", {"local": {"path": str(disk)}},
             mountOptions=["noexec", "nosuid", "nfsvers=4"])
    await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    point = tmp_path / "root" / "pods" / "u1" / "volumes" / "kubernetes.io~local-volume" / "pv-a"
    try:
        assert is_mount_point(str(point)) and recorder.events == []
        flags = os.statvfs(point).f_flag
        assert flags & os.ST_NOEXEC and flags & os.ST_NOSUID
        assert not flags & os.ST_RDONLY
        (point / "written").write_text("still writable")
        assert os.statvfs(disk).f_flag == disk_flags  # the PV's own directory: untouched
    finally:
        # A failed assertion must not leave the bind mount behind in pytest's tmp dirs.
        volumes.tear_down_pod("u1")
    assert not point.exists() and (disk / "written").exists()


@root_only
async def test_a_restarted_kubelet_unmounts_a_gone_pods_local_pv(tmp_path: Path) -> None:
    api = Api()
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "file").write_text("kept")
    api.add_claim("data-0")
    api.bind("data-0", "pv-a", {"local": {"path": str(disk)}})
    before = VolumeManager(RootDirs(str(tmp_path)), Recorder(), host(api))
    await before.wait_for_attach_and_mount(pod("u1", "data-0"))
    point = tmp_path / "pods" / "u1" / "volumes" / "kubernetes.io~local-volume" / "pv-a"
    assert is_mount_point(str(point))
    # A new kubelet knows nothing but the disk; the pod is gone.
    after = VolumeManager(RootDirs(str(tmp_path)), Recorder(), host(api),
                          pod_runtime_removed=lambda uid: True)
    await after.reconcile()
    assert not is_mount_point(str(point)) and not point.exists()
    assert (disk / "file").read_text() == "kept"


class Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self._body = body

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


async def test_the_node_authorizers_refusal_reads_as_the_api_server_wrote_it() -> None:
    refusal = (b'{"kind":"Status","message":"persistentvolumeclaims \\"x\\" is forbidden: '
               b'no relationship found between node \'n1\' and this object"}')

    class Refusing:
        async def read_namespaced_persistent_volume_claim(self, name: str, namespace: str,
                                                          **_: Any) -> Response:
            return Response(403, refusal)

        async def read_persistent_volume(self, name: str, **_: Any) -> Response:
            return Response(404, b"{}")

    reader = PersistentVolumeReader.for_api(Refusing())  # type: ignore[arg-type]
    with pytest.raises(Exception, match="no relationship found between node 'n1'"):
        await reader.claim(NS, "x")
    with pytest.raises(LookupError, match='persistentvolumes "pv" not found'):
        await reader.volume("pv")


async def test_a_pv_of_another_node_is_not_mounted_and_the_pod_waits(tmp_path: Path) -> None:
    """A pod bound by hand (``spec.nodeName``) to a node that is not its local PV's: the
    kubelet's own check refuses the mount before it looks at the PV's path."""
    api, recorder = Api(), Recorder()
    node = NodeCache({"kubernetes.io/hostname": "node-a"})
    volumes = VolumeManager(RootDirs(str(tmp_path / "root")), recorder, host(api, node))
    api.add_claim("data-0")
    api.bind("data-0", "pv-b", {"local": {"path": "/mnt/disks/on-node-b"}},
             nodeAffinity=on_host("node-b"))
    p = pod("u1", "data-0")
    with pytest.raises(VolumeMountError) as caught:
        await volumes.wait_for_attach_and_mount(p)
    event = ('MountVolume.NodeAffinity check failed for volume "pv-b" : '
             "no matching NodeSelectorTerms")
    assert recorder.events == [("Warning", FAILED_MOUNT, event)]
    assert str(caught.value).startswith("unmounted volumes=[data], unattached volumes=[], "
                                        "failed to process volumes=[]: ")
    assert not (tmp_path / "root" / "pods" / "u1" / "volumes").exists()
    # Every sync checks again; a node relabelled to match lets the mount go on (a hostPath
    # PV here: the check is the same for every PV source).
    data = tmp_path / "pv-data"
    api.volumes["pv-b"]["spec"] = {**api.volumes["pv-b"]["spec"], "local": None,
                                   "hostPath": {"path": str(data), "type": "DirectoryOrCreate"}}
    with pytest.raises(VolumeMountError):
        await volumes.wait_for_attach_and_mount(pod("u2", "data-0"))
    assert recorder.events[-1] == ("Warning", FAILED_MOUNT, event)
    assert node.node is not None
    node.node.metadata.labels = {"kubernetes.io/hostname": "node-b"}
    await volumes.wait_for_attach_and_mount(pod("u2", "data-0"))
    assert data.is_dir() and len(recorder.events) == 2


async def test_a_pv_of_this_node_or_without_affinity_is_mounted(tmp_path: Path) -> None:
    api, recorder = Api(), Recorder()
    node = NodeCache({"kubernetes.io/hostname": "node-a", "disktype": "ssd"})
    volumes = VolumeManager(RootDirs(str(tmp_path)), recorder, host(api, node))
    affinities = {
        "here": on_host("node-a"),
        # Terms are ORed: the second one matches.
        "either": {"required": {"nodeSelectorTerms": [
            *on_host("node-b")["required"]["nodeSelectorTerms"],
            {"matchExpressions": [{"key": "disktype", "operator": "Exists"}]}]}},
        # Upstream matches the node's labels only: matchFields are not looked at.
        "by-name": {"required": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]}},
        "none": None,
    }
    for claim, affinity in affinities.items():
        api.add_claim(claim)
        api.bind(claim, f"pv-{claim}", {"hostPath": {"path": str(tmp_path / claim),
                                                     "type": "DirectoryOrCreate"}},
                 nodeAffinity=affinity)
        await volumes.wait_for_attach_and_mount(pod(f"u-{claim}", claim))
    assert recorder.events == []
    assert all((tmp_path / claim).is_dir() for claim in affinities)


async def test_a_node_the_kubelet_has_not_seen_yet_fails_the_check_and_says_so(
        tmp_path: Path) -> None:
    api, recorder = Api(), Recorder()
    node = NodeCache(None)
    volumes = VolumeManager(RootDirs(str(tmp_path)), recorder, host(api, node))
    api.add_claim("data-0")
    api.bind("data-0", "pv-a", {"hostPath": {"path": str(tmp_path / "d"),
                                             "type": "DirectoryOrCreate"}},
             nodeAffinity=on_host("node-a"))
    with pytest.raises(VolumeMountError):
        await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert recorder.events == [("Warning", FAILED_MOUNT,
                                'MountVolume.NodeAffinity check failed for volume "pv-a" : '
                                'error retrieving node: node "node-a" not found')]
    node.node = NodeCache({"kubernetes.io/hostname": "node-a"}).node
    await volumes.wait_for_attach_and_mount(pod("u1", "data-0"))
    assert (tmp_path / "d").is_dir()


def test_the_node_labels_are_the_watched_nodes_or_standalone_the_registered_ones() -> None:
    local = LocalNode("node-a", hostname="host-a", node_labels={"disktype": "ssd"},
                      allocatable=dict)
    standalone = VolumeHost(lambda: (1, 1), node_view=NodeView(local)).node_labels()
    assert standalone["kubernetes.io/hostname"] == "host-a"
    assert standalone["disktype"] == "ssd"
    watched = NodeCache({"kubernetes.io/hostname": "node-a", "zone": "z1"})
    host_of_node = VolumeHost(lambda: (1, 1), node_view=NodeView(local, watched))
    assert host_of_node.node_labels() == {"kubernetes.io/hostname": "node-a", "zone": "z1"}
