"""The API server's own count of a kubelet's requests: its audit log, read back.

``scripts/testbed/controlplane.sh`` with ``PYKUBELET_CONTROLPLANE_AUDIT=1``
makes kube-apiserver log every request of a user in group ``system:nodes``
(each kubelet is ``system:node:<name>``) at level Metadata, one JSON line per
request once its answer completed (``ResponseComplete``; a watch's line is
written when the watch ends). This module reads such a log and counts it by
user, verb and resource (``get pods``, ``patch pods/status``, ``watch
configmaps``...) over a time window, so a benchmark can set the kubelets side
by side on what the server received rather than on what a kubelet says it
sent; and it reads the server's ``apiserver_watch_events_total`` counters,
the watch events it sent, by kind.

As a command it prints one node's counts and, with ``--namespace``, each
pod's requests in order with their times::

    python -m bench.audit /tmp/pkcp-*/logs/audit.log --user system:node:NAME --namespace NS
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

# The environment setting that turns the audit log on in controlplane.sh, and the
# key of its path in the plane's env file.
AUDIT_SETTING = "PYKUBELET_CONTROLPLANE_AUDIT"
AUDIT_LOG_KEY = "AUDIT_LOG"
COMPLETE = "ResponseComplete"
WATCH_EVENTS_METRIC = "apiserver_watch_events_total"
# Watch event kinds below this per pod for every kubelet (the other controllers' own
# traffic: RBAC objects, API services...) are summed in one row.
MINOR_KIND_PER_POD = 0.05


@dataclass(frozen=True)
class Request:
    """One audited request: who, what, on which object, when, and the answer's code."""

    user: str
    verb: str
    # ``pods``, ``pods/status``; for a path outside the resource API, the path itself.
    resource: str
    namespace: str
    name: str
    code: int
    received: datetime
    completed: datetime

    @property
    def kind(self) -> str:
        """``verb resource``: the key requests are counted by."""
        return f"{self.verb} {self.resource}"


def parse_line(line: str) -> Request | None:
    """A request from one line of the log; None for another stage, or a line cut short
    (the server may be writing the last line as it is read)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("stage") != COMPLETE:
        return None
    ref = event.get("objectRef") or {}
    if ref.get("resource"):
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    else:
        resource = str(event.get("requestURI", "?")).split("?", 1)[0]
    return Request(
        user=str((event.get("user") or {}).get("username", "")),
        verb=str(event.get("verb", "")),
        resource=resource,
        namespace=str(ref.get("namespace", "")),
        name=str(ref.get("name", "")),
        code=int((event.get("responseStatus") or {}).get("code", 0)),
        received=datetime.fromisoformat(event["requestReceivedTimestamp"]),
        completed=datetime.fromisoformat(event["stageTimestamp"]))


def read_log(path: Path) -> list[Request]:
    """Every completed request in the log at ``path``, in the order written."""
    with path.open(encoding="utf-8") as lines:
        return [request for line in lines if (request := parse_line(line)) is not None]


def select(requests: Iterable[Request], *, user: str | None = None,
           since: datetime | None = None, until: datetime | None = None,
           namespace: str | None = None) -> Iterator[Request]:
    """The requests of ``user`` received in [since, until) (and in ``namespace``)."""
    for request in requests:
        if user is not None and request.user != user:
            continue
        if since is not None and request.received < since:
            continue
        if until is not None and request.received >= until:
            continue
        if namespace is not None and request.namespace != namespace:
            continue
        yield request


def count(requests: Iterable[Request]) -> collections.Counter[str]:
    """How many of each ``verb resource``."""
    return collections.Counter(request.kind for request in requests)


def count_by_user(requests: Iterable[Request]) -> dict[str, collections.Counter[str]]:
    by_user: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for request in requests:
        by_user[request.user][request.kind] += 1
    return dict(by_user)


def node_user(node_name: str) -> str:
    """The user name a kubelet with the node credential ``node_name`` is audited as."""
    return f"system:node:{node_name}"


def watch_events(metrics_text: str) -> dict[str, float]:
    """``apiserver_watch_events_total`` by kind (``Pod``, ``Node``...), from the API
    server's ``/metrics``: the watch events it sent to every watcher."""
    totals: dict[str, float] = collections.defaultdict(float)
    for line in metrics_text.splitlines():
        if not line.startswith(WATCH_EVENTS_METRIC + "{"):
            continue
        labels, _, value = line.rpartition(" ")
        kind = next((part.split("=", 1)[1].strip('"') for part in
                     labels[len(WATCH_EVENTS_METRIC) + 1:].rstrip("}").split(",")
                     if part.startswith("kind=")), "?")
        totals[kind] += float(value)
    return dict(totals)


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """What each counter grew by (a kind missing before counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()
            if value - before.get(key, 0.0)}


# --- the table ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    """One kubelet's figures: requests and watch events over a window of ``pods`` lifecycles."""

    label: str
    pods: int
    requests: Mapping[str, int]
    watch_events: Mapping[str, float]


