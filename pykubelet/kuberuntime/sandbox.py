"""Pod sandboxes: creating them, finding a pod's sandboxes, and reading their IPs.

A pod's network namespace and IP belong to its sandbox (the "pause"
container), so every pod sync starts here: the sandbox must exist and be
ready before any container of the pod can be created in it. This module owns
the sandbox side of upstream's ``kuberuntime_sandbox.go``; the config it sends
is built by ``sandbox_config.generate_pod_sandbox_config``.
"""

from __future__ import annotations

import ipaddress
import os

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_uid
from pykubelet.container import Container, ContainerID
from pykubelet.container.helpers import nanos_to_seconds, sandbox_state_to_container_state
from pykubelet.cri import RuntimeService
from pykubelet.events import WARNING, EventRecorder, LoggingRecorder
from pykubelet.kuberuntime.actions import pod_desc
from pykubelet.kuberuntime.labels import POD_UID_LABEL
from pykubelet.kuberuntime.sandbox_config import (
    MISSING_CLUSTER_DNS_MESSAGE,
    MISSING_CLUSTER_DNS_REASON,
    SandboxOptions,
    generate_pod_sandbox_config,
    missing_cluster_dns,
)
from pykubelet.util import klog

# Pod log directories are read by log collectors running as other users.
POD_LOG_DIR_MODE = 0o755


class SandboxCreateError(Exception):
    """Creating the sandbox failed; ``message`` is what the pod's sync result reports."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def sandbox_to_kube_container(sandbox: api_pb2.PodSandbox, runtime_type: str) -> Container:
    return Container(id=ContainerID(runtime_type, sandbox.id), name=sandbox.metadata.name,
                     state=sandbox_state_to_container_state(sandbox.state),
                     created_at=nanos_to_seconds(sandbox.created_at))


def determine_pod_sandbox_ips(namespace: str, name: str,
                              status: api_pb2.PodSandboxStatus) -> list[str]:
    """The sandbox's primary IP then its additional IPs, skipping what does not parse."""
    if not status.HasField("network"):
        return []
    candidates = [status.network.ip, *(extra.ip for extra in status.network.additional_ips)]
    ips = []
    for text in candidates:
        if not text:
            continue
        try:
            ipaddress.ip_address(text)
        except ValueError:
            klog.info("Pod Sandbox reported an unparseable IP", pod=f"{namespace}/{name}", IP=text)
            continue
        ips.append(text)
    return ips


class PodSandboxes:
    """Sandbox operations of the runtime manager, on one runtime service."""

    def __init__(self, runtime_service: RuntimeService, options: SandboxOptions,
                 runtime_handler: str = "", recorder: EventRecorder | None = None) -> None:
        self.runtime_service = runtime_service
        self.options = options
        self.runtime_handler = runtime_handler
        self.recorder: EventRecorder = recorder or LoggingRecorder()
        # Pods already told that they fall back to the node's DNS. The config is
        # rebuilt on every sync; the warning is news only the first time.
        self._warned_missing_dns: set[str] = set()

    def config(self, pod: V1Pod, attempt: int) -> api_pb2.PodSandboxConfig:
        if missing_cluster_dns(pod, self.options):
            uid = pod_uid(pod)
            if uid not in self._warned_missing_dns:
                self._warned_missing_dns.add(uid)
                self.recorder.event(pod, WARNING, MISSING_CLUSTER_DNS_REASON,
                                    f'pod: "{pod_desc(pod)}". {MISSING_CLUSTER_DNS_MESSAGE}')
        return generate_pod_sandbox_config(pod, attempt, self.options)

    def retain_pods(self, uids: set[str]) -> None:
        """Drop what is remembered about every pod not in ``uids``."""
        self._warned_missing_dns &= uids

    async def create(self, pod: V1Pod, attempt: int) -> tuple[str, api_pb2.PodSandboxConfig]:
        """Run a new sandbox for ``pod``; returns its id and the config it was created with."""
        try:
            config = self.config(pod, attempt)
        except Exception as err:
            message = f'Failed to generate sandbox config for pod "{pod_desc(pod)}": {err}'
            klog.error("Failed to generate sandbox config for pod", err, pod=pod_desc(pod))
            raise SandboxCreateError(message) from err
        try:
            # The runtime writes container logs here; it does not create the directory.
            os.makedirs(config.log_directory, mode=POD_LOG_DIR_MODE, exist_ok=True)
        except OSError as err:
            message = f'Failed to create log directory for pod "{pod_desc(pod)}": {err}'
            klog.error("Failed to create log directory for pod", err, pod=pod_desc(pod))
            raise SandboxCreateError(message) from err
        try:
            sandbox_id = await self.runtime_service.run_pod_sandbox(config, self.runtime_handler)
        except Exception as err:
            message = f'Failed to create sandbox for pod "{pod_desc(pod)}": {err}'
            klog.error("Failed to create sandbox for pod", err, pod=pod_desc(pod))
            raise SandboxCreateError(message) from err
        return sandbox_id, config

    async def list_kubelet_sandboxes(self, all_sandboxes: bool) -> list[api_pb2.PodSandbox]:
        """Sandboxes carrying a pod UID label (ours), only ready ones unless ``all_sandboxes``."""
        sandbox_filter = None
        if not all_sandboxes:
            sandbox_filter = api_pb2.PodSandboxFilter(
                state=api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY))
        sandboxes = await self.runtime_service.list_pod_sandboxes(sandbox_filter)
        return [s for s in sandboxes if s.labels.get(POD_UID_LABEL)]

    async def ids_for_pod(self, uid: str) -> list[str]:
        """All sandbox ids of one pod, newest first."""
        sandboxes = await self.runtime_service.list_pod_sandboxes(
            api_pb2.PodSandboxFilter(label_selector={POD_UID_LABEL: uid}))
        sandboxes.sort(key=lambda s: s.created_at, reverse=True)
        return [s.id for s in sandboxes]


__all__ = [
    "PodSandboxes",
    "SandboxCreateError",
    "determine_pod_sandbox_ips",
    "sandbox_to_kube_container",
]
