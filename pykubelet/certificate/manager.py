"""Keeping the kubelet's certificates valid (upstream ``client-go/util/certificate`` manager,
``rotateCertificates`` and ``serverTLSBootstrap``).

One ``CertificateManager`` per certificate: the client certificate the kubelet
presents to the API server, and (``serverTLSBootstrap``) the serving
certificate of the kubelet API. Each sleeps until a deadline drawn at random
between 70% and 90% of its certificate's lifetime (so a fleet of nodes issued
together does not renew together), then makes a new key, asks for a
certificate from its signer, stores the pair and hands it to ``on_rotated``.
A failed renewal is retried after 2, 4, 8, 16 and 32 seconds (10% jitter),
then every 32 seconds. A certificate that no longer matches what the node
would ask for now (another node name, changed node addresses) is replaced at
once; the template is looked at again every ``template_poll`` seconds while
the manager sleeps. Without a template (the serving certificate before the
node's addresses are known) there is nothing to ask for yet: the attempt
fails and is retried.

Metrics, as upstream names them: ``kubelet_certificate_manager_client_ttl_seconds``
and ``kubelet_certificate_manager_server_ttl_seconds`` (seconds until the
certificate expires, +Inf without one),
``kubelet_certificate_manager_client_expiration_renew_errors`` and
``kubelet_server_expiration_renew_errors`` (failed renewals), and
``kubelet_certificate_manager_server_rotation_seconds`` (how long the replaced
serving certificate had lived).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes_asyncio.client import V1NodeAddress
from prometheus_client import Counter, Gauge, Histogram

from pykubelet.certificate.csr import (
    KUBELET_CLIENT_SIGNER,
    KUBELET_CLIENT_USAGES,
    KUBELET_SERVING_SIGNER,
    KUBELET_SERVING_USAGES,
    RENEWAL_WAIT_SECONDS,
    make_csr,
    new_private_key,
    node_subject,
    private_key_pem,
    request_certificate,
    wait_for_certificate,
)
from pykubelet.certificate.store import FileStore, KeyPair
from pykubelet.client.apiclient import KubeletApiClient, describe_error
from pykubelet.metrics import (
    CERTIFICATE_MANAGER_CLIENT_EXPIRATION_RENEW_ERRORS,
    CERTIFICATE_MANAGER_CLIENT_TTL,
    CERTIFICATE_MANAGER_SERVER_ROTATION_SECONDS,
    CERTIFICATE_MANAGER_SERVER_TTL,
    SERVER_EXPIRATION_RENEW_ERRORS,
)
from pykubelet.util import klog

BACKOFF_INITIAL = 2.0
BACKOFF_FACTOR = 2.0
BACKOFF_JITTER = 0.1
BACKOFF_STEPS = 5
RETRY_FOREVER_SECONDS = 32.0
# Long sleeps are cut into pieces so a wall clock that jumps is noticed.
MAX_SLEEP_SLICE = 60.0
# How often the serving certificate's template (the node's addresses) is compared
# with the certificate while waiting (upstream polls it every second).
SERVING_TEMPLATE_POLL = 1.0

# A client to post certificate requests with; given the current pair (None without one).
ClientFactory = Callable[[KeyPair | None], Awaitable[KubeletApiClient]]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rotation_deadline(pair: KeyPair, fraction: float) -> datetime.datetime:
    """``notBefore + fraction * lifetime``."""
    lifetime = pair.not_after - pair.not_before
    return pair.not_before + lifetime * fraction


def jittered_fraction() -> float:
    """A random point between 70% and 90% of a lifetime (upstream's ``jitteryDuration``)."""
    return 0.7 + 0.2 * random.random()


@dataclass(frozen=True)
class CertificateTemplate:
    """What the node asks for: a subject and (serving certificates) alternative names."""

    subject: x509.Name
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    def satisfied_by(self, certificate: x509.Certificate) -> bool:
        """Upstream ``certSatisfiesTemplate``: same CN, organizations, DNS names and IPs."""
        def values(name: x509.Name, oid: x509.ObjectIdentifier) -> list[str]:
            return sorted(str(a.value) for a in name.get_attributes_for_oid(oid))

        for oid in (NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME):
            if values(certificate.subject, oid) != values(self.subject, oid):
                return False
        try:
            sans = certificate.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
            dns = set(sans.get_values_for_type(x509.DNSName))
            ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
        except x509.ExtensionNotFound:
            dns, ips = set(), set()
        wanted_ips = {str(ipaddress.ip_address(ip)) for ip in self.ip_addresses}
        return dns == set(self.dns_names) and ips == wanted_ips


def serving_template(node_name: str, addresses: Sequence[V1NodeAddress]
                     ) -> CertificateTemplate | None:
    """The serving certificate's template from the node's addresses (upstream
    ``newGetTemplateFn``): host names and DNS addresses as DNS names, IP addresses
    (and a host name that is an IP) as IPs; None until the node has an IP."""
    dns: set[str] = set()
    ips: set[str] = set()
    for address in addresses:
        value = address.address
        if not value:
            continue
        try:
            ip: str | None = str(ipaddress.ip_address(value))
        except ValueError:
            ip = None
        if address.type == "Hostname":
            if ip is not None:
                ips.add(ip)
            else:
                dns.add(value)
        elif address.type in ("InternalIP", "ExternalIP"):
            if ip is not None:
                ips.add(ip)
        elif address.type in ("InternalDNS", "ExternalDNS"):
            dns.add(value)
    if not ips:
        return None
    return CertificateTemplate(node_subject(node_name), tuple(sorted(dns)), tuple(sorted(ips)))


class CertificateManager:
    """Keeps ``store``'s certificate valid; ``on_rotated`` hears of new ones."""

    def __init__(self, store: FileStore, get_template: Callable[[], CertificateTemplate | None],
                 client_factory: ClientFactory, on_rotated: Callable[[KeyPair], None], *,
                 kind: str, signer: str, usages: Sequence[str], ttl: Gauge,
                 renew_errors: Counter, rotation_age: Histogram | None = None,
                 initial: KeyPair | None = None, close_clients: bool = True,
                 template_poll: float = MAX_SLEEP_SLICE,
                 clock: Callable[[], datetime.datetime] = _utcnow,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 fraction: Callable[[], float] = jittered_fraction) -> None:
        self.store = store
        self.kind = kind
        self._get_template = get_template
        self._client_factory = client_factory
        self._on_rotated = on_rotated
        self._signer = signer
        self._usages = tuple(usages)
        self._ttl = ttl
        self._renew_errors = renew_errors
        self._rotation_age = rotation_age
        self._close_clients = close_clients
        self._template_poll = template_poll
        self._clock = clock
        self._sleep = sleep
        self._fraction = fraction
        # The store's pair; before the first rotation, possibly a configured one.
        self._current = store.current() or initial
        self.rotations = 0

    def current(self) -> KeyPair | None:
        return self._current

    def ttl_seconds(self) -> float:
        """Seconds until the current certificate expires (+Inf without one)."""
        current = self._current
        if current is None:
            return math.inf
        remaining = current.not_after - self._clock()
        return float(math.trunc(remaining.total_seconds()))

    def _satisfies_template(self, pair: KeyPair) -> bool:
        template = self._get_template()
        # Without a template there is nothing to compare with: keep what we have.
        return template is None or template.satisfied_by(pair.certificate)

    def next_rotation_deadline(self) -> datetime.datetime:
        current = self._current
        if current is None:
            return self._clock()
        if not self._satisfies_template(current):
            klog.info("Certificate does not match what the node asks for, rotating now",
                      kind=self.kind, subject=current.certificate.subject.rfc4514_string())
            return self._clock()
        deadline = rotation_deadline(current, self._fraction())
        klog.info("Certificate rotation deadline determined", kind=self.kind,
                  expiration=current.not_after.isoformat(), deadline=deadline.isoformat())
        return deadline

    def start(self) -> None:
        """Report this manager's certificate in the TTL gauge."""
        self._ttl.set_function(self.ttl_seconds)

    async def run(self) -> None:
        """Sleep until the deadline (or a template change), renew (with back-off), repeat."""
        self.start()
        while True:
            deadline = self.next_rotation_deadline()
            remaining = (deadline - self._clock()).total_seconds()
            if remaining > 0:
                klog.info("Waiting for next certificate rotation", kind=self.kind,
                          sleep=f"{remaining:.0f}s")
                while remaining > 0:
                    await self._sleep(min(remaining, self._template_poll))
                    current = self._current
                    if current is not None and not self._satisfies_template(current):
                        klog.info("Certificate template changed, rotating", kind=self.kind)
                        break
                    remaining = (deadline - self._clock()).total_seconds()
            await self._rotate_with_backoff()

    async def _rotate_with_backoff(self) -> None:
        delay = BACKOFF_INITIAL
        for _ in range(BACKOFF_STEPS):
            if await self.rotate_certs():
                return
            await self._sleep(delay * (1 + random.random() * BACKOFF_JITTER))
            delay *= BACKOFF_FACTOR
        klog.error("Reached backoff limit, still unable to rotate certs", kind=self.kind)
        while not await self.rotate_certs():
            await self._sleep(RETRY_FOREVER_SECONDS)

    async def rotate_certs(self) -> bool:
        """One renewal attempt; True when a new certificate is stored and in use."""
        klog.v(2).info("Rotating certificates", kind=self.kind)
        template = self._get_template()
        if template is None:
            klog.error("Unable to generate a certificate signing request: no template "
                       "available yet", kind=self.kind)
            self._renew_errors.inc()
            return False
        key = new_private_key()
        key_pem = private_key_pem(key)
        csr_pem = make_csr(key, template.subject, template.dns_names, template.ip_addresses)
        try:
            client = await self._client_factory(self._current)
        except Exception as err:
            klog.error("Unable to load a client to request certificates", describe_error(err))
            self._renew_errors.inc()
            return False
        try:
            try:
                name, uid = await request_certificate(client, csr_pem, "", signer=self._signer,
                                                      usages=self._usages)
            except Exception as err:
                klog.error("Failed while requesting a signed certificate from the control plane",
                           describe_error(err), kind=self.kind)
                self._renew_errors.inc()
                return False
            klog.info("Waiting for the certificate signing request to be approved and signed",
                      kind=self.kind, csr=name, signer=self._signer)
            try:
                cert_pem = await wait_for_certificate(client, name, uid, RENEWAL_WAIT_SECONDS)
            except Exception as err:
                klog.error("Certificate request was not signed", describe_error(err), csr=name)
                self._renew_errors.inc()
                return False
        finally:
            if self._close_clients:
                await client.close()
        try:
            pair = self.store.update(cert_pem, key_pem)
        except Exception as err:
            klog.error("Unable to store the new cert/key pair", err)
            self._renew_errors.inc()
            return False
        previous, self._current = self._current, pair
        if previous is not None and self._rotation_age is not None:
            self._rotation_age.observe((self._clock() - previous.not_before).total_seconds())
        self.rotations += 1
        klog.info("Rotated the kubelet certificate", kind=self.kind, csr=name,
                  expiration=pair.not_after.isoformat(), path=pair.path)
        self._on_rotated(pair)
        return True


class ClientCertificateManager(CertificateManager):
    """The client certificate (``rotateCertificates``): ``system:node:<node>`` from the
    ``kube-apiserver-client-kubelet`` signer."""

    def __init__(self, store: FileStore, node_name: str, client_factory: ClientFactory,
                 on_rotated: Callable[[KeyPair], None], initial: KeyPair | None = None,
                 clock: Callable[[], datetime.datetime] = _utcnow,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 fraction: Callable[[], float] = jittered_fraction) -> None:
        self.node_name = node_name
        template = CertificateTemplate(node_subject(node_name))
        super().__init__(store, lambda: template, client_factory, on_rotated, kind="client",
                         signer=KUBELET_CLIENT_SIGNER, usages=KUBELET_CLIENT_USAGES,
                         ttl=CERTIFICATE_MANAGER_CLIENT_TTL,
                         renew_errors=CERTIFICATE_MANAGER_CLIENT_EXPIRATION_RENEW_ERRORS,
                         initial=initial, clock=clock, sleep=sleep, fraction=fraction)


class ServerCertificateManager(CertificateManager):
    """The serving certificate (``serverTLSBootstrap``, upstream
    ``NewKubeletServerCertificateManager``): ``system:node:<node>`` with the node's
    addresses from the ``kubelet-serving`` signer, kept as ``kubelet-server-*.pem``."""

    def __init__(self, store: FileStore, node_name: str,
                 addresses: Callable[[], Sequence[V1NodeAddress]],
                 client_factory: ClientFactory, on_rotated: Callable[[KeyPair], None], *,
                 initial: KeyPair | None = None, close_clients: bool = True,
                 clock: Callable[[], datetime.datetime] = _utcnow,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 fraction: Callable[[], float] = jittered_fraction) -> None:
        self.node_name = node_name
        super().__init__(store, lambda: serving_template(node_name, addresses()),
                         client_factory, on_rotated, kind="server",
                         signer=KUBELET_SERVING_SIGNER, usages=KUBELET_SERVING_USAGES,
                         ttl=CERTIFICATE_MANAGER_SERVER_TTL,
                         renew_errors=SERVER_EXPIRATION_RENEW_ERRORS,
                         rotation_age=CERTIFICATE_MANAGER_SERVER_ROTATION_SECONDS,
                         initial=initial, close_clients=close_clients,
                         template_poll=SERVING_TEMPLATE_POLL, clock=clock, sleep=sleep,
                         fraction=fraction)


__all__ = [
    "CertificateManager",
    "CertificateTemplate",
    "ClientCertificateManager",
    "ServerCertificateManager",
    "jittered_fraction",
    "rotation_deadline",
    "serving_template",
]
