"""The volume plugins: how each volume source becomes a directory on the node.

Upstream keeps one package per plugin under ``pkg/volume``; pykubelet has the
in-tree sources a pod needs without a storage driver:

- ``emptyDir``: a directory under the pod (``medium: Memory``: a tmpfs of
  ``sizeLimit``); lives as long as the pod;
- ``hostPath``: the node's own path, after the ``type`` check (upstream's
  messages: ``hostPath type check failed: /x is not a directory``...);
- ``configMap``, ``secret``, ``downwardAPI``, ``projected``: files written by
  the ``AtomicWriter`` from API objects, pod fields and service-account
  tokens; rewritten on every pod sync so changes reach running containers.
  Secrets, downwardAPI and projected volumes are on tmpfs; all four are set up
  as the emptyDir upstream wraps (root 0777 on disk, 1777 on tmpfs);
- ``persistentVolumeClaim``: the claim's ``local`` or ``hostPath``
  PersistentVolume (``persistent``).

Each ``set_up`` is idempotent: the first call creates the volume, later calls
refresh its content. Every directory is ``<pod>/volumes/<plugin>/<volume>``,
with upstream's escaped plugin names (``kubernetes.io~configmap``), so a
restarted kubelet finds and cleans them.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes_asyncio.client import (
    V1DownwardAPIVolumeFile,
    V1KeyToPath,
    V1Pod,
    V1Volume,
)

from pykubelet.api.fieldpath import (
    FieldPathError,
    field_ref_value,
    find_container,
    resource_field_value,
)
from pykubelet.api.quantity import QuantityError, memory_to_bytes
from pykubelet.objectcache import NotFoundError
from pykubelet.token import DEFAULT_EXPIRATION_SECONDS
from pykubelet.volumemanager.atomic_writer import AtomicWriter, FileProjection, PathError
from pykubelet.volumemanager.mount import is_mount_point, mount_tmpfs

EMPTY_DIR = "kubernetes.io~empty-dir"
HOST_PATH = "kubernetes.io~host-path"
CONFIG_MAP = "kubernetes.io~configmap"
SECRET = "kubernetes.io~secret"
DOWNWARD_API = "kubernetes.io~downward-api"
PROJECTED = "kubernetes.io~projected"
# The source attribute of V1Volume each plugin serves.
PLUGIN_BY_SOURCE = {
    "empty_dir": EMPTY_DIR,
    "host_path": HOST_PATH,
    "config_map": CONFIG_MAP,
    "secret": SECRET,
    "downward_api": DOWNWARD_API,
    "projected": PROJECTED,
}
DEFAULT_MODE = 0o644


class VolumeError(Exception):
    """The volume cannot be set up; the message is what the FailedMount event says."""

    # The step the event names (upstream's operation executor's wording).
    operation = "MountVolume.SetUp"


class VolumeSources(Protocol):
    """What the plugins read from the cluster and the node."""

    async def config_map(self, namespace: str, name: str) -> dict[str, Any]:
        """Raises ``NotFoundError`` when it does not exist."""
        ...

    async def secret(self, namespace: str, name: str) -> dict[str, Any]: ...

    async def service_account_token(self, pod: V1Pod, audience: str,
                                    expiration_seconds: int) -> str: ...

    async def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """A PersistentVolumeClaim by GET; raises ``NotFoundError`` when it does not exist."""
        ...

    async def persistent_volume(self, name: str) -> dict[str, Any]: ...

    def node_labels(self) -> Mapping[str, str]:
        """The labels of this kubelet's Node (upstream ``GetNodeLabels``); raises
        ``VolumeError`` when the Node cannot be read."""
        ...

    def node_allocatable(self) -> tuple[int, int]:
        """(CPU millicores, memory bytes) for ``limits.*`` the container leaves unset."""
        ...


def volume_type(volume: V1Volume) -> str:
    """The API name of the volume's source (``projected``, ``emptyDir``...)."""
    attribute_map: dict[str, str] = getattr(V1Volume, "attribute_map")  # noqa: B009
    for attribute, wire_name in attribute_map.items():
        if attribute != "name" and getattr(volume, attribute) is not None:
            return str(wire_name)
    return "emptyDir"  # no source given: the API's default


def plugin_dir_name(volume: V1Volume) -> str | None:
    """``kubernetes.io~configmap``... for the sources pykubelet mounts; None for the others."""
    for attribute, name in PLUGIN_BY_SOURCE.items():
        if getattr(volume, attribute) is not None:
            return name
    attribute_map: dict[str, str] = getattr(V1Volume, "attribute_map")  # noqa: B009
    if all(getattr(volume, a) is None for a in attribute_map if a != "name"):
        return EMPTY_DIR
    return None


