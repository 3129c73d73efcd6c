"""makeIPTablesUtilChains against the real iptables tools, never on the host's tables.

Each test runs in a network namespace of its own (``ip netns``), whose tables are
its own, on one back-end at a time: a ``PATH`` directory names the nf_tables or
the legacy multi-binary ``iptables``, ``ip6tables`` and their ``-save``, which is
how a host's choice reaches the kubelet (it runs ``iptables`` from ``PATH``).
What is checked is what an operator or kube-proxy sees with ``iptables -S`` in
that namespace:

- a real pykubelet started there makes upstream's chains and rules, in that
  back-end only, and its localnet rule really drops a packet from a neighbour to
  127.0.0.1 that the same namespace delivered before (a veth pair, one end with
  ``route_localnet``, a UDP frame written to the other end);
- the chains come back after a firewall reload flushes every table. This one
  runs the kubelet's ``IPTablesUtilChains`` in a process in the namespace with a
  half-second canary interval instead of the kubelet's minute.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testsupport.kubelet_process import KubeletProcess
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

BACKENDS = ["nft", "legacy"]
TOOLS = ["iptables", "ip6tables", "iptables-save", "ip6tables-save"]
LOCALNET = ('! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment '
            '"block incoming localnet connections" -m conntrack '
            '! --ctstate RELATED,ESTABLISHED,DNAT -j DROP')
# What v1.35's kubelet makes, as `iptables -t <table> -S` lists it (policies left out).
EXPECTED = {
    "iptables": {
        "mangle": {"-N KUBE-IPTABLES-HINT", "-N KUBE-KUBELET-CANARY"},
        "nat": {"-N KUBE-KUBELET-CANARY"},
        "filter": {"-N KUBE-FIREWALL", "-N KUBE-KUBELET-CANARY", "-A INPUT -j KUBE-FIREWALL",
                   "-A OUTPUT -j KUBE-FIREWALL", f"-A KUBE-FIREWALL {LOCALNET}"},
    },
    "ip6tables": {
        "mangle": {"-N KUBE-IPTABLES-HINT", "-N KUBE-KUBELET-CANARY"},
        "nat": {"-N KUBE-KUBELET-CANARY"},
        "filter": {"-N KUBE-KUBELET-CANARY"},
    },
}

# A neighbour on the node's link: the node's end has this address, the sender none.
NODE_ADDRESS, NEIGHBOUR_ADDRESS = "192.0.2.1/24", "192.0.2.77"
LISTEN_PORT = 5555
# Appends each datagram to 127.0.0.1:<port> as a line of <file>, after a "ready" line.
LISTENER = """
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", int(sys.argv[1])))
with open(sys.argv[2], "ab", buffering=0) as out:
    out.write(b"ready\\n")
    while True:
        out.write(sock.recv(200) + b"\\n")
"""
# Writes one UDP datagram to 127.0.0.1 as an Ethernet frame on <interface>, addressed
# to <mac>, from <source>: what a neighbour on the node's link can send.
SENDER = """
import socket, struct, sys
interface, mac, source, port, payload = sys.argv[1:6]
payload = payload.encode()

def checksum(data):
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF

udp = struct.pack("!HHHH", 40000, int(port), 8 + len(payload), 0) + payload
ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                 socket.inet_aton(source), socket.inet_aton("127.0.0.1"))
ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
    raw.bind((interface, 0))
    raw.send(bytes.fromhex(mac.replace(":", "")) + raw.getsockname()[4] + b"\\x08\\x00"
             + ip + udp)
"""
# The kubelet's chains alone, with a short canary interval (argv[1], seconds).
CHAINS_ONLY = """
import asyncio, sys
from pykubelet.kubelet.network_linux import IPTablesUtilChains
from pykubelet.util import klog
klog.setup(4)
asyncio.run(IPTablesUtilChains(monitor_interval=float(sys.argv[1])).run())
"""


@dataclass
class Netns:
    """A network namespace and the iptables back-end its commands find on ``PATH``."""

    name: str
    backend: str
    bin_dir: Path

    def argv(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.name,
                "env", f"PATH={self.bin_dir}:{os.environ.get('PATH', '')}", *command]

    def run(self, *command: str) -> str:
        done = subprocess.run(self.argv(*command), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        return done.stdout

    def rules(self, tool: str, table: str) -> list[str]:
        """``<tool> -t <table> -S`` without the built-in chains' policies."""
        return [line for line in self.run(tool, "-t", table, "-S").splitlines()
                if line and not line.startswith("-P ")]

    def missing(self) -> dict[str, set[str]]:
        """What of ``EXPECTED`` is not there yet, by tool/table."""
        absent = {f"{tool}/{table}": lines - set(self.rules(tool, table))
                  for tool, tables in EXPECTED.items() for table, lines in tables.items()}
        return {where: lines for where, lines in absent.items() if lines}


@pytest.fixture(params=BACKENDS)
def netns(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Netns]:
    backend = str(request.param)
    bin_dir = tmp_path / f"bin-{backend}"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(f"/usr/sbin/xtables-{backend}-multi")
    name = f"pykubelet-ipt-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield Netns(name, backend, bin_dir)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


class NamespacedKubelet(KubeletProcess):
    """A test kubelet that makes the utility chains, run inside ``netns``: its ports are
    only reachable there, so its readiness is read from the namespace's tables, not from
    its healthz."""

    def __init__(self, base: Path, endpoint: str, netns: Netns) -> None:
        super().__init__(base, endpoint, extra_config={"makeIPTablesUtilChains": True})
        self.netns = netns

    def command(self) -> list[str]:
        return self.netns.argv(*super().command())

    def start(self) -> None:
        # Launched as every test kubelet is (KubeletProcess.launch): in a mount namespace
        # whose /proc/sys kernel tunables are files of the test, so the host's stay as they are.
        self.ensure_cgroup_root()
        self.launch()


