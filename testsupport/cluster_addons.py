"""What a multi-node test cluster runs besides its kubelets: kube-proxy on every node and
the cluster DNS, started in one place (:func:`cluster_addons`).

A cluster made by kubeadm runs two add-ons that conformance tests and users take for
granted: kube-proxy (Services: ClusterIP, NodePort, session affinity) on every node,
and a cluster DNS (CoreDNS) behind the ``kube-dns`` Service at 10.96.0.10, which every
kubelet writes into its pods' resolv.conf (``clusterDNS``/``clusterDomain``). Here:

- **kube-proxy v1.20.2** (the control plane's build), iptables mode, runs as a plain
  process per node inside the node's network namespace (``nsenter --net``, as the
  node's kubelet), not as a DaemonSet through the kubelets. A DaemonSet would need an
  image (nothing here builds a kube-proxy image, and there is no registry it could come
  from), a hostNetwork pod of each node's namespace, and the ``/run/xtables.lock``,
  ``/lib/modules`` and iptables binaries of the machine mounted into it; and a pod's
  failure would show up as a kube-proxy problem in every Service test. A process
  started with the node is what the test hosts can run faithfully; what it programs is
  the same either way. It never changes the machine: each node's iptables (nf_tables)
  rules, routes and ``net.ipv4.conf.all.route_localnet`` belong to the node's network
  namespace; its ``conntrack`` section leaves ``nf_conntrack_max`` and the conntrack
  hash size alone (``maxPerCore: 0``: kube-proxy 1.20 then skips ``SetMax``, which
  would write the machine-wide ``/sys/module/nf_conntrack/parameters/hashsize``; a
  node namespace may not write ``nf_conntrack_max`` at all, so kube-proxy would fail to
  start) and the TCP timeouts too (``0s``); and a ``modprobe`` that refuses comes
  first on its PATH, because kube-proxy probes the IPVS modules with ``modprobe``
  even in iptables mode when the machine has loadable modules. Its credential is
  user ``system:kube-proxy`` (``controlplane.sh proxy-credentials``), which the
  default RBAC policy binds to ``system:node-proxier``.

- **A route for the Service range** in each node namespace (onto the switch, no
  gateway): the namespaces have no default route, and a node's own processes
  (hostNetwork pods, ``nsenter`` commands) need a route to a ClusterIP before
  kube-proxy's OUTPUT rules can rewrite it; pods' packets are rewritten on arrival
  (PREROUTING) and need none. No gateway, so a packet to a ClusterIP no rule
  translates dies on the switch instead of leaving through the machine, whose
  forwarding is the machine's business.

- **The cluster DNS**: the testbed's CoreDNS stand-in (:mod:`testsupport.cluster_dns`,
  unbound fed from the API) listening on the machine's address on the switch
  (``NodeHost.host_address``, 10.89.0.1) on a free port, and a ``kube-dns`` Service in
  ``kube-system`` as kubeadm names it (ClusterIP ``CLUSTER_DNS_IP``, ports dns/53 UDP
  and dns-tcp/53 TCP, no selector) whose Endpoints point at that address and port:
  kube-proxy takes pods' queries to 10.96.0.10:53 there. A port of its own rather
  than 53, so that several clusters on the machine (a test and ``run-cluster.sh``)
  share the switch address without a clash; nothing but kube-proxy's rules ever
  addresses the server directly.

Kubelets point at it with ``KUBELET_DNS_CONFIG`` (their extra KubeletConfiguration;
``python -m testsupport.cluster_addons kubelet-config`` prints it for shell scripts).
The API server needs no kube-proxy on the machine: with an advertise address,
controlplane.sh gives it ``--enable-aggregator-routing=true``, so webhooks and
aggregated API servers are called at their endpoints' pod IPs, which the machine
routes to the nodes.

``python -m testsupport.cluster_addons run --controlplane DIR --dir DIR NODE...``
starts the same for nodes on existing test hosts (``run-cluster.sh --nodes N``) and
keeps them until SIGTERM or Ctrl-C; ``DIR/ready`` appears once everything serves.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testsupport.cluster_dns import ClusterDNS, free_port
from testsupport.controlplane import ControlPlane, built_binary
from testsupport.nodehost import Node, NodeHost

# The pods of every node (nodehost.sh gives node I the pod CIDR 10.244.I.0/24): traffic
# from outside it to a Service is masqueraded by kube-proxy.
CLUSTER_CIDR = "10.244.0.0/16"
# kubeadm's choices: the tenth address of the Service range, and the domain.
CLUSTER_DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
# What each kubelet's KubeletConfiguration needs for its pods to use the cluster DNS.
KUBELET_DNS_CONFIG: dict[str, Any] = {"clusterDNS": [CLUSTER_DNS_IP],
                                      "clusterDomain": CLUSTER_DOMAIN}
DNS_SERVICE_NAMESPACE = "kube-system"
DNS_SERVICE_NAME = "kube-dns"

# Inside each node's namespace, so every node has upstream's ports.
PROXY_HEALTHZ_PORT = 10256
PROXY_METRICS_PORT = 10249
PROXY_READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_LINES = 30
MODPROBE_SHIM = """#!/bin/sh
# Written by testsupport/cluster_addons.py. kube-proxy probes the IPVS modules with
# modprobe even in iptables mode; a test node may not load kernel modules (they are
# the whole machine's).
echo "modprobe $*: refused on a pykubelet test node" >&2
exit 1
"""


class ClusterAddonsError(RuntimeError):
    """kube-proxy or the cluster DNS failed to start; the message carries their log."""


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return ""
    return f"--- {path} (tail) ---\n" + "\n".join(lines)


def kube_proxy_config(*, kubeconfig: Path, node_name: str) -> dict[str, Any]:
    """The KubeProxyConfiguration of one node's kube-proxy (see the module docstring)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        # Every address of the node's namespace; its metrics on its loopback.
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": f"0.0.0.0:{PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{PROXY_METRICS_PORT}",
        # Leave every conntrack setting as it is: nf_conntrack_max and the hash size are
        # the machine's.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
        # The process's own score, not -999: a test process is no system daemon.
        "oomScoreAdj": 0,
    }


