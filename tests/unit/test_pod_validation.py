"""Pod validation tells the operator exactly which field of a manifest is wrong."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from pykubelet.api import pod_from_dict
from pykubelet.api.defaults import apply_pod_defaults
from pykubelet.api.quantity import parse_quantity
from pykubelet.api.validation import decode_pod, validate_pod

GOOD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
    "spec": {
        "volumes": [{"name": "data", "emptyDir": {}}],
        "initContainers": [{"name": "setup", "image": "busybox"}],
        "containers": [{
            "name": "app", "image": "nginx:1.25",
            "ports": [{"name": "http", "containerPort": 80}],
            "env": [{"name": "MODE", "value": "prod"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                          "requests": {"cpu": "500m", "memory": "512Mi"}},
            "livenessProbe": {"httpGet": {"port": 80}},
        }],
    },
}


def errors_for(change: Any) -> list[str]:
    data = copy.deepcopy(GOOD)
    change(data)
    return validate_pod(apply_pod_defaults(pod_from_dict(data)))


def test_a_good_pod_has_no_errors() -> None:
    assert errors_for(lambda d: None) == []


def app(data: dict[str, Any], index: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = data["spec"]["containers"][index]
    return container


def add_second_container(data: dict[str, Any], **fields: Any) -> None:
    data["spec"]["containers"].append({"name": "second", "image": "busybox", **fields})


def host_network_with_host_port(data: dict[str, Any], host_port: int) -> None:
    data["spec"]["hostNetwork"] = True
    app(data)["ports"][0]["hostPort"] = host_port


def two_containers_on_host_port_80(data: dict[str, Any]) -> None:
    app(data)["ports"][0]["hostPort"] = 80
    add_second_container(data, ports=[{"containerPort": 80, "hostPort": 80}])


CASES = [
    (lambda d: d["metadata"].update(name="Web_1"), 'metadata.name: Invalid value: "Web_1"'),
    (lambda d: d["metadata"].update(name="a" * 254), "metadata.name: Invalid value"),
    (lambda d: d["metadata"].update(namespace="kube.system"),
     'metadata.namespace: Invalid value: "kube.system"'),
    (lambda d: d["spec"].update(containers=[]), "spec.containers: Required value"),
    (lambda d: add_second_container(d, name="app"),
     'spec.containers[1].name: Duplicate value: "app"'),
    (lambda d: add_second_container(d, name="setup"),
     'spec.containers[1].name: Duplicate value: "setup"'),
    (lambda d: add_second_container(d, name="Second"),
     'spec.containers[1].name: Invalid value: "Second"'),
    (lambda d: app(d).update(image=""), "spec.containers[0].image: Required value"),
    (lambda d: app(d).update(image=" nginx"), "spec.containers[0].image: Invalid value"),
    (lambda d: app(d)["ports"].append({"containerPort": 0}),
     "spec.containers[0].ports[1].containerPort: Invalid value: 0: must be between 1 and 65535"),
    (lambda d: app(d)["ports"].append({"name": "http", "containerPort": 81}),
     'spec.containers[0].ports[1].name: Duplicate value: "http"'),
    (lambda d: app(d)["ports"][0].update(protocol="HTTP"),
     'spec.containers[0].ports[0].protocol: Unsupported value: "HTTP"'),
    (lambda d: d["spec"].update(restartPolicy="Sometimes"),
     'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
     '"OnFailure", "Never"'),
    (lambda d: d["spec"]["initContainers"][0].update(restartPolicy="Never"),
     'spec.initContainers[0].restartPolicy: Unsupported value: "Never": supported values: '
     '"Always"'),
    (lambda d: d["spec"]["initContainers"][0].update(readinessProbe={"exec": {"command": ["x"]}}),
     "spec.initContainers[0].readinessProbe: Forbidden"),
    (lambda d: app(d).update(restartPolicy="Always"),
     "spec.containers[0].restartPolicy: Forbidden"),
    (lambda d: app(d)["resources"]["requests"].update(cpu="2"),
     'spec.containers[0].resources.requests[cpu]: Invalid value: "2": must be less than or '
     'equal to cpu limit of 1'),
    (lambda d: app(d)["resources"]["limits"].update(memory="lots"),
     'spec.containers[0].resources.limits[memory]: Invalid value: "lots"'),
    (lambda d: d["spec"]["volumes"].append({"name": "data", "emptyDir": {}}),
     'spec.volumes[1].name: Duplicate value: "data"'),
    (lambda d: app(d)["volumeMounts"].append({"name": "logs", "mountPath": "/logs"}),
     'spec.containers[0].volumeMounts[1].name: Not found: "logs"'),
    (lambda d: app(d)["env"].append({"name": "A=B", "value": "x"}),
     'spec.containers[0].env[1].name: Invalid value: "A=B"'),
    (lambda d: app(d)["livenessProbe"].update(periodSeconds=-1),
     "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than "
     "or equal to 0"),
    (lambda d: app(d)["livenessProbe"].update(successThreshold=2),
     "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"),
    (lambda d: app(d).update(readinessProbe={"periodSeconds": 3}),
     "spec.containers[0].readinessProbe: Required value: must specify a handler type"),
    (lambda d: d["spec"].update(terminationGracePeriodSeconds=-5),
     "spec.terminationGracePeriodSeconds: Invalid value: -5: must be greater than or equal to 0"),
    (lambda d: host_network_with_host_port(d, 8080),
     "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort`"),
    (two_containers_on_host_port_80,
     'spec.containers[1].ports[0].hostPort: Duplicate value: "80/TCP"'),
    (lambda d: app(d)["env"].append(resource_env("limits.cpu", "2")),
     'spec.containers[0].env[1].valueFrom.resourceFieldRef.divisor: Invalid value: '
     '"limits.cpu": only divisor\'s values 1m and 1 are supported with the cpu resource'),
    (lambda d: app(d)["env"].append(resource_env("requests.memory", "1e3")),
     'spec.containers[0].env[1].valueFrom.resourceFieldRef.divisor: Invalid value: '
     '"requests.memory": only divisor\'s values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, '
     '1Ti, 1Pi, 1Ei are supported with the memory resource'),
    (lambda d: app(d)["env"].append(resource_env("limits.ephemeral-storage", "10u")),
     'spec.containers[0].env[1].valueFrom.resourceFieldRef.divisor: Invalid value: '
     '"limits.ephemeral-storage": only divisor\'s values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, '
     '1Gi, 1Ti, 1Pi, 1Ei are supported with the local ephemeral storage resource'),
    (lambda d: app(d)["env"].append(resource_env("limits.hugepages-2Mi", "1m")),
     'spec.containers[0].env[1].valueFrom.resourceFieldRef.divisor: Invalid value: '
     '"limits.hugepages-2Mi": only divisor\'s values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, '
     '1Ti, 1Pi, 1Ei are supported with the hugepages resource'),
    (lambda d: app(d)["env"].append(resource_env("limits.gpu", None)),
     'spec.containers[0].env[1].valueFrom.resourceFieldRef.resource: Unsupported value: '
     '"limits.gpu": supported values: "limits.cpu", "limits.ephemeral-storage", '
     '"limits.memory", "requests.cpu", "requests.ephemeral-storage", "requests.memory"'),
    (lambda d: d["spec"]["volumes"].append({"name": "info", "downwardAPI": {"items": [
        {"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}]}}),
     "spec.volumes[1].downwardAPI.items[0].resourceFieldRef.containerName: Required value"),
    (lambda d: d["spec"]["volumes"].append({"name": "all", "projected": {"sources": [
        {"configMap": {"name": "c"}},
        {"downwardAPI": {"items": [{"path": "mem", "resourceFieldRef": {
            "containerName": "app", "resource": "limits.memory", "divisor": "3Mi"}}]}}]}}),
     'spec.volumes[1].projected.sources[1].downwardAPI.items[0].resourceFieldRef.divisor: '
     'Invalid value: "limits.memory": only divisor'),
]


def resource_env(resource: str, divisor: str | None) -> dict[str, Any]:
    ref = {"resource": resource, **({"divisor": divisor} if divisor is not None else {})}
    return {"name": "FROM_RESOURCES", "valueFrom": {"resourceFieldRef": ref}}


@pytest.mark.parametrize("divisor", ["1m", "1", "1000m", "0", None])
def test_cpu_divisors_upstream_accepts_pass(divisor: str | None) -> None:
    assert errors_for(lambda d: app(d)["env"].append(resource_env("limits.cpu", divisor))) == []


@pytest.mark.parametrize("resource", ["requests.memory", "limits.ephemeral-storage",
                                      "limits.hugepages-1Gi"])
@pytest.mark.parametrize("divisor", ["1", "1k", "1Mi", "1Ei", "1024Ki"])
def test_byte_divisors_upstream_accepts_pass(resource: str, divisor: str) -> None:
    assert errors_for(lambda d: app(d)["env"].append(resource_env(resource, divisor))) == []


@pytest.mark.parametrize(("change", "expected"), CASES)
def test_each_mistake_is_reported_with_its_field_path(change: Any, expected: str) -> None:
    errors = errors_for(change)
    assert any(e.startswith(expected) for e in errors), errors


def test_all_errors_are_reported_together() -> None:
    def many(data: dict[str, Any]) -> None:
        app(data).update(image="")
        data["spec"].update(restartPolicy="Sometimes")

    errors = errors_for(many)
    assert len(errors) == 2


def test_json_shape_names_missing_and_mistyped_fields() -> None:
    data = copy.deepcopy(GOOD)
    del app(data)["name"]
    app(data)["ports"][0]["containerPort"] = "80"
    data["spec"]["volumes"] = {"name": "data"}
    errors = decode_pod(data)[1]
    assert "spec.containers[0].name: Required value" in errors
    assert 'spec.containers[0].ports[0].containerPort: Invalid value: "80": expected an integer' \
        in errors
    assert "spec.volumes: Invalid value: object: expected a list" in errors
    assert decode_pod(GOOD)[1] == []


def test_json_shape_accepts_bare_numbers_as_quantities() -> None:
    data = copy.deepcopy(GOOD)
    app(data)["resources"] = {"limits": {"cpu": 1, "memory": 1e9}}
    assert decode_pod(data)[1] == []


@pytest.mark.parametrize(("text", "value"), [
    ("100m", Decimal("0.1")), ("1", Decimal(1)), ("1.5", Decimal("1.5")),
    ("1Ki", Decimal(1024)), ("2Gi", Decimal(2 * 2**30)), ("1k", Decimal(1000)),
    ("1e3", Decimal(1000)), ("500u", Decimal("0.0005")), (2, Decimal(2)),
])
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "lots", "1.2.3", "1KB", " 1"])
def test_parse_quantity_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
