"""The pod manager keeps mirror pods apart from the pods to run, matched by full name."""

from __future__ import annotations

from typing import Any

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
)
from pykubelet.kubelet.mirror_client import mirror_pod_body
from pykubelet.kubelet.pod_manager import PodManager, is_mirror_pod_of


def pod(name: str, uid: str, **annotations: str) -> Any:
    return pod_from_dict({"metadata": {"name": name, "namespace": "kube-system", "uid": uid,
                                       "annotations": annotations},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}})


def static(name: str = "etcd-n1", uid: str = "static-1") -> Any:
    return pod(name, uid, **{CONFIG_SOURCE_ANNOTATION_KEY: "file",
                             CONFIG_HASH_ANNOTATION_KEY: uid})


def mirror(of: Any, uid: str = "mirror-1", hash_: str | None = None) -> Any:
    return pod(of.metadata.name, uid, **{
        CONFIG_SOURCE_ANNOTATION_KEY: "api",
        CONFIG_MIRROR_ANNOTATION_KEY: hash_ or of.metadata.uid})


def test_mirror_pods_are_not_pods_to_run_but_are_found_from_their_static_pod() -> None:
    manager = PodManager()
    the_static = static()
    the_mirror = mirror(the_static)
    manager.add_pod(the_mirror)  # the API may report the mirror first
    manager.add_pod(the_static)
    assert [p.metadata.uid for p in manager.get_pods()] == ["static-1"]
    assert manager.get_mirror_pod_by_pod(the_static).metadata.uid == "mirror-1"
    assert manager.get_pod_and_mirror_pod(the_mirror)[0].metadata.uid == "static-1"
    assert manager.translate_pod_uid("mirror-1") == "static-1"
    assert manager.translate_pod_uid("static-1") == "static-1"
    assert manager.get_uid_translations() == ({"static-1": "mirror-1"},
                                              {"mirror-1": "static-1"})
    assert manager.get_orphaned_mirror_pod_names() == []


def test_a_static_pod_without_mirror_and_a_mirror_without_static_pod() -> None:
    manager = PodManager()
    lonely = static()
    manager.add_pod(lonely)
    assert manager.get_uid_translations() == ({"static-1": ""}, {})
    manager.remove_pod(lonely)
    manager.add_pod(mirror(lonely))
    assert manager.get_orphaned_mirror_pod_names() == ["etcd-n1_kube-system"]
    assert manager.get_uid_translations() == ({}, {})


def test_a_recreated_mirror_pod_replaces_the_old_one_whatever_the_event_order() -> None:
    manager = PodManager()
    the_static = static()
    old, new = mirror(the_static, "mirror-old"), mirror(the_static, "mirror-new")
    manager.add_pod(the_static)
    manager.add_pod(old)
    manager.add_pod(new)
    manager.remove_pod(old)  # the deletion of the old one arrives last
    assert manager.get_mirror_pod_by_pod(the_static).metadata.uid == "mirror-new"
    assert manager.translate_pod_uid("mirror-old") == "mirror-old"
    assert [m.metadata.uid for m in manager.get_mirror_pods()] == ["mirror-new"]


def test_a_mirror_pod_of_an_older_manifest_is_not_the_mirror_of_the_new_one() -> None:
    the_static = static()
    assert is_mirror_pod_of(mirror(the_static), the_static)
    assert not is_mirror_pod_of(mirror(the_static, hash_="older-hash"), the_static)
    assert not is_mirror_pod_of(the_static, the_static)  # no mirror annotation at all


def test_the_mirror_pod_body_is_owned_by_the_node_and_carries_the_hash() -> None:
    the_static = static()
    the_static.metadata.resource_version = "7"
    body = mirror_pod_body(the_static, "n1", "node-uid")
    meta = body["metadata"]
    assert meta["annotations"][CONFIG_MIRROR_ANNOTATION_KEY] == "static-1"
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                                        "uid": "node-uid", "controller": True}]
    assert "uid" not in meta and "resourceVersion" not in meta
    assert "status" not in body
