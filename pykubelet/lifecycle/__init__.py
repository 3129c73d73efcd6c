"""lifecycle: container lifecycle hooks (upstream ``pkg/kubelet/lifecycle``).

``HandlerRunner`` (``handlers.py``) runs postStart and preStop handlers
(exec, httpGet, sleep); the runtime manager decides when and what a failure
means. Pod admission handlers, which upstream also keeps in this package,
are not implemented here. ``interfaces.py`` holds what internal modules may
ask of a pod between its syncs (``PodSyncLoopHandler``, ``PodSyncHandler``:
the active deadline).
"""

from __future__ import annotations

from pykubelet.lifecycle.handlers import HandlerRunner, LifecycleHookError

__all__ = ["HandlerRunner", "LifecycleHookError"]
