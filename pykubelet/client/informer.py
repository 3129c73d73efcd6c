"""A watched local copy of one named cluster-scoped object (upstream: an informer + lister).

The kubelet keeps its own Node in a local cache (upstream's ``nodeLister``,
fed by an informer whose list and watch select ``metadata.name=<node>``): the
first of the node status's five tries reads from it instead of the API
server, the fast start-up update polls it every 100 ms for free, and
admission reads the node's labels and allocatable from it.

``ObjectInformer`` is the store of a ``util.reflector.Reflector``, which does
the listing, watching, resuming, relisting after 410 Gone and backing off; the
cached object stays readable all the while. The kubelet's own successful
writes are ``observe``d too, so a status written is not re-read stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from pykubelet.api import from_dict
from pykubelet.util.reflector import ApiListWatch, Object, Reflector, resource_version_of

T = TypeVar("T")

# list_function(field_selector=..., resource_version=..., watch=..., ...) as generated.
ListFunction = Callable[..., Awaitable[Any]]


class ObjectInformer(Generic[T]):
    """List+watch of the object named ``name`` through ``list_function`` (e.g. ``list_node``)."""

    def __init__(self, list_function: ListFunction, model: type[T], name: str,
                 description: str, **reflector_options: Any) -> None:
        self._model = model
        self.name = name
        self.description = description
        self._object: T | None = None
        self._changed = asyncio.Event()
        self._generation = 0
        self.reflector = Reflector(
            description, ApiListWatch(list_function, field_selector=f"metadata.name={name}"),
            self, **reflector_options)

    # -- reading ------------------------------------------------------------

    def get(self) -> T | None:
        """The last known state of the object, or None when it does not exist (or before sync).

        Callers must not change the returned object; the status manager copies it first.
        """
        return self._object

    def has_synced(self) -> bool:
        return self.reflector.has_synced

    async def wait_for_sync(self) -> None:
        generation = self._generation
        while not self.has_synced():
            generation = await self.wait_for_change(generation)

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
        self._bump()

    def _bump(self) -> None:
        self._generation += 1
        # Wake every waiter of this generation; later waiters wait on a fresh event.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- the reflector's store ---------------------------------------------------------

    def replace(self, objects: list[Object], resource_version: str) -> None:
        self._object = from_dict(objects[0], self._model) if objects else None
        self._bump()

    def add(self, obj: Object) -> None:
        self.observe(from_dict(obj, self._model), resource_version_of(obj))

    update = add

    def delete(self, obj: Object) -> None:
        self._object = None
        self._bump()

    async def run(self) -> None:
        await self.reflector.run()


def _older(candidate: Any, current: Any) -> bool:
    """True when ``candidate`` is an older version of the same object than ``current``."""
    try:
        if candidate.metadata.uid != current.metadata.uid:
            return False
        return int(candidate.metadata.resource_version) < int(current.metadata.resource_version)
    except (AttributeError, TypeError, ValueError):
        return False


__all__ = ["ObjectInformer"]
