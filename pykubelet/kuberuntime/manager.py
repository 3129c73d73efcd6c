"""The runtime manager: pykubelet's implementation of ``container.Runtime`` over CRI.

Everything above this module (pod workers, PLEG, status) speaks of pods;
everything below speaks CRI. ``KubeGenericRuntimeManager`` translates, as
upstream's ``kuberuntime_manager.go`` does: ``sync_pod`` executes the plan of
``actions.compute_pod_actions`` (kill, create sandbox, start init containers,
start app containers, with CrashLoopBackOff between restarts), ``kill_pod``
stops a pod, ``get_pods``/``get_pod_status`` rebuild the pod view from the
runtime's listings and the labels written at creation, which is what lets a
restarted kubelet adopt the containers it started before.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet import metrics
from pykubelet.api import pod_uid
from pykubelet.container import (
    CONFIG_POD_SANDBOX,
    CREATE_POD_SANDBOX,
    KILL_CONTAINER,
    KILL_POD_SANDBOX,
    START_CONTAINER,
    Container,
    ContainerID,
    Pod,
    PodStatus,
    PodSyncResult,
    ProbeResults,
    RuntimeCondition,
    RuntimeStatus,
    SyncResult,
)
from pykubelet.container.helpers import (
    is_restartable_init_container,
    nanos_to_seconds,
    running_pod_from_status,
)
from pykubelet.credentialprovider.plugin import PluginKeyring, register_plugins
from pykubelet.cri import ImageService, RuntimeService
from pykubelet.cri.errors import is_not_found
from pykubelet.cri.logstream import LogOptions, Writer, read_logs
from pykubelet.cri.runtime import KUBE_RUNTIME_API_VERSION
from pykubelet.events import WARNING, EventRecorder, LoggingRecorder, container_field_path
from pykubelet.kuberuntime.actions import (
    CRASH_LOOP_BACK_OFF,
    PodActions,
    check_restart_backoff,
    compute_pod_actions,
    is_host_network_pod,
    pod_desc,
)
from pykubelet.kuberuntime.container import (
    ERR_CONFIG_POD_SANDBOX,
    ERR_CREATE_POD_SANDBOX,
    ERR_KILL_CONTAINER,
    ERR_KILL_POD_SANDBOX,
    ContainerStartError,
    LifecycleHandlerRunner,
    PodContainers,
    cri_container_state,
)
from pykubelet.kuberuntime.container_config import ContainerOptions
from pykubelet.kuberuntime.images import EVENT_BACK_OFF, ImageManager, ImageStatusLookahead
from pykubelet.kuberuntime.labels import (
    get_container_info_from_annotations,
    get_container_info_from_labels,
)
from pykubelet.kuberuntime.sandbox import (
    PodSandboxes,
    SandboxCreateError,
    determine_pod_sandbox_ips,
    sandbox_to_kube_container,
)
from pykubelet.kuberuntime.sandbox_config import SandboxOptions
from pykubelet.util import klog
from pykubelet.util.backoff import Backoff

# Upstream kubelet's backOffPeriod and MaxContainerBackOff, for restarts and pulls alike.
CRASH_LOOP_BACKOFF_INITIAL_SECONDS = 10.0
CRASH_LOOP_BACKOFF_MAX_SECONDS = 300.0


@dataclass
class RuntimeManagerOptions:
    """The kubelet settings the runtime manager needs (names follow KubeletConfiguration)."""

    root_dir: str = "/var/lib/kubelet"
    pod_logs_dir: str = "/var/log/pods"
    # Where upstream links every container log as <pod>_<ns>_<container>-<id>.log for
    # log shippers; empty disables the links.
    container_logs_dir: str = "/var/log/containers"
    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = ""
    resolv_conf: str = "/etc/resolv.conf"
    node_name: str = ""
    host_ip: str = ""
    # The node's IPs as its Node reports them (see ContainerOptions.host_ips).
    host_ips: Callable[[], Sequence[str]] | None = None
    pod_cgroup_parent: Callable[[V1Pod], str] | None = None
    runtime_handler: str = ""
    serialize_image_pulls: bool = True
    # maxParallelImagePulls: with serializeImagePulls off, at most this many at once
    # (None: no limit).
    max_parallel_image_pulls: int | None = None
    # --image-credential-provider-config / --image-credential-provider-bin-dir ("": none).
    image_credential_provider_config: str = ""
    image_credential_provider_bin_dir: str = ""
    # The KubeletServiceAccountTokenForCredentialProviders gate, which decides whether a
    # provider's tokenAttributes may be set (None: the gate's default).
    credential_provider_sa_tokens: bool | None = None
    registry_pull_qps: float = 5.0
    registry_burst: int = 10
    cpu_cfs_quota: bool = True
    # seccompDefault: containers without a seccomp profile get the runtime's default one.
    seccomp_default: bool = False

    def sandbox_options(self) -> SandboxOptions:
        return SandboxOptions(pod_logs_dir=self.pod_logs_dir, cluster_dns=list(self.cluster_dns),
                              cluster_domain=self.cluster_domain, resolv_conf=self.resolv_conf,
                              pod_cgroup_parent=self.pod_cgroup_parent,
                              node_ips=[self.host_ip] if self.host_ip else [],
                              seccomp_profile_root=os.path.join(self.root_dir, "seccomp"))

    def container_options(self) -> ContainerOptions:
        """The node-wide part of every container's options; pod_dir and pod_ips vary."""
        return ContainerOptions(pod_dir="", node_name=self.node_name, host_ip=self.host_ip,
                                host_ips=self.host_ips,
                                pod_logs_dir=self.pod_logs_dir, cluster_domain=self.cluster_domain,
                                enforce_cpu_limits=self.cpu_cfs_quota,
                                seccomp_default=self.seccomp_default,
                                seccomp_profile_root=os.path.join(self.root_dir, "seccomp"))

    def pod_dir(self, uid: str) -> str:
        return os.path.join(self.root_dir, "pods", uid)


