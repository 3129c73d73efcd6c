"""The kubelet API behind a real kube-apiserver (1.20, built from Debian's source).

Two halves:

* **Delegated authentication and authorization.** The kubelet API is served
  with ``build_auth`` on the node's own credentials, exactly as a cluster
  kubelet builds it: bearer tokens go to the API server's ``TokenReview``,
  every request to a ``SubjectAccessReview`` that real RBAC answers. (The
  pods behind the API are a stand-in here: what is under test is who gets in.)
* **The API server's proxy.** A real pykubelet serves its pods on the port
  the Node object advertises, trusting the cluster CA for the API server's
  ``--kubelet-client-certificate``; ``kubectl logs -f``, ``kubectl exec`` and
  ``kubectl port-forward`` go through the API server's pod subresources to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from prometheus_client.parser import text_string_to_metric_families

from pykubelet.container import ContainerID
from pykubelet.server.auth import build_auth
from pykubelet.server.readonly import start_http_server
from pykubelet.server.server import KubeletAPIServer, ServerOptions
from pykubelet.server.tls import initialize_tls
from testsupport.cluster import unique
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import (
    KubeletProcess,
    busybox_pod,
    free_port,
    remove_everything,
)
from testsupport.pki import TestCA
from testsupport.polling import wait_until, wait_until_async
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]

NAMESPACE = "default"


# --- delegated authentication and authorization -----------------------------------------------

class StandInPods:
    """The host side of the API: one pod, so that an allowed request has an answer."""

    pod = V1Pod(api_version="v1", kind="Pod",
                metadata=V1ObjectMeta(name="stand-in", namespace=NAMESPACE, uid="u-1"),
                spec=V1PodSpec(containers=[V1Container(name="c", image="busybox")]))

    def get_pods(self) -> list[V1Pod]:
        return [self.pod]

    def get_pod_by_name(self, namespace: str, name: str) -> V1Pod | None:
        return None

    async def get_running_pods(self) -> list[V1Pod]:
        return [self.pod]

    def container_log_target(self, pod: V1Pod, name: str, previous: bool) -> ContainerID:
        raise AssertionError("not used")

    async def get_container_logs(self, *args: Any) -> None:
        raise AssertionError("not used")

    async def get_exec(self, *args: Any) -> str:
        raise AssertionError("not used")

    get_attach = get_exec
    get_port_forward = get_exec
    run_in_container = get_exec


class Delegated:
    def __init__(self, url: str, cert_file: str, plane: ControlPlane) -> None:
        self.url = url
        self.cert_file = cert_file
        self.plane = plane

    async def get(self, path: str, token: str | None = None,
                  cert: tuple[Path, Path] | None = None) -> tuple[int, str]:
        context = ssl.create_default_context(cafile=self.cert_file)
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with aiohttp.ClientSession() as session, \
                session.get(self.url + path, ssl=context, headers=headers) as response:
            return response.status, await response.text()


@pytest.fixture
async def delegated(control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Delegated]:
    node = unique("authz-node")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(control_plane.node_kubeconfig(node)),
                                  client_configuration=configuration)
    api = client.ApiClient(configuration)
    auth = build_auth(node, api, anonymous=True, webhook_authentication=True,
                      token_cache_ttl=120, client_ca_file=str(control_plane.ca_cert),
                      authorization_mode="Webhook", authorized_ttl=300,
                      # Short, so that a ClusterRole granted mid-test takes effect.
                      unauthorized_ttl=0.5, fine_grained=True)
    tls = initialize_tls(str(tmp_path / "pki"), node, client_ca_file=str(control_plane.ca_cert),
                         alternate_ips=["127.0.0.1"])
    server = KubeletAPIServer(StandInPods(), [],  # type: ignore[arg-type]
                              ServerOptions(), auth=auth)
    port = free_port()
    runner = await start_http_server("127.0.0.1", port, server.application(),
                                     tls.ssl_context())
    try:
        yield Delegated(f"https://127.0.0.1:{port}", tls.cert_file, control_plane)
    finally:
        await runner.cleanup()
        await api.close()


def service_account_token(plane: ControlPlane, name: str) -> str:
    """A token for a new service account, from its TokenRequest subresource (what
    ``kubectl create token`` does from 1.24 on; the 1.20 kubectl has no such command)."""
    plane.kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = plane.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{name}/token",
        "-f", "-", input=json.dumps(request))
    return str(json.loads(answer.stdout)["status"]["token"])


@contextlib.contextmanager
def cluster_role(plane: ControlPlane, name: str, subresource: str,
                 service_account: str) -> Iterator[None]:
    plane.kubectl("create", "clusterrole", name, "--verb=get",
                  f"--resource=nodes/{subresource}")
    plane.kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}",
                  f"--serviceaccount={NAMESPACE}:{service_account}")
    try:
        yield
    finally:
        plane.kubectl("delete", "clusterrolebinding,clusterrole", name, "--wait=false")


async def eventually(call: Any, expected: int, timeout: float = 30.0) -> tuple[int, str]:
    """The answer of ``call()`` once its status is ``expected`` (RBAC changes take a while)."""
    async def answered() -> tuple[int, str] | None:
        status, body = await call()
        return (status, body) if status == expected else None
    return await wait_until_async(answered, timeout, f"an answer with status {expected}",
                                  interval=0.5)


async def test_service_account_token_is_reviewed_and_rbac_decides(delegated: Delegated) -> None:
    plane = delegated.plane
    account = unique("scraper")
    token = await asyncio.to_thread(service_account_token, plane, account)
    user = f"system:serviceaccount:{NAMESPACE}:{account}"
    try:
        # Authenticated by the API server, but RBAC grants it nothing on nodes.
        assert await delegated.get("/pods", token) == (
            403, f"Forbidden (user={user}, verb=get, resource=nodes, "
                 f"subresource(s)=[pods proxy])\n")
        assert (await delegated.get("/stats/summary", token))[0] == 403

        with cluster_role(plane, unique("node-proxy"), "proxy", account):
            status, body = await eventually(lambda: delegated.get("/pods", token), 200)
            assert status == 200
            assert json.loads(body)["items"][0]["metadata"]["name"] == "stand-in"
            # nodes/proxy does not open nodes/stats.
            assert (await delegated.get("/stats/summary", token))[0] == 403

        with cluster_role(plane, unique("node-stats"), "stats", account):
            status, body = await eventually(lambda: delegated.get("/stats/summary", token),
                                            500)
            # Allowed; the stand-in has no stats source, which is the handler's answer.
            assert (status, body) == (500, "stats are not available")
    finally:
        plane.kubectl("delete", "serviceaccount", account, "-n", NAMESPACE, "--wait=false")


async def test_bad_token_is_401_even_with_anonymous_enabled(delegated: Delegated) -> None:
    assert await delegated.get("/pods", "not-a-real-token") == (401, "Unauthorized")


async def test_certificate_from_an_unknown_ca_is_401_even_with_anonymous_enabled(
        delegated: Delegated, tmp_path: Path) -> None:
    stranger = TestCA(tmp_path, "other-ca").client("intruder")
    assert await delegated.get("/pods", cert=(stranger.cert_file, stranger.key_file)) == (
        401, "Unauthorized")


async def test_anonymous_requests_are_authorized_as_system_anonymous(
        delegated: Delegated) -> None:
    assert await delegated.get("/healthz") == (
        403, "Forbidden (user=system:anonymous, verb=get, resource=nodes, "
             "subresource(s)=[healthz proxy])\n")


async def test_api_server_client_certificate_is_a_cluster_admin(delegated: Delegated) -> None:
    plane = delegated.plane
    cert = plane.apiserver_kubelet_client_cert
    status, _body = await delegated.get("/pods", cert=(cert, cert.with_suffix(".key")))
    assert status == 200


# --- the API server's proxy to a real pykubelet ---------------------------------------------------

class ProxiedNode:
    def __init__(self, kubelet: KubeletProcess, plane: ControlPlane) -> None:
        self.kubelet = kubelet
        self.plane = plane
        self.name = kubelet.node_name

    def pod(self, name: str) -> str:
        return f"{name}-{self.name}"


def node_object(name: str, port: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                     {"type": "Hostname", "address": name}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}


def api_pod(name: str, node: str, containers: Sequence[str]) -> dict[str, Any]:
    """The API server's record of a pod the node runs (its static pod's mirror, in effect)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": c, "image": "busybox"} for c in containers]}}


