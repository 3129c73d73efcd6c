"""What volume plugins and container environments read from the cluster (upstream ``VolumeHost``).

The volume plugins (``pykubelet.volumemanager``) and the container config
(``pykubelet.kuberuntime``) do not know where ConfigMaps, Secrets and tokens
come from; the kubelet hands them this object:

- ``config_map`` / ``secret`` go through the ConfigMap and Secret managers
  (``pykubelet.objectcache``, the configured change-detection strategy);
- ``service_account_token`` goes through the token manager (TokenRequest,
  bound to the pod);
- ``persistent_volume_claim`` / ``persistent_volume`` are a GET each time
  (``PersistentVolumeReader``), as upstream's volume manager reads them: the
  Node authorizer lets a node get the claims its pods name and the volumes
  bound to them, and lets it list or watch neither;
- ``node_allocatable`` is what ``limits.*`` of a container without limits reads;
- ``node_labels`` is what a PersistentVolume's ``nodeAffinity`` is checked
  against before it is mounted: the watched Node's labels (upstream's
  ``GetNodeLabels`` reads its node lister, and a Node it cannot find is an
  error), standalone the labels the kubelet would register with.

Standalone (no API server), the object readers refuse with a message naming
the missing API server, so a static pod with a configMap volume waits with a
``FailedMount`` event that says why.

The environment (``EnvSource``) is read while a container config is built,
which is synchronous; ``prefetch_env`` fetches the objects a pod's ``env`` and
``envFrom`` name once per pod sync, before its containers start, and the
synchronous reads answer from that snapshot (secret values decoded). The
snapshot of an object lasts while a pod on the node names it:
``forget_pod_env``, called once a pod has terminated, drops the pod's
references, so nothing grows with the pods a node has seen.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio.client import CoreV1Api, V1Pod

from pykubelet import metrics
from pykubelet.api import init_then_app_containers, pod_uid
from pykubelet.kubelet.node_info import NodeView
from pykubelet.objectcache import Manager, NotFoundError
from pykubelet.token import TokenKey, TokenManager
from pykubelet.util import klog
from pykubelet.volumemanager import VolumeError

CONFIGMAP = "configmap"
SECRET = "secret"


def _env_names(pod: V1Pod) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret the pod's containers take env from."""
    names: set[tuple[str, str]] = set()
    for container in init_then_app_containers(pod):
        for source in container.env_from or []:
            if source.config_map_ref is not None and source.config_map_ref.name:
                names.add((CONFIGMAP, source.config_map_ref.name))
            if source.secret_ref is not None and source.secret_ref.name:
                names.add((SECRET, source.secret_ref.name))
        for var in container.env or []:
            value_from = var.value_from
            if value_from is None:
                continue
            if value_from.config_map_key_ref is not None and value_from.config_map_key_ref.name:
                names.add((CONFIGMAP, value_from.config_map_key_ref.name))
            if value_from.secret_key_ref is not None and value_from.secret_key_ref.name:
                names.add((SECRET, value_from.secret_key_ref.name))
    return names


