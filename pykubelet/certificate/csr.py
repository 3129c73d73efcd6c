"""Asking the cluster for a kubelet certificate (upstream ``util/certificate/csr``).

The kubelet makes a new ECDSA P-256 key, a certificate request for
``CN=system:node:<node>, O=system:nodes``, and posts it as a
``CertificateSigningRequest`` for the signer
``kubernetes.io/kube-apiserver-client-kubelet`` with the usages a kubelet
client certificate has (digital signature, key encipherment, client auth —
the set the 1.20 approver insists on, still accepted by newer ones). The
controller manager approves it (for the bootstrap group, or for a node
renewing its own certificate) and signs it; the kubelet watches the request
until the certificate appears, or it is denied or fails.

The serving certificate (``serverTLSBootstrap``) is asked for the same way,
from the signer ``kubernetes.io/kubelet-serving``, with the node's host names
and addresses as subject alternative names and the usages digital signature,
key encipherment and server auth (again the exact set 1.20's signer requires).
No controller approves those: an operator or an approver of their choosing does.

A bootstrap request is named after a digest of its key, subject and usages
(``node-csr-...``), so a kubelet that restarts mid-way finds and reuses its
own request instead of piling up new ones; renewals let the server name them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import NameOID
from kubernetes_asyncio.client import (
    ApiException,
    CertificatesV1Api,
    V1CertificateSigningRequest,
    V1CertificateSigningRequestSpec,
    V1ObjectMeta,
)

from pykubelet.client.apiclient import KubeletApiClient
from pykubelet.client.informer import ObjectInformer
from pykubelet.util import klog

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_CLIENT_USAGES = ("digital signature", "key encipherment", "client auth")
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
KUBELET_SERVING_USAGES = ("digital signature", "key encipherment", "server auth")
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
# How long a bootstrap waits for its certificate (upstream: one hour).
BOOTSTRAP_WAIT_SECONDS = 3600.0
# How long a renewal waits (upstream certificateWaitTimeout).
RENEWAL_WAIT_SECONDS = 15 * 60.0


class CertificateRequestError(Exception):
    pass


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: PrivateKeyTypes) -> bytes:
    """``-----BEGIN EC PRIVATE KEY-----`` (SEC 1), as upstream writes ECDSA keys."""
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def load_private_key(pem: bytes) -> PrivateKeyTypes:
    return serialization.load_pem_private_key(pem, password=None)


def node_subject(node_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
        x509.NameAttribute(NameOID.COMMON_NAME, NODE_USER_PREFIX + node_name),
    ])


def make_csr(key: PrivateKeyTypes, subject: x509.Name, dns_names: Sequence[str] = (),
             ip_addresses: Sequence[str] = ()) -> bytes:
    """A PEM ``CERTIFICATE REQUEST`` for ``subject`` (and these SANs) signed by ``key``."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    request = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    return request.public_bytes(serialization.Encoding.PEM)


def digested_name(key: PrivateKeyTypes, subject: x509.Name, usages: Sequence[str]) -> str:
    """``node-csr-<digest>`` of public key, CN, organizations and usages (upstream
    ``digestedName``: base64url of each part, ``|``-delimited, SHA-512/256)."""
    digest = hashlib.new("sha512_256")

    def write(data: bytes) -> None:
        digest.update(base64.urlsafe_b64encode(data).rstrip(b"="))
        digest.update(b"|")

    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    write(public)
    common = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    write(str(common[0].value).encode() if common else b"")
    for attribute in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME):
        write(str(attribute.value).encode())
    for usage in usages:
        write(usage.encode())
    encoded = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    return f"node-csr-{encoded}"


def _compatible(existing: V1CertificateSigningRequest, csr_pem: bytes, signer: str,
                usages: Sequence[str]) -> str | None:
    """Why an existing request of the same name is not ours, or None if it is."""
    spec = existing.spec
    if spec is None:
        return "it has no spec"
    try:
        theirs = x509.load_pem_x509_csr(base64.b64decode(spec.request))
    except ValueError as err:
        return f"its request cannot be parsed: {err}"
    ours = x509.load_pem_x509_csr(csr_pem)
    if theirs.subject != ours.subject:
        return "its subject differs"
    der = serialization.Encoding.DER
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    if theirs.public_key().public_bytes(der, info) != ours.public_key().public_bytes(der, info):
        return "its public key differs"
    if spec.signer_name != signer:
        return f"its signer is {spec.signer_name}"
    if sorted(spec.usages or []) != sorted(usages):
        return "its usages differ"
    return None


