"""Service-link environment variables (upstream ``envvars``) from a service store."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import V1ObjectMeta, V1Pod, V1PodSpec

from pykubelet.envvars import ServicesNotSyncedError, ServiceStore, from_services, service_env_for


def service(namespace: str, name: str, ip: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name},
            "spec": {"clusterIP": ip, "ports": list(ports)}}


def pod(namespace: str, links: bool | None = None, source: str = "api") -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="p", namespace=namespace,
                                       annotations={"kubernetes.io/config.source": source}),
                 spec=V1PodSpec(containers=[], enable_service_links=links))


def test_variables_of_one_service() -> None:
    env = from_services([service("shop", "redis-main", "10.0.0.11",
                                 {"name": "db", "port": 6379},
                                 {"name": "metrics", "port": 9121, "protocol": "UDP"})])
    assert env == {
        "REDIS_MAIN_SERVICE_HOST": "10.0.0.11",
        "REDIS_MAIN_SERVICE_PORT": "6379",
        "REDIS_MAIN_SERVICE_PORT_DB": "6379",
        "REDIS_MAIN_SERVICE_PORT_METRICS": "9121",
        "REDIS_MAIN_PORT": "tcp://10.0.0.11:6379",
        "REDIS_MAIN_PORT_6379_TCP": "tcp://10.0.0.11:6379",
        "REDIS_MAIN_PORT_6379_TCP_PROTO": "tcp",
        "REDIS_MAIN_PORT_6379_TCP_PORT": "6379",
        "REDIS_MAIN_PORT_6379_TCP_ADDR": "10.0.0.11",
        "REDIS_MAIN_PORT_9121_UDP": "udp://10.0.0.11:9121",
        "REDIS_MAIN_PORT_9121_UDP_PROTO": "udp",
        "REDIS_MAIN_PORT_9121_UDP_PORT": "9121",
        "REDIS_MAIN_PORT_9121_UDP_ADDR": "10.0.0.11",
    }
    v6 = from_services([service("a", "web", "fd00::1", {"port": 80})])
    assert v6["WEB_PORT"] == "tcp://[fd00::1]:80"
    assert from_services([service("a", "headless", "None", {"port": 80})]) == {}


def test_which_services_a_pod_gets() -> None:
    store = ServiceStore()
    env_for = service_env_for(store)
    with pytest.raises(ServicesNotSyncedError):
        env_for(pod("shop"))
    # A static pod does not wait for the API server (it may be the API server).
    assert env_for(pod("kube-system", source="file")) == {}
    store.replace([service("default", "kubernetes", "10.0.0.1", {"name": "https", "port": 443}),
                   service("shop", "web", "10.0.0.2", {"port": 80}),
                   service("other", "db", "10.0.0.3", {"port": 5432})], "1")
    env = env_for(pod("shop"))
    assert env["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"
    assert env["WEB_SERVICE_HOST"] == "10.0.0.2"
    assert "DB_SERVICE_HOST" not in env  # another namespace
    # enableServiceLinks: false keeps only the master service.
    env = env_for(pod("shop", links=False))
    assert "WEB_SERVICE_HOST" not in env and env["KUBERNETES_SERVICE_PORT"] == "443"
    # A service of the pod's namespace named like the master service wins.
    store.add(service("shop", "kubernetes", "10.0.0.9", {"port": 8443}))
    assert env_for(pod("shop"))["KUBERNETES_SERVICE_HOST"] == "10.0.0.9"
    store.delete(service("shop", "web", "", {"port": 80}))
    assert "WEB_SERVICE_HOST" not in env_for(pod("shop"))
    assert service_env_for(None)(pod("shop")) == {}