def credential_plugins(options: RuntimeManagerOptions) -> PluginKeyring | None:
    """The credential provider plugins the flags name, checked now (upstream registers
    them while building the runtime manager; a bad config stops the kubelet)."""
    if not (options.image_credential_provider_config
            or options.image_credential_provider_bin_dir):
        return None
    return register_plugins(options.image_credential_provider_config,
                            options.image_credential_provider_bin_dir,
                            sa_tokens=options.credential_provider_sa_tokens)


def containers_to_start(pod: V1Pod, actions: PodActions
                        ) -> tuple[list[V1Container], list[V1Container]]:
    """The init containers and the containers that ``actions`` starts in this sync."""
    spec = pod.spec
    init_containers = (spec.init_containers if spec else None) or []
    containers = (spec.containers if spec else None) or []
    return ([init_containers[index] for index in actions.init_containers_to_start],
            [containers[index] for index in actions.containers_to_start])


class KubeGenericRuntimeManager:
    """``container.Runtime`` on a CRI runtime (containerd)."""

    def __init__(self, runtime_service: RuntimeService, image_service: ImageService,
                 options: RuntimeManagerOptions, clock: Callable[[], float] = time.time, *,
                 image_manager: ImageManager | None = None, backoff: Backoff | None = None,
                 liveness: ProbeResults | None = None, startup: ProbeResults | None = None,
                 handler_runner: LifecycleHandlerRunner | None = None,
                 container_options: ContainerOptions | None = None,
                 recorder: EventRecorder | None = None) -> None:
        """``clock`` is wall-clock seconds: back-off compares it with containers' finish times.

        ``container_options`` is the node-wide base of every container config; the
        kubelet sets its ``volume_mounter``/``env_source``/``service_env`` seams there.
        """
        self.runtime_service = runtime_service
        self.image_service = image_service
        self.options = options
        self.clock = clock
        # Filled in from the runtime's Version answer by initialize().
        self.runtime_type = ""
        self.container_backoff = backoff or Backoff(
            CRASH_LOOP_BACKOFF_INITIAL_SECONDS, CRASH_LOOP_BACKOFF_MAX_SECONDS, clock)
        self.image_manager = image_manager or ImageManager(
            image_service, serialize_pulls=options.serialize_image_pulls,
            max_parallel_pulls=options.max_parallel_image_pulls,
            credential_plugins=credential_plugins(options),
            pull_qps=options.registry_pull_qps, pull_burst=options.registry_burst,
            recorder=recorder)
        self.liveness = liveness
        self.startup = startup
        recorder = recorder or LoggingRecorder()
        self.sandboxes = PodSandboxes(runtime_service, options.sandbox_options(),
                                      options.runtime_handler, recorder)
        self.container_options = container_options or options.container_options()
        self.containers = PodContainers(
            runtime_service, image_service, self.image_manager, self._container_options_for,
            pod_logs_dir=options.pod_logs_dir, container_logs_dir=options.container_logs_dir,
            runtime_type=lambda: self.runtime_type, handler_runner=handler_runner,
            recorder=recorder)

    def _container_options_for(self, pod: V1Pod, pod_ips: Sequence[str]) -> ContainerOptions:
        return dataclasses.replace(self.container_options,
                                   pod_dir=self.options.pod_dir(pod_uid(pod)),
                                   pod_ips=list(pod_ips))

    # --- runtime ----------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Learn the runtime's name, refusing a runtime that speaks another kubelet API."""
        response = await self.runtime_service.version()
        if response.version != KUBE_RUNTIME_API_VERSION:
            klog.error("This runtime api version is not supported", apiVersion=response.version,
                       supportedAPIVersion=KUBE_RUNTIME_API_VERSION)
            raise RuntimeError("runtime api version is not supported")
        self.runtime_type = response.runtime_name
        klog.info("Container runtime initialized", containerRuntime=response.runtime_name,
                  version=response.runtime_version, apiVersion=response.runtime_api_version)

    async def _ensure_initialized(self) -> None:
        if not self.runtime_type:
            await self.initialize()

    async def version(self) -> str:
        response = await self.runtime_service.version()
        return str(response.runtime_version)

    async def status(self) -> RuntimeStatus:
        response = await self.runtime_service.status()
        return RuntimeStatus(conditions=[
            RuntimeCondition(type=c.type, status=c.status, reason=c.reason, message=c.message)
            for c in response.status.conditions])

    # --- listing ------------------------------------------------------------------------------

    async def get_pods(self, all_pods: bool) -> list[Pod]:
        """Pods grouped from sandboxes and containers; only running ones unless ``all_pods``."""
        await self._ensure_initialized()
        pods: dict[str, Pod] = {}
        for sandbox in await self.sandboxes.list_kubelet_sandboxes(all_pods):
            uid = sandbox.metadata.uid
            pod = pods.setdefault(uid, Pod(id=uid, name=sandbox.metadata.name,
                                           namespace=sandbox.metadata.namespace))
            pod.sandboxes.append(sandbox_to_kube_container(sandbox, self.runtime_type))
            pod.created_at = max(pod.created_at, nanos_to_seconds(sandbox.created_at))

        container_filter = None
        if not all_pods:
            container_filter = api_pb2.ContainerFilter(
                state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))
        for listed in await self.runtime_service.list_containers(container_filter):
            labeled = get_container_info_from_labels(listed.labels)
            if not labeled.pod_uid:
                continue  # not created by a kubelet
            pod = pods.setdefault(labeled.pod_uid, Pod(
                id=labeled.pod_uid, name=labeled.pod_name, namespace=labeled.pod_namespace))
            pod.containers.append(Container(
                id=ContainerID(self.runtime_type, listed.id),
                name=labeled.container_name, image=listed.image.image,
                image_id=listed.image_id or listed.image_ref, image_ref=listed.image_ref,
                hash=get_container_info_from_annotations(listed.annotations).hash,
                state=cri_container_state(listed.state),
                created_at=nanos_to_seconds(listed.created_at)))
        # Newest first, so that lookups by name find the current incarnation of a pod.
        return sorted(pods.values(), key=lambda p: p.created_at, reverse=True)

    async def get_pod_status(self, uid: str, name: str, namespace: str) -> PodStatus:
        await self._ensure_initialized()
        timestamp = self.clock()
        sandbox_statuses: list[api_pb2.PodSandboxStatus] = []
        ips: list[str] = []
        for index, sandbox_id in enumerate(await self.sandboxes.ids_for_pod(uid)):
            try:
                response = await self.runtime_service.pod_sandbox_status(sandbox_id)
            except Exception as err:
                if is_not_found(err):
                    continue  # removed since the listing
                klog.error("PodSandboxStatus of sandbox for pod", err, podSandboxID=sandbox_id,
                           pod=f"{namespace}/{name}")
                raise
            if not response.HasField("status"):
                raise RuntimeError("pod sandbox status is nil")
            sandbox_statuses.append(response.status)
            # Only the newest sandbox's IPs are the pod's.
            if index == 0 and response.status.state == api_pb2.SANDBOX_READY:
                ips = determine_pod_sandbox_ips(namespace, name, response.status)
        container_statuses = await self.containers.statuses(uid)
        return PodStatus(id=uid, name=name, namespace=namespace, ips=ips,
                         container_statuses=container_statuses,
                         sandbox_statuses=sandbox_statuses, timestamp=timestamp)

    # --- sync -------------------------------------------------------------------------------------

    def compute_pod_actions(self, pod: V1Pod, status: PodStatus) -> PodActions:
        return compute_pod_actions(pod, status, liveness=self.liveness, startup=self.startup)

    async def sync_pod(self, pod: V1Pod, status: PodStatus,
                       pull_secrets: Sequence[object] = ()) -> PodSyncResult:
        """Upstream ``SyncPod``: kill what must go, (re)create the sandbox, start containers."""
        await self._ensure_initialized()
        result = PodSyncResult()
        actions = self.compute_pod_actions(pod, status)
        klog.v(3).info("computePodActions got for pod", podActions=str(actions),
                       pod=pod_desc(pod))
        if actions.create_sandbox:
            if actions.sandbox_id:
                klog.info("Pod sandbox changed, it will be killed and re-created",
                          pod=pod_desc(pod))
            else:
                klog.v(4).info("SyncPod received new pod, will create a sandbox for it",
                               pod=pod_desc(pod))

        if actions.kill_pod:
            kill_result = await self._kill_pod_with_sync_result(
                pod, running_pod_from_status(status, self.runtime_type), None)
            result.merge(kill_result)
            if kill_result.error() is not None:
                klog.error("killPodWithSyncResult failed", kill_result.error(), pod=pod_desc(pod))
                return result
            if actions.create_sandbox:
                await self.containers.purge_init_containers(pod, status)
        else:
            for container_id, info in actions.containers_to_kill.items():
                klog.v(3).info("Killing unwanted container for pod", containerName=info.name,
                               containerID=str(container_id), pod=pod_desc(pod))
                kill = result.add(SyncResult(KILL_CONTAINER, info.name))
                try:
                    await self.containers.kill(pod, container_id, info.name, info.message,
                                               info.reason)
                except Exception as err:
                    kill.fail(err, ERR_KILL_CONTAINER, str(err))
                    klog.error("killContainer for pod failed", err, containerName=info.name,
                               containerID=str(container_id), pod=pod_desc(pod))
                    return result

        await self.containers.prune_init_containers(pod, status)

        init_containers, containers = containers_to_start(pod, actions)
        lookahead: ImageStatusLookahead | None = None
        if actions.create_sandbox:
            lookahead = self.containers.image_manager.look_ahead(
                container.image or "" for container in init_containers + containers)
        try:
            await self._start_sandbox_and_containers(pod, status, actions, result, pull_secrets,
                                                     init_containers, containers, lookahead)
        finally:
            if lookahead is not None:
                await lookahead.aclose()
        return result

    async def _start_sandbox_and_containers(self, pod: V1Pod, status: PodStatus,
                                            actions: PodActions, result: PodSyncResult,
                                            pull_secrets: Sequence[object],
                                            init_containers: Sequence[V1Container],
                                            containers: Sequence[V1Container],
                                            lookahead: ImageStatusLookahead | None) -> None:
        """The second half of ``SyncPod``: the sandbox when it must be (re)created, then
        ``init_containers`` and ``containers`` (those ``actions`` starts), in that order."""
        pod_ips = list(status.ips)
        sandbox_id = actions.sandbox_id
        sandbox_config: api_pb2.PodSandboxConfig | None = None
        if actions.create_sandbox:
            created = result.add(SyncResult(CREATE_POD_SANDBOX, pod_desc(pod)))
            metrics.STARTED_PODS_TOTAL.inc()
            try:
                sandbox_id, sandbox_config = await self.sandboxes.create(pod, actions.attempt)
            except SandboxCreateError as err:
                metrics.STARTED_PODS_ERRORS_TOTAL.inc()
                created.fail(err, ERR_CREATE_POD_SANDBOX, err.message)
                return
            klog.v(4).info("Created PodSandbox for pod", podSandboxID=sandbox_id,
                           pod=pod_desc(pod))
            try:
                response = await self.runtime_service.pod_sandbox_status(sandbox_id)
            except Exception as err:
                klog.error("Failed to get pod sandbox status; Skipping pod", err,
                           pod=pod_desc(pod))
                result.sync_error = err
                return
            if not is_host_network_pod(pod):
                meta = pod.metadata
                pod_ips = determine_pod_sandbox_ips(meta.namespace or "", meta.name or "",
                                                    response.status)
                klog.v(4).info("Determined the ip for pod after sandbox changed", IPs=pod_ips,
                               pod=pod_desc(pod))

        configured = result.add(SyncResult(CONFIG_POD_SANDBOX, sandbox_id))
        try:
            # Containers are created with the config their sandbox has (same attempt).
            config = sandbox_config or self.sandboxes.config(pod, actions.attempt)
        except Exception as err:
            configured.fail(err, ERR_CONFIG_POD_SANDBOX,
                            f'GeneratePodSandboxConfig for pod "{pod_desc(pod)}" failed: {err}')
            return

        async def start(kind: str, container: V1Container) -> bool:
            started = result.add(SyncResult(START_CONTAINER, container.name))
            backoff_message = check_restart_backoff(pod, container, status,
                                                    self.container_backoff)
            if backoff_message is not None:
                started.fail(ContainerStartError(CRASH_LOOP_BACK_OFF, backoff_message),
                             CRASH_LOOP_BACK_OFF, backoff_message)
                klog.v(4).info("Backing Off restarting container in pod", containerType=kind,
                               container=container.name, pod=pod_desc(pod))
                self.containers.recorder.event(
                    pod, WARNING, EVENT_BACK_OFF,
                    f"Back-off restarting failed container {container.name} in pod "
                    f"{pod_desc(pod)}", container_field_path(pod, container))
                return False
            klog.v(4).info("Creating container in pod", containerType=kind,
                           container=container.name, pod=pod_desc(pod))
            metric_label = metrics.INIT_CONTAINER if kind == "init container" else metrics.CONTAINER
            metrics.STARTED_CONTAINERS_TOTAL.labels(metric_label).inc()
            try:
                await self.containers.start(sandbox_id, config, container, pod, status,
                                            pod_ips, pull_secrets, lookahead)
            except ContainerStartError as err:
                metrics.STARTED_CONTAINERS_ERRORS_TOTAL.labels(metric_label, err.reason).inc()
                started.fail(err, err.reason, err.message)
                klog.error("Container start failed in pod", err, containerType=kind,
                           container=container.name, pod=pod_desc(pod))
                return False
            return True

        for container in init_containers:
            if not await start("init container", container):
                if is_restartable_init_container(container):
                    klog.v(4).info("Failed to start the restartable init container for the pod, "
                                   "skipping", initContainerName=container.name,
                                   pod=pod_desc(pod))
                    continue
                klog.v(4).info("Failed to initialize the pod, as the init container failed to "
                               "start, aborting", initContainerName=container.name,
                               pod=pod_desc(pod))
                return
            klog.v(4).info("Completed init container for pod", containerName=container.name,
                           pod=pod_desc(pod))

        # Ephemeral containers (kubectl debug) need the API server; static pods have none.
        for container in containers:
            await start("container", container)

    # --- kill and removal ---------------------------------------------------------------------

    async def kill_pod(self, pod: V1Pod | None, running: Pod,
                       grace_period_override: int | None = None) -> None:
        """Stop all containers (in parallel) and then every sandbox of ``running``.

        Raises ``SyncError`` naming what could not be stopped. ``pod`` may be None
        when the pod is gone since a kubelet restart; grace periods then come
        from the containers' annotations.
        """
        await self._ensure_initialized()
        error = (await self._kill_pod_with_sync_result(pod, running,
                                                       grace_period_override)).error()
        if error is not None:
            raise error

    async def _kill_pod_with_sync_result(self, pod: V1Pod | None, running: Pod,
                                         grace_period_override: int | None) -> PodSyncResult:
        result = PodSyncResult()
        for container_result in await self.containers.kill_all(pod, running,
                                                               grace_period_override):
            result.add(container_result)
        # The sandboxes are stopped, not removed: garbage collection removes them later.
        killed = result.add(SyncResult(KILL_POD_SANDBOX, running.id))
        for sandbox in running.sandboxes:
            try:
                await self.runtime_service.stop_pod_sandbox(sandbox.id.id)
            except Exception as err:
                if not is_not_found(err):
                    killed.fail(err, ERR_KILL_POD_SANDBOX, str(err))
                    klog.error("Failed to stop sandbox", err, podSandboxID=sandbox.id.id)
        return result

    async def delete_container(self, container_id: ContainerID) -> None:
        await self.containers.remove(container_id.id)

    async def remove_sandbox(self, sandbox_id: str) -> None:
        klog.v(4).info("Removing sandbox", sandboxID=sandbox_id)
        try:
            # A sandbox that still runs cannot be removed until its network is torn down.
            await self.runtime_service.stop_pod_sandbox(sandbox_id)
            await self.runtime_service.remove_pod_sandbox(sandbox_id)
        except Exception as err:
            if not is_not_found(err):
                raise

    def remove_pod_log_dirs(self, uids: set[str]) -> None:
        try:
            entries = os.listdir(self.options.pod_logs_dir)
        except FileNotFoundError:
            return
        for entry in entries:
            # Directory names are <namespace>_<name>_<uid>; the uid has no underscore.
            if entry.rpartition("_")[2] in uids:
                path = os.path.join(self.options.pod_logs_dir, entry)
                klog.v(4).info("Removing pod logs", path=path)
                shutil.rmtree(path, ignore_errors=True)

    def pod_log_dir_uids(self) -> set[str]:
        try:
            return {entry.rpartition("_")[2] for entry in os.listdir(self.options.pod_logs_dir)}
        except FileNotFoundError:
            return set()

    # --- logs and streaming (upstream kuberuntime_logs.go, GetExec/GetAttach/GetPortForward) ---

    async def get_container_logs(self, container_id: ContainerID, options: LogOptions,
                                 stdout: Writer | None, stderr: Writer | None) -> None:
        """Stream the log file of one container instance (``kubectl logs``)."""
        response = await self.runtime_service.container_status(container_id.id)
        path = response.status.log_path
        if not path:
            raise FileNotFoundError(f"container {container_id} has no log file")
        try:
            await read_logs(path, container_id.id, options, self.runtime_service, stdout,
                            stderr)
        except FileNotFoundError as err:
            raise FileNotFoundError(f'failed to open log file "{path}": {err.strerror}') from err

    async def get_exec(self, container_id: ContainerID, cmd: Sequence[str], *, stdin: bool,
                       stdout: bool, stderr: bool, tty: bool) -> str:
        """The runtime streaming server's URL for an exec session."""
        return await self.runtime_service.exec(api_pb2.ExecRequest(
            container_id=container_id.id, cmd=list(cmd), tty=tty, stdin=stdin, stdout=stdout,
            stderr=stderr))

    async def get_attach(self, container_id: ContainerID, *, stdin: bool, stdout: bool,
                         stderr: bool, tty: bool) -> str:
        return await self.runtime_service.attach(api_pb2.AttachRequest(
            container_id=container_id.id, stdin=stdin, tty=tty, stdout=stdout, stderr=stderr))

    async def get_port_forward(self, pod_uid: str, ports: Sequence[int]) -> str:
        """The streaming URL forwarding to ``ports`` of the pod's newest sandbox."""
        sandbox_ids = await self.sandboxes.ids_for_pod(pod_uid)
        if not sandbox_ids:
            raise LookupError(f"failed to find sandboxID for pod {pod_uid}")
        return await self.runtime_service.port_forward(api_pb2.PortForwardRequest(
            pod_sandbox_id=sandbox_ids[0], port=list(ports)))

    async def run_in_container(self, container_id: ContainerID, cmd: Sequence[str],
                               timeout_seconds: float = 0) -> bytes:
        """Run ``cmd`` and return its stdout then stderr (upstream ``RunInContainer``)."""
        result = await self.runtime_service.exec_sync(container_id.id, cmd, timeout_seconds)
        output = result.stdout + result.stderr
        if result.exit_code != 0:
            raise ExecExitError(output, result.exit_code)
        return output


class ExecExitError(RuntimeError):
    """A command run in a container exited non-zero; carries its output."""

    def __init__(self, output: bytes, exit_code: int) -> None:
        super().__init__(f"command terminated with non-zero exit code: {exit_code}")
        self.output = output
        self.exit_code = exit_code


__all__ = [
    "CRASH_LOOP_BACKOFF_INITIAL_SECONDS",
    "CRASH_LOOP_BACKOFF_MAX_SECONDS",
    "ExecExitError",
    "KubeGenericRuntimeManager",
    "RuntimeManagerOptions",
]
