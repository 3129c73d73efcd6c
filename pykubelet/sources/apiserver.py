"""The API server pod source (upstream ``pkg/kubelet/config/apiserver.go``).

In cluster mode the pods to run are the ones the scheduler (or a user) bound
to this node: a list+watch of pods with ``spec.nodeName=<node>`` in every
namespace. A ``Reflector`` keeps that view current across dropped watches,
API server restarts and etcd compaction; this module turns what it reports
into ``PodUpdate`` messages on the pod config's ``api`` channel:

- every (re)list is one ``SET`` of all the node's pods, so the merger sees
  what disappeared while the watch was down, and the first one tells the
  kubelet that the source is ready (housekeeping waits for that, so nothing
  is cleaned up because the API server was slow to answer at start-up);
- each watch event is the matching incremental update (``ADD``, ``UPDATE``,
  ``REMOVE``), which the merger folds in exactly as it would a full ``SET``
  without copying every other pod on each change.

As upstream, watching starts only once the node informer has synced (when
one is given), so admission sees the node's labels and taints.

Every pod it sends is freshly decoded and held by nobody else: the merger keeps
the pods of this source without copying them (``HANDED_OVER_SOURCES`` in
``podconfig``), so a pod sent here must never be changed or sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client import CoreV1Api

from pykubelet.api import pod_from_dict
from pykubelet.api.kubetypes import API_SOURCE, PodOperation, PodUpdate
from pykubelet.util import klog
from pykubelet.util.reflector import ApiListWatch, ListerWatcher, Object, Reflector

# Upstream WaitForAPIServerSyncPeriod: how often the node informer is polled before watching.
WAIT_FOR_NODE_SYNC_PERIOD = 1.0


def node_pods_list_watch(api_client: Any, node_name: str) -> ApiListWatch:
    """List+watch of the pods bound to ``node_name``, in every namespace."""
    return ApiListWatch(CoreV1Api(api_client).list_pod_for_all_namespaces,
                        field_selector=f"spec.nodeName={node_name}")


class _PodChannelStore:
    """Reflector store that forwards to the pod config channel instead of keeping objects."""

    def __init__(self, updates: asyncio.Queue[PodUpdate]) -> None:
        self._updates = updates

    def _send(self, objects: list[Object], op: PodOperation) -> None:
        pods = [pod_from_dict(obj) for obj in objects]
        self._updates.put_nowait(PodUpdate(pods, op, API_SOURCE))

    def replace(self, objects: list[Object], resource_version: str) -> None:
        self._send(objects, PodOperation.SET)

    def add(self, obj: Object) -> None:
        self._send([obj], PodOperation.ADD)

    def update(self, obj: Object) -> None:
        self._send([obj], PodOperation.UPDATE)

    def delete(self, obj: Object) -> None:
        self._send([obj], PodOperation.REMOVE)


class ApiserverPodSource:
    """Feeds the pods bound to this node into ``updates`` until cancelled.

    ``sleep`` (the waits for the node and the reflector's back-off) is a test
    seam; production keeps ``asyncio.sleep``.
    """

    def __init__(self, lister_watcher: ListerWatcher, updates: asyncio.Queue[PodUpdate], *,
                 node_has_synced: Callable[[], bool] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 **reflector_options: Any) -> None:
        self._node_has_synced = node_has_synced
        self._sleep = sleep
        self.reflector = Reflector("pods (api source)", lister_watcher,
                                   _PodChannelStore(updates), sleep=sleep, **reflector_options)

    @classmethod
    def for_node(cls, api_client: Any, node_name: str, updates: asyncio.Queue[PodUpdate],
                 node_has_synced: Callable[[], bool] | None = None) -> ApiserverPodSource:
        return cls(node_pods_list_watch(api_client, node_name), updates,
                   node_has_synced=node_has_synced)

    async def run(self) -> None:
        if self._node_has_synced is not None:
            klog.info("Waiting for node sync before watching apiserver pods")
            while not self._node_has_synced():
                await self._sleep(WAIT_FOR_NODE_SYNC_PERIOD)
                klog.v(4).info("node sync has not completed yet")
        klog.info("Watching apiserver")
        await self.reflector.run()

    def stop(self) -> None:
        """Nothing to release: cancelling ``run`` ends the watch."""


__all__ = ["ApiserverPodSource", "node_pods_list_watch"]
