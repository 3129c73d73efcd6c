"""The container hash pykubelet computes is the one the real Go kubelet 1.20 writes.

A node handed from the Go kubelet to pykubelet in place (issue 38) keeps its
containers only if pykubelet computes, for each of them, the hash the Go
kubelet recorded in its ``io.kubernetes.container.hash`` annotation. The Go
kubelet 1.20 (built from Debian's source, as the control plane) runs static
pods whose containers use most of the spec's fields; their hashes, read over
CRI, must equal pykubelet's for the same manifests, decoded and defaulted by
pykubelet's own static-pod path.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.api.kubetypes import FILE_SOURCE
from pykubelet.cri import RemoteRuntimeService
from pykubelet.cri.errors import RuntimeUnavailableError
from pykubelet.kuberuntime.hash import container_json, hash_container
from pykubelet.sources.static import decode_static_pod
from testsupport.controlplane import cached_binaries
from testsupport.go_kubelet import GoKubeletProcess, standalone_go_kubelet
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

_BIN_DIR = cached_binaries()
pytestmark = [
    pytest.mark.containerd,
    pytest.mark.skipif(_BIN_DIR is None or not (_BIN_DIR / "kubelet").is_file(),
                       reason="no Go kubelet built (scripts/testbed/controlplane-build.sh)"),
]

HASH_ANNOTATION = "io.kubernetes.container.hash"
CONTAINERS_SECONDS = 120.0
SLEEP = ["sh", "-c", "sleep 3600"]


def busybox_pod(name: str, image: str) -> dict[str, Any]:
    """Containers over most fields: quantities in odd spellings, downward-API env, probes of
    every kind, hooks, a security context, and ``<``, ``>``, ``&`` that JSON escapes."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": image, "command": ["true"]}],
            "containers": [
                {
                    "name": "full",
                    "image": image,
                    "command": ["sh", "-c"],
                    "args": ["echo '<a & b>' \"quoted\"; sleep 3600"],
                    "workingDir": "/tmp",
                    "ports": [
                        {"name": "http", "containerPort": 8080},
                        {"name": "dns", "containerPort": 5353, "protocol": "UDP",
                         "hostIP": "127.0.0.1"},
                    ],
                    "env": [
                        {"name": "PLAIN", "value": "x<y>&z\ttab"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                            "resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "CPU", "valueFrom": {"resourceFieldRef": {
                            "resource": "requests.cpu"}}},
                        {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {
                            "containerName": "full", "resource": "limits.cpu",
                            "divisor": "1m"}}},
                    ],
                    "resources": {
                        "limits": {"cpu": "1000m", "memory": "1Gi",
                                   "ephemeral-storage": "2e9"},
                        "requests": {"cpu": 0.5, "memory": "129M"},
                    },
                    "volumeMounts": [
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "scratch", "mountPath": "/sub", "subPath": "a/b",
                         "readOnly": True},
                    ],
                    "livenessProbe": {"tcpSocket": {"port": 8080},
                                      "initialDelaySeconds": 600},
                    "readinessProbe": {
                        "httpGet": {"port": "http", "path": "/ready?a=1&b=<2>",
                                    "httpHeaders": [{"name": "X-Test", "value": "a&b"}]},
                        "periodSeconds": 30, "failureThreshold": 5,
                    },
                    "startupProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 2},
                    "lifecycle": {
                        "postStart": {"exec": {"command": ["sh", "-c", "true"]}},
                        "preStop": {"httpGet": {"port": 8080, "host": "127.0.0.1",
                                                "scheme": "HTTP"}},
                    },
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "imagePullPolicy": "Never",
                    "securityContext": {
                        "capabilities": {"add": ["NET_ADMIN", "SYS_TIME"], "drop": ["MKNOD"]},
                        "runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "privileged": False,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "stdin": True, "tty": True,
                },
                {
                    # Limits only: defaulting copies them to requests.
                    "name": "limits-only",
                    "image": image,
                    "command": SLEEP,
                    "resources": {"limits": {"cpu": "100m", "memory": "0.5Gi"}},
                    "env": [{"name": "EMPTY"}, {"name": "UNICODE", "value": "é ü \u2028"}],
                    "readinessProbe": {"tcpSocket": {"port": "http", "host": "localhost"}},
                    "ports": [{"name": "http", "containerPort": 80}],
                },
                {"name": "bare", "image": image, "command": SLEEP},
            ],
        },
    }


