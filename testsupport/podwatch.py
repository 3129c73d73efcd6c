"""Pods of a namespace as a user watching the API sees them start and go.

Benchmarks and the cluster tests time "created -> Running in the API" and wait for
deleted pods to be gone through one admin list+watch (``ApiRunningWatcher``), so a
figure includes the kubelet's status write and the watch delivery, as ``kubectl get
-w`` would see them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Sequence

from kubernetes_asyncio import client

from pykubelet.util.reflector import ApiListWatch, WatchEvent
from testsupport.kubelet_process import KubeletProcess
from testsupport.polling import WaitTimeout

# How long a pod may take to be Running before a wait gives up.
START_TIMEOUT_SECONDS = 120.0


class ApiRunningWatcher:
    """When each pod of the namespace was first seen with ``phase: Running``, when its
    deletion was seen, and every IP the API gave one of them (an admin list+watch; times
    are taken as the events arrive)."""

    def __init__(self, api: client.CoreV1Api, namespace: str) -> None:
        self._lw = ApiListWatch(functools.partial(api.list_namespaced_pod, namespace))
        self.first_running: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.pod_ips: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        _, version = await self._lw.list("")
        self._ready.set()
        while True:
            async for event in self._lw.watch(version, 600):
                version = self._observe(event) or version

    def _observe(self, event: WatchEvent) -> str:
        obj = event.object
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        ip = (obj.get("status") or {}).get("podIP")
        if ip:
            self.pod_ips.add(str(ip))
        if event.type == "DELETED":
            self.gone.setdefault(name, time.monotonic())
        elif (obj.get("status") or {}).get("phase") == "Running":
            self.first_running.setdefault(name, time.monotonic())
        self._changed.set()
        return str(meta.get("resourceVersion") or "")

    async def _next_change(self) -> None:
        """Until the next event (or half a second, to look at the kubelet and the watch).

        Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation (Ctrl-C)
        that arrives as the event is set, and with events every few milliseconds
        that happens often.
        """
        self._changed.clear()
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({changed}, timeout=0.5)
        finally:
            changed.cancel()

    async def wait(self, names: Sequence[str], kubelet: KubeletProcess,
                   timeout: float = START_TIMEOUT_SECONDS) -> list[float]:
        deadline = time.monotonic() + timeout
        while not all(n in self.first_running for n in names):
            if self._task is not None and self._task.done():
                self._task.result()
            if kubelet.process is not None and kubelet.process.poll() is not None:
                raise WaitTimeout(f"the kubelet exited: {kubelet.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                missing = [n for n in names if n not in self.first_running]
                raise WaitTimeout(f"not Running in the API after {timeout:g}s: {missing[:5]}")
            await self._next_change()
        return [self.first_running[n] for n in names]

    async def wait_gone(self, names: Sequence[str], timeout: float = 60) -> list[float]:
        deadline = time.monotonic() + timeout
        while not all(n in self.gone for n in names):
            if self._task is not None and self._task.done():
                self._task.result()
            if time.monotonic() > deadline:
                raise WaitTimeout(f"pods not deleted after {timeout:g}s")
            await self._next_change()
        return [self.gone[n] for n in names]
