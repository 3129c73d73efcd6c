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
  their tmpfs first, once the pod sources have all been seen; a teardown
  that could not unmount is tried again next period.

The reconciler is the only one that unmounts. The kubelet's clean-up of
orphaned pod directories asks ``pod_dir_removal`` whether a gone pod's
directory may go, which it may only once the reconciler is done with it
(upstream's ``cleanupOrphanedPodDirs`` rule: no volume still counted, nothing
mounted, no volume directory with content). Both run in worker threads, one
at a time under one lock, and each takes a directory that vanished under it
as done.

``wait_for_attach_and_mount`` is called by every pod sync before containers
start. It sets up the volumes not there yet and refreshes the content of the
others (ConfigMap, Secret, downwardAPI and projected volumes: their updates
reach running pods within a sync period). A volume that cannot be set up
produces a ``FailedMount`` Warning event (upstream's ``MountVolume.SetUp failed
for volume "x" : configmap "y" not found``) and the sync fails, so the pod stays
in ``ContainerCreating`` and is retried; a refresh failure of a volume already
set up is reported the same way but does not stop a running pod. A
``persistentVolumeClaim`` volume is first resolved to its bound PV
(``persistent``): a claim not bound yet fails the sync with upstream's
``Unable to attach or mount volumes: ... PVC is not bound`` FailedMount event,
and once mounted it is not read again; teardown only unmounts a PV, whose
files are never the pod's to delete.

``mounts_for`` turns a container's ``volumeMounts`` into CRI mounts:
``readOnly``, ``mountPropagation``, and ``subPath``/``subPathExpr``. Absolute
paths and ``..`` are refused with upstream's messages; a subPath is never
handed to the runtime as a path string inside the volume, which a container
could swap for a symlink, but as a bind mount the kubelet made of the object
it checked (``subpath``), removed with the pod's volumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod, V1VolumeMount

