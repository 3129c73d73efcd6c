"""The runtime-neutral model of pods and containers (upstream ``kubecontainer``).

The CRI speaks of sandboxes and containers; the kubelet's core speaks of pods.
This module is the vocabulary between the two: ``kuberuntime`` translates CRI
answers into these types, and the sync loop, PLEG, pod workers and status
computation read only these. ``Runtime`` is the seam: everything above it can
be tested against a fake, everything below it talks to containerd.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cri_api.v1 import api_pb2
    from kubernetes_asyncio.client import V1Pod


class ContainerState(enum.StrEnum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ContainerID:
    """A runtime-qualified container id, printed as ``containerd://<id>``."""

    type: str
    id: str

    def __str__(self) -> str:
        return f"{self.type}://{self.id}"

    @classmethod
    def parse(cls, text: str) -> ContainerID:
        runtime, sep, cid = text.partition("://")
        if not sep or not runtime or not cid:
            raise ValueError(f"invalid container id {text!r}: expected <type>://<id>")
        return cls(runtime, cid)


@dataclass
class Container:
    """A container (or, inside ``Pod.sandboxes``, a sandbox) as listed by the runtime."""

    id: ContainerID
    name: str
    image: str = ""
    image_id: str = ""
    image_ref: str = ""
    hash: int = 0
    state: ContainerState = ContainerState.UNKNOWN
    created_at: float = 0.0


@dataclass
class Pod:
    """What the runtime is running for one pod UID: a cheap listing, no detailed status."""

    id: str
    name: str = ""
    namespace: str = ""
    created_at: float = 0.0
    containers: list[Container] = field(default_factory=list)
    sandboxes: list[Container] = field(default_factory=list)

    def find_container(self, name: str) -> Container | None:
        return next((c for c in self.containers if c.name == name), None)

    def is_empty(self) -> bool:
        return not self.containers and not self.sandboxes


@dataclass
class ContainerStatus:
    """Detailed status of one container instance (upstream ``kubecontainer.Status``).

    Times are Unix seconds (0 when unknown). ``restart_count`` comes from the
    container's labels: the kubelet records it when it creates the container.
    """

    id: ContainerID
    name: str
    state: ContainerState
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    image: str = ""
    image_id: str = ""
    image_ref: str = ""
    hash: int = 0
    restart_count: int = 0
    reason: str = ""
    message: str = ""


@dataclass
class PodStatus:
    """Everything the runtime knows about one pod, the input of every pod sync.

    ``container_statuses`` holds every instance, newest first per name, so
    that the previous run of a restarted container is still visible (it gives
    ``lastState``). ``sandbox_statuses`` are the CRI's own records, newest first.
    ``timestamp`` is when the status was read (the pod cache compares it).
    """

    id: str
    name: str = ""
    namespace: str = ""
    ips: list[str] = field(default_factory=list)
    container_statuses: list[ContainerStatus] = field(default_factory=list)
    sandbox_statuses: list[api_pb2.PodSandboxStatus] = field(default_factory=list)
    timestamp: float = 0.0

    def find_container_status(self, name: str) -> ContainerStatus | None:
        """The newest instance of the named container, if any."""
        return next((s for s in self.container_statuses if s.name == name), None)

    def statuses_of(self, name: str) -> list[ContainerStatus]:
        return [s for s in self.container_statuses if s.name == name]


class PodLifecycleEventType(enum.StrEnum):
    CONTAINER_STARTED = "ContainerStarted"
    CONTAINER_DIED = "ContainerDied"
    CONTAINER_REMOVED = "ContainerRemoved"
    POD_SYNC = "PodSync"
    CONTAINER_CHANGED = "ContainerChanged"


@dataclass(frozen=True)
class PodLifecycleEvent:
    """A change PLEG saw in the runtime: ``data`` is the container id it concerns."""

    pod_uid: str
    type: PodLifecycleEventType
    data: str = ""


# The actions of a pod sync, spelled as upstream's kubecontainer reports them.
START_CONTAINER = "StartContainer"
KILL_CONTAINER = "KillContainer"
CREATE_POD_SANDBOX = "CreatePodSandbox"
CONFIG_POD_SANDBOX = "ConfigPodSandbox"
KILL_POD_SANDBOX = "KillPodSandbox"


@dataclass
class SyncResult:
    """The outcome of one action of a pod sync (start, kill, pull...) on one target."""

    action: str
    target: str
    error: BaseException | None = None
    reason: str = ""
    message: str = ""

    def fail(self, error: BaseException, reason: str, message: str = "") -> None:
        self.error, self.reason, self.message = error, reason, message or str(error)


@dataclass
class PodSyncResult:
    """All action results of one pod sync; ``sync_error`` covers failures before any action."""

    results: list[SyncResult] = field(default_factory=list)
    sync_error: BaseException | None = None

    def add(self, result: SyncResult) -> SyncResult:
        self.results.append(result)
        return result

    def merge(self, other: PodSyncResult) -> None:
        self.results.extend(other.results)
        self.sync_error = self.sync_error or other.sync_error

    def error(self) -> BaseException | None:
        if self.sync_error is not None:
            return self.sync_error
        failed = [r for r in self.results if r.error is not None]
        if not failed:
            return None
        return SyncError(failed)


class SyncError(Exception):
    """Raised view of the failed actions of a pod sync."""

    def __init__(self, failed: Sequence[SyncResult]) -> None:
        self.failed = list(failed)
        text = "; ".join(f"{r.action} {r.target}: {r.reason}: {r.message}" for r in self.failed)
        super().__init__(f"failed to sync pod: {text}")


@dataclass
class RuntimeCondition:
    type: str
    status: bool
    reason: str = ""
    message: str = ""


class ProbeResult(enum.StrEnum):
    """A probe's verdict on one container instance (upstream ``proberesults.Result``)."""

    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


class ProbeResults(Protocol):
    """The prober's latest verdict per container instance (upstream ``proberesults.Manager``).

    The runtime manager reads liveness and startup verdicts through this to
    decide restarts; status generation reads readiness and startup.
    """

    def get(self, container_id: ContainerID) -> ProbeResult | None: ...


@dataclass
class RuntimeStatus:
    """The runtime's own health (CRI ``Status``): RuntimeReady and NetworkReady."""

    conditions: list[RuntimeCondition] = field(default_factory=list)

    def get(self, condition_type: str) -> RuntimeCondition | None:
        return next((c for c in self.conditions if c.type == condition_type), None)


class Runtime(Protocol):
    """What the kubelet core needs from the container runtime manager."""

    runtime_type: str

    async def version(self) -> str: ...

    async def status(self) -> RuntimeStatus: ...

    async def get_pods(self, all_pods: bool) -> list[Pod]:
        """Pods with their containers and sandboxes; ``all_pods`` includes exited ones."""
        ...

    async def get_pod_status(self, uid: str, name: str, namespace: str) -> PodStatus: ...

    async def sync_pod(self, pod: V1Pod, status: PodStatus,
                       pull_secrets: Sequence[object] = ()) -> PodSyncResult:
        """Drive the runtime towards ``pod``'s spec: sandbox, init/app containers, restarts;
        ``pull_secrets`` are the pod's image pull secrets as read from the API."""
        ...

    async def kill_pod(self, pod: V1Pod | None, running: Pod,
                       grace_period_override: int | None = None) -> None:
        """Stop every container and sandbox of ``running``, honouring grace periods."""
        ...

