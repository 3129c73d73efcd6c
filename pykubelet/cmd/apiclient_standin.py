"""A minimal API client from ``--kubeconfig``, standing in for ``pykubelet.client``.

The cluster-mode client (three rate-limited clients, bootstrap, certificate
rotation) is built by the node side of the cluster-mode work. Until it is on
main, ``run`` builds one plain ``kubernetes_asyncio`` client with this
function so the pod side (API pod source, status, mirror pods, events) can
run against a real API server; ``build_api_client`` is the one call to swap.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration, VersionApi

SERVER_CHECK_TIMEOUT = 10.0


class KubeconfigError(RuntimeError):
    pass


async def build_api_client(path: str) -> Any:
    """An ``ApiClient`` for the kubeconfig at ``path``; errors name the file or the server."""
    configuration = Configuration()
    try:
        await kube_config.load_kube_config(config_file=path,
                                           client_configuration=configuration)
    except Exception as err:
        raise KubeconfigError(f"invalid kubeconfig {path}: {err}") from err
    client = ApiClient(configuration)
    try:
        await VersionApi(client).get_code(_request_timeout=SERVER_CHECK_TIMEOUT)
    except Exception as err:
        await client.close()
        raise KubeconfigError(
            f"cannot reach the API server {configuration.host} (from {path}): {err}") from err
    return client


__all__ = ["KubeconfigError", "build_api_client"]
