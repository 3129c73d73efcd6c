"""Pod status: computing a pod's API status from the runtime and keeping the latest one.

``generate`` turns the runtime's view of a pod (``container.PodStatus``) plus
remembered start failures (``reason_cache``) into a ``V1PodStatus``: phase,
conditions and per-container states, as the Go kubelet reports them.
``manager`` is the single place where those statuses are recorded, so that the
invariants users rely on (terminal phases are final, times stay put) hold no
matter which subsystem writes.
"""

from pykubelet.status.generate import generate_api_pod_status, get_phase
from pykubelet.status.manager import StatusManager, StatusSink
from pykubelet.status.reason_cache import ReasonCache, ReasonInfo

__all__ = [
    "ReasonCache",
    "ReasonInfo",
    "StatusManager",
    "StatusSink",
    "generate_api_pod_status",
    "get_phase",
]
