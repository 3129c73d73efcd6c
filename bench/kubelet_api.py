"""The kubelet API's cost: log throughput, exec round trip, summary latency.

Three figures, each beside its floor measured in the same run on the same
containerd:

* ``/containerLogs`` throughput (HTTPS, client certificate, as the API server
  calls it) over a container log of ``--log-mb`` MB, against ``cat`` of the
  same file: both are reported as MB/s of the log file read.
* ``exec`` round trip (``echo``): a WebSocket v4 session proxied by the
  kubelet to containerd's streaming server, and a v5 one the kubelet
  translates to SPDY, against a direct CRI ``ExecSync`` of the same command.
* ``/stats/summary`` latency with 30 and then 100 running pods (``--pods``).

Prints the figures; exits 1 only when the measurement itself broke, 130 when
interrupted (see ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.harness import (
    KUBELET_ARGS,
    KUBELET_CONFIG,
    SLEEP_COMMAND,
    BenchmarkError,
    percentile,
    run_on_testbed,
    wait_all_reported_running,
)
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.kubelet_process import NODE_NAME, KubeletProcess, busybox_pod
from testsupport.pki import ClientCert, TestCA
from testsupport.testbed import Testbed

LOG_LINE = "0123456789" * 9 + "abcdefghi"  # 99 characters and a newline
READY_TIMEOUT_SECONDS = 600.0


@dataclass
class Results:
    log_bytes: int = 0
    cat_seconds: list[float] = field(default_factory=list)
    logs_seconds: list[float] = field(default_factory=list)
    logs_output_bytes: int = 0
    exec_sync_ms: list[float] = field(default_factory=list)
    exec_v4_ms: list[float] = field(default_factory=list)
    exec_v5_ms: list[float] = field(default_factory=list)
    summary_ms: dict[int, list[float]] = field(default_factory=dict)
    cri_lists_ms: dict[int, list[float]] = field(default_factory=dict)


def _mbps(size: int, seconds: Sequence[float]) -> float:
    return size / 1e6 / percentile(seconds, 0.5)


def render(results: Results) -> str:
    lines = ["", "kubelet API", ""]
    cat = _mbps(results.log_bytes, results.cat_seconds)
    logs = _mbps(results.log_bytes, results.logs_seconds)
    lines += [
        f"/containerLogs throughput, {results.log_bytes / 1e6:.0f} MB log "
        f"({results.logs_output_bytes / 1e6:.0f} MB of output), p50 of "
        f"{len(results.logs_seconds)} reads:",
        f"  cat of the log file          {cat:9.1f} MB/s",
        f"  GET /containerLogs (HTTPS)   {logs:9.1f} MB/s   ({logs / cat * 100:.1f} % of cat)",
        "",
        f"exec round trip (echo), {len(results.exec_sync_ms)} runs:   p50 ms   p99 ms",
    ]
    for label, samples in (("CRI ExecSync (direct)", results.exec_sync_ms),
                           ("WebSocket v4 via kubelet", results.exec_v4_ms),
                           ("WebSocket v5 via kubelet", results.exec_v5_ms)):
        lines.append(f"  {label:28s} {percentile(samples, 0.5):7.1f}  "
                     f"{percentile(samples, 0.99):7.1f}")
    lines += ["", "/stats/summary latency:                   p50 ms   p99 ms"]
    for pods, samples in sorted(results.summary_ms.items()):
        floor = results.cri_lists_ms[pods]
        lines.append(f"  {pods:3d} pods, GET /stats/summary         "
                     f"{percentile(samples, 0.5):7.1f}  {percentile(samples, 0.99):7.1f}")
        lines.append(f"  {pods:3d} pods, its three CRI listings    "
                     f"{percentile(floor, 0.5):7.1f}  {percentile(floor, 0.99):7.1f}")
    return "\n".join(lines)


class Client:
    def __init__(self, kubelet: KubeletProcess, cert: ClientCert) -> None:
        self.url = f"https://127.0.0.1:{kubelet.port}"
        self.ssl = ssl.create_default_context(cafile=str(kubelet.cert_dir / "kubelet.crt"))
        self.ssl.load_cert_chain(str(cert.cert_file), str(cert.key_file))


async def log_path(runtime: RemoteRuntimeService, container_name: str) -> str:
    for container in await runtime.list_containers():
        if container.metadata.name == container_name:
            status = await runtime.container_status(container.id)
            return str(status.status.log_path)
    raise BenchmarkError(f"container {container_name} not found")


async def measure_logs(kubelet: KubeletProcess, client: Client, runtime: RemoteRuntimeService,
                       image: str, log_mb: int, runs: int, results: Results) -> None:
    total = log_mb * 1_000_000
    kubelet.write_pod(busybox_pod("logger", [{
        "name": "logger", "command": ["sh", "-c", f"yes {LOG_LINE} | head -c {total}; "
                                                  "sleep 3600"]}], image))
    await wait_all_reported_running(kubelet, ["logger"], NODE_NAME, 1.0,
                                    READY_TIMEOUT_SECONDS)
    path = await log_path(runtime, "logger")
    # The runtime adds a timestamp, stream and tag to each line: wait for all of it.
    previous = -1
    while (size := os.path.getsize(path)) != previous or size < total:
        previous = size
        await asyncio.sleep(1)
    results.log_bytes = size
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        results.cat_seconds.append(time.perf_counter() - started)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for _ in range(runs):
            started = time.perf_counter()
            received = 0
            async with session.get(f"{client.url}/containerLogs/default/logger-{NODE_NAME}/logger",
                                   ssl=client.ssl) as response:
                if response.status != 200:
                    raise BenchmarkError(f"/containerLogs answered {response.status}")
                async for chunk in response.content.iter_chunked(1 << 20):
                    received += len(chunk)
            results.logs_seconds.append(time.perf_counter() - started)
            results.logs_output_bytes = received
    if results.logs_output_bytes < total:
        raise BenchmarkError(f"/containerLogs returned {results.logs_output_bytes} bytes, "
                             f"expected {total}")


async def ws_exec(session: aiohttp.ClientSession, client: Client, protocol: str) -> bytes:
    path = (f"/exec/default/logger-{NODE_NAME}/logger?command=echo&command=hi"
            "&output=1&error=1")
    output = b""
    async with session.ws_connect(client.url + path, protocols=[protocol],
                                  ssl=client.ssl) as ws:
        async for message in ws:
            if message.data[:1] == b"\x01":
                output += message.data[1:]
    return output


async def measure_exec(runtime: RemoteRuntimeService, client: Client, runs: int,
                       results: Results) -> None:
    container_id = next(c.id for c in await runtime.list_containers()
                        if c.metadata.name == "logger")
    async with aiohttp.ClientSession() as session:
        for protocol in ("v4.channel.k8s.io", "v5.channel.k8s.io"):
            await ws_exec(session, client, protocol)  # warm-up: TLS, connection set-up
        await runtime.exec_sync(container_id, ["echo", "hi"], 10)
        for _ in range(runs):
            started = time.perf_counter()
            result = await runtime.exec_sync(container_id, ["echo", "hi"], 10)
            results.exec_sync_ms.append((time.perf_counter() - started) * 1000)
            if result.stdout != b"hi\n":
                raise BenchmarkError(f"ExecSync printed {result.stdout!r}")
            for protocol, samples in (("v4.channel.k8s.io", results.exec_v4_ms),
                                      ("v5.channel.k8s.io", results.exec_v5_ms)):
                started = time.perf_counter()
                output = await ws_exec(session, client, protocol)
                samples.append((time.perf_counter() - started) * 1000)
                if output != b"hi\n":
                    raise BenchmarkError(f"exec over {protocol} printed {output!r}")


async def measure_summary(kubelet: KubeletProcess, client: Client,
                          runtime: RemoteRuntimeService, image: str,
                          pod_counts: Sequence[int], requests: int, results: Results) -> None:
    created: list[str] = []
    async with aiohttp.ClientSession() as session:
        for count in pod_counts:
            while len(created) < count:
                name = f"idle{len(created):03d}"
                kubelet.write_pod(busybox_pod(name, [{"name": "c", "command": SLEEP_COMMAND}],
                                              image))
                created.append(name)
            print(f"waiting for {count} pods ...", file=sys.stderr, flush=True)
            await wait_all_reported_running(kubelet, created, NODE_NAME, 1.0,
                                            READY_TIMEOUT_SECONDS)
            await asyncio.sleep(5)
            samples = results.summary_ms.setdefault(count, [])
            for _ in range(requests):
                started = time.perf_counter()
                async with session.get(client.url + "/stats/summary",
                                       ssl=client.ssl) as response:
                    body = await response.json()
                samples.append((time.perf_counter() - started) * 1000)
                if len(body["pods"]) < count:
                    raise BenchmarkError(f"summary lists {len(body['pods'])} pods of {count}")
                await asyncio.sleep(0.2)
            # The floor: the runtime listings every summary needs, made directly.
            floor = results.cri_lists_ms.setdefault(count, [])
            for _ in range(requests):
                started = time.perf_counter()
                await asyncio.gather(runtime.list_pod_sandboxes(), runtime.list_containers(),
                                     runtime.list_container_stats())
                floor.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(0.2)


async def run_benchmark(testbed: Testbed, work_dir: Path, args: argparse.Namespace,
                        results: Results, kubelet_holder: list[KubeletProcess]) -> None:
    ca = TestCA(work_dir / "ca")
    cert = ca.client("system:kube-apiserver-kubelet-client", ("system:masters",))
    kubelet = KubeletProcess(work_dir / "kubelet", testbed.endpoint, extra_config={
        **KUBELET_CONFIG, "maxPods": max(110, max(args.pods) + 10),
        "authentication": {"x509": {"clientCAFile": str(ca.cert_file)},
                           "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"}}, extra_args=KUBELET_ARGS)
    kubelet_holder.append(kubelet)
    kubelet.start()
    client = Client(kubelet, cert)
    runtime = RemoteRuntimeService(testbed.endpoint, 60)
    await runtime.connect()
    try:
        print("measuring /containerLogs ...", file=sys.stderr, flush=True)
        await measure_logs(kubelet, client, runtime, testbed.busybox_image, args.log_mb,
                           args.log_runs, results)
        print("measuring exec ...", file=sys.stderr, flush=True)
        await measure_exec(runtime, client, args.exec_runs, results)
        print("measuring /stats/summary ...", file=sys.stderr, flush=True)
        await measure_summary(kubelet, client, runtime, testbed.busybox_image, args.pods,
                              args.summary_requests, results)
    finally:
        await runtime.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-mb", type=int, default=50, help="size of the log read (MB)")
    parser.add_argument("--log-runs", type=int, default=5)
    parser.add_argument("--exec-runs", type=int, default=30)
    parser.add_argument("--pods", type=lambda s: [int(p) for p in s.split(",")],
                        default=[30, 100], help="pod counts for /stats/summary, e.g. 30,100")
    parser.add_argument("--summary-requests", type=int, default=20)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = Results()

    async def body(testbed: Testbed, work_dir: Path, kubelet_holder: list[KubeletProcess]) -> None:
        await run_benchmark(testbed, work_dir, args, results, kubelet_holder)

    status = run_on_testbed(body, errors=(aiohttp.ClientError,))
    if status == 0:
        print(render(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