def dns_service_manifest(*, address: str, port: int) -> dict[str, Any]:
    """The ``kube-dns`` Service (kubeadm's name, ports and ClusterIP) and its Endpoints:
    the cluster DNS at ``address``:``port`` over UDP and TCP."""
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "KubeDNS"}
    metadata = {"name": DNS_SERVICE_NAME, "namespace": DNS_SERVICE_NAMESPACE, "labels": labels}
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": metadata,
         "spec": {"clusterIP": CLUSTER_DNS_IP,
                  "ports": [{"name": name, "port": 53, "protocol": protocol,
                             "targetPort": port} for name, protocol in ports]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": metadata,
         "subsets": [{"addresses": [{"ip": address}],
                      "ports": [{"name": name, "port": port, "protocol": protocol}
                                for name, protocol in ports]}]},
    ]}


class KubeProxy:
    """kube-proxy for node ``node_name``, running in ``host``'s network namespace."""

    def __init__(self, *, host: NodeHost, node_name: str, kubeconfig: Path, dir: Path,
                 service_cidr: str) -> None:
        self.host = host
        self.node_name = node_name
        self.kubeconfig = kubeconfig
        self.dir = dir
        self.service_cidr = service_cidr
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.dir / "kube-proxy.log"

    def start(self) -> None:
        """Start it; it programs the node's rules within a second or two (``programs``)."""
        binary = built_binary("kube-proxy", "kube-proxy")
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "kube-proxy.yaml"
        config.write_text(json.dumps(
            kube_proxy_config(kubeconfig=self.kubeconfig, node_name=self.node_name), indent=2))
        shims = self.dir / "bin"
        shims.mkdir(exist_ok=True)
        (shims / "modprobe").write_text(MODPROBE_SHIM)
        (shims / "modprobe").chmod(0o755)
        self._route("replace")
        env = {**os.environ,
               "PATH": f"{shims}:{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin:/sbin:/bin"}
        with open(self.log_path, "ab") as log:
            # Its own session: a Ctrl-C aimed at the test run must not end it before the
            # cleanup does.
            self.process = subprocess.Popen(
                self.host.nsenter([str(binary), f"--config={config}", "--v=2"]),
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)

    def _route(self, action: str) -> None:
        result = self.host.run("ip", "route", action, self.service_cidr, "dev", "eth0")
        if result.returncode != 0 and action != "delete":
            raise ClusterAddonsError(
                f"ip route {action} {self.service_cidr} on {self.host.name}: {result.stderr}")

    def nat_rules(self) -> str:
        """The node's nat table (``iptables-save -t nat`` in its namespace)."""
        result = self.host.run("iptables-save", "-t", "nat")
        return result.stdout if result.returncode == 0 else ""

    def programs(self, service: str, port_name: str) -> bool:
        """Its rules send ``service`` (``namespace/name``) port ``port_name`` to endpoints."""
        comment = f'"{service}:{port_name} cluster IP"'
        return any(comment in line and "-j KUBE-SVC-" in line
                   for line in self.nat_rules().splitlines())

    def check_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            status = None if self.process is None else self.process.returncode
            raise ClusterAddonsError(f"kube-proxy on {self.node_name} is not running "
                                     f"(exit status {status})\n{_tail(self.log_path)}")

    def stop(self) -> None:
        """SIGTERM, SIGKILL after a while; its rules stay in the namespace, which goes
        with the node (and the next kube-proxy there replaces them)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self._route("delete")


@dataclass(frozen=True)
class ClusterAddons:
    """The running add-ons: the cluster DNS (its server's own address and port, which
    the ``kube-dns`` Service's endpoints name) and one kube-proxy per node."""

    dns: ClusterDNS
    proxies: tuple[KubeProxy, ...]

    @property
    def dns_endpoint(self) -> str:
        return f"{self.dns.host}:{self.dns.port}"

    def describe(self) -> str:
        nodes = ", ".join(proxy.node_name for proxy in self.proxies)
        return (f"cluster DNS {CLUSTER_DNS_IP}:53 ({DNS_SERVICE_NAMESPACE}/{DNS_SERVICE_NAME}, "
                f"domain {CLUSTER_DOMAIN}) served at {self.dns_endpoint}; kube-proxy on {nodes}")


@contextlib.contextmanager
def cluster_addons(plane: ControlPlane, nodes: Sequence[Node], *,
                   dir: Path | None = None) -> Iterator[ClusterAddons]:
    """kube-proxy on each of ``nodes`` and the cluster DNS with its ``kube-dns`` Service,
    once every kube-proxy sends the DNS Service to its endpoint; all stopped afterwards.
    The kubelets should have ``KUBELET_DNS_CONFIG``. ``dir`` keeps the logs (default: a
    new directory under /tmp, removed afterwards)."""
    with addons_on_hosts(plane, [(node.name, node.host) for node in nodes], dir=dir) as addons:
        yield addons


@contextlib.contextmanager
def addons_on_hosts(plane: ControlPlane, hosts: Sequence[tuple[str, NodeHost]], *,
                    dir: Path | None = None) -> Iterator[ClusterAddons]:
    """:func:`cluster_addons` for nodes given as (node name, test host) pairs."""
    if not hosts:
        raise ClusterAddonsError("no nodes to run the cluster add-ons on")
    service_cidr = plane.env["SERVICE_CLUSTER_IP_RANGE"]
    if ipaddress.ip_address(CLUSTER_DNS_IP) not in ipaddress.ip_network(service_cidr):
        raise ClusterAddonsError(f"{CLUSTER_DNS_IP} is outside the Service range {service_cidr}")
    for name, host in hosts:
        if not ipaddress.IPv4Network(host.pod_cidr).subnet_of(
                ipaddress.IPv4Network(CLUSTER_CIDR)):
            raise ClusterAddonsError(f"node {name}'s pod CIDR {host.pod_cidr} is outside "
                                     f"{CLUSTER_CIDR}, kube-proxy's clusterCIDR")
    own_dir = dir is None
    base = dir if dir is not None else Path("/tmp") / f"pkaddons-{secrets.token_hex(4)}"
    address = hosts[0][1].host_address
    dns = ClusterDNS(kubeconfig=plane.admin_kubeconfig, dir=base / "dns", host=address,
                     port=free_port(address), domain=CLUSTER_DOMAIN)
    proxies: list[KubeProxy] = []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(dns)
            plane.kubectl("apply", "-f", "-", input=json.dumps(
                dns_service_manifest(address=dns.host, port=dns.port)))
            stack.callback(_delete_dns_service, plane)
            kubeconfig = plane.proxy_kubeconfig()
            for name, host in hosts:
                proxy = KubeProxy(host=host, node_name=name, kubeconfig=kubeconfig,
                                  dir=base / name, service_cidr=service_cidr)
                stack.callback(proxy.stop)
                proxy.start()
                proxies.append(proxy)
            _wait_programmed(proxies, f"{DNS_SERVICE_NAMESPACE}/{DNS_SERVICE_NAME}", "dns")
            yield ClusterAddons(dns, tuple(proxies))
    finally:
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)


