"""Event aggregation and spam filtering (client-go ``tools/record/events_cache.go``).

A crash-looping container or a failing probe repeats the same event for
hours; written naively each repetition would be a new object in etcd. The
correlator turns repetitions into updates of one event, as client-go does:

- an event identical to one already written (same object, type, reason and
  message) becomes a PATCH of that event: ``count`` + 1 and a new
  ``lastTimestamp``;
- when one object keeps producing events of one type and reason whose
  messages differ, the tenth distinct message within 10 minutes starts a
  single combined event (``(combined from similar events): <message>``) that
  is counted up from then on;
- each object gets one token bucket of 25 events, whatever their type and
  reason, refilled at one per 5 minutes; events beyond it are dropped (and
  logged only). A crash-looping container's Pulled, Created, Started and
  BackOff share that budget (client-go's ``getSpamKey``, the same in 1.20 and
  v1.35: the source and the involved object, not the reason).

Events are handled in their wire form (``v1.Event`` as a dictionary).
"""

from __future__ import annotations

import datetime
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pykubelet.api import format_time

MAX_LRU_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED_PREFIX = "(combined from similar events): "

K = TypeVar("K")
V = TypeVar("V")

WireEvent = dict[str, Any]


class LRU(Generic[K, V]):
    """A bounded map that forgets its least recently used entries."""

    def __init__(self, size: int = MAX_LRU_ENTRIES) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


def _involved(event: WireEvent) -> dict[str, Any]:
    involved: dict[str, Any] = event.get("involvedObject") or {}
    return involved


def _source(event: WireEvent) -> tuple[str, str]:
    source = event.get("source") or {}
    return str(source.get("component") or ""), str(source.get("host") or "")


def event_key(event: WireEvent) -> str:
    """Everything that makes two events the same event."""
    ref = _involved(event)
    return "".join([*_source(event), str(ref.get("kind") or ""),
                    str(ref.get("namespace") or ""), str(ref.get("name") or ""),
                    str(ref.get("fieldPath") or ""), str(ref.get("uid") or ""),
                    str(ref.get("apiVersion") or ""), str(event.get("type") or ""),
                    str(event.get("reason") or ""), str(event.get("message") or "")])


def aggregate_key(event: WireEvent) -> tuple[str, str]:
    """(events that only differ in their message, the message)."""
    ref = _involved(event)
    key = "".join([*_source(event), str(ref.get("kind") or ""),
                   str(ref.get("namespace") or ""), str(ref.get("name") or ""),
                   str(ref.get("uid") or ""), str(ref.get("apiVersion") or ""),
                   str(event.get("type") or ""), str(event.get("reason") or "")])
    return key, str(event.get("message") or "")


def spam_key(event: WireEvent) -> str:
    """Whose budget an event spends: its source's about its object (any type and reason)."""
    ref = _involved(event)
    return "".join([*_source(event), str(ref.get("kind") or ""),
                    str(ref.get("namespace") or ""), str(ref.get("name") or ""),
                    str(ref.get("uid") or ""), str(ref.get("apiVersion") or "")])


@dataclass
class _Aggregate:
    messages: set[str]
    last: float


@dataclass
class _Observation:
    count: int
    first_timestamp: str
    name: str
    resource_version: str


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class CorrelateResult:
    event: WireEvent
    # A strategic merge patch for an event already written, or None to create one.
    patch: dict[str, Any] | None = None
    # Where the correlator remembers this event (for ``update_state``).
    key: str = ""
    skip: bool = False


class EventCorrelator:
    def __init__(self, clock: Callable[[], float] = time.time, *,
                 max_events: int = AGGREGATE_MAX_EVENTS,
                 max_interval: float = AGGREGATE_INTERVAL,
                 spam_burst: int = SPAM_BURST, spam_qps: float = SPAM_QPS) -> None:
        self._clock = clock
        self._max_events = max_events
        self._max_interval = max_interval
        self._spam_burst = spam_burst
        self._spam_qps = spam_qps
        self._aggregates: LRU[str, _Aggregate] = LRU()
        self._observations: LRU[str, _Observation] = LRU()
        self._buckets: LRU[str, _Bucket] = LRU()

    def correlate(self, event: WireEvent) -> CorrelateResult:
        aggregated, key = self._aggregate(dict(event))
        observed, patch = self._observe(aggregated, key)
        if self._spam(observed):
            return CorrelateResult(observed, None, key, skip=True)
        return CorrelateResult(observed, patch, key)

    def update_state(self, written: WireEvent, key: str | None = None) -> None:
        """Remember the name and version the server gave an event, for the next PATCH."""
        meta = written.get("metadata") or {}
        self._observations.put(key or event_key(written), _Observation(
            count=int(written.get("count") or 1),
            first_timestamp=str(written.get("firstTimestamp") or ""),
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or "")))

    def _aggregate(self, event: WireEvent) -> tuple[WireEvent, str]:
        now = self._clock()
        group, message = aggregate_key(event)
        record = self._aggregates.get(group)
        if record is None or now - record.last > self._max_interval:
            record = _Aggregate(set(), now)
        record.messages.add(message)
        record.last = now
        self._aggregates.put(group, record)
        if len(record.messages) < self._max_events:
            return event, event_key(event)
        record.messages.pop()
        stamp = format_time_from(now)
        ref = _involved(event)
        combined: WireEvent = {
            "metadata": {"name": f"{ref.get('name') or ''}.{int(now * 1e9):x}",
                         "namespace": (event.get("metadata") or {}).get("namespace")},
            "involvedObject": ref, "reason": event.get("reason"),
            "message": COMBINED_PREFIX + message, "source": event.get("source"),
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "type": event.get("type"),
        }
        return combined, group

    def _observe(self, event: WireEvent, key: str) -> tuple[WireEvent, dict[str, Any] | None]:
        seen = self._observations.get(key)
        patch = None
        if seen is not None and seen.count > 0:
            meta = dict(event.get("metadata") or {})
            meta["name"] = seen.name
            meta["resourceVersion"] = seen.resource_version
            event["metadata"] = meta
            event["firstTimestamp"] = seen.first_timestamp
            event["count"] = seen.count + 1
            patch = {"count": event["count"], "lastTimestamp": event.get("lastTimestamp"),
                     "message": event.get("message")}
        self._observations.put(key, _Observation(
            count=int(event.get("count") or 1),
            first_timestamp=str(event.get("firstTimestamp") or ""),
            name=str((event.get("metadata") or {}).get("name") or ""),
            resource_version=str((event.get("metadata") or {}).get("resourceVersion") or "")))
        return event, patch

    def _spam(self, event: WireEvent) -> bool:
        now = self._clock()
        key = spam_key(event)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(self._spam_burst), now)
        bucket.tokens = min(float(self._spam_burst),
                            bucket.tokens + (now - bucket.updated) * self._spam_qps)
        bucket.updated = now
        self._buckets.put(key, bucket)
        if bucket.tokens < 1:
            return True
        bucket.tokens -= 1
        return False


def format_time_from(seconds: float) -> str:
    return format_time(datetime.datetime.fromtimestamp(seconds, datetime.UTC))


__all__ = ["CorrelateResult", "EventCorrelator", "aggregate_key", "event_key", "spam_key"]
