"""What a removed pod leaves in the runtime goes within seconds, not at the GC's next pass.

A standalone pykubelet on the testbed's containerd runs a static pod; its
manifest is removed. The pod's containers and sandbox must go from the
runtime, and the pod from the kubelet's pod cache and PLEG records, well
within the container GC's period: the Go kubelet 1.20 leaves nothing within
seconds, so a churn followed by a short quiet must find nothing either.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykubelet.kuberuntime.gc import CONTAINER_GC_PERIOD
from pykubelet.kuberuntime.labels import POD_UID_LABEL
from testsupport.kubelet_process import (
    TERM_EXITING_COMMAND,
    KubeletProcess,
    busybox_pod,
    runtime_view,
)
from testsupport.soak import kubelet_metrics, read_metric
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

# Stopping (a 2 s grace at most), a relist, a housekeeping and the removals: seconds.
LEFTOVER_WINDOW = 20.0


def process_age(pid: int) -> float:
    """Seconds since ``pid`` started (from /proc: its start tick against the uptime)."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    started = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def test_a_removed_static_pod_leaves_nothing_before_the_next_gc_pass(
        kubelet: KubeletProcess, testbed: Testbed) -> None:
    path = kubelet.write_pod(busybox_pod(
        "leftovers",
        [{"name": "quits", "command": list(TERM_EXITING_COMMAND)},
         # A shell as PID 1 ignores SIGTERM: this one is killed at the end of the grace.
         {"name": "stays", "command": ["sh", "-c", "sleep 3600"]}],
        testbed.busybox_image, terminationGracePeriodSeconds=2))
    kubelet.wait_phase("leftovers", "Running")
    uid = kubelet.pod("leftovers")["metadata"]["uid"]  # type: ignore[index]
    path.unlink()

    def left_in_runtime() -> list[str]:
        view = runtime_view(kubelet.endpoint)
        return ([f"sandbox {s.id}" for s in view["sandboxes"] if s.metadata.uid == uid]
                + [f"container {c.id}" for c in view["containers"]
                   if c.labels.get(POD_UID_LABEL) == uid])

    kubelet.wait_for(lambda: not left_in_runtime(), LEFTOVER_WINDOW,
                     "no sandbox or container of the removed pod in the runtime")
    # The GC's first pass ran at start-up, before the pod existed; its next one comes a
    # period after that. Had it come already, it could have done the removals.
    assert kubelet.process is not None
    assert process_age(kubelet.process.pid) < CONTAINER_GC_PERIOD, (
        "too slow a start to tell the deletor from the GC's second pass")

    def tables() -> dict[str, float | None]:
        text = kubelet_metrics(kubelet)
        return {table: read_metric(text, "pykubelet_tracked_pods", f'table="{table}"')
                for table in ("pod_cache", "pleg")}

    kubelet.wait_for(lambda: tables() == {"pod_cache": 0, "pleg": 0}, LEFTOVER_WINDOW,
                     "the pod gone from the pod cache and the PLEG's records")
