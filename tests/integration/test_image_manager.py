"""The image manager and the generated sandbox/container configs against real containerd.

The testbed's containerd has the busybox and pause images imported and no
registry reachable, so every pull fails: a call that succeeds proves that no
pull was attempted, and a call that fails shows how failures surface.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path
from typing import Any

import pytest

from pykubelet.api import pod_from_dict
from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from pykubelet.cri.logfile import read_log_lines
from pykubelet.kuberuntime.container_config import (
    ContainerOptions,
    generate_container_config,
    image_user,
)
from pykubelet.kuberuntime.images import (
    ERR_IMAGE_NEVER_PULL,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACKOFF,
    ImageManager,
    ImagePullError,
)
from pykubelet.kuberuntime.sandbox_config import SandboxOptions, generate_pod_sandbox_config
from testsupport.polling import wait_until_async
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

UNREACHABLE_IMAGE = "127.0.0.1:5999/nothing:1"


def make_pod(image: str, pull_policy: str | None = None, **container: Any) -> Any:
    suffix = secrets.token_hex(4)
    spec: dict[str, Any] = {"name": "app", "image": image, **container}
    if pull_policy:
        spec["imagePullPolicy"] = pull_policy
    return pod_from_dict({
        "metadata": {"name": f"img-{suffix}", "namespace": "default", "uid": f"uid-{suffix}"},
        "spec": {"containers": [spec]},
    })


async def ensure(manager: ImageManager, pod: Any) -> str:
    return (await manager.ensure_image_exists(pod, pod.spec.containers[0])).ref


async def test_if_not_present_uses_the_imported_image(testbed: Testbed,
                                                      images: RemoteImageService) -> None:
    manager = ImageManager(images)
    pod = make_pod(testbed.busybox_image, "IfNotPresent")
    ref = await ensure(manager, pod)
    status = await images.image_status(testbed.busybox_image)
    assert status is not None
    assert ref == status.id


async def test_default_policy_for_a_tagged_image_does_not_pull(
        testbed: Testbed, images: RemoteImageService) -> None:
    manager = ImageManager(images)
    assert (await ensure(manager, make_pod(testbed.busybox_image))).startswith("sha256:")


async def test_never_with_a_missing_image(images: RemoteImageService) -> None:
    manager = ImageManager(images)
    with pytest.raises(ImagePullError) as err:
        await ensure(manager, make_pod(UNREACHABLE_IMAGE, "Never"))
    assert err.value.reason == ERR_IMAGE_NEVER_PULL
    assert UNREACHABLE_IMAGE in err.value.message


@pytest.mark.parametrize("policy", ["Always", "IfNotPresent"])
async def test_failed_pull_then_back_off(images: RemoteImageService, policy: str) -> None:
    manager = ImageManager(images)
    pod = make_pod(UNREACHABLE_IMAGE, policy)
    with pytest.raises(ImagePullError) as first:
        await asyncio.wait_for(ensure(manager, pod), 60)
    assert first.value.reason == ERR_IMAGE_PULL
    assert "127.0.0.1:5999" in first.value.message

    with pytest.raises(ImagePullError) as second:
        await ensure(manager, pod)
    assert second.value.reason == IMAGE_PULL_BACKOFF
    assert f'Back-off pulling image "{UNREACHABLE_IMAGE}"' in second.value.message

    # The back-off belongs to that pod: another pod's first attempt really pulls.
    with pytest.raises(ImagePullError) as other:
        await asyncio.wait_for(ensure(manager, make_pod(UNREACHABLE_IMAGE, policy)), 60)
    assert other.value.reason == ERR_IMAGE_PULL


async def test_always_pulls_even_when_present(testbed: Testbed,
                                              images: RemoteImageService) -> None:
    # The image is imported under a registry name nothing answers for, so the forced
    # pull fails: Always does not settle for the local copy.
    manager = ImageManager(images)
    with pytest.raises(ImagePullError) as err:
        await asyncio.wait_for(ensure(manager, make_pod(testbed.busybox_image, "Always")), 60)
    assert err.value.reason == ERR_IMAGE_PULL


async def _wait_for_log(path: Path, marker: bytes, timeout: float = 30.0) -> list[bytes]:
    def logged() -> list[bytes] | None:
        lines = [line.content for line in read_log_lines(path)] if path.exists() else []
        return lines if any(marker in line for line in lines) else None
    return await wait_until_async(logged, timeout, f"{marker!r} in {path}", interval=0.2)


async def test_generated_configs_run_on_containerd(testbed: Testbed, tmp_path: Path,
                                                   runtime: RemoteRuntimeService,
                                                   images: RemoteImageService) -> None:
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.0.0.2\nsearch node.example\n")
    logs_dir = tmp_path / "pod-logs"
    # Single quotes keep the shell away from the kubelet-unescaped "$(GREETING)".
    script = ('echo "greeting=$(GREETING) pod=$POD_NAME ip=$POD_IP"; '
              "echo 'escaped=$$(GREETING)'; "
              'echo "arg=$1"; echo "host=$(hostname)"; cat /etc/resolv.conf; cat /etc/hosts; '
              'echo "mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes '
              '/sys/fs/cgroup/memory.max 2>/dev/null)"; '
              'echo bye > /dev/termination-log; echo done-marker')
    pod = make_pod(testbed.busybox_image, "IfNotPresent",
                   command=["sh", "-c", script, "sh"], args=["$(WHO)"],
                   terminationMessagePath="/dev/termination-log",
                   env=[{"name": "WHO", "value": "world"},
                        {"name": "GREETING", "value": "hello $(WHO)"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                            "fieldPath": "metadata.name"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {
                            "fieldPath": "status.podIP"}}}],
                   resources={"limits": {"memory": "64Mi", "cpu": "500m"}})
    pod.spec.hostname = "configured-host"
    name, uid = pod.metadata.name, pod.metadata.uid
    sandbox_opts = SandboxOptions(pod_logs_dir=str(logs_dir), cluster_dns=["10.96.0.10"],
                                  cluster_domain="cluster.local", resolv_conf=str(resolv))
    sandbox_config = generate_pod_sandbox_config(pod, 0, sandbox_opts)
    container = pod.spec.containers[0]
    image_ref = (await ImageManager(images).ensure_image_exists(pod, container)).ref
    uid_of_image, username = image_user(await images.image_status(image_ref))

    sandbox_id = await runtime.run_pod_sandbox(sandbox_config)
    try:
        status = (await runtime.pod_sandbox_status(sandbox_id)).status
        pod_ip = status.network.ip
        opts = ContainerOptions(pod_dir=str(tmp_path / "pods" / uid), node_name="node-a",
                                pod_ips=[pod_ip] if pod_ip else [],
                                pod_logs_dir=str(logs_dir), cluster_domain="cluster.local")
        config = generate_container_config(container, pod, 0, image_ref, opts,
                                           image_uid=uid_of_image, image_username=username)
        container_id = await runtime.create_container(sandbox_id, config, sandbox_config)
        await runtime.start_container(container_id)

        log_file = logs_dir / f"default_{name}_{uid}" / "app" / "0.log"
        lines = await _wait_for_log(log_file, b"done-marker")
        output = b"\n".join(lines).decode()
        assert f"greeting=hello world pod={name} ip={pod_ip}" in output
        assert "escaped=$(GREETING)" in output
        assert "arg=world" in output
        # Unknown $(...) is left for the shell, which reads the cgroup limit we asked for.
        assert f"mem={64 * 2**20}" in output
        assert "host=configured-host" in output
        assert "nameserver 10.96.0.10" in output
        assert "search default.svc.cluster.local svc.cluster.local cluster.local node.example" \
            in output
        assert "# Kubernetes-managed hosts file." in output
        if pod_ip:
            assert f"{pod_ip}\tconfigured-host" in output
        termination_mount = next(m for m in config.mounts
                                 if m.container_path == "/dev/termination-log")
        assert Path(termination_mount.host_path).read_text() == "bye\n"

        inspected = (await runtime.container_status(container_id)).status
        assert inspected.labels["io.kubernetes.pod.uid"] == uid
        assert inspected.annotations["io.kubernetes.container.restartCount"] == "0"
        assert inspected.log_path == str(log_file)
    finally:
        with contextlib.suppress(Exception):
            await runtime.stop_pod_sandbox(sandbox_id)
        await runtime.remove_pod_sandbox(sandbox_id)