def edge_pod(name: str, image: str) -> dict[str, Any]:
    """Quantities the parser rewrites or keeps (finer than milli, fractions of binary units,
    exponents, leading zeros), escapes beyond HTML, and the fields the first pod leaves out."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "initContainers": [{
                "name": "init-limited", "image": image, "command": ["true"],
                "resources": {"limits": {"cpu": "0.25", "memory": "64e6"}},
            }],
            "containers": [{
                "name": "edge",
                "image": image,
                "command": ["sh", "-c", "sleep 3600 # \\ back\\slash \u0001 ctl é"],
                "ports": [{"containerPort": 9090}],
                "env": [
                    {"name": "A", "value": "\u0007bell\r\n"},
                    {"name": "MEM_KI", "valueFrom": {"resourceFieldRef": {
                        "resource": "requests.memory", "divisor": "1Ki"}}},
                ],
                "resources": {
                    "limits": {"cpu": "1.5", "memory": "096Mi"},
                    "requests": {"cpu": "0.0001", "memory": "32.5Mi"},
                },
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch",
                                  "mountPropagation": "None", "subPathExpr": "$(A)x"}],
                "readinessProbe": {"httpGet": {"port": 9090, "scheme": "HTTPS",
                                               "host": "127.0.0.1"},
                                   "initialDelaySeconds": 3, "successThreshold": 1},
                "lifecycle": {"preStop": {"tcpSocket": {"port": 9090}}},
                "terminationMessagePath": "/tmp/message",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"capabilities": {"drop": ["ALL"]}, "procMount": "Default"},
                "stdin": True, "stdinOnce": True,
            }],
        },
    }


def host_network_pod(name: str, image: str) -> dict[str, Any]:
    """On the host's network a container port is defaulted to a host port too."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"hostNetwork": True, "containers": [{
            "name": "host", "image": image, "command": SLEEP,
            "ports": [{"name": "web", "containerPort": 18089}],
        }]},
    }


def yaml_numbers_pod(name: str, image: str) -> str:
    """YAML with bare numbers where the API wants quantities and integers, in spellings
    Go's YAML reader takes for numbers and PyYAML's resolver would keep as text (``2e9``,
    ``6e2``, ``0o17``), integral floats in integer fields (``30.0``), and a bare number
    for a quantity outside the resource lists (``divisor``, ``sizeLimit``)."""
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 3e1
  volumes:
  - name: scratch
    emptyDir:
      sizeLimit: 1e9
  containers:
  - name: numbers
    image: {image}
    command: [sh, -c, sleep 3600]
    env:
    - name: MEMORY_MB
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
          divisor: 1e6
    ports:
    - containerPort: 8.08e3
    - containerPort: 0o17
    resources:
      limits:
        memory: 2e9
        cpu: 1.5e0
        ephemeral-storage: 1.5e9
      requests:
        memory: 1E8
        cpu: 0.00001
    livenessProbe:
      tcpSocket:
        port: 8.08e3
      initialDelaySeconds: 6e2
      periodSeconds: 30.0
"""


def listed_hashes(endpoint: str, pod_name: str) -> dict[str, str]:
    """The hash annotation of each container of the pod, by container name, over CRI."""

    async def read() -> dict[str, str]:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            return {c.labels["io.kubernetes.container.name"]: c.annotations[HASH_ANNOTATION]
                    for c in await service.list_containers()
                    if c.labels.get("io.kubernetes.pod.name") == pod_name}
        finally:
            await service.close()

    return asyncio.run(read())


@pytest.fixture
def go_kubelet(testbed: Testbed, tmp_path: Path) -> Iterator[GoKubeletProcess]:
    assert _BIN_DIR is not None
    with standalone_go_kubelet(tmp_path, testbed.endpoint, _BIN_DIR / "kubelet",
                               f"hash-{secrets.token_hex(3)}") as kubelet:
        yield kubelet


def test_pykubelet_computes_the_hash_the_go_kubelet_wrote(
        testbed: Testbed, go_kubelet: GoKubeletProcess) -> None:
    manifests = {}
    for make in (busybox_pod, edge_pod, host_network_pod):
        name = make.__name__.replace("_", "-")
        manifests[name] = go_kubelet.manifests / f"{name}.json"
        manifests[name].write_text(json.dumps(make(name, testbed.busybox_image)))
    manifests["yaml-numbers"] = go_kubelet.manifests / "yaml-numbers.yaml"
    manifests["yaml-numbers"].write_text(yaml_numbers_pod("yaml-numbers",
                                                          testbed.busybox_image))

    ours: dict[str, str] = {}
    shown = []
    for name, manifest in manifests.items():
        pod = decode_static_pod(manifest.read_bytes(), node_name=go_kubelet.node_name,
                                source=FILE_SOURCE, location=str(manifest))
        assert pod.spec is not None
        for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
            ours[f"{name}/{container.name}"] = format(hash_container(container), "x")
            shown.append(f"{name}/{container.name}: {container_json(container)}")

    def go_hashes() -> dict[str, str] | None:
        found = {f"{name}/{container}": value for name in manifests
                 for container, value in listed_hashes(
                     testbed.endpoint, f"{name}-{go_kubelet.node_name}").items()}
        return found if found.keys() >= ours.keys() else None

    written = wait_until(go_hashes, CONTAINERS_SECONDS, "the Go kubelet's containers",
                         ignore=(RuntimeUnavailableError,),  # a containerd slow to answer
                         on_timeout=lambda: go_kubelet.log_text()[-3000:])
    assert len(ours) == 8
    joined = "\n".join(shown)
    assert ours == written, f"pykubelet's JSON of the containers:\n{joined}"