@pytest.fixture(scope="module")
def proxied(control_plane: ControlPlane, testbed: Testbed,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedNode]:
    base = tmp_path_factory.mktemp("proxied")
    node = unique("proxied")
    kubelet = KubeletProcess(base, testbed.endpoint, node_name=node, extra_config={
        "address": "127.0.0.1",
        "authentication": {"x509": {"clientCAFile": str(control_plane.ca_cert)},
                           "anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"}})
    kubelet.write_pod(busybox_pod("talker", [{
        "name": "c", "command": ["sh", "-c", "i=0; while true; do echo tick $i; "
                                 "i=$((i+1)); sleep 0.5; done"]}], testbed.busybox_image))
    kubelet.write_pod(busybox_pod("httpd", [{
        "name": "web", "command": ["sh", "-c", "mkdir -p /www && echo served-by-busybox > "
                                   "/www/index.html && exec httpd -f -p 8080 -h /www"]}],
        testbed.busybox_image))
    kubelet.start()
    objects = [node_object(node, kubelet.port),
               api_pod(f"talker-{node}", node, ["c"]), api_pod(f"httpd-{node}", node, ["web"])]
    try:
        kubelet.wait_phase("talker", "Running")
        kubelet.wait_phase("httpd", "Running")
        kubelet.wait_log_lines("talker", "c", 4)  # the tail test asks for 3
        for obj in objects:
            control_plane.kubectl("create", "-f", "-", input=json.dumps(obj))
        # No kubelet reports these pods' status in this standalone run; kubectl
        # port-forward insists on a Running pod, so the test says it is.
        # (The 1.20 kubectl patches no subresource: read the pod, PUT its status.)
        for name in (f"talker-{node}", f"httpd-{node}"):
            pod = control_plane.kubectl_json("get", "pod", name, "-n", NAMESPACE)
            pod["status"]["phase"] = "Running"
            control_plane.kubectl("replace", "--raw",
                                  f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
                                  "-f", "-", input=json.dumps(pod))
        yield ProxiedNode(kubelet, control_plane)
    finally:
        control_plane.kubectl("delete", "pod", "-n", NAMESPACE, "--ignore-not-found",
                              "--grace-period=0", "--force", "--wait=false",
                              f"talker-{node}", f"httpd-{node}", check=False)
        control_plane.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false",
                              check=False)
        kubelet.stop()
        remove_everything(testbed.endpoint)


