"""Registering the Node and keeping its status current (upstream ``kubelet_node_status.go``).

``run`` is upstream's ``syncNodeStatus`` loop: every ``nodeStatusUpdateFrequency``
(with 4% jitter) it registers the Node if that has not happened yet, then
computes the status and writes it when it changed or when
``nodeStatusReportFrequency`` has passed since the last write (the lease is
the heartbeat in between). A write is tried up to five times: the first from
the local Node cache, the others from a fresh GET, as seed 003 reads.

Before its first sync, ``run`` has the kubelet check the container runtime
once and waits for that check, however it ends (upstream's node status
goroutine calls ``updateRuntimeUp`` before it starts ``syncNodeStatus``). A
restarted kubelet knows nothing of its runtime until then, and a status
computed before would say NotReady ("container runtime status check may not
have completed yet") for a whole period. The wait is at most one CRI
``Status`` call (the runtime request timeout); the lease is not held back.

Registration creates the Node with the default labels (hostname, os, arch),
``--node-labels``, ``registerWithTaints`` (and, with ``--cloud-provider=external``,
the ``node.cloudprovider.kubernetes.io/uninitialized`` taint that the cloud
controller manager removes) and a first status. When the Node
already exists, only the default labels, the attach-detach annotation and the
huge page sizes are brought in step; other labels and taints stay as the
cluster's users left them, as upstream does. When the Node is deleted while
the kubelet runs, the next status sync notices and registers it again.

``fast_status_update_once`` is upstream's ``fastStatusUpdateOnce``: right after
start-up it re-checks every 100 ms, against the cache only, whether the node
would now be Ready, and writes the status the moment it would, so a node goes
Ready within a moment of its runtime coming up rather than a full period later.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio.client import (
    ApiException,
    V1Node,
    V1NodeAddress,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Taint,
)

from pykubelet.api import clone
from pykubelet.api.wellknown import (
    DEFAULT_NODE_LABELS,
    LABEL_ARCH_BETA,
    LABEL_ARCH_STABLE,
    LABEL_HOSTNAME,
    LABEL_OS_BETA,
    LABEL_OS_STABLE,
    TAINT_EFFECT_NO_SCHEDULE,
    TAINT_EXTERNAL_CLOUD_PROVIDER,
    TAINT_NODE_UNSCHEDULABLE,
    go_arch,
    go_os,
)
from pykubelet.client.apiclient import describe_error
from pykubelet.events import NORMAL, EventRecorder, node_reference
from pykubelet.nodestatus.patch import node_status_has_changed, node_status_patch, patch_body
from pykubelet.nodestatus.resources import is_hugepage_resource
from pykubelet.nodestatus.setters import NODE_READY, TRUE, Setter
from pykubelet.util import klog

NODE_STATUS_UPDATE_RETRY = 5
JITTER_FACTOR = 0.04
REGISTER_INITIAL_STEP = 0.1
REGISTER_MAX_STEP = 7.0
FAST_UPDATE_PERIOD = 0.1
NODE_READY_GRACE_PERIOD = 120.0
CONTROLLER_MANAGED_ATTACH_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"

EVENT_STARTING = "Starting"
EVENT_NODE_SCHEDULABLE = "NodeSchedulable"
EVENT_NODE_NOT_SCHEDULABLE = "NodeNotSchedulable"


@dataclass
class NodeStatusOptions:
    node_name: str
    hostname: str
    register_node: bool = True
    register_schedulable: bool = True
    register_with_taints: Sequence[V1Taint] = ()
    node_labels: dict[str, str] = field(default_factory=dict)
    provider_id: str = ""
    # --cloud-provider=external: register tainted until the cloud controller manager
    # initializes the Node.
    external_cloud_provider: bool = False
    enable_controller_attach_detach: bool = True
    update_frequency: float = 10.0
    report_frequency: float = 300.0
    node_ready_grace_period: float = NODE_READY_GRACE_PERIOD


def birth_cry(recorder: EventRecorder, node_name: str) -> None:
    """The ``Starting`` event a kubelet records once when it starts (upstream ``BirthCry``)."""
    recorder.event(node_reference(node_name), NORMAL, EVENT_STARTING, "Starting kubelet.")


def _ready_status(node: V1Node | None) -> str | None:
    if node is None or node.status is None:
        return None
    for condition in node.status.conditions or []:
        if condition.type == NODE_READY:
            return str(condition.status)
    return None


class NodeAPI(Protocol):
    """The Node calls the manager makes (``CoreV1Api`` of the main or heartbeat client)."""

    def create_node(self, body: V1Node, /) -> Awaitable[V1Node]: ...

    def read_node(self, name: str, /) -> Awaitable[V1Node]: ...

    def patch_node_status(self, name: str, body: Any, /) -> Awaitable[V1Node]: ...


class NodeCache(Protocol):
    """The local copy of the Node (``ObjectInformer[V1Node]``)."""

    def get(self) -> V1Node | None: ...

    def has_synced(self) -> bool: ...

    def observe(self, obj: V1Node | None, resource_version: str | None = None) -> None: ...


class NodeNotFoundError(Exception):
    def __init__(self, node_name: str) -> None:
        super().__init__(f'nodes "{node_name}" not found')


class NodeStatusManager:
    """Registration, the periodic status sync and the fast first update of one Node."""

    def __init__(self, options: NodeStatusOptions, kube_api: NodeAPI, heartbeat_api: NodeAPI,
                 informer: NodeCache, recorder: EventRecorder, server: str = "",
                 on_repeated_heartbeat_failure: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 setters: Callable[[NodeStatusManager], Sequence[Setter]] | None = None) -> None:
        self.options = options
        self._kube = kube_api
        self._server = server
        self._heartbeat = heartbeat_api
        self._sleep = sleep
        self.informer = informer
        self.recorder = recorder
        self.node_ref = node_reference(options.node_name)
        self._on_repeated_heartbeat_failure = on_repeated_heartbeat_failure
        self._clock = clock
        # The setters record the node's events through the manager, so they are made from it
        # (None for tests, which call set_setters).
        self._setters: list[Setter] = []
        if setters is not None:
            self.set_setters(setters(self))
        self._lock = asyncio.Lock()
        self.registration_completed = False
        self.last_status_report_time: float | None = None
        self._last_unschedulable = not options.register_schedulable
        # Upstream ``lastObservedNodeAddresses``: what the serving certificate names.
        self.last_observed_addresses: list[V1NodeAddress] = []

    @property
    def node_name(self) -> str:
        return self.options.node_name

    def set_setters(self, setters: Sequence[Setter]) -> None:
        """The status setters, in upstream's order (conditions last, Ready the very last)."""
        self._setters = [*setters, self._record_schedulable_event]

    # -- events -----------------------------------------------------------------

    def record_node_status_event(self, event_type: str, reason: str) -> None:
        klog.v(2).info("Recording event message for node", node=self.node_name, event=reason)
        self.recorder.event(self.node_ref, event_type, reason,
                            f"Node {self.node_name} status is now: {reason}")

    def record_event(self, event_type: str, reason: str, message: str) -> None:
        self.recorder.event(self.node_ref, event_type, reason, message)

    async def _record_schedulable_event(self, node: V1Node) -> None:
        unschedulable = bool(node.spec and node.spec.unschedulable)
        if unschedulable != self._last_unschedulable:
            self.record_node_status_event(
                NORMAL, EVENT_NODE_NOT_SCHEDULABLE if unschedulable else EVENT_NODE_SCHEDULABLE)
            self._last_unschedulable = unschedulable

    # -- computing the status ---------------------------------------------------

    async def set_node_status(self, node: V1Node) -> None:
        for position, setter in enumerate(self._setters):
            try:
                await setter(node)
            except Exception as err:
                klog.error("Failed to set some node status fields", err, node=self.node_name,
                           position=position)
        if node.status is not None and node.status.addresses:
            self.last_observed_addresses = list(node.status.addresses)

    async def initial_node(self) -> V1Node:
        """The Node this kubelet registers (upstream ``initialNode``)."""
        options = self.options
        labels = {
            LABEL_HOSTNAME: options.hostname,
            LABEL_OS_STABLE: go_os(),
            LABEL_ARCH_STABLE: go_arch(),
            LABEL_OS_BETA: go_os(),
            LABEL_ARCH_BETA: go_arch(),
        }
        for key, value in options.node_labels.items():
            if key in labels:
                klog.info("The node label will overwrite the default setting", labelKey=key,
                          labelValue=value, default=labels[key])
            labels[key] = value
        taints = [clone(t) for t in options.register_with_taints]
        if not options.register_schedulable and not any(
                t.key == TAINT_NODE_UNSCHEDULABLE and t.effect == TAINT_EFFECT_NO_SCHEDULE
                for t in taints):
            taints.append(V1Taint(key=TAINT_NODE_UNSCHEDULABLE, effect=TAINT_EFFECT_NO_SCHEDULE))
        if options.external_cloud_provider:
            # Appended as upstream appends it, even if registerWithTaints names it too.
            taints.append(V1Taint(key=TAINT_EXTERNAL_CLOUD_PROVIDER, value="true",
                                  effect=TAINT_EFFECT_NO_SCHEDULE))
        annotations: dict[str, str] = {}
        if options.enable_controller_attach_detach:
            annotations[CONTROLLER_MANAGED_ATTACH_ANNOTATION] = "true"
        node = V1Node(
            api_version="v1", kind="Node",
            metadata=V1ObjectMeta(name=options.node_name, labels=labels,
                                  annotations=annotations or None),
            spec=V1NodeSpec(unschedulable=not options.register_schedulable or None,
                            taints=taints or None, provider_id=options.provider_id or None),
            status=V1NodeStatus())
        await self.set_node_status(node)
        return node

    async def update_node(self, original: V1Node) -> tuple[V1Node, bool]:
        """A copy of ``original`` with the current status, and whether it differs."""
        node = clone(original)
        labels_missing = False
        node.metadata.labels = dict(node.metadata.labels or {})
        for key, value in ((LABEL_OS_STABLE, go_os()), (LABEL_ARCH_STABLE, go_arch())):
            if node.metadata.labels.get(key) != value:
                node.metadata.labels[key] = value
                labels_missing = True
        await self.set_node_status(node)
        changed = labels_missing or node_status_has_changed(original.status, node.status)
        return node, changed

    # -- registration -------------------------------------------------------------

    async def register_with_api_server(self) -> None:
        """Create (or adopt) the Node, retrying with back-off until it works."""
        if self.registration_completed:
            return
        step = REGISTER_INITIAL_STEP
        while True:
            await self._sleep(step)
            step = min(step * 2, REGISTER_MAX_STEP)
            try:
                node = await self.initial_node()
            except Exception as err:
                klog.error("Unable to construct v1.Node object for kubelet", err)
                continue
            klog.info("Attempting to register node", node=self.node_name)
            if await self.try_register_with_api_server(node):
                klog.info("Successfully registered node", node=self.node_name)
                self.registration_completed = True
                return

    async def try_register_with_api_server(self, node: V1Node) -> bool:
        try:
            created = await self._kube.create_node(node)
        except ApiException as err:
            if err.status != 409:
                klog.error("Unable to register node with API server", describe_error(err),
                           node=self.node_name)
                return False
        except Exception as err:
            klog.error("Unable to register node with API server", describe_error(err),
                       node=self.node_name, server=self._server)
            return False
        else:
            self.informer.observe(created)
            return True

        try:
            existing = await self._kube.read_node(self.node_name)
        except Exception as err:
            klog.error("Unable to register node with API server, error getting existing node",
                       describe_error(err), node=self.node_name)
            return False
        klog.info("Node was previously registered", node=self.node_name)
        original = clone(existing)
        requires_update = _reconcile_attach_detach_annotation(node, existing)
        requires_update = _update_default_labels(node, existing) or requires_update
        requires_update = _reconcile_hugepages(node, existing) or requires_update
        if requires_update:
            try:
                updated = await self._kube.patch_node_status(
                    self.node_name, node_status_patch(original, existing))
            except Exception as err:
                klog.error("Unable to reconcile node with API server, error updating node",
                           describe_error(err), node=self.node_name)
                return False
            self.informer.observe(updated)
        return True

    # -- status updates -------------------------------------------------------------

    async def sync_node_status(self) -> None:
        """Register if needed, then write the status if it changed (upstream ``syncNodeStatus``)."""
        async with self._lock:
            for _ in range(2):  # a second round after re-registering a deleted Node
                if self.options.register_node:
                    await self.register_with_api_server()
                try:
                    await self.update_node_status()
                    return
                except NodeNotFoundError:
                    if not self.options.register_node:
                        klog.error("Node not found in the API server and registerNode is off",
                                   node=self.node_name)
                        return
                    klog.info("Node not found in the API server, registering it again",
                              node=self.node_name)
                    self.registration_completed = False
                except Exception as err:
                    klog.error("Unable to update node status", err)
                    return

    async def update_node_status(self) -> None:
        klog.v(5).info("Updating node status")
        for attempt in range(NODE_STATUS_UPDATE_RETRY):
            try:
                await self.try_update_node_status(attempt)
                return
            except NodeNotFoundError:
                if attempt > 0 or not self.informer.has_synced():
                    raise
                klog.v(2).info("Node missing from the cache, asking the API server",
                               node=self.node_name)
            except Exception as err:
                if attempt > 0 and self._on_repeated_heartbeat_failure is not None:
                    self._on_repeated_heartbeat_failure()
                klog.error("Error updating node status, will retry", describe_error(err))
        raise RuntimeError("update node status exceeds retry count")

    async def _get_node(self, attempt: int) -> V1Node:
        if attempt == 0 and self.informer.has_synced():
            cached = self.informer.get()
            if cached is None:
                raise NodeNotFoundError(self.node_name)
            return cached
        try:
            node: V1Node = await self._heartbeat.read_node(self.node_name)
        except ApiException as err:
            if err.status == 404:
                raise NodeNotFoundError(self.node_name) from err
            raise RuntimeError(
                f'error getting node "{self.node_name}": {describe_error(err)}') from err
        return node

    async def try_update_node_status(self, attempt: int) -> None:
        original = await self._get_node(attempt)
        node, changed = await self.update_node(original)
        due = (self.last_status_report_time is None
               or self._clock() - self.last_status_report_time >= self.options.report_frequency)
        if not changed and not due:
            return
        await self.patch_node_status(original, node)

    async def patch_node_status(self, original: V1Node, node: V1Node) -> V1Node:
        patch = node_status_patch(original, node)
        klog.v(4).info("Patching node status", node=self.node_name, patch=patch_body(patch))
        try:
            updated: V1Node = await self._heartbeat.patch_node_status(self.node_name, patch)
        except ApiException as err:
            if err.status == 404:
                raise NodeNotFoundError(self.node_name) from err
            raise
        self.last_status_report_time = self._clock()
        self.informer.observe(updated)
        return updated

    async def run(self, *, check_runtime: Callable[[], Awaitable[None]]) -> None:
        """Await ``check_runtime`` (the kubelet's ``update_runtime_up``) once, then sync, and
        again every ``nodeStatusUpdateFrequency`` (jittered) after each sync ends."""
        try:
            await check_runtime()
        except Exception as err:
            # The first status says why the node is not Ready; it is not held back for it.
            klog.error("Checking the container runtime before the first node status failed",
                       err)
        period = self.options.update_frequency
        while True:
            await self.sync_node_status()
            await self._sleep(period * (1 + random.random() * JITTER_FACTOR))

    async def fast_status_update_once(
            self, update_runtime_up: Callable[[], Awaitable[None]] | None = None) -> None:
        """Write the status the moment the node would turn Ready after start-up."""
        started = self._clock()
        while True:
            if self._clock() - started >= self.options.node_ready_grace_period:
                klog.error("Node not becoming ready in time after startup")
                return
            if await self._fast_node_status_update(update_runtime_up):
                return
            await self._sleep(FAST_UPDATE_PERIOD)

    async def _fast_node_status_update(
            self, update_runtime_up: Callable[[], Awaitable[None]] | None) -> bool:
        async with self._lock:
            original = self.informer.get() if self.informer.has_synced() else None
            if original is None:
                return False
            ready = _ready_status(original)
            if ready is None:
                return False
            if ready == TRUE:
                return True
            if update_runtime_up is not None:
                await update_runtime_up()
            node, changed = await self.update_node(original)
            if not changed or _ready_status(node) != TRUE:
                return False
            klog.info("Fast updating node status as it just became ready")
            try:
                await self.patch_node_status(original, node)
                return True
            except Exception as err:
                # The cached Node was probably stale; the regular sync reads a fresh one.
                klog.error("Error updating node status, will retry with syncNodeStatus",
                           describe_error(err))
        await self.sync_node_status()
        return True


