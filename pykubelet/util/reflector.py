"""List, then watch, an API collection and keep a local copy current (client-go's ``Reflector``).

A kubelet must keep running its pods while the API server restarts, is
unreachable for a while, or compacts etcd; what it must never do is act on a
view that silently stopped changing. The reflector gives a store exactly two
kinds of news: "this is everything" (``replace``, after a list) and "this one
object changed" (``add``/``update``/``delete``, from the watch). In between
it follows the API conventions:

- The first list reads the API server's watch cache (``resourceVersion=0``);
  the watch then starts from the list's resourceVersion and every event
  moves it forward (bookmarks too), so a watch that ends or drops is resumed
  from where it stopped, without a relist.
- A 410 Gone (as the watch request's status or as an ``ERROR`` event) means
  that version has been compacted away: the next list is a consistent read
  (``resourceVersion=""``) and replaces the whole store.
- Failures back off exponentially (0.8 s doubling to 30 s, with jitter);
  a watch that delivered events or lived a while resets the back-off.
- Each watch asks the server to end it after 5 to 10 minutes (a random
  ``timeoutSeconds``, so many clients do not re-watch in step), and the
  client gives up on a connection that has been silent much longer than that.

The transport is a ``ListerWatcher``; ``ApiListWatch`` implements it for any
generated ``list_*`` call of ``kubernetes_asyncio`` (pods of a node, the node
itself), reading the wire JSON itself: objects reach the store as plain
dictionaries and each store decides what model to build.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes_asyncio.client.exceptions import ApiException

from pykubelet.util import klog

# client-go's reflector defaults.
MIN_WATCH_TIMEOUT = 300.0
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0
# A watch that ends this fast without a single event is treated as a failure.
SHORT_WATCH = 1.0
# How much longer than the server-side timeout a silent connection is trusted.
WATCH_READ_SLACK = 60.0
LIST_TIMEOUT = 60.0

Object = dict[str, Any]


class GoneError(Exception):
    """410: the requested resourceVersion is no longer available (etcd compaction)."""


@dataclass(frozen=True)
class WatchEvent:
    type: str
    object: Object


class ListerWatcher(Protocol):
    """How a reflector lists and watches one collection."""

    async def list(self, resource_version: str) -> tuple[list[Object], str]:
        """Every object and the collection's resourceVersion."""
        ...

    def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        """Events after ``resource_version`` until the server ends the watch."""
        ...


class Store(Protocol):
    def replace(self, objects: list[Object], resource_version: str) -> None: ...
    def add(self, obj: Object) -> None: ...
    def update(self, obj: Object) -> None: ...
    def delete(self, obj: Object) -> None: ...


def resource_version_of(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def status_error(status: int, body: bytes | str) -> Exception:
    """Turn a non-2xx answer (a ``metav1.Status`` body) into the exception the reflector acts on."""
    reason = ""
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict):
            reason = f"{parsed.get('reason') or ''}: {parsed.get('message') or ''}".strip(": ")
    except ValueError:
        reason = body.decode(errors="replace") if isinstance(body, bytes) else body
    if status == 410:
        return GoneError(reason or "resource version too old")
    return ApiException(status=status, reason=reason or None)


