"""The node's heartbeat: its Lease in ``kube-node-lease`` (upstream ``component-helpers`` lease
controller, with the kubelet's owner reference to its Node).

Every ``nodeLeaseDurationSeconds / 4`` (10 s by default, with 4% jitter) the
kubelet sets ``spec.renewTime`` of ``kube-node-lease/<node>``; the node
lifecycle controller marks the node unreachable when the lease has not been
renewed for ``leaseDurationSeconds``. The lease names the node as its holder
and is owned by the Node, so deleting the Node deletes it too.

A renewal is an update of the lease the kubelet last wrote (no read first);
when that fails five times in a row, or the lease is gone, the lease is read
again, or created, retrying with a doubling back-off of up to 7 seconds.
Only the heartbeat client is used: it is never throttled behind pod traffic.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
from collections.abc import Callable
from typing import Any, Protocol, cast

from kubernetes_asyncio.client import ApiException, CoordinationV1Api, CoreV1Api

from pykubelet.api import clone
from pykubelet.api.wellknown import NAMESPACE_NODE_LEASE
from pykubelet.client.apiclient import KubeletApiClient, describe_error, raise_for_status
from pykubelet.util import klog

MAX_UPDATE_RETRIES = 5
MAX_BACKOFF = 7.0
INITIAL_BACKOFF = 0.1
RENEW_INTERVAL_FRACTION = 0.25
JITTER_FACTOR = 0.04

Lease = dict[str, Any]


def renew_interval_for(lease_duration_seconds: int) -> float:
    """Upstream ``NodeLeaseRenewIntervalFraction``: a quarter of the lease's duration."""
    return lease_duration_seconds * RENEW_INTERVAL_FRACTION


def micro_time(value: datetime.datetime) -> str:
    """A ``metav1.MicroTime``: RFC 3339 with exactly six fractional digits, in UTC."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaseOwnerError(Exception):
    """The Node could not be read to name it as the lease's owner."""


class LeaseAPI(Protocol):
    """The calls the controller makes; leases travel as JSON dictionaries."""

    async def read(self, namespace: str, name: str) -> Lease: ...

    async def create(self, namespace: str, lease: Lease) -> Lease: ...

    async def replace(self, namespace: str, name: str, lease: Lease) -> Lease: ...

    async def node_uid(self, name: str) -> str: ...


class ApiLeases:
    """``LeaseAPI`` over a real client. Leases are read and written as raw JSON so the
    server's own time formats (``MicroTime``) come back exactly as they were written."""

    def __init__(self, client: KubeletApiClient) -> None:
        self._leases = CoordinationV1Api(client)
        self._core = CoreV1Api(client)

    async def read(self, namespace: str, name: str) -> Lease:
        return await _json(self._leases.read_namespaced_lease(
            name, namespace, _preload_content=False))

    async def create(self, namespace: str, lease: Lease) -> Lease:
        return await _json(self._leases.create_namespaced_lease(
            namespace, cast(Any, lease), _preload_content=False))

    async def replace(self, namespace: str, name: str, lease: Lease) -> Lease:
        return await _json(self._leases.replace_namespaced_lease(
            name, namespace, cast(Any, lease), _preload_content=False))

    async def node_uid(self, name: str) -> str:
        node = await self._core.read_node(name)
        return str(node.metadata.uid)


async def _json(call: Any) -> Lease:
    response = await call
    try:
        data = await response.read()
    finally:
        response.release()
    # Raw responses do not raise on errors by themselves.
    raise_for_status(response, data)
    body: Lease = json.loads(data)
    return body


