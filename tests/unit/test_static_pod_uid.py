"""A static pod's UID is the one the Go kubelet 1.20 gives the same manifest.

A node swapped between the Go kubelet and pykubelet keeps its static pods only
if both derive the same UID from the manifest. The golden UIDs below were read
from the real Go kubelet 1.20.2 (built from Debian's source, run standalone with
these manifests in its static pod directory, tests/integration/test_go_static_pod_uid.py):
its ``/pods`` and the ``io.kubernetes.pod.uid`` label of its sandboxes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubelet.api.gospew_pod import UnrenderablePod, internal_pod_json, spew_pod
from pykubelet.api.kubetypes import FILE_SOURCE, HTTP_SOURCE
from pykubelet.sources.static import decode_static_pod, decode_static_pods, static_pod_uid

IMAGE = "pykubelet.local/busybox:1.35"
SLEEP = ["sh", "-c", "sleep 3600"]


def swap_static_pod() -> dict[str, Any]:
    """The swap's static pod (testsupport/swap.py)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static-web"},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                "name": "web", "image": IMAGE,
                "command": ["httpd", "-f", "-p", "18080", "-h", "/etc"]}]}}


def containers_pod() -> dict[str, Any]:
    """Resources in several spellings (limits only, requests only, both), env of every
    source, probes of every kind, hooks, a container security context, an init container."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "uid-containers", "labels": {"app": "web", "tier": "b"},
                     "annotations": {"note": "x<y>&z", "empty": ""}},
        "spec": {
            "initContainers": [{"name": "init", "image": IMAGE, "command": ["true"],
                                "resources": {"limits": {"cpu": "0.25", "memory": "64e6"}}}],
            "containers": [
                {
                    "name": "full", "image": IMAGE, "command": ["sh", "-c"],
                    "args": ["echo 'a b' \"q\"; sleep 3600"], "workingDir": "/tmp",
                    "ports": [{"name": "http", "containerPort": 8080},
                              {"name": "dns", "containerPort": 5353, "protocol": "UDP",
                               "hostIP": "127.0.0.1"}],
                    "envFrom": [{"prefix": "CM_", "configMapRef": {"name": "cm",
                                                                   "optional": True}},
                                {"secretRef": {"name": "sec", "optional": True}}],
                    "env": [
                        {"name": "PLAIN", "value": "x<y>&z\ttab é"},
                        {"name": "EMPTY"},
                        {"name": "POD", "valueFrom": {"fieldRef": {
                            "fieldPath": "metadata.name"}}},
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {
                            "resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "CPU", "valueFrom": {"resourceFieldRef": {
                            "resource": "requests.cpu"}}},
                        {"name": "KEY", "valueFrom": {"configMapKeyRef": {
                            "name": "cm", "key": "k", "optional": True}}},
                        {"name": "SECRET", "valueFrom": {"secretKeyRef": {
                            "name": "sec", "key": "k", "optional": True}}},
                    ],
                    "resources": {"limits": {"cpu": "1000m", "memory": "1Gi",
                                             "ephemeral-storage": "2e9"},
                                  "requests": {"cpu": 0.5, "memory": "129M"}},
                    "livenessProbe": {"tcpSocket": {"port": 8080},
                                      "initialDelaySeconds": 600},
                    "readinessProbe": {"httpGet": {"port": "http", "path": "/ready?a=1",
                                                   "httpHeaders": [{"name": "X-T",
                                                                    "value": "a&b"}]},
                                       "periodSeconds": 30, "failureThreshold": 5},
                    "startupProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 2},
                    "lifecycle": {"postStart": {"exec": {"command": ["true"]}},
                                  "preStop": {"httpGet": {"port": 8080,
                                                          "host": "127.0.0.1"}}},
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "imagePullPolicy": "Never",
                    "securityContext": {
                        "capabilities": {"add": ["NET_ADMIN"], "drop": ["MKNOD"]},
                        "runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "privileged": False, "seccompProfile": {"type": "RuntimeDefault"}},
                    "stdin": True, "tty": True,
                },
                {"name": "limits-only", "image": IMAGE, "command": SLEEP,
                 "resources": {"limits": {"cpu": "100m", "memory": "0.5Gi"}}},
                {"name": "odd-quantities", "image": IMAGE, "command": SLEEP,
                 "resources": {"limits": {"cpu": "1.5", "memory": "096Mi",
                                          "hugepages-2Mi": "0"},
                               "requests": {"cpu": "0.0001", "memory": "32.5Mi"}}},
                {"name": "bare", "image": "pykubelet.local/busybox", "command": SLEEP,
                 "args": []},
            ],
        },
    }


def volumes_pod() -> dict[str, Any]:
    """Volumes of most kinds, with and without the fields defaulting fills in."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "uid-volumes"},
        "spec": {
            "serviceAccountName": "default",
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "memory", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "nothing"},
                {"name": "host", "hostPath": {"path": "/tmp"}},
                {"name": "host-dir", "hostPath": {"path": "/tmp", "type": "Directory"}},
                {"name": "cm", "configMap": {"name": "cm", "optional": True,
                                             "items": [{"key": "a", "path": "a.txt",
                                                        "mode": 0o600}]}},
                {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400,
                                           "optional": True}},
                {"name": "down", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "cpu", "resourceFieldRef": {"containerName": "app",
                                                         "resource": "limits.cpu",
                                                         "divisor": "1m"}}]}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": "cm", "optional": True}},
                    {"secret": {"name": "sec", "optional": True,
                                "items": [{"key": "k", "path": "k"}]}},
                    {"downwardAPI": {"items": [{"path": "name", "fieldRef": {
                        "fieldPath": "metadata.name"}}]}},
                    {"serviceAccountToken": {"path": "token", "audience": "api"}}]}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "data",
                                                             "readOnly": True}},
            ],
            "containers": [{
                "name": "app", "image": IMAGE, "command": SLEEP,
                "volumeMounts": [
                    {"name": "scratch", "mountPath": "/scratch"},
                    {"name": "memory", "mountPath": "/memory", "readOnly": True},
                    {"name": "host", "mountPath": "/host", "mountPropagation": "None",
                     "subPathExpr": "$(POD)"},
                    {"name": "cm", "mountPath": "/cm", "subPath": "a.txt"},
                ],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.name"}}}],
            }],
        },
    }


