"""The status manager's ``StatusSink`` over the API server (``kubernetes_asyncio``).

Three calls, as upstream's status manager makes them: read the pod, PATCH
``pods/status`` with a strategic merge patch, and delete a finished pod with
grace period 0 and a UID precondition (so a new pod that took the name in the
meantime is never deleted). A pod already gone, or replaced, is not an error
for the delete: the goal is met either way.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import CoreV1Api, V1DeleteOptions, V1Pod, V1Preconditions
from kubernetes_asyncio.client.exceptions import ApiException

# No single status call may hold the status loop longer than this.
REQUEST_TIMEOUT = 30.0


class ApiStatusSink:
    def __init__(self, api_client: Any, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._api = CoreV1Api(api_client)
        self._timeout = request_timeout

    async def get_pod(self, namespace: str, name: str) -> V1Pod | None:
        try:
            pod: V1Pod = await self._api.read_namespaced_pod(
                name, namespace, _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return pod

    async def patch_pod_status(self, namespace: str, name: str,
                               patch: dict[str, Any]) -> V1Pod:
        # A dict body is sent as application/strategic-merge-patch+json.
        pod: V1Pod = await self._api.patch_namespaced_pod_status(
            name, namespace, patch, _request_timeout=self._timeout)
        return pod

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        try:
            await self._api.delete_namespaced_pod(
                name, namespace, body=V1DeleteOptions(
                    grace_period_seconds=0, preconditions=V1Preconditions(uid=uid)),
                _request_timeout=self._timeout)
        except ApiException as err:
            # 404: already gone; 409: the name now belongs to another pod.
            if err.status not in (404, 409):
                raise


__all__ = ["ApiStatusSink"]
