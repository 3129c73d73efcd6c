"""The testbed's cluster DNS against a real API server: what dig sees over UDP and TCP.

No kubelet: Services and Endpoints are written through the API as an admin,
the watcher (``python -m testsupport.cluster_dns``) feeds unbound on a free
port of 127.0.0.1, and ``dig`` asks it what a pod's resolver would.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.cluster_dns import ClusterDNS, free_port
from testsupport.controlplane import ControlPlane
from testsupport.polling import wait_until
from testsupport.testbed import SCRIPTS_DIR

pytestmark = pytest.mark.controlplane

CHANGE_TIMEOUT = 10.0


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"dns-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def dns(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ClusterDNS]:
    server = ClusterDNS(kubeconfig=control_plane.admin_kubeconfig, dir=tmp_path / "dns")
    with server:
        yield server


def apply(control_plane: ControlPlane, *objects: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-",
                          input=json.dumps({"apiVersion": "v1", "kind": "List",
                                            "items": list(objects)}))


def service(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def dig(dns: ClusterDNS, name: str, rtype: str, *, tcp: bool) -> tuple[str, list[str]]:
    """The status (NOERROR, NXDOMAIN...) and the sorted answer data of one query."""
    result = subprocess.run(
        ["dig", f"@{dns.host}", "-p", str(dns.port), "+tcp" if tcp else "+notcp",
         "+tries=1", "+time=2", "+noall", "+comments", "+answer", name, rtype],
        capture_output=True, text=True, timeout=10, check=True)
    status = ""
    answers = []
    for line in result.stdout.splitlines():
        if "status:" in line:
            status = line.split("status:")[1].split(",")[0].strip()
        elif line and not line.startswith(";"):
            fields = line.split()
            if fields[3] == rtype:
                answers.append(" ".join(fields[4:]))
    return status, sorted(answers)


def answered(dns: ClusterDNS, name: str, rtype: str, expected: list[str]) -> None:
    """Wait until UDP and TCP both give ``expected`` (NXDOMAIN when it is empty)."""
    want = ("NXDOMAIN", []) if not expected else ("NOERROR", sorted(expected))
    for tcp in (False, True):
        def seen(tcp: bool = tcp) -> tuple[str, list[str]] | None:
            got = dig(dns, name, rtype, tcp=tcp)
            return got if got == want else None

        wait_until(seen, CHANGE_TIMEOUT,
                   f"{rtype} {name} over {'TCP' if tcp else 'UDP'} to be {want}",
                   on_timeout=dns.log_tail)


def test_services_endpoints_and_pods_resolve_and_follow_changes(
        control_plane: ControlPlane, namespace: str, dns: ClusterDNS) -> None:
    zone = f"{namespace}.svc.cluster.local"
    apply(control_plane,
          service("web", namespace, ports=[{"name": "http", "port": 80}]),
          service("db", namespace, clusterIP="None",
                  ports=[{"name": "http", "port": 8080}]),
          service("ext", namespace, type="ExternalName", externalName="foo.example.com"),
          {"apiVersion": "v1", "kind": "Endpoints",
           "metadata": {"name": "db", "namespace": namespace},
           "subsets": [{"addresses": [{"ip": "10.88.200.1", "hostname": "db-0"},
                                      {"ip": "10.88.200.2"}],
                        "notReadyAddresses": [{"ip": "10.88.200.3", "hostname": "db-2"}],
                        "ports": [{"name": "http", "port": 8080}]}]})
    cluster_ip = control_plane.kubectl_json("get", "service", "web", "-n",
                                            namespace)["spec"]["clusterIP"]

    # A ClusterIP service: its address, its named port, and the address's name.
    answered(dns, f"web.{zone}", "A", [cluster_ip])
    answered(dns, f"_http._tcp.web.{zone}", "SRV", [f"0 100 80 web.{zone}."])
    reverse = ".".join(reversed(cluster_ip.split("."))) + ".in-addr.arpa"
    answered(dns, reverse, "PTR", [f"web.{zone}."])
    # A headless service: its ready endpoints, named by hostname or dashed address.
    answered(dns, f"db.{zone}", "A", ["10.88.200.1", "10.88.200.2"])
    answered(dns, f"db-0.db.{zone}", "A", ["10.88.200.1"])
    answered(dns, f"10-88-200-2.db.{zone}", "A", ["10.88.200.2"])
    answered(dns, "1.200.88.10.in-addr.arpa", "PTR", [f"db-0.db.{zone}."])
    answered(dns, f"_http._tcp.db.{zone}", "SRV",
             [f"0 50 8080 db-0.db.{zone}.", f"0 50 8080 10-88-200-2.db.{zone}."])
    answered(dns, f"db-2.db.{zone}", "A", [])
    # An ExternalName service, pods by rule in any namespace, and nothing else.
    answered(dns, f"ext.{zone}", "CNAME", ["foo.example.com."])
    answered(dns, f"10-88-7-7.{namespace}.pod.cluster.local", "A", ["10.88.7.7"])
    answered(dns, "10-88-7-8.anywhere.pod.cluster.local", "A", ["10.88.7.8"])
    started = time.monotonic()
    assert dig(dns, "example.com", "A", tcp=False) == ("NXDOMAIN", [])
    assert time.monotonic() - started < 1.0, "a name outside the cluster must not wait"

    # Changes: the external name, then the type; not-ready addresses published.
    control_plane.kubectl("patch", "service", "ext", "-n", namespace, "--type=merge",
                          "-p", json.dumps({"spec": {"externalName": "bar.example.com"}}))
    answered(dns, f"ext.{zone}", "CNAME", ["bar.example.com."])
    control_plane.kubectl("patch", "service", "ext", "-n", namespace, "--type=merge", "-p",
                          json.dumps({"spec": {"type": "ClusterIP", "externalName": None,
                                               "ports": [{"name": "http", "port": 80}]}}))
    ext_ip = control_plane.kubectl_json("get", "service", "ext", "-n",
                                        namespace)["spec"]["clusterIP"]
    answered(dns, f"ext.{zone}", "A", [ext_ip])
    assert dig(dns, f"ext.{zone}", "CNAME", tcp=False) == ("NOERROR", [])
    control_plane.kubectl("patch", "service", "db", "-n", namespace, "--type=merge",
                          "-p", json.dumps({"spec": {"publishNotReadyAddresses": True}}))
    answered(dns, f"db-2.db.{zone}", "A", ["10.88.200.3"])
    answered(dns, f"db.{zone}", "A", ["10.88.200.1", "10.88.200.2", "10.88.200.3"])

    # Deletions take every record of the service with them.
    control_plane.kubectl("delete", "service", "web", "db", "-n", namespace)
    answered(dns, f"web.{zone}", "A", [])
    answered(dns, f"_http._tcp.web.{zone}", "SRV", [])
    answered(dns, reverse, "PTR", [])
    answered(dns, f"db.{zone}", "A", [])
    answered(dns, f"db-0.db.{zone}", "A", [])
    answered(dns, "1.200.88.10.in-addr.arpa", "PTR", [])


def test_the_kubernetes_service_resolves_and_a_stop_takes_unbound_with_it(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    server = ClusterDNS(kubeconfig=control_plane.admin_kubeconfig, dir=tmp_path / "dns")
    server.start()
    try:
        answered(server, "kubernetes.default.svc.cluster.local", "A", ["10.96.0.1"])
        unbound_pid = int((server.dir / "unbound.pid").read_text())
    finally:
        server.stop()
    assert server.process is not None and server.process.returncode == 0, server.log_tail()
    assert not Path(f"/proc/{unbound_pid}").exists()
    assert not (server.dir / "ready").exists()


def test_dns_sh_starts_once_reports_status_and_stops_idempotently(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    script = str(SCRIPTS_DIR / "dns.sh")
    dir = tmp_path / "dns-sh"
    port = free_port()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], capture_output=True, text=True, timeout=60,
                              check=False)

    start = ["start", str(dir), str(control_plane.admin_kubeconfig), f"127.0.0.1:{port}"]
    try:
        assert run(*start).returncode == 0, (dir / "cluster-dns.log").read_text()
        again = run(*start)
        assert again.returncode == 0 and "already running" in again.stderr
        status = run("status", str(dir))
        assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout
        server = ClusterDNS(kubeconfig=control_plane.admin_kubeconfig, dir=dir, port=port)
        answered(server, "kubernetes.default.svc.cluster.local", "A", ["10.96.0.1"])
        unbound_pid = int((dir / "unbound.pid").read_text())
    finally:
        assert run("stop", str(dir)).returncode == 0
    assert run("stop", str(dir)).returncode == 0
    assert run("status", str(dir)).returncode != 0
    assert not dir.exists()
    assert not Path(f"/proc/{unbound_pid}").exists()
