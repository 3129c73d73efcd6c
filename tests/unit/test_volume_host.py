"""The kubelet's VolumeHost: env objects read once per sync, standalone refusals."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    V1ConfigMapEnvSource,
    V1Container,
    V1EnvFromSource,
    V1EnvVar,
    V1EnvVarSource,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1SecretKeySelector,
)

from pykubelet.kubelet.volume_host import VolumeHost
from pykubelet.objectcache import DirectStore, Manager, configmap_names, secret_names
from pykubelet.volumemanager import VolumeError


def objects(store: dict[str, dict[str, Any]]) -> Any:
    async def fetch(namespace: str, name: str) -> dict[str, Any] | None:
        if name == "broken":
            raise ConnectionError("apiserver unreachable")
        return store.get(name)
    return fetch


def pod() -> V1Pod:
    container = V1Container(
        name="c", env_from=[V1EnvFromSource(config_map_ref=V1ConfigMapEnvSource(name="cfg")),
                            V1EnvFromSource(config_map_ref=V1ConfigMapEnvSource(name="gone"))],
        env=[V1EnvVar(name="P", value_from=V1EnvVarSource(
            secret_key_ref=V1SecretKeySelector(name="sec", key="password")))])
    return V1Pod(metadata=V1ObjectMeta(name="p", namespace="ns", uid="u"),
                 spec=V1PodSpec(containers=[container]))


async def test_env_objects_are_prefetched_and_decoded() -> None:
    config_maps = {"cfg": {"data": {"MODE": "fast"}}}
    secrets = {"sec": {"data": {"password": base64.b64encode(b"s3cret").decode()}}}
    host = VolumeHost(lambda: (1, 1),
                      config_maps=Manager(DirectStore("configmap", objects(config_maps)),
                                          configmap_names),
                      secrets=Manager(DirectStore("secret", objects(secrets)), secret_names))
    reader = host.env_source()
    assert reader.config_map("ns", "cfg") is None  # nothing read yet
    await host.prefetch_env(pod())
    assert reader.config_map("ns", "cfg") == {"MODE": "fast"}
    assert reader.secret("ns", "sec") == {"password": "s3cret"}
    assert reader.config_map("ns", "gone") is None
    # An update is seen at the next sync.
    config_maps["cfg"] = {"data": {"MODE": "slow"}}
    await host.prefetch_env(pod())
    assert reader.config_map("ns", "cfg") == {"MODE": "slow"}


async def test_standalone_refuses_api_objects_with_a_clear_message() -> None:
    host = VolumeHost(lambda: (1, 1))
    with pytest.raises(VolumeError, match="without an API server"):
        await host.config_map("ns", "cfg")
    with pytest.raises(VolumeError, match="without an API server"):
        await host.service_account_token(pod(), "", 3600)
    await host.prefetch_env(pod())  # nothing to read from
    assert host.env_source().secret("ns", "sec") is None
