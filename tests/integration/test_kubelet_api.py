"""The kubelet API on a real pykubelet over real TLS, with real containers behind it.

A client holding a certificate from the cluster CA (as the API server's
``--kubelet-client-certificate`` is) reads pods, logs, stats and metrics,
runs commands and forwards ports, exactly over the wire format ``kubectl``
and Prometheus use. Strangers are turned away: as upstream, their
certificates are not refused in the TLS handshake but do not authenticate
(401).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from prometheus_client.parser import text_string_to_metric_families

from testsupport.kubelet_process import (
    NODE_NAME,
    KubeletProcess,
    busybox_pod,
    exec_in,
    remove_everything,
)
from testsupport.pki import ClientCert, TestCA
from testsupport.polling import wait_until_async
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

TALKER = f"talker-{NODE_NAME}"
HTTPD = f"httpd-{NODE_NAME}"

# Metric names every Go kubelet exposes on /metrics (pkg/kubelet/metrics, server/metrics,
# client-go, the process collector).
UPSTREAM_METRIC_NAMES = [
    "kubelet_node_name", "kubelet_running_pods", "kubelet_running_containers",
    "kubelet_pod_start_duration_seconds", "kubelet_pod_start_sli_duration_seconds",
    "kubelet_pod_start_total_duration_seconds", "kubelet_pod_worker_duration_seconds",
    "kubelet_pod_worker_start_duration_seconds", "kubelet_pleg_relist_duration_seconds",
    "kubelet_pleg_relist_interval_seconds", "kubelet_pleg_last_seen_seconds",
    "kubelet_pleg_discard_events", "kubelet_runtime_operations_total",
    "kubelet_runtime_operations_duration_seconds", "kubelet_runtime_operations_errors_total",
    "kubelet_started_pods_total", "kubelet_started_pods_errors_total",
    "kubelet_started_containers_total", "kubelet_started_containers_errors_total",
    "kubelet_containers_per_pod_count", "kubelet_evictions", "kubelet_preemptions",
    "kubelet_run_podsandbox_duration_seconds", "kubelet_http_requests_total",
    "kubelet_http_requests_duration_seconds", "kubelet_http_inflight_requests",
    "kubelet_certificate_manager_client_ttl_seconds",
    "kubelet_certificate_manager_server_ttl_seconds",
    "kubelet_certificate_manager_server_rotation_seconds",
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "kubelet_server_expiration_renew_errors", "rest_client_requests_total",
    "rest_client_request_duration_seconds", "process_cpu_seconds_total",
    "process_resident_memory_bytes", "process_start_time_seconds", "process_open_fds",
]


class Node:
    """The kubelet under test and the credentials of its callers."""

    def __init__(self, kubelet: KubeletProcess, ca: TestCA, admin: ClientCert,
                 stranger: ClientCert, server_ca: Path) -> None:
        self.kubelet = kubelet
        self.ca = ca
        self.admin = admin
        self.stranger = stranger
        self.server_ca = server_ca

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.kubelet.port}"

    def ssl(self, client: ClientCert | None) -> ssl.SSLContext:
        # The kubelet's self-signed chain ends in its own CA: pin it, as a client would.
        context = ssl.create_default_context(cafile=str(self.server_ca))
        if client is not None:
            context.load_cert_chain(str(client.cert_file), str(client.key_file))
        return context


@pytest.fixture(scope="module")
def node(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("kubelet-api")
    ca = TestCA(base / "ca", "cluster-ca")
    admin = ca.client("system:kube-apiserver-kubelet-client", ("system:masters",))
    stranger = TestCA(base / "other-ca", "other-ca").client("intruder")
    kubelet = KubeletProcess(base, testbed.endpoint, extra_config={
        "authentication": {"x509": {"clientCAFile": str(ca.cert_file)},
                           "anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
    })
    kubelet.write_pod(busybox_pod("talker", [{
        "name": "c", "command": ["sh", "-c",
                                 "i=0; while true; do echo line $i; echo err $i >&2; "
                                 "i=$((i+1)); sleep 0.5; done"]}], testbed.busybox_image))
    kubelet.write_pod(busybox_pod("httpd", [{
        "name": "web", "command": ["sh", "-c", "mkdir -p /www && echo hello-from-httpd > "
                                   "/www/index.html && exec httpd -f -p 8080 -h /www"]}],
        testbed.busybox_image))
    kubelet.start()
    try:
        kubelet.wait_phase("talker", "Running")
        kubelet.wait_phase("httpd", "Running")
        kubelet.wait_log_lines("talker", "c", 6)  # the tail tests ask for 4
        yield Node(kubelet, ca, admin, stranger, kubelet.cert_dir / "kubelet.crt")
    finally:
        kubelet.stop()
        remove_everything(testbed.endpoint)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def get(session: aiohttp.ClientSession, node: Node, path: str,
              client: ClientCert | None = None) -> tuple[int, str]:
    async with session.get(node.url + path, ssl=node.ssl(client or node.admin)) as response:
        return response.status, await response.text()


async def test_client_certificate_from_the_cluster_ca_is_accepted(
        node: Node, session: aiohttp.ClientSession) -> None:
    status, body = await get(session, node, "/pods")
    assert status == 200
    names = {item["metadata"]["name"] for item in json.loads(body)["items"]}
    assert {TALKER, HTTPD} <= names


async def test_no_credentials_is_401(node: Node, session: aiohttp.ClientSession) -> None:
    async with session.get(node.url + "/pods", ssl=node.ssl(None)) as response:
        assert (response.status, await response.text()) == (401, "Unauthorized")


async def test_certificate_from_another_ca_completes_the_handshake_and_gets_401(
        node: Node, session: aiohttp.ClientSession) -> None:
    # Upstream asks for a client certificate without verifying it in the
    # handshake; the x509 authenticator does not accept it.
    assert await get(session, node, "/pods", node.stranger) == (401, "Unauthorized")
    assert "verified in the TLS handshake" not in node.kubelet.log_text()
    assert "x509: certificate signed by unknown authority" in node.kubelet.log_text()


async def test_expired_or_server_only_certificates_from_the_cluster_ca_get_401(
        node: Node, session: aiohttp.ClientSession) -> None:
    expired = node.ca.client("system:kube-apiserver-kubelet-client", ("system:masters",),
                             "expired", valid=(datetime.timedelta(days=-2),
                                               datetime.timedelta(days=-1)))
    serving = node.ca.client("system:kube-apiserver-kubelet-client", ("system:masters",),
                             "serving-only", usages=(ExtendedKeyUsageOID.SERVER_AUTH,))
    for holder in (expired, serving):
        assert await get(session, node, "/pods", holder) == (401, "Unauthorized"), holder
    # The cluster CA's current client certificate still gets in.
    assert (await get(session, node, "/pods"))[0] == 200


def test_the_certificate_request_names_the_client_ca(node: Node) -> None:
    # Go clients (the API server among them) send a certificate only if it is
    # issued by a CA the request names, as with upstream's ClientCAs.
    result = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{node.kubelet.port}",
         "-CAfile", str(node.server_ca)],
        input="", capture_output=True, text=True, timeout=30, check=False)
    names = result.stdout.split("Acceptable client certificate CA names", 1)[-1]
    assert names.splitlines()[1:2] == ["CN = cluster-ca"], result.stdout[-2000:]


async def test_configz_and_healthz(node: Node, session: aiohttp.ClientSession) -> None:
    status, body = await get(session, node, "/configz")
    assert status == 200
    config = json.loads(body)["kubeletconfig"]
    assert config["port"] == node.kubelet.port
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert await get(session, node, "/healthz") == (200, "ok")


async def test_running_pods_come_from_the_runtime(node: Node,
                                                  session: aiohttp.ClientSession) -> None:
    status, body = await get(session, node, "/runningpods/")
    assert status == 200
    pods = {item["metadata"]["name"]: item for item in json.loads(body)["items"]}
    assert [c["name"] for c in pods[HTTPD]["spec"]["containers"]] == ["web"]


async def test_logs_with_tail_and_timestamps(node: Node, session: aiohttp.ClientSession) -> None:
    status, body = await get(session, node,
                             f"/containerLogs/default/{TALKER}/c?tailLines=4&timestamps=true")
    assert status == 200
    lines = body.splitlines()
    assert len(lines) == 4
    for line in lines:
        stamp, _, text = line.partition(" ")
        assert len(stamp) == len("2024-01-01T00:00:00.000000000Z"), line
        assert text.startswith(("line ", "err "))
    status, body = await get(session, node, f"/containerLogs/default/{TALKER}/c?limitBytes=7")
    _, everything = await get(session, node, f"/containerLogs/default/{TALKER}/c")
    # Which of the first two records (stdout, stderr) came first is up to the runtime.
    assert (status, len(body)) == (200, 7) and everything.startswith(body)
    assert body in ("line 0\n", "err 0\nl")


async def test_logs_follow_streams_new_lines(node: Node, session: aiohttp.ClientSession) -> None:
    path = f"/containerLogs/default/{TALKER}/c?follow=true&tailLines=1"
    seen: list[str] = []
    async with session.get(node.url + path, ssl=node.ssl(node.admin)) as response:
        assert response.status == 200
        started = time.monotonic()
        while len(seen) < 6:
            line = await asyncio.wait_for(response.content.readline(), 10)
            seen.append(line.decode().strip())
        elapsed = time.monotonic() - started
    numbers = sorted({int(text.split()[1]) for text in seen})
    # The container prints a pair every 0.5 s: six lines took real time to arrive.
    assert len(numbers) >= 3 and elapsed > 0.5, (seen, elapsed)


async def test_unknown_pods_and_containers(node: Node, session: aiohttp.ClientSession) -> None:
    assert await get(session, node, "/containerLogs/default/ghost/c") == (
        404, 'pod "ghost" does not exist')
    assert await get(session, node, f"/containerLogs/default/{TALKER}/nope") == (
        404, f'container "nope" not found in pod "{TALKER}"')


async def test_log_path_traversal_is_refused(node: Node) -> None:
    # Raw paths, not normalised by a client library.
    for raw in ("/logs/../../etc/passwd", "/logs/%2e%2e/%2e%2e/etc/passwd",
                "/containerLogs/default/..%2f..%2f/c"):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", node.kubelet.port, ssl=node.ssl(node.admin))
        writer.write(f"GET {raw} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = (await asyncio.wait_for(reader.read(), 10)).decode(errors="replace")
        writer.close()
        status = int(answer.split(" ", 2)[1])
        assert status in (400, 404), (raw, answer[:200])
        assert "root:" not in answer


def _exec_path(pod: str, container: str, *command: str, stdin: bool = False) -> str:
    query = "&".join(f"command={aiohttp.helpers.quote(part, safe='')}" for part in command)
    return (f"/exec/default/{pod}/{container}?{query}&output=1&error=1"
            + ("&input=1" if stdin else ""))


async def test_exec_over_websocket_v4_returns_output_and_exit_code(
        node: Node, session: aiohttp.ClientSession) -> None:
    path = _exec_path(TALKER, "c", "sh", "-c", "echo out; echo problem >&2; exit 7")
    frames: dict[int, bytes] = {}
    async with session.ws_connect(node.url + path, protocols=["v4.channel.k8s.io"],
                                  ssl=node.ssl(node.admin)) as ws:
        assert ws.protocol == "v4.channel.k8s.io"
        async for message in ws:
            data = message.data
            frames[data[0]] = frames.get(data[0], b"") + data[1:]
    assert frames[1] == b"out\n"
    assert frames[2] == b"problem\n"
    status = json.loads(frames[3])
    assert status["status"] == "Failure"
    assert status["details"]["causes"][0] == {"reason": "ExitCode", "message": "7"}


async def test_exec_over_websocket_v5_closes_stdin_and_reports_the_exit_code(
        node: Node, session: aiohttp.ClientSession) -> None:
    # containerd does not speak v5: the kubelet translates it to the runtime's SPDY streams.
    path = _exec_path(TALKER, "c", "sh", "-c", "cat; echo done; echo warn >&2; exit 4",
                      stdin=True)
    frames: dict[int, bytes] = {}
    async with session.ws_connect(node.url + path,
                                  protocols=["v5.channel.k8s.io", "v4.channel.k8s.io"],
                                  ssl=node.ssl(node.admin)) as ws:
        assert ws.protocol == "v5.channel.k8s.io"
        await ws.send_bytes(b"\x00hello\n")
        await ws.send_bytes(b"\xff\x00")  # close stdin: cat ends
        async for message in ws:
            frames[message.data[0]] = frames.get(message.data[0], b"") + message.data[1:]
    assert frames[1] == b"hello\ndone\n"
    assert frames[2] == b"warn\n"
    status = json.loads(frames[3])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"][0]["message"] == "4"


async def test_exec_over_websocket_v5_success_status(node: Node,
                                                     session: aiohttp.ClientSession) -> None:
    async with session.ws_connect(node.url + _exec_path(HTTPD, "web", "cat", "/www/index.html"),
                                  protocols=["v5.channel.k8s.io"],
                                  ssl=node.ssl(node.admin)) as ws:
        frames = [message.data async for message in ws]
    assert b"\x01hello-from-httpd\n" in frames
    assert json.loads(frames[-1][1:])["status"] == "Success"


async def test_attach_streams_the_running_process_output(
        node: Node, session: aiohttp.ClientSession) -> None:
    output = b""
    async with session.ws_connect(node.url + f"/attach/default/{TALKER}/c?output=1&error=1",
                                  protocols=["v4.channel.k8s.io"],
                                  ssl=node.ssl(node.admin)) as ws:
        while output.count(b"\n") < 2:
            message = await asyncio.wait_for(ws.receive(), 10)
            if message.data[:1] == b"\x01":
                output += message.data[1:]
    assert output.startswith(b"line "), output


async def test_exec_client_going_away_releases_the_stream(
        node: Node, session: aiohttp.ClientSession) -> None:
    pod = node.kubelet.container_status("talker", "c")
    path = _exec_path(TALKER, "c", "sh", "-c", "cat; touch /tmp/released", stdin=True)
    ws = await session.ws_connect(node.url + path, protocols=["v4.channel.k8s.io"],
                                  ssl=node.ssl(node.admin))
    await ws.send_bytes(b"\x00hello\n")
    echoed = await asyncio.wait_for(ws.receive(), 10)
    while echoed.data in (b"\x01", b"\x02"):  # the empty hello of each stream
        echoed = await asyncio.wait_for(ws.receive(), 10)
    assert echoed.data == b"\x01hello\n"
    await ws.close()
    # The kubelet closed its side to the runtime, which closed cat's stdin.
    async def released() -> bool:
        return await asyncio.to_thread(exec_in, node.kubelet.endpoint, pod["containerID"],
                                       "test", "-f", "/tmp/released") == 0
    await wait_until_async(released, 20, "the exec session to end", interval=0.2)


async def test_port_forward_reaches_httpd_over_websocket(
        node: Node, session: aiohttp.ClientSession) -> None:
    received: dict[int, bytes] = {0: b"", 1: b""}
    async with session.ws_connect(node.url + f"/portForward/default/{HTTPD}?port=8080",
                                  protocols=["v4.channel.k8s.io"],
                                  ssl=node.ssl(node.admin)) as ws:
        # Each channel first announces its port (two bytes, little endian).
        for _ in range(2):
            hello = await asyncio.wait_for(ws.receive(), 10)
            assert struct.unpack("<H", hello.data[1:3])[0] == 8080
        await ws.send_bytes(b"\x00GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 10
        while b"hello-from-httpd" not in received[0] and time.monotonic() < deadline:
            message = await asyncio.wait_for(ws.receive(), 10)
            if message.type != aiohttp.WSMsgType.BINARY:
                break
            received[message.data[0]] += message.data[1:]
    assert received[0].startswith(b"HTTP/1.") and b" 200 OK" in received[0], received
    assert b"hello-from-httpd" in received[0]


async def test_port_forward_over_base64_websocket_with_two_ports(
        node: Node, session: aiohttp.ClientSession) -> None:
    """``v4.base64.channel.k8s.io`` (text frames: channel digit, then base64), two ports:
    channels 0/1 carry 8080's data and errors, 2/3 those of 8081, where nothing listens."""
    received: dict[str, bytes] = {}
    async with session.ws_connect(
            node.url + f"/portForward/default/{HTTPD}?port=8080&port=8081",
            protocols=["v4.base64.channel.k8s.io"], ssl=node.ssl(node.admin)) as ws:
        assert ws.protocol == "v4.base64.channel.k8s.io"
        hellos = {}
        for _ in range(4):
            message = await asyncio.wait_for(ws.receive(), 10)
            assert message.type == aiohttp.WSMsgType.TEXT, message
            hellos[message.data[0]] = struct.unpack("<H", base64.b64decode(message.data[1:]))[0]
        assert hellos == {"0": 8080, "1": 8080, "2": 8081, "3": 8081}
        await ws.send_str("0" + base64.b64encode(b"GET /index.html HTTP/1.0\r\n\r\n").decode())
        deadline = time.monotonic() + 10
        while (b"hello-from-httpd" not in received.get("0", b"") or "3" not in received) \
                and time.monotonic() < deadline:
            message = await asyncio.wait_for(ws.receive(), 10)
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            channel = message.data[0]
            received[channel] = received.get(channel, b"") + base64.b64decode(message.data[1:])
    assert b" 200 OK" in received["0"] and b"hello-from-httpd" in received["0"], received
    assert received["3"].startswith(b"error forwarding port 8081 to pod"), received


