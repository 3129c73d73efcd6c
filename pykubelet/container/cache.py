"""The pod status cache (upstream ``kubecontainer.Cache``).

PLEG is the only writer in normal operation: after every relist it stores the
fresh ``PodStatus`` of each pod that changed and then stamps the whole cache
with the relist start time (``update_time``), which promises that *every*
entry, changed or not, reflects the runtime as of that moment. Pod workers
read through ``get_newer_than`` so that a sync never acts on runtime state
older than the end of the previous sync: without that wait a worker could
restart a container it has just started because the cache had not caught up.

Timestamps are plain floats from whatever clock the writer and the readers
share; pykubelet uses ``time.monotonic`` everywhere (see ``pleg.generic``).
A pod the runtime does not know is not an error: ``get`` answers an empty
``PodStatus`` carrying only the UID, which is what "no containers" looks like.

A reader that must not wait a whole relist period (a pod worker moving a pod
to terminating: the user is waiting for the kill) asks for a refresh; the
writer registers what that does (``set_refresher``: the PLEG relists at once).
This is the latency upstream's pod worker loop notes as a to-do (about a
second on every sync -> terminating -> terminated transition). A reader that
has just changed the runtime can ask for that refresh without waiting on it
(``request_refresh``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from pykubelet import metrics
from pykubelet.container import PodStatus


@dataclass
class _Entry:
    status: PodStatus | None
    error: BaseException | None
    modified: float


@dataclass
class _Waiter:
    min_time: float
    future: asyncio.Future[_Entry]


class PodCache:
    """Pod UID -> latest runtime status, with blocking reads for "newer than" a time."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        # None until the first relist: before that nothing in the cache may be
        # trusted to be complete, so readers that need freshness must wait.
        self._global_timestamp: float | None = None
        self._waiters: dict[str, list[_Waiter]] = {}
        self._refresher: Callable[[], None] | None = None
        metrics.track_table("pod_cache", self.tracked_pods)

    def tracked_pods(self) -> int:
        """Pods in the runtime pod cache (the ``pykubelet_tracked_pods`` gauge: leak checks)."""
        return len(self._entries)

    def set_refresher(self, refresher: Callable[[], None] | None) -> None:
        """What ``get_newer_than(..., refresh=True)`` calls when it has to wait."""
        self._refresher = refresher

    def request_refresh(self) -> None:
        """Ask the writer for a fresh look at the runtime now, without waiting for it."""
        if self._refresher is not None:
            self._refresher()

    @property
    def timestamp(self) -> float | None:
        """How fresh the whole cache is: the start time of the last completed relist."""
        return self._global_timestamp

    def get(self, uid: str) -> tuple[PodStatus | None, BaseException | None]:
        """The cached status (or inspection error) of ``uid``; never blocks.

        Callers must treat the returned status as read-only: it is shared.
        """
        entry = self._lookup(uid)
        return entry.status, entry.error

    def get_all(self) -> list[PodStatus]:
        return [e.status for e in self._entries.values() if e.status is not None]

    async def get_newer_than(
        self, uid: str, min_time: float, *, refresh: bool = False
    ) -> tuple[PodStatus | None, BaseException | None]:
        """Wait until the entry for ``uid`` is known to be newer than ``min_time``.

        That happens when the entry itself was written after ``min_time`` or
        when a relist that started after ``min_time`` has completed. With
        ``refresh``, a reader that has to wait asks the writer to refresh now.
        """
        ready = self._get_if_newer_than(uid, min_time)
        if ready is not None:
            return ready.status, ready.error
        loop = asyncio.get_running_loop()
        waiter = _Waiter(min_time, loop.create_future())
        self._waiters.setdefault(uid, []).append(waiter)
        if refresh:
            self.request_refresh()  # after subscribing: a refresh may complete before we await
        try:
            entry = await waiter.future
        finally:
            # A reader that gave up (cancelled) must not stay subscribed.
            self._discard_waiter(uid, waiter)
        return entry.status, entry.error

    def set(self, uid: str, status: PodStatus | None, err: BaseException | None,
            timestamp: float) -> bool:
        """Store what the runtime said about ``uid`` at ``timestamp``.

        Returns False, changing nothing, when the cache already holds data
        read after ``timestamp``: two writers racing must not let the slower
        one overwrite a newer observation with an older one.
        """
        current = self._entries.get(uid)
        if current is not None and current.modified > timestamp:
            return False
        self._entries[uid] = _Entry(status, err, timestamp)
        self._notify(uid, timestamp)
        return True

    def delete(self, uid: str) -> None:
        self._entries.pop(uid, None)

    def update_time(self, timestamp: float) -> None:
        """Declare every entry fresh as of ``timestamp`` and wake readers waiting for it."""
        self._global_timestamp = timestamp
        for uid in list(self._waiters):
            self._notify(uid, timestamp)

    def _lookup(self, uid: str) -> _Entry:
        entry = self._entries.get(uid)
        if entry is None:
            return _Entry(PodStatus(id=uid), None, -math.inf)
        return entry

    def _get_if_newer_than(self, uid: str, min_time: float) -> _Entry | None:
        entry = self._entries.get(uid)
        globally_fresh = self._global_timestamp is not None and self._global_timestamp > min_time
        if entry is None:
            return self._lookup(uid) if globally_fresh else None
        if entry.modified > min_time or globally_fresh:
            return entry
        return None

    def _notify(self, uid: str, timestamp: float) -> None:
        waiters = self._waiters.get(uid)
        if not waiters:
            return
        still_waiting: list[_Waiter] = []
        for waiter in waiters:
            if timestamp < waiter.min_time:
                still_waiting.append(waiter)
            elif not waiter.future.done():
                waiter.future.set_result(self._lookup(uid))
        if still_waiting:
            self._waiters[uid] = still_waiting
        else:
            del self._waiters[uid]

    def _discard_waiter(self, uid: str, waiter: _Waiter) -> None:
        waiters = self._waiters.get(uid)
        if waiters is None:
            return
        remaining = [w for w in waiters if w is not waiter]
        if remaining:
            self._waiters[uid] = remaining
        else:
            del self._waiters[uid]
