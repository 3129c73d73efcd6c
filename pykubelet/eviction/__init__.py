"""The eviction manager (upstream ``pkg/kubelet/eviction``): signals, pressure, evictions.

``signals`` observes what the node has left and what pods use; ``manager``
decides when thresholds are met, reports the node conditions, reclaims and
evicts, and answers admission under pressure.
"""

from pykubelet.eviction.manager import (
    DISK_PRESSURE,
    MEMORY_PRESSURE,
    PID_PRESSURE,
    REASON,
    ConditionReport,
    EvictionConfig,
    EvictionManager,
    NodeReclaimer,
    PressureConditions,
)
from pykubelet.eviction.signals import Observation, PodUsage, SignalSources, observe, pod_usage

__all__ = [
    "DISK_PRESSURE",
    "MEMORY_PRESSURE",
    "PID_PRESSURE",
    "REASON",
    "ConditionReport",
    "EvictionConfig",
    "EvictionManager",
    "NodeReclaimer",
    "Observation",
    "PodUsage",
    "PressureConditions",
    "SignalSources",
    "observe",
    "pod_usage",
]