def host_pod() -> dict[str, Any]:
    """The host's namespaces, pod-level settings and scheduling fields."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "uid-host", "namespace": "kube-system", "labels": {},
                     "annotations": {"b": "2", "a": "1", "B": "0"}},
        "spec": {
            "hostNetwork": True, "hostPID": True, "hostIPC": True,
            "dnsPolicy": "ClusterFirstWithHostNet", "restartPolicy": "OnFailure",
            "activeDeadlineSeconds": 86400, "terminationGracePeriodSeconds": 0,
            "priorityClassName": "system-node-critical", "priority": 2000001000,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "enableServiceLinks": False, "automountServiceAccountToken": False,
            "serviceAccount": "old-name",
            "tolerations": [{"operator": "Exists"},
                            {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"},
                            {"key": "k", "operator": "Equal", "value": "v",
                             "effect": "NoExecute", "tolerationSeconds": 30}],
            "securityContext": {"runAsUser": 0, "fsGroup": 2000,
                                "supplementalGroups": [5, 6],
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a", "b"]}],
            "dnsConfig": {"nameservers": ["1.1.1.1"], "options": [{"name": "ndots",
                                                                 "value": "2"}]},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
            "containers": [{
                "name": "host", "image": IMAGE, "command": SLEEP,
                "ports": [{"name": "web", "containerPort": 18089}],
                "readinessProbe": {"httpGet": {"port": 18089, "scheme": "HTTPS"}},
                "securityContext": {"privileged": True},
            }],
        },
    }


# Read from the Go kubelet 1.20.2 (see the module docstring).
GOLDEN: dict[str, tuple[dict[str, Any], str]] = {
    "static-web": (swap_static_pod(), "7eb03e5a51af4acd21fefb47a0ada952"),
    "uid-containers": (containers_pod(), "c570ddf2017ba88df72c11745adab47d"),
    "uid-volumes": (volumes_pod(), "2f9e6b689bac8506dc2bb5c33b166464"),
    "uid-host": (host_pod(), "2842001da76ece1292557399c5e7239b"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_a_static_pod_has_the_uid_the_go_kubelet_120_gives_it(name: str) -> None:
    manifest, golden = GOLDEN[name]
    pod = decode_static_pod(json.dumps(manifest), node_name="node-a", source=FILE_SOURCE,
                            location=f"/etc/kubernetes/manifests/{name}.json")
    assert pod.metadata is not None
    assert pod.metadata.uid == golden


def test_the_uid_does_not_depend_on_the_node_the_path_or_the_source() -> None:
    manifest, golden = GOLDEN["static-web"]
    data = json.dumps(manifest)
    from_file = decode_static_pod(data, node_name="other-node", source=FILE_SOURCE,
                                  location="/somewhere/else.yaml")
    from_url = decode_static_pods(data, node_name="node-b", source=HTTP_SOURCE,
                                  location="http://127.0.0.1:8080/pods")
    listed = decode_static_pods(json.dumps({"apiVersion": "v1", "kind": "PodList",
                                            "items": [manifest]}),
                                node_name="node-b", source=HTTP_SOURCE,
                                location="http://127.0.0.1:8080/list")
    uids = {pod.metadata.uid for pod in [from_file, *from_url, *listed] if pod.metadata}
    assert uids == {golden}


def test_yaml_and_json_of_one_manifest_give_one_uid() -> None:
    yaml_text = """\
