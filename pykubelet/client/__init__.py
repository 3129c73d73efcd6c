"""The kubelet's API clients (upstream: the clientsets ``run`` builds in ``cmd/kubelet/app``).

In cluster mode the kubelet talks to the API server through three clients
made from one ``--kubeconfig``, as seed 001 shows:

- ``kube``: everything else (registration, pods, mirror pods, CSRs), limited
  to ``kubeAPIQPS`` requests a second with bursts of ``kubeAPIBurst``;
- ``events``: event posting, limited by ``eventRecordQPS`` / ``eventBurst`` so
  a storm of events cannot starve the rest;
- ``heartbeat``: node status and the node lease, never throttled (a
  heartbeat stuck behind a pod-status storm makes the node look dead) and
  with a request timeout of min(``nodeStatusUpdateFrequency``,
  ``nodeLeaseDurationSeconds``), so one hung request cannot eat the next
  heartbeat's slot.

No ``--kubeconfig`` means standalone mode: no clients at all.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubernetes_asyncio.client import VersionApi

from pykubelet.client.apiclient import KubeletApiClient, describe_error
from pykubelet.client.kubeconfig import KubeconfigError, RestConfig, load_rest_config
from pykubelet.config.types import KubeletConfiguration
from pykubelet.config.units import seconds
from pykubelet.util import klog

# client-go's defaults for a rest.Config whose QPS / Burst are left at 0.
CLIENT_GO_DEFAULT_QPS = 5.0
CLIENT_GO_DEFAULT_BURST = 10
JSON_CONTENT_TYPE = "application/json"
SERVER_CHECK_TIMEOUT = 5.0


class ServerUnreachableError(Exception):
    """The API server named in a kubeconfig did not answer."""

    def __init__(self, host: str, path: str, reason: str) -> None:
        super().__init__(f"cannot reach the API server {host} (from {path}): {reason}")
        self.host = host
        self.path = path
        self.reason = reason


def heartbeat_timeout(config: KubeletConfiguration) -> float:
    """min(``nodeStatusUpdateFrequency``, ``nodeLeaseDurationSeconds``), in seconds."""
    return min(seconds(config.node_status_update_frequency),
               float(config.node_lease_duration_seconds))


@dataclass
class KubeletClients:
    """The three clients of seed 001; ``Dependencies`` carries them to the subsystems."""

    kube: KubeletApiClient
    events: KubeletApiClient
    heartbeat: KubeletApiClient

    def all(self) -> tuple[KubeletApiClient, ...]:
        return (self.kube, self.events, self.heartbeat)

    @property
    def host(self) -> str:
        return self.kube.host

    def use_client_certificate(self, cert_file: str, key_file: str) -> None:
        """A rotated client certificate: every client presents it from now on."""
        for client in self.all():
            client.use_client_certificate(cert_file, key_file)

    def close_all_connections(self) -> None:
        """Upstream's ``onRepeatedHeartbeatFailure``: start every client on fresh connections."""
        for client in self.all():
            client.close_all_connections()

    async def close(self) -> None:
        for client in self.all():
            await client.close()


def new_clients(rest: RestConfig, config: KubeletConfiguration) -> KubeletClients:
    """The main, events and heartbeat clients for ``rest`` with the configured limits."""
    if config.content_type and config.content_type != JSON_CONTENT_TYPE:
        # kubernetes_asyncio has JSON models only; the server answers JSON to
        # every client that asks for it, so requests work, just not in protobuf.
        klog.v(2).info("API requests use JSON: the Python client has no protobuf codec",
                       contentType=config.content_type)
    qps = float(config.kube_api_qps) or CLIENT_GO_DEFAULT_QPS
    burst = int(config.kube_api_burst) or CLIENT_GO_DEFAULT_BURST
    kube = KubeletApiClient(rest, name="main", qps=qps, burst=burst)
    # eventRecordQPS 0 means no limit, as its documentation says.
    events = KubeletApiClient(rest, name="events", qps=float(config.event_record_qps),
                              burst=int(config.event_burst))
    heartbeat = KubeletApiClient(rest, name="heartbeat", qps=0, burst=1,
                                 timeout=heartbeat_timeout(config))
    return KubeletClients(kube=kube, events=events, heartbeat=heartbeat)


async def check_server(client: KubeletApiClient,
                       timeout: float = SERVER_CHECK_TIMEOUT) -> str:
    """Ask the server for its version; ``ServerUnreachableError`` names the address if it can't."""
    try:
        info = await asyncio.wait_for(VersionApi(client).get_code(), timeout)
    except Exception as err:
        raise ServerUnreachableError(client.host, client.rest.path, describe_error(err)) from err
    return str(info.git_version)


__all__ = [
    "KubeconfigError",
    "KubeletApiClient",
    "KubeletClients",
    "RestConfig",
    "ServerUnreachableError",
    "check_server",
    "heartbeat_timeout",
    "load_rest_config",
    "new_clients",
]
