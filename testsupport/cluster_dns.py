"""The testbed's cluster DNS: a stand-in for CoreDNS, built from Debian's unbound.

Neither CoreDNS nor kube-dns is packaged in Debian or built from the 1.20
tree, yet upstream's e2e DNS tests (``test/e2e/network/dns*.go``) query
``cluster.local`` records over UDP and TCP with ``dig`` and ``getent``. Here
a real DNS server answers them: one ``unbound`` per cluster, with a private
configuration in a directory of its own, fed from the API server by the small
watcher in this module (the testbed's, not the kubelet's). The records follow
the Kubernetes DNS specification as CoreDNS serves it (TTL 5 s):

- a ClusterIP Service: ``<svc>.<ns>.svc.<domain>`` A (AAAA) -> its cluster IP,
  ``_<port>._<proto>.<svc>.<ns>.svc.<domain>`` SRV for each named port -> the
  service name, and a PTR for the cluster IP;
- a headless Service (``clusterIP: None``): ``<svc>.<ns>.svc.<domain>`` A -> every
  ready endpoint address (and the not-ready ones when it publishes them); each
  address is named ``<hostname>.<svc>.<ns>.svc.<domain>`` (its ``hostname``, else
  its dashed IP ``10-88-0-5``) with an A record and a PTR, and the SRV records
  of the named endpoint ports point at those names;
- an ExternalName Service: ``<svc>.<ns>.svc.<domain>`` CNAME -> the external name;
- pods: ``<a-b-c-d>.<ns>.pod.<domain>`` A -> a.b.c.d for any dashed IPv4 address
  in any namespace, CoreDNS's "pods insecure" mode, answered by rule
  (:func:`pod_lookup`, run inside unbound by its Python module, Debian's
  ``python3-unbound``) rather than from a list of pods.

How it runs: ``cluster.local.`` and the reverse zones (``10.in-addr.arpa.`` by
default: the service range 10.96.0.0/16 and the pod network 10.88.0.0/16) are
unbound ``static`` local zones, and ``pod.cluster.local.`` a ``transparent`` one
handed to the Python module. Every other name gets NXDOMAIN at once: no
upstream is reachable from the testbed, and an answer that never comes (or a
REFUSED, which makes glibc abandon a search list) would stall lookups. The
watcher lists and watches Services and Endpoints with pykubelet's own
``Reflector``, computes the whole record set (:func:`cluster_records`, pure),
and applies the difference name by name with ``unbound-control local_datas``
and ``local_datas_remove``, so a change shows up within a fraction of a
second and nothing is restarted or reloaded.

Run it as ``python -m testsupport.cluster_dns --kubeconfig K --listen ADDR:PORT
--dir DIR`` (root: unbound; SIGTERM or Ctrl-C stops unbound and the watcher);
``DIR/ready`` appears once the first full record set is served. Tests and
the harness use :class:`ClusterDNS`, which runs that command and waits for it.

This module is imported by unbound's embedded interpreter too (for
:func:`pod_lookup`), which has Debian's system Python and none of the venv's
packages: its top level imports the standard library only, and the watcher
imports pykubelet and ``kubernetes_asyncio`` where it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

DEFAULT_DOMAIN = "cluster.local"
DEFAULT_REVERSE_ZONES = ("10.in-addr.arpa",)
# CoreDNS's kubernetes plugin answers with a 5 s TTL: the e2e tests poll for changes.
TTL = 5
REPO_ROOT = Path(__file__).resolve().parent.parent
# Where Debian's python3-unbound puts the module unbound's Python plugin imports first;
# unbound itself looks in the system Python's /usr/local path, so it is named explicitly.
UNBOUNDMODULE_DIRS = ("/usr/lib/python3/dist-packages",)
# Events that come together (a Service and its Endpoints) are applied together.
SYNC_DEBOUNCE_SECONDS = 0.05
RETRY_SECONDS = 1.0
CONTROL_TIMEOUT_SECONDS = 10.0
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
LOG_TAIL_LINES = 30

Object = dict[str, Any]


# --- the records (pure) -----------------------------------------------------------


@dataclass(frozen=True, order=True)
class Record:
    """One resource record: an absolute lower-case ``name`` (trailing dot), a type, its data."""

    name: str
    type: str
    data: str

    def text(self) -> str:
        """The record in zone-file syntax, as ``unbound-control local_data`` takes it."""
        return f"{self.name} {TTL} IN {self.type} {self.data}"


def _absolute(name: str) -> str:
    return name.lower().rstrip(".") + "."


def _address_record(name: str, ip: str) -> Record:
    kind = "AAAA" if ipaddress.ip_address(ip).version == 6 else "A"
    return Record(name, kind, str(ipaddress.ip_address(ip)))


def _pointer_record(ip: str, target: str) -> Record:
    return Record(_absolute(ipaddress.ip_address(ip).reverse_pointer), "PTR", target)


def _dashed(ip: str) -> str:
    """The name CoreDNS gives an address without a hostname: 10.88.0.5 -> 10-88-0-5."""
    return str(ipaddress.ip_address(ip)).replace(".", "-").replace(":", "-")


def _srv_records(name: str, targets: list[tuple[int, str]]) -> set[Record]:
    """SRV records at ``name``, the weight shared among the targets as CoreDNS shares it."""
    weight = max(1, 100 // max(1, len(targets)))
    return {Record(name, "SRV", f"0 {weight} {port} {target}") for port, target in targets}


def _srv_name(port: Mapping[str, Any], service_name: str) -> str | None:
    """``_<port>._<proto>.<service name>``, for a named port only."""
    port_name = str(port.get("name") or "")
    if not port_name:
        return None
    protocol = str(port.get("protocol") or "TCP").lower()
    return f"_{port_name.lower()}._{protocol}.{service_name}"


def _cluster_ips(spec: Mapping[str, Any]) -> list[str]:
    ips = [str(ip) for ip in spec.get("clusterIPs") or []]
    if not ips and spec.get("clusterIP"):
        ips = [str(spec["clusterIP"])]
    return [ip for ip in ips if ip and ip != "None"]


def _endpoint_addresses(subset: Mapping[str, Any], publish_not_ready: bool) -> list[Object]:
    addresses = list(subset.get("addresses") or [])
    if publish_not_ready:
        addresses += list(subset.get("notReadyAddresses") or [])
    return [address for address in addresses if address.get("ip")]


def service_records(service: Mapping[str, Any], endpoints: Mapping[str, Any] | None, *,
                    domain: str = DEFAULT_DOMAIN) -> set[Record]:
    """The records of one Service (and its Endpoints, which only a headless one uses)."""
    metadata = service.get("metadata") or {}
    spec = service.get("spec") or {}
    name = _absolute(f"{metadata.get('name')}.{metadata.get('namespace')}.svc.{domain}")
    if spec.get("type") == "ExternalName":
        external = str(spec.get("externalName") or "")
        return {Record(name, "CNAME", _absolute(external))} if external else set()
    if spec.get("clusterIP") == "None":
        return _headless_records(name, spec, endpoints)
    records: set[Record] = set()
    for ip in _cluster_ips(spec):
        records.add(_address_record(name, ip))
        records.add(_pointer_record(ip, name))
    if records:
        for port in spec.get("ports") or []:
            srv = _srv_name(port, name)
            if srv is not None:
                records |= _srv_records(srv, [(int(port.get("port") or 0), name)])
    return records


def _headless_records(name: str, spec: Mapping[str, Any],
                      endpoints: Mapping[str, Any] | None) -> set[Record]:
    records: set[Record] = set()
    publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
    srv_targets: dict[str, set[tuple[int, str]]] = {}
    for subset in (endpoints or {}).get("subsets") or []:
        for address in _endpoint_addresses(subset, publish_not_ready):
            ip = str(address["ip"])
            label = str(address.get("hostname") or "") or _dashed(ip)
            member = _absolute(f"{label}.{name}")
            records.add(_address_record(name, ip))
            records.add(_address_record(member, ip))
            records.add(_pointer_record(ip, member))
            for port in subset.get("ports") or []:
                srv = _srv_name(port, name)
                if srv is not None:
                    srv_targets.setdefault(srv, set()).add((int(port.get("port") or 0), member))
    for srv, targets in srv_targets.items():
        records |= _srv_records(srv, sorted(targets))
    return records


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def cluster_records(services: Iterable[Mapping[str, Any]],
                    endpoints: Iterable[Mapping[str, Any]], *,
                    domain: str = DEFAULT_DOMAIN) -> set[Record]:
    """Every record of the cluster's Services, each with the Endpoints of its name."""
    endpoints_by_key = {_key(item): item for item in endpoints}
    records: set[Record] = set()
    for service in services:
        records |= service_records(service, endpoints_by_key.get(_key(service)), domain=domain)
    return records


