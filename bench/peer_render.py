"""The tables ``bench/peer.py`` prints: a row a figure, pykubelet beside the Go kubelet.

Every cell is the median over rounds with the range (``spread``), ``py/Go``
the ratio of the medians, and the pooled single-pod row p50 / p99 over every
run of every round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from bench.harness import API_CLIENT_SETTINGS, client_log_lines, percentile
from bench.peer_figures import K, Pair, Results
from pykubelet.kuberuntime.container import MINIMUM_GRACE_PERIOD_SECONDS

GRACE = f"{MINIMUM_GRACE_PERIOD_SECONDS} s grace"

Row = tuple[str, str, str, str, str]
Format = Callable[[float], str]


def ms(value: float) -> str:
    return f"{value:.0f} ms"


def secs(value: float) -> str:
    return f"{value:.2f} s"


def secs_of_ms(value: float) -> str:
    return secs(value / 1000)


def pct(value: float) -> str:
    return f"{value:.2f} %"


def mib(value: float) -> str:
    return f"{value:.0f} MiB"


def count(value: float) -> str:
    return f"{value:.0f}"


def spread(values: Sequence[float], fmt: Format) -> str:
    """The median over rounds, and the range when there is more than one round."""
    if not values:
        return "-"
    middle = fmt(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} ({fmt(min(values))}-{fmt(max(values))})"


def ratio(py: Sequence[float], go: Sequence[float]) -> str:
    if not py or not go or statistics.median(go) == 0:
        return "-"
    return f"{statistics.median(py) / statistics.median(go):.2f}"


def pooled(samples: Sequence[float]) -> str:
    """p50 / p99 over every run of every round."""
    if not samples:
        return "-"
    return f"{percentile(samples, .5):.0f} / {percentile(samples, .99):.0f} ms"


def compared(label: str, py: Sequence[float], go: Sequence[float], fmt: Format,
             floor: str = "") -> Row:
    """A figure of both kubelets: each one's spread, their ratio, and the floor beside."""
    return (label, spread(py, fmt), spread(go, fmt), ratio(py, go), floor)


def floor_only(floor: str) -> Row:
    return ("", "", "", "", floor)


def kubelet_rows(pair: Pair[K], runs_label: str, runs: int, floor: str,
                 pooled_floor: str) -> list[Row]:
    """The single-pod rows: each round's p50, and all runs pooled."""
    py, go = pair.py, pair.go
    return [compared(f"single pod, {runs_label}, p50 of {runs}", py.single.p50_ms,
                     go.single.p50_ms, ms, floor),
            ("  (all rounds pooled: p50 / p99)", pooled(py.single.ms), pooled(go.single.ms), "",
             pooled_floor)]


def idle_rows(pair: Pair[K], pods: int) -> list[Row]:
    py, go = pair.py, pair.go
    return [compared(f"idle CPU, {pods} pods, % of a core", py.idle_cpu_percent,
                     go.idle_cpu_percent, pct),
            compared(f"RSS, {pods} pods (max over the window)", py.rss_mib, go.rss_mib, mib)]


def killed_early_row(pair: Pair[K], pods: int) -> Row:
    return (f"  of the {pods}, killed within {GRACE}", spread(pair.py.killed_early, count),
            spread(pair.go.killed_early, count), "", f"({GRACE} minimum)")


def table(headers: Row, rows: Sequence[Row]) -> list[str]:
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(5)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in (headers, *rows)]


def headers(results: Results, floor: str) -> Row:
    return ("", "pykubelet", f"Go kubelet {results.go_version}", "py/Go", floor)


def render(results: Results) -> str:
    """Every table of the run, and the footnote on what the client code logged."""
    if not results.standalone.order:  # --cluster-only
        return "\n".join([*render_cluster(results), *client_log_lines(results.client_log)])
    lines = render_standalone(results)
    if results.cluster:
        lines += ["", *render_cluster(results)]
    return "\n".join([*lines, *client_log_lines(results.client_log)])


def render_standalone(results: Results) -> list[str]:
    pair, raw, pods = results.standalone, results.raw, results.pods
    py, go = pair.py, pair.go
    rows: list[Row] = [
        *kubelet_rows(pair, "manifest -> RUNNING", results.runs, spread(raw.single.p50_ms, ms),
                      pooled(raw.single.ms)),
        compared(f"{pods} pods at once -> all RUNNING", py.many_ms, go.many_ms, secs_of_ms,
                 f"{spread(raw.concurrent_ms, secs_of_ms)} concurrent"),
        floor_only(f"{spread(raw.serial_ms, secs_of_ms)} serial"),
        compared(f"delete {pods} pods -> none running/ready", py.delete_ms, go.delete_ms,
                 secs_of_ms, f"{spread(raw.delete_ms, secs_of_ms)} concurrent"),
        killed_early_row(pair, pods),
        compared(f"delete {pods} pods exiting on SIGTERM", py.delete_term_ms, go.delete_term_ms,
                 secs_of_ms, f"{spread(raw.delete_term_ms, secs_of_ms)} concurrent"),
        *idle_rows(pair, results.idle_pods),
        compared("process start -> healthz", py.start_s, go.start_s, secs),
    ]
    return [
        "pykubelet beside the Go kubelet, standalone static pods on one containerd",
        f"  {results.rounds} round(s), order {' | '.join(pair.order)}; median over rounds "
        "(min-max); flags --v=2, syncFrequency 1m, fileCheckFrequency 20s; "
        f"idle window {results.idle_seconds:g} s",
        "",
        *table(headers(results, "raw CRI"), rows),
    ]


def render_cluster(results: Results) -> list[str]:
    pair, raw, api, pods = results.nodes, results.raw, results.api, results.pods
    py, go = pair.py, pair.go
    rows: list[Row] = [
        *kubelet_rows(pair, "API create -> Running in the API", results.runs,
                      f"{spread(raw.single.p50_ms, ms)} CRI",
                      f"{spread(api.create.p50_ms, ms)} API create"),
        compared("  of which API create -> container RUNNING, p50", py.single_runtime_p50_ms,
                 go.single_runtime_p50_ms, ms),
        compared(f"{pods} pods created at once -> all Running in the API", py.many_ms,
                 go.many_ms, secs_of_ms,
                 f"{spread(raw.concurrent_ms, secs_of_ms)} CRI concurrent"),
        floor_only(f"{spread(api.many_create_ms, secs_of_ms)} {pods} API creates"),
        compared(f"API delete of {pods} pods -> none running/ready", py.delete_ms, go.delete_ms,
                 secs_of_ms, f"{spread(api.many_delete_ms, secs_of_ms)} {pods} API deletes"),
        killed_early_row(pair, pods),
        *idle_rows(pair, pods),
        compared("process start -> Node Ready in the API", py.start_s, go.start_s, secs),
    ]
    return [
        f"the same two kubelets as nodes of one control plane ({results.server_version}), "
        f"pods bound with spec.nodeName (no scheduler); both kubelets {API_CLIENT_SETTINGS}",
        f"  {results.rounds} round(s), order {' | '.join(pair.order)}; "
        "Running seen through an admin watch; node status every 10 s (default); "
        f"idle window {results.idle_seconds:g} s",
        "",
        *table(headers(results, "floor"), rows),
    ]
