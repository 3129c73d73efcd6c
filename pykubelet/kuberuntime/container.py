"""Containers of a pod: start, kill, remove, and read back their statuses.

This is the container half of upstream's ``kuberuntime_container.go``. Starting
a container is pull, config, create, start (and the postStart hook); killing
one honours the grace period rules (deletion grace period, then the pod's
``terminationGracePeriodSeconds``, never below two seconds) and, for pods with
sidecars, stops app containers before the sidecars that serve them. Statuses
are rebuilt from the CRI and the labels/annotations written at creation, so
that restart counts and termination messages survive a kubelet restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import (
    V1Container,
    V1Lifecycle,
    V1LifecycleHandler,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
)

from pykubelet.container import (
    KILL_CONTAINER,
    ContainerID,
    ContainerState,
    ContainerStatus,
    Pod,
    PodStatus,
    SyncResult,
)
from pykubelet.container.helpers import is_restartable_init_container, nanos_to_seconds
from pykubelet.cri import ImageService, RuntimeService, logfile
from pykubelet.cri.errors import is_not_found
from pykubelet.events import (
    NORMAL,
    WARNING,
    EventRecorder,
    LoggingRecorder,
    container_field_path,
)
from pykubelet.kuberuntime.actions import CRASH_LOOP_BACK_OFF, KillReason, pod_desc
from pykubelet.kuberuntime.container_config import (
    ContainerOptions,
    CreateContainerConfigError,
    generate_container_config,
    image_user,
)
from pykubelet.kuberuntime.images import ImageManager, ImagePullError, ImageStatusLookahead
from pykubelet.kuberuntime.labels import (
    POD_UID_LABEL,
    get_container_info_from_annotations,
    get_container_info_from_labels,
)
from pykubelet.kuberuntime.logs import pod_logs_directory
from pykubelet.logs import remove_container_logs
from pykubelet.util import klog

# The reasons of failed sync actions, spelled as upstream reports them.
ERR_KILL_CONTAINER = "KillContainerError"
ERR_CREATE_POD_SANDBOX = "CreatePodSandboxError"
ERR_CONFIG_POD_SANDBOX = "ConfigPodSandboxError"
ERR_KILL_POD_SANDBOX = "KillPodSandboxError"
ERR_CREATE_CONTAINER_CONFIG = "CreateContainerConfigError"
ERR_CREATE_CONTAINER = "CreateContainerError"
ERR_RUN_CONTAINER = "RunContainerError"
ERR_PRE_START_HOOK = "PreStartHookError"
ERR_POST_START_HOOK = "PostStartHookError"

# Containers get at least this long between SIGTERM and SIGKILL (upstream's minimum).
MINIMUM_GRACE_PERIOD_SECONDS = 2
# Upstream's default when neither the pod nor its deletion says anything.
DEFAULT_GRACE_PERIOD_SECONDS = 2
# Upstream's MaxContainerTerminationMessageLength: the file is read from its end.
MAX_TERMINATION_MESSAGE_BYTES = 4096
TERMINATION_MESSAGE_FALLBACK_TO_LOGS = "FallbackToLogsOnError"
# containerd's reasons for an exited container; filled in when a runtime gives none.
REASON_COMPLETED = "Completed"
REASON_ERROR = "Error"
REASON_CONTAINER_CANNOT_RUN = "ContainerCannotRun"
# /var/log/containers names are capped so that the ".log" suffix still fits in 255.
_LEGACY_SYMLINK_MAX_NAME = 251
_LOG_FILE_NAME = re.compile(r"^(\d+)\.log(\..*)?$")


class ContainerStartError(Exception):
    """Starting a container failed: ``reason`` is the waiting reason users see."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class LifecycleHandlerRunner(Protocol):
    """Runs a postStart/preStop handler (exec, httpGet, sleep) against a container."""

    async def run(self, container_id: ContainerID, pod: V1Pod, container: V1Container,
                  handler: V1LifecycleHandler) -> str: ...


