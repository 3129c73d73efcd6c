"""Static pod identity and manifest decoding: what an operator's manifest turns into."""

from __future__ import annotations

import json
import re

import pytest
from kubernetes_asyncio.client.models import V1Pod

from pykubelet.api import to_dict
from pykubelet.api.kubetypes import (
    CONFIG_FIRST_SEEN_ANNOTATION_KEY,
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
)
from pykubelet.sources.static import (
    ManifestError,
    decode_static_pod,
    decode_static_pods,
    rfc3339_nano,
)

MANIFEST = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx:1.25
    ports:
    - containerPort: 80
"""


def decode(data: str, node: str = "node-a",
           path: str = "/etc/kubernetes/manifests/web.yaml") -> V1Pod:
    return decode_static_pod(data, node_name=node, source="file", location=path)


def test_same_manifest_gets_the_same_uid_on_every_read() -> None:
    first, second = decode(MANIFEST), decode(MANIFEST)
    assert first.metadata.uid == second.metadata.uid
    assert re.fullmatch(r"[0-9a-f]{32}", first.metadata.uid)


def test_layout_and_comments_do_not_change_the_uid() -> None:
    as_json = json.dumps({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"labels": {"app": "web"}, "name": "web"},
                          "spec": {"containers": [{"image": "nginx:1.25", "name": "nginx",
                                                   "ports": [{"containerPort": 80}]}]}})
    commented = "# the web server\n" + MANIFEST
    assert decode(as_json).metadata.uid == decode(MANIFEST).metadata.uid
    assert decode(commented).metadata.uid == decode(MANIFEST).metadata.uid


def test_an_edit_changes_the_uid() -> None:
    edited = MANIFEST.replace("nginx:1.25", "nginx:1.26")
    assert decode(edited).metadata.uid != decode(MANIFEST).metadata.uid


def test_uid_is_the_go_kubelet_120s_whatever_the_node_and_file_path() -> None:
    # The Go kubelet 1.20 hashes the pod alone (its node and path writes are reset), so a
    # static pod keeps its UID when the node changes hands between the two kubelets.
    base = decode(MANIFEST).metadata.uid
    assert decode(MANIFEST, node="node-b").metadata.uid == base
    assert decode(MANIFEST, path="/etc/kubernetes/manifests/other.yaml").metadata.uid == base


def test_name_is_suffixed_with_the_lower_cased_node_name() -> None:
    pod = decode(MANIFEST, node="Worker-1")
    assert pod.metadata.name == "web-worker-1"
    assert pod.spec.node_name == "Worker-1"


def test_namespace_defaults_but_an_explicit_one_is_kept() -> None:
    assert decode(MANIFEST).metadata.namespace == "default"
    in_kube_system = MANIFEST.replace("  name: web\n", "  name: web\n  namespace: kube-system\n")
    assert decode(in_kube_system).metadata.namespace == "kube-system"


def test_static_annotations_and_toleration() -> None:
    pod = decode(MANIFEST)
    annotations = pod.metadata.annotations
    assert annotations[CONFIG_HASH_ANNOTATION_KEY] == pod.metadata.uid
    assert annotations[CONFIG_SOURCE_ANNOTATION_KEY] == "file"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z",
                        annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY])
    tolerations = [to_dict(t) for t in pod.spec.tolerations]
    assert tolerations == [{"operator": "Exists", "effect": "NoExecute"}]
    assert pod.status.phase == "Pending"


def test_existing_toleration_is_not_duplicated() -> None:
    with_toleration = MANIFEST + "  tolerations:\n  - operator: Exists\n    effect: NoExecute\n"
    assert len(decode(with_toleration).spec.tolerations) == 1


def test_an_explicit_uid_is_kept() -> None:
    pinned = MANIFEST.replace("  name: web\n", "  name: web\n  uid: pinned-uid\n")
    pod = decode(pinned)
    assert pod.metadata.uid == "pinned-uid"
    assert pod.metadata.annotations[CONFIG_HASH_ANNOTATION_KEY] == "pinned-uid"


def test_api_server_defaults_are_applied() -> None:
    pod = decode(MANIFEST)
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.containers[0].ports[0].protocol == "TCP"


def test_url_pods_do_not_depend_on_the_node_and_are_not_given_the_toleration() -> None:
    def from_url(node: str) -> V1Pod:
        return decode_static_pods(MANIFEST, node_name=node, source="http",
                                  location="http://config/pods")[0]

    assert from_url("a").metadata.uid == from_url("b").metadata.uid
    assert from_url("a").metadata.annotations[CONFIG_SOURCE_ANNOTATION_KEY] == "http"
    assert from_url("a").spec.tolerations is None


def test_pod_list_is_decoded_item_by_item() -> None:
    pod = json.loads(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"},
                                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    other = json.loads(json.dumps(pod))
    other["metadata"]["name"] = "b"
    listing = json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [pod, other]})
    pods = decode_static_pods(listing, node_name="n", source="http", location="http://x")
    assert [p.metadata.name for p in pods] == ["a-n", "b-n"]
    assert pods[0].metadata.uid != pods[1].metadata.uid


def test_one_bad_item_rejects_the_whole_list() -> None:
    listing = {"apiVersion": "v1", "kind": "PodList", "items": [
        {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
        {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c"}]}},
    ]}
    with pytest.raises(ManifestError, match=r"items\[1\].*spec.containers\[0\].image"):
        decode_static_pods(json.dumps(listing), node_name="n", source="http", location="u")


@pytest.mark.parametrize(("manifest", "reason"), [
    ("{{", "invalid YAML or JSON"),
    ("", "empty manifest"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "couldn't parse as pod"),
    ("- a\n- b\n", "expected a Pod object"),
    (MANIFEST + "---\n" + MANIFEST, "found 2 YAML documents"),
    (MANIFEST.replace("name: nginx", "image: dup"), r"spec.containers\[0\].name: Required"),
    (MANIFEST.replace("containerPort: 80", "containerPort: http"),
     r"containerPort: Invalid value: \"http\": expected an integer"),
    (MANIFEST.replace("name: web", "name: Web_Server"), "metadata.name: Invalid value"),
])
def test_unusable_manifests_are_rejected_with_the_reason(manifest: str, reason: str) -> None:
    with pytest.raises(ManifestError, match=reason):
        decode(manifest)


NUMBERS_AS_GO_READS_THEM = """\
apiVersion: v1
kind: Pod
metadata: {name: numbers}
spec:
  terminationGracePeriodSeconds: 3e1
  volumes: [{name: scratch, emptyDir: {sizeLimit: 1e9}}]
  containers:
  - name: c
    image: busybox:1.35
    ports: [{containerPort: 8.08e3}, {containerPort: 0o17}]
    env:
    - name: MEMORY_MB
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1e6}}
    resources:
      limits: {memory: 2e9, cpu: 1.5e0}
      requests: {memory: 1E8, cpu: 0.00001}