def records_by_name(records: Iterable[Record]) -> dict[str, frozenset[Record]]:
    grouped: dict[str, set[Record]] = {}
    for record in records:
        grouped.setdefault(record.name, set()).add(record)
    return {name: frozenset(group) for name, group in grouped.items()}


@dataclass(frozen=True)
class Changes:
    """What turns the served records into the wanted ones: names to clear, then records
    to add (unbound removes a name's data all at once, so a changed name is cleared
    and written again whole)."""

    remove: tuple[str, ...]
    add: tuple[Record, ...]

    def __bool__(self) -> bool:
        return bool(self.remove or self.add)


def changes(served: Mapping[str, frozenset[Record]],
            wanted: Mapping[str, frozenset[Record]]) -> Changes:
    remove = sorted(name for name, group in served.items() if wanted.get(name) != group)
    add = sorted(record for name, group in wanted.items() if served.get(name) != group
                 for record in group)
    return Changes(tuple(remove), tuple(add))


@dataclass(frozen=True)
class PodLookup:
    """What a name under ``pod.<domain>`` is: no such name, a name without data, or an A."""

    exists: bool
    address: str | None = None


def pod_lookup(qname: str, *, domain: str = DEFAULT_DOMAIN) -> PodLookup:
    """``<a-b-c-d>.<ns>.pod.<domain>`` -> a.b.c.d in any namespace (CoreDNS "pods insecure")."""
    zone = f"pod.{domain}".lower().strip(".")
    name = qname.lower().rstrip(".")
    if name == zone:
        return PodLookup(exists=True)
    if not name.endswith("." + zone):
        return PodLookup(exists=False)
    labels = name[: -len(zone) - 1].split(".")
    if len(labels) == 1 and labels[0]:
        return PodLookup(exists=True)  # the namespace: an empty non-terminal
    if len(labels) != 2 or not labels[1]:
        return PodLookup(exists=False)
    parts = labels[0].split("-")
    if len(parts) != 4 or not all(part.isdigit() and len(part) <= 3 for part in parts):
        return PodLookup(exists=False)
    try:
        address = ipaddress.IPv4Address(".".join(str(int(part)) for part in parts))
    except ValueError:
        return PodLookup(exists=False)
    return PodLookup(exists=True, address=str(address))


