"""The in-place swap of a node's kubelet, both ways, in short (``testsupport/swap.py``).

A node run by the Go kubelet 1.20 with a pod using emptyDir, configMap, secret,
projected and hostPath volumes, a pod with liveness and readiness probes, a
crash-looping pod and a static pod has the Go kubelet stopped and pykubelet
started with the same configuration file, root and certificate directories,
kubeconfig, containerd, cgroup root and node name; then the way back. What an
operator expects: the same containers (IDs) with the same restart counts, and a
node that goes on working (files kept, live updates, statuses, new pods).
``scripts/swap.sh`` is the long version (about 30 pods, an exclusive CPU).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import V1Container

from pykubelet.api import from_dict
from pykubelet.kuberuntime.hash import hash_container
from testsupport.controlplane import ControlPlane
from testsupport.swap import CRASH_LOOP_POD, Change, Phase, phase_report, swap_node
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.containerd, pytest.mark.controlplane]

# The crash-loop pod's container as the API server serves it, and the hash the Go kubelet
# 1.20 wrote on it (io.kubernetes.container.hash, seen in a swap run): pykubelet adopts
# the Go kubelet's containers only once its hash is the same.
CRASH_LOOP_CONTAINER = {
    "command": ["sh", "-c", "echo crashing; sleep 2; exit 3"],
    "image": "pykubelet.local/busybox:1.35", "imagePullPolicy": "IfNotPresent",
    "name": "app", "resources": {}, "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File"}
GO_120_HASH = 0xC7A4C01D
HASH_MATCHES_120 = hash_container(from_dict(CRASH_LOOP_CONTAINER, V1Container)) == GO_120_HASH
# Besides the crash loop, the one check left out: `kubectl logs` reads /var/log/pods,
# which every Go kubelet on the machine prunes of the pods it does not know.
CHECKS_OF_THE_NODE = ("emptyDir files written before the swap are there",
                      "a configMap update reaches the volumes",
                      "a readiness change is reported", "a new pod starts")


@pytest.fixture(scope="module")
def phases(testbed: Testbed, control_plane: ControlPlane,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Phase]]:
    """Go kubelet -> pykubelet -> Go kubelet on one node: the two phases' records."""
    report_dir = tmp_path_factory.mktemp("swap-report")
    # Short and unique: the cgroup root is named after it.
    base = Path("/tmp") / f"pkswap-{secrets.token_hex(3)}"
    try:
        with swap_node(plane=control_plane, endpoint=testbed.endpoint, base=base / "node",
                       report_dir=report_dir, cpu_manager=False, fillers=0,
                       short=True) as swap:
            found = [swap.swap_to("pykubelet"), swap.swap_to("go")]
            for phase, title in zip(found, ("Go -> pykubelet", "pykubelet -> Go"),
                                    strict=True):
                print(phase_report(phase, title))
            yield found
    finally:
        shutil.rmtree(base, ignore_errors=True)


def adopted(phase: Phase, *, static: bool) -> list[Change]:
    """The containers that must come through unchanged (not the crash loop's), of the
    static pod or of the others."""
    return [c for c in phase.changes if not c.expected_to_restart
            and ("static-web-" in c.pod) == static]


@pytest.mark.xfail(not HASH_MATCHES_120, strict=True,
                   reason="container hash differs until hash.py matches 1.20")
def test_no_container_is_restarted_either_way(phases: list[Phase]) -> None:
    for phase in phases:
        changed = [(c.pod, c.container) for c in adopted(phase, static=False)
                   if not c.unchanged]
        assert not changed, f"to {phase.kind}: restarted or recreated: {changed}"
        assert adopted(phase, static=False)


def test_the_static_pod_is_kept_either_way(phases: list[Phase]) -> None:
    for phase in phases:
        kept = adopted(phase, static=True)
        assert kept and all(c.unchanged for c in kept), f"to {phase.kind}: {kept}"


def test_the_crash_loop_goes_on_counting(phases: list[Phase]) -> None:
    for phase in phases:
        crash = [c for c in phase.changes if c.pod.endswith(f"/{CRASH_LOOP_POD}")]
        assert crash and all(c.before and c.after for c in crash)
        for change in crash:
            assert change.before is not None and change.after is not None
            assert change.after.api_restarts >= change.before.api_restarts
            assert change.same_sandbox


def test_the_node_goes_on_working_after_each_swap(phases: list[Phase]) -> None:
    for phase in phases:
        results = {check.name: check for check in phase.checks}
        failed = {name: results[name].detail for name in CHECKS_OF_THE_NODE
                  if not results[name].ok}
        assert not failed, f"after the swap to {phase.kind}: {failed}"
