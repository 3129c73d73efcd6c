"""Pod lifecycle event generation (upstream ``pkg/kubelet/pleg``).

The sync loop learns about container changes it did not cause (a process
exiting, a container removed by hand) from a PLEG: a component that watches
the runtime and sends ``PodLifecycleEvent``s, and that keeps the pod status
cache fresh. ``PodLifecycleEventGenerator`` is what the kubelet depends on;
``GenericPLEG`` is the relisting implementation.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from pykubelet.container import PodLifecycleEvent
from pykubelet.pleg.generic import (
    DEFAULT_CHANNEL_CAPACITY,
    DEFAULT_RELIST_PERIOD,
    DEFAULT_RELIST_THRESHOLD,
    GenericPLEG,
    generate_events,
)


class PodLifecycleEventGenerator(Protocol):
    """What the sync loop and the health checks need from a PLEG."""

    def watch(self) -> asyncio.Queue[PodLifecycleEvent]: ...

    async def run(self) -> None:
        """Relist forever; the kubelet's supervisor runs it and cancels it on stop."""
        ...

    def healthy(self) -> tuple[bool, str]: ...


__all__ = [
    "DEFAULT_CHANNEL_CAPACITY",
    "DEFAULT_RELIST_PERIOD",
    "DEFAULT_RELIST_THRESHOLD",
    "GenericPLEG",
    "PodLifecycleEventGenerator",
    "generate_events",
]