# --- unbound's configuration --------------------------------------------------------


def soa_record(zone: str) -> str:
    """The SOA of ``zone`` (absolute): negative answers may be cached for TTL seconds only."""
    return f"{zone} {TTL} IN SOA ns.dns.{zone} hostmaster.{zone} 1 7200 1800 86400 {TTL}"


def unbound_config(*, dir: Path, host: str, port: int, domain: str,
                   reverse_zones: Iterable[str]) -> str:
    """A private unbound.conf: ``host@port`` over UDP and TCP, the zones above, control
    over a unix socket in ``dir``, no privilege drop, chroot or trust anchor."""
    zone = _absolute(domain)
    lines = [
        "# Written by testsupport/cluster_dns.py; rewritten on every start.",
        "server:",
        f"    interface: {host}@{port}",
        f"    port: {port}",
        "    do-udp: yes",
        "    do-tcp: yes",
        "    do-ip6: yes",
        "    access-control: 0.0.0.0/0 allow",
        "    access-control: ::/0 allow",
        "    num-threads: 1",
        '    username: ""',
        '    chroot: ""',
        f'    directory: "{dir}"',
        f'    pidfile: "{dir}/unbound.pid"',
        "    do-daemonize: no",
        "    use-syslog: no",
        "    log-time-ascii: yes",
        "    verbosity: 1",
        "    msg-cache-size: 4m",
        "    rrset-cache-size: 4m",
        '    module-config: "python iterator"',
        # No upstream: every name outside the zones below is answered NXDOMAIN at once.
        '    local-zone: "." static',
        f'    local-zone: "{zone}" static',
        f'    local-data: "{soa_record(zone)}"',
        f'    local-zone: "pod.{zone}" transparent',
    ]
    for reverse in reverse_zones:
        reverse_zone = _absolute(reverse)
        lines += [f'    local-zone: "{reverse_zone}" static',
                  f'    local-data: "{soa_record(reverse_zone)}"']
    lines += [
        "python:",
        f'    python-script: "{dir}/pod_records.py"',
        "remote-control:",
        "    control-enable: yes",
        f'    control-interface: "{dir}/control.sock"',
        "    control-use-cert: no",
    ]
    return "\n".join(lines) + "\n"


