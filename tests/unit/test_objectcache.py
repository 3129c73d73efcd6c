"""The ConfigMap/Secret stores and the per-pod reference manager, at the API seam.

The fetch function stands in for the API server's GET (a dict per object and
a call counter); the clock is a fake, so the TTL rules are checked exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import (
    V1ConfigMapEnvSource,
    V1ConfigMapVolumeSource,
    V1Container,
    V1EnvFromSource,
    V1EnvVar,
    V1EnvVarSource,
    V1LocalObjectReference,
    V1Node,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ProjectedVolumeSource,
    V1SecretKeySelector,
    V1SecretProjection,
    V1SecretVolumeSource,
    V1Volume,
    V1VolumeProjection,
)

from pykubelet.objectcache import (
    DirectStore,
    Manager,
    NotFoundError,
    ObjectStore,
    configmap_names,
    secret_names,
    ttl_from_node,
)


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls = 0
        self.fail = False
        self.version = 0

    def put(self, name: str, data: dict[str, str], immutable: bool = False) -> None:
        self.version += 1
        self.objects[("ns", name)] = {"metadata": {"name": name,
                                                   "resourceVersion": str(self.version)},
                                      "data": data, "immutable": immutable}

    async def fetch(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls += 1
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        return self.objects.get((namespace, name))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node_with_ttl(ttl: str | None) -> V1Node:
    annotations = {"node.alpha.kubernetes.io/ttl": ttl} if ttl is not None else {}
    return V1Node(metadata=V1ObjectMeta(name="n", annotations=annotations))


async def test_object_store_honours_the_node_ttl_annotation() -> None:
    api, clock = FakeApi(), Clock()
    node = node_with_ttl("30")
    store = ObjectStore("configmap", api.fetch, default_ttl=60, clock=clock,
                        get_ttl=ttl_from_node(lambda: node))
    api.put("cfg", {"k": "1"})
    store.add_reference("ns", "cfg")
    assert (await store.get("ns", "cfg"))["data"] == {"k": "1"}
    api.put("cfg", {"k": "2"})
    clock.now += 29
    assert (await store.get("ns", "cfg"))["data"] == {"k": "1"}  # younger than 30 s
    assert api.calls == 1
    clock.now += 2
    assert (await store.get("ns", "cfg"))["data"] == {"k": "2"}  # the annotation's TTL
    assert api.calls == 2
    # Without the annotation the default TTL (60 s) applies.
    node = node_with_ttl(None)
    api.put("cfg", {"k": "3"})
    clock.now += 31
    assert (await store.get("ns", "cfg"))["data"] == {"k": "2"}
    clock.now += 30
    assert (await store.get("ns", "cfg"))["data"] == {"k": "3"}
    # An annotation of 0: every read goes to the API server.
    node = node_with_ttl("0")
    calls = api.calls
    await store.get("ns", "cfg")
    clock.now += 0.001
    await store.get("ns", "cfg")
    assert api.calls == calls + 2


async def test_object_store_serves_the_last_good_copy_when_a_refresh_fails() -> None:
    api, clock = FakeApi(), Clock()
    store = ObjectStore("secret", api.fetch, default_ttl=10, clock=clock)
    api.put("s", {"k": "v"})
    store.add_reference("ns", "s")
    await store.get("ns", "s")
    api.fail = True
    clock.now += 100
    assert (await store.get("ns", "s"))["data"] == {"k": "v"}
    # Nothing cached yet: the error reaches the caller.
    store.add_reference("ns", "other")
    with pytest.raises(ConnectionError):
        await store.get("ns", "other")


async def test_object_store_missing_objects_references_and_immutability() -> None:
    api, clock = FakeApi(), Clock()
    store = ObjectStore("configmap", api.fetch, default_ttl=10, clock=clock)
    with pytest.raises(LookupError, match="not registered"):
        await store.get("ns", "cfg")
    store.add_reference("ns", "cfg")
    with pytest.raises(NotFoundError, match='configmap "cfg" not found'):
        await store.get("ns", "cfg")
    api.put("cfg", {"k": "1"}, immutable=True)
    clock.now += 11
    assert (await store.get("ns", "cfg"))["data"] == {"k": "1"}
    calls = api.calls
    clock.now += 1000
    await store.get("ns", "cfg")
    assert api.calls == calls  # immutable: never fetched again
    # Reference counted: the second reference keeps it, the last one drops it.
    store.add_reference("ns", "cfg")
    store.delete_reference("ns", "cfg")
    await store.get("ns", "cfg")
    store.delete_reference("ns", "cfg")
    with pytest.raises(LookupError, match="not registered"):
        await store.get("ns", "cfg")


async def test_direct_store_reads_every_time() -> None:
    api = FakeApi()
    store = DirectStore("configmap", api.fetch)
    api.put("cfg", {"k": "1"})
    await store.get("ns", "cfg")
    await store.get("ns", "cfg")
    assert api.calls == 2
    with pytest.raises(NotFoundError):
        await store.get("ns", "absent")


def pod(uid: str, *, volume_cm: str = "", env_secret: str = "") -> V1Pod:
    container = V1Container(name="c", env_from=[V1EnvFromSource(
        config_map_ref=V1ConfigMapEnvSource(name="from-env"))])
    if env_secret:
        container.env = [V1EnvVar(name="X", value_from=V1EnvVarSource(
            secret_key_ref=V1SecretKeySelector(name=env_secret, key="k")))]
    volumes = [V1Volume(name="v", config_map=V1ConfigMapVolumeSource(name=volume_cm))] \
        if volume_cm else []
    return V1Pod(metadata=V1ObjectMeta(name=uid, namespace="ns", uid=uid),
                 spec=V1PodSpec(containers=[container], volumes=volumes))


async def test_manager_reference_counts_across_pods_and_pod_updates() -> None:
    api, clock = FakeApi(), Clock()
    for name in ("a", "b", "from-env"):
        api.put(name, {})
    manager = Manager(ObjectStore("configmap", api.fetch, clock=clock), configmap_names)
    manager.register_pod(pod("p1", volume_cm="a"))
    manager.register_pod(pod("p2", volume_cm="a"))
    manager.register_pod(pod("p1", volume_cm="a"))  # idempotent
    await manager.get_object("ns", "a")
    await manager.get_object("ns", "from-env")
    # p1 now names b instead of a: a stays for p2.
    manager.register_pod(pod("p1", volume_cm="b"))
    await manager.get_object("ns", "a")
    await manager.get_object("ns", "b")
    manager.unregister_pod("p2")
    with pytest.raises(LookupError):
        await manager.get_object("ns", "a")
    manager.unregister_pod(pod("p1"))
    manager.unregister_pod("p1")  # twice: nothing happens
    with pytest.raises(LookupError):
        await manager.get_object("ns", "from-env")


def test_names_a_pod_references() -> None:
    p = pod("p", volume_cm="vol", env_secret="env-secret")
    p.spec.image_pull_secrets = [V1LocalObjectReference(name="pull")]
    p.spec.volumes.append(V1Volume(name="s", secret=V1SecretVolumeSource(secret_name="vol-s")))
    p.spec.volumes.append(V1Volume(name="p", projected=V1ProjectedVolumeSource(sources=[
        V1VolumeProjection(secret=V1SecretProjection(name="proj-s"))])))
    assert configmap_names(p) == {"vol", "from-env"}
    assert secret_names(p) == {"env-secret", "pull", "vol-s", "proj-s"}


def test_ttl_annotation_parsing() -> None:
    assert ttl_from_node(lambda: node_with_ttl("15"))() == 15.0
    assert ttl_from_node(lambda: node_with_ttl("soon"))() is None
    assert ttl_from_node(lambda: None)() is None