async def test_port_forward_over_websocket_needs_a_port(node: Node,
                                                        session: aiohttp.ClientSession) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await session.ws_connect(node.url + f"/portForward/default/{HTTPD}",
                                 protocols=["v4.channel.k8s.io"], ssl=node.ssl(node.admin))
    assert refused.value.status == 400


async def test_stats_summary_holds_real_figures(node: Node,
                                                session: aiohttp.ClientSession) -> None:
    await get(session, node, "/stats/summary")  # a first reading for CPU rates
    await asyncio.sleep(1.5)
    status, body = await get(session, node, "/stats/summary")
    assert status == 200
    summary = json.loads(body)
    node_stats = summary["node"]
    assert node_stats["nodeName"] == NODE_NAME
    assert node_stats["cpu"]["usageCoreNanoSeconds"] > 0
    assert node_stats["cpu"]["usageNanoCores"] > 0
    assert node_stats["memory"]["workingSetBytes"] > 0
    assert node_stats["fs"]["capacityBytes"] > node_stats["fs"]["availableBytes"] > 0
    # containerd samples its snapshot usage every few seconds; capacity is there at once.
    assert node_stats["runtime"]["imageFs"]["capacityBytes"] > 0
    assert {c["name"] for c in node_stats["systemContainers"]} == {"kubelet", "pods"}
    pods = {p["podRef"]["name"]: p for p in summary["pods"]}
    talker = pods[TALKER]
    container = talker["containers"][0]
    assert container["name"] == "c"
    assert container["cpu"]["usageCoreNanoSeconds"] > 0
    assert container["memory"]["workingSetBytes"] > 0
    assert container["logs"]["usedBytes"] > 0  # it has been writing lines all along
    assert talker["cpu"]["usageCoreNanoSeconds"] >= container["cpu"]["usageCoreNanoSeconds"]
    assert talker["memory"]["workingSetBytes"] > 0
    assert talker["network"]["name"] == "eth0"
    assert talker["ephemeral-storage"]["usedBytes"] > 0


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


