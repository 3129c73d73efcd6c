"""Pod volumes: mounted before containers start, torn down after (upstream ``volumemanager``).

A container must never start without the volumes its pod declares: an app
that expects its service-account token, config or data directory and finds
an empty path misbehaves in ways far worse than not starting. The volume
manager keeps upstream's three parts:

- desired state of the world: the pods whose volumes must be there (every
  pod the pod workers sync, until its containers have stopped for good);
- actual state of the world: what is set up on disk, per pod and volume,
  rebuilt from ``<root>/pods/<uid>/volumes/<plugin>/<name>`` after a restart;
- the reconciler (a supervised loop): tears down the volumes of pods that
  are no longer wanted (terminated, or gone after a restart), unmounting
  their tmpfs first, once the pod sources have all been seen.

``wait_for_attach_and_mount`` is called by every pod sync before containers
start. It sets up the volumes not there yet and refreshes the content of the
others (ConfigMap, Secret, downwardAPI and projected volumes: their updates
reach running pods within a sync period). A volume that cannot be set up
produces a ``FailedMount`` Warning event (upstream's ``MountVolume.SetUp failed
for volume "x" : configmap "y" not found``) and the sync fails, so the pod stays
in ``ContainerCreating`` and is retried; a refresh failure of a volume already
set up is reported the same way but does not stop a running pod.

``mounts_for`` turns a container's ``volumeMounts`` into CRI mounts:
``readOnly``, ``mountPropagation``, and ``subPath``/``subPathExpr`` resolved
inside the volume (absolute paths, ``..`` and symlinks leading out of the
volume are refused with a clear error, never followed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod, V1VolumeMount

from pykubelet.api import pod_ref, pod_uid
from pykubelet.api.expansion import expand
from pykubelet.events import WARNING, EventRecorder
from pykubelet.util import klog
from pykubelet.volumemanager.mount import mount_points_under, unmount
from pykubelet.volumemanager.plugins import (
    VolumeError,
    VolumeSources,
    plugin_dir_name,
    set_up,
    volume_type,
)

FAILED_MOUNT = "FailedMount"
RECONCILE_PERIOD = 2.0
PROPAGATION = {
    None: api_pb2.MountPropagation.PROPAGATION_PRIVATE,
    "None": api_pb2.MountPropagation.PROPAGATION_PRIVATE,
    "HostToContainer": api_pb2.MountPropagation.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": api_pb2.MountPropagation.PROPAGATION_BIDIRECTIONAL,
}


class VolumeMountError(Exception):
    """The pod's volumes are not (all) set up; its containers must not start."""


class MountPrepareError(ValueError):
    """A container's volumeMounts cannot be made (shown as CreateContainerConfigError)."""


class SubPathError(ValueError):
    """A ``subPath`` that would leave its volume, or that cannot be prepared."""


@dataclass
class MountedVolume:
    name: str
    plugin: str
    path: str        # what containers mount (the host path itself for hostPath)
    read_only: bool = False


class PodDirs(Protocol):
    """Where the kubelet keeps pod directories (its ``getters``, handed down)."""

    def pods_dir(self) -> str: ...

    def pod_dir(self, uid: str) -> str: ...


def volumes_dir(dirs: PodDirs, uid: str) -> str:
    return os.path.join(dirs.pod_dir(uid), "volumes")


def resolve_subpath(volume_path: str, sub_path: str) -> str:
    """The host path of ``sub_path`` inside ``volume_path``, created as directories if missing."""
    if os.path.isabs(sub_path):
        raise SubPathError(f"error SubPath `{sub_path}` must not be an absolute path")
    parts = [p for p in sub_path.split("/") if p not in ("", ".")]
    if ".." in sub_path.split("/"):
        raise SubPathError(f"unable to provision SubPath `{sub_path}`: must not contain '..'")
    base = os.path.realpath(volume_path)
    mode = os.stat(base).st_mode & 0o7777
    current = base
    for part in parts:
        candidate = os.path.join(current, part)
        if not os.path.lexists(candidate):
            os.mkdir(candidate, mode)
            current = candidate
            continue
        real = os.path.realpath(candidate)
        if real != base and not real.startswith(base + os.sep):
            raise SubPathError(f"subpath {sub_path!r} resolves to {real!r}, outside the "
                               f"volume path {volume_path!r}")
        current = real
    return current