def termination_grace_period(pod: V1Pod, container: V1Container, reason: KillReason) -> int:
    """Upstream ``setTerminationGracePeriod``: deletion, then probe, then pod grace period."""
    meta, spec = pod.metadata, pod.spec
    if meta is not None and meta.deletion_grace_period_seconds is not None:
        return int(meta.deletion_grace_period_seconds)
    if spec is not None and spec.termination_grace_period_seconds is not None:
        probe = None
        if reason == KillReason.STARTUP_PROBE:
            probe = container.startup_probe
        elif reason == KillReason.LIVENESS_PROBE:
            probe = container.liveness_probe
        if probe is not None and probe.termination_grace_period_seconds is not None:
            return int(probe.termination_grace_period_seconds)
        return int(spec.termination_grace_period_seconds)
    return DEFAULT_GRACE_PERIOD_SECONDS


def find_container_spec(pod: V1Pod, name: str) -> V1Container | None:
    spec = pod.spec
    if spec is None:
        return None
    for candidate in [*(spec.containers or ()), *(spec.init_containers or ())]:
        if candidate.name == name:
            return candidate
    for ephemeral in spec.ephemeral_containers or ():
        if ephemeral.name == name:
            return V1Container(name=ephemeral.name, image=ephemeral.image,
                               lifecycle=ephemeral.lifecycle)
    return None


def legacy_log_symlink(logs_dir: str, container_id: str, container_name: str, pod_name: str,
                       namespace: str) -> str:
    """``<dir>/<pod>_<ns>_<container>-<id>.log``, the path log shippers tail."""
    name = f"{pod_name}_{namespace}_{container_name}-{container_id}"
    return os.path.join(logs_dir, name[:_LEGACY_SYMLINK_MAX_NAME] + ".log")


def restart_count_from_log_dir(path: str) -> int:
    """One more than the highest ``<n>.log`` left by earlier instances (0 when none).

    A runtime that lost its state (node reboot) no longer reports earlier
    instances; counting on from their log files keeps logs from being overwritten.
    """
    try:
        names = os.listdir(path)
    except OSError:
        return 0
    highest = 0
    for name in names:
        match = _LOG_FILE_NAME.match(name)
        if match and not os.path.isdir(os.path.join(path, name)):
            highest = max(highest, int(match.group(1)) + 1)
    return highest


def _read_file_tail(path: str, limit: int) -> bytes:
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - limit))
        return file.read()


def termination_message(status: api_pb2.ContainerStatus, message_path: str,
                        fallback_to_logs: bool) -> tuple[str, bool]:
    """The message the container wrote to its termination-message file, and whether the
    log should be used instead (empty file with ``FallbackToLogsOnError`` on failure)."""
    if not message_path:
        return "", fallback_to_logs
    for mount in status.mounts:
        if mount.container_path != message_path:
            continue
        try:
            data = _read_file_tail(mount.host_path, MAX_TERMINATION_MESSAGE_BYTES)
        except FileNotFoundError:
            return "", fallback_to_logs
        except OSError as err:
            return f"Error on reading termination log {mount.host_path}: {err}", False
        return data.decode(errors="replace"), fallback_to_logs and not data
    return "", fallback_to_logs


def cri_container_state(state: int) -> ContainerState:
    if state == api_pb2.CONTAINER_CREATED:
        return ContainerState.CREATED
    if state == api_pb2.CONTAINER_RUNNING:
        return ContainerState.RUNNING
    if state == api_pb2.CONTAINER_EXITED:
        return ContainerState.EXITED
    return ContainerState.UNKNOWN


def to_kube_container_status(status: api_pb2.ContainerStatus,
                             runtime_type: str) -> ContainerStatus:
    """A CRI container status as a ``ContainerStatus``, with its termination message."""
    annotated = get_container_info_from_annotations(status.annotations)
    labeled = get_container_info_from_labels(status.labels)
    result = ContainerStatus(
        id=ContainerID(runtime_type, status.id),
        name=labeled.container_name,
        state=cri_container_state(status.state),
        created_at=nanos_to_seconds(status.created_at),
        image=status.image.image,
        image_id=status.image_id or status.image_ref,
        image_ref=status.image_ref,
        hash=annotated.hash,
        restart_count=annotated.restart_count,
    )
    if status.state != api_pb2.CONTAINER_CREATED:
        result.started_at = nanos_to_seconds(status.started_at)
    if status.state != api_pb2.CONTAINER_EXITED:
        return result
    result.exit_code = status.exit_code
    result.finished_at = nanos_to_seconds(status.finished_at)
    result.reason = status.reason or (REASON_COMPLETED if status.exit_code == 0 else REASON_ERROR)
    result.message = status.message
    fallback = (annotated.termination_message_policy == TERMINATION_MESSAGE_FALLBACK_TO_LOGS
                and result.exit_code != 0 and result.reason != REASON_CONTAINER_CANNOT_RUN)
    text, use_logs = termination_message(status, annotated.termination_message_path, fallback)
    if use_logs and status.log_path:
        try:
            text = logfile.read_log_tail(status.log_path).decode(errors="replace")
        except OSError as err:
            text = f"Error on reading termination message from logs: {err}"
    if text:
        result.message = f"{result.message}: {text}" if result.message else text
    return result


