"""bench/audit.py: a kubelet's requests as the API server's audit log records them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import audit


def audit_line(*, verb: str, resource: str = "", subresource: str = "", name: str = "",
               namespace: str = "", user: str = "system:node:n1", at: str = "12:00:00.000000",
               code: int = 200, stage: str = "ResponseComplete",
               uri: str = "/api/v1/x") -> str:
    event: dict[str, Any] = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "stage": stage, "requestURI": uri, "verb": verb,
        "user": {"username": user, "groups": ["system:nodes", "system:authenticated"]},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": f"2026-11-29T{at}Z",
        "stageTimestamp": f"2026-11-29T{at}Z"}
    if resource:
        ref = {"resource": resource, "apiVersion": "v1"}
        for key, value in (("subresource", subresource), ("name", name),
                           ("namespace", namespace)):
            if value:
                ref[key] = value
        event["objectRef"] = ref
    return json.dumps(event)


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-29T{clock}+00:00")


def write_log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "audit.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_requests_are_counted_by_verb_and_resource_with_subresources(tmp_path: Path) -> None:
    log = write_log(tmp_path, [
        audit_line(verb="get", resource="pods", name="a", namespace="ns"),
        audit_line(verb="patch", resource="pods", subresource="status", name="a",
                   namespace="ns"),
        audit_line(verb="get", resource="pods", name="b", namespace="ns", code=404),
        audit_line(verb="watch", resource="configmaps", namespace="ns"),
        audit_line(verb="get", uri="/api?timeout=32s"),
    ])
    assert audit.count(audit.read_log(log)) == {
        "get pods": 2, "patch pods/status": 1, "watch configmaps": 1, "get /api": 1}


def test_only_completed_requests_count_and_a_line_cut_short_is_skipped(tmp_path: Path) -> None:
    complete = audit_line(verb="get", resource="pods", name="a")
    log = write_log(tmp_path, [
        audit_line(verb="watch", resource="pods", stage="ResponseStarted"),
        complete,
        complete[:40],  # the server was still writing it
    ])
    assert audit.count(audit.read_log(log)) == {"get pods": 1}


def test_the_window_and_the_user_select_one_kubelets_share(tmp_path: Path) -> None:
    requests = audit.read_log(write_log(tmp_path, [
        audit_line(verb="get", resource="pods", at="11:59:59.999999"),
        audit_line(verb="get", resource="pods", at="12:00:00.000000"),
        audit_line(verb="get", resource="pods", at="12:00:00.000000", user="system:node:n2"),
        audit_line(verb="patch", resource="nodes", subresource="status",
                   at="12:00:09.500000"),
        audit_line(verb="get", resource="pods", at="12:00:10.000000"),
    ]))
    chosen = audit.select(requests, user=audit.node_user("n1"), since=at("12:00:00"),
                          until=at("12:00:10"))
    assert audit.count(chosen) == {"get pods": 1, "patch nodes/status": 1}
    assert audit.count_by_user(requests)["system:node:n2"] == {"get pods": 1}


def test_each_pods_requests_are_listed_in_order() -> None:
    requests = [audit.parse_line(line) for line in (
        audit_line(verb="patch", resource="pods", subresource="status", name="a",
                   namespace="ns", at="12:00:01.000000"),
        audit_line(verb="get", resource="pods", name="a", namespace="ns", at="12:00:00.500000"),
        audit_line(verb="get", resource="nodes", name="n1", at="12:00:00.700000"),
    )]
    sequences = audit.pod_sequences(r for r in requests if r is not None)
    assert [r.kind for r in sequences["ns/a"]] == ["get pods", "patch pods/status"]
    assert list(sequences) == ["ns/a"]


METRICS = """\
# HELP apiserver_watch_events_total [ALPHA] Number of events sent in watch clients
# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",kind="Pod",version="v1"} 120
apiserver_watch_events_total{group="coordination.k8s.io",kind="Lease",version="v1"} 7
apiserver_watch_events_sizes_bucket{group="",kind="Pod",version="v1",le="1024"} 3
"""


def test_watch_events_are_read_by_kind_and_their_growth_computed() -> None:
    before = audit.watch_events(METRICS)
    assert before == {"Pod": 120.0, "Lease": 7.0}
    after = audit.watch_events(METRICS.replace("} 120", "} 180").replace(
        'kind="Lease",version="v1"} 7', 'kind="Lease",version="v1"} 7\n'
        'apiserver_watch_events_total{group="",kind="Node",version="v1"} 4'))
    assert audit.delta(after, before) == {"Pod": 60.0, "Node": 4.0}


def test_the_table_gives_per_pod_figures_and_the_ratio_of_two_kubelets() -> None:
    py = audit.Column("pykubelet", 10, {"get pods": 30, "patch pods/status": 20}, {"Pod": 50.0})
    go = audit.Column("Go kubelet", 10, {"get pods": 20, "patch pods/status": 20}, {"Pod": 40.0})
    lines = audit.per_pod_table([py, go])
    get_row = next(line for line in lines if "get pods" in line).split()
    assert get_row[-3:] == ["3.00", "2.00", "1.50"]
    total = next(line for line in lines if "all requests" in line).split()
    assert total[-3:] == ["5.00", "4.00", "1.25"]
    pods = next(line for line in lines if line.strip().startswith("Pod")).split()
    assert pods[-3:] == ["5.00", "4.00", "1.25"]


def test_watch_event_kinds_of_little_weight_share_one_row() -> None:
    py = audit.Column("pykubelet", 100, {}, {"Pod": 500.0, "Role": 1.0, "Secret": 2.0})
    go = audit.Column("Go kubelet", 100, {}, {"Pod": 400.0, "Role": 2.0})
    lines = audit.per_pod_table([py, go])
    assert not any(line.strip().startswith(("Role", "Secret")) for line in lines)
    other = next(line for line in lines if "2 other kinds" in line).split()
    assert other[-3:] == ["0.03", "0.02", "1.50"]


def test_timestamps_are_read_as_utc() -> None:
    request = audit.parse_line(audit_line(verb="get", resource="pods", at="12:00:01.250000"))
    assert request is not None
    assert request.received == datetime(2026, 11, 29, 12, 0, 1, 250000, tzinfo=UTC)


def test_the_soak_prints_each_kubelets_requests_per_pod_beside_the_other() -> None:
    from bench.soak import SideResult, Window, per_pod_table

    def side(name: str, gets: int) -> SideResult:
        window = Window(0.0, 60.0, cpu_percent=10.0, latencies_ms=[100.0, 300.0])
        return SideResult(name, 1.0, 2.0, windows=[window], pods_created=120,
                          requests={"get pods": gets, "patch pods/status": 240},
                          watch_events={"Pod": 2400.0})

    lines = per_pod_table([side("pykubelet", 360), side("go", 240)])
    assert next(line for line in lines if "get pods" in line).split()[-3:] == [
        "3.00", "2.00", "1.50"]
    assert next(line for line in lines if "CPU seconds" in line).split()[-3:] == [
        "0.050", "0.050", "1.00"]
    header = lines[1].split()
    assert header == ["pykubelet", "Go", "kubelet", "py/Go"]


def test_without_an_audit_log_the_soak_says_so() -> None:
    from bench.soak import SideResult, per_pod_table

    lines = per_pod_table([SideResult("pykubelet", 1.0, 2.0, pods_created=10)])
    assert any("no audit log" in line for line in lines)