class VolumeManager:
    def __init__(self, dirs: PodDirs, recorder: EventRecorder,
                 sources: VolumeSources | None = None, *,
                 pod_runtime_removed: Callable[[str], bool] = lambda uid: False,
                 sources_ready: Callable[[], bool] = lambda: True,
                 torn_down: Sequence[Callable[[str], None]] = (),
                 reconcile_period: float = RECONCILE_PERIOD) -> None:
        """``torn_down`` is called with a pod's UID once its volumes are all unmounted
        (the token manager forgets the pod's tokens)."""
        self._dirs = dirs
        self._recorder = recorder
        self._sources = sources
        self._pod_runtime_removed = pod_runtime_removed
        self._sources_ready = sources_ready
        self._period = reconcile_period
        self._desired: dict[str, V1Pod] = {}
        self._actual: dict[str, dict[str, MountedVolume]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._reconstructed = False
        self._torn_down = tuple(torn_down)

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._locks.setdefault(uid, asyncio.Lock())

    # -- the pod sync's side -----------------------------------------------------------

    async def wait_for_attach_and_mount(self, pod: V1Pod) -> None:
        """Set up (or refresh) every volume of ``pod``; raise ``VolumeMountError`` if one fails."""
        uid = pod_uid(pod)
        self._desired[uid] = pod
        volumes = list(pod.spec.volumes or [])
        failed: list[tuple[str, str]] = []
        async with self._lock(uid):
            mounted = self._actual.setdefault(uid, {})
            for volume in volumes:
                plugin = plugin_dir_name(volume)
                path = os.path.join(volumes_dir(self._dirs, uid), plugin or "", volume.name)
                try:
                    if plugin is None:
                        raise VolumeError(f'volume "{volume.name}" has type '
                                          f"{volume_type(volume)}, which pykubelet cannot mount")
                    result = await set_up(pod, volume, path, self._sources)
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    message = (f'MountVolume.SetUp failed for volume "{volume.name}" : '
                               f"{_describe(err)}")
                    self._recorder.event(pod, WARNING, FAILED_MOUNT, message)
                    klog.error("MountVolume.SetUp failed", _describe(err), pod=pod_ref(pod),
                               volume=volume.name)
                    if volume.name not in mounted:
                        failed.append((volume.name, message))
                    continue
                if volume.name not in mounted:
                    klog.v(3).info("MountVolume.SetUp succeeded", pod=pod_ref(pod),
                                   volume=volume.name)
                mounted[volume.name] = MountedVolume(volume.name, plugin, result.path,
                                                     result.read_only)
        if failed:
            names = " ".join(name for name, _ in failed)
            everything = " ".join(v.name for v in volumes)
            raise VolumeMountError(
                f"unmounted volumes=[{names}], unattached volumes=[{everything}]: "
                + "; ".join(message for _, message in failed))

    def mounts_for(self, pod: V1Pod, container: V1Container,
                   env: Mapping[str, str]) -> list[api_pb2.Mount]:
        """The CRI mounts of ``container``'s ``volumeMounts`` (upstream ``makeMounts``)."""
        mounted = self._actual.get(pod_uid(pod), {})
        mounts: list[api_pb2.Mount] = []
        for volume_mount in container.volume_mounts or []:
            volume = mounted.get(volume_mount.name)
            if volume is None:
                raise MountPrepareError(
                    f"cannot find volume {volume_mount.name!r} to mount into container "
                    f"{container.name!r}")
            try:
                mounts.append(self._mount(container, volume_mount, volume, env))
            except (SubPathError, OSError) as err:
                raise MountPrepareError(
                    f"failed to prepare subPath for volumeMount {volume_mount.name!r} of "
                    f"container {container.name!r}: {err}") from err
        return mounts

    @staticmethod
    def _mount(container: V1Container, volume_mount: V1VolumeMount, volume: MountedVolume,
               env: Mapping[str, str]) -> api_pb2.Mount:
        host_path = volume.path
        sub_path = volume_mount.sub_path or ""
        if volume_mount.sub_path_expr:
            if sub_path:
                raise SubPathError("subpath and subPathExpr are mutually exclusive")
            sub_path = expand(volume_mount.sub_path_expr, env.get)
        if sub_path:
            host_path = resolve_subpath(volume.path, sub_path)
        propagation = PROPAGATION.get(volume_mount.mount_propagation)
        if propagation is None:
            raise SubPathError(f"invalid mountPropagation {volume_mount.mount_propagation!r}")
        privileged = bool(container.security_context and container.security_context.privileged)
        if propagation == api_pb2.MountPropagation.PROPAGATION_BIDIRECTIONAL and not privileged:
            raise SubPathError("Bidirectional mount propagation is available only to "
                               "privileged containers")
        return api_pb2.Mount(container_path=volume_mount.mount_path, host_path=host_path,
                             readonly=bool(volume_mount.read_only) or volume.read_only,
                             propagation=propagation)

    def pod_has_mounts(self, uid: str) -> bool:
        """Whether something is still mounted under ``uid``'s directory (it must stay)."""
        return bool(mount_points_under(self._dirs.pod_dir(uid)))

    def mounted_volumes(self, uid: str) -> dict[str, MountedVolume]:
        return dict(self._actual.get(uid, {}))

    # -- the reconciler -------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self.reconcile()
            await asyncio.sleep(self._period)

    async def reconcile(self) -> None:
        if not self._reconstructed:
            await asyncio.to_thread(self._reconstruct)
            self._reconstructed = True
        if not self._sources_ready():
            return  # a pod on disk may still be on its way from a source
        for uid in list(self._actual):
            if not self._pod_runtime_removed(uid):
                continue
            async with self._lock(uid):
                if not self._pod_runtime_removed(uid):
                    continue
                await asyncio.to_thread(self.tear_down_pod, uid)
                self._actual.pop(uid, None)
                self._desired.pop(uid, None)
                self._locks.pop(uid, None)
            for callback in self._torn_down:
                callback(uid)

    def _reconstruct(self) -> None:
        """Actual state from disk: volumes a previous kubelet left behind."""
        try:
            uids = os.listdir(self._dirs.pods_dir())
        except FileNotFoundError:
            return
        for uid in uids:
            base = volumes_dir(self._dirs, uid)
            try:
                plugins = os.listdir(base)
            except OSError:
                continue
            for plugin in plugins:
                try:
                    names = os.listdir(os.path.join(base, plugin))
                except OSError:
                    continue
                for name in names:
                    self._actual.setdefault(uid, {}).setdefault(name, MountedVolume(
                        name, plugin, os.path.join(base, plugin, name)))
            if uid in self._actual:
                klog.info("Reconstructed volumes of a pod from disk", podUID=uid,
                          volumes=sorted(self._actual[uid]))

    def tear_down_pod(self, uid: str) -> None:
        """Unmount and remove every volume directory of ``uid``."""
        base = volumes_dir(self._dirs, uid)
        if not os.path.isdir(base):
            return
        # Deepest first, so a mount inside another volume goes before its parent.
        for point in sorted(mount_points_under(base), key=len, reverse=True):
            try:
                unmount(point)
            except OSError as err:
                klog.error("UnmountVolume.TearDown failed", err, podUID=uid, path=point)
                return  # never delete files under a mount we could not remove
        for plugin in os.listdir(base):
            for name in os.listdir(os.path.join(base, plugin)):
                shutil.rmtree(os.path.join(base, plugin, name), ignore_errors=True)
                klog.info("UnmountVolume.TearDown succeeded", podUID=uid, volume=name,
                          plugin=plugin)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(base, plugin))


def _describe(err: BaseException) -> str:
    return str(err) or type(err).__name__


__all__ = ["FAILED_MOUNT", "MountPrepareError", "MountedVolume", "PodDirs", "SubPathError",
           "VolumeError", "VolumeManager", "VolumeMountError", "resolve_subpath", "volume_type",
           "volumes_dir"]
