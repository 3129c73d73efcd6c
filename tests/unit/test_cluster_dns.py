"""The testbed's cluster DNS: which records each Service, Endpoints and pod name gets."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testsupport import cluster_dns
from testsupport.cluster_dns import (
    Changes,
    ObjectStore,
    PodLookup,
    Record,
    changes,
    cluster_records,
    parse_listen,
    pod_lookup,
    records_by_name,
    service_records,
    sync_records,
    unbound_config,
)
from testsupport.polling import wait_until_async


def service(name: str, namespace: str = "web", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def endpoints(name: str, namespace: str = "web", *subsets: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "subsets": list(subsets)}


HTTP = {"name": "http", "port": 80, "protocol": "TCP"}
DNS_UDP = {"name": "dns", "port": 53, "protocol": "UDP"}
UNNAMED = {"port": 8080, "protocol": "TCP"}


def test_cluster_ip_service_has_an_a_record_a_ptr_and_srv_for_named_ports_only() -> None:
    svc = service("api", clusterIP="10.96.3.4", ports=[HTTP, DNS_UDP, UNNAMED])
    assert service_records(svc, None) == {
        Record("api.web.svc.cluster.local.", "A", "10.96.3.4"),
        Record("4.3.96.10.in-addr.arpa.", "PTR", "api.web.svc.cluster.local."),
        Record("_http._tcp.api.web.svc.cluster.local.", "SRV",
               "0 100 80 api.web.svc.cluster.local."),
        Record("_dns._udp.api.web.svc.cluster.local.", "SRV",
               "0 100 53 api.web.svc.cluster.local."),
    }


def test_cluster_ip_service_ignores_its_endpoints() -> None:
    svc = service("api", clusterIP="10.96.3.4", ports=[HTTP])
    eps = endpoints("api", "web", {"addresses": [{"ip": "10.88.0.9"}], "ports": [HTTP]})
    assert service_records(svc, eps) == service_records(svc, None)


def test_an_ipv6_cluster_ip_gets_aaaa_and_an_ip6_arpa_pointer() -> None:
    records = service_records(service("v6", clusterIP="fd00::a"), None)
    assert Record("v6.web.svc.cluster.local.", "AAAA", "fd00::a") in records
    assert any(r.type == "PTR" and r.name.endswith(".ip6.arpa.") for r in records)


def test_headless_service_names_every_ready_address_and_its_hostname() -> None:
    svc = service("db", clusterIP="None", ports=[HTTP])
    eps = endpoints("db", "web", {
        "addresses": [{"ip": "10.88.0.5", "hostname": "db-0"}, {"ip": "10.88.0.6"}],
        "notReadyAddresses": [{"ip": "10.88.0.7", "hostname": "db-2"}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
    assert service_records(svc, eps) == {
        Record("db.web.svc.cluster.local.", "A", "10.88.0.5"),
        Record("db.web.svc.cluster.local.", "A", "10.88.0.6"),
        Record("db-0.db.web.svc.cluster.local.", "A", "10.88.0.5"),
        Record("10-88-0-6.db.web.svc.cluster.local.", "A", "10.88.0.6"),
        Record("5.0.88.10.in-addr.arpa.", "PTR", "db-0.db.web.svc.cluster.local."),
        Record("6.0.88.10.in-addr.arpa.", "PTR", "10-88-0-6.db.web.svc.cluster.local."),
        # The endpoint's port, not the service's; the weight shared by the two targets.
        Record("_http._tcp.db.web.svc.cluster.local.", "SRV",
               "0 50 8080 db-0.db.web.svc.cluster.local."),
        Record("_http._tcp.db.web.svc.cluster.local.", "SRV",
               "0 50 8080 10-88-0-6.db.web.svc.cluster.local."),
    }


def test_headless_service_publishing_not_ready_addresses_names_them_too() -> None:
    svc = service("db", clusterIP="None", publishNotReadyAddresses=True)
    eps = endpoints("db", "web", {"notReadyAddresses": [{"ip": "10.88.0.7",
                                                          "hostname": "db-2"}]})
    assert service_records(svc, eps) == {
        Record("db.web.svc.cluster.local.", "A", "10.88.0.7"),
        Record("db-2.db.web.svc.cluster.local.", "A", "10.88.0.7"),
        Record("7.0.88.10.in-addr.arpa.", "PTR", "db-2.db.web.svc.cluster.local."),
    }


def test_headless_service_without_endpoints_has_no_records() -> None:
    assert service_records(service("db", clusterIP="None"), None) == set()


def test_external_name_service_is_a_cname_that_follows_a_change_of_name_and_type() -> None:
    before = service("ext", type="ExternalName", externalName="foo.example.com")
    after = service("ext", type="ExternalName", externalName="bar.example.com")
    as_cluster_ip = service("ext", type="ClusterIP", clusterIP="10.96.0.77", ports=[HTTP])
    assert service_records(before, None) == {
        Record("ext.web.svc.cluster.local.", "CNAME", "foo.example.com.")}
    served = records_by_name(cluster_records([before], []))

    renamed = records_by_name(cluster_records([after], []))
    assert changes(served, renamed) == Changes(
        remove=("ext.web.svc.cluster.local.",),
        add=(Record("ext.web.svc.cluster.local.", "CNAME", "bar.example.com."),))

    retyped = changes(renamed, records_by_name(cluster_records([as_cluster_ip], [])))
    assert retyped.remove == ("ext.web.svc.cluster.local.",)
    assert Record("ext.web.svc.cluster.local.", "A", "10.96.0.77") in retyped.add
    assert all(record.type != "CNAME" for record in retyped.add)


def test_a_deleted_service_removes_every_name_it_had() -> None:
    db = service("db", clusterIP="None", ports=[HTTP])
    db_eps = endpoints("db", "web", {"addresses": [{"ip": "10.88.0.5", "hostname": "db-0"}],
                                     "ports": [HTTP]})
    api = service("api", clusterIP="10.96.3.4", ports=[HTTP])
    served = records_by_name(cluster_records([db, api], [db_eps]))
    after = records_by_name(cluster_records([api], [db_eps]))
    change = changes(served, after)
    assert set(change.remove) == {"db.web.svc.cluster.local.",
                                  "db-0.db.web.svc.cluster.local.",
                                  "5.0.88.10.in-addr.arpa.",
                                  "_http._tcp.db.web.svc.cluster.local."}
    assert change.add == ()


def test_unchanged_records_are_not_written_again() -> None:
    api = service("api", clusterIP="10.96.3.4", ports=[HTTP])
    served = records_by_name(cluster_records([api], []))
    assert not changes(served, records_by_name(cluster_records([api], [])))


def test_services_in_different_namespaces_take_their_own_endpoints() -> None:
    records = cluster_records(
        [service("db", "a", clusterIP="None"), service("db", "b", clusterIP="None")],
        [endpoints("db", "a", {"addresses": [{"ip": "10.88.0.1"}]}),
         endpoints("db", "b", {"addresses": [{"ip": "10.88.0.2"}]})])
    assert Record("db.a.svc.cluster.local.", "A", "10.88.0.1") in records
    assert Record("db.b.svc.cluster.local.", "A", "10.88.0.2") in records
    assert Record("db.a.svc.cluster.local.", "A", "10.88.0.2") not in records


def test_two_headless_services_over_one_pod_give_its_address_two_pointers() -> None:
    eps = {"addresses": [{"ip": "10.88.0.5"}]}
    grouped = records_by_name(cluster_records(
        [service("one", clusterIP="None"), service("two", clusterIP="None")],
        [endpoints("one", "web", eps), endpoints("two", "web", eps)]))
    assert {r.data for r in grouped["5.0.88.10.in-addr.arpa."]} == {
        "10-88-0-5.one.web.svc.cluster.local.", "10-88-0-5.two.web.svc.cluster.local."}


def test_another_cluster_domain_names_the_records() -> None:
    records = service_records(service("api", clusterIP="10.96.3.4"), None,
                              domain="example.test")
    assert Record("api.web.svc.example.test.", "A", "10.96.3.4") in records


def test_record_text_is_a_zone_file_line_with_a_five_second_ttl() -> None:
    assert (Record("api.web.svc.cluster.local.", "A", "10.96.3.4").text()
            == "api.web.svc.cluster.local. 5 IN A 10.96.3.4")


@pytest.mark.parametrize(("name", "expected"), [
    ("10-88-0-5.default.pod.cluster.local.", PodLookup(True, "10.88.0.5")),
    ("10-88-0-5.any-namespace.pod.cluster.local", PodLookup(True, "10.88.0.5")),
    ("172-17-0-1.Kube-System.POD.cluster.local.", PodLookup(True, "172.17.0.1")),
    ("default.pod.cluster.local.", PodLookup(True)),
    ("pod.cluster.local.", PodLookup(True)),
    ("10-88-0-256.default.pod.cluster.local.", PodLookup(False)),
    ("10-88-0.default.pod.cluster.local.", PodLookup(False)),
    ("web-0.default.pod.cluster.local.", PodLookup(False)),
    ("x.10-88-0-5.default.pod.cluster.local.", PodLookup(False)),
    ("10-88-0-5.default.svc.cluster.local.", PodLookup(False)),
])
def test_pod_names_are_answered_by_rule_for_any_dashed_ipv4(name: str,
                                                            expected: PodLookup) -> None:
    assert pod_lookup(name) == expected


def test_unbound_config_serves_the_zones_and_answers_nothing_else(tmp_path: Any) -> None:
    text = unbound_config(dir=tmp_path, host="10.0.0.10", port=53, domain="cluster.local",
                          reverse_zones=["10.in-addr.arpa"])
    assert "interface: 10.0.0.10@53" in text
    assert 'local-zone: "." static' in text
    assert 'local-zone: "cluster.local." static' in text
    assert 'local-zone: "pod.cluster.local." transparent' in text
    assert 'local-zone: "10.in-addr.arpa." static' in text
    assert f'control-interface: "{tmp_path}/control.sock"' in text


@pytest.mark.parametrize(("value", "expected"), [
    ("127.0.0.1:5353", ("127.0.0.1", 5353)),
    ("[::1]:53", ("::1", 53)),
])
def test_listen_address_parses(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize("value", ["127.0.0.1", "localhost:53", ":53", "127.0.0.1:x"])
def test_listen_address_rejects_what_is_not_addr_port(value: str) -> None:
    with pytest.raises(ValueError):
        parse_listen(value)


@dataclass
class FakeReflector:
    has_synced: bool = False


@dataclass
class FakeWriter:
    """Keeps the served records as unbound would; fails the next ``failures`` writes."""

    served: dict[str, set[str]] = field(default_factory=dict)
    failures: int = 0

    async def apply(self, change: Changes) -> None:
        for name in change.remove:
            self.served.pop(name, None)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("unbound-control failed")
        for record in change.add:
            self.served.setdefault(record.name, set()).add(record.data)


class Sync:
    def __init__(self, tmp_path: Path) -> None:
        self.changed = asyncio.Event()
        self.services = ObjectStore(self.changed)
        self.endpoints = ObjectStore(self.changed)
        self.reflectors = [FakeReflector(), FakeReflector()]
        self.writer = FakeWriter()
        self.ready = tmp_path / "ready"

    def run(self) -> asyncio.Task[None]:
        return asyncio.create_task(sync_records(
            writer=self.writer, services=self.services, endpoints=self.endpoints,
            reflectors=self.reflectors, changed=self.changed, domain="cluster.local",
            ready_file=self.ready, listen="127.0.0.1:53"))


async def test_records_are_served_once_both_collections_listed_and_follow_them(
        tmp_path: Path) -> None:
    sync = Sync(tmp_path)
    task = sync.run()
    try:
        sync.services.replace([service("api", clusterIP="10.96.3.4")], "1")
        sync.reflectors[0].has_synced = True
        await asyncio.sleep(0.2)
        assert sync.writer.served == {} and not sync.ready.exists()

        sync.endpoints.replace([], "1")
        sync.reflectors[1].has_synced = True
        await wait_until_async(sync.ready.exists, 5, "the ready file")
        assert sync.ready.read_text() == "127.0.0.1:53\n"
        assert sync.writer.served["api.web.svc.cluster.local."] == {"10.96.3.4"}

        sync.services.delete(service("api"))
        await wait_until_async(lambda: not sync.writer.served, 5, "the records removed")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_failed_write_is_retried_until_unbound_serves_the_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_dns, "RETRY_SECONDS", 0.05)
    sync = Sync(tmp_path)
    for reflector in sync.reflectors:
        reflector.has_synced = True
    sync.writer.failures = 2
    task = sync.run()
    try:
        sync.services.add(service("ext", type="ExternalName", externalName="a.example.com"))
        await wait_until_async(sync.ready.exists, 5, "the ready file")
        assert sync.writer.served == {"ext.web.svc.cluster.local.": {"a.example.com."}}
        assert sync.writer.failures == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
