"""The kubelet API's serving certificate when ``serverTLSBootstrap`` is on.

Instead of the self-signed pair ``initialize_tls`` generates, the kubelet asks
the cluster for a ``kubernetes.io/kubelet-serving`` certificate naming the
node's addresses, and renews it at 70-90% of its lifetime (feature
``RotateKubeletServerCertificate``; upstream ``NewKubeletServerCertificateManager``
in ``NewMainKubelet``). The requests go out on the kubelet's main API client,
i.e. as the node. The pair is kept in ``--cert-dir`` as
``kubelet-server-current.pem``; a pair from an earlier run is served at once.
A configured ``tlsCertFile`` / ``tlsPrivateKeyFile`` is served until the first
certificate is issued. Each new pair is served on new TLS connections without
a restart (``ServingContext``).

The manager is built here, beside the HTTPS server it feeds, and runs under
the kubelet's supervisor.
"""

from __future__ import annotations

import ssl

from pykubelet.certificate.manager import ServerCertificateManager
from pykubelet.certificate.store import (
    KUBELET_SERVER_PREFIX,
    CertificateStoreError,
    FileStore,
    KeyPair,
    load_key_pair,
)
from pykubelet.client.apiclient import KubeletApiClient
from pykubelet.config.server import KubeletServer
from pykubelet.kubelet.dependencies import Dependencies
from pykubelet.kubelet.kubelet import Kubelet
from pykubelet.server.tls import ServingContext, TLSConfigError
from pykubelet.util import klog


def _configured_pair(server: KubeletServer) -> KeyPair | None:
    config = server.config
    if not (config.tls_cert_file and config.tls_private_key_file):
        return None
    try:
        return load_key_pair(config.tls_cert_file, config.tls_private_key_file)
    except CertificateStoreError as err:
        klog.warning("Cannot use the configured serving certificate", err=str(err))
        return None


def serving_ssl_context(kubelet: Kubelet, server: KubeletServer,
                        deps: Dependencies) -> ssl.SSLContext | None:
    """The HTTPS server's context: fixed, or fed by a serving certificate manager."""
    tls = deps.tls_options
    if tls is None:
        return None
    if not server.config.server_tls_bootstrap:
        return tls.ssl_context()
    cluster = kubelet.cluster
    if cluster is None:
        raise ValueError("serverTLSBootstrap needs an API server to issue the serving "
                         "certificate: run with --kubeconfig, or set serverTLSBootstrap: false")
    serving = ServingContext(tls)
    client: KubeletApiClient = deps.kube_client

    async def csr_client(_current: KeyPair | None) -> KubeletApiClient:
        return client

    def rotated(pair: KeyPair) -> None:
        serving.load(pair.path, pair.key_file)

    manager = ServerCertificateManager(
        FileStore(server.flags.cert_dir, KUBELET_SERVER_PREFIX), kubelet.options.node_name,
        lambda: cluster.node_status.last_observed_addresses, csr_client, rotated,
        initial=_configured_pair(server), close_clients=False)
    current = manager.current()
    if current is not None:
        try:
            serving.load(current.path, current.key_file)
        except TLSConfigError as err:
            klog.warning("Cannot serve the stored serving certificate; asking for a new one",
                         err=str(err))
    else:
        klog.info("No serving certificate yet: TLS handshakes fail until the certificate "
                  "signing request is approved and signed", signer="kubernetes.io/kubelet-serving")
    kubelet.supervisor.spawn("server-certificate-rotation", manager.run)
    return serving.context


__all__ = ["serving_ssl_context"]