def _env_data(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    data = obj.get("data") or {}
    if kind == CONFIGMAP:
        return {key: str(value) for key, value in data.items()}
    decoded: dict[str, str] = {}
    for key, value in data.items():
        try:
            decoded[key] = base64.b64decode(value).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            klog.error("Secret value is not base64; skipped", key=key)
    return decoded


Object = dict[str, Any]


class PersistentVolumeReader:
    """PersistentVolumeClaims and PersistentVolumes, read by GET on every use.

    Each reader returns the object as JSON, None on 404; any other answer
    raises with the API server's own message (a refusal of the Node
    authorizer reads as it does in upstream's event).
    """

    def __init__(self, read_claim: Callable[[str, str], Awaitable[Object | None]],
                 read_volume: Callable[[str], Awaitable[Object | None]]) -> None:
        self._read_claim = read_claim
        self._read_volume = read_volume

    @classmethod
    def for_api(cls, api: CoreV1Api) -> PersistentVolumeReader:
        async def claim(namespace: str, name: str) -> Object | None:
            return await _get_json(api.read_namespaced_persistent_volume_claim, name, namespace)

        async def volume(name: str) -> Object | None:
            return await _get_json(api.read_persistent_volume, name)

        return cls(claim, volume)

    async def claim(self, namespace: str, name: str) -> Object:
        obj = await self._read_claim(namespace, name)
        if obj is None:
            raise NotFoundError("persistentvolumeclaims", name)
        return obj

    async def volume(self, name: str) -> Object:
        obj = await self._read_volume(name)
        if obj is None:
            raise NotFoundError("persistentvolumes", name)
        return obj


async def _get_json(call: Callable[..., Awaitable[Any]], *args: str) -> Object | None:
    response = await call(*args, _preload_content=False)
    try:
        body = await response.read()
        status = response.status
    finally:
        response.release()
    if status == 404:
        return None
    try:
        obj: Object = json.loads(body)
    except ValueError:
        obj = {}
    if status != 200:
        raise VolumeError(str(obj.get("message") or f"the API server answered {status}"))
    return obj


class VolumeHost:
    """``VolumeSources`` for the plugins and ``EnvSource`` for container configs."""

    def __init__(self, allocatable: Callable[[], tuple[int, int]], *,
                 config_maps: Manager | None = None, secrets: Manager | None = None,
                 tokens: TokenManager | None = None,
                 persistent_volumes: PersistentVolumeReader | None = None,
                 node_view: NodeView | None = None) -> None:
        """``node_view`` is None for tests only (``node_labels`` then refuses)."""
        self._allocatable = allocatable
        self._node_view = node_view
        self.config_maps = config_maps
        self.secrets = secrets
        self.tokens = tokens
        self.persistent_volumes = persistent_volumes
        # (kind, namespace, name) -> the decoded data, or None when it does not exist.
        self._env: dict[tuple[str, str, str], dict[str, str] | None] = {}
        # Pod UID -> the keys of _env it read: an object stays only while a pod that
        # names it is on the node (secret values included).
        self._env_readers: dict[str, set[tuple[str, str, str]]] = {}
        metrics.track_table("env_readers", self.tracked_pods)

    # -- VolumeSources -------------------------------------------------------------

    async def config_map(self, namespace: str, name: str) -> dict[str, Any]:
        if self.config_maps is None:
            raise VolumeError(f'cannot read configmap "{name}": this kubelet runs without '
                              f"an API server")
        return await self.config_maps.get_object(namespace, name)

    async def secret(self, namespace: str, name: str) -> dict[str, Any]:
        if self.secrets is None:
            raise VolumeError(f'cannot read secret "{name}": this kubelet runs without '
                              f"an API server")
        return await self.secrets.get_object(namespace, name)

    async def service_account_token(self, pod: V1Pod, audience: str,
                                    expiration_seconds: int) -> str:
        if self.tokens is None:
            raise VolumeError("cannot request a service account token: this kubelet runs "
                              "without an API server")
        meta, spec = pod.metadata, pod.spec
        key = TokenKey(namespace=meta.namespace or "",
                       service_account=(spec.service_account_name if spec else None)
                       or "default",
                       audiences=(audience,) if audience else (),
                       expiration_seconds=expiration_seconds,
                       pod_name=meta.name or "", pod_uid=pod_uid(pod))
        return await self.tokens.get_service_account_token(key)

    async def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any]:
        if self.persistent_volumes is None:
            raise VolumeError(f'cannot read persistentvolumeclaim "{name}": this kubelet runs '
                              f"without an API server")
        return await self.persistent_volumes.claim(namespace, name)

    async def persistent_volume(self, name: str) -> dict[str, Any]:
        if self.persistent_volumes is None:
            raise VolumeError(f'cannot read persistentvolume "{name}": this kubelet runs '
                              f"without an API server")
        return await self.persistent_volumes.volume(name)

    def node_allocatable(self) -> tuple[int, int]:
        return self._allocatable()

    def node_labels(self) -> dict[str, str]:
        view = self._node_view
        if view is None:
            raise VolumeError("error retrieving node: this kubelet has no view of its Node")
        if view.informer is None:
            return view.local.labels()
        node = view.get_node()
        if node is None or node.metadata is None:
            raise VolumeError(f'error retrieving node: node "{view.local.node_name}" not found')
        return dict(node.metadata.labels or {})

    # -- EnvSource -------------------------------------------------------------------

    async def prefetch_env(self, pod: V1Pod) -> None:
        """Read what ``pod``'s env names; a failed read keeps the previous answer."""
        namespace = pod.metadata.namespace or ""
        names = sorted(_env_names(pod))
        if names:
            self._env_readers[pod_uid(pod)] = {(kind, namespace, name) for kind, name in names}
        for kind, name in names:
            manager = self.config_maps if kind == CONFIGMAP else self.secrets
            if manager is None:
                continue
            try:
                obj = await manager.get_object(namespace, name)
            except NotFoundError:
                self._env[(kind, namespace, name)] = None
                continue
            except Exception as err:
                klog.error("Reading an object for a container environment failed", err,
                           kind=kind, namespace=namespace, name=name)
                continue
            self._env[(kind, namespace, name)] = _env_data(kind, obj)

    def forget_pod_env(self, uid: str) -> None:
        """The pod has terminated: drop the env objects no other pod on the node names."""
        released = self._env_readers.pop(uid, set())
        still_read: set[tuple[str, str, str]] = set()
        for keys in self._env_readers.values():
            still_read |= keys
        for key in released - still_read:
            self._env.pop(key, None)

    def tracked_pods(self) -> int:
        """Pods whose env objects are held (the ``pykubelet_tracked_pods`` gauge)."""
        return len(self._env_readers)

    def env_objects(self) -> int:
        """ConfigMaps and Secrets held for env (none once no pod names one)."""
        return len(self._env)

    def _env_lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
        return self._env.get((kind, namespace, name))

    def env_source(self) -> EnvReader:
        return EnvReader(self)


class EnvReader:
    """The synchronous ``EnvSource`` view of a ``VolumeHost``'s prefetched objects."""

    def __init__(self, host: VolumeHost) -> None:
        self._host = host

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self._host._env_lookup(CONFIGMAP, namespace, name)

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self._host._env_lookup(SECRET, namespace, name)


__all__ = ["EnvReader", "PersistentVolumeReader", "VolumeHost"]
