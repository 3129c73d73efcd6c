"""The containerd testbed really behaves like a node's container runtime.

These tests talk raw CRI v1 (no pykubelet code) so that a failure here points
at the testbed, not at the kubelet: the runtime answers, the test images are
present, pods get an IP on the testbed's bridge network and serve traffic,
removal frees their resources, and containers survive a runtime restart.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import secrets
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from testsupport.polling import wait_until_async
from testsupport.testbed import BUSYBOX_IMAGE, CNI_LEASE_DIR, PAUSE_IMAGE, POD_SUBNET, Testbed

pytestmark = pytest.mark.containerd

CALL_TIMEOUT = 30.0
PAGE = "hello from pykubelet testbed"


@dataclass
class Cri:
    runtime: api_pb2_grpc.RuntimeServiceStub
    images: api_pb2_grpc.ImageServiceStub


@pytest.fixture
async def cri(testbed: Testbed) -> AsyncIterator[Cri]:
    async with grpc.aio.insecure_channel(testbed.endpoint) as channel:
        yield Cri(api_pb2_grpc.RuntimeServiceStub(channel),
                  api_pb2_grpc.ImageServiceStub(channel))


def sandbox_config(log_dir: Path) -> api_pb2.PodSandboxConfig:
    uid = secrets.token_hex(8)
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=f"web-{uid[:6]}", uid=uid,
                                            namespace="default", attempt=0),
        hostname="web",
        log_directory=str(log_dir),
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=api_pb2.NamespaceOption(
                    network=api_pb2.POD, pid=api_pb2.CONTAINER, ipc=api_pb2.POD))),
    )


async def run_pod(cri: Cri, log_dir: Path, command: list[str]) -> tuple[str, str]:
    """Start a pod with one busybox container; return (sandbox id, container id)."""
    config = sandbox_config(log_dir)
    sandbox = await cri.runtime.RunPodSandbox(
        api_pb2.RunPodSandboxRequest(config=config), timeout=CALL_TIMEOUT)
    container = await cri.runtime.CreateContainer(api_pb2.CreateContainerRequest(
        pod_sandbox_id=sandbox.pod_sandbox_id,
        config=api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="main", attempt=0),
            image=api_pb2.ImageSpec(image=BUSYBOX_IMAGE),
            command=command,
            log_path="main/0.log"),
        sandbox_config=config), timeout=CALL_TIMEOUT)
    await cri.runtime.StartContainer(
        api_pb2.StartContainerRequest(container_id=container.container_id), timeout=CALL_TIMEOUT)
    return sandbox.pod_sandbox_id, container.container_id


async def remove_pod(cri: Cri, sandbox_id: str) -> None:
    await cri.runtime.StopPodSandbox(
        api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT)
    await cri.runtime.RemovePodSandbox(
        api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT)


async def exec_until_ok(cri: Cri, container_id: str, cmd: list[str]) -> str:
    """ExecSync ``cmd`` until it exits 0 (a server may still be starting); return stdout."""
    last = api_pb2.ExecSyncResponse()

    async def succeeded() -> bool:
        nonlocal last
        last = await cri.runtime.ExecSync(
            api_pb2.ExecSyncRequest(container_id=container_id, cmd=cmd, timeout=5),
            timeout=CALL_TIMEOUT)
        return last.exit_code == 0

    await wait_until_async(
        succeeded, 15, f"{cmd} to succeed", interval=0.1,
        on_timeout=lambda: f"it kept failing: exit {last.exit_code}, {last.stderr!r}")
    return last.stdout.decode()


async def container_pid(cri: Cri, container_id: str) -> int:
    status = await cri.runtime.ContainerStatus(
        api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True),
        timeout=CALL_TIMEOUT)
    return int(json.loads(status.info["info"])["pid"])


async def test_runtime_is_containerd_speaking_cri_v1(cri: Cri) -> None:
    version = await cri.runtime.Version(api_pb2.VersionRequest(), timeout=CALL_TIMEOUT)

    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"
    status = await cri.runtime.Status(api_pb2.StatusRequest(), timeout=CALL_TIMEOUT)
    assert {c.type: c.status for c in status.status.conditions} == {
        "RuntimeReady": True, "NetworkReady": True}


async def test_test_images_are_present(cri: Cri) -> None:
    listed = await cri.images.ListImages(api_pb2.ListImagesRequest(), timeout=CALL_TIMEOUT)

    tags = {tag for image in listed.images for tag in image.repo_tags}
    assert {PAUSE_IMAGE, BUSYBOX_IMAGE} <= tags


async def test_pod_gets_an_ip_serves_http_and_is_cleaned_up(cri: Cri, tmp_path: Path) -> None:
    serve = ["sh", "-c",
             f"echo '{PAGE}' > /var/www/index.html && exec httpd -f -p 8080 -h /var/www"]
    sandbox_id, container_id = await run_pod(cri, tmp_path, serve)
    try:
        status = await cri.runtime.PodSandboxStatus(
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT)
        pod_ip = ipaddress.ip_address(status.status.network.ip)
        assert pod_ip in POD_SUBNET

        inside = await exec_until_ok(cri, container_id, ["wget", "-qO-", "http://127.0.0.1:8080/"])
        assert inside.strip() == PAGE
        # The host reaches the pod over the CNI bridge, as a kubelet probe would.
        from_host = await asyncio.to_thread(_http_get, f"http://{pod_ip}:8080/")
        assert from_host.strip() == PAGE
        lease = CNI_LEASE_DIR / str(pod_ip)
        assert sandbox_id in lease.read_text(), "host-local should lease the IP to the pod"
    finally:
        await remove_pod(cri, sandbox_id)

    remaining = await cri.runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(
        filter=api_pb2.PodSandboxFilter(id=sandbox_id)), timeout=CALL_TIMEOUT)
    assert list(remaining.items) == []
    containers = await cri.runtime.ListContainers(api_pb2.ListContainersRequest(
        filter=api_pb2.ContainerFilter(pod_sandbox_id=sandbox_id)), timeout=CALL_TIMEOUT)
    assert list(containers.containers) == []
    assert not lease.exists(), "pod IP lease was not released"


async def test_containers_survive_a_runtime_restart(
        cri: Cri, testbed: Testbed, tmp_path: Path) -> None:
    sandbox_id, container_id = await run_pod(cri, tmp_path, ["sleep", "3600"])
    try:
        pid = await container_pid(cri, container_id)

        await asyncio.to_thread(testbed.stop_daemon)
        assert not testbed.is_running()
        assert _process_alive(pid), "the container died with the daemon"
        await asyncio.to_thread(testbed.start_daemon)

        # wait_for_ready: the channel may still be backing off from the outage.
        status = await cri.runtime.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id), timeout=CALL_TIMEOUT,
            wait_for_ready=True)
        assert status.status.state == api_pb2.CONTAINER_RUNNING
        assert await container_pid(cri, container_id) == pid
        assert (await exec_until_ok(cri, container_id, ["echo", "still here"])).strip() == (
            "still here")
    finally:
        await remove_pod(cri, sandbox_id)
    assert not _process_alive(pid)


def _http_get(url: str) -> str:
    # Bypass any proxy from the environment: the pod is on a local bridge.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not running.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
