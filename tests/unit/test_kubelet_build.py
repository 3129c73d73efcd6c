"""One ``Kubelet``, two modes: what a standalone kubelet never does and a cluster one does.

The mode is one value, ``cluster``: ``None`` standalone, the ``ClusterParts`` with an
API server. Both kubelets here are built from the same real modules over small fakes
(``kubelet_fakes``); only that value differs.
"""

from __future__ import annotations

from pathlib import Path

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
)
from pykubelet.events import LoggingRecorder
from tests.unit.kubelet_fakes import (
    RecordingMirrorClient,
    RecordingStore,
    build_kubelet,
    cluster_parts,
)

# What only an API server gives a kubelet: its Node's cache, status and lease, pod
# statuses written back, the Services behind service links, service-account tokens.
CLUSTER_LOOPS = ["node-informer", "node-status", "node-status-fast-update", "node-lease",
                 "status-manager", "service-informer", "token-cleanup"]
# What every kubelet runs: runtime health, garbage collection, eviction, log rotation,
# QoS cgroups, the device plugins' registration, the pod-resources API, volumes and the
# pod lifecycle events.
NODE_LOOPS = ["runtime-up", "container-gc", "container-deletor", "image-gc",
              "container-log-manager", "eviction-manager", "qos-cgroups", "device-manager",
              "pod-resources", "volume-manager", "pleg"]


def test_a_standalone_kubelet_sends_no_node_status_and_holds_no_lease(tmp_path: Path) -> None:
    built = build_kubelet(tmp_path, cluster=None)
    assert built.kubelet.cluster is None
    assert [name for name, _ in built.kubelet.tasks()] == NODE_LOOPS


def test_a_cluster_kubelet_reports_its_node_and_renews_its_lease_after_runtime_health(
        tmp_path: Path) -> None:
    recorder = LoggingRecorder()
    built = build_kubelet(tmp_path, cluster=cluster_parts(recorder), recorder=recorder)
    names = [name for name, _ in built.kubelet.tasks()]
    assert names == NODE_LOOPS[:1] + CLUSTER_LOOPS + NODE_LOOPS[1:]


async def test_a_cluster_kubelet_deletes_the_mirror_pod_of_a_static_pod_no_source_wants(
        tmp_path: Path) -> None:
    recorder, mirrors = LoggingRecorder(), RecordingMirrorClient()
    built = build_kubelet(tmp_path, cluster=cluster_parts(recorder, mirrors), recorder=recorder)
    orphan = pod_from_dict({"metadata": {
        "name": "etcd-n1", "namespace": "kube-system", "uid": "mirror-uid",
        "annotations": {CONFIG_SOURCE_ANNOTATION_KEY: "api",
                        CONFIG_HASH_ANNOTATION_KEY: "static-uid",
                        CONFIG_MIRROR_ANNOTATION_KEY: "static-uid"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "etcd", "image": "etcd"}]}})
    await built.kubelet.handle_pod_additions([orphan])
    assert built.workers.updates == []  # a mirror pod is never run
    await built.kubelet.delete_orphaned_mirror_pods()
    assert mirrors.deleted == ["etcd-n1_kube-system"]


async def test_stopping_a_cluster_kubelet_ends_its_configmap_and_secret_watches(
        tmp_path: Path) -> None:
    recorder = LoggingRecorder()
    cluster = cluster_parts(recorder)
    built = build_kubelet(tmp_path, cluster=cluster, recorder=recorder)
    await built.kubelet.stop()
    stores = [cluster.config_maps.store, cluster.secrets.store]
    assert all(isinstance(s, RecordingStore) and s.stopped for s in stores)

