"""The status manager's ``StatusSink`` over the API server (``kubernetes_asyncio``).

Three calls, as upstream's status manager makes them: read the pod, PATCH
``pods/status`` with a strategic merge patch, and delete a finished pod with
grace period 0 and a UID precondition (so a new pod that took the name in the
meantime is never deleted). A pod already gone, or replaced, is not an error
for the delete: the goal is met either way.

The manager reads only the metadata and the status of the pods these calls
return (identity, deletion, mirror annotation, the stored status), so the
answers of the GET and the PATCH are decoded that far and no further: the
spec, most of a pod's JSON, is left out (``spec`` is None in the ``V1Pod``
returned).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client import CoreV1Api, V1DeleteOptions, V1Pod, V1Preconditions
from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api import from_dict
from pykubelet.client.apiclient import raise_for_status

# No single status call may hold the status loop longer than this.
REQUEST_TIMEOUT = 30.0


class ApiStatusSink:
    def __init__(self, api_client: Any, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._api = CoreV1Api(api_client)
        self._timeout = request_timeout

    async def get_pod(self, namespace: str, name: str) -> V1Pod | None:
        """The stored pod's metadata and status (no spec); None when it does not exist."""
        try:
            response = await self._api.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._timeout)
            return pod_without_spec(await _read(response))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    async def patch_pod_status(self, namespace: str, name: str,
                               patch: dict[str, Any]) -> V1Pod:
        """The pod's metadata and status (no spec) as stored after the patch."""
        # A dict body is sent as application/strategic-merge-patch+json.
        response = await self._api.patch_namespaced_pod_status(
            name, namespace, patch, _preload_content=False, _request_timeout=self._timeout)
        return pod_without_spec(await _read(response))

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


async def _read(response: Any) -> Any:
    """The JSON of a raw answer; ``ApiException`` (with its status) when it failed."""
    try:
        body = await response.read()
        raise_for_status(response, body)
    finally:
        response.release()
    return json.loads(body)


def pod_without_spec(data: dict[str, Any]) -> V1Pod:
    """A pod's JSON decoded but for its spec, which the status manager never reads."""
    return from_dict({key: value for key, value in data.items() if key != "spec"}, V1Pod)


__all__ = ["ApiStatusSink", "pod_without_spec"]
