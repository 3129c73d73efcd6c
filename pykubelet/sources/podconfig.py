"""The pod config merger (upstream ``pkg/kubelet/config/config.go``, incremental mode).

Sources report what they hold; the sync loop needs to know what changed. The
merger keeps the last known pods of every source, keyed by UID, and turns each
incoming update into the smallest set of notifications, always in this order:

- ``REMOVE``: pods gone from their source (stop them now);
- ``ADD``: pods never seen before (stamped with ``config.seen``);
- ``UPDATE``: same UID, but spec, labels, deletion fields or non-local
  annotations changed;
- ``DELETE``: the change is a graceful deletion (``deletionTimestamp`` set);
- an empty ``ADD`` the first time a source sends a ``SET`` with nothing to
  add, so the kubelet learns the source is ready;
- ``RECONCILE``: only the status differs (the kubelet owns status).

Pods are annotated with their source before being compared. Within one update
a repeated full name (``name_namespace``) is dropped, and across sources the
pod that was there first wins (mirror pods excepted: they always share their
static pod's name). Pods whose name or namespace is invalid are dropped.

The merger keeps pods of its own and hands out copies, so no source and no
consumer can change what it compares against. A source's pods are copied on
the way in unless the source hands them over (``HANDED_OVER_SOURCES``: the API
server source decodes a fresh pod for every watch event and keeps none, so a
copy of it would only cost CPU: under churn, about 30 watch events per pod);
a ``REMOVE`` reads only UIDs and copies nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, Protocol

from kubernetes_asyncio.client.models import V1Pod

from pykubelet.api import clone, pod_uid, to_dict
from pykubelet.api.kubetypes import (
    ALL_SOURCES,
    API_SOURCE,
    CONFIG_FIRST_SEEN_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    CONFIG_SOURCE_ANNOTATION_KEY,
    PodOperation,
    PodUpdate,
    is_mirror_pod,
    pod_full_name,
)
from pykubelet.api.validation import dns1123_label_errors, dns1123_subdomain_errors
from pykubelet.sources.static import rfc3339_nano
from pykubelet.util import klog

# Sources whose pods the merger may keep as they come: each update's pods are new objects
# the source holds no reference to (sources/apiserver.py decodes every watch event afresh).
HANDED_OVER_SOURCES = frozenset({API_SOURCE})
# Annotations the kubelet itself writes: never a reason to update a pod.
LOCAL_ANNOTATIONS = (CONFIG_SOURCE_ANNOTATION_KEY, CONFIG_MIRROR_ANNOTATION_KEY,
                     CONFIG_FIRST_SEEN_ANNOTATION_KEY)


def _annotations(pod: V1Pod) -> dict[str, str]:
    if pod.metadata is None or pod.metadata.annotations is None:
        return {}
    annotations: dict[str, str] = pod.metadata.annotations
    return annotations


def _non_local(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k not in LOCAL_ANNOTATIONS}


def _semantic_view(pod: V1Pod) -> tuple[Any, ...]:
    meta = pod.metadata
    return (
        to_dict(pod.spec),
        (meta.labels if meta is not None else None) or {},
        to_dict(meta.deletion_timestamp) if meta is not None else None,
        meta.deletion_grace_period_seconds if meta is not None else None,
        _non_local(_annotations(pod)),
    )


def pods_differ_semantically(existing: V1Pod, candidate: V1Pod) -> bool:
    """True when the kubelet must act on the change (not just record a new status)."""
    return _semantic_view(existing) != _semantic_view(candidate)


def check_and_update_pod(existing: V1Pod, candidate: V1Pod) -> PodOperation | None:
    """Fold ``candidate`` into the stored ``existing`` pod; say what kind of change it was.

    Returns ``UPDATE``, ``DELETE`` (graceful deletion), ``RECONCILE`` (status only) or
    ``None`` (nothing changed). ``existing`` keeps its identity and local annotations.
    """
    if not pods_differ_semantically(existing, candidate):
        if to_dict(existing.status) != to_dict(candidate.status):
            existing.status = candidate.status
            return PodOperation.RECONCILE
        return None
    assert existing.metadata is not None and candidate.metadata is not None
    existing.spec = candidate.spec
    existing.metadata.labels = candidate.metadata.labels
    existing.metadata.deletion_timestamp = candidate.metadata.deletion_timestamp
    existing.metadata.deletion_grace_period_seconds = (
        candidate.metadata.deletion_grace_period_seconds)
    existing.metadata.generation = candidate.metadata.generation
    existing.status = candidate.status
    # The candidate's annotations win, except the kubelet's own: the first-seen time stays.
    merged = dict(_annotations(candidate))
    for key in LOCAL_ANNOTATIONS:
        if key in _annotations(existing):
            merged[key] = _annotations(existing)[key]
    existing.metadata.annotations = merged
    if candidate.metadata.deletion_timestamp is not None:
        return PodOperation.DELETE
    return PodOperation.UPDATE


def _name_errors(pod: V1Pod) -> list[str]:
    meta = pod.metadata
    name = (meta.name if meta is not None else None) or ""
    namespace = (meta.namespace if meta is not None else None) or ""
    errors = [f"metadata.name: {p}" for p in dns1123_subdomain_errors(name)]
    errors += [f"metadata.namespace: {p}" for p in dns1123_label_errors(namespace)]
    if not pod_uid(pod):
        errors.append("metadata.uid: Required value")
    return errors


class PodSource(Protocol):
    """A pod source: sends ``SET`` updates into its channel until cancelled or stopped."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