def _wait_programmed(proxies: Sequence[KubeProxy], service: str, port_name: str) -> None:
    deadline = time.monotonic() + PROXY_READY_TIMEOUT_SECONDS
    waiting = list(proxies)
    while waiting:
        for proxy in waiting:
            proxy.check_running()
        waiting = [proxy for proxy in waiting if not proxy.programs(service, port_name)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ClusterAddonsError(
                f"kube-proxy on {', '.join(proxy.node_name for proxy in waiting)} has not "
                f"programmed {service} after {PROXY_READY_TIMEOUT_SECONDS:g}s\n"
                + "\n".join(_tail(proxy.log_path) for proxy in waiting))
        time.sleep(0.25)


def _delete_dns_service(plane: ControlPlane) -> None:
    """Best effort: the Service and Endpoints go with the control plane anyway."""
    with contextlib.suppress(Exception):
        plane.kubectl("delete", "service,endpoints", "-n", DNS_SERVICE_NAMESPACE,
                      DNS_SERVICE_NAME, "--ignore-not-found", "--wait=false",
                      check=False, timeout=15)


# --- the command line (run-cluster.sh) ---------------------------------------------


def kubelet_config_yaml() -> str:
    """``KUBELET_DNS_CONFIG`` as lines to append to a KubeletConfiguration file (JSON
    values are YAML)."""
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in KUBELET_DNS_CONFIG.items())


