"""A pod's effective requests and limits with sidecars: what admission, the pod cgroup and
eviction all weigh the pod by."""

from __future__ import annotations

from fractions import Fraction

from kubernetes_asyncio.client import (
    V1Container,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
)

from pykubelet.api.resources import pod_limits, pod_requests


def container(name: str, cpu: str, memory: str, *, sidecar: bool = False) -> V1Container:
    amounts = {"cpu": cpu, "memory": memory}
    return V1Container(name=name, image="busybox",
                       restart_policy="Always" if sidecar else None,
                       resources=V1ResourceRequirements(requests=amounts, limits=amounts))


def pod_with(*, init: list[V1Container], apps: list[V1Container]) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="p", namespace="default", uid="u"),
                 spec=V1PodSpec(init_containers=init, containers=apps))


def test_a_sidecar_with_requests_is_counted_beside_the_app_containers() -> None:
    pod = pod_with(init=[container("proxy", "100m", "64Mi", sidecar=True)],
                   apps=[container("app", "200m", "128Mi")])
    assert pod_requests(pod) == {"cpu": Fraction(3, 10), "memory": Fraction(192 * 2**20)}
    assert pod_limits(pod) == {"cpu": Fraction(3, 10), "memory": Fraction(192 * 2**20)}


def test_an_init_container_after_a_sidecar_runs_beside_it_and_may_set_the_peak() -> None:
    pod = pod_with(init=[container("proxy", "100m", "64Mi", sidecar=True),
                         container("migrate", "500m", "32Mi")],
                   apps=[container("app", "200m", "128Mi")])
    # cpu: the migration beside the sidecar (600m) beats sidecar + app (300m);
    # memory: sidecar + app (192Mi) beats the migration beside the sidecar (96Mi).
    assert pod_requests(pod) == {"cpu": Fraction(6, 10), "memory": Fraction(192 * 2**20)}
