"""One kubelet's turn in a round of ``bench/peer.py``, standalone or as a node.

Both parts start each kubelet on a fresh root directory with the same
settings, measure it, then stop it and leave the runtime and the host as they
were before the next one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.harness import API_CLIENT_CONFIG, KUBELET_CONFIG, remove_all_sandboxes
from bench.peer_figures import GO
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.kuberuntime.container import MINIMUM_GRACE_PERIOD_SECONDS
from testsupport.go_kubelet import GoKubeletProcess
from testsupport.kubelet_process import KubeletProcess

PY_NODE = "peer-py"
GO_NODE = "peer-go"


# Both kubelets' configuration: the same API client limits (unused standalone).
NODE_CONFIG: dict[str, Any] = {**KUBELET_CONFIG, **API_CLIENT_CONFIG}


def new_kubelet(side: str, base: Path, endpoint: str, binary: Path, node: str,
                args: Sequence[str]) -> KubeletProcess:
    """The kubelet of ``side`` (not started yet), on ``NODE_CONFIG`` and ``args``."""
    if side == GO:
        return GoKubeletProcess(base, endpoint, binary, node, NODE_CONFIG, list(args))
    return KubeletProcess(base, endpoint, extra_config=NODE_CONFIG, extra_args=list(args),
                          node_name=node)


def keep_log(kubelet: KubeletProcess, into: Path | None) -> None:
    """A copy of the kubelet's log, named after its work directory (``--keep-logs``)."""
    if into is not None and kubelet.log_file.exists():
        into.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kubelet.log_file, into / f"{kubelet.base.name}.log")


@contextlib.asynccontextmanager
async def kubelet_turn(kubelet: KubeletProcess, runtime: RemoteRuntimeService,
                       kubelet_holder: list[KubeletProcess], keep_logs: Path | None,
                       remove_logs: Callable[[], None]) -> AsyncIterator[KubeletProcess]:
    """The kubelet handed to clean-up, then, after the measurement: stopped, its log kept
    (``--keep-logs``), every sandbox removed, what it left on the host (the Go kubelet's
    cgroups) removed, and its pods' logs removed by ``remove_logs``."""
    kubelet_holder.append(kubelet)
    try:
        yield kubelet
    finally:
        await asyncio.to_thread(kubelet.stop)
        keep_log(kubelet, keep_logs)
        await remove_all_sandboxes(runtime)
        remove = getattr(kubelet, "remove_leftovers", None)
        if remove is not None:
            await asyncio.to_thread(remove)
        remove_logs()


def killed_early(exited: dict[str, float], deleted_at: float) -> int:
    """How many pods had no running container before a grace period of the minimum
    could have run out after ``deleted_at``."""
    return sum(1 for at in exited.values() if at - deleted_at < MINIMUM_GRACE_PERIOD_SECONDS)