class TerminationOrdering:
    """Lets sidecars outlive the containers that use them when a pod stops.

    App containers stop at once; each running sidecar waits (within its grace
    period) until every app container and every sidecar declared after it has
    stopped, so sidecars stop in reverse order, as upstream does.
    """

    def __init__(self, pod: V1Pod, running_names: Sequence[str]) -> None:
        running = set(running_names)
        spec = pod.spec
        regular = [c.name for c in (spec.containers if spec else None) or () if c.name in running]
        sidecars = [c.name for c in (spec.init_containers if spec else None) or ()
                    if is_restartable_init_container(c) and c.name in running]
        self._terminated = {name: asyncio.Event() for name in running}
        self._waits_for = {name: [*regular, *sidecars[i + 1:]]
                           for i, name in enumerate(sidecars)}

    async def wait_for_turn(self, name: str, grace_period: float) -> float:
        """Wait until ``name`` may stop; returns the seconds waited."""
        started = time.monotonic()
        waits = [self._terminated[d].wait() for d in self._waits_for.get(name, ())
                 if d in self._terminated]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), grace_period)
        return time.monotonic() - started

    def container_terminated(self, name: str) -> None:
        event = self._terminated.get(name)
        if event is not None:
            event.set()


ContainerOptionsFactory = Callable[[V1Pod, Sequence[str]], ContainerOptions]