def pod_module(*, domain: str) -> str:
    """The unbound Python module answering ``pod.<domain>`` by :func:`pod_lookup`."""
    return f'''# Written by testsupport/cluster_dns.py: unbound's Python module for pod.{domain}.
import sys

sys.path.insert(0, {str(REPO_ROOT)!r})
from testsupport.cluster_dns import TTL, pod_lookup, soa_record

DOMAIN = {domain!r}
SOA = soa_record("{_absolute(domain)}")


def init_standard(id, env):
    return True


def deinit(id):
    return True


def inform_super(id, qstate, superqstate, qdata):
    return True


def operate(id, event, qstate, qdata):
    if event not in (MODULE_EVENT_NEW, MODULE_EVENT_PASS):
        qstate.ext_state[id] = MODULE_ERROR
        return True
    qname = qstate.qinfo.qname_str
    qtype = qstate.qinfo.qtype
    found = pod_lookup(qname, domain=DOMAIN)
    msg = DNSMessage(qname, qtype, RR_CLASS_IN, PKT_QR | PKT_RA | PKT_AA)
    if found.address is not None and qtype in (RR_TYPE_A, RR_TYPE_ANY):
        msg.answer.append("%s %d IN A %s" % (qname, TTL, found.address))
    else:
        msg.authority.append(SOA)
    if not msg.set_return_msg(qstate):
        qstate.ext_state[id] = MODULE_ERROR
        return True
    qstate.return_rcode = RCODE_NOERROR if found.exists else RCODE_NXDOMAIN
    qstate.ext_state[id] = MODULE_FINISHED
    return True
'''


def unboundmodule_dir() -> str:
    for directory in UNBOUNDMODULE_DIRS:
        if Path(directory, "unboundmodule.py").is_file():
            return directory
    raise RuntimeError("unboundmodule.py not found: install python3-unbound "
                       "(scripts/testbed/install.sh)")


