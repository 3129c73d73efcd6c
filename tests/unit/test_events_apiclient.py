"""Events over HTTP: ``ApiEventSink`` on a real client against a stand-in API server.

What is checked is what ``kubectl get events`` would show (the stored events,
their count) and what was sent (verbs, content types, bodies).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from aiohttp import web

from pykubelet.api import pod_from_dict
from pykubelet.client import new_clients
from pykubelet.client.kubeconfig import load_rest_config
from pykubelet.config.defaults import default_configuration
from pykubelet.events import NORMAL, WARNING, LoggingRecorder
from pykubelet.events.broadcaster import ApiEventSink, EventBroadcaster
from pykubelet.events.correlator import EventCorrelator
from tests.unit.loopback import serve
from tests.unit.test_client_apiclient import write_kubeconfig

EVENTS_PATH = "/api/v1/namespaces/{namespace}/events"


class StandInServer:
    """Events by namespace/name, as the API server stores them; the requests received."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.version = 100
        self.refuse: int | None = None

    def app(self) -> web.Application:
        application = web.Application()
        application.router.add_post(EVENTS_PATH, self.create)
        application.router.add_patch(EVENTS_PATH + "/{name}", self.patch)
        return application

    def _stamp(self, event: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        event["metadata"]["resourceVersion"] = str(self.version)
        return event

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(("POST", request.content_type, body))
        if self.refuse is not None:
            return web.json_response({"kind": "Status", "code": self.refuse}, status=self.refuse)
        stored = self._stamp(copy.deepcopy(body))
        stored["metadata"]["uid"] = f"uid-{self.version}"
        self.events[(request.match_info["namespace"], body["metadata"]["name"])] = stored
        return web.json_response({"kind": "Event", "apiVersion": "v1", **stored}, status=201)

    async def patch(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(("PATCH", request.content_type, body))
        stored = self.events.get((request.match_info["namespace"], request.match_info["name"]))
        if stored is None:
            return web.json_response({"kind": "Status", "reason": "NotFound", "code": 404},
                                     status=404)
        stored.update(body)
        return web.json_response({"kind": "Event", "apiVersion": "v1", **self._stamp(stored)})


def pod() -> Any:
    return pod_from_dict({"metadata": {"name": "web", "namespace": "team", "uid": "u1",
                                       "resourceVersion": "7"},
                          "spec": {"containers": [{"name": "app", "image": "busybox"}]}})


async def run(tmp_path: Path, server: StandInServer, record: Any) -> EventBroadcaster:
    async with serve(server.app()) as port:
        rest = await load_rest_config(write_kubeconfig(tmp_path, port))
        clients = new_clients(rest, default_configuration())
        try:
            recorder = LoggingRecorder()
            events = EventBroadcaster(ApiEventSink(clients.events), "node-1",
                                      correlator=EventCorrelator())
            recorder.listeners.append(events.record)
            await record(recorder, events)
        finally:
            await clients.close()
    return events


async def test_an_event_is_stored_as_recorded_and_repetitions_count_up_on_it(
        tmp_path: Path) -> None:
    server = StandInServer()

    async def record(recorder: LoggingRecorder, events: EventBroadcaster) -> None:
        for _ in range(3):
            recorder.event(pod(), WARNING, "BackOff", "Back-off restarting failed container app",
                           "spec.containers{app}")
            await events.flush()

    events = await run(tmp_path, server, record)
    (stored,) = server.events.values()
    assert stored["metadata"]["namespace"] == "team"
    assert stored["involvedObject"] == {"kind": "Pod", "namespace": "team", "name": "web",
                                        "uid": "u1", "apiVersion": "v1", "resourceVersion": "7",
                                        "fieldPath": "spec.containers{app}"}
    assert (stored["type"], stored["reason"], stored["count"]) == ("Warning", "BackOff", 3)
    assert stored["source"] == {"component": "kubelet", "host": "node-1"}
    assert [(verb, content_type) for verb, content_type, _ in server.requests] == [
        ("POST", "application/json"),
        ("PATCH", "application/strategic-merge-patch+json"),
        ("PATCH", "application/strategic-merge-patch+json")]
    assert set(server.requests[2][2]) == {"count", "lastTimestamp", "message"}
    assert events.written == 3


async def test_a_patch_of_an_expired_event_creates_it_again_over_http(tmp_path: Path) -> None:
    server = StandInServer()

    async def record(recorder: LoggingRecorder, events: EventBroadcaster) -> None:
        recorder.event(pod(), NORMAL, "Pulled", "Container image already present on machine")
        await events.flush()
        server.events.clear()  # expired after an hour
        recorder.event(pod(), NORMAL, "Pulled", "Container image already present on machine")
        await events.flush()

    await run(tmp_path, server, record)
    assert [verb for verb, _, _ in server.requests] == ["POST", "PATCH", "POST"]
    (stored,) = server.events.values()
    assert stored["count"] == 2


async def test_a_refused_event_is_dropped_without_retries(tmp_path: Path) -> None:
    server = StandInServer()
    server.refuse = 403

    async def record(recorder: LoggingRecorder, events: EventBroadcaster) -> None:
        recorder.event(pod(), NORMAL, "Started", "Started container app")
        await events.flush()

    events = await run(tmp_path, server, record)
    assert len(server.requests) == 1
    assert not server.events
    assert (events.written, events.dropped) == (0, 1)