async def test_resource_metrics_parse_and_hold_real_figures(
        node: Node, session: aiohttp.ClientSession) -> None:
    status, text = await get(session, node, "/metrics/resource")
    assert status == 200
    families = _families(text)
    assert families["node_cpu_usage_seconds"].samples[0].value > 0
    assert families["node_memory_working_set_bytes"].samples[0].value > 0
    containers = {(s.labels["pod"], s.labels["container"]): s.value
                  for s in families["container_cpu_usage_seconds"].samples}
    assert containers[(TALKER, "c")] > 0
    memory = {(s.labels["pod"], s.labels["container"]): s
              for s in families["container_memory_working_set_bytes"].samples}
    assert memory[(HTTPD, "web")].value > 0
    assert memory[(HTTPD, "web")].timestamp is not None
    pods = {s.labels["pod"] for s in families["pod_memory_working_set_bytes"].samples}
    assert {TALKER, HTTPD} <= pods
    assert families["resource_scrape_error"].samples[0].value == 0


async def test_cadvisor_metrics_name_containers_and_pods(
        node: Node, session: aiohttp.ClientSession) -> None:
    status, text = await get(session, node, "/metrics/cadvisor")
    assert status == 200
    families = _families(text)
    cpu = {(s.labels["pod"], s.labels["container"]) for s in
           families["container_cpu_usage_seconds"].samples}
    assert (TALKER, "c") in cpu and (TALKER, "") in cpu
    received = [s for s in families["container_network_receive_bytes"].samples
                if s.labels["pod"] == HTTPD]
    assert received and received[0].labels["interface"] == "eth0"
    assert families["machine_cpu_cores"].samples[0].value >= 1


