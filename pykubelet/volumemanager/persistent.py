"""``persistentVolumeClaim`` volumes: the claim resolved to its PersistentVolume, then mounted.

Upstream does this in two steps, and so does pykubelet, with upstream's messages:

- processing (``resolve_claim``, upstream's desired-state populator in
  ``pkg/kubelet/volumemanager/populator``): GET the claim, which must exist,
  not be going away without its ``kubernetes.io/pvc-protection`` finalizer,
  be ``Bound`` and name its volume; GET that PersistentVolume, whose
  ``claimRef`` must point back at the claim's UID; check its ``volumeMode``
  against how the containers use the volume. A failure is ``ClaimNotReady``:
  the volume manager reports ``Unable to attach or mount volumes: ...
  error processing PVC ns/name: PVC is not bound`` as a ``FailedMount`` event,
  the pod stays in ``ContainerCreating``, and every sync tries again, so a
  claim that gets bound later lets the pod start. The reads are plain GETs:
  the Node authorizer lets a node get a claim only when a pod bound to it
  names that claim, and a volume only when that claim is bound to it; it
  lets a node list or watch neither.
- the node check (``check_node_affinity``, upstream's mount operation in
  ``operationexecutor/operation_generator.go``, before the mounter is made):
  a PV whose ``nodeAffinity.required`` does not match the Node's labels is
  not mounted, with the event ``MountVolume.NodeAffinity check failed for
  volume "<PV>" : no matching NodeSelectorTerms``, and the pod waits in
  ``ContainerCreating``. The scheduler checks the same for the pods it
  places; this catches a pod bound with ``spec.nodeName`` to a node whose
  disk is not the PV's. As upstream (``CheckNodeAffinity`` in
  ``component-helpers/storage/volume``), only the labels are matched: a
  term's ``matchFields`` are not looked at (``pykubelet.api.nodeaffinity``).
  The labels are read only for a PV that has a required affinity (upstream
  reads them for every PV, so there a Node it cannot find fails them all).
- set-up (``set_up_persistent_volume``, upstream's ``pkg/volume/local`` and
  ``pkg/volume/hostpath``): a ``local`` PV's directory is bind-mounted onto
  ``<pod>/volumes/kubernetes.io~local-volume/<PV name>`` (``ro`` when the
  pod's claim source says ``readOnly``), and the pod's ``fsGroup`` applied on
  that first mount unless read-only; a ``hostPath`` PV is its path after the
  ``type`` check, as a hostPath volume. Other sources, and ``Block`` volumes,
  are refused with a message naming what pykubelet cannot do: upstream's
  processing error for a volume no plugin can map, which the volume manager
  reports as its ``FailedMount`` Warning (``Unable to attach or mount
  volumes: ...``) on every sync while the pod waits in ``ContainerCreating``.
- mount options (upstream ``MountOptionFromSpec`` in ``pkg/volume/util``): the
  PV's ``volume.beta.kubernetes.io/mount-options`` annotation (comma-separated)
  if it has one, else its ``spec.mountOptions``. The local plugin takes them
  (upstream's ``SupportsMountOption`` is true there): they are the flags of
  its bind mount, and those a bind mount cannot take (a file system's own) are
  logged. The hostPath plugin takes none, so a hostPath PV with options is not
  set up (``MountVolume.MountOptionSupport check failed for volume "<PV>" :
  Mount options are not supported for this volume type``, upstream's
  ``checkMountOptionSupport``) and the pod waits, as upstream's does.

The PV's data are never the pod's: teardown unmounts the bind mount and
removes the mount point only when it is empty (upstream ``CleanupMountPoint``);
see ``VolumeManager.tear_down_pod``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import V1Pod, V1Volume

from pykubelet.api import all_containers
from pykubelet.api.nodeaffinity import node_selector_matches, selector_terms
from pykubelet.util import klog
from pykubelet.volumemanager.mount import MountError, bind_flags, bind_mount, is_mount_point
from pykubelet.volumemanager.plugins import (
    HOST_PATH,
    SetUpResult,
    VolumeError,
    VolumeSources,
    check_host_path_type,
    set_volume_ownership,
)

LOCAL_VOLUME = "kubernetes.io~local-volume"
# What mounts a PV's source under the pod: only the empty mount point is ever removed.
MOUNT_POINT_PLUGINS = frozenset({LOCAL_VOLUME})
PVC_PROTECTION_FINALIZER = "kubernetes.io/pvc-protection"
FILESYSTEM = "Filesystem"
BLOCK = "Block"
ON_ROOT_MISMATCH = "OnRootMismatch"
# PersistentVolumeSpec fields that are not its volume source.
_NOT_SOURCES = frozenset({
    "accessModes", "capacity", "claimRef", "mountOptions", "nodeAffinity",
    "persistentVolumeReclaimPolicy", "storageClassName", "volumeAttributesClassName",
    "volumeMode"})
# The PV sources pykubelet mounts, and the plugin directory each one uses.
PLUGIN_BY_PV_SOURCE = {"local": LOCAL_VOLUME, "hostPath": HOST_PATH}
LOCAL_DIR_MODE = 0o750
# Upstream's beta annotation, read before spec.mountOptions (v1.MountOptionAnnotation).
MOUNT_OPTIONS_ANNOTATION = "volume.beta.kubernetes.io/mount-options"
# The PV plugins that take mount options (upstream's SupportsMountOption).
MOUNT_OPTION_PLUGINS = frozenset({LOCAL_VOLUME})


class ClaimNotReady(VolumeError):
    """The claim cannot be turned into a mountable PersistentVolume yet (or ever)."""


class MounterError(VolumeError):
    """The PV's source itself is unusable (upstream's ``NewMounter`` failures)."""

    operation = "MountVolume.NewMounter initialization"


class NodeAffinityError(VolumeError):
    """The PV may not be mounted on this node (or the node's labels cannot be read)."""

    operation = "MountVolume.NodeAffinity check"


class MountOptionError(VolumeError):
    """The PV names mount options its plugin cannot apply."""

    operation = "MountVolume.MountOptionSupport check"


@dataclass(frozen=True)
class BoundVolume:
    """A pod's claim and the PersistentVolume bound to it."""

    namespace: str
    claim_name: str
    pv_name: str
    spec: Mapping[str, Any]   # the PV's spec, as the API server sent it
    read_only: bool           # the pod's claim source says readOnly
    mount_options: tuple[str, ...] = ()  # the PV's, as ``mount_options`` reads them

    @property
    def plugin(self) -> str:
        return PLUGIN_BY_PV_SOURCE[pv_source_type(self.spec)]


def pv_source_type(spec: Mapping[str, Any]) -> str:
    """The API name of a PV's source (``local``, ``nfs``...)."""
    return next((key for key, value in spec.items()
                 if key not in _NOT_SOURCES and value is not None), "none")


def mount_options(pv: Mapping[str, Any]) -> tuple[str, ...]:
    """The PV's mount options: its annotation's if it has one, else its spec's
    (upstream ``MountOptionFromSpec``, without the plugin's own options)."""
    annotations = (pv.get("metadata") or {}).get("annotations") or {}
    if MOUNT_OPTIONS_ANNOTATION in annotations:
        listed = str(annotations[MOUNT_OPTIONS_ANNOTATION]).split(",")
    else:
        listed = [str(o) for o in (pv.get("spec") or {}).get("mountOptions") or []]
    return tuple(dict.fromkeys(listed))


def _volume_uses(pod: V1Pod, name: str) -> tuple[bool, bool]:
    """Whether some container has ``name`` in its volumeMounts, and in its volumeDevices."""
    containers = all_containers(pod)
    mounts = any(m.name == name for c in containers for m in c.volume_mounts or [])
    devices = any(d.name == name for c in containers for d in c.volume_devices or [])
    return mounts, devices


def _describe(err: BaseException) -> str:
    return str(err) or type(err).__name__


async def resolve_claim(pod: V1Pod, volume: V1Volume,
                        sources: VolumeSources | None) -> BoundVolume:
    """The PV bound to ``volume``'s claim; ``ClaimNotReady`` with upstream's words if none."""
    source = volume.persistent_volume_claim
    assert source is not None
    namespace = pod.metadata.namespace or ""
    claim_name = source.claim_name or ""
    processing = f"error processing PVC {namespace}/{claim_name}"
    try:
        if sources is None:
            raise VolumeError("this kubelet runs without an API server")
        claim = await sources.persistent_volume_claim(namespace, claim_name)
    except Exception as err:
        raise ClaimNotReady(f"{processing}: failed to fetch PVC from API server: "
                            f"{_describe(err)}") from err
    meta = claim.get("metadata") or {}
    if meta.get("deletionTimestamp") and \
            PVC_PROTECTION_FINALIZER not in (meta.get("finalizers") or []):
        raise ClaimNotReady(f"{processing}: PVC is being deleted")
    if (claim.get("status") or {}).get("phase") != "Bound":
        raise ClaimNotReady(f"{processing}: PVC is not bound")
    pv_name = (claim.get("spec") or {}).get("volumeName") or ""
    if not pv_name:
        raise ClaimNotReady(f"{processing}: PVC has empty pvc.Spec.VolumeName")
    try:
        assert sources is not None
        pv = await sources.persistent_volume(pv_name)
    except Exception as err:
        raise ClaimNotReady(f"{processing}: failed to fetch PV {pv_name} from API server: "
                            f"{_describe(err)}") from err
    spec: Mapping[str, Any] = pv.get("spec") or {}
    claim_ref = spec.get("claimRef")
    if claim_ref is None:
        raise ClaimNotReady(f"{processing}: found PV object {pv_name} but it has a nil "
                            f"pv.Spec.ClaimRef indicating it is not yet bound to the claim")
    claim_uid = meta.get("uid") or ""
    if claim_ref.get("uid") != claim_uid:
        raise ClaimNotReady(f"{processing}: found PV object {pv_name} but its "
                            f"pv.Spec.ClaimRef.UID {claim_ref.get('uid') or ''} does not point "
                            f"to claim.UID {claim_uid}")
    mode = spec.get("volumeMode") or FILESYSTEM
    in_mounts, in_devices = _volume_uses(pod, volume.name)
    if in_mounts and mode != FILESYSTEM:
        raise ClaimNotReady(f"volume {volume.name} has volumeMode {mode}, but is specified "
                            f"in volumeMounts")
    if in_devices and mode != BLOCK:
        raise ClaimNotReady(f"volume {volume.name} has volumeMode {mode}, but is specified "
                            f"in volumeDevices")
    if mode != FILESYSTEM:
        # Upstream's words when no plugin can map the volume (the desired state's
        # AddPodToVolume), then why.
        raise ClaimNotReady(f'failed to get Plugin from volumeSpec for volume "{pv_name}" '
                            f"err=no volume plugin matched: volume {volume.name} has "
                            f"volumeMode {mode}, and pykubelet maps no raw block devices "
                            f"into containers")
    kind = pv_source_type(spec)
    if kind not in PLUGIN_BY_PV_SOURCE:
        raise ClaimNotReady(f'failed to get Plugin from volumeSpec for volume "{pv_name}" '
                            f"err=no volume plugin matched: pykubelet mounts local and "
                            f"hostPath PersistentVolumes, and this one's source is {kind}")
    klog.v(5).info("Found bound PV for PVC", PVC=f"{namespace}/{claim_name}",
                   PVCUID=claim_uid, PVName=pv_name)
    return BoundVolume(namespace=namespace, claim_name=claim_name, pv_name=pv_name,
                       spec=spec, read_only=bool(source.read_only),
                       mount_options=mount_options(pv))


def check_node_affinity(bound: BoundVolume, sources: VolumeSources | None) -> None:
    """``NodeAffinityError`` unless the PV's required node affinity matches this node."""
    required = (bound.spec.get("nodeAffinity") or {}).get("required")
    if required is None:
        return
    if sources is None:
        raise NodeAffinityError("error retrieving node: this kubelet runs without an API "
                                "server")
    try:
        labels = sources.node_labels()
    except VolumeError as err:
        raise NodeAffinityError(str(err)) from err
    if not node_selector_matches(selector_terms(required), labels=labels, node_name=None):
        raise NodeAffinityError("no matching NodeSelectorTerms")


def set_up_persistent_volume(pod: V1Pod, bound: BoundVolume, path: str) -> SetUpResult:
    """Mount ``bound`` for ``pod`` (blocking: run it in a thread); ``path`` is its directory
    under the pod, ``<pod>/volumes/<plugin>/<PV name>``."""
    if bound.mount_options and bound.plugin not in MOUNT_OPTION_PLUGINS:
        raise MountOptionError("Mount options are not supported for this volume type")
    if bound.plugin == HOST_PATH:
        host_path = bound.spec.get("hostPath") or {}
        path_on_host = host_path.get("path") or ""
        check_host_path_type(path_on_host, host_path.get("type"))
        return SetUpResult(path_on_host, bound.read_only)
    _set_up_local(pod, bound, path)
    return SetUpResult(path, bound.read_only)


def _file_type(path: str) -> str:
    """Upstream ``GetFileType`` for what a local PV may be."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise MounterError(f'path "{path}" does not exist') from None
    if stat.S_ISDIR(mode):
        return "Directory"
    if stat.S_ISBLK(mode):
        return "BlockDevice"
    raise MounterError("only directory and block device are supported")


def _set_up_local(pod: V1Pod, bound: BoundVolume, target: str) -> None:
    source = (bound.spec.get("local") or {}).get("path") or ""
    if not source:
        raise MounterError("local volume source is nil or local path is not set")
    if _file_type(source) != "Directory":
        raise MounterError(f"{source} is a block device: pykubelet mounts only local "
                           f"PersistentVolumes that are directories")
    if ".." in source.split("/"):
        raise VolumeError(f"invalid path: {source} must not contain '..'")
    if is_mount_point(target):
        return  # mounted by an earlier sync, or by this kubelet before a restart
    os.makedirs(target, mode=LOCAL_DIR_MODE, exist_ok=True)
    unusable = bind_flags(bound.mount_options)[1]
    if unusable:
        klog.info("Mount options a bind mount cannot take are not applied", pv=bound.pv_name,
                  options=",".join(unusable))
    try:
        bind_mount(source, target, read_only=bound.read_only, options=bound.mount_options)
    except MountError as err:
        # Only the empty mount point: nothing under it was ever the pod's to delete.
        try:
            os.rmdir(target)
        except OSError as rm_err:
            klog.error("Failed to remove the mount point of a failed mount", rm_err,
                       path=target)
        raise VolumeError(f"mount failed: {err}") from err
    klog.v(3).info("Bind-mounted a local PersistentVolume", pv=bound.pv_name, source=source,
                   target=target, readOnly=bound.read_only,
                   options=",".join(bound.mount_options))
    fs_group, policy = _fs_group(pod)
    if fs_group is not None and not bound.read_only and \
            not (policy == ON_ROOT_MISMATCH and _root_matches(target, fs_group)):
        set_volume_ownership(target, fs_group, read_only=False)


def _fs_group(pod: V1Pod) -> tuple[int | None, str | None]:
    context = pod.spec.security_context if pod.spec else None
    if context is None:
        return None, None
    return context.fs_group, context.fs_group_change_policy


def _root_matches(path: str, fs_group: int) -> bool:
    """``OnRootMismatch``: the volume's root already has the group and its access
    (upstream ``requiresPermissionChange``), so the tree is left alone."""
    info = os.stat(path)
    wanted = 0o660 | stat.S_ISGID | 0o110
    return info.st_gid == fs_group and (info.st_mode & wanted) == wanted


__all__ = ["LOCAL_VOLUME", "MOUNT_OPTIONS_ANNOTATION", "MOUNT_POINT_PLUGINS", "BoundVolume",
           "ClaimNotReady", "MountOptionError", "MounterError", "NodeAffinityError",
           "check_node_affinity", "mount_options", "pv_source_type", "resolve_claim",
           "set_up_persistent_volume"]