def uses_tmpfs(volume: V1Volume) -> bool:
    if volume.secret is not None or volume.projected is not None \
            or volume.downward_api is not None:
        return True
    return volume.empty_dir is not None and volume.empty_dir.medium == "Memory"


def read_only_by_plugin(volume: V1Volume) -> bool:
    """API-object volumes are mounted read-only into containers, as upstream."""
    return any(getattr(volume, a) is not None
               for a in ("config_map", "secret", "downward_api", "projected"))


@dataclass
class SetUpResult:
    path: str          # what containers mount
    read_only: bool


# --- payloads ----------------------------------------------------------------------------


def _decode(values: Mapping[str, str] | None) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in (values or {}).items()}


def _key_payload(data: Mapping[str, bytes], items: list[V1KeyToPath] | None, default_mode: int,
                 optional: bool, missing: str) -> dict[str, FileProjection]:
    """``items`` (or every key) of ``data`` as files (upstream configmap/secret ``MakePayload``)."""
    if not items:
        return {key: FileProjection(value, default_mode) for key, value in data.items()}
    payload: dict[str, FileProjection] = {}
    for item in items:
        if item.key not in data:
            if optional:
                continue
            raise VolumeError(f"{missing}: {item.key}")
        mode = item.mode if item.mode is not None else default_mode
        payload[item.path] = FileProjection(data[item.key], mode)
    return payload


def configmap_payload(obj: Mapping[str, Any] | None, items: list[V1KeyToPath] | None,
                      default_mode: int, optional: bool) -> dict[str, FileProjection]:
    if obj is None:
        return {}
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update(_decode(obj.get("binaryData")))
    return _key_payload(data, items, default_mode, optional,
                        "configmap references non-existent config key")


def secret_payload(obj: Mapping[str, Any] | None, items: list[V1KeyToPath] | None,
                   default_mode: int, optional: bool) -> dict[str, FileProjection]:
    if obj is None:
        return {}
    data = _decode(obj.get("data"))
    data.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return _key_payload(data, items, default_mode, optional,
                        "references non-existent secret key")


def downward_payload(pod: V1Pod, items: list[V1DownwardAPIVolumeFile] | None, default_mode: int,
                     allocatable: tuple[int, int]) -> dict[str, FileProjection]:
    payload: dict[str, FileProjection] = {}
    for item in items or []:
        mode = item.mode if item.mode is not None else default_mode
        try:
            if item.field_ref is not None:
                value = field_ref_value(pod, item.field_ref.field_path or "")
            elif item.resource_field_ref is not None:
                ref = item.resource_field_ref
                container = find_container(pod, ref.container_name or "")
                value = resource_field_value(container, ref.resource or "", ref.divisor,
                                             node_cpu_millis=allocatable[0],
                                             node_memory=allocatable[1])
            else:
                continue
        except FieldPathError as err:
            raise VolumeError(str(err)) from err
        payload[item.path] = FileProjection(value.encode(), mode)
    return payload


# --- hostPath --------------------------------------------------------------------------


def check_host_path_type(path: str, path_type: str | None) -> None:
    """Upstream's ``checkType`` with its messages; the *OrCreate types create what is missing."""
    if not path_type:
        return

    def mode() -> int | None:
        try:
            return os.stat(path).st_mode
        except OSError:
            return None

    current = mode()
    if path_type == "DirectoryOrCreate":
        if current is None:
            os.makedirs(path, mode=0o755, exist_ok=True)
            return
        path_type = "Directory"
    elif path_type == "FileOrCreate":
        if current is None:
            os.makedirs(os.path.dirname(path) or "/", mode=0o755, exist_ok=True)
            with open(path, "a"):
                pass
            os.chmod(path, 0o644)
            return
        path_type = "File"
    checks = {
        "Directory": (stat.S_ISDIR, "is not a directory"),
        "File": (stat.S_ISREG, "is not a file"),
        "Socket": (stat.S_ISSOCK, "is not a socket file"),
        "CharDevice": (stat.S_ISCHR, "is not a character device"),
        "BlockDevice": (stat.S_ISBLK, "is not a block device"),
    }
    if path_type not in checks:
        raise VolumeError(f"{path_type} is an invalid volume type")
    predicate, message = checks[path_type]
    if current is None or not predicate(current):
        raise VolumeError(f"hostPath type check failed: {path} {message}")