from pykubelet.api import pod_ref, pod_uid
from pykubelet.api.expansion import expand
from pykubelet.events import WARNING, EventRecorder
from pykubelet.util import klog
from pykubelet.volumemanager.mount import mount_points_under, unmount
from pykubelet.volumemanager.persistent import (
    MOUNT_POINT_PLUGINS,
    ClaimNotReady,
    check_node_affinity,
    resolve_claim,
    set_up_persistent_volume,
)
from pykubelet.volumemanager.plugins import (
    VolumeError,
    VolumeSources,
    plugin_dir_name,
    set_up,
    volume_type,
)
from pykubelet.volumemanager.stats import DEFAULT_PERIOD as DEFAULT_STATS_PERIOD
from pykubelet.volumemanager.stats import VolumeStatsCache
from pykubelet.volumemanager.subpath import (
    SubPath,
    SubPathError,
    clean_sub_paths,
    prepare_safe_sub_path,
    validate_sub_path,
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


class VolumeManager:
    def __init__(self, dirs: PodDirs, recorder: EventRecorder,
                 sources: VolumeSources | None = None, *,
                 pod_runtime_removed: Callable[[str], bool] = lambda uid: False,
                 sources_ready: Callable[[], bool] = lambda: True,
                 torn_down: Sequence[Callable[[str], None]] = (),
                 reconcile_period: float = RECONCILE_PERIOD,
                 stats_period: float = DEFAULT_STATS_PERIOD,
                 prepare_sub_path: Callable[[SubPath], str] = prepare_safe_sub_path) -> None:
        """``torn_down`` is called with a pod's UID once its volumes are all unmounted
        (the token manager forgets the pod's tokens). ``stats_period`` is
        ``volumeStatsAggPeriod`` (``stats``; 0 measures nothing, as upstream's
        disabled calculator). ``prepare_sub_path`` is replaced by tests only, to
        check the subPath without mounting."""
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
        self._prepare_sub_path = prepare_sub_path
        self._stats_period = stats_period
        self._tear_down_lock = threading.Lock()
        # What /stats/summary and /metrics read; refreshed by ``run``.
        self.stats = VolumeStatsCache()

    def _lock(self, uid: str) -> asyncio.Lock:
        return self._locks.setdefault(uid, asyncio.Lock())

    # -- the pod sync's side -----------------------------------------------------------

    async def wait_for_attach_and_mount(self, pod: V1Pod) -> None:
        """Set up (or refresh) every volume of ``pod``; raise ``VolumeMountError`` if one fails."""
        uid = pod_uid(pod)
        self._desired[uid] = pod
        volumes = list(pod.spec.volumes or [])
        failed: list[tuple[str, str]] = []
        unprocessed: list[tuple[str, str]] = []
        base = volumes_dir(self._dirs, uid)
        async with self._lock(uid):
            mounted = self._actual.setdefault(uid, {})
            for volume in volumes:
                claim = volume.persistent_volume_claim is not None
                if claim and volume.name in mounted:
                    continue  # a bound claim's PV stays what it is for the pod's life
                spec_name = volume.name  # what events name: a claim's is its PV's name
                try:
                    if claim:
                        bound = await resolve_claim(pod, volume, self._sources)
                        plugin, spec_name = bound.plugin, bound.pv_name
                        check_node_affinity(bound, self._sources)
                        result = await asyncio.to_thread(
                            set_up_persistent_volume, pod, bound,
                            os.path.join(base, plugin, spec_name))
                    else:
                        known = plugin_dir_name(volume)
                        if known is None:
                            raise VolumeError(f'volume "{volume.name}" has type '
                                              f"{volume_type(volume)}, which pykubelet "
                                              f"cannot mount")
                        plugin = known
                        result = await set_up(pod, volume, os.path.join(base, plugin, spec_name),
                                              self._sources)
                except asyncio.CancelledError:
                    raise
                except ClaimNotReady as err:
                    # Upstream's populator: no per-volume event, the pod's sync reports it.
                    klog.error("Error processing volume", str(err), pod=pod_ref(pod),
                               volumeName=volume.name)
                    unprocessed.append((volume.name, str(err)))
                    continue
                except Exception as err:
                    operation = getattr(err, "operation", VolumeError.operation)
                    message = f'{operation} failed for volume "{spec_name}" : {_describe(err)}'
                    self._recorder.event(pod, WARNING, FAILED_MOUNT, message)
                    klog.error(f"{operation} failed", _describe(err), pod=pod_ref(pod),
                               volume=volume.name)
                    if volume.name not in mounted:
                        failed.append((volume.name, message))
                    continue
                if volume.name not in mounted:
                    klog.v(3).info("MountVolume.SetUp succeeded", pod=pod_ref(pod),
                                   volume=volume.name)
                mounted[volume.name] = MountedVolume(volume.name, plugin, result.path,
                                                     result.read_only)
        if failed or unprocessed:
            # Upstream v1.35's WaitForAttachAndMount error; "unattached" lists only volumes
            # of attachable plugins, and pykubelet has none.
            names = {name for name, _ in failed + unprocessed}
            unmounted = " ".join(v.name for v in volumes if v.name in names)
            message = (f"unmounted volumes=[{unmounted}], unattached volumes=[], failed to "
                       f"process volumes=[{' '.join(name for name, _ in unprocessed)}]: "
                       + "; ".join(text for _, text in unprocessed + failed))
            if unprocessed:
                self._recorder.event(pod, WARNING, FAILED_MOUNT,
                                     f"Unable to attach or mount volumes: {message}")
            raise VolumeMountError(message)

    def mounts_for(self, pod: V1Pod, container: V1Container,
                   env: Mapping[str, str]) -> list[api_pb2.Mount]:
        """The CRI mounts of ``container``'s ``volumeMounts`` (upstream ``makeMounts``)."""
        uid = pod_uid(pod)
        mounted = self._actual.get(uid, {})
        mounts: list[api_pb2.Mount] = []
        for index, volume_mount in enumerate(container.volume_mounts or []):
            volume = mounted.get(volume_mount.name)
            if volume is None:
                raise MountPrepareError(
                    f"cannot find volume {volume_mount.name!r} to mount into container "
                    f"{container.name!r}")
            sub_path = _sub_path(volume_mount, env)
            mount = _cri_mount(container, volume_mount, volume.path, read_only=volume.read_only)
            if sub_path:
                # Last, once the entry is known to be valid: this one mounts.
                mount.host_path = self._bind_sub_path(pod, container, volume_mount, SubPath(
                    volume_path=volume.path, sub_path=sub_path,
                    pod_dir=self._dirs.pod_dir(uid), volume_name=volume.name,
                    container_name=container.name, mount_index=index))
            mounts.append(mount)
        return mounts

    def _bind_sub_path(self, pod: V1Pod, container: V1Container, volume_mount: V1VolumeMount,
                       sub_path: SubPath) -> str:
        try:
            return self._prepare_sub_path(sub_path)
        except (SubPathError, OSError) as err:
            # The details stay in the log: they describe the node's file system.
            klog.error("Failed to prepare subPath for volumeMount of the container", err,
                       pod=pod_ref(pod), containerName=container.name,
                       volumeMountName=volume_mount.name)
            raise MountPrepareError(
                f'failed to prepare subPath for volumeMount "{volume_mount.name}" of '
                f'container "{container.name}"') from err

    def mounted_volumes(self, uid: str) -> dict[str, MountedVolume]:
        return dict(self._actual.get(uid, {}))

    # -- the reconciler -------------------------------------------------------------

    async def run(self) -> None:
        """The reconciler; beside it, the volume stats every ``stats_period``, which
        live and end with it (a failed measurement is logged and tried again)."""
        stats = (asyncio.get_running_loop().create_task(self._measure_forever(),
                                                        name="volume-stats")
                 if self._stats_period > 0 else None)
        try:
            while True:
                await self.reconcile()
                await asyncio.sleep(self._period)
        finally:
            if stats is not None:
                stats.cancel()

    async def _measure_forever(self) -> None:
        while True:
            try:
                await self.measure_volumes()
            except Exception as err:
                klog.error("Measuring volumes failed", err)
            await asyncio.sleep(self._stats_period)

    async def measure_volumes(self) -> None:
        """Measure the mounted volumes of every pod still wanted (in a worker thread)."""
        pods = [(pod, dict(self._actual[uid])) for uid, pod in list(self._desired.items())
                if uid in self._actual]
        await asyncio.to_thread(self.stats.refresh, pods)

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
                self._desired.pop(uid, None)
                if not await asyncio.to_thread(self.tear_down_pod, uid):
                    continue  # still counted: the pod directory stays, tried next period
                self._actual.pop(uid, None)
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

    def tear_down_pod(self, uid: str) -> bool:
        """Unmount and remove the subPath mounts, then every volume directory, of ``uid``;
        False if a mount could not be removed (what lies under it is kept).

        The reconciler's step, in a worker thread, under the lock that
        ``pod_dir_removal`` holds too: the reconciler and the kubelet's clean-up
        never work on one pod directory at the same time."""
        with self._tear_down_lock:
            return self._tear_down_pod(uid)

    def _tear_down_pod(self, uid: str) -> bool:
        # Any directory may already be gone (removed by an earlier clean-up, or by
        # hand): what is not there is torn down.
        # The subPath mounts first: each holds part of a volume, keeping its tmpfs busy.
        if not clean_sub_paths(self._dirs.pod_dir(uid)):
            return False
        base = volumes_dir(self._dirs, uid)
        if not os.path.isdir(base):
            return True
        # Deepest first, so a mount inside another volume goes before its parent.
        for point in sorted(mount_points_under(base), key=len, reverse=True):
            try:
                unmount(point)
            except OSError as err:
                klog.error("UnmountVolume.TearDown failed", err, podUID=uid, path=point)
                return False  # never delete files under a mount we could not remove
        for plugin in _names(base):
            for name in _names(os.path.join(base, plugin)):
                path = os.path.join(base, plugin, name)
                if plugin in MOUNT_POINT_PLUGINS:
                    # A PV's mount point: what was under it is the PV's, never removed.
                    try:
                        os.rmdir(path)
                    except FileNotFoundError:
                        continue
                    except OSError as err:
                        klog.error("UnmountVolume.TearDown failed: the mount point is not "
                                   "empty, kept", err, podUID=uid, path=path)
                        continue
                else:
                    shutil.rmtree(path, ignore_errors=True)
                klog.info("UnmountVolume.TearDown succeeded", podUID=uid, volume=name,
                          plugin=plugin)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(base, plugin))
        return True

    @contextlib.contextmanager
    def pod_dir_removal(self, uid: str) -> Iterator[bool]:
        """Whether the directory of ``uid``, a pod that is gone, may be removed now; the
        answer holds until the ``with`` block ends (the reconciler waits until then).

        The kubelet's clean-up of orphaned pod directories asks this, in a worker
        thread, and removes the directory inside the block. The answer is no while
        the reconciler still counts volumes of the pod (it has not torn them down,
        or could not yet), while anything under the directory is mounted, and while
        a volume's directory holds anything (a PV mount point with files in it: the
        PV's data). Otherwise ``volumes`` has been removed, directory by directory
        and never with content in it, and the rest may go whole (upstream's
        ``cleanupOrphanedPodDirs``).
        """
        with self._tear_down_lock:
            yield self._release_volumes_dir(uid)

    def _release_volumes_dir(self, uid: str) -> bool:
        if self._actual.get(uid):
            klog.v(3).info("Orphaned pod found, but volumes are not cleaned up", podUID=uid)
            return False
        mounted = mount_points_under(self._dirs.pod_dir(uid))
        if mounted:
            klog.v(3).info("Orphaned pod found, but volumes are still mounted on disk",
                           podUID=uid, paths=sorted(mounted))
            return False
        if not _remove_empty_dirs(volumes_dir(self._dirs, uid)):
            # The teardown reported what it kept, once; this is asked every housekeeping.
            klog.v(3).info("Orphaned pod found, but its volumes directory is not empty",
                           podUID=uid)
            return False
        return True

