"""Pulls from a private registry with the pod's image pull secrets, as a cluster user sees them.

The registry is the testbed's own (scripts/testbed/registry.sh): Debian's
docker-registry over TLS from a CA the testbed containerd trusts, asking for
basic auth on every request. Pods name its copy of busybox with
``imagePullPolicy: Always``, so every start is a real pull: with the right
``kubernetes.io/dockerconfigjson`` or legacy ``kubernetes.io/dockercfg``
secret it runs; without credentials, or with a wrong password, containerd's
pull is refused and the container waits in ``ErrImagePull`` then
``ImagePullBackOff``; a secret created later is read by the next attempt and
the pod starts, with no kubelet restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testsupport.cluster import (
    ClusterKubelet,
    api_pod,
    create,
    get_pod,
    kubelet_and_namespace,
    pod_events,
    unique,
)
from testsupport.controlplane import ControlPlane
from testsupport.polling import wait_until
from testsupport.registry import Registry
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]

# Upstream's image back-off starts at 10 s and doubles: a refused pod is retried at
# about 10 s, 30 s and 70 s after its first attempt.
RECOVERY_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def registry(testbed: Testbed) -> Iterator[Registry]:
    with Registry.fresh(testbed.images_dir) as started:
        started.trust(testbed)
        yield started


@dataclass
class PrivateCluster:
    plane: ControlPlane
    kubelet: ClusterKubelet
    registry: Registry
    namespace: str

    def create_pod(self, name: str, *pull_secrets: str) -> None:
        manifest = api_pod(name, self.kubelet.node_name, self.registry.busybox_image, grace=1,
                           imagePullSecrets=[{"name": s} for s in pull_secrets])
        manifest["spec"]["containers"][0]["imagePullPolicy"] = "Always"
        manifest["metadata"]["namespace"] = self.namespace
        create(self.plane, manifest)

    def create_secret(self, name: str, *, legacy: bool = False,
                      password: str | None = None) -> None:
        if legacy:
            secret_type, key = "kubernetes.io/dockercfg", ".dockercfg"
            value = self.registry.dockercfg(password=password)
        else:
            secret_type, key = "kubernetes.io/dockerconfigjson", ".dockerconfigjson"
            value = self.registry.docker_config_json(password=password)
        self.plane.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "type": secret_type,
            "metadata": {"name": name, "namespace": self.namespace}, "data": {key: value}}))

    def container_status(self, name: str) -> dict[str, Any]:
        pod = get_pod(self.plane, name, self.namespace) or {}
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        status: dict[str, Any] = statuses[0]
        return status

    def waiting_reason(self, name: str) -> str | None:
        reason: str | None = ((self.container_status(name).get("state") or {})
                              .get("waiting") or {}).get("reason")
        return reason

    def running(self, name: str) -> bool:
        return "running" in (self.container_status(name).get("state") or {})

    def events(self, name: str) -> list[dict[str, Any]]:
        return pod_events(self.plane, name, self.namespace)

    def log_tail(self) -> str:
        return (f"kubelet log tail:\n{self.kubelet.log_text()[-4000:]}\n"
                f"registry log tail:\n{_tail(self.registry.log_path)}")


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-20:])
    except OSError:
        return ""


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, testbed: Testbed, registry: Registry,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    with kubelet_and_namespace(control_plane, testbed.endpoint,
                               tmp_path_factory.mktemp("registry"), prefix="registry") as (
            kubelet, namespace):
        yield PrivateCluster(control_plane, kubelet, registry, namespace)


@pytest.mark.parametrize("legacy", [False, True], ids=["dockerconfigjson", "dockercfg"])
def test_a_private_image_is_pulled_with_the_pods_pull_secret(cluster: PrivateCluster,
                                                             legacy: bool) -> None:
    secret, name = unique("creds"), unique("private")
    cluster.create_secret(secret, legacy=legacy)
    cluster.create_pod(name, secret)
    wait_until(lambda: cluster.running(name), 60, f"pod {name} running",
               on_timeout=cluster.log_tail)
    image = cluster.registry.busybox_image
    wait_until(lambda: any(e["reason"] == "Pulled" for e in cluster.events(name)), 30,
               "the Pulled event")
    pulled = next(e for e in cluster.events(name) if e["reason"] == "Pulled")
    assert pulled["message"].startswith(f'Successfully pulled image "{image}" in ')


def test_a_pull_without_credentials_is_refused_and_backs_off(cluster: PrivateCluster) -> None:
    wrong, anonymous, bad_password = unique("wrong"), unique("anonymous"), unique("badpw")
    cluster.create_secret(wrong, password="not-the-password")
    cluster.create_pod(anonymous)
    cluster.create_pod(bad_password, wrong)
    image = cluster.registry.busybox_image
    for name in (anonymous, bad_password):
        seen: set[str] = set()

        def backing_off(pod: str = name, reasons: set[str] = seen) -> bool:
            reason = cluster.waiting_reason(pod)
            if reason:
                reasons.add(reason)
            return reason == "ImagePullBackOff"

        wait_until(backing_off, 60, f"pod {name} in ImagePullBackOff",
                   on_timeout=cluster.log_tail)
        assert "ErrImagePull" in seen or any(
            e["message"] == "Error: ErrImagePull" for e in cluster.events(name))
        status = cluster.container_status(name)
        assert status["state"]["waiting"]["message"].startswith(
            f'Back-off pulling image "{image}": ErrImagePull: ')
        assert not status.get("ready") and status.get("restartCount") == 0
        reasons = {e["reason"]: e for e in cluster.events(name)}
        assert reasons["Failed"]["type"] == "Warning"
        assert reasons["BackOff"]["message"] == f'Back-off pulling image "{image}"'
        failed = [e["message"] for e in cluster.events(name) if e["reason"] == "Failed"]
        assert any(m.startswith(f'Failed to pull image "{image}": ') for m in failed)
        assert "Error: ErrImagePull" in failed and "Error: ImagePullBackOff" in failed


def test_a_secret_created_later_lets_the_waiting_pod_start(cluster: PrivateCluster) -> None:
    secret, name = unique("late"), unique("waiting")
    cluster.create_pod(name, secret)
    wait_until(lambda: cluster.waiting_reason(name) in ("ErrImagePull", "ImagePullBackOff"),
               60, f"pod {name} refused", on_timeout=cluster.log_tail)
    missing = [e for e in cluster.events(name)
               if e["reason"] == "FailedToRetrieveImagePullSecret"]
    assert missing and f"({secret})" in missing[0]["message"]
    kubelet_pid = cluster.kubelet.process.pid if cluster.kubelet.process else None

    cluster.create_secret(secret)
    wait_until(lambda: cluster.running(name), RECOVERY_TIMEOUT, f"pod {name} running",
               on_timeout=cluster.log_tail)
    assert cluster.container_status(name)["restartCount"] == 0
    assert cluster.kubelet.process is not None and cluster.kubelet.process.pid == kubelet_pid
    assert cluster.kubelet.process.poll() is None


def test_stopping_a_registry_removes_it_and_the_trust_it_gave(testbed: Testbed) -> None:
    registry = Registry.fresh(testbed.images_dir)
    registry.start()
    registry.trust(testbed)
    hosts = testbed.dir / "certs.d" / registry.host / "hosts.toml"
    assert f'ca = "{registry.ca_path}"' in hosts.read_text()
    registry.stop()
    assert not hosts.parent.exists()
    assert not registry.dir.exists()
    registry.stop()  # idempotent
