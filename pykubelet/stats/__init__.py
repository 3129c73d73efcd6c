"""Resource usage of the node, its pods and containers (upstream ``pkg/kubelet/stats``).

``StatsProvider`` builds the summary API document (``/stats/summary``) from
CRI stats and the node's cgroups, ``/proc`` and filesystems (``node``);
``collectors`` turns it into the ``/metrics/resource`` and
``/metrics/cadvisor`` series that metrics-server and dashboards scrape.
"""

from pykubelet.stats.collectors import cadvisor_metrics, resource_metrics
from pykubelet.stats.provider import StatsProvider

__all__ = ["StatsProvider", "cadvisor_metrics", "resource_metrics"]
