"""prober: container probes (upstream ``pkg/kubelet/prober``).

``Prober`` (``prober.py``) runs one liveness, readiness or startup probe of a
container and records ``Unhealthy`` events; ``ProbeManager`` (``manager.py``)
runs one worker per container and probe type and keeps the verdicts in
``ResultsManager`` instances (``results.py``) that the runtime manager and the
status manager read. The protocol-level checks live in ``pykubelet.probe``.

The exports are resolved on first use so that importing ``prober.prober``
for its constants does not pull in the workers, and the other way round.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pykubelet.prober.manager import ProbeManager
    from pykubelet.prober.prober import Prober
    from pykubelet.prober.results import ResultsManager, ResultUpdate

_EXPORTS = {
    "Prober": "pykubelet.prober.prober",
    "ProbeManager": "pykubelet.prober.manager",
    "ResultsManager": "pykubelet.prober.results",
    "ResultUpdate": "pykubelet.prober.results",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["ProbeManager", "Prober", "ResultUpdate", "ResultsManager"]
