"""The kubelet's VolumeHost: env objects read once per sync and dropped with the last pod
that names them, standalone refusals."""

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
from pykubelet.metrics import KUBELET_REGISTRY
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


def named_pod(uid: str, config_map: str) -> V1Pod:
    container = V1Container(name="c", env_from=[
        V1EnvFromSource(config_map_ref=V1ConfigMapEnvSource(name=config_map))])
    return V1Pod(metadata=V1ObjectMeta(name=uid, namespace="ns", uid=uid),
                 spec=V1PodSpec(containers=[container]))


async def test_env_objects_go_with_the_last_pod_that_names_them() -> None:
    store = {f"cfg-{index}": {"data": {"INDEX": str(index)}} for index in range(50)}
    host = VolumeHost(lambda: (1, 1), config_maps=Manager(
        DirectStore("configmap", objects(store)), configmap_names))
    reader = host.env_source()
    for index in range(200):
        await host.prefetch_env(named_pod(f"u{index}", f"cfg-{index % 50}"))
    assert host.env_objects() == 50
    assert KUBELET_REGISTRY.get_sample_value("pykubelet_tracked_pods",
                                             {"table": "env_readers"}) == 200
    for index in range(199):
        host.forget_pod_env(f"u{index}")
    # The last pod still names cfg-49: its data stays readable for that pod's containers.
    assert reader.config_map("ns", "cfg-49") == {"INDEX": "49"}
    assert reader.config_map("ns", "cfg-0") is None
    host.forget_pod_env("u199")
    assert host.env_objects() == 0
    assert KUBELET_REGISTRY.get_sample_value("pykubelet_tracked_pods",
                                             {"table": "env_readers"}) == 0

