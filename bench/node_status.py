"""What keeping a node alive in a cluster costs pykubelet at idle: API requests and CPU.

A real control plane (testsupport/controlplane.py) and a private containerd
(testsupport/testbed.py); one pykubelet joins as a node with a node credential and
runs ``--pods`` static pods (busybox ``sleep``), on upstream's defaults:
``nodeStatusUpdateFrequency`` 10s, ``nodeStatusReportFrequency`` 5m,
``nodeLeaseDurationSeconds`` 40, ``--v=2``. Once the node is Ready and the pods
run, over ``--idle-seconds``:

- API requests per minute, by resource and verb, from the kubelet's own
  ``pykubelet_api_client_requests_total`` on ``/metrics``; the node lease
  (``leases`` PUT) is the heartbeat, the node status is written only when it
  changes or every 5 minutes, and its first read comes from the watched cache;
- the kubelet's CPU (user + system, all threads) as a percentage of one core;
- the same pods in standalone mode (no API server) on the same containerd,
  measured the same way: the difference is what cluster mode adds.

Upstream v1.20 on the same defaults would send 6 lease PUTs, 6 node GETs
(served from the API server's cache) and 0.2 status PATCHes a minute; newer
kubelets read the node from a watch instead of the GETs.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from bench.harness import cpu_seconds
from testsupport.cluster import ClusterKubelet, unique_node_name
from testsupport.controlplane import ControlPlane, cached_binaries
from testsupport.kubelet_process import (
    KubeletProcess,
    busybox_pod,
    remove_everything,
)
from testsupport.testbed import Testbed

DEFAULTS = {"nodeStatusUpdateFrequency": "10s", "nodeStatusReportFrequency": "5m",
            "nodeLeaseDurationSeconds": 40, "syncFrequency": "1m", "fileCheckFrequency": "20s"}
SAMPLE = re.compile(r'^pykubelet_api_client_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')
# At idle nothing in the status changes: no write expected in a window shorter than 5 minutes.
STATUS_WRITES_TARGET_PER_MINUTE = 0.2
LEASE_RENEWALS_PER_MINUTE = 6.0


def request_counts(kubelet: KubeletProcess) -> Counter[tuple[str, str, str]]:
    with urllib.request.urlopen(
            f"http://127.0.0.1:{kubelet.read_only_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            labels = dict(LABEL.findall(match["labels"]))
            key = (labels["client"], labels["resource"], labels["method"])
            counts[key] += int(float(match["value"]))
    return counts


def start_pods(kubelet: KubeletProcess, count: int, image: str) -> list[str]:
    names = [f"idle-{i}" for i in range(count)]
    for name in names:
        kubelet.write_pod(busybox_pod(name, [{"name": "c", "command": ["sleep", "3600"]}],
                                      image))
    for name in names:
        kubelet.wait_phase(name, "Running", timeout=300)
    return names


def idle_cpu(kubelet: KubeletProcess, seconds: float) -> float:
    assert kubelet.process is not None
    pid = kubelet.process.pid
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--settle-seconds", type=float, default=15.0)
    args = parser.parse_args(argv)
    if cached_binaries() is None:
        print("node_status.py: the control plane is not built yet: run "
              "scripts/testbed/controlplane-build.sh as root", file=sys.stderr)
        return 1

    testbed = Testbed.fresh()
    plane = ControlPlane.fresh()
    work = Path(tempfile.mkdtemp(prefix="pyk-bench-node-"))
    kubelets: list[KubeletProcess] = []
    try:
        testbed.build_images()
        testbed.start()
        plane.start()
        print(f"control plane {plane.version}, containerd testbed, {args.pods} pods, "
              f"{args.idle_seconds:g}s idle windows")

        # Standalone first (a kubelet kills pods it does not own, so one at a time).
        alone = KubeletProcess(work / "standalone", testbed.endpoint,
                               extra_config=DEFAULTS, extra_args=["--v=2"])
        kubelets.append(alone)
        alone.start()
        start_pods(alone, args.pods, testbed.busybox_image)
        time.sleep(args.settle_seconds)
        standalone_cpu = idle_cpu(alone, args.idle_seconds)
        alone.stop()
        remove_everything(testbed.endpoint)

        name = unique_node_name("bench")
        node = ClusterKubelet(work / "cluster", testbed.endpoint, plane, name,
                              kubeconfig=plane.node_kubeconfig(name), extra_config=DEFAULTS,
                              extra_args=["--v=2"])
        kubelets.append(node)
        node.start()
        node.wait_ready(timeout=120)
        start_pods(node, args.pods, testbed.busybox_image)
        time.sleep(args.settle_seconds)
        before = request_counts(node)
        assert node.process is not None
        pid = node.process.pid
        cpu_before, started = cpu_seconds(pid), time.monotonic()
        time.sleep(args.idle_seconds)
        elapsed = time.monotonic() - started
        cluster_cpu = 100 * (cpu_seconds(pid) - cpu_before) / elapsed
        after = request_counts(node)
        minutes = elapsed / 60

        print("\nAPI requests per minute at idle (kubelet client, resource, verb):")
        per_minute: dict[tuple[str, str, str], float] = {}
        for key in sorted(set(after) | set(before)):
            rate = (after[key] - before[key]) / minutes
            if rate:
                per_minute[key] = rate
                print(f"  {key[0]:<10} {key[1]:<16} {key[2]:<6} {rate:6.1f}")
        total = sum(per_minute.values())
        lease = sum(v for k, v in per_minute.items() if k[1] == "leases")
        status_writes = sum(v for k, v in per_minute.items()
                            if k[1] == "nodes/status" and k[2] == "PATCH")
        node_reads = sum(v for k, v in per_minute.items()
                         if k[1] == "nodes" and k[2] == "GET")
        print(f"  total {total:.1f}/min: lease {lease:.1f} (renewal every 10 s: "
              f"{LEASE_RENEWALS_PER_MINUTE:g}), node status writes {status_writes:.1f}, "
              f"node reads {node_reads:.1f}")
        print("\nCPU at idle, % of one core:")
        print(f"  standalone, {args.pods} pods:   {standalone_cpu:5.2f}")
        print(f"  cluster node, {args.pods} pods: {cluster_cpu:5.2f}")
        print(f"  cluster mode adds:       {cluster_cpu - standalone_cpu:5.2f}")
        ok = status_writes <= STATUS_WRITES_TARGET_PER_MINUTE and abs(
            lease - LEASE_RENEWALS_PER_MINUTE) <= 1.5
        print(f"\nno status write when nothing changed, lease every 10 s: "
              f"{'PASS' if ok else 'MISS'}")
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        for kubelet in kubelets:
            kubelet.stop()
        for kubelet in kubelets:
            if isinstance(kubelet, ClusterKubelet):
                kubelet.delete_node()
        try:
            remove_everything(testbed.endpoint)
        finally:
            plane.stop()
            testbed.stop()


if __name__ == "__main__":
    raise SystemExit(main())