def _reconcile_attach_detach_annotation(node: V1Node, existing: V1Node) -> bool:
    wanted = (node.metadata.annotations or {}).get(CONTROLLER_MANAGED_ATTACH_ANNOTATION)
    annotations = dict(existing.metadata.annotations or {})
    if annotations.get(CONTROLLER_MANAGED_ATTACH_ANNOTATION) == wanted:
        return False
    if wanted is None:
        klog.info("Controller attach-detach setting changed to false; updating existing Node")
        annotations.pop(CONTROLLER_MANAGED_ATTACH_ANNOTATION, None)
    else:
        klog.info("Controller attach-detach setting changed to true; updating existing Node")
        annotations[CONTROLLER_MANAGED_ATTACH_ANNOTATION] = wanted
    existing.metadata.annotations = annotations
    return True


def _update_default_labels(node: V1Node, existing: V1Node) -> bool:
    wanted = node.metadata.labels or {}
    labels = dict(existing.metadata.labels or {})
    needs_update = False
    for key in DEFAULT_NODE_LABELS:
        if key not in wanted:
            continue
        if labels.get(key) != wanted[key]:
            labels[key] = wanted[key]
            needs_update = True
        if labels.get(key) == "":
            del labels[key]
    existing.metadata.labels = labels
    return needs_update


