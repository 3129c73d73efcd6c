"""The status manager over HTTP: ``ApiStatusSink`` on a real client against a stand-in API server.

The server keeps pods as JSON and applies status patches as the API server
does for pod status (``tests.unit.test_status_sync.apply_patch``); what is
checked is what ``kubectl get pod`` would show, and what was sent.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from pykubelet.api import pod_from_dict
from pykubelet.client import new_clients
from pykubelet.client.kubeconfig import load_rest_config
from pykubelet.config.defaults import default_configuration
from pykubelet.kubelet.pod_manager import PodManager
from pykubelet.status.apiclient import ApiStatusSink, pod_without_spec
from pykubelet.status.manager import StatusManager
from pykubelet.status.patch import POD_STATUS_MERGE_KEYS
from tests.unit.loopback import serve
from tests.unit.test_api_modelcodec import CHURN_PODS
from tests.unit.test_client_apiclient import write_kubeconfig
from tests.unit.test_status_generate import instance, runtime
from tests.unit.test_status_sync import apply_patch

PODS_PATH = "/api/v1/namespaces/{namespace}/pods/{name}"


class StandInServer:
    """Pods by namespace/name; the requests as received."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): copy.deepcopy(p)
                     for p in pods}
        self.requests: list[tuple[str, str, Any]] = []

    def app(self) -> web.Application:
        application = web.Application()
        application.router.add_get(PODS_PATH, self.get)
        application.router.add_patch(PODS_PATH + "/status", self.patch)
        return application

    def _stored(self, request: web.Request) -> dict[str, Any] | None:
        return self.pods.get((request.match_info["namespace"], request.match_info["name"]))

    async def get(self, request: web.Request) -> web.Response:
        self.requests.append(("GET", request.path, None))
        pod = self._stored(request)
        if pod is None:
            return web.json_response({"kind": "Status", "reason": "NotFound", "code": 404},
                                     status=404)
        return web.json_response(pod)

    async def patch(self, request: web.Request) -> web.Response:
        patch = await request.json()
        self.requests.append(("PATCH", request.path, (request.content_type, patch)))
        pod = self._stored(request)
        assert pod is not None
        if patch["metadata"]["uid"] != pod["metadata"]["uid"]:
            return web.json_response({"kind": "Status", "reason": "Conflict", "code": 409},
                                     status=409)
        pod["status"] = apply_patch(pod.get("status") or {}, patch.get("status") or {},
                                    POD_STATUS_MERGE_KEYS)
        pod["metadata"]["resourceVersion"] = str(int(pod["metadata"]["resourceVersion"]) + 1)
        return web.json_response(pod)


def pending_pod() -> dict[str, Any]:
    pod = copy.deepcopy(next(p for p in CHURN_PODS if p["status"].get("phase") == "Pending"))
    pod["metadata"]["name"], pod["metadata"]["namespace"] = "web", "default"
    pod["spec"]["containers"] = [{"name": "app", "image": "registry.local/app:1"}]
    pod["status"].pop("containerStatuses", None)
    return pod


async def test_a_status_lands_on_the_server_once_and_is_not_sent_again(
        tmp_path: Path) -> None:
    stored = pending_pod()
    server = StandInServer(stored)
    async with serve(server.app()) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            pod = pod_from_dict(copy.deepcopy(stored))
            pods = PodManager()
            pods.add_pod(pod)
            manager = StatusManager(ApiStatusSink(clients.kube), pods=pods)
            manager.set_pod_status(pod, _running(pod))
            await manager.sync_batch(all_pods=False)
            after_first = list(server.requests)
            # Unchanged: the periodic sync against the watch's (now current) copy sends nothing.
            pods.update_pod(pod_from_dict(copy.deepcopy(server.pods[("default", "web")])))
            await manager.sync_batch(all_pods=True)
        finally:
            await clients.close()
    assert [(verb, path) for verb, path, _ in after_first] == [
        ("GET", "/api/v1/namespaces/default/pods/web"),
        ("PATCH", "/api/v1/namespaces/default/pods/web/status")]
    content_type, patch = after_first[1][2]
    assert content_type == "application/strategic-merge-patch+json"
    assert patch["metadata"] == {"uid": stored["metadata"]["uid"]}
    assert server.requests == after_first
    status = server.pods[("default", "web")]["status"]
    assert status["phase"] == "Running"
    assert status["containerStatuses"][0]["state"]["running"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


async def test_the_sink_answers_with_the_pods_metadata_and_status(tmp_path: Path) -> None:
    stored = pending_pod()
    server = StandInServer(stored)
    async with serve(server.app()) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            sink = ApiStatusSink(clients.kube)
            got = await sink.get_pod("default", "web")
            missing = await sink.get_pod("default", "gone")
            patched = await sink.patch_pod_status(
                "default", "web", {"metadata": {"uid": stored["metadata"]["uid"]},
                                   "status": {"phase": "Running"}})
        finally:
            await clients.close()
    full = pod_from_dict(copy.deepcopy(stored))
    assert got is not None
    assert got.metadata == full.metadata
    assert got.status == full.status
    assert got.spec is None
    assert missing is None
    assert patched.status.phase == "Running"
    assert patched.metadata.resource_version == str(int(stored["metadata"]["resourceVersion"]) + 1)


def test_a_pod_without_its_spec_keeps_all_else() -> None:
    for data in CHURN_PODS:
        pod = pod_without_spec(json.loads(json.dumps(data)))
        full = pod_from_dict(json.loads(json.dumps(data)))
        assert pod.spec is None
        assert (pod.metadata, pod.status, pod.kind, pod.api_version) == (
            full.metadata, full.status, full.kind, full.api_version)


def _running(pod: Any) -> Any:
    from pykubelet.container import ContainerState
    from tests.unit.test_status_generate import generate

    return generate(pod, runtime(instance("app", ContainerState.RUNNING)))
