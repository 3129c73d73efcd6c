"""A watched local copy of one named cluster-scoped object (upstream: an informer + lister).

The kubelet keeps its own Node in a local cache (upstream's ``nodeLister``,
fed by an informer whose list and watch select ``metadata.name=<node>``): the
first of the node status's five tries reads from it instead of the API
server, the fast start-up update polls it every 100 ms for free, and
admission reads the node's labels and allocatable from it.

``ObjectInformer`` lists once, then watches from the list's resourceVersion,
resumes from the last version it saw when a watch ends, lists again when the
server answers 410 Gone, and backs off (with jitter) while the server cannot
be reached — the cached object stays readable all the while.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from kubernetes_asyncio.client import ApiException

from pykubelet.api import from_dict
from pykubelet.client.apiclient import describe_error, raise_for_status
from pykubelet.util import klog

T = TypeVar("T")

# Upstream reflectors ask for watches of 5 to 10 minutes.
MIN_WATCH_TIMEOUT = 300
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0


class WatchExpiredError(Exception):
    """The server no longer has the resourceVersion the watch asked for (410 Gone)."""


# list_function(field_selector=..., resource_version=..., watch=..., ...) as generated.
ListFunction = Callable[..., Awaitable[Any]]


class ObjectInformer(Generic[T]):
    """List+watch of the object named ``name`` through ``list_function`` (e.g. ``list_node``)."""

    def __init__(self, list_function: ListFunction, model: type[T], name: str,
                 description: str) -> None:
        self._list = list_function
        self._model = model
        self.name = name
        self.description = description
        self._object: T | None = None
        self._resource_version = ""
        self._synced = asyncio.Event()
        self._changed = asyncio.Event()
        self._generation = 0

    # -- reading ------------------------------------------------------------

    def get(self) -> T | None:
        """The last known state of the object, or None when it does not exist (or before sync).

        Callers must not change the returned object; the status manager copies it first.
        """
        return self._object

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    async def wait_for_change(self, generation: int) -> int:
        """Wait until the cached object changes after ``generation``; returns the new one."""
        while self._generation == generation:
            await self._changed.wait()
        return self._generation

    @property
    def generation(self) -> int:
        return self._generation

    # -- writing (also from the kubelet's own successful writes) ---------------------

    def observe(self, obj: T | None, resource_version: str | None = None) -> None:
        """Take a newer state of the object (a watch event, or a write's answer)."""
        if obj is not None and self._object is not None and _older(obj, self._object):
            return
        self._object = obj
        if resource_version:
            self._resource_version = resource_version
        self._bump()

    def _bump(self) -> None:
        self._generation += 1
        # Wake every waiter of this generation; later waiters wait on a fresh event.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- the loop -----------------------------------------------------------------

    async def run(self) -> None:
        delay = BACKOFF_INITIAL
        needs_list = True
        while True:
            try:
                if needs_list:
                    await self._list_once()
                    needs_list = False
                await self._watch_once()
                delay = BACKOFF_INITIAL
            except WatchExpiredError:
                klog.v(2).info("Watch expired, listing again", object=self.description)
                needs_list = True
            except asyncio.CancelledError:
                raise
            except Exception as err:
                klog.warning("Failed to watch object, retrying", object=self.description,
                             err=describe_error(err), retryIn=f"{delay:.1f}s")
                await asyncio.sleep(delay * (1 + random.random() * 0.2))
                delay = min(delay * 2, BACKOFF_MAX)
                needs_list = needs_list or not self._resource_version

    def _selector(self) -> str:
        return f"metadata.name={self.name}"

    async def _list_once(self) -> None:
        listed = await self._list(field_selector=self._selector())
        items = list(listed.items or [])
        self._object = items[0] if items else None
        self._resource_version = str(listed.metadata.resource_version or "")
        self._synced.set()
        self._bump()

    async def _watch_once(self) -> None:
        timeout = int(MIN_WATCH_TIMEOUT * (1 + random.random()))
        try:
            response = await self._list(
                field_selector=self._selector(), watch=True,
                resource_version=self._resource_version, allow_watch_bookmarks=True,
                timeout_seconds=timeout, _preload_content=False)
        except ApiException as err:
            if err.status == 410:
                raise WatchExpiredError() from err
            raise
        if response.status != 200:
            body = await response.read()
            response.release()
            if response.status == 410:
                raise WatchExpiredError()
            raise_for_status(response, body)
        try:
            while True:
                line = await response.content.readline()
                if not line:
                    return  # the server ended the watch: resume from the last version
                self._handle(json.loads(line))
        finally:
            response.release()

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        raw = event.get("object") or {}
        if kind == "ERROR":
            if raw.get("code") == 410:
                raise WatchExpiredError()
            raise RuntimeError(f"watch error: {raw.get('message', raw)}")
        version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            if version:
                self._resource_version = version
            return
        if kind == "DELETED":
            self._object = None
            self._resource_version = version or self._resource_version
            self._bump()
            return
        self.observe(from_dict(raw, self._model), version)


def _older(candidate: Any, current: Any) -> bool:
    """True when ``candidate`` is an older version of the same object than ``current``."""
    try:
        if candidate.metadata.uid != current.metadata.uid:
            return False
        return int(candidate.metadata.resource_version) < int(current.metadata.resource_version)
    except (AttributeError, TypeError, ValueError):
        return False


__all__ = ["ObjectInformer", "WatchExpiredError"]
