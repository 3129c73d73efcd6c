"""The API clients ``run`` builds in cluster mode (upstream ``buildKubeletClientConfig``).

1. With ``--bootstrap-kubeconfig``, make sure ``--kubeconfig`` holds a valid
   client certificate first (TLS bootstrapping through a CSR). Upstream does
   this in the background when ``rotateCertificates`` is on; pykubelet does it
   before building anything, so no request ever goes out with credentials
   that are about to be replaced (and the log shows no refused requests).
2. Load ``--kubeconfig`` and build the main, events and heartbeat clients.
3. With ``rotateCertificates``, a certificate manager renews the client
   certificate and re-keys all three clients; it runs under the kubelet's
   supervisor (``Kubelet.run``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pykubelet.certificate.bootstrap import load_client_cert
from pykubelet.certificate.manager import ClientCertificateManager
from pykubelet.certificate.store import CertificateStoreError, FileStore, KeyPair, load_key_pair
from pykubelet.client import KubeletClients, check_server, load_rest_config, new_clients
from pykubelet.client.apiclient import KubeletApiClient
from pykubelet.client.kubeconfig import RestConfig
from pykubelet.config.server import KubeletServer
from pykubelet.util import klog

# Certificate requests go out on a client of their own with client-go's default limits.
CSR_CLIENT_QPS = 5.0
CSR_CLIENT_BURST = 10


@dataclass
class ClusterClients:
    clients: KubeletClients
    certificate_manager: ClientCertificateManager | None = None


def _initial_pair(rest: RestConfig) -> KeyPair | None:
    """The kubeconfig's own certificate, where rotation starts when the store is empty."""
    if not (rest.cert_file and rest.key_file):
        return None
    try:
        return load_key_pair(rest.cert_file, rest.key_file)
    except CertificateStoreError as err:
        klog.warning("Cannot read the kubeconfig's client certificate for rotation",
                     err=str(err), kubeconfig=rest.path)
        return None


async def build_kubelet_clients(server: KubeletServer, node_name: str) -> ClusterClients:
    """Bootstrap if asked, load ``--kubeconfig``, build the clients (and the rotation)."""
    flags, config = server.flags, server.config
    if flags.bootstrap_kubeconfig:
        await load_client_cert(flags.kubeconfig, flags.bootstrap_kubeconfig, flags.cert_dir,
                               node_name)
    rest = await load_rest_config(flags.kubeconfig)
    clients = new_clients(rest, config)
    klog.info("Built the API clients", server=rest.host, kubeconfig=rest.path,
              qps=config.kube_api_qps, burst=config.kube_api_burst)
    if not config.rotate_certificates:
        return ClusterClients(clients)

    store = FileStore(flags.cert_dir)

    async def csr_client(current: KeyPair | None) -> KubeletApiClient:
        # With a valid certificate the node renews as itself; otherwise the
        # bootstrap credentials ask, as upstream's certificate manager does.
        if current is not None:
            base = rest.with_client_certificate(current.path, current.key_file)
        elif flags.bootstrap_kubeconfig:
            base = await load_rest_config(flags.bootstrap_kubeconfig)
        else:
            base = rest
        return KubeletApiClient(base, name="certificate", qps=CSR_CLIENT_QPS,
                                burst=CSR_CLIENT_BURST)

    def rotated(pair: KeyPair) -> None:
        clients.use_client_certificate(pair.path, pair.key_file)

    initial = _initial_pair(rest)
    if initial is not None and rest.client_certificate_embedded and store.current() is None:
        # As upstream's certificate manager, which stores a kubeconfig's embedded pair
        # as the first current one: kubeadm init's kubelet.conf carries its pair inline,
        # and kubeadm's kubelet-finalize phase points kubelet.conf at
        # kubelet-client-current.pem (and rotation renews it) only when that file exists.
        initial = store.update(initial.cert_pem, initial.key_pem)
        klog.info("Stored the kubeconfig's embedded client certificate as the current one",
                  kubeconfig=rest.path, certificate=initial.path)
    manager = ClientCertificateManager(store, node_name, csr_client, rotated, initial=initial)
    if manager.current() is not None and store.current() is not None:
        current = store.current_path()
        if rest.cert_file != current:
            # The store holds a newer pair than the kubeconfig names: use it.
            clients.use_client_certificate(current, current)
    return ClusterClients(clients, manager)


async def report_server(clients: KubeletClients) -> None:
    """Say at start-up whether the API server answers; never fatal (it may come up later)."""
    try:
        version = await check_server(clients.kube)
    except Exception as err:
        klog.error("The API server cannot be reached; pods keep running and the kubelet "
                   "keeps trying with back-off", err)
        return
    klog.info("Connected to the API server", server=clients.host, version=version)


__all__ = ["ClusterClients", "build_kubelet_clients", "report_server"]