class _Stop(Exception):
    pass


def _stop(signum: int, frame: object) -> None:
    # Once: a second signal must not cut the cleanup short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise _Stop


def _stop_on_signals() -> None:
    """SIGTERM and SIGINT raise ``_Stop``, once, so the add-ons are stopped on the way out."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def _run(controlplane: Path, dir: Path, node_names: list[str]) -> int:
    _stop_on_signals()
    ready = dir / "ready"
    dir.mkdir(parents=True, exist_ok=True)
    ready.unlink(missing_ok=True)
    try:
        plane = ControlPlane(controlplane)
        hosts = [(name, NodeHost.existing(name)) for name in node_names]
        with addons_on_hosts(plane, hosts, dir=dir) as addons:
            ready.write_text(addons.describe() + "\n")
            print(f"cluster_addons: {addons.describe()}", flush=True)
            try:
                while True:
                    for proxy in addons.proxies:
                        proxy.check_running()
                    if addons.dns.process is None or addons.dns.process.poll() is not None:
                        raise ClusterAddonsError(f"the cluster DNS exited\n"
                                                 f"{addons.dns.log_tail()}")
                    time.sleep(1)
            finally:
                ready.unlink(missing_ok=True)
    except _Stop:
        print("cluster_addons: stopped", flush=True)
        return 0
    except ClusterAddonsError as err:
        print(f"cluster_addons: error: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


def _run_dns(kubeconfig: Path, address: str, dir: Path) -> int:
    """The cluster DNS alone, for a cluster controlplane.sh did not make (kubeadm's):
    serves until SIGTERM; DIR/kube-dns.json is then the ``kube-dns`` Service and
    Endpoints to apply (the caller holds the cluster's admin credentials)."""
    _stop_on_signals()
    manifest = dir / "kube-dns.json"
    manifest.unlink(missing_ok=True)
    dns = ClusterDNS(kubeconfig=kubeconfig, dir=dir, host=address, port=free_port(address),
                     domain=CLUSTER_DOMAIN)
    try:
        with dns:
            manifest.write_text(json.dumps(dns_service_manifest(address=dns.host,
                                                                port=dns.port)))
            print(f"cluster_addons: cluster DNS for {CLUSTER_DOMAIN} served at "
                  f"{dns.host}:{dns.port}", flush=True)
            while dns.process is not None and dns.process.poll() is None:
                time.sleep(1)
            print(f"cluster_addons: error: the cluster DNS exited\n{dns.log_tail()}",
                  file=sys.stderr, flush=True)
            return 1
    except _Stop:
        print("cluster_addons: stopped", flush=True)
        return 0
    finally:
        manifest.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testsupport.cluster_addons",
        description="kube-proxy on test-host nodes and the cluster DNS (run-cluster.sh --nodes)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("kubelet-config",
                        help="print the KubeletConfiguration lines for the cluster DNS")
    run = commands.add_parser("run", help="run the add-ons until SIGTERM or Ctrl-C")
    run.add_argument("--controlplane", type=Path, required=True,
                     help="the running control plane's directory (controlplane.sh)")
    run.add_argument("--dir", type=Path, required=True,
                     help="directory for the logs; DIR/ready appears once all serve")
    run.add_argument("nodes", nargs="+", metavar="NODE",
                     help="node names, each on the test host of that name (nodehost.sh)")
    dns = commands.add_parser(
        "dns", help="only the cluster DNS, until SIGTERM, for a cluster made otherwise "
                    "(kubeadm-try.sh); DIR/kube-dns.json is the Service to apply")
    dns.add_argument("--kubeconfig", type=Path, required=True,
                     help="credentials that may list and watch Services, Endpoints and Pods")
    dns.add_argument("--address", required=True,
                     help="the address to serve on, which the cluster's pods reach")
    dns.add_argument("--dir", type=Path, required=True, help="directory for its files and logs")
    args = parser.parse_args(argv)
    if args.command == "kubelet-config":
        sys.stdout.write(kubelet_config_yaml())
        return 0
    if args.command == "dns":
        return _run_dns(args.kubeconfig.resolve(), args.address, args.dir.resolve())
    return _run(args.controlplane.resolve(), args.dir.resolve(), list(args.nodes))


if __name__ == "__main__":
    sys.exit(main())