class PodContainers:
    """Container operations of the runtime manager."""

    def __init__(self, runtime_service: RuntimeService, image_service: ImageService,
                 image_manager: ImageManager, options_for: ContainerOptionsFactory, *,
                 pod_logs_dir: str,
                 container_logs_dir: str, runtime_type: Callable[[], str],
                 handler_runner: LifecycleHandlerRunner | None = None,
                 recorder: EventRecorder | None = None) -> None:
        self.recorder: EventRecorder = recorder or LoggingRecorder()
        self.runtime_service = runtime_service
        self.image_service = image_service
        self.image_manager = image_manager
        self.options_for = options_for
        self.pod_logs_dir = pod_logs_dir
        self.container_logs_dir = container_logs_dir
        self.runtime_type = runtime_type
        self.handler_runner = handler_runner

    # --- start ----------------------------------------------------------------------------

    async def start(self, sandbox_id: str, sandbox_config: api_pb2.PodSandboxConfig,
                    container: V1Container, pod: V1Pod, status: PodStatus,
                    pod_ips: Sequence[str], pull_secrets: Sequence[object] = (),
                    lookahead: ImageStatusLookahead | None = None) -> ContainerID:
        """Upstream ``startContainer``: pull, create, start, postStart hook.

        Raises ``ContainerStartError`` whose reason is the one users see in the
        container's waiting state (ErrImagePull, CreateContainerError...).
        """
        field_path = container_field_path(pod, container)

        def failed(reason: str, message: str, shown: str | None = None) -> ContainerStartError:
            # Upstream records each start failure as the container's Failed event too
            # (what users and e2e tests look for), then reports ``reason`` in its state.
            self.recorder.event(pod, WARNING, "Failed", f"Error: {shown or message}", field_path)
            return ContainerStartError(reason, message)

        try:
            image = await self.image_manager.ensure_image_exists(
                pod, container, pull_secrets, sandbox_config, lookahead)
        except ImagePullError as err:
            raise failed(err.reason, err.message, shown=err.reason) from err

        meta = pod.metadata or V1ObjectMeta()
        previous = status.find_container_status(container.name)
        if previous is not None:
            restart_count = previous.restart_count + 1
        else:
            restart_count = restart_count_from_log_dir(os.path.join(
                pod_logs_directory(self.pod_logs_dir, meta.namespace or "", meta.name or "",
                                   meta.uid or ""), container.name))

        try:
            # runAsNonRoot is checked against the user the image declares.
            status_of_image = image.status
            if status_of_image is None:
                status_of_image = await self.image_service.image_status(image.ref)
            uid, username = image_user(status_of_image)
            options = self.options_for(pod, pod_ips)
            # Upstream's GetResources: the device plugins' answers (PreStartContainer first).
            devices = (await options.device_options_for(pod, container)
                       if options.device_options_for is not None else None)
            config = generate_container_config(container, pod, restart_count, image.ref,
                                               options, image_uid=uid,
                                               image_username=username, devices=devices)
        except Exception as err:
            # A refusal (runAsNonRoot, a missing configMap key...) or a failed lookup.
            message = err.message if isinstance(err, CreateContainerConfigError) else str(err)
            raise failed(ERR_CREATE_CONTAINER_CONFIG, message) from err

        try:
            container_id = await self.runtime_service.create_container(
                sandbox_id, config, sandbox_config)
        except Exception as err:
            raise failed(ERR_CREATE_CONTAINER, _cri_message(err)) from err
        self.recorder.event(pod, NORMAL, "Created", f"Created container {container.name}",
                            field_path)
        try:
            await self.runtime_service.start_container(container_id)
        except Exception as err:
            raise failed(ERR_RUN_CONTAINER, _cri_message(err)) from err
        self.recorder.event(pod, NORMAL, "Started", f"Started container {container.name}",
                            field_path)

        self._link_legacy_log(container_id, container.name, meta,
                              os.path.join(sandbox_config.log_directory, config.log_path))
        kube_id = ContainerID(self.runtime_type(), container_id)
        lifecycle: V1Lifecycle | None = container.lifecycle
        if (lifecycle is not None and lifecycle.post_start is not None
                and self.handler_runner is not None):
            try:
                await self.handler_runner.run(kube_id, pod, container, lifecycle.post_start)
            except Exception as err:
                klog.error("Failed to execute PostStartHook", err, pod=pod_desc(pod),
                           containerName=container.name, containerID=str(kube_id))
                self.recorder.event(pod, WARNING, "FailedPostStartHook", str(err), field_path)
                try:
                    await self.kill(pod, kube_id, container.name, "FailedPostStartHook",
                                    KillReason.FAILED_POST_START_HOOK)
                except Exception as kill_err:
                    klog.error("Failed to kill container", kill_err, pod=pod_desc(pod),
                               containerName=container.name)
                raise ContainerStartError(ERR_POST_START_HOOK, str(err)) from err
        return kube_id

    def _link_legacy_log(self, container_id: str, container_name: str, meta: V1ObjectMeta,
                         log_file: str) -> None:
        if not self.container_logs_dir or not os.path.exists(log_file):
            return
        link = legacy_log_symlink(self.container_logs_dir, container_id, container_name,
                                  meta.name or "", meta.namespace or "")
        try:
            os.makedirs(self.container_logs_dir, exist_ok=True)
            os.symlink(log_file, link)
        except OSError as err:
            klog.error("Failed to create legacy symbolic link", err, path=link,
                       containerID=container_id, containerLogPath=log_file)

    # --- kill -----------------------------------------------------------------------------

    async def kill(self, pod: V1Pod | None, container_id: ContainerID, name: str,
                   message: str = "", reason: KillReason = KillReason.NONE,
                   grace_period_override: int | None = None,
                   ordering: TerminationOrdering | None = None) -> None:
        """Upstream ``killContainer``: preStop hook, then StopContainer with the grace period."""
        spec: V1Container | None
        if pod is not None:
            spec = find_container_spec(pod, name)
            if spec is None:
                raise RuntimeError(f'failed to get containerSpec "{name}" (id={container_id}) '
                                   f'in pod "{pod_desc(pod)}" when killing container for '
                                   f'reason "{message}"')
        else:
            # The kubelet restarted and the pod is gone: rebuild what killing needs
            # from what was written on the container when it was created.
            pod, spec = await self._restore_specs(container_id)

        grace = float(termination_grace_period(pod, spec, reason))
        self.recorder.event(pod, NORMAL, "Killing", message or f"Stopping container {spec.name}",
                            container_field_path(pod, spec))
        if grace_period_override is not None:
            grace = float(grace_period_override)
            klog.v(3).info("Killing container with a grace period override", pod=pod_desc(pod),
                           containerName=name, containerID=str(container_id), gracePeriod=grace)

        lifecycle: V1Lifecycle | None = spec.lifecycle
        if (lifecycle is not None and lifecycle.pre_stop is not None and grace > 0
                and self.handler_runner is not None):
            grace -= await self._run_pre_stop(pod, container_id, spec, lifecycle.pre_stop, grace)
        if ordering is not None and grace > 0:
            grace -= int(await ordering.wait_for_turn(name, grace))
        grace_seconds = max(int(grace), MINIMUM_GRACE_PERIOD_SECONDS)

        klog.v(2).info("Killing container with a grace period", pod=pod_desc(pod),
                       containerName=name, containerID=str(container_id),
                       gracePeriod=grace_seconds)
        try:
            await self.runtime_service.stop_container(container_id.id, grace_seconds)
        except Exception as err:
            if not is_not_found(err):
                klog.error("Container termination failed with gracePeriod", err,
                           pod=pod_desc(pod), containerName=name,
                           containerID=str(container_id), gracePeriod=grace_seconds)
                raise
        klog.v(3).info("Container exited normally", pod=pod_desc(pod), containerName=name,
                       containerID=str(container_id))
        if ordering is not None:
            ordering.container_terminated(name)

    async def _run_pre_stop(self, pod: V1Pod, container_id: ContainerID, spec: V1Container,
                            handler: V1LifecycleHandler, grace: float) -> float:
        assert self.handler_runner is not None
        started = time.monotonic()
        try:
            await asyncio.wait_for(self.handler_runner.run(container_id, pod, spec, handler),
                                   grace)
        except TimeoutError:
            klog.v(2).info("PreStop hook not completed in grace period", pod=pod_desc(pod),
                           containerName=spec.name, gracePeriod=grace)
        except Exception as err:
            klog.error("PreStop hook failed", err, pod=pod_desc(pod), containerName=spec.name,
                       containerID=str(container_id))
            self.recorder.event(pod, WARNING, "FailedPreStopHook", str(err),
                                container_field_path(pod, spec))
        return float(int(time.monotonic() - started))

    async def _restore_specs(self, container_id: ContainerID) -> tuple[V1Pod, V1Container]:
        response = await self.runtime_service.container_status(container_id.id)
        labeled = get_container_info_from_labels(response.status.labels)
        annotated = get_container_info_from_annotations(response.status.annotations)
        pod = V1Pod(
            metadata=V1ObjectMeta(
                name=labeled.pod_name, namespace=labeled.pod_namespace, uid=labeled.pod_uid,
                deletion_grace_period_seconds=annotated.pod_deletion_grace_period),
            spec=V1PodSpec(containers=[],
                           termination_grace_period_seconds=annotated.pod_termination_grace_period))
        container = V1Container(
            name=labeled.container_name, ports=annotated.container_ports or None,
            termination_message_path=annotated.termination_message_path or None,
            lifecycle=(V1Lifecycle(pre_stop=annotated.pre_stop_handler)
                       if annotated.pre_stop_handler is not None else None))
        return pod, container

    async def kill_all(self, pod: V1Pod | None, running: Pod,
                       grace_period_override: int | None = None) -> list[SyncResult]:
        """Upstream ``killContainersWithSyncResult``: every running container, in parallel."""
        ordering = None
        if pod is not None and any(
                is_restartable_init_container(c)
                for c in (pod.spec.init_containers if pod.spec else None) or ()):
            ordering = TerminationOrdering(pod, [c.name for c in running.containers])

        async def kill_one(name: str, container_id: ContainerID) -> SyncResult:
            result = SyncResult(KILL_CONTAINER, name)
            try:
                await self.kill(pod, container_id, name, "", KillReason.UNKNOWN,
                                grace_period_override, ordering)
            except Exception as err:
                result.fail(err, ERR_KILL_CONTAINER, str(err))
                klog.error("Kill container failed", err,
                           pod=f"{running.namespace}/{running.name}", podUID=running.id,
                           containerName=name, containerID=str(container_id))
            return result

        return list(await asyncio.gather(*(kill_one(c.name, c.id) for c in running.containers)))

    # --- status and removal -------------------------------------------------------------------

    async def statuses(self, uid: str) -> list[ContainerStatus]:
        """Every container instance of the pod, newest first."""
        containers = await self.runtime_service.list_containers(
            api_pb2.ContainerFilter(label_selector={POD_UID_LABEL: uid}))
        statuses = []
        for listed in containers:
            try:
                response = await self.runtime_service.container_status(listed.id)
            except Exception as err:
                if is_not_found(err):
                    continue  # removed between the listing and now
                klog.v(4).info("ContainerStatus return error", containerID=listed.id, err=err)
                raise
            if not response.HasField("status"):
                raise RuntimeError(f"container status of {listed.id} is nil")
            statuses.append(await asyncio.to_thread(
                to_kube_container_status, response.status, self.runtime_type()))
        statuses.sort(key=lambda s: s.created_at, reverse=True)
        return statuses

    async def remove(self, container_id: str) -> None:
        """Upstream ``removeContainer``: the legacy log link first, then the container."""
        try:
            response = await self.runtime_service.container_status(container_id)
        except Exception as err:
            if is_not_found(err):
                return
            raise
        labeled = get_container_info_from_labels(response.status.labels)
        if self.container_logs_dir:
            link = legacy_log_symlink(self.container_logs_dir, container_id,
                                      labeled.container_name, labeled.pod_name,
                                      labeled.pod_namespace)
            with contextlib.suppress(FileNotFoundError):
                os.remove(link)
        try:
            await self.runtime_service.remove_container(container_id)
        except Exception as err:
            if not is_not_found(err):
                raise
        # Rotation leaves <log>.<time>[.gz] files the runtime does not know about.
        await asyncio.to_thread(remove_container_logs, response.status.log_path)

    async def _remove_quietly(self, pod: V1Pod, status: ContainerStatus) -> None:
        klog.v(4).info("Removing init container", containerName=status.name,
                       containerID=status.id.id)
        try:
            await self.remove(status.id.id)
        except Exception as err:
            klog.error("Failed to remove pod init container", err, containerName=status.name,
                       pod=pod_desc(pod))

    async def prune_init_containers(self, pod: V1Pod, status: PodStatus) -> None:
        """Keep only the newest finished run of each init container."""
        await self._remove_init_containers(pod, status, keep_newest=True)

    async def purge_init_containers(self, pod: V1Pod, status: PodStatus) -> None:
        """Forget every init container run: a new sandbox initialises from scratch."""
        await self._remove_init_containers(pod, status, keep_newest=False)

    async def _remove_init_containers(self, pod: V1Pod, status: PodStatus,
                                      keep_newest: bool) -> None:
        names = {c.name for c in (pod.spec.init_containers if pod.spec else None) or ()}
        removals: list[Awaitable[None]] = []
        for name in names:
            kept = False
            for instance in status.statuses_of(name):
                if keep_newest:
                    if instance.state not in (ContainerState.EXITED, ContainerState.UNKNOWN):
                        continue
                    if not kept:
                        kept = True
                        continue
                removals.append(self._remove_quietly(pod, instance))
        await asyncio.gather(*removals)


def _cri_message(err: BaseException) -> str:
    details = getattr(err, "details", None)
    return details if isinstance(details, str) and details else str(err)


__all__ = [
    "CRASH_LOOP_BACK_OFF",
    "ERR_CONFIG_POD_SANDBOX",
    "ERR_CREATE_CONTAINER",
    "ERR_CREATE_CONTAINER_CONFIG",
    "ERR_CREATE_POD_SANDBOX",
    "ERR_KILL_CONTAINER",
    "ERR_KILL_POD_SANDBOX",
    "ERR_POST_START_HOOK",
    "ERR_PRE_START_HOOK",
    "ERR_RUN_CONTAINER",
    "MINIMUM_GRACE_PERIOD_SECONDS",
    "ContainerStartError",
    "LifecycleHandlerRunner",
    "PodContainers",
    "TerminationOrdering",
    "cri_container_state",
    "find_container_spec",
    "legacy_log_symlink",
    "restart_count_from_log_dir",
    "termination_grace_period",
    "termination_message",
    "to_kube_container_status",
]
