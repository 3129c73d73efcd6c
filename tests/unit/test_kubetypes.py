"""Helpers other subsystems use to ask where a pod came from."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.models import V1Pod

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import (
    API_SOURCE,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
    FILE_SOURCE,
    HTTP_SOURCE,
    PodOperation,
    get_pod_source,
    is_critical_pod,
    is_mirror_pod,
    is_static_pod,
    pod_full_name,
)


def pod(annotations: dict[str, str] | None = None, priority: int | None = None) -> V1Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if priority is not None:
        spec["priority"] = priority
    return pod_from_dict({"metadata": {"name": "web", "namespace": "prod", "uid": "u1",
                                       "annotations": annotations}, "spec": spec})


def test_operations_keep_upstream_numbering() -> None:
    assert [op.value for op in PodOperation] == [0, 1, 2, 3, 4, 5]
    assert [op.name for op in PodOperation] == ["SET", "ADD", "DELETE", "REMOVE", "UPDATE",
                                                "RECONCILE"]


def test_full_name() -> None:
    assert pod_full_name(pod()) == "web_prod"


def test_source_static_and_mirror() -> None:
    with pytest.raises(ValueError):
        get_pod_source(pod())
    assert not is_static_pod(pod())
    assert is_static_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: FILE_SOURCE}))
    assert is_static_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: HTTP_SOURCE}))
    assert not is_static_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: API_SOURCE}))
    assert is_mirror_pod(pod({CONFIG_MIRROR_ANNOTATION_KEY: "hash"}))
    assert not is_mirror_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: API_SOURCE}))


def test_critical_pods() -> None:
    assert is_critical_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: FILE_SOURCE}))
    assert is_critical_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: API_SOURCE},
                               priority=2_000_001_000))
    assert not is_critical_pod(pod({CONFIG_SOURCE_ANNOTATION_KEY: API_SOURCE}, priority=1000))

