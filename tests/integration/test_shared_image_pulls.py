"""Pods that need the same private image at once get it from one pull, on a real kubelet,
registry and containerd.

A standalone pykubelet with ``serializeImagePulls: false`` gets three static
pods naming an image no containerd has pulled (a fresh copy inside the
testbed registry), with ``imagePullPolicy: IfNotPresent``. Their credentials
come from a credential provider plugin that takes a few seconds to answer:
its one run is shared by the three pods, so all three reach the pull at the
same moment, where each would have sent a ``PullImage`` of its own. containerd
logs every CRI ``PullImage`` it gets: there is one for the image, and every
pod runs with its own ``Pulling`` and ``Pulled`` events.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.kubelet_process import KubeletProcess, busybox_pod, remove_everything
from testsupport.registry import Registry, credential_plugin_flags
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd]

PODS = ("shared-a", "shared-b", "shared-c")
# Long enough for the three pods' sandboxes to be made while the first pod's lookup runs.
PLUGIN_DELAY_SECONDS = 4
SLOW_LOGIN_PLUGIN = """\
import json, os, sys, time
request = json.load(sys.stdin)
time.sleep(float(os.environ["DELAY_SECONDS"]))
password = open(os.environ["REGISTRY_PASSWORD_FILE"]).read().strip()
print(json.dumps({
    "apiVersion": request["apiVersion"], "kind": "CredentialProviderResponse",
    "cacheKeyType": "Image", "cacheDuration": "0s",
    "auth": {os.environ["REGISTRY_HOST"]: {"username": os.environ["REGISTRY_USER"],
                                           "password": password}}}))
"""


@pytest.fixture(scope="module")
def registry(testbed: Testbed) -> Iterator[Registry]:
    with Registry.fresh(testbed.images_dir) as started:
        started.trust(testbed)
        yield started


def write_plugin(base: Path, registry: Registry, repository: str) -> list[str]:
    return credential_plugin_flags(
        base, name="slow-login", source=SLOW_LOGIN_PLUGIN,
        match_image=f"{registry.host}/{repository}", cache_duration="0s",
        env={"REGISTRY_PASSWORD_FILE": str(registry.dir / "password"),
             "REGISTRY_HOST": registry.host, "REGISTRY_USER": registry.username,
             "DELAY_SECONDS": str(PLUGIN_DELAY_SECONDS)})


def cri_pulls(testbed: Testbed, image: str) -> list[str]:
    """containerd's log lines for each CRI PullImage request of ``image``."""
    request = re.compile(r'msg="PullImage \\"' + re.escape(image) + r'\\""')
    return [line for line in testbed.containerd_log.read_text(errors="replace").splitlines()
            if request.search(line)]


def test_pods_needing_one_image_at_once_share_one_pull(testbed: Testbed, registry: Registry,
                                                       tmp_path: Path) -> None:
    repository = f"pykubelet/shared-{secrets.token_hex(4)}"
    image = registry.copy_image(registry.busybox_image, repository)
    kubelet = KubeletProcess(tmp_path, testbed.endpoint,
                             extra_config={"serializeImagePulls": False,
                                           "maxParallelImagePulls": 5},
                             extra_args=write_plugin(tmp_path, registry, repository))
    kubelet.start()
    try:
        for name in PODS:
            pod: dict[str, Any] = busybox_pod(
                name, [{"name": "app", "command": ["sleep", "3600"],
                        "imagePullPolicy": "IfNotPresent"}], image,
                terminationGracePeriodSeconds=1)
            kubelet.write_pod(pod)
        for name in PODS:
            kubelet.wait_phase(name, "Running", timeout=60)

        pulls = cri_pulls(testbed, image)
        assert len(pulls) == 1, pulls
        for name in PODS:
            pulling = [line for line in kubelet.events("Pulling") if name in line]
            pulled = [line for line in kubelet.events("Pulled") if name in line]
            assert pulling and any(f'Successfully pulled image \\"{image}\\"' in line
                                   for line in pulled), (pulling, pulled)
    finally:
        kubelet.stop()
        remove_everything(testbed.endpoint)