def parse_listen(value: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``[v6]:PORT`` for IPv6) -> (address, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--listen {value!r}: expected ADDR:PORT")
    host = host.removeprefix("[").removesuffix("]")
    ipaddress.ip_address(host)
    return host, int(port)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free for both UDP and TCP on ``host`` right now (for tests)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as tcp:
            tcp.bind((host, 0))
            port = int(tcp.getsockname()[1])
            with socket.socket(family, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind((host, port))
                except OSError:
                    continue
                return port


# --- the server and its watcher -----------------------------------------------------


class RecordWriter(Protocol):
    """Where the wanted records go: :class:`UnboundControl` (a fake in tests)."""

    async def apply(self, change: Changes) -> None: ...


class Synced(Protocol):
    """A reflector, as far as the sync waits for it: has it listed once?"""

    has_synced: bool


class UnboundControl:
    """Changes the running unbound's local data through ``unbound-control``."""

    def __init__(self, config: Path) -> None:
        self.config = config

    async def run(self, command: str, lines: Iterable[str] = ()) -> str:
        process = await asyncio.create_subprocess_exec(
            "unbound-control", "-c", str(self.config), command,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        payload = "".join(f"{line}\n" for line in lines).encode()
        try:
            output, _ = await asyncio.wait_for(process.communicate(payload),
                                               CONTROL_TIMEOUT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise RuntimeError(f"unbound-control {command} timed out") from None
        text = output.decode(errors="replace").strip()
        if process.returncode != 0:
            raise RuntimeError(f"unbound-control {command} failed: {text}")
        return text

    async def apply(self, change: Changes) -> None:
        if change.remove:
            await self.run("local_datas_remove", change.remove)
        if change.add:
            await self.run("local_datas", (record.text() for record in change.add))


class ObjectStore:
    """A reflector's store of one collection, by namespace and name; sets ``changed``."""

    def __init__(self, changed: asyncio.Event) -> None:
        self.objects: dict[tuple[str, str], Object] = {}
        self._changed = changed

    def replace(self, objects: list[Object], resource_version: str) -> None:
        self.objects = {_key(obj): obj for obj in objects}
        self._changed.set()

    def add(self, obj: Object) -> None:
        self.objects[_key(obj)] = obj
        self._changed.set()

    def update(self, obj: Object) -> None:
        self.add(obj)

    def delete(self, obj: Object) -> None:
        self.objects.pop(_key(obj), None)
        self._changed.set()


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} cluster-dns: {message}", file=sys.stderr, flush=True)


async def sync_records(*, writer: RecordWriter, services: ObjectStore,
                       endpoints: ObjectStore, reflectors: Iterable[Synced],
                       changed: asyncio.Event, domain: str, ready_file: Path,
                       listen: str) -> None:
    """Until cancelled: on every ``changed``, once all ``reflectors`` have listed, write
    the difference between the served records and the wanted ones; ``ready_file`` (its
    text ``listen``) is written after the first full set. A failed write is retried
    after RETRY_SECONDS, the names it touched cleared and written again whole."""
    served: dict[str, frozenset[Record]] = {}
    while True:
        await changed.wait()
        await asyncio.sleep(SYNC_DEBOUNCE_SECONDS)
        changed.clear()
        if not all(reflector.has_synced for reflector in reflectors):
            continue
        wanted = records_by_name(cluster_records(services.objects.values(),
                                                 endpoints.objects.values(), domain=domain))
        change = changes(served, wanted)
        try:
            await writer.apply(change)
        except RuntimeError as err:
            _log(f"applying records failed, retrying: {err}")
            served = {**served, **{name: frozenset() for name in change.remove},
                      **{record.name: frozenset() for record in change.add}}
            await asyncio.sleep(RETRY_SECONDS)
            changed.set()
            continue
        served = wanted
        if change:
            _log(f"{len(change.remove)} names cleared, {len(change.add)} records written; "
                 f"{len(served)} names served")
        if not ready_file.exists():
            ready_file.write_text(f"{listen}\n")
            _log(f"ready on {listen}")


async def serve(*, kubeconfig: Path, host: str, port: int, dir: Path,
                domain: str = DEFAULT_DOMAIN,
                reverse_zones: Iterable[str] = DEFAULT_REVERSE_ZONES) -> None:
    """Run unbound in ``dir`` and keep its records equal to the cluster's until cancelled."""
    from kubernetes_asyncio.client import ApiClient, CoreV1Api

    from pykubelet.client.kubeconfig import load_rest_config
    from pykubelet.util.reflector import ApiListWatch, Reflector

    dir.mkdir(parents=True, exist_ok=True)
    ready_file = dir / "ready"
    ready_file.unlink(missing_ok=True)
    config = dir / "unbound.conf"
    (dir / "pod_records.py").write_text(pod_module(domain=domain))
    config.write_text(unbound_config(dir=dir, host=host, port=port, domain=domain,
                                     reverse_zones=reverse_zones))
    env = {**os.environ, "PYTHONPATH": unboundmodule_dir()}
    for variable in ("PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(variable, None)
    with open(dir / "unbound.log", "ab") as log:
        unbound = await asyncio.create_subprocess_exec(
            "unbound", "-d", "-c", str(config), stdin=subprocess.DEVNULL, stdout=log,
            stderr=log, env=env)
    _log(f"unbound started (pid {unbound.pid}), listening on {host}:{port}")
    control = UnboundControl(config)
    tasks: list[asyncio.Task[Any]] = []
    client: Any = None
    try:
        await _wait_for_control(control, unbound)
        rest = await load_rest_config(str(kubeconfig))
        client = ApiClient(configuration=rest.configuration)
        api = CoreV1Api(client)
        changed = asyncio.Event()
        services, endpoints = ObjectStore(changed), ObjectStore(changed)
        reflectors = [
            Reflector("services", ApiListWatch(api.list_service_for_all_namespaces), services),
            Reflector("endpoints", ApiListWatch(api.list_endpoints_for_all_namespaces),
                      endpoints),
        ]
        tasks = [asyncio.create_task(reflector.run(), name=f"reflector {reflector.name}")
                 for reflector in reflectors]
        tasks.append(asyncio.create_task(sync_records(
            writer=control, services=services, endpoints=endpoints, reflectors=reflectors,
            changed=changed, domain=domain, ready_file=ready_file, listen=f"{host}:{port}"),
            name="record sync"))
        tasks.append(asyncio.create_task(unbound.wait(), name="unbound"))
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.get_name() == "unbound":
                raise RuntimeError(f"unbound exited with status {task.result()}; "
                                   f"see {dir / 'unbound.log'}")
            task.result()
            raise RuntimeError(f"{task.get_name()} ended")
    finally:
        ready_file.unlink(missing_ok=True)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if client is not None:
            await client.close()
        await _stop_unbound(unbound)


async def _wait_for_control(control: UnboundControl, unbound: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        if unbound.returncode is not None:
            raise RuntimeError(f"unbound exited during start-up (status {unbound.returncode})")
        try:
            await control.run("status")
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


async def _stop_unbound(unbound: asyncio.subprocess.Process) -> None:
    if unbound.returncode is not None:
        return
    unbound.terminate()
    try:
        await asyncio.wait_for(unbound.wait(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        unbound.kill()
        await unbound.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testsupport.cluster_dns",
        description="The testbed's cluster DNS (a CoreDNS stand-in): unbound fed from the API.")
    parser.add_argument("--kubeconfig", type=Path, required=True,
                        help="a kubeconfig that may list and watch Services and Endpoints")
    parser.add_argument("--listen", required=True, help="ADDR:PORT to serve on (UDP and TCP)")
    parser.add_argument("--dir", type=Path, required=True,
                        help="directory for unbound's configuration, socket and log")
    parser.add_argument("--domain", default=DEFAULT_DOMAIN)
    parser.add_argument("--reverse-zone", action="append", dest="reverse_zones",
                        help=f"a reverse zone to serve (repeatable; default "
                             f"{', '.join(DEFAULT_REVERSE_ZONES)})")
    args = parser.parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as err:
        parser.error(str(err))
    from pykubelet.util import klog

    klog.setup(0)
    return asyncio.run(_main(args.kubeconfig, host, port, args.dir.resolve(), args.domain,
                             tuple(args.reverse_zones or DEFAULT_REVERSE_ZONES)))


async def _main(kubeconfig: Path, host: str, port: int, dir: Path, domain: str,
                reverse_zones: tuple[str, ...]) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    try:
        await serve(kubeconfig=kubeconfig, host=host, port=port, dir=dir, domain=domain,
                    reverse_zones=reverse_zones)
    except asyncio.CancelledError:
        if not stopping:
            raise
        _log("stopped")
        return 0
    except Exception as err:
        _log(f"error: {err}")
        return 1
    return 0


# --- a handle for tests and the harness ---------------------------------------------


class ClusterDNS:
    """``python -m testsupport.cluster_dns`` as a child process, ready when started."""

    def __init__(self, *, kubeconfig: Path, dir: Path, host: str = "127.0.0.1",
                 port: int | None = None, domain: str = DEFAULT_DOMAIN) -> None:
        self.kubeconfig = kubeconfig
        self.dir = dir
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.domain = domain
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.dir / "cluster-dns.log"

    def log_tail(self) -> str:
        parts = []
        for path in (self.log_path, self.dir / "unbound.log"):
            with contextlib.suppress(OSError):
                lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                parts.append(f"--- {path} (tail) ---\n" + "\n".join(lines))
        return "\n".join(parts)

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ready").unlink(missing_ok=True)  # a previous run's
        listen = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "testsupport.cluster_dns", "--kubeconfig",
                 str(self.kubeconfig), "--listen", listen, "--dir", str(self.dir),
                 "--domain", self.domain],
                cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while not (self.dir / "ready").exists():
            if self.process.poll() is not None:
                raise RuntimeError(f"cluster DNS exited with status {self.process.returncode}"
                                   f"\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"cluster DNS not ready after {timeout:g}s\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM (unbound goes with it); SIGKILL after a while. Leaves ``dir``."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_TIMEOUT_SECONDS + 5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self._kill_orphaned_unbound()

    def _kill_orphaned_unbound(self) -> None:
        """The unbound a killed watcher could not stop, if its pid file names it."""
        try:
            pid = int((self.dir / "unbound.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if str(self.dir / "unbound.conf").encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> ClusterDNS:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
