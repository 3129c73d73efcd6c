"""Image credential provider plugins on a real kubelet, registry and containerd.

A standalone pykubelet (static pods: no API server, so no pull secrets) runs
with ``--image-credential-provider-config`` and ``--image-credential-provider-bin-dir``.
Its ``registry-login`` plugin is a small script that reads the testbed
registry's password file and answers the real ``CredentialProviderRequest``;
with it the registry's busybox is pulled although nothing else names a
credential. A second plugin never answers: a pod whose image it matches waits
for it while a pod of the other plugin starts, until upstream's one-minute
timeout kills the plugin and the pull goes on without it. A config that does not
validate stops the kubelet with exit status 1, naming the field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubelet.credentialprovider.plugin import EXEC_TIMEOUT
from testsupport.kubelet_process import KubeletProcess, busybox_pod, remove_everything
from testsupport.polling import wait_until
from testsupport.registry import Registry
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd]

V1 = "credentialprovider.kubelet.k8s.io/v1"
ERR_PULL = ("ErrImagePull", "ImagePullBackOff")

# Answers for the registry it is given, with the password from the file it is given.
LOGIN_PLUGIN = """\
import json, os, sys
request = json.load(sys.stdin)
password = open(os.environ["REGISTRY_PASSWORD_FILE"]).read().strip()
print(json.dumps({
    "apiVersion": request["apiVersion"], "kind": "CredentialProviderResponse",
    "cacheKeyType": "Registry", "cacheDuration": "0s",
    "auth": {os.environ["REGISTRY_HOST"]: {"username": os.environ["REGISTRY_USER"],
                                           "password": password}}}))
"""
# Never answers (bounded, so no process outlives the session by long).
STUCK_PLUGIN = "import sys, time\nsys.stdin.read()\ntime.sleep(90)\n"


@pytest.fixture(scope="module")
def registry(testbed: Testbed) -> Iterator[Registry]:
    with Registry.fresh(testbed.images_dir) as started:
        started.trust(testbed)
        yield started


def install_plugin(bin_dir: Path, name: str, source: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{source}")
    path.chmod(0o755)


def plugin_config(registry: Registry, path: Path) -> Path:
    repository = registry.busybox_image.rsplit(":", 1)[0]
    path.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
        "providers": [
            {"name": "registry-login", "apiVersion": V1, "defaultCacheDuration": "1m",
             "matchImages": [repository],
             "env": [{"name": "REGISTRY_PASSWORD_FILE", "value": str(registry.dir / "password")},
                     {"name": "REGISTRY_HOST", "value": registry.host},
                     {"name": "REGISTRY_USER", "value": registry.username}]},
            {"name": "stuck", "apiVersion": V1, "defaultCacheDuration": "1m",
             "matchImages": [f"{registry.host}/pykubelet/stuck"]},
        ]}))
    return path


@pytest.fixture(scope="module")
def kubelet(testbed: Testbed, registry: Registry,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeletProcess]:
    base = tmp_path_factory.mktemp("plugins")
    bin_dir = base / "plugins"
    bin_dir.mkdir()
    install_plugin(bin_dir, "registry-login", LOGIN_PLUGIN)
    install_plugin(bin_dir, "stuck", STUCK_PLUGIN)
    config = plugin_config(registry, base / "credential-providers.json")
    process = KubeletProcess(base, testbed.endpoint, extra_args=[
        "--image-credential-provider-config", str(config),
        "--image-credential-provider-bin-dir", str(bin_dir)])
    process.start()
    try:
        yield process
    finally:
        process.stop()
        remove_everything(testbed.endpoint)


def private_pod(name: str, image: str) -> dict[str, Any]:
    return busybox_pod(name, [{"name": "app", "command": ["sleep", "3600"],
                               "imagePullPolicy": "Always"}], image,
                       terminationGracePeriodSeconds=1)


def waiting_reason(kubelet: KubeletProcess, name: str) -> str | None:
    state = kubelet.container_status(name, "app").get("state") or {}
    reason: str | None = (state.get("waiting") or {}).get("reason")
    return reason


def test_the_plugins_credentials_pull_an_image_no_secret_covers(
        kubelet: KubeletProcess, registry: Registry) -> None:
    kubelet.write_pod(private_pod("via-plugin", registry.busybox_image))
    kubelet.wait_phase("via-plugin", "Running", timeout=60)
    pulled = [line for line in kubelet.events("Pulled") if "via-plugin" in line]
    assert any(f'Successfully pulled image \\"{registry.busybox_image}\\"' in line
               for line in pulled), pulled


def test_a_hanging_plugin_holds_up_only_its_own_pod(kubelet: KubeletProcess,
                                                    registry: Registry) -> None:
    kubelet.write_pod(private_pod("stuck", f"{registry.host}/pykubelet/stuck:1"))
    wait_until(lambda: kubelet.status("stuck").get("phase") == "Pending", 30, "stuck pending",
               ignore=(OSError,))
    kubelet.write_pod(private_pod("meanwhile", registry.busybox_image))
    kubelet.wait_phase("meanwhile", "Running", timeout=45)
    # The stuck pod's pull has not even failed yet: it still waits for its plugin.
    assert waiting_reason(kubelet, "stuck") in (None, "ContainerCreating")

    # After upstream's minute the plugin is killed and reported, and the pull goes on
    # without its credentials: the registry refuses it.
    kubelet.wait_for(lambda: waiting_reason(kubelet, "stuck") in ERR_PULL, EXEC_TIMEOUT + 30,
                     "the stuck pod's pull failing after the plugin's timeout")
    assert any("error execing credential provider plugin stuck" in line
               and "context deadline exceeded" in line for line in kubelet.log_text().splitlines())
    assert any("stuck" in line for line in kubelet.events("Failed"))


def test_an_invalid_plugin_config_stops_the_kubelet_naming_the_field(
        testbed: Testbed, tmp_path: Path) -> None:
    config = tmp_path / "credential-providers.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"
                      "providers:\n- name: login\n  apiVersion: " + V1 + "\n"
                      "  defaultCacheDuration: 1m\n")
    bin_dir = tmp_path / "plugins"
    bin_dir.mkdir()
    install_plugin(bin_dir, "login", LOGIN_PLUGIN)
    process = KubeletProcess(tmp_path / "kubelet", testbed.endpoint, extra_args=[
        "--image-credential-provider-config", str(config),
        "--image-credential-provider-bin-dir", str(bin_dir)])
    process.launch()
    try:
        assert process.process is not None
        code = process.process.wait(60)
    finally:
        process.stop()
    assert code == 1
    assert ("providers.matchImages: Required value: at least 1 item in matchImages is required"
            in process.log_text()), process.log_text()[-2000:]
