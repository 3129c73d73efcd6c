"""Renewing the kubelet's client certificate before it expires (upstream certificate manager,
``rotateCertificates``).

The manager sleeps until a deadline drawn at random between 70% and 90% of
the current certificate's lifetime (so a fleet of nodes issued together does
not renew together), then makes a new key, asks for a certificate as
bootstrapping does (with the current certificate as credentials while it is
valid), stores the pair and tells the API clients to present it. A failed
renewal is retried after 2, 4, 8, 16 and 32 seconds (10% jitter), then every
32 seconds. A certificate whose subject is not the node's any more is
replaced at once.

Metrics, as upstream names them: ``kubelet_certificate_manager_client_ttl_seconds``
(seconds until the certificate expires, +Inf without one) and
``kubelet_certificate_manager_client_expiration_renew_errors`` (failed renewals).
"""

from __future__ import annotations

import asyncio
import datetime
import math
import random
from collections.abc import Awaitable, Callable

from pykubelet.certificate.csr import (
    KUBELET_CLIENT_USAGES,
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
    CERTIFICATE_MANAGER_CLIENT_EXPIRATION_RENEW_ERRORS as RENEW_ERRORS,
)
from pykubelet.metrics import CERTIFICATE_MANAGER_CLIENT_TTL as CLIENT_TTL
from pykubelet.util import klog

BACKOFF_INITIAL = 2.0
BACKOFF_FACTOR = 2.0
BACKOFF_JITTER = 0.1
BACKOFF_STEPS = 5
RETRY_FOREVER_SECONDS = 32.0
# Long sleeps are cut into pieces so a wall clock that jumps is noticed.
MAX_SLEEP_SLICE = 60.0


_active: ClientCertificateManager | None = None


def _ttl_seconds() -> float:
    current = _active.current() if _active is not None else None
    if current is None:
        return math.inf
    remaining = current.not_after - datetime.datetime.now(datetime.UTC)
    return float(math.trunc(remaining.total_seconds()))


CLIENT_TTL.set_function(_ttl_seconds)

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


class ClientCertificateManager:
    """Keeps ``store``'s kubelet client certificate valid; ``on_rotated`` hears of new ones."""

    def __init__(self, store: FileStore, node_name: str, client_factory: ClientFactory,
                 on_rotated: Callable[[KeyPair], None], initial: KeyPair | None = None,
                 clock: Callable[[], datetime.datetime] = _utcnow,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 fraction: Callable[[], float] = jittered_fraction) -> None:
        self.store = store
        self.node_name = node_name
        self._client_factory = client_factory
        self._on_rotated = on_rotated
        self._clock = clock
        self._sleep = sleep
        self._fraction = fraction
        # The store's pair; before the first rotation, possibly the kubeconfig's own.
        self._current = store.current() or initial
        self.rotations = 0

    def current(self) -> KeyPair | None:
        return self._current

    def _matches_template(self, pair: KeyPair) -> bool:
        return pair.certificate.subject == node_subject(self.node_name)

    def next_rotation_deadline(self) -> datetime.datetime:
        current = self._current
        if current is None:
            return self._clock()
        if not self._matches_template(current):
            klog.info("Certificate does not match the node's identity, rotating now",
                      subject=current.certificate.subject.rfc4514_string())
            return self._clock()
        deadline = rotation_deadline(current, self._fraction())
        klog.info("Certificate rotation deadline determined",
                  expiration=current.not_after.isoformat(), deadline=deadline.isoformat())
        return deadline

    def start(self) -> None:
        global _active
        _active = self

    async def run(self) -> None:
        """Sleep until the deadline, renew (with back-off), repeat."""
        self.start()
        while True:
            deadline = self.next_rotation_deadline()
            remaining = (deadline - self._clock()).total_seconds()
            if remaining > 0:
                klog.info("Waiting for next certificate rotation", sleep=f"{remaining:.0f}s")
                while remaining > 0:
                    await self._sleep(min(remaining, MAX_SLEEP_SLICE))
                    remaining = (deadline - self._clock()).total_seconds()
            await self._rotate_with_backoff()

    async def _rotate_with_backoff(self) -> None:
        delay = BACKOFF_INITIAL
        for _ in range(BACKOFF_STEPS):
            if await self.rotate_certs():
                return
            await self._sleep(delay * (1 + random.random() * BACKOFF_JITTER))
            delay *= BACKOFF_FACTOR
        klog.error("Reached backoff limit, still unable to rotate certs")
        while not await self.rotate_certs():
            await self._sleep(RETRY_FOREVER_SECONDS)

    async def rotate_certs(self) -> bool:
        """One renewal attempt; True when a new certificate is stored and in use."""
        klog.v(2).info("Rotating certificates")
        key = new_private_key()
        key_pem = private_key_pem(key)
        csr_pem = make_csr(key, node_subject(self.node_name))
        try:
            client = await self._client_factory(self._current)
        except Exception as err:
            klog.error("Unable to load a client to request certificates", describe_error(err))
            RENEW_ERRORS.inc()
            return False
        try:
            try:
                name, uid = await request_certificate(client, csr_pem, "",
                                                      usages=KUBELET_CLIENT_USAGES)
            except Exception as err:
                klog.error("Failed while requesting a signed certificate from the control plane",
                           describe_error(err))
                RENEW_ERRORS.inc()
                return False
            try:
                cert_pem = await wait_for_certificate(client, name, uid, RENEWAL_WAIT_SECONDS)
            except Exception as err:
                klog.error("Certificate request was not signed", describe_error(err), csr=name)
                RENEW_ERRORS.inc()
                return False
        finally:
            await client.close()
        try:
            pair = self.store.update(cert_pem, key_pem)
        except Exception as err:
            klog.error("Unable to store the new cert/key pair", err)
            RENEW_ERRORS.inc()
            return False
        self._current = pair
        self.rotations += 1
        klog.info("Rotated the kubelet client certificate", csr=name,
                  expiration=pair.not_after.isoformat(), path=pair.path)
        self._on_rotated(pair)
        return True


__all__ = [
    "ClientCertificateManager",
    "jittered_fraction",
    "rotation_deadline",
]
