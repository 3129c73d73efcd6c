"""Stores and the per-pod reference counting manager; see the package docstring."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio.client import ApiException, CoreV1Api, V1Node, V1Pod

from pykubelet import metrics
from pykubelet.api import all_containers, pod_uid
from pykubelet.util import klog
from pykubelet.util.reflector import ApiListWatch, Reflector, resource_version_of
from pykubelet.util.supervisor import keep_running

WATCH = "Watch"
CACHE = "Cache"
GET = "Get"

# Upstream: the cache TTL when the node has no annotation, and how long a read
# waits for a new watch to deliver its first list.
DEFAULT_TTL = 60.0
WATCH_SYNC_TIMEOUT = 1.0
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"

Object = dict[str, Any]
# (namespace, name) -> the object, or None when the API server says 404.
Fetch = Callable[[str, str], Awaitable[Object | None]]


class NotFoundError(LookupError):
    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f'{kind} "{name}" not found')
        self.kind = kind
        self.name = name


class Store(Protocol):
    kind: str

    def add_reference(self, namespace: str, name: str) -> None: ...
    def delete_reference(self, namespace: str, name: str) -> None: ...
    async def get(self, namespace: str, name: str) -> Object: ...
    async def stop(self) -> None: ...


def is_immutable(obj: Object | None) -> bool:
    return bool(obj and obj.get("immutable"))


def _older(candidate: Object | None, current: Object | None) -> bool:
    try:
        return int(resource_version_of(candidate or {})) < int(resource_version_of(current or {}))
    except ValueError:
        return False


def ttl_from_node(get_node: Callable[[], V1Node | None]) -> Callable[[], float | None]:
    """The TTL the Node's ``node.alpha.kubernetes.io/ttl`` annotation sets, in seconds."""
    def get_ttl() -> float | None:
        node = get_node()
        annotations = (node.metadata.annotations if node and node.metadata else None) or {}
        value = annotations.get(TTL_ANNOTATION)
        if value is None:
            return None
        try:
            return float(int(value))
        except ValueError:
            klog.error("Invalid node TTL annotation", annotation=TTL_ANNOTATION, value=value)
            return None
    return get_ttl


# --- Cache: the seed-004 object store ------------------------------------------------


@dataclass
class _Data:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    object: Object | None = None
    error: Exception | None = None
    last_update: float = 0.0


@dataclass
class _Item:
    ref_count: int = 0
    data: _Data | None = None