def _names(directory: str) -> list[str]:
    """The entries of ``directory``; none once it is gone."""
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _remove_empty_dirs(top: str) -> bool:
    """Remove ``top`` and the directories under it, deepest first, if they hold no file
    (nor symlink); True when ``top`` is gone. Meant for a tree without mounts in it."""
    for name in _names(top):
        path = os.path.join(top, name)
        if os.path.islink(path) or not os.path.isdir(path) or not _remove_empty_dirs(path):
            return False
    try:
        os.rmdir(top)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _sub_path(volume_mount: V1VolumeMount, env: Mapping[str, str]) -> str:
    """The mount's ``subPath``, or its ``subPathExpr`` expanded; validated."""
    sub_path = volume_mount.sub_path or ""
    if volume_mount.sub_path_expr:
        if sub_path:
            raise MountPrepareError("subpath and subPathExpr are mutually exclusive")
        sub_path = expand(volume_mount.sub_path_expr, env.get)
    try:
        validate_sub_path(sub_path)
    except SubPathError as err:
        raise MountPrepareError(str(err)) from err
    return sub_path


def _cri_mount(container: V1Container, volume_mount: V1VolumeMount, host_path: str, *,
               read_only: bool) -> api_pb2.Mount:
    propagation = PROPAGATION.get(volume_mount.mount_propagation)
    if propagation is None:
        raise MountPrepareError(f"invalid mountPropagation {volume_mount.mount_propagation!r}")
    privileged = bool(container.security_context and container.security_context.privileged)
    if propagation == api_pb2.MountPropagation.PROPAGATION_BIDIRECTIONAL and not privileged:
        raise MountPrepareError("Bidirectional mount propagation is available only to "
                                "privileged containers")
    return api_pb2.Mount(container_path=volume_mount.mount_path, host_path=host_path,
                         readonly=bool(volume_mount.read_only) or read_only,
                         propagation=propagation)


def _describe(err: BaseException) -> str:
    return str(err) or type(err).__name__


__all__ = ["FAILED_MOUNT", "MountPrepareError", "MountedVolume", "PodDirs", "SubPathError",
           "VolumeError", "VolumeManager", "VolumeMountError", "volume_type",
           "volumes_dir"]
