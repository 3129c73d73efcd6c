"""Supervised long-running tasks: nothing in the kubelet dies silently.

The Go kubelet runs its loops as goroutines under ``wait.Until``: a loop that
returns or fails is logged and started again after its period, and a few
(the sync loop, the servers) end the process when they fail. An asyncio task
that raises instead just stores its exception until someone awaits it, which
for a background loop means never: the loop stops, nothing is logged, and the
kubelet looks alive while, say, PLEG no longer relists.

This module gives every long-running task one of two fates:

- ``restart=True``: the crash is logged at once with its traceback and the
  task is started again after an exponential back-off (1 s doubling to 30 s,
  reset after it ran healthily for a minute), as upstream keeps going;
- ``restart=False``: the crash is logged at once and the supervisor records it
  as fatal, which stops the kubelet with a non-zero exit status.

A task that returns normally has finished its work and is not restarted.
Dynamic tasks (one per pod worker or probe worker) use ``keep_running`` for
the same crash-and-restart behaviour without a supervisor of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pykubelet.util import klog

TaskFactory = Callable[[], Coroutine[Any, Any, Any]]

RESTART_BACKOFF_INITIAL = 1.0
RESTART_BACKOFF_MAX = 30.0
# A task that ran this long before crashing starts its back-off over.
HEALTHY_RUN_RESETS_BACKOFF = 60.0


async def keep_running(name: str, factory: TaskFactory, *,
                       initial: float = RESTART_BACKOFF_INITIAL,
                       maximum: float = RESTART_BACKOFF_MAX,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Run ``factory()`` until it returns; after each crash log it and start it again.

    ``clock`` and ``sleep`` are a test seam (a fake clock); production keeps the defaults.
    """
    delay = initial
    while True:
        started = clock()
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if clock() - started >= HEALTHY_RUN_RESETS_BACKOFF:
                delay = initial
            klog.exception("Task crashed; restarting it after back-off", err, task=name,
                           backoff=f"{delay:g}s")
            await sleep(delay)
            delay = min(maximum, delay * 2)


@dataclass
class _Supervised:
    name: str
    task: asyncio.Task[Any]
    restart: bool


class FatalTaskError(RuntimeError):
    """A task that must not fail did; the kubelet stops with this error."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"{name}: {cause}")
        self.name = name
        self.cause = cause


class Supervisor:
    """Owns the kubelet's long-running tasks, from start to an orderly stop.

    ``sleep`` (the restart back-off's wait) is a test seam; production keeps ``asyncio.sleep``.
    """

    def __init__(self, *, backoff_initial: float = RESTART_BACKOFF_INITIAL,
                 backoff_max: float = RESTART_BACKOFF_MAX,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._sleep = sleep
        self._tasks: list[_Supervised] = []
        self._fatal: FatalTaskError | None = None
        self._failed = asyncio.Event()

    @property
    def fatal_error(self) -> FatalTaskError | None:
        return self._fatal

    def names(self) -> list[str]:
        """The supervised tasks still running, in start order."""
        return [s.name for s in self._tasks if not s.task.done()]

    def spawn(self, name: str, factory: TaskFactory, *, restart: bool = True) -> asyncio.Task[Any]:
        """Start ``factory()`` as a supervised task; see the module docstring for ``restart``."""
        if restart:
            work = keep_running(name, factory, initial=self._backoff_initial,
                                maximum=self._backoff_max, sleep=self._sleep)
        else:
            work = self._fatal_on_crash(name, factory)
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.append(_Supervised(name, task, restart))
        return task

    async def _fatal_on_crash(self, name: str, factory: TaskFactory) -> None:
        try:
            await factory()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            klog.exception("Task failed; stopping the kubelet", err, task=name)
            if self._fatal is None:
                self._fatal = FatalTaskError(name, err)
            self._failed.set()

    async def wait(self, stopping: asyncio.Event) -> FatalTaskError | None:
        """Return when ``stopping`` is set (None) or a fatal task failed (its error)."""
        stop_wait = asyncio.ensure_future(stopping.wait())
        fail_wait = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({stop_wait, fail_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            fail_wait.cancel()
        return self._fatal

    async def shutdown(self) -> None:
        """Cancel every task, the last started first, and wait until each has ended."""
        for supervised in reversed(self._tasks):
            supervised.task.cancel()
        for supervised in reversed(self._tasks):
            try:
                await supervised.task
            except asyncio.CancelledError:
                pass
            except Exception as err:  # already logged by the wrapper; never hide a late one
                klog.error("Task failed while stopping", err, task=supervised.name)
        self._tasks.clear()


__all__ = ["FatalTaskError", "Supervisor", "TaskFactory", "keep_running"]
