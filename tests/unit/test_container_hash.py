"""The container hash is the Go kubelet's, so containers survive a kubelet swap (issue 38).

The golden hashes below were read over CRI from containers the real Go kubelet
v1.20.2 (built from Debian's ``kubernetes`` source package) created for static
pods (tests/integration/test_go_container_hash.py's manifests, written as
JSON), on 2026-11-29. Each container is given as Go's JSON of the
``v1.Container`` it hashed (static-pod decoding and defaulting done), which is
also what a 1.20 API server serves for the same pod. The quantity table and the
v1.35 (name and image) hashes were checked against upstream's own
``resource.Quantity`` and ``json.Marshal`` at v1.20.2.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio.client import V1Container

from pykubelet.api import from_dict
from pykubelet.api.gojson import go_json_string, go_quantity
from pykubelet.container import ContainerID, ContainerState, ContainerStatus
from pykubelet.kuberuntime.actions import container_changed
from pykubelet.kuberuntime.hash import (
    container_hash_matches,
    container_json,
    hash_container,
    hash_container_name_image,
)
from pykubelet.sources.static import decode_static_pod

IMAGE = "pykubelet.local/busybox:1.35"
DEFAULTED = {"terminationMessagePath": "/dev/termination-log",
             "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}

FULL: dict[str, Any] = {
    "name": "full", "image": IMAGE, "command": ["sh", "-c"],
    "args": ["echo '<a & b>' \"quoted\"; sleep 3600"], "workingDir": "/tmp",
    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
              {"name": "dns", "containerPort": 5353, "protocol": "UDP", "hostIP": "127.0.0.1"}],
    "env": [
        {"name": "PLAIN", "value": "x<y>&z\ttab"},
        {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                   "fieldPath": "metadata.name"}}},
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                              "divisor": "1Mi"}}},
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu",
                                                           "divisor": "0"}}},
        {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {
            "containerName": "full", "resource": "limits.cpu", "divisor": "1m"}}},
    ],
    "resources": {"limits": {"cpu": "1", "ephemeral-storage": "2e9", "memory": "1Gi"},
                  "requests": {"cpu": "500m", "ephemeral-storage": "2e9", "memory": "129M"}},
    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                     {"name": "scratch", "readOnly": True, "mountPath": "/sub",
                      "subPath": "a/b"}],
    "livenessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 600,
                      "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                      "failureThreshold": 3},
    "readinessProbe": {"httpGet": {"path": "/ready?a=1&b=<2>", "port": "http",
                                   "scheme": "HTTP",
                                   "httpHeaders": [{"name": "X-Test", "value": "a&b"}]},
                       "timeoutSeconds": 1, "periodSeconds": 30, "successThreshold": 1,
                       "failureThreshold": 5},
    "startupProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 2, "periodSeconds": 10,
                     "successThreshold": 1, "failureThreshold": 3},
    "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "true"]}},
                  "preStop": {"httpGet": {"path": "/", "port": 8080, "host": "127.0.0.1",
                                          "scheme": "HTTP"}}},
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "FallbackToLogsOnError", "imagePullPolicy": "Never",
    "securityContext": {"capabilities": {"add": ["NET_ADMIN", "SYS_TIME"], "drop": ["MKNOD"]},
                        "privileged": False, "runAsUser": 1000, "runAsGroup": 3000,
                        "runAsNonRoot": True, "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "seccompProfile": {"type": "RuntimeDefault"}},
    "stdin": True, "tty": True,
}
LIMITS_ONLY: dict[str, Any] = {
    "name": "limits-only", "image": IMAGE, "command": ["sh", "-c", "sleep 3600"],
    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
    "env": [{"name": "EMPTY"}, {"name": "UNICODE", "value": "é ü \u2028"}],
    "resources": {"limits": {"cpu": "100m", "memory": "512Mi"},
                  "requests": {"cpu": "100m", "memory": "512Mi"}},
    "readinessProbe": {"tcpSocket": {"port": "http", "host": "localhost"},
                       "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1,
                       "failureThreshold": 3},
    **DEFAULTED,
}
EDGE: dict[str, Any] = {
    "name": "edge", "image": IMAGE,
    "command": ["sh", "-c", "sleep 3600 # \\ back\\slash \x01 ctl é"],
    "ports": [{"containerPort": 9090, "protocol": "TCP"}],
    "env": [{"name": "A", "value": "\x07bell\r\n"},
            {"name": "MEM_KI", "valueFrom": {"resourceFieldRef": {
                "resource": "requests.memory", "divisor": "1Ki"}}}],
    "resources": {"limits": {"cpu": "1500m", "memory": "96Mi"},
                  "requests": {"cpu": "1m", "memory": "33280Ki"}},
    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "mountPropagation": "None",
                      "subPathExpr": "$(A)x"}],
    "readinessProbe": {"httpGet": {"path": "/", "port": 9090, "host": "127.0.0.1",
                                   "scheme": "HTTPS"},
                       "initialDelaySeconds": 3, "timeoutSeconds": 1, "periodSeconds": 10,
                       "successThreshold": 1, "failureThreshold": 3},
    "lifecycle": {"preStop": {"tcpSocket": {"port": 9090}}},
    "terminationMessagePath": "/tmp/message", "terminationMessagePolicy": "File",
    "imagePullPolicy": "IfNotPresent",
    "securityContext": {"capabilities": {"drop": ["ALL"]}, "procMount": "Default"},
    "stdin": True, "stdinOnce": True,
}
HOST: dict[str, Any] = {
    "name": "host", "image": IMAGE, "command": ["sh", "-c", "sleep 3600"],
    "ports": [{"name": "web", "hostPort": 18089, "containerPort": 18089, "protocol": "TCP"}],
    "resources": {}, **DEFAULTED,
}
BARE: dict[str, Any] = {"name": "bare", "image": IMAGE, "command": ["sh", "-c", "sleep 3600"],
                        "resources": {}, **DEFAULTED}

GOLDEN = [(FULL, 0x59418A70), (LIMITS_ONLY, 0x94780162), (EDGE, 0xC0119C9F),
          (HOST, 0x91EA2969), (BARE, 0x23177A49)]


def container(data: dict[str, Any]) -> V1Container:
    return from_dict(data, V1Container)


@pytest.mark.parametrize(("served", "written"), GOLDEN, ids=[c["name"] for c, _ in GOLDEN])
def test_hash_is_the_one_the_go_kubelet_wrote(served: dict[str, Any], written: int) -> None:
    assert hash_container(container(served)) == written


def test_json_is_gos_byte_for_byte() -> None:
    # Go's field order, not alphabetical; resources always present; HTML characters escaped.
    assert container_json(container(BARE)) == (
        '{"name":"bare","image":"pykubelet.local/busybox:1.35",'
        '"command":["sh","-c","sleep 3600"],"resources":{},'
        '"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File",'
        '"imagePullPolicy":"IfNotPresent"}')
    edge = container_json(container(EDGE))
    assert '"command":["sh","-c","sleep 3600 # \\\\ back\\\\slash \\u0001 ctl é"]' in edge
    assert '"value":"\\u0007bell\\r\\n"' in edge


def test_static_pods_hash_as_the_go_kubelet_decodes_them() -> None:
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [
            {"name": "limits-only", "image": IMAGE, "command": ["sh", "-c", "sleep 3600"],
             "resources": {"limits": {"cpu": "100m", "memory": "0.5Gi"}},
             "env": [{"name": "EMPTY"}, {"name": "UNICODE", "value": "é ü \u2028"}],
             "readinessProbe": {"tcpSocket": {"port": "http", "host": "localhost"}},
             "ports": [{"name": "http", "containerPort": 80}]},
            {"name": "edge", "image": IMAGE, "command": EDGE["command"], "env": EDGE["env"],
             "ports": [{"containerPort": 9090}],
             "resources": {"limits": {"cpu": "1.5", "memory": "096Mi"},
                           "requests": {"cpu": "0.0001", "memory": "32.5Mi"}},
             "volumeMounts": EDGE["volumeMounts"],
             "readinessProbe": {"httpGet": {"port": 9090, "scheme": "HTTPS",
                                            "host": "127.0.0.1"},
                                "initialDelaySeconds": 3},
             "lifecycle": EDGE["lifecycle"], "terminationMessagePath": "/tmp/message",
             "imagePullPolicy": "IfNotPresent", "securityContext": EDGE["securityContext"],
             "stdin": True, "stdinOnce": True},
        ], "volumes": [{"name": "scratch", "emptyDir": {}}]},
    }
    pod = decode_static_pod(json.dumps(manifest), node_name="n", source="file", location="p")
    assert pod.spec is not None
    assert [hash_container(c) for c in pod.spec.containers] == [0x94780162, 0xC0119C9F]


@pytest.mark.parametrize(("written", "marshalled", "in_resource_list"), [
    ("0.5", "500m", "500m"),
    ("1000m", "1", "1"),
    ("1Gi", "1Gi", "1Gi"),
    ("129M", "129M", "129M"),
    ("2000", "2k", "2k"),
    ("1.0", "1", "1"),
    ("0.5Gi", "512Mi", "512Mi"),
    ("32.5Mi", "33280Ki", "33280Ki"),
    ("1024Ki", "1Mi", "1Mi"),
    ("1025Ki", "1025Ki", "1025Ki"),
    ("0.001Ki", "1024m", "1024m"),
    ("1e3", "1e3", "1e3"),
    ("1.5e3", "1500", "1500"),
    ("12e-1", "1200e-3", "1200e-3"),
    ("9Ei", "9223372036854775807", "9223372036854775807"),
    # Kept as written: upstream's parser judges these canonical.
    ("007", "007", "007"),
    ("+1", "+1", "+1"),
    # Finer than milli: a ResourceList's defaulting rounds them up.
    ("0.0001", "100u", "1m"),
    ("1.1m", "1100u", "2m"),
    ("1.2345", "1234500u", "1235m"),
])
def test_quantities_marshal_as_go_writes_them(written: str, marshalled: str,
                                              in_resource_list: str) -> None:
    assert go_quantity(written) == marshalled
    assert go_quantity(written, round_up_to_milli=True) == in_resource_list


def test_unset_quantity_and_pointers_follow_go_zero_values() -> None:
    assert go_quantity(None) == "0"
    probe = {"name": "g", "livenessProbe": {"grpc": {"port": 9000}}}
    # A nil *string without omitempty is null; a false *bool is kept; a false bool is not.
    text = container_json(container({**probe, "securityContext": {"privileged": False},
                                     "stdin": False}))
    assert '"grpc":{"port":9000,"service":null}' in text
    assert '"securityContext":{"privileged":false}' in text
    assert "stdin" not in text


def test_strings_escape_as_go_does() -> None:
    assert go_json_string('<a & "b">\\\u2028\u2029\x1f\n\té') == \
        '"\\u003ca \\u0026 \\"b\\"\\u003e\\\\\\u2028\\u2029\\u001f\\n\\té"'


def test_v1_35_hash_covers_name_and_image_only() -> None:
    # Golden values: upstream's json.Marshal of the name/image map and DeepHashObject.
    assert hash_container_name_image(container({"name": "nginx", "image": "nginx:1.25"})) == \
        0x5D0E8BC9
    assert hash_container_name_image(container({"name": "a<b", "image": "x&y"})) == 0x7414A638
    with_command = container({"name": "nginx", "image": "nginx:1.25", "command": ["x"]})
    assert hash_container_name_image(with_command) == 0x5D0E8BC9


def _status(recorded: int) -> ContainerStatus:
    return ContainerStatus(id=ContainerID("containerd", "c1"), name="nginx",
                           state=ContainerState.RUNNING, hash=recorded)


def test_containers_of_either_go_kubelet_are_adopted_and_edits_restart_them() -> None:
    spec = container({"name": "nginx", "image": "nginx:1.25", "command": ["nginx"]})
    by_120, by_135 = hash_container(spec), hash_container_name_image(spec)
    assert container_hash_matches(spec, by_120)
    assert not container_changed(spec, _status(by_120))
    assert not container_changed(spec, _status(by_135))
    assert container_changed(spec, _status(by_120 ^ 1))
    edited = container({"name": "nginx", "image": "nginx:1.26", "command": ["nginx"]})
    assert container_changed(edited, _status(by_120))
    assert container_changed(edited, _status(by_135))