async def test_kubelet_metrics_carry_upstream_names_and_real_counts(
        node: Node, session: aiohttp.ClientSession) -> None:
    status, text = await get(session, node, "/metrics")
    assert status == 200
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    missing = [name for name in UPSTREAM_METRIC_NAMES if name not in declared]
    assert not missing, missing
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("kubelet_running_pods", ())] >= 2
    assert samples[("kubelet_running_containers", (("container_state", "running"),))] >= 2
    assert samples[("kubelet_node_name", (("node", NODE_NAME),))] == 1
    assert samples[("kubelet_started_pods_total", ())] >= 2
    assert samples[("kubelet_runtime_operations_total",
                    (("operation_type", "list_podsandbox"),))] > 0
    assert samples[("kubelet_pleg_relist_duration_seconds_count", ())] > 0
    assert samples[("kubelet_pod_start_duration_seconds_count", ())] >= 2


async def test_read_only_port_serves_only_the_unauthenticated_subset(
        node: Node, session: aiohttp.ClientSession) -> None:
    base = f"http://127.0.0.1:{node.kubelet.read_only_port}"
    async with session.get(base + "/pods") as response:
        assert response.status == 200
    async with session.get(base + "/stats/summary") as response:
        assert response.status == 200
    for path in (f"/containerLogs/default/{TALKER}/c", "/runningpods/",
                 _exec_path(TALKER, "c", "ls")):
        async with session.get(base + path) as response:
            assert (response.status, await response.text()) == (
                405, "Debug endpoints are disabled.\n"), path
    async with session.get(base + "/configz") as response:
        assert response.status == 404


def test_server_tls_bootstrap_without_an_api_server_is_a_clear_error(
        testbed: Testbed, tmp_path: Path) -> None:
    """No API server to issue the serving certificate: the kubelet says so and exits 1."""
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, extra_config={"serverTLSBootstrap": True})
    # Launched as every test kubelet is (its kernel tunables masked), not waited on to serve.
    kubelet.launch()
    assert kubelet.process is not None
    try:
        assert kubelet.process.wait(60) == 1
    finally:
        # It never gets as far as running pods: nothing to remove from the runtime.
        kubelet.stop()
    assert "starting the kubelet server: serverTLSBootstrap needs an API server" in (
        kubelet.log_text()), kubelet.log_text()[-2000:]
    assert not (kubelet.cert_dir / "kubelet.crt").exists()
