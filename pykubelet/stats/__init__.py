"""Resource usage of the node, its pods and containers (upstream ``pkg/kubelet/stats``).

``StatsProvider`` builds the summary API document (``/stats/summary``) from
CRI stats and the node's cgroups, ``/proc`` and filesystems (``node``);
``collectors`` turns it into the ``/metrics/resource`` and
``/metrics/cadvisor`` series that metrics-server and dashboards scrape;
``fs`` measures the node and image filesystems that eviction and image
garbage collection read.
"""

from pykubelet.stats.collectors import cadvisor_metrics, resource_metrics
from pykubelet.stats.fs import FsStats, ImageFsStatsProvider, fs_stats
from pykubelet.stats.provider import StatsProvider

__all__ = ["FsStats", "ImageFsStatsProvider", "StatsProvider", "cadvisor_metrics", "fs_stats",
           "resource_metrics"]
