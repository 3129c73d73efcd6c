"""The CRI client against a real containerd: what kuberuntime will rely on.

A pod's whole life through ``pykubelet.cri``: version check, images, sandbox
and container start, exec, the container's log file, stop, removal, and the
not-found answers about what was removed.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from cri_api.v1 import api_pb2

from pykubelet.cri import (
    CRIError,
    ExecTimeoutError,
    RemoteImageService,
    RemoteRuntimeService,
    is_not_found,
)
from pykubelet.cri.logfile import read_log_lines, read_log_tail
from tests.integration.conftest import REQUEST_TIMEOUT
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

GREETING = "hello from the cri client test"


def _sandbox_config(log_dir: Path) -> api_pb2.PodSandboxConfig:
    suffix = secrets.token_hex(4)
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=f"cri-client-{suffix}", namespace="default",
                                            uid=f"uid-{suffix}", attempt=0),
        hostname=f"cri-client-{suffix}",
        log_directory=str(log_dir),
        linux=api_pb2.LinuxPodSandboxConfig(cgroup_parent=""),
    )


async def test_connect_reports_containerd_speaking_cri_v1(testbed: Testbed) -> None:
    client = RemoteRuntimeService(str(testbed.socket_path), request_timeout=REQUEST_TIMEOUT)
    try:
        version = await client.connect()
        status = await client.status()
    finally:
        await client.close()

    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"
    ready = {c.type: c.status for c in status.status.conditions}
    assert ready["RuntimeReady"] is True


async def test_images_are_listed_and_inspected(testbed: Testbed,
                                               images: RemoteImageService) -> None:
    tags = {tag for image in await images.list_images() for tag in image.repo_tags}
    busybox = await images.image_status(testbed.busybox_image)
    absent = await images.image_status("pykubelet.local/absent:0.0")
    filesystems = await images.image_fs_info()

    assert {testbed.pause_image, testbed.busybox_image} <= tags
    assert busybox is not None
    assert testbed.busybox_image in busybox.repo_tags
    assert busybox.id.startswith("sha256:") and busybox.size > 0
    assert absent is None
    assert filesystems.image_filesystems


async def test_pod_lifecycle(testbed: Testbed, runtime: RemoteRuntimeService,
                             tmp_path: Path) -> None:
    config = _sandbox_config(tmp_path / "pod-logs")
    (tmp_path / "pod-logs").mkdir()
    sandbox_id = await runtime.run_pod_sandbox(config)
    try:
        await _run_container_and_check(testbed, runtime, sandbox_id, config, tmp_path)

        await runtime.stop_pod_sandbox(sandbox_id)
        await runtime.remove_pod_sandbox(sandbox_id)

        remaining = await runtime.list_pod_sandboxes(api_pb2.PodSandboxFilter(id=sandbox_id))
        assert remaining == []
        with pytest.raises(CRIError) as caught:
            await runtime.pod_sandbox_status(sandbox_id)
        assert is_not_found(caught.value)
    finally:
        await _remove_sandbox_quietly(runtime, sandbox_id)


async def _run_container_and_check(testbed: Testbed, runtime: RemoteRuntimeService,
                                   sandbox_id: str, sandbox_config: api_pb2.PodSandboxConfig,
                                   tmp_path: Path) -> None:
    sandbox = await runtime.pod_sandbox_status(sandbox_id)
    assert sandbox.status.state == api_pb2.SANDBOX_READY
    assert sandbox.status.metadata.uid == sandbox_config.metadata.uid

    container_config = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="talker", attempt=0),
        image=api_pb2.ImageSpec(image=testbed.busybox_image),
        command=["sh", "-c", f"echo '{GREETING}'; echo 'to stderr' >&2; exec sleep 300"],
        log_path="talker/0.log",
    )
    container_id = await runtime.create_container(sandbox_id, container_config, sandbox_config)
    await runtime.start_container(container_id)

    status = (await runtime.container_status(container_id)).status
    assert status.state == api_pb2.CONTAINER_RUNNING
    assert status.log_path == str(tmp_path / "pod-logs" / "talker" / "0.log")

    hello = await runtime.exec_sync(container_id, ["echo", "hi"], timeout_seconds=10)
    assert (hello.stdout, hello.exit_code) == (b"hi\n", 0)

    failing = await runtime.exec_sync(container_id, ["sh", "-c", "echo bad >&2; exit 3"],
                                      timeout_seconds=10)
    assert (failing.stderr, failing.exit_code) == (b"bad\n", 3)

    # containerd kills the command when its timeout passes and answers
    # DEADLINE_EXCEEDED, long before the client's own deadline (timeout + 30s).
    started = time.monotonic()
    with pytest.raises(ExecTimeoutError, match="timed out after 1s"):
        await runtime.exec_sync(container_id, ["sleep", "30"], timeout_seconds=1)
    assert time.monotonic() - started < 10

    url = await runtime.exec(api_pb2.ExecRequest(container_id=container_id, cmd=["sh"],
                                                 stdout=True))
    assert url.startswith("http")

    stats = await runtime.container_stats(container_id)
    assert stats.attributes.id == container_id

    records = read_log_lines(status.log_path)
    assert any(r.stream == "stdout" and r.content == GREETING.encode() and not r.partial
               for r in records)
    assert any(r.stream == "stderr" and r.content == b"to stderr" for r in records)
    assert read_log_tail(status.log_path, streams=("stdout",)) == f"{GREETING}\n".encode()

    started = time.monotonic()
    await runtime.stop_container(container_id, timeout_seconds=2)
    assert time.monotonic() - started < 10
    stopped = (await runtime.container_status(container_id)).status
    assert stopped.state == api_pb2.CONTAINER_EXITED
    # Killed by SIGTERM (128+15) or, after the grace period, SIGKILL (128+9).
    assert stopped.exit_code in (137, 143)

    await runtime.remove_container(container_id)
    listed = await runtime.list_containers(api_pb2.ContainerFilter(pod_sandbox_id=sandbox_id))
    assert container_id not in {c.id for c in listed}
    with pytest.raises(CRIError) as caught:
        await runtime.container_status(container_id)
    assert is_not_found(caught.value)
    assert caught.value.method == "ContainerStatus"


async def _remove_sandbox_quietly(runtime: RemoteRuntimeService, sandbox_id: str) -> None:
    """Cleanup after a failed assertion; the sandbox may already be gone."""
    for step in (runtime.stop_pod_sandbox, runtime.remove_pod_sandbox):
        try:
            await step(sandbox_id)
        except CRIError as err:
            if not is_not_found(err):
                raise