def test_kubectl_logs_through_the_api_server(proxied: ProxiedNode) -> None:
    result = proxied.plane.kubectl("logs", proxied.pod("talker"), "-c", "c", "--tail=3",
                                   "--timestamps")
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(" tick " in line for line in lines), result.stdout


def test_kubectl_logs_follow_streams_new_lines(proxied: ProxiedNode) -> None:
    argv = proxied.plane.kubectl_argv("logs", "-f", "--tail=1", proxied.pod("talker"))
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        started = time.monotonic()
        seen = [process.stdout.readline().strip() for _ in range(5)]
        elapsed = time.monotonic() - started
    finally:
        process.terminate()
        process.wait(10)
    numbers = [int(line.split()[1]) for line in seen]
    # Lines keep arriving as the container prints them (one every 0.5 s).
    assert numbers == sorted(numbers) and len(set(numbers)) == 5, seen
    assert elapsed > 1.0, (seen, elapsed)


def test_kubectl_exec_returns_output_and_exit_code(proxied: ProxiedNode) -> None:
    result = proxied.plane.kubectl("exec", proxied.pod("talker"), "-c", "c", "--", "sh", "-c",
                                   "echo from-exec; echo to-stderr >&2; exit 3", check=False)
    assert result.returncode == 3, result
    assert result.stdout == "from-exec\n"
    assert "to-stderr" in result.stderr


def test_kubectl_exec_with_stdin(proxied: ProxiedNode) -> None:
    result = proxied.plane.kubectl("exec", "-i", proxied.pod("talker"), "-c", "c", "--",
                                   "sh", "-c", "tr a-z A-Z", input="quiet words\n")
    assert result.stdout == "QUIET WORDS\n"


