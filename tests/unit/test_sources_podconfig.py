"""The merger turns source snapshots into the ordered changes the sync loop acts on."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client.models import V1Pod

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import (
    CONFIG_FIRST_SEEN_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
    PodOperation,
    PodUpdate,
)
from pykubelet.sources.podconfig import PodConfig

SET, ADD, UPDATE, REMOVE, DELETE, RECONCILE = (
    PodOperation.SET, PodOperation.ADD, PodOperation.UPDATE, PodOperation.REMOVE,
    PodOperation.DELETE, PodOperation.RECONCILE)


def make_pod(name: str, uid: str | None = None, image: str = "busybox",
             namespace: str = "default", **meta: Any) -> V1Pod:
    return pod_from_dict({
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", **meta},
        "spec": {"containers": [{"name": "c", "image": image}]},
    })


def summary(updates: list[PodUpdate]) -> list[tuple[PodOperation, list[str]]]:
    return [(u.op, sorted(p.metadata.name for p in u.pods)) for u in updates]


def test_first_set_adds_every_pod_and_marks_the_source_seen() -> None:
    config = PodConfig("node")
    config.channel("file")
    assert not config.sources_ready()
    emitted = config.merge("file", PodUpdate([make_pod("a"), make_pod("b")], SET, "file"))
    assert summary(emitted) == [(ADD, ["a", "b"])]
    assert config.sources_ready()
    added = emitted[0].pods[0]
    assert added.metadata.annotations[CONFIG_SOURCE_ANNOTATION_KEY] == "file"
    assert added.metadata.annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY]


def test_empty_first_set_still_announces_the_source() -> None:
    config = PodConfig("node")
    config.channel("file")
    assert summary(config.merge("file", PodUpdate([], SET, "file"))) == [(ADD, [])]
    assert summary(config.merge("file", PodUpdate([], SET, "file"))) == []


def test_sources_ready_waits_for_every_registered_source() -> None:
    config = PodConfig("node")
    config.channel("file")
    config.channel("http")
    config.merge("file", PodUpdate([], SET, "file"))
    assert not config.sources_ready()
    assert config.sources_seen() == {"file"}
    config.merge("http", PodUpdate([], SET, "http"))
    assert config.sources_ready()
    assert config.seen_all_sources({"file", "http"})
    assert not config.seen_all_sources({"file"})


def test_unchanged_set_sends_nothing() -> None:
    config = PodConfig("node")
    config.merge("file", PodUpdate([make_pod("a")], SET, "file"))
    assert config.merge("file", PodUpdate([make_pod("a")], SET, "file")) == []


def test_a_pod_missing_from_the_next_set_is_removed_before_new_ones_are_added() -> None:
    config = PodConfig("node")
    config.merge("file", PodUpdate([make_pod("a"), make_pod("b")], SET, "file"))
    emitted = config.merge("file", PodUpdate([make_pod("b"), make_pod("c")], SET, "file"))
    assert summary(emitted) == [(REMOVE, ["a"]), (ADD, ["c"])]


def test_spec_change_under_the_same_uid_is_an_update_keeping_first_seen() -> None:
    config = PodConfig("node")
    first = config.merge("api", PodUpdate([make_pod("a")], SET, "api"))
    seen = first[0].pods[0].metadata.annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY]
    emitted = config.merge("api", PodUpdate([make_pod("a", image="busybox:2")], SET, "api"))
    assert summary(emitted) == [(UPDATE, ["a"])]
    updated = emitted[0].pods[0]
    assert updated.spec.containers[0].image == "busybox:2"
    assert updated.metadata.annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY] == seen


def test_label_and_annotation_changes_are_updates_but_local_annotations_are_not() -> None:
    config = PodConfig("node")
    config.merge("api", PodUpdate([make_pod("a")], SET, "api"))
    relabelled = make_pod("a", labels={"tier": "web"})
    assert summary(config.merge("api", PodUpdate([relabelled], SET, "api"))) == [(UPDATE, ["a"])]
    reseen = make_pod("a", labels={"tier": "web"},
                      annotations={CONFIG_FIRST_SEEN_ANNOTATION_KEY: "2020-01-01T00:00:00Z"})
    assert config.merge("api", PodUpdate([reseen], SET, "api")) == []
    annotated = make_pod("a", labels={"tier": "web"}, annotations={"team": "x"})
    assert summary(config.merge("api", PodUpdate([annotated], SET, "api"))) == [(UPDATE, ["a"])]


def test_status_only_change_is_a_reconcile() -> None:
    config = PodConfig("node")
    config.merge("api", PodUpdate([make_pod("a")], SET, "api"))
    running = make_pod("a")
    running.status = pod_from_dict({"status": {"phase": "Running"}}).status
    emitted = config.merge("api", PodUpdate([running], SET, "api"))
    assert summary(emitted) == [(RECONCILE, ["a"])]
    assert emitted[0].pods[0].status.phase == "Running"


def test_deletion_timestamp_is_a_graceful_delete() -> None:
    config = PodConfig("node")
    config.merge("api", PodUpdate([make_pod("a")], SET, "api"))
    deleting = make_pod("a", deletionTimestamp="2026-01-01T00:00:00Z",
                        deletionGracePeriodSeconds=30)
    emitted = config.merge("api", PodUpdate([deleting], UPDATE, "api"))
    assert summary(emitted) == [(DELETE, ["a"])]


def test_incremental_ops_from_a_source() -> None:
    config = PodConfig("node")
    config.merge("api", PodUpdate([], SET, "api"))
    assert summary(config.merge("api", PodUpdate([make_pod("a")], ADD, "api"))) == [(ADD, ["a"])]
    assert summary(config.merge("api", PodUpdate([make_pod("b")], ADD, "api"))) == [(ADD, ["b"])]
    removed = config.merge("api", PodUpdate([make_pod("a")], REMOVE, "api"))
    assert summary(removed) == [(REMOVE, ["a"])]
    assert sorted(p.metadata.name for p in config.merged_state()) == ["b"]


def test_duplicate_names_within_a_source_keep_the_first() -> None:
    config = PodConfig("node")
    emitted = config.merge("file", PodUpdate([make_pod("a", uid="1"), make_pod("a", uid="2")],
                                             SET, "file"))
    assert [p.metadata.uid for p in emitted[0].pods] == ["1"]


def test_duplicate_full_name_across_sources_first_source_wins(caplog: Any) -> None:
    config = PodConfig("node")
    config.merge("file", PodUpdate([make_pod("a", uid="from-file")], SET, "file"))
    emitted = config.merge("http", PodUpdate([make_pod("a", uid="from-http"), make_pod("b")],
                                             SET, "http"))
    assert summary(emitted) == [(ADD, ["b"])]
    assert "same full name" in caplog.text
    # The same name in another namespace is a different pod.
    other_ns = make_pod("a", uid="other-ns", namespace="kube-system")
    assert summary(config.merge("api", PodUpdate([other_ns], SET, "api"))) == [(ADD, ["a"])]


def test_mirror_pods_may_share_their_static_pods_name() -> None:
    config = PodConfig("node")
    config.merge("file", PodUpdate([make_pod("etcd-node", uid="static")], SET, "file"))
    mirror = make_pod("etcd-node", uid="mirror",
                      annotations={CONFIG_MIRROR_ANNOTATION_KEY: "static"})
    emitted = config.merge("api", PodUpdate([mirror], SET, "api"))
    assert summary(emitted) == [(ADD, ["etcd-node"])]


def test_pods_with_invalid_names_are_dropped(caplog: Any) -> None:
    config = PodConfig("node")
    emitted = config.merge("api", PodUpdate([make_pod("Bad_Name"), make_pod("good")], SET, "api"))
    assert summary(emitted) == [(ADD, ["good"])]
    assert "Bad_Name" in caplog.text


def test_emitted_pods_are_copies() -> None:
    config = PodConfig("node")
    emitted = config.merge("file", PodUpdate([make_pod("a")], SET, "file"))
    emitted[0].pods[0].spec.containers[0].image = "tampered"
    assert config.merged_state()[0].spec.containers[0].image == "busybox"


async def test_run_merges_channels_into_the_updates_queue() -> None:
    config = PodConfig("node")
    file_channel = config.channel("file")
    runner = asyncio.create_task(config.run())
    try:
        file_channel.put_nowait(PodUpdate([make_pod("a")], SET, "file"))
        update = await asyncio.wait_for(config.updates().get(), 2)
        assert summary([update]) == [(ADD, ["a"])]
        # A source registered while running is listened to as well.
        config.channel("http").put_nowait(PodUpdate([], SET, "http"))
        update = await asyncio.wait_for(config.updates().get(), 2)
        assert (update.op, update.source, update.pods) == (ADD, "http", [])
        assert config.sources_ready()
        config.sync()
        full = await asyncio.wait_for(config.updates().get(), 2)
        assert (full.op, full.source, [p.metadata.name for p in full.pods]) == (SET, "*", ["a"])
    finally:
        config.stop()
        await asyncio.wait_for(runner, 2)


def test_what_the_kubelet_does_to_an_emitted_api_pod_never_hides_the_next_change() -> None:
    # The API source's pods are kept as they come (not copied); what the merger hands out
    # must still be the kubelet's own copy.
    config = PodConfig("node")
    (added,) = config.merge("api", PodUpdate([make_pod("a")], ADD, "api"))
    added.pods[0].spec.containers[0].image = "changed-by-the-kubelet"
    emitted = config.merge("api", PodUpdate([make_pod("a", image="busybox:2")], UPDATE, "api"))
    assert summary(emitted) == [(UPDATE, ["a"])]
    assert emitted[0].pods[0].spec.containers[0].image == "busybox:2"
    assert config.merge("api", PodUpdate([make_pod("a", image="busybox:2")], UPDATE,
                                         "api")) == []


def test_a_file_source_that_changes_its_pod_after_sending_it_does_not_change_the_merger() -> None:
    config = PodConfig("node")
    pod = make_pod("a")
    config.merge("file", PodUpdate([pod], SET, "file"))
    pod.spec.containers[0].image = "busybox:2"  # the source edits its own object
    emitted = config.merge("file", PodUpdate([pod], SET, "file"))
    assert summary(emitted) == [(UPDATE, ["a"])]