class PodConfig:
    """Merges the pod sources into one ordered stream of incremental ``PodUpdate``s.

    It also owns the sources registered with ``add_source``, so that whoever
    starts the pod config (``start_kubelet``) starts every source with it.
    """

    def __init__(self, node_name: str = "") -> None:
        self._node_name = node_name
        self._channels: dict[str, asyncio.Queue[PodUpdate]] = {}
        self._updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
        self._pods: dict[str, dict[str, V1Pod]] = {}
        self._sources_seen: set[str] = set()
        self._listeners: dict[str, asyncio.Task[None]] = {}
        self._running = False
        self._stopped = asyncio.Event()
        self._sources: list[PodSource] = []

    # --- the public surface ----------------------------------------------------------------------

    def channel(self, source: str) -> asyncio.Queue[PodUpdate]:
        """The queue a source writes its updates to (created and registered on first use)."""
        queue = self._channels.get(source)
        if queue is None:
            queue = asyncio.Queue()
            self._channels[source] = queue
            if self._running:
                self._listen(source)
        return queue

    def add_source(self, source: PodSource) -> None:
        """Register a source (already given its ``channel``) to be started with the config."""
        self._sources.append(source)

    def pod_sources(self) -> list[PodSource]:
        return list(self._sources)

    @property
    def node_name(self) -> str:
        return self._node_name

    def updates(self) -> asyncio.Queue[PodUpdate]:
        """The merged, ordered stream the sync loop consumes."""
        return self._updates

    def sources(self) -> frozenset[str]:
        return frozenset(self._channels)

    def sources_seen(self) -> frozenset[str]:
        """The sources that have sent at least one ``SET``."""
        return frozenset(self._sources_seen)

    def sources_ready(self) -> bool:
        """Every registered source has reported its full set of pods at least once."""
        return self._sources_seen.issuperset(self._channels)

    def seen_all_sources(self, seen: Iterable[str]) -> bool:
        """Upstream's check: the caller's ``seen`` covers every source, and each sent a SET."""
        return set(seen).issuperset(self._channels) and self.sources_ready()

    def merged_state(self) -> list[V1Pod]:
        """Copies of every pod currently known, from every source."""
        return [clone(p) for pods in self._pods.values() for p in pods.values()]

    def sync(self) -> None:
        """Send the whole known state as one ``SET`` from ``*`` (a full resync request)."""
        self._updates.put_nowait(PodUpdate(self.merged_state(), PodOperation.SET, ALL_SOURCES))

    async def run(self) -> None:
        """Merge every channel into ``updates()`` until cancelled or ``stop()``."""
        self._running = True
        self._stopped.clear()
        for source in self._channels:
            self._listen(source)
        try:
            await self._stopped.wait()
        finally:
            self.stop()

    def stop(self) -> None:
        self._running = False
        self._stopped.set()
        for task in self._listeners.values():
            task.cancel()
        self._listeners.clear()

    # --- merging ---------------------------------------------------------------------------------

    def _listen(self, source: str) -> None:
        if source not in self._listeners:
            self._listeners[source] = asyncio.get_running_loop().create_task(
                self._consume(source), name=f"podconfig-{source}")

    async def _consume(self, source: str) -> None:
        queue = self._channels[source]
        while True:
            update = await queue.get()
            try:
                self.merge(source, update)
            except Exception as err:  # one bad update must not stop merging this source
                klog.error("Failed to merge pod update", err, source=source, op=str(update.op))

    def merge(self, source: str, update: PodUpdate) -> list[PodUpdate]:
        """Fold one source update into the state; emit and return the notifications."""
        seen_before = source in self._sources_seen
        changes = self._merge(source, update)
        first_set = not seen_before and source in self._sources_seen
        adds = changes[PodOperation.ADD]
        emitted = [changes[op] for op in (PodOperation.REMOVE, PodOperation.ADD,
                                          PodOperation.UPDATE, PodOperation.DELETE)
                   if changes[op].pods]
        if first_set and not (adds.pods or changes[PodOperation.UPDATE].pods
                              or changes[PodOperation.DELETE].pods):
            emitted.append(adds)
        if changes[PodOperation.RECONCILE].pods:
            emitted.append(changes[PodOperation.RECONCILE])
        for notification in emitted:
            self._updates.put_nowait(notification)
        return emitted

    def _merge(self, source: str, update: PodUpdate) -> dict[PodOperation, PodUpdate]:
        found: dict[PodOperation, list[V1Pod]] = {op: [] for op in PodOperation}
        stored = self._pods.get(source, {})

        def fold_in(pods: list[V1Pod], previous: dict[str, V1Pod],
                    result: dict[str, V1Pod]) -> None:
            for candidate in self._filter_invalid(pods, source):
                meta = candidate.metadata
                assert meta is not None
                meta.annotations = {**(meta.annotations or {}),
                                    CONFIG_SOURCE_ANNOTATION_KEY: source}
                uid = pod_uid(candidate)
                existing = previous.get(uid)
                if existing is not None:
                    result[uid] = existing
                    change = check_and_update_pod(existing, candidate)
                    if change is not None:
                        found[change].append(existing)
                    continue
                if CONFIG_FIRST_SEEN_ANNOTATION_KEY not in meta.annotations:
                    meta.annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY] = rfc3339_nano(
                        time.time_ns())
                klog.v(4).info("Receiving a new pod", pod=pod_full_name(candidate), source=source)
                result[uid] = candidate
                found[PodOperation.ADD].append(candidate)

        incoming = (list(update.pods)
                    if source in HANDED_OVER_SOURCES or update.op == PodOperation.REMOVE
                    else [clone(p) for p in update.pods])
        if update.op in (PodOperation.ADD, PodOperation.UPDATE, PodOperation.DELETE):
            klog.v(4).info("Updating pods from source", source=source, op=update.op.name,
                           count=len(incoming))
            fold_in(incoming, stored, stored)
        elif update.op == PodOperation.REMOVE:
            klog.v(4).info("Removing pods from source", source=source, count=len(incoming))
            for pod in incoming:
                gone = stored.pop(pod_uid(pod), None)
                if gone is not None:
                    found[PodOperation.REMOVE].append(gone)
        elif update.op == PodOperation.SET:
            klog.v(4).info("Setting pods for source", source=source, count=len(incoming))
            self._sources_seen.add(source)
            fresh: dict[str, V1Pod] = {}
            fold_in(incoming, stored, fresh)
            found[PodOperation.REMOVE].extend(p for uid, p in stored.items() if uid not in fresh)
            stored = fresh
        else:
            klog.warning("Received invalid update type", source=source, op=str(update.op))
        self._pods[source] = stored
        return {op: PodUpdate([clone(p) for p in pods], op, source)
                for op, pods in found.items()}

    def _filter_invalid(self, pods: list[V1Pod], source: str) -> list[V1Pod]:
        names_here: set[str] = set()
        kept = []
        for index, pod in enumerate(pods):
            full_name = pod_full_name(pod)
            errors = _name_errors(pod)
            if errors:
                klog.warning("Pod failed validation, ignoring", index=index, pod=full_name,
                             source=source, err="; ".join(errors))
                continue
            if full_name in names_here:
                klog.warning("Pod failed validation due to duplicate pod name, ignoring",
                             index=index, pod=full_name, source=source)
                continue
            owner = None if is_mirror_pod(pod) else self._other_source_with(full_name, source)
            if owner is not None:
                klog.warning("Pod has the same full name as a pod from another source, ignoring",
                             pod=full_name, source=source, existingSource=owner)
                continue
            names_here.add(full_name)
            kept.append(pod)
        return kept

    def _other_source_with(self, full_name: str, source: str) -> str | None:
        for other, pods in self._pods.items():
            if other == source:
                continue
            if any(pod_full_name(p) == full_name and not is_mirror_pod(p)
                   for p in pods.values()):
                return other
        return None


__all__ = ["LOCAL_ANNOTATIONS", "PodConfig", "check_and_update_pod",
           "pods_differ_semantically"]