def test_kubectl_port_forward_reaches_httpd(proxied: ProxiedNode) -> None:
    local = free_port()
    argv = proxied.plane.kubectl_argv("port-forward", f"pod/{proxied.pod('httpd')}",
                                      f"{local}:8080")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def forwarded() -> str:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/index.html",
                                        timeout=5) as response:
                return str(response.read().decode())

        body = wait_until(forwarded, 30, "port-forward to answer", interval=0.3,
                          ignore=(OSError,))
    finally:
        process.terminate()
        process.wait(10)
    assert body == "served-by-busybox\n"


def test_node_proxy_serves_stats_metrics_and_configz(proxied: ProxiedNode) -> None:
    base = f"/api/v1/nodes/{proxied.name}/proxy"
    summary = json.loads(proxied.plane.kubectl("get", "--raw", f"{base}/stats/summary").stdout)
    pods = {p["podRef"]["name"]: p for p in summary["pods"]}
    assert pods[proxied.pod("talker")]["containers"][0]["memory"]["workingSetBytes"] > 0
    text = proxied.plane.kubectl("get", "--raw", f"{base}/metrics/resource").stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    cpu = {s.labels["pod"]: s.value for s in families["pod_cpu_usage_seconds"].samples}
    assert cpu[proxied.pod("talker")] > 0
    configz = json.loads(proxied.plane.kubectl("get", "--raw", f"{base}/configz").stdout)
    assert configz["kubeletconfig"]["port"] == proxied.kubelet.port


def test_node_stats_via_socket_is_denied_without_the_api_servers_certificate(
        proxied: ProxiedNode) -> None:
    """The same port refuses a caller with no certificate (it is not open to the network)."""
    context = ssl.create_default_context(cafile=str(proxied.kubelet.cert_dir / "kubelet.crt"))
    with socket.create_connection(("127.0.0.1", proxied.kubelet.port), 5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /stats/summary HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = tls.recv(200).decode()
    assert answer.startswith("HTTP/1.1 401"), answer


# --- Prometheus scraping the kubelet as a cluster's Prometheus does ------------------------------

PROMETHEUS_JOBS = {"kubernetes-nodes": "/metrics", "kubernetes-cadvisor": "/metrics/cadvisor",
                   "kubernetes-resource": "/metrics/resource"}


def prometheus_config(node: str, port: int, token_file: Path) -> str:
    """The usual kubelet jobs: HTTPS with a bearer token, the three metric paths.

    Debian's Prometheus is built without Kubernetes service discovery, so the
    node is a static target labelled as discovery would label it.
    """
    jobs = []
    for job, path in PROMETHEUS_JOBS.items():
        jobs.append({
            "job_name": job, "scheme": "https", "metrics_path": path,
            # Kubelets' self-signed serving certificates are not verifiable, hence
            # insecure_skip_verify in the standard configuration too.
            "tls_config": {"insecure_skip_verify": True},
            "authorization": {"credentials_file": str(token_file)},
            "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                                "labels": {"kubernetes_io_hostname": node}}],
        })
    return json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                       "scrape_configs": jobs})


