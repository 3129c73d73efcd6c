"""Where container logs live on the node, in upstream's layout.

The runtime writes each container's output to a file the kubelet names in the
CRI configs: the sandbox gets a log directory, ``<podLogsDir>/<ns>_<name>_<uid>``,
and each container a path relative to it, ``<container>/<restartCount>.log``.
``kubectl logs``, log collectors (fluent-bit, promtail) and the log rotation
all rely on exactly this layout, so it is not configurable beyond the root.
"""

from __future__ import annotations

import os


def pod_logs_directory(pod_logs_dir: str, namespace: str, name: str, uid: str) -> str:
    return os.path.join(pod_logs_dir, f"{namespace}_{name}_{uid}")


def container_log_path(container_name: str, restart_count: int) -> str:
    """Relative to the sandbox's log directory, one file per container instance."""
    return os.path.join(container_name, f"{restart_count}.log")


def container_log_file(pod_logs_dir: str, namespace: str, name: str, uid: str,
                       container_name: str, restart_count: int) -> str:
    """The absolute path of one container instance's log file."""
    return os.path.join(pod_logs_directory(pod_logs_dir, namespace, name, uid),
                        container_log_path(container_name, restart_count))


__all__ = ["container_log_file", "container_log_path", "pod_logs_directory"]
