"""Status comparison ignores heartbeats; the patch carries exactly what changed."""

from __future__ import annotations

import copy
import datetime

from kubernetes_asyncio.client import (
    V1Node,
    V1NodeAddress,
    V1NodeCondition,
    V1NodeStatus,
    V1ObjectMeta,
)

from pykubelet.api import to_dict
from pykubelet.nodestatus.patch import node_status_has_changed, node_status_patch
from tests.unit.fake_nodes import apply_strategic_merge

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)


def node() -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name="n1", labels={"a": "1"}),
        status=V1NodeStatus(
            capacity={"cpu": "2", "memory": "1Gi"},
            addresses=[V1NodeAddress(type="InternalIP", address="10.0.0.1"),
                       V1NodeAddress(type="Hostname", address="n1")],
            conditions=[
                V1NodeCondition(type="NetworkUnavailable", status="False", reason="Route"),
                V1NodeCondition(type="Ready", status="True", reason="KubeletReady",
                                last_heartbeat_time=T0, last_transition_time=T0),
            ]))


def test_heartbeat_alone_is_no_change() -> None:
    before, after = node(), node()
    after.status.conditions[1].last_heartbeat_time = T0 + datetime.timedelta(seconds=10)
    assert not node_status_has_changed(before.status, after.status)


def test_equal_quantities_in_other_units_are_no_change() -> None:
    before, after = node(), node()
    after.status.capacity["memory"] = "1024Mi"
    assert not node_status_has_changed(before.status, after.status)
    after.status.capacity["memory"] = "2Gi"
    assert node_status_has_changed(before.status, after.status)


def test_condition_change_patch_keeps_other_conditions() -> None:
    before, after = node(), node()
    after.status.conditions[1] = V1NodeCondition(
        type="Ready", status="False", reason="KubeletNotReady", message="down",
        last_heartbeat_time=T0, last_transition_time=T0 + datetime.timedelta(seconds=5))
    patch = node_status_patch(before, after)
    assert set(patch) == {"status"}
    status = patch["status"]
    assert status["$setElementOrder/conditions"] == [{"type": "NetworkUnavailable"},
                                                     {"type": "Ready"}]
    assert status["conditions"] == [{"type": "Ready", "status": "False",
                                     "reason": "KubeletNotReady", "message": "down",
                                     "lastTransitionTime": "2024-05-01T12:00:05Z"}]
    # Someone else changed NetworkUnavailable meanwhile: the patch does not undo it.
    stored = to_dict(before)
    stored["status"]["conditions"][0]["status"] = "True"
    merged = apply_strategic_merge(stored, patch)
    assert [c["status"] for c in merged["status"]["conditions"]] == ["True", "False"]


def test_addresses_are_replaced_whole_and_labels_merge() -> None:
    before, after = node(), node()
    after.status.addresses = [V1NodeAddress(type="InternalIP", address="10.0.0.2"),
                              V1NodeAddress(type="Hostname", address="n1")]
    after.metadata.labels = {"b": "2"}
    patch = node_status_patch(before, after)
    assert patch["metadata"] == {"labels": {"b": "2", "a": None}}
    assert patch["status"]["addresses"][-1] == {"$patch": "replace"}
    merged = apply_strategic_merge(to_dict(before), patch)
    assert merged == to_dict(after)


def test_nothing_changed_nothing_to_patch() -> None:
    before = node()
    assert node_status_patch(before, copy.deepcopy(before)) == {}