async def request_certificate(client: KubeletApiClient, csr_pem: bytes, name: str,
                              signer: str = KUBELET_CLIENT_SIGNER,
                              usages: Sequence[str] = KUBELET_CLIENT_USAGES) -> tuple[str, str]:
    """Post the request; returns its (name, uid). With ``name``, an equal request is reused."""
    api = CertificatesV1Api(client)
    body = V1CertificateSigningRequest(
        api_version="certificates.k8s.io/v1", kind="CertificateSigningRequest",
        metadata=V1ObjectMeta(name=name) if name else V1ObjectMeta(generate_name="csr-"),
        spec=V1CertificateSigningRequestSpec(
            request=base64.b64encode(csr_pem).decode(), signer_name=signer,
            usages=list(usages)))
    try:
        created = await api.create_certificate_signing_request(body)
    except ApiException as err:
        if err.status != 409 or not name:
            raise CertificateRequestError(
                f"cannot create certificate signing request: {err.status} {err.reason}") from err
        existing = await api.read_certificate_signing_request(name)
        why = _compatible(existing, csr_pem, signer, usages)
        if why is not None:
            raise CertificateRequestError(
                f"retrieved csr {name} is not compatible: {why}") from err
        klog.info("Certificate signing request already exists, waiting for it", name=name)
        return name, str(existing.metadata.uid)
    return str(created.metadata.name), str(created.metadata.uid)


def issued_certificate(csr: V1CertificateSigningRequest, uid: str) -> bytes | None:
    """The certificate of an approved request, None while pending; raises when denied/failed."""
    if csr.metadata is not None and uid and csr.metadata.uid != uid:
        raise CertificateRequestError(
            f"csr {csr.metadata.name} changed UIDs (it was deleted and created again)")
    status = csr.status
    for condition in (status.conditions if status is not None else None) or []:
        if condition.type == "Denied":
            raise CertificateRequestError(
                "certificate signing request is denied, "
                f"reason: {condition.reason}, message: {condition.message}")
        if condition.type == "Failed":
            raise CertificateRequestError(
                "certificate signing request failed, "
                f"reason: {condition.reason}, message: {condition.message}")
        if condition.type == "Approved":
            if status is not None and status.certificate:
                klog.v(2).info("Certificate signing request is approved",
                               name=csr.metadata.name if csr.metadata else "")
                return base64.b64decode(status.certificate)
            klog.v(2).info("Certificate signing request is approved, waiting to be issued",
                           name=csr.metadata.name if csr.metadata else "")
    return None


async def wait_for_certificate(client: KubeletApiClient, name: str, uid: str,
                               timeout: float) -> bytes:
    """Watch the request ``name`` until its certificate is issued (PEM)."""
    api = CertificatesV1Api(client)
    informer: ObjectInformer[V1CertificateSigningRequest] = ObjectInformer(
        api.list_certificate_signing_request, V1CertificateSigningRequest, name,
        f"certificatesigningrequest {name}")
    watching = asyncio.create_task(informer.run(), name=f"watch-csr-{name}")

    async def issued() -> bytes:
        await informer.wait_for_sync()
        generation = informer.generation
        while True:
            current = informer.get()
            if current is not None:
                certificate = issued_certificate(current, uid)
                if certificate is not None:
                    return certificate
            generation = await informer.wait_for_change(generation)

    try:
        return await asyncio.wait_for(issued(), timeout)
    except TimeoutError as err:
        raise CertificateRequestError(
            f"timed out after {timeout:g}s waiting for csr {name} to be signed") from err
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


__all__ = [
    "KUBELET_CLIENT_SIGNER",
    "KUBELET_CLIENT_USAGES",
    "KUBELET_SERVING_SIGNER",
    "KUBELET_SERVING_USAGES",
    "CertificateRequestError",
    "digested_name",
    "issued_certificate",
    "load_private_key",
    "make_csr",
    "new_private_key",
    "node_subject",
    "private_key_pem",
    "request_certificate",
    "wait_for_certificate",
]
