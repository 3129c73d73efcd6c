"""Labels, annotations, spec hash and log paths that a restarted kubelet reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from pykubelet.api import pod_from_dict
from pykubelet.kuberuntime import labels as L
from pykubelet.kuberuntime.hash import hash_container
from pykubelet.kuberuntime.logs import container_log_file, container_log_path, pod_logs_directory

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web",
        "namespace": "shop",
        "uid": "1234-abcd",
        "labels": {"app": "web", L.POD_NAME_LABEL: "spoofed"},
        "annotations": {"team": "blue"},
        "deletionGracePeriodSeconds": 12,
    },
    "spec": {
        "terminationGracePeriodSeconds": 45,
        "initContainers": [{"name": "setup", "image": "busybox:1.35"}],
        "containers": [{
            "name": "nginx",
            "image": "nginx:1.25",
            "command": ["nginx", "-g", "daemon off;"],
            "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "lifecycle": {"preStop": {"exec": {"command": ["nginx", "-s", "quit"]}}},
        }],
    },
}


def test_sandbox_labels_keep_pod_labels_and_identity_wins() -> None:
    pod = pod_from_dict(POD)
    labels = L.new_pod_sandbox_labels(pod)
    assert labels["app"] == "web"
    assert labels[L.POD_NAME_LABEL] == "web"
    info = L.get_pod_sandbox_info_from_labels(labels)
    assert (info.pod_name, info.pod_namespace, info.pod_uid) == ("web", "shop", "1234-abcd")
    assert info.labels == {"app": "web"}
    assert L.new_pod_sandbox_annotations(pod) == {"team": "blue"}


def test_container_labels_round_trip() -> None:
    pod = pod_from_dict(POD)
    labels = L.new_container_labels(pod.spec.containers[0], pod)
    assert labels["io.kubernetes.container.name"] == "nginx"
    info = L.get_container_info_from_labels(labels)
    assert info == L.LabeledContainerInfo("nginx", "web", "shop", "1234-abcd")


def test_container_annotations_round_trip() -> None:
    pod = pod_from_dict(POD)
    container = pod.spec.containers[0]
    annotations = L.new_container_annotations(container, pod, restart_count=3)
    # Upstream writes the hash in hex; other tools (and the Go kubelet) parse it that way.
    assert annotations["io.kubernetes.container.hash"] == format(hash_container(container), "x")
    info = L.get_container_info_from_annotations(annotations)
    assert info.hash == hash_container(container)
    assert info.restart_count == 3
    assert info.termination_message_path == "/dev/termination-log"
    assert info.termination_message_policy == "FallbackToLogsOnError"
    assert info.pod_termination_grace_period == 45
    assert info.pod_deletion_grace_period == 12
    assert info.pre_stop_handler is not None
    assert info.pre_stop_handler._exec.command == ["nginx", "-s", "quit"]
    assert [(p.container_port, p.host_port) for p in info.container_ports] == [(80, 8080)]
    assert info.container_type == "container"


def test_init_container_is_annotated_as_init() -> None:
    pod = pod_from_dict(POD)
    annotations = L.new_container_annotations(pod.spec.init_containers[0], pod, 0)
    assert annotations["io.kubernetes.container.type"] == "init"
    assert "io.kubernetes.container.preStopHandler" not in annotations
    assert "io.kubernetes.pod.terminationGracePeriod" in annotations


def test_missing_or_malformed_annotations_read_as_defaults() -> None:
    info = L.get_container_info_from_annotations({
        "io.kubernetes.container.hash": "not-hex",
        "io.kubernetes.container.preStopHandler": "{broken",
    })
    assert info.hash == 0
    assert info.restart_count == 0
    assert info.pod_termination_grace_period is None
    assert info.pre_stop_handler is None


def _hash_in_new_process(container_json: str) -> int:
    code = (
        "import json,sys\n"
        "from pykubelet.api import from_dict\n"
        "from kubernetes_asyncio.client import V1Container\n"
        "from pykubelet.kuberuntime.hash import hash_container\n"
        "print(hash_container(from_dict(json.loads(sys.argv[1]), V1Container)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    out = subprocess.run([sys.executable, "-c", code, container_json], check=True,
                         capture_output=True, text=True, env=env)
    return int(out.stdout)


def test_hash_is_stable_across_processes() -> None:
    container = POD["spec"]["containers"][0]
    here = hash_container(pod_from_dict(POD).spec.containers[0])
    assert _hash_in_new_process(json.dumps(container)) == here
    assert _hash_in_new_process(json.dumps(container)) == here


def test_hash_changes_when_image_or_command_changes() -> None:
    base = pod_from_dict(POD).spec.containers[0]
    edited_image = pod_from_dict(POD).spec.containers[0]
    edited_image.image = "nginx:1.26"
    edited_command = pod_from_dict(POD).spec.containers[0]
    edited_command.command = ["nginx", "-g", "daemon on;"]
    hashes = {hash_container(base), hash_container(edited_image), hash_container(edited_command)}
    assert len(hashes) == 3
    assert 0 < hash_container(base) < 2**32


def test_log_paths_follow_the_upstream_layout() -> None:
    assert pod_logs_directory("/var/log/pods", "shop", "web", "1234") == \
        "/var/log/pods/shop_web_1234"
    assert container_log_path("nginx", 2) == "nginx/2.log"
    assert container_log_file("/var/log/pods", "shop", "web", "1234", "nginx", 0) == \
        "/var/log/pods/shop_web_1234/nginx/0.log"