apiVersion: v1
kind: Pod
metadata:
  name: static-web
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: web
    image: pykubelet.local/busybox:1.35
    command: [httpd, -f, -p, "18080", -h, /etc]
"""
    pod = decode_static_pod(yaml_text, node_name="n", source=FILE_SOURCE, location="/m.yaml")
    assert pod.metadata is not None and pod.metadata.uid == GOLDEN["static-web"][1]


def test_any_edit_gives_another_uid() -> None:
    manifest, golden = GOLDEN["static-web"]
    edited = json.loads(json.dumps(manifest))
    edited["spec"]["containers"][0]["command"][-1] = "/tmp"
    with_label = json.loads(json.dumps(manifest))
    with_label["metadata"]["labels"] = {}
    uids = {static_pod_uid(edited), static_pod_uid(with_label), golden}
    assert len(uids) == 3


def test_an_explicit_uid_is_kept() -> None:
    manifest = json.loads(json.dumps(GOLDEN["static-web"][0]))
    manifest["metadata"]["uid"] = "my-own-uid"
    pod = decode_static_pod(json.dumps(manifest), node_name="n", source=FILE_SOURCE,
                            location="/m.json")
    assert pod.metadata is not None and pod.metadata.uid == "my-own-uid"


def test_spew_prints_the_internal_pod_as_go_spew_does() -> None:
    text = spew_pod(GOLDEN["static-web"][0])
    assert text.startswith("(*core.Pod){TypeMeta:(v1.TypeMeta){Kind:(string) "
                           "APIVersion:(string)} ObjectMeta:(v1.ObjectMeta){Name:(string)"
                           "static-web GenerateName:(string) ")
    assert ("Command:([]string)[httpd -f -p 18080 -h /etc] Args:([]string)<nil>" in text)
    assert "TerminationGracePeriodSeconds:(*int64)5 " in text
    assert "SecurityContext:(*core.PodSecurityContext){HostNetwork:(bool)false " in text


def test_quantities_print_their_parsed_internals() -> None:
    pod = {"metadata": {"name": "q"}, "spec": {"containers": [{
        "name": "c", "image": IMAGE,
        "resources": {"limits": {"cpu": "100m", "memory": "0.5Gi"},
                      "requests": {"cpu": "0.0001"}}}]}}
    text = spew_pod(pod)
    assert ("cpu:{i:(resource.int64Amount){value:(int64)100 scale:(resource.Scale)-3} "
            "d:(resource.infDecAmount){Dec:(*inf.Dec)<nil>} s:(string)100m "
            "Format:(resource.Format)DecimalSI}") in text
    # 0.5Gi has no exact int64 form in the parser: an inf.Dec, rounded up to milli units.
    assert ("memory:{i:(resource.int64Amount){value:(int64)0 scale:(resource.Scale)0} "
            "d:(resource.infDecAmount){Dec:(*inf.Dec){unscaled:(big.Int){neg:(bool)false "
            "abs:(big.nat)[536870912000]} scale:(inf.Scale)3}} s:(string) "
            "Format:(resource.Format)BinarySI}") in text
    # 0.0001 is finer than milli: rounded up to 1m, its text dropped.
    assert ("cpu:{i:(resource.int64Amount){value:(int64)1 scale:(resource.Scale)-3} "
            "d:(resource.infDecAmount){Dec:(*inf.Dec)<nil>} s:(string) "
            "Format:(resource.Format)DecimalSI}") in text


def test_the_host_namespaces_move_into_the_security_context() -> None:
    internal = internal_pod_json(host_pod())
    spec = internal["spec"]
    assert "hostNetwork" not in spec
    assert spec["securityContext"]["hostNetwork"] is True
    assert spec["serviceAccountName"] == "old-name"
    assert spec["containers"][0]["ports"][0]["hostPort"] == 18089


def test_a_pod_spew_cannot_render_still_gets_a_stable_uid() -> None:
    manifest = json.loads(json.dumps(GOLDEN["static-web"][0]))
    manifest["metadata"]["creationTimestamp"] = "2021-01-01T00:00:00Z"
    with pytest.raises(UnrenderablePod):
        spew_pod(manifest)
    first = static_pod_uid(manifest)
    assert first == static_pod_uid(json.loads(json.dumps(manifest)))
    assert len(first) == 32 and first != GOLDEN["static-web"][1]
