"""What ``bench/peer.py`` measures: its figure types, every field declared once.

Each figure is a list with one entry per round (the single-pod runs also
pooled over all rounds), so that the tables can show the median over rounds
with the range. The sides share what they measure through the class tree:

- ``Figures``: every side, the raw CRI floor as much as either kubelet
  (single pod, deletion of N pods);
- ``StandaloneFigures``: the standalone part's sides (raw CRI and the
  standalone kubelets), which also delete N pods exiting on SIGTERM;
- ``KubeletFigures``: a kubelet, standalone or as a node (its start, N pods at
  once, the pods killed early, idle CPU and RSS);
- ``RawFigures``, ``SideFigures`` and ``ClusterSideFigures`` add what only
  their side measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from bench.harness import percentile

PYKUBELET = "pykubelet"
GO = "go"


@dataclass
class Singles:
    """One pod at a time, ``--runs`` times a round: every run, and each round's p50 (ms)."""

    ms: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)

    def add_round(self, runs: Sequence[float]) -> None:
        self.ms += runs
        self.p50_ms.append(percentile(runs, 0.5))


@dataclass
class Figures:
    """What every side measures: one pod at a time, and N pods deleted at once until none
    is running or ready (ms)."""

    single: Singles = field(default_factory=Singles)
    delete_ms: list[float] = field(default_factory=list)


@dataclass
class StandaloneFigures(Figures):
    """The standalone part's sides (raw CRI and the kubelets without an API server)."""

    # The pods' process exits on SIGTERM: no grace period to wait out.
    delete_term_ms: list[float] = field(default_factory=list)


@dataclass
class RawFigures(StandaloneFigures):
    """The raw CRI floor: N pods started one after another and all at once (ms)."""

    serial_ms: list[float] = field(default_factory=list)
    concurrent_ms: list[float] = field(default_factory=list)


@dataclass
class KubeletFigures(Figures):
    """What both modes measure of one kubelet."""

    # Process start until the kubelet is ready: ``/healthz`` answers ``ok`` standalone,
    # the API shows its Node Ready as a node.
    start_s: list[float] = field(default_factory=list)
    many_ms: list[float] = field(default_factory=list)
    # Of the pods deleted (whose sleep ignores SIGTERM), how many had no running
    # container within MINIMUM_GRACE_PERIOD_SECONDS of their deletion: a kubelet that
    # honours the grace period cannot have killed any so soon.
    killed_early: list[float] = field(default_factory=list)
    idle_cpu_percent: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)


@dataclass
class SideFigures(KubeletFigures, StandaloneFigures):
    """One standalone kubelet's figures."""


@dataclass
class ClusterSideFigures(KubeletFigures):
    """One kubelet's figures as a node of the control plane."""

    # API create until the container started in the runtime, each round's p50.
    single_runtime_p50_ms: list[float] = field(default_factory=list)


@dataclass
class ApiFloor:
    """The API server's own share: the calls the benchmark makes, answered (both sides)."""

    create: Singles = field(default_factory=Singles)
    many_create_ms: list[float] = field(default_factory=list)
    many_delete_ms: list[float] = field(default_factory=list)


K = TypeVar("K", bound=KubeletFigures)


@dataclass
class Pair(Generic[K]):
    """The two kubelets of one part, and the order they ran in, round by round."""

    py: K
    go: K
    order: list[str] = field(default_factory=list)

    def of(self, side: str) -> K:
        return self.go if side == GO else self.py

    def start_round(self, round_index: int) -> list[str]:
        """This round's sides in their order (alternating from round to round), recorded."""
        sides = [PYKUBELET, GO] if round_index % 2 == 0 else [GO, PYKUBELET]
        self.order.append(", ".join(sides))
        return sides


def standalone_pair() -> Pair[SideFigures]:
    return Pair(SideFigures(), SideFigures())


def cluster_pair() -> Pair[ClusterSideFigures]:
    return Pair(ClusterSideFigures(), ClusterSideFigures())


@dataclass
class Results:
    rounds: int
    runs: int
    pods: int
    idle_pods: int
    idle_seconds: float
    go_version: str = ""
    raw: RawFigures = field(default_factory=RawFigures)
    standalone: Pair[SideFigures] = field(default_factory=standalone_pair)
    cluster: bool = False
    server_version: str = ""
    nodes: Pair[ClusterSideFigures] = field(default_factory=cluster_pair)
    api: ApiFloor = field(default_factory=ApiFloor)
    client_log: dict[str, int] = field(default_factory=dict)