class Reflector:
    """Keeps ``store`` equal to the collection ``lister_watcher`` serves, until cancelled."""

    def __init__(self, name: str, lister_watcher: ListerWatcher, store: Store, *,
                 min_watch_timeout: float = MIN_WATCH_TIMEOUT,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rand: Callable[[], float] = random.random) -> None:
        self.name = name
        self._lw = lister_watcher
        self._store = store
        self._min_watch_timeout = min_watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._delay = 0.0
        self.last_sync_resource_version = ""
        # After a 410 the next list must be a consistent read, not the (stale) watch cache.
        self._version_unavailable = False
        self.lists = 0
        self.watches = 0
        self.has_synced = False

    async def run(self) -> None:
        """List and watch forever; every failure is logged and retried after a back-off."""
        while True:
            try:
                await self._list()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                klog.warning("Failed to list", reflector=self.name, err=_describe(err))
                await self._back_off()
                continue
            await self._watch_until_relist_needed()

    async def _list(self) -> None:
        version = "" if self._version_unavailable else (self.last_sync_resource_version or "0")
        try:
            objects, resource_version = await self._lw.list(version)
        except GoneError:
            if version == "":
                raise
            klog.info("Resource version expired, listing again from storage",
                      reflector=self.name, resourceVersion=version)
            objects, resource_version = await self._lw.list("")
        self.lists += 1
        self._version_unavailable = False
        self.last_sync_resource_version = resource_version
        self._store.replace(objects, resource_version)
        self.has_synced = True
        klog.v(4).info("Listed", reflector=self.name, items=len(objects),
                       resourceVersion=resource_version)

    async def _watch_until_relist_needed(self) -> None:
        """Watch from the last version; resume after drops; return when a relist is needed."""
        while True:
            timeout = int(self._min_watch_timeout * (1 + self._rand()))
            started = self._clock()
            events = 0
            try:
                self.watches += 1
                async for event in self._lw.watch(self.last_sync_resource_version, timeout):
                    events += 1
                    self._handle(event)
                    self._delay = 0.0
            except asyncio.CancelledError:
                raise
            except GoneError as err:
                klog.info("Watch closed: resource version too old, relisting",
                          reflector=self.name, resourceVersion=self.last_sync_resource_version,
                          err=str(err))
                self._version_unavailable = True
                return
            except ApiException as err:
                if err.status and 400 <= err.status < 500 and err.status != 429:
                    # The request itself is refused (forbidden, bad selector...):
                    # start over from a list after the back-off.
                    klog.warning("Watch failed, relisting", reflector=self.name,
                                 err=_describe(err))
                    await self._back_off()
                    return
                klog.warning("Watch failed, resuming", reflector=self.name,
                             resourceVersion=self.last_sync_resource_version,
                             err=_describe(err))
                await self._back_off()
                continue
            except Exception as err:
                klog.warning("Watch dropped, resuming", reflector=self.name,
                             resourceVersion=self.last_sync_resource_version,
                             err=_describe(err))
                await self._back_off()
                continue
            if events == 0 and self._clock() - started < SHORT_WATCH:
                klog.warning("Very short watch, resuming after a back-off", reflector=self.name)
                await self._back_off()
            else:
                klog.v(4).info("Watch ended, resuming", reflector=self.name, events=events,
                               resourceVersion=self.last_sync_resource_version)

    def _handle(self, event: WatchEvent) -> None:
        kind, obj = event.type, event.object
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            message = f"{obj.get('reason') or ''}: {obj.get('message') or ''}"
            if code == 410:
                raise GoneError(message)
            raise ApiException(status=code or 500, reason=message)
        version = resource_version_of(obj)
        if kind == "ADDED":
            self._store.add(obj)
        elif kind == "MODIFIED":
            self._store.update(obj)
        elif kind == "DELETED":
            self._store.delete(obj)
        elif kind != "BOOKMARK":
            klog.warning("Unknown watch event type, ignoring", reflector=self.name, type=kind)
            return
        if version:
            self.last_sync_resource_version = version

    async def _back_off(self) -> None:
        self._delay = (self._backoff_initial if self._delay == 0
                       else min(self._delay * 2, self._backoff_max))
        await self._sleep(self._delay * (1 + self._rand()))


class ApiListWatch:
    """A ``ListerWatcher`` over a generated ``list_*`` call (``list_pod_for_all_namespaces``...).

    ``params`` are the method's selectors (``field_selector=...``). Answers are
    read as raw JSON; watch frames are newline-separated JSON objects.
    """

    def __init__(self, list_call: Callable[..., Awaitable[Any]], **params: Any) -> None:
        self._call = list_call
        self._params = params

    async def list(self, resource_version: str) -> tuple[list[Object], str]:
        response = await self._call(**self._params, resource_version=resource_version,
                                    _preload_content=False, _request_timeout=LIST_TIMEOUT)
        try:
            body = await response.read()
            if response.status != 200:
                raise status_error(response.status, body)
        finally:
            response.release()
        parsed = json.loads(body)
        return list(parsed.get("items") or []), resource_version_of(parsed)

    async def watch(self, resource_version: str,
                    timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        response = await self._call(
            **self._params, watch=True, allow_watch_bookmarks=True,
            resource_version=resource_version, timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(LIST_TIMEOUT, timeout_seconds + WATCH_READ_SLACK))
        try:
            if response.status != 200:
                raise status_error(response.status, await response.read())
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        yield _decode_event(line)
            if pending.strip():
                yield _decode_event(pending)
        finally:
            response.release()


def _decode_event(line: bytes) -> WatchEvent:
    frame = json.loads(line)
    if not isinstance(frame, dict) or "type" not in frame:
        # A bare Status instead of an event: the server refused mid-stream.
        code = int(frame.get("code") or 500) if isinstance(frame, dict) else 500
        raise status_error(code, line)
    return WatchEvent(str(frame["type"]), frame.get("object") or {})


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason or ''}".strip()
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


__all__ = ["ApiListWatch", "GoneError", "ListerWatcher", "Reflector", "Store", "WatchEvent",
           "resource_version_of"]