class NodeLeaseController:
    """Creates and renews ``kube-node-lease/<node_name>``."""

    def __init__(self, api: LeaseAPI, node_name: str, lease_duration_seconds: int,
                 renew_interval: float | None = None,
                 on_repeated_heartbeat_failure: Callable[[], None] | None = None,
                 namespace: str = NAMESPACE_NODE_LEASE,
                 clock: Callable[[], datetime.datetime] = _utcnow,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self._api = api
        self.node_name = node_name
        self.namespace = namespace
        self.lease_duration_seconds = lease_duration_seconds
        self.renew_interval = (renew_interval if renew_interval is not None
                               else renew_interval_for(lease_duration_seconds))
        self._on_repeated_heartbeat_failure = on_repeated_heartbeat_failure
        self._clock = clock
        self._sleep = sleep
        self.latest_lease: Lease | None = None

    async def run(self) -> None:
        while True:
            await self.sync()
            await self._sleep(self.renew_interval * (1 + random.random() * JITTER_FACTOR))

    async def sync(self) -> None:
        if self.latest_lease is not None:
            # Nobody else writes this lease, so the last written copy is current:
            # renewing from it saves a read per heartbeat.
            try:
                await self.retry_update_lease(self.latest_lease)
                return
            except Exception as err:
                klog.info("Failed to update lease using latest lease, fallback to ensure lease",
                          err=describe_error(err))
        lease, created = await self.backoff_ensure_lease()
        self.latest_lease = lease
        if lease is not None and not created:
            try:
                await self.retry_update_lease(lease)
            except Exception as err:
                klog.error(f"{err}, will retry after {self.renew_interval:g}s")

    async def backoff_ensure_lease(self) -> tuple[Lease | None, bool]:
        delay = INITIAL_BACKOFF
        while True:
            try:
                return await self.ensure_lease()
            except Exception as err:
                delay = min(delay * 2, MAX_BACKOFF)
                klog.error("Failed to ensure lease exists, will retry", describe_error(err),
                           lease=f"{self.namespace}/{self.node_name}", retryIn=f"{delay:g}s")
                await self._sleep(delay)

    async def ensure_lease(self) -> tuple[Lease | None, bool]:
        """The current lease, creating it when missing; (None, False) if it cannot be made yet."""
        try:
            return await self._read(), False
        except ApiException as err:
            if err.status != 404:
                raise
        try:
            lease = await self.new_lease(None)
        except LeaseOwnerError:
            # Without its owner the lease is not created; the next interval tries again.
            return None, False
        return await self._api.create(self.namespace, lease), True

    async def retry_update_lease(self, base: Lease) -> None:
        for attempt in range(MAX_UPDATE_RETRIES):
            lease = await self.new_lease(base, owner_required=False)
            try:
                self.latest_lease = await self._api.replace(self.namespace, self.node_name, lease)
                return
            except Exception as err:
                klog.error("Failed to update lease", describe_error(err))
                if isinstance(err, ApiException) and err.status == 409:
                    # Someone else wrote it: start again from what is stored.
                    refreshed, _ = await self.backoff_ensure_lease()
                    if refreshed is not None:
                        base = refreshed
                    continue
                if attempt > 0 and self._on_repeated_heartbeat_failure is not None:
                    self._on_repeated_heartbeat_failure()
        raise RuntimeError(f"failed {MAX_UPDATE_RETRIES} attempts to update lease")

    async def new_lease(self, base: Lease | None, owner_required: bool = True) -> Lease:
        """``base`` (or a fresh lease) with this renewal's time and the Node as owner."""
        if base is None:
            lease: Lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.node_name,
                         "leaseDurationSeconds": self.lease_duration_seconds},
            }
        else:
            lease = clone(base)
        lease.setdefault("spec", {})["renewTime"] = micro_time(self._clock())
        metadata = lease.setdefault("metadata", {})
        if not metadata.get("ownerReferences"):
            try:
                uid = await self._api.node_uid(self.node_name)
            except Exception as err:
                klog.error("Failed to get node when trying to set owner ref to the node lease",
                           describe_error(err), node=self.node_name)
                if owner_required:
                    raise LeaseOwnerError(str(err)) from err
            else:
                metadata["ownerReferences"] = [{
                    "apiVersion": "v1", "kind": "Node", "name": self.node_name,
                    "uid": uid,
                }]
        return lease

    async def _read(self) -> Lease:
        return await self._api.read(self.namespace, self.node_name)


__all__ = [
    "ApiLeases",
    "LeaseAPI",
    "LeaseOwnerError",
    "NodeLeaseController",
    "micro_time",
    "renew_interval_for",
]
