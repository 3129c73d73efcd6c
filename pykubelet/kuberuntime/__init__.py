"""kuberuntime: turns pod specs into CRI calls (sandboxes, containers, images, logs).

``KubeGenericRuntimeManager`` is the ``container.Runtime`` the kubelet uses;
``compute_pod_actions`` is its pure decision of what one pod sync must do.

The exports are resolved on first use: importing a building block such as
``kuberuntime.labels`` must not pull in the manager and the gRPC client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pykubelet.kuberuntime.actions import compute_pod_actions
    from pykubelet.kuberuntime.manager import KubeGenericRuntimeManager, RuntimeManagerOptions

_EXPORTS = {
    "KubeGenericRuntimeManager": "pykubelet.kuberuntime.manager",
    "RuntimeManagerOptions": "pykubelet.kuberuntime.manager",
    "compute_pod_actions": "pykubelet.kuberuntime.actions",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["KubeGenericRuntimeManager", "RuntimeManagerOptions", "compute_pod_actions"]