class ObjectStore:
    """Reference-counted objects, refreshed by GET after a TTL (upstream ``objectStore``)."""

    def __init__(self, kind: str, fetch: Fetch, *, default_ttl: float = DEFAULT_TTL,
                 get_ttl: Callable[[], float | None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self._fetch = fetch
        self._default_ttl = default_ttl
        self._get_ttl = get_ttl
        self._clock = clock
        self._items: dict[tuple[str, str], _Item] = {}

    def add_reference(self, namespace: str, name: str) -> None:
        item = self._items.setdefault((namespace, name), _Item())
        item.ref_count += 1
        # A new reference (a new pod) must see the current object, not a cached one.
        item.data = None

    def delete_reference(self, namespace: str, name: str) -> None:
        item = self._items.get((namespace, name))
        if item is None:
            return
        item.ref_count -= 1
        if item.ref_count <= 0:
            del self._items[(namespace, name)]

    def _fresh(self, data: _Data) -> bool:
        if is_immutable(data.object):
            return True
        ttl = self._get_ttl()
        return self._clock() < data.last_update + (self._default_ttl if ttl is None else ttl)

    async def get(self, namespace: str, name: str) -> Object:
        item = self._items.get((namespace, name))
        if item is None:
            raise LookupError(f'{self.kind} "{namespace}/{name}" not registered')
        if item.data is None:
            item.data = _Data()
        data = item.data
        async with data.lock:
            if data.error is not None or data.object is None or not self._fresh(data):
                try:
                    fetched = await self._fetch(namespace, name)
                except Exception as err:
                    if data.object is None and data.error is None:
                        raise
                    # A failed refresh: keep serving the last good answer.
                    klog.v(2).info("Refreshing object failed, serving the cached copy",
                                   kind=self.kind, namespace=namespace, name=name, err=str(err))
                else:
                    if fetched is None:
                        data.object, data.error = None, NotFoundError(self.kind, name)
                        data.last_update = self._clock()
                    elif not _older(fetched, data.object):
                        data.object, data.error = fetched, None
                        data.last_update = self._clock()
            if data.error is not None:
                raise data.error
            assert data.object is not None
            return data.object

    async def stop(self) -> None:
        self._items.clear()


# --- Get: straight to the API server -----------------------------------------------


class DirectStore:
    """Every read is a GET (the ``Get`` strategy); references are not tracked."""

    def __init__(self, kind: str, fetch: Fetch) -> None:
        self.kind = kind
        self._fetch = fetch

    def add_reference(self, namespace: str, name: str) -> None:
        pass

    def delete_reference(self, namespace: str, name: str) -> None:
        pass

    async def get(self, namespace: str, name: str) -> Object:
        obj = await self._fetch(namespace, name)
        if obj is None:
            raise NotFoundError(self.kind, name)
        return obj

    async def stop(self) -> None:
        pass


# --- Watch: one reflector per referenced object --------------------------------------


class _OneObject:
    """A reflector's store for a list narrowed to one name."""

    def __init__(self) -> None:
        self.object: Object | None = None
        self.synced = asyncio.Event()

    def replace(self, objects: list[Object], resource_version: str) -> None:
        self.object = objects[0] if objects else None
        self.synced.set()

    def add(self, obj: Object) -> None:
        self.object = obj

    def update(self, obj: Object) -> None:
        self.object = obj

    def delete(self, obj: Object) -> None:
        self.object = None


@dataclass
class _Watch:
    store: _OneObject
    task: asyncio.Task[None] | None
    ref_count: int = 0


class WatchingStore:
    """One list+watch per referenced object (upstream ``objectCache``)."""

    def __init__(self, kind: str, list_call: Callable[..., Awaitable[Any]],
                 sync_timeout: float = WATCH_SYNC_TIMEOUT) -> None:
        self.kind = kind
        self._list_call = list_call
        self._sync_timeout = sync_timeout
        self._watches: dict[tuple[str, str], _Watch] = {}

    def add_reference(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        watch = self._watches.get(key)
        if watch is None:
            store = _OneObject()
            watch = _Watch(store, self._start(namespace, name, store))
            self._watches[key] = watch
        watch.ref_count += 1

    def _start(self, namespace: str, name: str, store: _OneObject) -> asyncio.Task[None]:
        lister = ApiListWatch(self._list_call, namespace=namespace,
                              field_selector=f"metadata.name={name}")
        reflector = Reflector(f"{self.kind} {namespace}/{name}", lister, store)
        description = f"{self.kind}-watch {namespace}/{name}"
        return asyncio.get_running_loop().create_task(
            keep_running(description, reflector.run), name=description)

    def delete_reference(self, namespace: str, name: str) -> None:
        watch = self._watches.get((namespace, name))
        if watch is None:
            return
        watch.ref_count -= 1
        if watch.ref_count <= 0:
            del self._watches[(namespace, name)]
            if watch.task is not None:
                watch.task.cancel()

    async def get(self, namespace: str, name: str) -> Object:
        watch = self._watches.get((namespace, name))
        if watch is None:
            raise LookupError(f'{self.kind} "{namespace}/{name}" not registered')
        if not watch.store.synced.is_set():
            try:
                await asyncio.wait_for(watch.store.synced.wait(), self._sync_timeout)
            except TimeoutError:
                raise TimeoutError(f"failed to sync {self.kind} cache: timed out waiting for "
                                   f"the condition") from None
        obj = watch.store.object
        if obj is None:
            raise NotFoundError(self.kind, name)
        if is_immutable(obj) and watch.task is not None:
            # It can never change again: no need to keep watching it.
            watch.task.cancel()
            watch.task = None
        return obj

    def watched(self) -> list[tuple[str, str]]:
        return [key for key, w in self._watches.items() if w.task is not None]

    async def stop(self) -> None:
        for watch in self._watches.values():
            if watch.task is not None:
                watch.task.cancel()
        self._watches.clear()


# --- the manager -------------------------------------------------------------------


class Manager:
    """Per-pod references over a store (upstream ``cacheBasedManager`` / ``watchBasedManager``)."""

    def __init__(self, store: Store, names_of: Callable[[V1Pod], set[str]]) -> None:
        self.store = store
        self._names_of = names_of
        self._registered: dict[str, tuple[str, set[str]]] = {}
        metrics.track_table(f"{store.kind}_manager", self.tracked_pods)

    def tracked_pods(self) -> int:
        """Pods with registered references (the ``pykubelet_tracked_pods`` gauge)."""
        return len(self._registered)

    async def get_object(self, namespace: str, name: str) -> Object:
        return await self.store.get(namespace, name)

    def register_pod(self, pod: V1Pod) -> None:
        """Reference what ``pod`` names now; drop what its previous version named."""
        names = self._names_of(pod)
        namespace = pod.metadata.namespace or ""
        uid = pod_uid(pod)
        for name in names:
            self.store.add_reference(namespace, name)
        previous = self._registered.get(uid)
        self._registered[uid] = (namespace, names)
        if previous is not None:
            for name in previous[1]:
                self.store.delete_reference(previous[0], name)

    def unregister_pod(self, pod_or_uid: V1Pod | str) -> None:
        uid = pod_or_uid if isinstance(pod_or_uid, str) else pod_uid(pod_or_uid)
        previous = self._registered.pop(uid, None)
        if previous is not None:
            for name in previous[1]:
                self.store.delete_reference(previous[0], name)

    def registered_pods(self) -> list[str]:
        return list(self._registered)

    async def stop(self) -> None:
        await self.store.stop()


# --- what pods reference -----------------------------------------------------------


def configmap_names(pod: V1Pod) -> set[str]:
    """ConfigMaps a pod's env, envFrom and volumes name (upstream ``getConfigMapNames``)."""
    names: set[str] = set()
    for container in all_containers(pod):
        for source in container.env_from or []:
            if source.config_map_ref is not None and source.config_map_ref.name:
                names.add(source.config_map_ref.name)
        for var in container.env or []:
            ref = var.value_from.config_map_key_ref if var.value_from else None
            if ref is not None and ref.name:
                names.add(ref.name)
    for volume in (pod.spec.volumes if pod.spec else None) or []:
        if volume.config_map is not None and volume.config_map.name:
            names.add(volume.config_map.name)
        for projection in (volume.projected.sources or []) if volume.projected else []:
            if projection.config_map is not None and projection.config_map.name:
                names.add(projection.config_map.name)
    return names


def secret_names(pod: V1Pod) -> set[str]:
    """Secrets a pod's env, envFrom, volumes and imagePullSecrets name."""
    names: set[str] = set()
    spec = pod.spec
    for ref in (spec.image_pull_secrets if spec else None) or []:
        if ref.name:
            names.add(ref.name)
    for container in all_containers(pod):
        for source in container.env_from or []:
            if source.secret_ref is not None and source.secret_ref.name:
                names.add(source.secret_ref.name)
        for var in container.env or []:
            key_ref = var.value_from.secret_key_ref if var.value_from else None
            if key_ref is not None and key_ref.name:
                names.add(key_ref.name)
    for volume in (spec.volumes if spec else None) or []:
        if volume.secret is not None and volume.secret.secret_name:
            names.add(volume.secret.secret_name)
        for projection in (volume.projected.sources or []) if volume.projected else []:
            if projection.secret is not None and projection.secret.name:
                names.add(projection.secret.name)
    return names


# --- construction ----------------------------------------------------------------


def _fetcher(read_call: Callable[..., Awaitable[Any]]) -> Fetch:
    async def fetch(namespace: str, name: str) -> Object | None:
        response = await read_call(name, namespace, _preload_content=False)
        try:
            body = await response.read()
            if response.status == 404:
                return None
            if response.status != 200:
                raise ApiException(status=response.status, reason=body.decode(errors="replace"))
        finally:
            response.release()
        obj: Object = json.loads(body)
        return obj
    return fetch


def _new_manager(kind: str, strategy: str, read_call: Callable[..., Awaitable[Any]],
                 list_call: Callable[..., Awaitable[Any]], names_of: Callable[[V1Pod], set[str]],
                 get_ttl: Callable[[], float | None]) -> Manager:
    store: Store
    if strategy == WATCH:
        store = WatchingStore(kind, list_call)
    elif strategy == CACHE:
        store = ObjectStore(kind, _fetcher(read_call), get_ttl=get_ttl)
    elif strategy == GET:
        store = DirectStore(kind, _fetcher(read_call))
    else:
        raise ValueError(f"unknown configMapAndSecretChangeDetectionStrategy: {strategy!r}")
    return Manager(store, names_of)


def new_configmap_manager(api: CoreV1Api, strategy: str,
                          get_ttl: Callable[[], float | None] = lambda: None) -> Manager:
    return _new_manager("configmap", strategy, api.read_namespaced_config_map,
                        api.list_namespaced_config_map, configmap_names, get_ttl)


def new_secret_manager(api: CoreV1Api, strategy: str,
                       get_ttl: Callable[[], float | None] = lambda: None) -> Manager:
    return _new_manager("secret", strategy, api.read_namespaced_secret,
                        api.list_namespaced_secret, secret_names, get_ttl)