def _ratio(py: float, go: float) -> str:
    return f"{py / go:.2f}" if go else "-"


def per_pod_table(columns: Sequence[Column], *, width: int = 34,
                  header: bool = True) -> list[str]:
    """Requests by ``verb resource`` and watch events by kind, per pod lifecycle, a column a
    kubelet, and the first over the second (``py/Go``) when there are two; ``header``: a
    line naming the columns first (off when the rows continue a table)."""
    keys = sorted({key for column in columns for key in column.requests})
    kinds = sorted({kind for column in columns for kind in column.watch_events})
    width = max([width, *(len(k) + 4 for k in keys)])
    lines = []
    if header:
        lines.append(f"  {'per pod lifecycle':{width}}"
                     + "".join(f"{c.label:>14}" for c in columns)
                     + (f"{'py/Go':>8}" if len(columns) == 2 else ""))

    def row(label: str, values: Sequence[float]) -> str:
        text = f"  {label:{width}}" + "".join(f"{value:14.2f}" for value in values)
        if len(values) == 2:
            text += f"{_ratio(values[0], values[1]):>8}"
        return text

    def per_pod(value: float, column: Column) -> float:
        return value / column.pods if column.pods else float("nan")

    lines.append("  API requests (audit log of the API server, user system:node:<node>)")
    for key in keys:
        lines.append(row(f"  {key}", [per_pod(c.requests.get(key, 0), c) for c in columns]))
    lines.append(row("  all requests", [per_pod(sum(c.requests.values()), c) for c in columns]))
    lines.append("  watch events sent (API server's apiserver_watch_events_total, all watchers)")
    shown = [kind for kind in kinds if any(
        per_pod(c.watch_events.get(kind, 0.0), c) >= MINOR_KIND_PER_POD for c in columns)]
    for kind in shown:
        lines.append(row(f"  {kind}", [per_pod(c.watch_events.get(kind, 0.0), c)
                                       for c in columns]))
    if minor := [kind for kind in kinds if kind not in shown]:
        lines.append(row(f"  {len(minor)} other kinds", [
            per_pod(sum(c.watch_events.get(kind, 0.0) for kind in minor), c)
            for c in columns]))
    lines.append(row("  all kinds", [per_pod(sum(c.watch_events.values()), c) for c in columns]))
    return lines


# --- the command ----------------------------------------------------------------------------------

def pod_sequences(requests: Iterable[Request]) -> dict[str, list[Request]]:
    """Each pod's requests (``pods`` and its subresources, by name) in the order received."""
    by_pod: dict[str, list[Request]] = collections.defaultdict(list)
    for request in requests:
        if request.resource.split("/")[0] == "pods" and request.name:
            by_pod[f"{request.namespace}/{request.name}"].append(request)
    return {pod: sorted(seq, key=lambda r: r.received) for pod, seq in by_pod.items()}


def render_sequences(sequences: Mapping[str, Sequence[Request]]) -> list[str]:
    lines = []
    for pod, seq in sorted(sequences.items(), key=lambda item: item[1][0].received):
        lines.append(f"{pod}: {len(seq)} requests")
        start = seq[0].received
        for request in seq:
            offset = (request.received - start).total_seconds()
            lines.append(f"  {request.received.strftime('%H:%M:%S.%f')[:-3]}  +{offset:7.3f} s  "
                         f"{request.kind:24} {request.code}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Count a kubelet's requests in an API "
                                                 "server audit log.")
    parser.add_argument("log", type=Path)
    parser.add_argument("--user", help="system:node:NAME (default: every user, apart)")
    parser.add_argument("--namespace", help="also list each pod of this namespace's requests")
    parser.add_argument("--since", type=datetime.fromisoformat,
                        help="received at or after (ISO 8601, with its zone)")
    parser.add_argument("--until", type=datetime.fromisoformat,
                        help="received before (ISO 8601, with its zone)")
    args = parser.parse_args(argv)
    requests = list(select(read_log(args.log), user=args.user, since=args.since,
                           until=args.until))
    for user, counts in sorted(count_by_user(requests).items()):
        print(f"{user}: {sum(counts.values())} requests")
        for key, value in sorted(counts.items()):
            print(f"  {key:32} {value}")
    if args.namespace:
        print("\n".join(render_sequences(pod_sequences(
            select(requests, namespace=args.namespace)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
