"""Pods get the API server's defaults, so static pods look like pods from a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api import pod_from_dict, to_dict
from pykubelet.api.defaults import apply_pod_defaults, default_image_pull_policy


def defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    pod = pod_from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": spec})
    result: dict[str, Any] = to_dict(apply_pod_defaults(pod))["spec"]
    return result


def test_pod_spec_defaults() -> None:
    spec = defaulted({"containers": [{"name": "c", "image": "busybox"}]})
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    # Set by admission plugins, not by defaulting: must stay unset.
    assert "priority" not in spec
    assert "preemptionPolicy" not in spec


def test_explicit_values_are_kept() -> None:
    spec = defaulted({"restartPolicy": "Never", "dnsPolicy": "Default",
                      "terminationGracePeriodSeconds": 0, "enableServiceLinks": False,
                      "containers": [{"name": "c", "image": "busybox",
                                      "imagePullPolicy": "Never",
                                      "terminationMessagePolicy": "FallbackToLogsOnError"}]})
    assert spec["restartPolicy"] == "Never"
    assert spec["dnsPolicy"] == "Default"
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["enableServiceLinks"] is False
    assert spec["containers"][0]["imagePullPolicy"] == "Never"
    assert spec["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_container_defaults_apply_to_init_containers_too() -> None:
    spec = defaulted({"initContainers": [{"name": "i", "image": "busybox:1.36",
                                          "restartPolicy": "Always"}],
                      "containers": [{"name": "c", "image": "busybox:1.36",
                                      "ports": [{"containerPort": 53}, {"containerPort": 54,
                                                                        "protocol": "UDP"}]}]})
    for container in (spec["initContainers"][0], spec["containers"][0]):
        assert container["terminationMessagePath"] == "/dev/termination-log"
        assert container["terminationMessagePolicy"] == "File"
        assert container["imagePullPolicy"] == "IfNotPresent"
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert [p["protocol"] for p in spec["containers"][0]["ports"]] == ["TCP", "UDP"]


@pytest.mark.parametrize(("image", "policy"), [
    ("busybox", "Always"),
    ("busybox:latest", "Always"),
    ("registry.local:5000/team/app", "Always"),
    ("busybox:1.36", "IfNotPresent"),
    ("registry.local:5000/team/app:v2", "IfNotPresent"),
    ("busybox@sha256:" + "a" * 64, "IfNotPresent"),
    ("busybox:latest@sha256:" + "a" * 64, "Always"),
])
def test_image_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert default_image_pull_policy(image) == policy


def test_probe_and_lifecycle_defaults() -> None:
    spec = defaulted({"containers": [{
        "name": "c", "image": "busybox",
        "livenessProbe": {"httpGet": {"port": 8080}},
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5},
        "startupProbe": {"exec": {"command": ["true"]}, "failureThreshold": 30},
        "lifecycle": {"preStop": {"httpGet": {"port": 8080, "path": "/quit"}}},
    }]})
    container = spec["containers"][0]
    liveness = container["livenessProbe"]
    assert (liveness["timeoutSeconds"], liveness["periodSeconds"], liveness["successThreshold"],
            liveness["failureThreshold"]) == (1, 10, 1, 3)
    assert liveness["httpGet"]["scheme"] == "HTTP"
    assert liveness["httpGet"]["path"] == "/"
    assert container["readinessProbe"]["periodSeconds"] == 5
    assert container["startupProbe"]["failureThreshold"] == 30
    assert container["startupProbe"]["timeoutSeconds"] == 1
    assert container["lifecycle"]["preStop"]["httpGet"] == {"port": 8080, "path": "/quit",
                                                           "scheme": "HTTP"}


def test_env_field_ref_gets_api_version() -> None:
    spec = defaulted({"containers": [{"name": "c", "image": "busybox", "env": [
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]})
    assert spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"


def test_volume_defaults() -> None:
    spec = defaulted({"containers": [{"name": "c", "image": "busybox"}], "volumes": [
        {"name": "scratch"},
        {"name": "host", "hostPath": {"path": "/var/log"}},
        {"name": "cfg", "configMap": {"name": "settings"}},
        {"name": "creds", "secret": {"secretName": "token", "defaultMode": 256}},
    ]})
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["scratch"]["emptyDir"] == {}
    assert volumes["host"]["hostPath"]["type"] == ""
    assert volumes["cfg"]["configMap"]["defaultMode"] == 420
    assert volumes["creds"]["secret"]["defaultMode"] == 256


def test_requests_default_to_limits_when_unset() -> None:
    spec = defaulted({"containers": [
        {"name": "a", "image": "busybox", "resources": {"limits": {"cpu": "500m",
                                                                   "memory": "64Mi"}}},
        {"name": "b", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                                        "requests": {"cpu": "100m"}}},
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}},
    ]})
    requests = [c["resources"].get("requests") for c in spec["containers"]]
    assert requests == [{"cpu": "500m", "memory": "64Mi"}, {"cpu": "100m", "memory": "1Gi"},
                        {"cpu": "100m"}]


def test_host_network_turns_container_ports_into_host_ports() -> None:
    spec = defaulted({"hostNetwork": True, "containers": [
        {"name": "c", "image": "busybox", "ports": [{"containerPort": 9100}]}]})
    assert spec["containers"][0]["ports"][0]["hostPort"] == 9100