def _reconcile_hugepages(node: V1Node, existing: V1Node) -> bool:
    initial_status = node.status or V1NodeStatus()
    if existing.status is None:
        existing.status = V1NodeStatus()
    status = existing.status
    requires_update = False
    if status.capacity is None and initial_status.capacity is not None:
        status.capacity = dict(initial_status.capacity)
        requires_update = True
    if status.allocatable is None and initial_status.allocatable is not None:
        status.allocatable = dict(initial_status.allocatable)
        requires_update = True
    capacity: dict[str, Any] = dict(status.capacity or {})
    allocatable: dict[str, Any] = dict(status.allocatable or {})
    supported = {k for k in (initial_status.capacity or {}) if is_hugepage_resource(k)}
    for name in supported:
        initial_capacity = (initial_status.capacity or {}).get(name)
        initial_allocatable = (initial_status.allocatable or {}).get(name)
        if capacity.get(name) != initial_capacity:
            capacity[name] = initial_capacity
            requires_update = True
        if allocatable.get(name) != initial_allocatable:
            allocatable[name] = initial_allocatable
            requires_update = True
    for name in list(capacity):
        if is_hugepage_resource(name) and name not in supported:
            klog.info("Removing huge page resource which is no longer supported",
                      resourceName=name)
            capacity.pop(name, None)
            allocatable.pop(name, None)
            requires_update = True
    status.capacity, status.allocatable = capacity, allocatable
    return requires_update


__all__ = [
    "CONTROLLER_MANAGED_ATTACH_ANNOTATION",
    "EVENT_STARTING",
    "NodeAPI",
    "NodeCache",
    "NodeNotFoundError",
    "NodeStatusManager",
    "NodeStatusOptions",
    "birth_cry",
]
