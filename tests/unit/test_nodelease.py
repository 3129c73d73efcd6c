"""The node lease controller against a fake lease API at its seam (the real API server test
is tests/integration/test_cluster_node.py)."""

from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

from kubernetes_asyncio.client import ApiException

from pykubelet.nodelease import NodeLeaseController, micro_time, renew_interval_for

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)


class FakeLeases:
    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.node_uid_value: str | None = "node-uid-1"
        self.calls: list[str] = []
        self.fail_replace: list[int] = []
        self.version = 0

    def _bump(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        lease = copy.deepcopy(lease)
        lease["metadata"]["resourceVersion"] = str(self.version)
        self.stored = lease
        return copy.deepcopy(lease)

    async def read(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("get")
        if self.stored is None:
            raise ApiException(status=404, reason="NotFound")
        return copy.deepcopy(self.stored)

    async def create(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("create")
        assert namespace == "kube-node-lease"
        return self._bump(lease)

    async def replace(self, namespace: str, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("update")
        if self.fail_replace:
            raise ApiException(status=self.fail_replace.pop(0), reason="injected")
        if self.stored is None:
            raise ApiException(status=404, reason="NotFound")
        if lease["metadata"].get("resourceVersion") != self.stored["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        return self._bump(lease)

    async def node_uid(self, name: str) -> str:
        self.calls.append("get-node")
        if self.node_uid_value is None:
            raise ApiException(status=404, reason="NotFound")
        return self.node_uid_value


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def controller(api: FakeLeases, clock: Clock, failures: list[int] | None = None
               ) -> NodeLeaseController:
    on_failure = (lambda: failures.append(1)) if failures is not None else None
    return NodeLeaseController(api, "n1", 40, on_repeated_heartbeat_failure=on_failure,
                               clock=clock, sleep=no_sleep)


def test_renew_interval_is_a_quarter_of_the_duration() -> None:
    assert renew_interval_for(40) == 10.0
    assert controller(FakeLeases(), Clock()).renew_interval == 10.0


def test_micro_time_has_six_digits() -> None:
    assert micro_time(T0) == "2024-05-01T12:00:00.123456Z"
    assert micro_time(T0.replace(microsecond=0)) == "2024-05-01T12:00:00.000000Z"


async def test_creates_then_renews_without_reading() -> None:
    api, clock = FakeLeases(), Clock()
    c = controller(api, clock)
    await c.sync()
    assert api.calls == ["get", "get-node", "create"]
    lease = api.stored
    assert lease is not None
    assert lease["spec"] == {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                             "renewTime": "2024-05-01T12:00:00.123456Z"}
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid-1"}]
    api.calls.clear()
    clock.now += datetime.timedelta(seconds=10)
    await c.sync()
    assert api.calls == ["update"]
    assert api.stored["spec"]["renewTime"] == "2024-05-01T12:00:10.123456Z"


async def test_no_lease_until_the_node_exists() -> None:
    api, clock = FakeLeases(), Clock()
    api.node_uid_value = None
    c = controller(api, clock)
    await c.sync()
    assert api.stored is None
    api.node_uid_value = "later"
    await c.sync()
    assert api.stored["metadata"]["ownerReferences"][0]["uid"] == "later"


async def test_conflict_reads_the_lease_again() -> None:
    api, clock = FakeLeases(), Clock()
    c = controller(api, clock)
    await c.sync()
    api.stored["metadata"]["resourceVersion"] = "99"  # someone else wrote it
    api.calls.clear()
    await c.sync()
    assert api.calls == ["update", "get", "update"]
    assert api.stored["metadata"]["resourceVersion"] != "99"


async def test_repeated_failures_call_the_heartbeat_failure_hook() -> None:
    api, clock, failures = FakeLeases(), Clock(), []
    c = controller(api, clock, failures)
    await c.sync()
    api.fail_replace = [500] * 5
    api.calls.clear()
    await c.sync()
    # five failed updates from the cached lease, then a read and a good update
    assert api.calls == ["update"] * 5 + ["get", "update"]
    assert len(failures) == 4


async def test_deleted_lease_is_created_again() -> None:
    api, clock = FakeLeases(), Clock()
    c = controller(api, clock)
    await c.sync()
    api.stored = None  # garbage collected with its Node
    await c.sync()
    assert api.stored is not None
    assert api.calls.count("create") == 2
