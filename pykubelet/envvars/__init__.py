"""Service environment variables for containers (upstream ``pkg/kubelet/envvars``).

Before cluster DNS, programs found services through Docker-link style
variables, and many still read them: for every Service with a cluster IP in
the pod's namespace (``enableServiceLinks``, on by default) and always for the
``kubernetes`` Service of the ``default`` namespace, a container gets
``<NAME>_SERVICE_HOST``, ``<NAME>_SERVICE_PORT`` (and one per named port) and
the ``<NAME>_PORT*`` link variables, the name upper-cased with ``-`` as ``_``.

``ServiceStore`` is the kubelet's list+watch of every Service (a reflector
store); until its first list has arrived, ``service_env`` refuses, so that no
container starts with part of its variables (upstream's "services have not
yet been read at least once").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes_asyncio.client import V1Pod

from pykubelet.api.kubetypes import is_static_pod

Object = dict[str, Any]

# The services every pod gets variables for, from this namespace.
MASTER_SERVICE_NAMESPACE = "default"
MASTER_SERVICES = frozenset({"kubernetes"})


class ServicesNotSyncedError(RuntimeError):
    pass


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def _is_ip_set(service: Mapping[str, Any]) -> bool:
    ip = (service.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def from_services(services: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The variables of ``services`` (upstream ``envvars.FromServices``), in their order."""
    env: dict[str, str] = {}
    for service in services:
        if not _is_ip_set(service):
            continue
        spec = service.get("spec") or {}
        ip = str(spec["clusterIP"])
        prefix = _env_name(str((service.get("metadata") or {}).get("name") or ""))
        ports = list(spec.get("ports") or [])
        if not ports:
            continue
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for port in ports:
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{_env_name(port['name'])}"] = str(port.get("port"))
        env.update(_link_variables(prefix, ip, ports))
    return env


def _link_variables(prefix: str, ip: str, ports: list[Mapping[str, Any]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for index, port in enumerate(ports):
        protocol = str(port.get("protocol") or "TCP")
        number = str(port.get("port"))
        url = f"{protocol.lower()}://{_host_port(ip, number)}"
        if index == 0:
            env[f"{prefix}_PORT"] = url
        base = f"{prefix}_PORT_{number}_{protocol.upper()}"
        env[base] = url
        env[f"{base}_PROTO"] = protocol.lower()
        env[f"{base}_PORT"] = number
        env[f"{base}_ADDR"] = ip
    return env


def _host_port(ip: str, port: str) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class ServiceStore:
    """Every Service of the cluster, kept by a reflector (``replace``/``add``/...)."""

    def __init__(self) -> None:
        self._services: dict[tuple[str, str], Object] = {}
        self.synced = False

    @staticmethod
    def _key(obj: Object) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def replace(self, objects: list[Object], resource_version: str) -> None:
        self._services = {self._key(obj): obj for obj in objects}
        self.synced = True

    def add(self, obj: Object) -> None:
        self._services[self._key(obj)] = obj

    update = add

    def delete(self, obj: Object) -> None:
        self._services.pop(self._key(obj), None)

    def services(self) -> list[Object]:
        return list(self._services.values())


def service_env_for(store: ServiceStore | None) -> Callable[[V1Pod], dict[str, str]]:
    """``pod`` -> its service variables (upstream ``getServiceEnvVarMap``)."""

    def env_for(pod: V1Pod) -> dict[str, str]:
        if store is None:
            return {}  # standalone: no services to read
        # A static pod must start without the API server (it may be the API server); one
        # from the API waits for the first list, so KUBERNETES_SERVICE_HOST is not missed.
        if not store.synced and not is_static_pod(pod):
            raise ServicesNotSyncedError(
                "services have not yet been read at least once, cannot construct envvars")
        namespace = pod.metadata.namespace or ""
        links = pod.spec.enable_service_links is not False
        chosen: dict[str, Object] = {}
        for service in sorted(store.services(), key=ServiceStore._key):
            if not _is_ip_set(service):
                continue
            service_namespace, name = ServiceStore._key(service)
            if service_namespace == MASTER_SERVICE_NAMESPACE and name in MASTER_SERVICES:
                chosen.setdefault(name, service)
            elif service_namespace == namespace and links:
                chosen[name] = service
        return from_services(chosen[name] for name in sorted(chosen))

    return env_for


__all__ = ["MASTER_SERVICES", "ServiceStore", "ServicesNotSyncedError", "from_services",
           "service_env_for"]
