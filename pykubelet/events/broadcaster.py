"""Events to the API server (client-go's event broadcaster and ``EventSinkImpl``).

The recorder hands every event to ``EventBroadcaster.record`` (it listens on
the ``LoggingRecorder``), which only queues it: recording must never block a
pod sync or a probe. The broadcaster's task (``run``, supervised by the
kubelet) turns each into a ``v1.Event``, lets the ``EventCorrelator`` decide
whether it is new (POST), a repetition (PATCH of ``count`` and
``lastTimestamp``) or spam (dropped), and writes it:

- while the API server cannot be reached, the event is retried up to 12
  times, 10 s apart (so events survive a restart of the API server);
- an event the server refuses (forbidden, invalid, namespace terminating) is
  dropped at once: trying again would not change the answer;
- a PATCH of an event that has disappeared (events expire after an hour)
  becomes a new POST;
- at most 1000 events wait; beyond that new ones are dropped and logged.

``ApiEventSink`` sends the event's wire form as it is and reads the answer as
JSON: nothing here needs a ``CoreV1Event`` model, and building one, serializing
it, decoding the answer into another and turning that back into a dictionary
cost about as much CPU as the rest of the write (issue 37: 7 % of the event
loop's samples under churn, at four or five events per pod).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes_asyncio.client import CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.api import format_time
from pykubelet.client.apiclient import raise_for_status
from pykubelet.events import Event
from pykubelet.events.correlator import EventCorrelator, WireEvent
from pykubelet.util import klog

MAX_QUEUED_EVENTS = 1000
MAX_TRIES_PER_EVENT = 12
SLEEP_BETWEEN_TRIES = 10.0
REQUEST_TIMEOUT = 30.0
COMPONENT = "kubelet"


class EventSink(Protocol):
    async def create(self, event: WireEvent) -> WireEvent: ...

    async def patch(self, event: WireEvent, patch: dict[str, Any]) -> WireEvent: ...


class ApiEventSink:
    """``v1.Event`` POST and PATCH in the event's namespace, in and out as JSON."""

    def __init__(self, api_client: Any, request_timeout: float = REQUEST_TIMEOUT) -> None:
        self._api = CoreV1Api(api_client)
        self._timeout = request_timeout

    async def create(self, event: WireEvent) -> WireEvent:
        namespace = event["metadata"]["namespace"]
        body: Any = event  # the client sends a dict as it is (its JSON keys are the API's)
        response = await self._api.create_namespaced_event(
            namespace, body, _preload_content=False, _request_timeout=self._timeout)
        return await _answer(response)

    async def patch(self, event: WireEvent, patch: dict[str, Any]) -> WireEvent:
        meta = event["metadata"]
        # A dict body goes as application/strategic-merge-patch+json.
        response = await self._api.patch_namespaced_event(
            meta["name"], meta["namespace"], patch, _preload_content=False,
            _request_timeout=self._timeout)
        return await _answer(response)


async def _answer(response: Any) -> WireEvent:
    """The event the server stored, as JSON; ``ApiException`` (with its status) on failure."""
    try:
        body = await response.read()
        raise_for_status(response, body)
    finally:
        response.release()
    written: WireEvent = json.loads(body)
    return written


def _now() -> str:
    return format_time(datetime.now(UTC))


class EventBroadcaster:
    """Queues recorded events and writes them through ``sink`` from one task."""

    def __init__(self, sink: EventSink, host: str, *, component: str = COMPONENT,
                 correlator: EventCorrelator | None = None,
                 max_queued: int = MAX_QUEUED_EVENTS, max_tries: int = MAX_TRIES_PER_EVENT,
                 sleep_between_tries: float = SLEEP_BETWEEN_TRIES,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._sink = sink
        self._host = host
        self._component = component
        self._correlator = correlator or EventCorrelator()
        self._queue: asyncio.Queue[WireEvent] = asyncio.Queue(max_queued)
        self._max_tries = max_tries
        self._sleep_between_tries = sleep_between_tries
        self._sleep = sleep
        self.written = 0
        self.dropped = 0

    def record(self, event: Event) -> None:
        """Queue ``event`` (a ``LoggingRecorder`` listener); never blocks."""
        ref = event.involved
        if ref is None:
            return
        stamp = _now()
        involved = {"kind": ref.kind, "namespace": ref.namespace or None, "name": ref.name,
                    "uid": ref.uid or None, "apiVersion": ref.api_version or None,
                    "resourceVersion": ref.resource_version or None,
                    "fieldPath": event.field_path or None}
        wire: WireEvent = {
            "metadata": {"name": f"{ref.name}.{time.time_ns():x}",
                         "namespace": ref.namespace or "default"},
            "involvedObject": {k: v for k, v in involved.items() if v is not None},
            "reason": event.reason, "message": event.message, "type": event.type,
            "source": {"component": self._component, "host": self._host},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self._queue.put_nowait(wire)
        except asyncio.QueueFull:
            self.dropped += 1
            klog.error("Event dropped: the event queue is full", reason=event.reason,
                       object=event.object)

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            await self._record_to_sink(event)

    async def flush(self) -> None:
        """Write whatever is queued now (used on shutdown and by tests)."""
        while not self._queue.empty():
            await self._record_to_sink(self._queue.get_nowait())

    async def _record_to_sink(self, event: WireEvent) -> None:
        result = self._correlator.correlate(event)
        if result.skip:
            klog.v(4).info("Event filtered as spam", reason=event.get("reason"),
                           object=(event.get("involvedObject") or {}).get("name"))
            return
        for attempt in range(1, self._max_tries + 1):
            if await self._write(result.event, result.patch, result.key):
                return
            if attempt == self._max_tries:
                break
            delay = self._sleep_between_tries
            if attempt == 1:
                delay *= random.random()  # spread the first retry of many kubelets
            await self._sleep(delay)
        self.dropped += 1
        klog.error("Unable to write event (retry limit exceeded!)",
                   reason=result.event.get("reason"))

    async def _write(self, event: WireEvent, patch: dict[str, Any] | None, key: str) -> bool:
        """True when done with the event (written, or refused for good)."""
        try:
            written = None
            if patch is not None:
                try:
                    written = await self._sink.patch(event, patch)
                except ApiException as err:
                    if err.status != 404:
                        raise
            if written is None:
                fresh = dict(event)
                fresh["metadata"] = {k: v for k, v in event["metadata"].items()
                                     if k != "resourceVersion"}
                written = await self._sink.create(fresh)
        except ApiException as err:
            if not err.status:
                klog.error("Unable to write event (may retry after sleeping)", err,
                           reason=event.get("reason"))
                return False
            klog.error("Server rejected event (will not retry!)", reason=event.get("reason"),
                       status=err.status, err=str(err.reason or ""))
            self.dropped += 1
            return True
        except Exception as err:
            # The API server could not be reached: keep the event and try again.
            klog.error("Unable to write event (may retry after sleeping)", err,
                       reason=event.get("reason"))
            return False
        self._correlator.update_state(written, key)
        self.written += 1
        return True


__all__ = ["ApiEventSink", "EventBroadcaster", "EventSink"]
