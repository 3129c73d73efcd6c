"""QoS classes, resource quantities and the OOM-killer priority they give containers."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from pykubelet.api import pod_from_dict
from pykubelet.api.qos import (
    BEST_EFFORT,
    BURSTABLE,
    GUARANTEED,
    container_oom_score_adjust,
    get_pod_qos,
)
from pykubelet.api.quantity import QuantityError, cpu_to_millis, memory_to_bytes, parse_quantity

GIB = 2**30


def make_pod(*resources: dict[str, Any], init: dict[str, Any] | None = None,
             **spec: Any) -> Any:
    containers = [{"name": f"c{i}", "image": "busybox:1.35", "resources": r}
                  for i, r in enumerate(resources)]
    body: dict[str, Any] = {"containers": containers, **spec}
    if init is not None:
        body["initContainers"] = [{"name": "init", "image": "busybox:1.35", "resources": init}]
    return pod_from_dict({"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
                          "spec": body})


@pytest.mark.parametrize(("text", "expected"), [
    ("500m", Fraction(1, 2)), ("64Mi", 64 * 2**20), ("1.5", Fraction(3, 2)), ("1e3", 1000),
    ("2k", 2000), ("1Gi", GIB), (".5", Fraction(1, 2)), (3, 3), ("100n", Fraction(1, 10**7)),
])
def test_parse_quantity(text: Any, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "1.2.3", "5 Mi", "m", "1KB", "abc"])
def test_parse_quantity_rejects_garbage(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_cpu_and_memory_round_up() -> None:
    assert cpu_to_millis("0.1") == 100
    assert cpu_to_millis("100u") == 1  # upstream MilliValue rounds up
    assert memory_to_bytes("1.5Ki") == 1536
    assert memory_to_bytes("0.5") == 1


def test_no_resources_is_best_effort() -> None:
    assert get_pod_qos(make_pod({}, {})) == BEST_EFFORT


def test_zero_requests_are_ignored() -> None:
    assert get_pod_qos(make_pod({"requests": {"cpu": "0", "memory": "0"}})) == BEST_EFFORT


def test_equal_requests_and_limits_for_cpu_and_memory_is_guaranteed() -> None:
    both = {"cpu": "500m", "memory": "64Mi"}
    assert get_pod_qos(make_pod({"requests": both, "limits": both})) == GUARANTEED


def test_limits_only_default_requests_and_are_guaranteed() -> None:
    assert get_pod_qos(make_pod({"limits": {"cpu": "1", "memory": "1Gi"}})) == GUARANTEED


def test_limit_above_request_is_burstable() -> None:
    pod = make_pod({"requests": {"cpu": "250m", "memory": "64Mi"},
                    "limits": {"cpu": "500m", "memory": "64Mi"}})
    assert get_pod_qos(pod) == BURSTABLE


def test_memory_only_is_burstable() -> None:
    assert get_pod_qos(make_pod({"limits": {"memory": "64Mi"}})) == BURSTABLE


def test_one_unlimited_container_makes_the_pod_burstable() -> None:
    both = {"cpu": "1", "memory": "1Gi"}
    assert get_pod_qos(make_pod({"limits": both}, {})) == BURSTABLE
    assert get_pod_qos(make_pod({"limits": both}, init={})) == BURSTABLE


def test_extended_resources_do_not_count() -> None:
    assert get_pod_qos(make_pod({"limits": {"example.com/gpu": "1"}})) == BEST_EFFORT


def test_status_qos_class_wins() -> None:
    pod = make_pod({})
    pod.status = pod_from_dict({"status": {"qosClass": "Burstable"}}).status
    assert get_pod_qos(pod) == BURSTABLE


def test_oom_score_adj_per_qos_class() -> None:
    guaranteed = make_pod({"limits": {"cpu": "1", "memory": "1Gi"}})
    best_effort = make_pod({})
    assert container_oom_score_adjust(guaranteed, guaranteed.spec.containers[0], 8 * GIB) == -997
    assert container_oom_score_adjust(best_effort, best_effort.spec.containers[0], 8 * GIB) == 1000


def test_burstable_oom_score_falls_with_the_memory_request() -> None:
    small = make_pod({"requests": {"memory": "1Gi"}})
    large = make_pod({"requests": {"memory": "6Gi"}})
    none = make_pod({"requests": {"cpu": "100m"}})
    huge = make_pod({"requests": {"memory": "16Gi"}})
    capacity = 8 * GIB
    assert container_oom_score_adjust(small, small.spec.containers[0], capacity) == 875
    assert container_oom_score_adjust(large, large.spec.containers[0], capacity) == 250
    # Never as safe as Guaranteed, never as exposed as BestEffort.
    assert container_oom_score_adjust(huge, huge.spec.containers[0], capacity) == 3
    assert container_oom_score_adjust(none, none.spec.containers[0], capacity) == 999


def test_node_critical_static_pod_is_protected_like_guaranteed() -> None:
    pod = make_pod({}, priorityClassName="system-node-critical")
    pod.metadata.annotations = {"kubernetes.io/config.source": "file"}
    assert container_oom_score_adjust(pod, pod.spec.containers[0], 8 * GIB) == -997
    pod.metadata.annotations = {"kubernetes.io/config.source": "api"}
    assert container_oom_score_adjust(pod, pod.spec.containers[0], 8 * GIB) == 1000
