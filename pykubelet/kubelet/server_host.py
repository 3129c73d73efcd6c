"""What the kubelet API asks of the kubelet (upstream ``kubelet_pods.go`` host methods).

``pykubelet.server`` serves requests but knows nothing of pods; this class
answers its ``HostInterface``: which pods exist (the pod manager, with
statuses from the status manager), which container instance a log request
means (``validateContainerLogStatus``: the running one, or with
``previous`` the last terminated one), and where the runtime streams an
exec, attach or port-forward (the runtime's view of running pods, as
upstream's ``findContainer``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
)

from pykubelet.api import pod_uid
from pykubelet.api.kubetypes import build_pod_full_name
from pykubelet.container import Container, ContainerID, Pod
from pykubelet.cri.errors import CRIError, is_not_found
from pykubelet.cri.logstream import LogOptions, Writer
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.kuberuntime import KubeGenericRuntimeManager
from pykubelet.server.server import ContainerLogsError, StreamingError
from pykubelet.server.streaming import StreamOptions
from pykubelet.status import StatusManager

# Waiting reasons with a friendlier log message (upstream images.ErrImagePull...).
_IMAGE_PULL_MESSAGES = {
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}


class KubeletServerHost:
    def __init__(self, pod_manager: PodManager, status_manager: StatusManager,
                 runtime: KubeGenericRuntimeManager,
                 pods_with_status: Callable[[], list[V1Pod]]) -> None:
        self._pod_manager = pod_manager
        self._status_manager = status_manager
        self._runtime = runtime
        self._pods_with_status = pods_with_status

    # -- pods ---------------------------------------------------------------------

    def get_pods(self) -> list[V1Pod]:
        return self._pods_with_status()

    def get_pod_by_name(self, namespace: str, name: str) -> V1Pod | None:
        return self._pod_manager.get_pod_by_full_name(build_pod_full_name(name, namespace))

    async def get_running_pods(self) -> list[V1Pod]:
        return [_to_api_pod(pod) for pod in await self._runtime.get_pods(all_pods=False)]

    # -- logs ------------------------------------------------------------------

    def container_log_target(self, pod: V1Pod, container_name: str,
                             previous: bool) -> ContainerID:
        status = self._status_manager.get_pod_status(pod_uid(pod)) or pod.status
        text = validate_container_log_status(pod.metadata.name, status, container_name,
                                             previous)
        try:
            return ContainerID.parse(text)
        except ValueError as err:
            raise ContainerLogsError(f"invalid container id {text!r}: {err}") from None

    async def get_container_logs(self, container_id: ContainerID, options: LogOptions,
                                 stdout: Writer | None, stderr: Writer | None) -> None:
        await self._runtime.get_container_logs(container_id, options, stdout, stderr)

    # -- streaming -------------------------------------------------------------------

    async def _running_pod(self, pod: V1Pod, uid: str) -> Pod | None:
        full_name = build_pod_full_name(pod.metadata.name, pod.metadata.namespace)
        for running in await self._runtime.get_pods(all_pods=False):
            if uid:
                if running.id == uid:
                    return running
            elif build_pod_full_name(running.name, running.namespace) == full_name:
                return running
        return None

    async def _find_container(self, pod: V1Pod, uid: str, name: str) -> Container:
        running = await self._running_pod(pod, uid)
        container = running.find_container(name) if running is not None else None
        if container is None:
            raise StreamingError(f'container not found ("{name}")')
        return container

    async def get_exec(self, pod: V1Pod, uid: str, container_name: str, cmd: Sequence[str],
                       options: StreamOptions) -> str:
        container = await self._find_container(pod, uid, container_name)
        return await _streaming_call(self._runtime.get_exec(
            container.id, cmd, stdin=options.stdin, stdout=options.stdout,
            stderr=options.stderr, tty=options.tty))

    async def get_attach(self, pod: V1Pod, uid: str, container_name: str,
                         options: StreamOptions) -> str:
        container = await self._find_container(pod, uid, container_name)
        return await _streaming_call(self._runtime.get_attach(
            container.id, stdin=options.stdin, stdout=options.stdout, stderr=options.stderr,
            tty=options.tty))

    async def get_port_forward(self, pod: V1Pod, uid: str, ports: Sequence[int]) -> str:
        running = await self._running_pod(pod, uid)
        if running is None or running.is_empty():
            full_name = build_pod_full_name(pod.metadata.name, pod.metadata.namespace)
            raise StreamingError(f'pod not found ("{full_name}")')
        return await _streaming_call(self._runtime.get_port_forward(running.id, ports))

    async def run_in_container(self, pod: V1Pod, uid: str, container_name: str,
                               cmd: Sequence[str]) -> bytes:
        container = await self._find_container(pod, uid, container_name)
        return await self._runtime.run_in_container(container.id, cmd, 0)


async def _streaming_call(call: Awaitable[str]) -> str:
    """Await a CRI streaming call, mapping a runtime NotFound to 404 as upstream does."""
    try:
        return await call
    except CRIError as err:
        raise StreamingError(str(err), 404 if is_not_found(err) else 500) from err
    except LookupError as err:
        raise StreamingError(str(err)) from err


def _find_status(statuses: Sequence[V1ContainerStatus] | None,
                 name: str) -> V1ContainerStatus | None:
    return next((s for s in statuses or [] if s.name == name), None)


def validate_container_log_status(pod_name: str, status: V1PodStatus | None,
                                  container_name: str, previous: bool) -> str:
    """The container ID (``<type>://<id>``) a log request reads, as upstream decides it."""
    status = status or V1PodStatus()
    found = (_find_status(status.container_statuses, container_name)
             or _find_status(status.init_container_statuses, container_name)
             or _find_status(status.ephemeral_container_statuses, container_name))
    if found is None:
        raise ContainerLogsError(f'container "{container_name}" in pod "{pod_name}" is not '
                                 f"available")
    last = found.last_state.terminated if found.last_state else None
    state = found.state
    waiting = state.waiting if state else None
    running = state.running if state else None
    terminated = state.terminated if state else None
    if previous:
        if last is None or not last.container_id:
            raise ContainerLogsError(f'previous terminated container "{container_name}" in pod '
                                     f'"{pod_name}" not found')
        return str(last.container_id)
    if running is not None:
        return str(found.container_id or "")
    if terminated is not None:
        if terminated.container_id:
            return str(terminated.container_id)
        if last is not None and last.container_id:
            return str(last.container_id)
        raise ContainerLogsError(f'container "{container_name}" in pod "{pod_name}" is '
                                 f"terminated")
    if last is not None:
        if not last.container_id:
            raise ContainerLogsError(f'container "{container_name}" in pod "{pod_name}" is '
                                     f"terminated")
        return str(last.container_id)
    if waiting is not None:
        reason = waiting.reason or ""
        detail = _IMAGE_PULL_MESSAGES.get(reason, reason)
        raise ContainerLogsError(f'container "{container_name}" in pod "{pod_name}" is waiting '
                                 f"to start: {detail}")
    raise ContainerLogsError(f'container "{container_name}" in pod "{pod_name}" is waiting to '
                             f"start - no logs yet")


def _to_api_pod(pod: Pod) -> V1Pod:
    """Upstream ``Pod.ToAPIPod``: identity and the containers' names and images."""
    return V1Pod(
        api_version="v1", kind="Pod",
        metadata=V1ObjectMeta(uid=pod.id, name=pod.name, namespace=pod.namespace),
        spec=V1PodSpec(containers=[V1Container(name=c.name, image=c.image)
                                   for c in pod.containers]))


__all__ = ["KubeletServerHost", "validate_container_log_status"]