"""


def test_numbers_read_as_go_yaml_reads_them_give_the_pod_their_json_gives() -> None:
    # What upstream's YAML-to-JSON step writes for the YAML above.
    as_json = json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "numbers"},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": 1000000000}}],
            "containers": [{
                "name": "c", "image": "busybox:1.35",
                "ports": [{"containerPort": 8080}, {"containerPort": 15}],
                "env": [{"name": "MEMORY_MB", "valueFrom": {"resourceFieldRef": {
                    "resource": "limits.memory", "divisor": 1000000}}}],
                "resources": {"limits": {"memory": 2000000000, "cpu": 1.5},
                              "requests": {"memory": 100000000, "cpu": 0.00001}},
            }],
        },
    })
    from_yaml, from_json = decode(NUMBERS_AS_GO_READS_THEM), decode(as_json)
    assert to_dict(from_yaml.spec) == to_dict(from_json.spec)
    assert from_yaml.metadata.uid == from_json.metadata.uid
    container = from_yaml.spec.containers[0]
    assert container.resources.limits["memory"] == "2000000000"
    assert container.resources.requests["cpu"] == "0.00001"  # not Python's 1e-05
    assert container.env[0].value_from.resource_field_ref.divisor == "1000000"
    assert from_yaml.spec.volumes[0].empty_dir.size_limit == "1000000000"


def test_a_fraction_in_an_integer_field_is_refused() -> None:
    with pytest.raises(ManifestError, match=r"containerPort: Invalid value: 80.5: expected an "
                                            r"integer"):
        decode(MANIFEST.replace("containerPort: 80", "containerPort: 80.5"))


def test_rfc3339_nano_trims_trailing_zeros() -> None:
    assert rfc3339_nano(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert rfc3339_nano(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert rfc3339_nano(1_700_000_000_000_000_001) == "2023-11-14T22:13:20.000000001Z"
