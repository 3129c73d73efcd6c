"""The probe results cache: verdicts per container instance, changes published once."""

from __future__ import annotations

from kubernetes_asyncio.client import V1ObjectMeta, V1Pod

from pykubelet.container import ContainerID, ProbeResult
from pykubelet.prober.results import ResultsManager, ResultUpdate

POD = V1Pod(metadata=V1ObjectMeta(name="web", namespace="default", uid="uid-web"))
FIRST = ContainerID("containerd", "aaa")
SECOND = ContainerID("containerd", "bbb")


def drain(results: ResultsManager) -> list[ResultUpdate]:
    queue = results.updates()
    return [queue.get_nowait() for _ in range(queue.qsize())]


async def test_unknown_container_has_no_verdict() -> None:
    assert ResultsManager().get(FIRST) is None


async def test_set_publishes_only_changes() -> None:
    results = ResultsManager()
    results.set(FIRST, ProbeResult.FAILURE, POD)
    results.set(FIRST, ProbeResult.FAILURE, POD)
    results.set(FIRST, ProbeResult.SUCCESS, POD)
    results.set(FIRST, ProbeResult.SUCCESS, POD)

    assert results.get(FIRST) is ProbeResult.SUCCESS
    assert drain(results) == [ResultUpdate(FIRST, ProbeResult.FAILURE, "uid-web"),
                              ResultUpdate(FIRST, ProbeResult.SUCCESS, "uid-web")]


async def test_instances_are_independent() -> None:
    results = ResultsManager()
    results.set(FIRST, ProbeResult.FAILURE, POD)
    results.set(SECOND, ProbeResult.SUCCESS, POD)

    assert results.get(FIRST) is ProbeResult.FAILURE
    assert results.get(SECOND) is ProbeResult.SUCCESS


async def test_remove_forgets_silently_and_a_later_set_publishes_again() -> None:
    results = ResultsManager()
    results.set(FIRST, ProbeResult.SUCCESS, POD)
    drain(results)

    results.remove(FIRST)
    assert results.get(FIRST) is None
    assert drain(results) == []

    results.set(FIRST, ProbeResult.SUCCESS, POD)
    assert drain(results) == [ResultUpdate(FIRST, ProbeResult.SUCCESS, "uid-web")]