# --- set-up ----------------------------------------------------------------------------


def set_volume_ownership(path: str, fs_group: int, read_only: bool) -> None:
    """Upstream ``SetVolumeOwnership``: group ``fs_group`` and group access on everything.

    Files get group read (and write unless the volume is read-only), directories
    also group search and the setgid bit so new files inherit the group. Links
    are re-owned but never chmod-ed: that would change their target's mode.
    """
    mask = 0o440 if read_only else 0o660

    def own(full: str) -> None:
        info = os.lstat(full)
        os.lchown(full, -1, fs_group)
        if stat.S_ISLNK(info.st_mode):
            return
        extra = mask | (stat.S_ISGID | 0o110 if stat.S_ISDIR(info.st_mode) else 0)
        os.chmod(full, stat.S_IMODE(info.st_mode) | extra)

    own(path)
    for root, dirs, files in os.walk(path):  # never descends into linked directories
        for name in (*dirs, *files):
            own(os.path.join(root, name))


def _write(path: str, tmpfs: bool, payload: dict[str, FileProjection],
           fs_group: int | None) -> None:
    """A volume of files from API objects: upstream wraps an emptyDir (``medium:
    Memory`` but for configMap), set up once like any emptyDir, so its root is 0777
    on disk or 1777 on tmpfs; the files go in through the atomic writer."""
    _empty_dir(path, tmpfs, None, None)
    try:
        changed = AtomicWriter(path).write(payload)
    except PathError as err:
        raise VolumeError(str(err)) from err
    if changed and fs_group is not None:
        set_volume_ownership(path, fs_group, read_only=True)


EMPTY_DIR_MODE = 0o777


def _empty_dir(path: str, tmpfs: bool, size: int | None, fs_group: int | None) -> None:
    """Upstream emptyDir ``SetUpAt``: set up once, then leave the directory alone.

    The directory is writable by every user of the pod (0777); ``medium: Memory``
    mounts a tmpfs over it whose root keeps the kernel's own 1777 (the sticky bit:
    users of the pod cannot remove each other's files). ``fs_group`` then gives it
    that group and the setgid bit, so files the containers create inherit the group.
    A later sync finds the volume ready (mounted, or there) and changes nothing: a
    chmod then would clear the setgid bit containers rely on.
    """
    if (is_mount_point(path) if tmpfs else os.path.isdir(path)):
        return
    os.makedirs(path, mode=EMPTY_DIR_MODE, exist_ok=True)
    if stat.S_IMODE(os.lstat(path).st_mode) != EMPTY_DIR_MODE:
        os.chmod(path, EMPTY_DIR_MODE)  # the kubelet's umask took bits away
    if tmpfs:
        mount_tmpfs(path, size)
    if fs_group is not None:
        set_volume_ownership(path, fs_group, read_only=False)


def _fs_group(pod: V1Pod) -> int | None:
    context = pod.spec.security_context if pod.spec else None
    return context.fs_group if context is not None else None


async def _object(fetch: Any, kind: str, namespace: str, name: str,
                  optional: bool) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = await fetch(namespace, name)
        return obj
    except NotFoundError:
        if optional:
            return None
        raise VolumeError(f'{kind} "{name}" not found') from None


async def set_up(pod: V1Pod, volume: V1Volume, path: str,
                 sources: VolumeSources | None) -> SetUpResult:
    """Create or refresh ``volume`` of ``pod`` at ``path`` (its directory under the pod)."""
    namespace = pod.metadata.namespace or ""
    read_only = read_only_by_plugin(volume)
    if volume.host_path is not None:
        host = volume.host_path.path or ""
        await asyncio.to_thread(check_host_path_type, host, volume.host_path.type)
        return SetUpResult(host, False)
    if volume.empty_dir is not None or plugin_dir_name(volume) == EMPTY_DIR:
        empty = volume.empty_dir
        memory = empty is not None and empty.medium == "Memory"
        size = None
        if memory and empty is not None and empty.size_limit:
            try:
                size = memory_to_bytes(empty.size_limit)
            except QuantityError as err:
                raise VolumeError(f"invalid sizeLimit {empty.size_limit}: {err}") from err
        await asyncio.to_thread(_empty_dir, path, memory, size, _fs_group(pod))
        return SetUpResult(path, False)
    if sources is None:
        raise VolumeError(f"volume type {volume_type(volume)} needs the API server, and this "
                          f"kubelet runs standalone")
    payload: dict[str, FileProjection]
    allocatable = sources.node_allocatable()
    if volume.config_map is not None:
        source = volume.config_map
        mode = source.default_mode if source.default_mode is not None else DEFAULT_MODE
        optional = bool(source.optional)
        obj = await _object(sources.config_map, "configmap", namespace, source.name or "",
                            optional)
        payload = configmap_payload(obj, source.items, mode, optional)
    elif volume.secret is not None:
        secret = volume.secret
        mode = secret.default_mode if secret.default_mode is not None else DEFAULT_MODE
        optional = bool(secret.optional)
        obj = await _object(sources.secret, "secret", namespace, secret.secret_name or "",
                            optional)
        payload = secret_payload(obj, secret.items, mode, optional)
    elif volume.downward_api is not None:
        downward = volume.downward_api
        mode = downward.default_mode if downward.default_mode is not None else DEFAULT_MODE
        payload = downward_payload(pod, downward.items, mode, allocatable)
    elif volume.projected is not None:
        payload = await projected_payload(pod, volume, sources, allocatable)
    else:
        raise VolumeError(f'volume "{volume.name}" has type {volume_type(volume)}, '
                          f"which pykubelet cannot mount")
    await asyncio.to_thread(_write, path, uses_tmpfs(volume), payload, _fs_group(pod))
    return SetUpResult(path, read_only)


