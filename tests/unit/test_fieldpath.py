"""The downward API's ``resourceFieldRef`` rule, shared by env and volume files."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import V1Container

from pykubelet.api import pod_from_dict
from pykubelet.api.fieldpath import FieldPathError, field_ref_value, resource_field_value

NODE_CPU_MILLIS = 3500
NODE_MEMORY = 6 * 2**30


def container(resources: dict[str, Any] | None = None) -> V1Container:
    pod = pod_from_dict({"spec": {"containers": [
        {"name": "app", "image": "busybox", "resources": resources or {}}]}})
    found: V1Container = pod.spec.containers[0]
    return found


def value(target: V1Container, resource: str, divisor: object = None) -> str:
    return resource_field_value(target, resource, divisor, node_cpu_millis=NODE_CPU_MILLIS,
                                node_memory=NODE_MEMORY)


@pytest.mark.parametrize("zero", ["0", "0m", "0Mi", "0.0", "0e3", 0])
@pytest.mark.parametrize(("resource", "expected"), [
    ("limits.cpu", "2"), ("requests.cpu", "1"),
    ("limits.memory", str(128 * 2**20)), ("requests.memory", str(64 * 2**20)),
])
def test_a_zero_divisor_as_the_api_server_stores_it_reads_as_one(
        zero: object, resource: str, expected: str) -> None:
    target = container({"limits": {"cpu": "1500m", "memory": "128Mi"},
                        "requests": {"cpu": "250m", "memory": "64Mi"}})
    assert value(target, resource, zero) == value(target, resource, "1") == expected
    assert value(target, resource, None) == value(target, resource, "") == expected


def test_an_unset_or_zero_cpu_or_memory_limit_reads_as_the_node_allocatable() -> None:
    for target in (container(), container({"limits": {"cpu": "0", "memory": "0"}})):
        assert value(target, "limits.cpu", "0") == "4"  # 3.5 cores, rounded up
        assert value(target, "limits.cpu", "1m") == str(NODE_CPU_MILLIS)
        assert value(target, "limits.memory", "1Mi") == str(6 * 1024)
    # Requests have no such default: an unset request is zero.
    assert value(container(), "requests.cpu") == "0"
    assert value(container(), "requests.memory") == "0"


def test_values_are_rounded_up_in_units_of_the_divisor() -> None:
    target = container({"limits": {"cpu": "1001m", "memory": "1537",
                                   "ephemeral-storage": "1Gi", "hugepages-2Mi": "4Mi"},
                        "requests": {"cpu": "1m", "ephemeral-storage": "1500M"}})
    assert value(target, "limits.cpu") == "2"
    assert value(target, "limits.cpu", "1m") == "1001"
    assert value(target, "requests.cpu") == "1"
    assert value(target, "limits.memory", "1Ki") == "2"
    assert value(target, "limits.ephemeral-storage", "1Mi") == "1024"
    assert value(target, "requests.ephemeral-storage", "1G") == "2"
    assert value(target, "limits.hugepages-2Mi", "1Mi") == "4"
    # A limit without a request: the request the API server would have defaulted.
    assert value(target, "requests.hugepages-2Mi", "0") == str(4 * 2**20)


@pytest.mark.parametrize("resource", ["limits.gpu", "cpu", "spec.cpu", "requests.", ""])
def test_an_unknown_resource_is_refused(resource: str) -> None:
    with pytest.raises(FieldPathError, match="unsupported container resource"):
        value(container({"limits": {"cpu": "1"}}), resource)


def test_an_unreadable_divisor_is_refused() -> None:
    with pytest.raises(FieldPathError, match=r"invalid resourceFieldRef limits\.cpu"):
        value(container(), "limits.cpu", "one")


def test_labels_and_annotations_as_one_value_are_quoted_as_upstream_writes_them() -> None:
    # Upstream writes each value with Go's %q; programs in the pod parse that text.
    pod = pod_from_dict({"metadata": {"name": "p", "annotations": {
        "bell": "ring\x07 del\x7f", "sep": "a\u2028b", "word": "grüß \"hi\""}}})
    assert field_ref_value(pod, "metadata.annotations") == (
        'bell="ring\\a del\\x7f"\nsep="a\\u2028b"\nword="grüß \\"hi\\""')
