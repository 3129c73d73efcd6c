"""Mirror pods: the API server's copies of static pods (upstream ``pod/mirror_client.go``).

A static pod runs on the kubelet's authority alone, but users expect to see
it in ``kubectl get pods``. So the kubelet creates a pod object for it in the
API server, with the same name and spec, the annotation
``kubernetes.io/config.mirror`` holding the static pod's hash (which says
which version of the manifest it mirrors), and an owner reference to the
Node (so the garbage collector removes mirror pods of a deleted node, and
the NodeRestriction admission plugin lets a node create no other pods).
Deleting a mirror pod never stops the static pod: the kubelet notices and
creates it again; deleting the manifest makes the kubelet delete the mirror.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kubernetes_asyncio.client import CoreV1Api, V1DeleteOptions, V1Pod, V1Preconditions
from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api import pod_from_dict, pod_ref, to_dict
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    parse_pod_full_name,
)
from pykubelet.util import klog

REQUEST_TIMEOUT = 30.0


class MirrorClient(Protocol):
    async def create_mirror_pod(self, pod: V1Pod) -> None: ...

    async def delete_mirror_pod(self, full_name: str, uid: str | None) -> bool:
        """True when a mirror pod was deleted now."""
        ...


def mirror_pod_body(pod: V1Pod, node_name: str, node_uid: str) -> dict[str, Any]:
    """The pod object to create for static ``pod``: its copy, marked and owned by the node."""
    body: dict[str, Any] = to_dict(pod)
    body.pop("status", None)
    meta = body.setdefault("metadata", {})
    for server_owned in ("uid", "resourceVersion", "creationTimestamp", "generation",
                         "selfLink", "managedFields"):
        meta.pop(server_owned, None)
    annotations = dict(meta.get("annotations") or {})
    annotations[CONFIG_MIRROR_ANNOTATION_KEY] = annotations.get(CONFIG_HASH_ANNOTATION_KEY, "")
    meta["annotations"] = annotations
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name,
                                "uid": node_uid, "controller": True}]
    body["apiVersion"], body["kind"] = "v1", "Pod"
    return body


class ApiMirrorClient:
    """Creates and deletes mirror pods through the API server."""

    def __init__(self, api_client: Any, node_name: str,
                 node_uid: Callable[[], Awaitable[str]],
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._api = CoreV1Api(api_client)
        self._node_name = node_name
        self._node_uid = node_uid
        self._timeout = request_timeout
        self.requests = 0

    async def create_mirror_pod(self, pod: V1Pod) -> None:
        try:
            node_uid = await self._node_uid()
        except Exception as err:
            raise RuntimeError(f"failed to get node UID: {err}") from err
        body = mirror_pod_body(pod, self._node_name, node_uid)
        self.requests += 1
        try:
            await self._api.create_namespaced_pod(pod.metadata.namespace, pod_from_dict(body),
                                                  _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 409:
                # Already there: the next sync compares its hash and replaces it if outdated.
                klog.v(4).info("Mirror pod already exists", pod=pod_ref(pod))
                return
            raise

    async def delete_mirror_pod(self, full_name: str, uid: str | None) -> bool:
        name, namespace = parse_pod_full_name(full_name)
        klog.v(2).info("Deleting a mirror pod", pod=f"{namespace}/{name}", podUID=uid or "")
        options = V1DeleteOptions(grace_period_seconds=0,
                                  preconditions=V1Preconditions(uid=uid) if uid else None)
        self.requests += 1
        try:
            await self._api.delete_namespaced_pod(name, namespace, body=options,
                                                  _request_timeout=self._timeout)
        except ApiException as err:
            # Gone already, or the name belongs to a newer pod now: nothing to do.
            if err.status not in (404, 409):
                klog.error("Failed deleting a mirror pod", err, pod=f"{namespace}/{name}")
            return False
        return True


__all__ = ["ApiMirrorClient", "MirrorClient", "mirror_pod_body"]
