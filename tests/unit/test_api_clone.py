"""``pykubelet.api.clone``: the copy the kubelet takes of pods and statuses it hands around."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from kubernetes_asyncio.client import Configuration, V1PodCondition, V1PodStatus

from pykubelet.api import clone, pod_from_dict, to_dict

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                 "labels": {"app": "web"}, "annotations": {"a": "b"}},
    "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"],
                             "resources": {"limits": {"cpu": "1"}},
                             "ports": [{"containerPort": 80}]}],
             "volumes": [{"name": "v", "emptyDir": {}}]},
}


def test_a_clone_equals_its_original_and_serialises_the_same() -> None:
    pod = pod_from_dict(POD)
    copied = clone(pod)
    assert copied == pod
    assert to_dict(copied) == to_dict(pod)
    assert copied is not pod and copied.spec is not pod.spec


def test_changing_a_clone_leaves_the_original_alone() -> None:
    pod = pod_from_dict(POD)
    copied = clone(pod)
    copied.metadata.labels["app"] = "changed"
    copied.spec.containers[0].command.append("more")
    copied.spec.containers.append(copied.spec.containers[0])
    copied.spec.volumes[0].empty_dir.medium = "Memory"
    assert to_dict(pod)["metadata"] == POD["metadata"]
    assert to_dict(pod)["spec"] == POD["spec"]


def test_a_clone_shares_the_client_configuration_and_immutable_values() -> None:
    when = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    status = V1PodStatus(phase="Running", conditions=[
        V1PodCondition(type="Ready", status="True", last_transition_time=when)])
    copied = clone(status)
    assert copied.local_vars_configuration is Configuration.get_default()
    assert copied.conditions[0].last_transition_time is when
    assert copied.conditions[0] is not status.conditions[0]
    assert copied == copy.deepcopy(status)


def test_lists_and_dicts_of_models_are_cloned_element_by_element() -> None:
    statuses = {"a": [V1PodStatus(phase="Pending")]}
    copied = clone(statuses)
    copied["a"][0].phase = "Running"
    copied["b"] = []
    assert statuses == {"a": [V1PodStatus(phase="Pending")]}
