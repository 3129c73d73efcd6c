"""The planned decoder makes the models the generated client makes, and keeps its checks."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import from_dict, pod_uid, to_dict
from pykubelet.api.modelcodec import decode, generated_decode

# Pods as a 1.20 API server stored them during bench/soak.py's churn: plain, with
# ConfigMap / Secret / projected token volumes, with an exec readiness probe, a
# crash-looping one with a last state, a Pending one waiting, one not yet started.
CHURN_PODS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "fixtures" / "churn_pods.json").read_text())


def same_models(planned: Any, generated: Any, where: str = "pod") -> None:
    """Same classes, same attributes, same values, all the way down."""
    assert type(planned) is type(generated), where
    if isinstance(generated, list):
        assert len(planned) == len(generated), where
        for index, (a, b) in enumerate(zip(planned, generated, strict=True)):
            same_models(a, b, f"{where}[{index}]")
    elif isinstance(generated, dict):
        assert planned.keys() == generated.keys(), where
        for key in generated:
            same_models(planned[key], generated[key], f"{where}.{key}")
    elif hasattr(generated, "openapi_types"):
        assert planned.__dict__.keys() == generated.__dict__.keys(), where
        for key, value in generated.__dict__.items():
            if key != "local_vars_configuration":
                same_models(planned.__dict__[key], value, f"{where}.{key}")
    else:
        assert planned == generated, where


@pytest.mark.parametrize("pod", CHURN_PODS, ids=[p["metadata"]["name"] for p in CHURN_PODS])
def test_api_pods_decode_to_the_generated_clients_models(pod: dict[str, Any]) -> None:
    planned = from_dict(pod, V1Pod)
    same_models(planned, generated_decode(pod, "V1Pod"))
    assert planned == generated_decode(pod, "V1Pod")
    # What the kubelet reads and writes back: identity and the wire form.
    assert pod_uid(planned) == pod["metadata"]["uid"]
    assert to_dict(planned)["status"] == to_dict(generated_decode(pod, "V1Pod"))["status"]


def test_a_pod_list_decodes_as_the_generated_client_decodes_it() -> None:
    answer = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "77"},
              "items": CHURN_PODS}
    same_models(decode(answer, "V1PodList"), generated_decode(answer, "V1PodList"))


def test_the_probe_field_named_exec_is_kept() -> None:
    pod = next(p for p in CHURN_PODS if p["spec"]["containers"][0].get("readinessProbe"))
    probe = from_dict(pod, V1Pod).spec.containers[0].readiness_probe
    assert probe._exec.command == pod["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]


def test_times_are_the_same_instants_in_utc() -> None:
    pod = copy.deepcopy(CHURN_PODS[0])
    spellings = ["2026-11-29T09:55:30Z", "2026-11-29T09:55:30.123456Z",
                 "2026-11-29T10:55:30+01:00", "2026-11-29 09:55:30Z"]
    for spelling in spellings:
        pod["metadata"]["creationTimestamp"] = spelling
        planned = from_dict(pod, V1Pod).metadata.creation_timestamp
        generated = generated_decode(pod, "V1Pod").metadata.creation_timestamp
        assert planned == generated, spelling
        assert planned.utcoffset() == datetime.timedelta(0) or spelling.endswith("+01:00")


def test_values_of_another_type_are_converted_as_before() -> None:
    data = {"name": "c", "image": 5, "stdin": True,
            "ports": [{"containerPort": "8080", "name": None}],
            "env": [{"name": "A", "value": 1}], "command": None}
    planned = decode(data, "V1Container")
    same_models(planned, generated_decode(data, "V1Container"))
    assert planned.image == "5"
    assert planned.ports[0].container_port == 8080


def test_a_missing_required_field_fails_as_the_generated_client_fails() -> None:
    pod = copy.deepcopy(CHURN_PODS[0])
    del pod["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="`name`, must not be `None`"):
        from_dict(pod, V1Pod)
    pod["spec"]["containers"][0]["name"] = None
    with pytest.raises(ValueError, match="`name`, must not be `None`"):
        from_dict(pod, V1Pod)


def test_fields_checked_against_a_pattern_are_still_checked() -> None:
    spec = {"request": "not base64!", "signerName": "kubernetes.io/kube-apiserver-client-kubelet"}
    with pytest.raises(ValueError, match="request"):
        decode(spec, "V1CertificateSigningRequestSpec")
    good = {"request": "aGVsbG8=", "signerName": "kubernetes.io/kube-apiserver-client-kubelet"}
    same_models(decode(good, "V1CertificateSigningRequestSpec"),
                generated_decode(good, "V1CertificateSigningRequestSpec"))


def test_other_answers_the_kubelet_reads_decode_the_same() -> None:
    node = {"metadata": {"name": "n1", "labels": {"a": "b"}, "resourceVersion": "5"},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "2", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": "2026-11-29T09:55:30Z"}]}}
    lease = {"metadata": {"name": "n1", "namespace": "kube-node-lease"},
             "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                      "renewTime": "2026-11-29T09:55:30.123456Z"}}
    secret = {"metadata": {"name": "s"}, "data": {"k": "dmFsdWU="}, "type": "Opaque"}
    for data, kind in ((node, "V1Node"), (lease, "V1Lease"), (secret, "V1Secret"),
                       ({"items": [node]}, "V1NodeList"), ([1, "2"], "list[str]"),
                       ({"a": ["x"]}, "dict(str, list[str])"), ({"x": 1}, "object")):
        same_models(decode(data, kind), generated_decode(data, kind), kind)
