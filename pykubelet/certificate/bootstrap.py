"""TLS bootstrapping: from a bootstrap token to a node client certificate (upstream
``pkg/kubelet/certificate/bootstrap``).

With ``--bootstrap-kubeconfig`` the kubelet starts from weak credentials (a
bootstrap token in ``system:bootstrappers``) that may do little more than ask
for a certificate. When ``--kubeconfig`` does not exist yet or its client
certificate has expired, the kubelet:

1. reuses the key of its last certificate, or a key it generated on an earlier
   attempt (``kubelet-client.key.tmp``), or makes a new one, so a retry after
   a crash asks for the same certificate;
2. waits up to a minute for the API server's ``/healthz``;
3. posts the certificate request and waits for it to be approved and signed;
4. stores the pair as ``kubelet-client-current.pem`` in ``--cert-dir`` and
   writes ``--kubeconfig`` pointing at it.

Later starts find a valid ``--kubeconfig`` and skip all of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os

from cryptography import x509

from pykubelet.certificate.csr import (
    BOOTSTRAP_WAIT_SECONDS,
    KUBELET_CLIENT_USAGES,
    digested_name,
    load_private_key,
    make_csr,
    new_private_key,
    node_subject,
    private_key_pem,
    request_certificate,
    wait_for_certificate,
)
from pykubelet.certificate.store import CertificateStoreError, FileStore
from pykubelet.client.apiclient import KubeletApiClient, describe_error
from pykubelet.client.kubeconfig import (
    KubeconfigError,
    client_certificate_pem,
    cluster_info,
    load_rest_config,
    write_kubeconfig,
)
from pykubelet.util import klog

TMP_PRIVATE_KEY_FILE = "kubelet-client.key.tmp"
SERVER_WAIT_SECONDS = 60.0
SERVER_POLL_SECONDS = 2.0
# The bootstrap client is an ordinary client-go client: its default limits.
BOOTSTRAP_QPS = 5.0
BOOTSTRAP_BURST = 10


class BootstrapError(Exception):
    pass


def is_client_config_still_valid(kubeconfig: str) -> bool:
    """True when ``kubeconfig`` exists and its client certificate has not expired."""
    if not os.path.exists(kubeconfig):
        return False
    try:
        pem = client_certificate_pem(kubeconfig)
    except KubeconfigError as err:
        klog.error("Unable to read existing bootstrap client config", err, path=kubeconfig)
        return False
    if not pem:
        klog.error("Existing kubeconfig has no client certificate", path=kubeconfig)
        return False
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as err:
        klog.error("Unable to load TLS certificates from existing bootstrap client config", err,
                   path=kubeconfig)
        return False
    now = datetime.datetime.now(datetime.UTC)
    for certificate in certificates:
        if now > certificate.not_valid_after_utc:
            klog.error("Part of the existing bootstrap client certificate is expired",
                       path=kubeconfig, expired=certificate.not_valid_after_utc.isoformat())
            return False
    return True


def _load_or_generate_key(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        load_private_key(data)
        return data
    except (OSError, ValueError):
        pass
    data = private_key_pem(new_private_key())
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return data


async def wait_for_server(client: KubeletApiClient, deadline: float = SERVER_WAIT_SECONDS) -> bool:
    """Poll ``/healthz`` until it answers or ``deadline`` passes; logs, never raises."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while True:
        try:
            await client.call_api("/healthz", "GET", auth_settings=["BearerToken"],
                                  _request_timeout=1.0, _preload_content=True,
                                  _return_http_data_only=True)
            return True
        except Exception as err:
            klog.info("Failed to connect to apiserver", err=describe_error(err))
        if loop.time() >= end:
            klog.info("Error waiting for apiserver to come up",
                      err="timed out waiting to connect to apiserver")
            return False
        await asyncio.sleep(SERVER_POLL_SECONDS)


async def request_node_certificate(client: KubeletApiClient, key_pem: bytes, node_name: str,
                                   timeout: float = BOOTSTRAP_WAIT_SECONDS) -> bytes:
    """Ask for and wait for a node client certificate for ``key_pem``; returns its PEM."""
    key = load_private_key(key_pem)
    subject = node_subject(node_name)
    csr_pem = make_csr(key, subject)
    name = digested_name(key, subject, KUBELET_CLIENT_USAGES)
    request_name, uid = await request_certificate(client, csr_pem, name)
    klog.v(2).info("Waiting for client certificate to be issued", csr=request_name)
    return await wait_for_certificate(client, request_name, uid, timeout)


async def load_client_cert(kubeconfig: str, bootstrap_kubeconfig: str, cert_dir: str,
                           node_name: str) -> None:
    """Bootstrap ``kubeconfig`` from ``bootstrap_kubeconfig`` unless it is still valid."""
    if is_client_config_still_valid(kubeconfig):
        klog.v(2).info("Kubeconfig exists and is valid, skipping bootstrap", path=kubeconfig)
        return
    klog.info("Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file",
              bootstrapKubeconfig=bootstrap_kubeconfig, kubeconfig=kubeconfig)
    try:
        rest = await load_rest_config(bootstrap_kubeconfig)
    except KubeconfigError as err:
        raise BootstrapError(f"unable to load bootstrap kubeconfig: {err}") from err
    store = FileStore(cert_dir)
    key_pem = b""
    try:
        current = store.current()
        if current is not None:
            key_pem = current.key_pem
    except CertificateStoreError:
        key_pem = b""
    tmp_key = os.path.join(cert_dir, TMP_PRIVATE_KEY_FILE)
    if not key_pem:
        klog.v(2).info("No valid private key and/or certificate found, reusing existing "
                       "private key or creating a new one")
        # Kept on disk until the request succeeds, so a retry asks for the same certificate.
        key_pem = _load_or_generate_key(tmp_key)

    client = KubeletApiClient(rest, name="bootstrap", qps=BOOTSTRAP_QPS, burst=BOOTSTRAP_BURST)
    try:
        await wait_for_server(client)
        cert_pem = await request_node_certificate(client, key_pem, node_name)
    finally:
        await client.close()
    store.update(cert_pem, key_pem)
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp_key)
    info = cluster_info(bootstrap_kubeconfig)
    write_kubeconfig(kubeconfig, server=info.server, ca_file=info.ca_file, ca_data=info.ca_data,
                     insecure=info.insecure, cert_path=store.current_path(),
                     key_path=store.current_path())
    klog.info("Wrote the kubeconfig for the new client certificate", kubeconfig=kubeconfig,
              certificate=store.current_path())


__all__ = [
    "BootstrapError",
    "is_client_config_still_valid",
    "load_client_cert",
    "request_node_certificate",
    "wait_for_server",
]