class Link:
    """A veth pair in the namespace: the node's end (an address, ``route_localnet``) and a
    neighbour's end, which writes frames straight onto the link."""

    NODE, NEIGHBOUR = "vk0", "vk1"

    def __init__(self, netns: Netns, inbox: Path) -> None:
        self.netns = netns
        self.inbox = inbox
        ns = netns.name
        for command in (["link", "add", self.NODE, "type", "veth", "peer", "name", self.NEIGHBOUR],
                        ["addr", "add", NODE_ADDRESS, "dev", self.NODE],
                        ["link", "set", self.NODE, "up"], ["link", "set", self.NEIGHBOUR, "up"]):
            subprocess.run(["ip", "-n", ns, *command], check=True)
        # What kube-proxy sets for NodePorts on localhost: 127/8 is routable from the link.
        netns.run("sysctl", "-qw", f"net.ipv4.conf.{self.NODE}.route_localnet=1")
        self.mac = netns.run("cat", f"/sys/class/net/{self.NODE}/address").strip()
        self.listener = subprocess.Popen(netns.argv(
            sys.executable, "-c", LISTENER, str(LISTEN_PORT), str(inbox)))
        wait_until(lambda: self.received() == ["ready"], 30, "the UDP listener on 127.0.0.1")

    def received(self) -> list[str]:
        return self.inbox.read_text().splitlines() if self.inbox.exists() else []

    def send(self, payload: str) -> None:
        self.netns.run(sys.executable, "-c", SENDER, self.NEIGHBOUR, self.mac,
                       NEIGHBOUR_ADDRESS, str(LISTEN_PORT), payload)

    def close(self) -> None:
        self.listener.kill()
        self.listener.wait(10)


def localnet_drops(netns: Netns) -> int:
    """Packets the localnet rule has dropped, from its counter in ``iptables-save -c``."""
    for line in netns.run("iptables-save", "-c", "-t", "filter").splitlines():
        if line.endswith(f"-A KUBE-FIREWALL {LOCALNET}"):
            return int(line[1:line.index(":")])
    return 0


@pytest.mark.containerd
def test_a_kubelet_makes_upstreams_chains_and_its_localnet_rule_drops_a_neighbours_packet(
        testbed: Testbed, netns: Netns, tmp_path: Path) -> None:
    link = Link(netns, tmp_path / "inbox")
    try:
        # Without the kubelet's rule, a neighbour's packet reaches a socket on 127.0.0.1.
        link.send("before")
        wait_until(lambda: "before" in link.received(), 30, "the neighbour's first packet")
        # A firewall rule already in INPUT: the kubelet's jump goes in front of it.
        netns.run("iptables", "-A", "INPUT", "-p", "tcp", "--dport", "9", "-j", "ACCEPT")

        kubelet = NamespacedKubelet(tmp_path / "kubelet", testbed.endpoint, netns)
        kubelet.start()
        try:
            kubelet.wait_for(lambda: not netns.missing(), 60, "the kubelet's iptables chains")
            log = kubelet.log_text()
        finally:
            kubelet.stop()
        assert '"Initialized iptables rules." protocol="IPv4"' in log
        assert '"Initialized iptables rules." protocol="IPv6"' in log
        input_rules = [r for r in netns.rules("iptables", "filter") if r.startswith("-A INPUT")]
        assert input_rules[0] == "-A INPUT -j KUBE-FIREWALL"
        # Only what upstream makes, and only in the back-end on PATH: the hint tells
        # kube-proxy which one the node uses.
        for tool, tables in EXPECTED.items():
            for table, lines in tables.items():
                made = {r for r in netns.rules(tool, table) if "KUBE-" in r}
                assert made == {r for r in lines if "KUBE-" in r}, (tool, table)
        other = "legacy" if netns.backend == "nft" else "nft"
        for tool in ("iptables", "ip6tables"):
            assert "KUBE-" not in netns.run(f"/usr/sbin/{tool}-{other}-save")

        # The chains outlive the kubelet, and now the same packet is dropped.
        link.send("after")
        wait_until(lambda: localnet_drops(netns) >= 1, 30, "the localnet rule to drop it")
        assert "after" not in link.received()
    finally:
        link.close()


def test_the_chains_are_made_again_after_a_firewall_reload_flushes_every_table(
        netns: Netns, tmp_path: Path) -> None:
    log_file = tmp_path / "chains.log"
    with open(log_file, "ab") as log:
        process = subprocess.Popen(netns.argv(sys.executable, "-c", CHAINS_ONLY, "0.5"),
                                   stdout=log, stderr=subprocess.STDOUT)

    def alive_and_made() -> bool:
        assert process.poll() is None, log_file.read_text()
        return not netns.missing()

    try:
        wait_until(alive_and_made, 30, "the chains")
        for tool in ("iptables", "ip6tables"):
            for table in ("mangle", "nat", "filter"):
                netns.run(tool, "-t", table, "-F")
                netns.run(tool, "-t", table, "-X")
        assert netns.missing()  # really flushed
        wait_until(alive_and_made, 30, "the chains made again",
                   on_timeout=lambda: log_file.read_text()[-3000:])
    finally:
        process.terminate()
        process.wait(10)
    assert log_file.read_text().count('"Reloading after iptables flush"') == 2  # a family each
