"""Events to the API: what ``kubectl get events`` shows, and what is never written."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api import pod_from_dict
from pykubelet.events import NORMAL, WARNING, Event, LoggingRecorder, ObjectReference
from pykubelet.events.broadcaster import EventBroadcaster
from pykubelet.events.correlator import EventCorrelator


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeSink:
    """An events endpoint: stores events by name; can be unreachable or refuse."""

    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.creates = self.patches = 0
        self.unreachable = 0
        self.refuse: int | None = None

    def _check(self) -> None:
        if self.unreachable:
            self.unreachable -= 1
            raise ConnectionError("connection refused")
        if self.refuse is not None:
            raise ApiException(status=self.refuse, reason="Forbidden")

    async def create(self, event: dict[str, Any]) -> dict[str, Any]:
        self._check()
        self.creates += 1
        stored = {**event, "metadata": {**event["metadata"], "resourceVersion": "1"}}
        self.events[event["metadata"]["name"]] = stored
        return stored

    async def patch(self, event: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        self._check()
        name = event["metadata"]["name"]
        if name not in self.events:
            raise ApiException(status=404, reason="NotFound")
        self.patches += 1
        self.events[name].update(patch)
        return self.events[name]


def pod() -> Any:
    return pod_from_dict({"metadata": {"name": "web", "namespace": "team", "uid": "u1"},
                          "spec": {"containers": [{"name": "app", "image": "busybox"}]}})


def broadcaster(sink: FakeSink, clock: Clock | None = None) -> tuple[LoggingRecorder,
                                                                    EventBroadcaster]:
    recorder = LoggingRecorder()
    sleeps: list[float] = []

    async def no_sleep(delay: float) -> None:
        sleeps.append(delay)

    events = EventBroadcaster(sink, "node-1", sleep=no_sleep,
                              correlator=EventCorrelator(clock or Clock()))
    recorder.listeners.append(events.record)
    return recorder, events


async def test_an_event_becomes_a_v1_event_about_the_pod() -> None:
    sink = FakeSink()
    recorder, events = broadcaster(sink)
    recorder.event(pod(), NORMAL, "Pulling", 'Pulling image "busybox"', "spec.containers{app}")
    await events.flush()
    (written,) = sink.events.values()
    assert written["metadata"]["namespace"] == "team"
    assert written["metadata"]["name"].startswith("web.")
    assert written["involvedObject"] == {"kind": "Pod", "namespace": "team", "name": "web",
                                         "uid": "u1", "apiVersion": "v1",
                                         "fieldPath": "spec.containers{app}"}
    assert (written["reason"], written["type"], written["count"]) == ("Pulling", "Normal", 1)
    assert written["source"] == {"component": "kubelet", "host": "node-1"}


async def test_node_events_go_to_the_default_namespace() -> None:
    sink = FakeSink()
    recorder, events = broadcaster(sink)
    recorder.event(ObjectReference(kind="Node", name="node-1", uid="node-1"), NORMAL,
                   "NodeReady", "Node node-1 status is now: NodeReady")
    await events.flush()
    (written,) = sink.events.values()
    assert written["metadata"]["namespace"] == "default"
    assert written["involvedObject"]["kind"] == "Node"


async def test_repetitions_are_counted_on_one_event() -> None:
    sink = FakeSink()
    clock = Clock()
    recorder, events = broadcaster(sink, clock)
    for _ in range(3):
        recorder.event(pod(), WARNING, "BackOff", "Back-off restarting failed container")
        clock.now += 10
    await events.flush()
    assert (sink.creates, sink.patches) == (1, 2)
    (written,) = sink.events.values()
    assert written["count"] == 3


async def test_many_different_messages_are_combined() -> None:
    sink = FakeSink()
    recorder, events = broadcaster(sink)
    for index in range(12):
        recorder.event(pod(), WARNING, "Unhealthy", f"Readiness probe failed: attempt {index}")
    await events.flush()
    combined = [e for e in sink.events.values()
                if e["message"].startswith("(combined from similar events): ")]
    assert len(combined) == 1
    assert combined[0]["count"] == 3  # the 10th, 11th and 12th distinct messages
    assert sink.creates == 10


async def test_a_flood_from_one_object_is_cut_off_and_refills_slowly() -> None:
    sink = FakeSink()
    clock = Clock()
    recorder, events = broadcaster(sink, clock)
    for index in range(30):
        # Distinct messages: nine events, then one combined event counted up.
        clock.now += 0.001
        recorder.event(pod(), WARNING, "Failed", f"failure {index}")
    await events.flush()
    assert events.written == 9 + 16  # 9 distinct + 16 counted on the combined event
    clock.now += 300
    recorder.event(pod(), WARNING, "Failed", "one more")
    await events.flush()
    assert events.written == 26


async def test_unreachable_server_is_retried_and_refusals_are_not() -> None:
    sink = FakeSink()
    recorder, events = broadcaster(sink)
    sink.unreachable = 3
    recorder.event(pod(), NORMAL, "Started", "Started container app")
    await events.flush()
    assert sink.creates == 1

    sink.refuse = 403
    recorder.event(pod(), NORMAL, "Killing", "Stopping container app")
    await events.flush()
    assert sink.creates == 1
    assert events.dropped == 1


async def test_an_expired_event_is_created_again() -> None:
    sink = FakeSink()
    recorder, events = broadcaster(sink)
    recorder.event(pod(), WARNING, "BackOff", "Back-off")
    await events.flush()
    sink.events.clear()  # expired on the server
    recorder.event(pod(), WARNING, "BackOff", "Back-off")
    await events.flush()
    assert sink.creates == 2
    (written,) = sink.events.values()
    assert written["count"] == 2


async def test_events_without_an_object_reference_are_only_logged() -> None:
    sink = FakeSink()
    _, events = broadcaster(sink)
    events.record(Event("x", NORMAL, "Reason", "message"))
    await events.flush()
    assert sink.creates == 0 and events.dropped == 0


async def test_a_crash_looping_pod_spends_one_budget_for_all_its_reasons() -> None:
    # Pulled, Created, Started and BackOff of one pod share its 25 events (client-go's
    # spam filter keys on the source and the object, not on the reason).
    sink = FakeSink()
    clock = Clock()
    recorder, events = broadcaster(sink, clock)
    for restart in range(8):
        for reason in ("Pulled", "Created", "Started", "BackOff"):
            clock.now += 0.001
            recorder.event(pod(), NORMAL, reason, f"{reason} {restart}", "spec.containers{app}")
    await events.flush()
    assert events.written == 25
    clock.now += 300  # one more token five minutes later, for any reason
    recorder.event(pod(), WARNING, "Killing", "Stopping container app", "spec.containers{app}")
    recorder.event(pod(), NORMAL, "Started", "Started container app", "spec.containers{app}")
    await events.flush()
    assert events.written == 26


async def test_another_pods_events_have_their_own_budget() -> None:
    sink = FakeSink()
    recorder, events = broadcaster(sink)
    for index in range(30):
        recorder.event(pod(), NORMAL, f"Reason{index}", "message")
    other = pod_from_dict({"metadata": {"name": "db", "namespace": "team", "uid": "u2"},
                           "spec": {"containers": [{"name": "app", "image": "busybox"}]}})
    recorder.event(other, NORMAL, "Started", "Started container app")
    await events.flush()
    assert events.written == 25 + 1
    assert sum(1 for e in sink.events.values() if e["involvedObject"]["name"] == "db") == 1