async def projected_payload(pod: V1Pod, volume: V1Volume, sources: VolumeSources,
                            allocatable: tuple[int, int]) -> dict[str, FileProjection]:
    projected = volume.projected
    assert projected is not None
    namespace = pod.metadata.namespace or ""
    default_mode = (projected.default_mode if projected.default_mode is not None
                    else DEFAULT_MODE)
    payload: dict[str, FileProjection] = {}
    for source in projected.sources or []:
        if source.secret is not None:
            optional = bool(source.secret.optional)
            obj = await _object(sources.secret, "secret", namespace, source.secret.name or "",
                                optional)
            payload.update(secret_payload(obj, source.secret.items, default_mode, optional))
        elif source.config_map is not None:
            optional = bool(source.config_map.optional)
            obj = await _object(sources.config_map, "configmap", namespace,
                                source.config_map.name or "", optional)
            payload.update(configmap_payload(obj, source.config_map.items, default_mode,
                                             optional))
        elif source.downward_api is not None:
            payload.update(downward_payload(pod, source.downward_api.items, default_mode,
                                            allocatable))
        elif source.service_account_token is not None:
            token_source = source.service_account_token
            try:
                token = await sources.service_account_token(
                    pod, token_source.audience or "",
                    int(token_source.expiration_seconds or DEFAULT_EXPIRATION_SECONDS))
            except Exception as err:
                raise VolumeError(f"failed to fetch token: {_describe(err)}") from err
            # With a runAsUser or fsGroup the token is private to the pod's user (0600,
            # owned by it); fsGroup ownership then adds group read (0640).
            fs_user = fs_user_of(pod)
            private = fs_user is not None or _fs_group(pod) is not None
            payload[token_source.path] = FileProjection(
                token.encode(), 0o600 if private else default_mode, fs_user=fs_user)
    return payload


def fs_user_of(pod: V1Pod) -> int | None:
    """Upstream ``FsUserFrom``: the one user every init and regular container runs as
    (its own ``runAsUser``, else the pod's); None when one has none or two differ."""
    spec = pod.spec
    if spec is None:
        return None
    pod_context = spec.security_context
    user: int | None = None
    for container in [*(spec.init_containers or []), *(spec.containers or [])]:
        own = container.security_context
        effective = (own.run_as_user if own is not None and own.run_as_user is not None
                     else pod_context.run_as_user if pod_context is not None else None)
        if effective is None or (user is not None and effective != user):
            return None
        user = effective
    return user


def _describe(err: BaseException) -> str:
    reason = getattr(err, "reason", None)
    status = getattr(err, "status", None)
    if status is not None:
        return f"{status} {reason or ''}".strip()
    return str(err) or type(err).__name__


__all__ = [
    "CONFIG_MAP",
    "DOWNWARD_API",
    "EMPTY_DIR",
    "HOST_PATH",
    "PROJECTED",
    "SECRET",
    "SetUpResult",
    "VolumeError",
    "VolumeSources",
    "check_host_path_type",
    "configmap_payload",
    "downward_payload",
    "fs_user_of",
    "plugin_dir_name",
    "read_only_by_plugin",
    "secret_payload",
    "set_up",
    "set_volume_ownership",
    "uses_tmpfs",
    "volume_type",
]
