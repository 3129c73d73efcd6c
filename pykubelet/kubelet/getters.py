"""Where the kubelet keeps things under ``--root-dir`` (upstream ``kubelet_getters.go``).

Pod directories are created by the pod sync, read by volumes, and removed by
housekeeping; each of those finds them through these functions, so the layout
has one definition: ``<root>/pods/<uid>/{volumes,plugins,containers}`` and
``<root>/plugins``.
"""

from __future__ import annotations

import os

POD_SUBDIRECTORIES = ("volumes", "plugins", "containers")


def pods_dir(root_dir: str) -> str:
    return os.path.join(root_dir, "pods")


def pod_dir(root_dir: str, uid: str) -> str:
    return os.path.join(pods_dir(root_dir), uid)


def plugins_dir(root_dir: str) -> str:
    return os.path.join(root_dir, "plugins")


class RootDirs:
    """The layout of one ``--root-dir``, for subsystems handed it (the volume manager)."""

    def __init__(self, root_dir: str) -> None:
        self.root_dir = root_dir

    def pods_dir(self) -> str:
        return pods_dir(self.root_dir)

    def pod_dir(self, uid: str) -> str:
        return pod_dir(self.root_dir, uid)


__all__ = ["POD_SUBDIRECTORIES", "RootDirs", "plugins_dir", "pod_dir", "pods_dir"]
