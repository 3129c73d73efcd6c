"""``bench/soak.py --events-sample``: the events table a reader compares between kubelets."""

from __future__ import annotations

from bench.peer_figures import GO, PYKUBELET
from bench.soak import PodEvent, SideResult, events_tables

UID = "2f9b04db-dd88-42b0-ac27-f25fb66486bb"


def side(name: str, events: list[PodEvent]) -> SideResult:
    result = SideResult(name, 1.0, 2.0)
    result.pod_kinds = {"soak-0": "plain", "soak-1": "restarting", "soak-2": "plain"}
    result.events = events
    return result


def event(pod: str, reason: str, message: str, count: int = 1) -> PodEvent:
    return PodEvent(pod=pod, type="Normal", reason=reason, message=message, count=count,
                    field_path="spec.containers{main}", component="kubelet")


def test_events_per_pod_by_kind_and_reason_and_the_sampled_pods_events() -> None:
    py = side(PYKUBELET, [
        event("soak-0", "Started", "Started container main"),
        event("soak-2", "Started", "Started container main"),
        event("soak-0", "Killing", "Stopping container main"),
        event("soak-1", "BackOff", f"Back-off restarting failed container main in pod "
                                   f"soak-1_ns({UID})", count=3),
    ])
    go = side(GO, [event("soak-0", "Killing", "Stopping container main", count=2)])
    text = "\n".join(events_tables([py, go], sample=1))
    lines = text.splitlines()
    assert lines[0].startswith("events of pykubelet's pods (4 Event objects, 6 counted, "
                               "for 3 pods")
    plain_started = next(line for line in lines if "plain" in line and "Started " in line)
    assert plain_started.split()[2:4] == ["1.00", "1.00"]  # 2 events over 2 plain pods
    backoff = next(line for line in lines if "BackOff" in line)
    assert backoff.split()[2:4] == ["1.00", "3.00"]
    assert "in pod <pod>" in backoff  # one row whatever the pod's name and UID
    assert "soak-0, plain: Normal Killing x2 spec.containers{main}: Stopping container main" \
        in text
    assert "soak-1," not in text.split("events of Go kubelet's pods")[1]
