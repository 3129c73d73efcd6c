"""What volume plugins and container environments read from the cluster (upstream ``VolumeHost``).

The volume plugins (``pykubelet.volumemanager``) and the container config
(``pykubelet.kuberuntime``) do not know where ConfigMaps, Secrets and tokens
come from; the kubelet hands them this object:

- ``config_map`` / ``secret`` go through the ConfigMap and Secret managers
  (``pykubelet.objectcache``, the configured change-detection strategy);
- ``service_account_token`` goes through the token manager (TokenRequest,
  bound to the pod);
- ``node_allocatable`` is what ``limits.*`` of a container without limits reads.

Standalone (no API server), the object readers refuse with a message naming
the missing API server, so a static pod with a configMap volume waits with a
``FailedMount`` event that says why.

The environment (``EnvSource``) is read while a container config is built,
which is synchronous; ``prefetch_env`` fetches the objects a pod's ``env`` and
``envFrom`` name once per pod sync, before its containers start, and the
synchronous reads answer from that snapshot (secret values decoded).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_uid
from pykubelet.objectcache import Manager, NotFoundError
from pykubelet.token import TokenKey, TokenManager
from pykubelet.util import klog
from pykubelet.volumemanager import VolumeError

CONFIGMAP = "configmap"
SECRET = "secret"


def _env_names(pod: V1Pod) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret the pod's containers take env from."""
    spec = pod.spec
    containers = [*(spec.init_containers or []), *(spec.containers or [])] if spec else []
    names: set[tuple[str, str]] = set()
    for container in containers:
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


class VolumeHost:
    """``VolumeSources`` for the plugins and ``EnvSource`` for container configs."""

    def __init__(self, allocatable: Callable[[], tuple[int, int]], *,
                 config_maps: Manager | None = None, secrets: Manager | None = None,
                 tokens: TokenManager | None = None) -> None:
        self._allocatable = allocatable
        self.config_maps = config_maps
        self.secrets = secrets
        self.tokens = tokens
        # (kind, namespace, name) -> the decoded data, or None when it does not exist.
        self._env: dict[tuple[str, str, str], dict[str, str] | None] = {}

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

    def node_allocatable(self) -> tuple[int, int]:
        return self._allocatable()

    # -- EnvSource -------------------------------------------------------------------

    async def prefetch_env(self, pod: V1Pod) -> None:
        """Read what ``pod``'s env names; a failed read keeps the previous answer."""
        namespace = pod.metadata.namespace or ""
        for kind, name in sorted(_env_names(pod)):
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


__all__ = ["EnvReader", "VolumeHost"]
