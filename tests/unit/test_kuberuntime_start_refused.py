"""A container the kubelet refuses to configure (``runAsNonRoot`` against a root user) is
reported as a Warning ``Failed`` event on the container, as upstream reports it: that
event is what users (``kubectl describe``) and upstream's e2e tests wait for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from cri_api.v1 import api_pb2

from pykubelet.api import pod_from_dict
from pykubelet.container import PodStatus
from pykubelet.cri import ImageService, RuntimeService
from pykubelet.kuberuntime.container import (
    ERR_CREATE_CONTAINER_CONFIG,
    ContainerStartError,
    PodContainers,
)
from pykubelet.kuberuntime.container_config import ContainerOptions
from pykubelet.kuberuntime.images import EnsuredImage, ImageManager


class Images:
    """Every image is present; its record declares ``uid`` (None: no user, i.e. root)."""

    def __init__(self, uid: int | None) -> None:
        self.image = api_pb2.Image(id="sha256:img")
        if uid is not None:
            self.image.uid.value = uid

    async def ensure_image_exists(self, *args: Any, **kwargs: Any) -> EnsuredImage:
        return EnsuredImage("sha256:img", self.image)


class Runtime:
    def __init__(self) -> None:
        self.created: list[str] = []

    async def create_container(self, sandbox_id: str, config: api_pb2.ContainerConfig,
                               sandbox_config: api_pb2.PodSandboxConfig) -> str:
        self.created.append(config.metadata.name)
        return "cid"

    async def start_container(self, container_id: str) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              field_path: str = "", *args: Any, **kwargs: Any) -> None:
        self.events.append((event_type, reason, message, field_path))


def non_root_pod(run_as_user: int | None) -> Any:
    context: dict[str, Any] = {"runAsNonRoot": True}
    if run_as_user is not None:
        context["runAsUser"] = run_as_user
    return pod_from_dict({
        "metadata": {"name": "explicit-root-uid", "namespace": "e2e", "uid": "uid-1"},
        "spec": {"containers": [{"name": "app", "image": "busybox",
                                 "securityContext": context}]}})


@pytest.mark.parametrize(("run_as_user", "image_uid", "refusal"), [
    (0, 1234, "container's runAsUser breaks non-root policy"),
    (None, None, "container has runAsNonRoot and image will run as root"),
])
async def test_a_container_refused_by_run_as_non_root_is_a_failed_warning_event(
        tmp_path: Path, run_as_user: int | None, image_uid: int | None, refusal: str) -> None:
    runtime, recorder = Runtime(), Recorder()
    options = ContainerOptions(pod_dir=str(tmp_path / "pod"), pod_logs_dir=str(tmp_path / "logs"))
    containers = PodContainers(
        cast(RuntimeService, runtime), cast(ImageService, None),
        cast(ImageManager, Images(image_uid)), lambda pod, ips: options,
        pod_logs_dir=str(tmp_path / "logs"), container_logs_dir="",
        runtime_type=lambda: "containerd", recorder=recorder)
    pod = non_root_pod(run_as_user)

    with pytest.raises(ContainerStartError) as refused:
        await containers.start("sandbox", api_pb2.PodSandboxConfig(), pod.spec.containers[0],
                               pod, PodStatus(id="uid-1"), [])

    assert refused.value.reason == ERR_CREATE_CONTAINER_CONFIG
    assert runtime.created == []  # never reached the runtime
    [(event_type, reason, message, field_path)] = recorder.events
    assert (event_type, reason, field_path) == ("Warning", "Failed", "spec.containers{app}")
    assert message.startswith(f"Error: {refusal} (pod: ")
    assert "container: app)" in message