@pytest.fixture
async def scraped_kubelet(control_plane: ControlPlane, testbed: Testbed,
                          tmp_path: Path) -> AsyncIterator[tuple[str, int]]:
    """A kubelet API with real stats and delegated auth, advertised by a Node object."""
    from pykubelet.cri import RemoteImageService, RemoteRuntimeService
    from pykubelet.metrics import KUBELET_REGISTRY
    from pykubelet.prober.metrics import PROBER_REGISTRY
    from pykubelet.server.server import metric_paths
    from pykubelet.stats import StatsProvider, cadvisor_metrics, resource_metrics

    node = unique("scraped")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(control_plane.node_kubeconfig(node)),
                                  client_configuration=configuration)
    api = client.ApiClient(configuration)
    runtime = RemoteRuntimeService(testbed.endpoint, 30)
    images = RemoteImageService(testbed.endpoint, 30)
    await runtime.connect()
    await images.connect()
    stats = StatsProvider(runtime, images, node, str(tmp_path), str(tmp_path))
    auth = build_auth(node, api, anonymous=False, webhook_authentication=True,
                      token_cache_ttl=120, client_ca_file="", authorization_mode="Webhook",
                      authorized_ttl=300, unauthorized_ttl=30, fine_grained=True)
    tls = initialize_tls(str(tmp_path / "pki"), node)
    server = KubeletAPIServer(StandInPods(), [], ServerOptions(metrics=metric_paths(  # type: ignore[arg-type]
        [KUBELET_REGISTRY], [cadvisor_metrics(stats, None, stats.machine_info)],
        [resource_metrics(stats)], [PROBER_REGISTRY])), stats=stats, auth=auth)
    port = free_port()
    runner = await start_http_server("127.0.0.1", port, server.application(), tls.ssl_context())
    await asyncio.to_thread(control_plane.kubectl, "create", "-f", "-",
                            input=json.dumps(node_object(node, port)))
    try:
        yield node, port
    finally:
        await asyncio.to_thread(control_plane.kubectl, "delete", "node", node,
                                "--ignore-not-found", "--wait=false", check=False)
        await runner.cleanup()
        await runtime.close()
        await images.close()
        await api.close()


async def test_prometheus_scrapes_the_kubelet_with_a_bearer_token(
        control_plane: ControlPlane, scraped_kubelet: tuple[str, int], tmp_path: Path) -> None:
    node, port = scraped_kubelet
    account, role = unique("prometheus"), unique("prometheus")
    plane = control_plane
    token = await asyncio.to_thread(service_account_token, plane, account)
    token_file = tmp_path / "token"
    token_file.write_text(token)
    await asyncio.to_thread(plane.kubectl, "create", "clusterrole", role,
                            "--verb=get", "--resource=nodes/metrics")
    await asyncio.to_thread(plane.kubectl, "create", "clusterrolebinding", role,
                            f"--clusterrole={role}", f"--serviceaccount={NAMESPACE}:{account}")
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(prometheus_config(node, port, token_file))
    web_port = free_port()
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={config_file}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web_port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))  # noqa: SIM115
    api = f"http://127.0.0.1:{web_port}/api/v1"
    try:
        async with aiohttp.ClientSession() as session:
            async def targets_up() -> list[dict[str, Any]] | None:
                async with session.get(f"{api}/targets") as response:
                    targets: list[dict[str, Any]] = (await response.json())["data"][
                        "activeTargets"]
                up = len(targets) == 3 and all(t["health"] == "up" for t in targets)
                return targets if up else None

            targets = await wait_until_async(
                targets_up, 90, "Prometheus's three targets up", interval=1,
                ignore=(aiohttp.ClientError,),
                on_timeout=lambda: (tmp_path / "prometheus.log").read_text()[-2000:])
            assert sorted(t["labels"]["job"] for t in targets) == sorted(PROMETHEUS_JOBS), \
                (targets, (tmp_path / "prometheus.log").read_text()[-2000:])
            assert all(t["health"] == "up" for t in targets), targets

            async def query(expression: str) -> list[dict[str, Any]]:
                # Samples may land a scrape after the target turned healthy.
                async def result() -> list[dict[str, Any]]:
                    async with session.get(f"{api}/query",
                                           params={"query": expression}) as response:
                        found: list[dict[str, Any]] = (await response.json())["data"]["result"]
                    return found
                return await wait_until_async(result, 20, f"samples of {expression}",
                                              interval=1)

            cpu = await query("node_cpu_usage_seconds_total")
            assert cpu and float(cpu[0]["value"][1]) > 0
            served = await query('kubelet_http_requests_total{path="metrics/resource"}')
            assert served and float(served[0]["value"][1]) >= 1
    finally:
        prometheus.terminate()
        prometheus.wait(20)
        await asyncio.to_thread(plane.kubectl, "delete", "clusterrolebinding,clusterrole", role,
                                "--wait=false", check=False)
        await asyncio.to_thread(plane.kubectl, "delete", "serviceaccount", account, "-n",
                                NAMESPACE, "--wait=false", check=False)
