"""Reading a kubeconfig file into a client configuration (upstream ``clientcmd``).

``--kubeconfig`` (and ``--bootstrap-kubeconfig``) name a kubeconfig file: the
API server's address and CA, and the kubelet's credentials — a client
certificate, a bearer token (inline or ``tokenFile``), or an exec plugin.
``kubernetes_asyncio``'s loader does the authentication part; this module
checks the file first so that a missing file, bad YAML, a context that does
not exist or a server that is not an ``https://`` URL is one clear error
naming the file, and it keeps the credentials fresh afterwards: an exec
plugin's token is fetched again when it expires, and a ``tokenFile`` is read
again every minute, as client-go does, so a rotated token is picked up
without a restart.
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

from pykubelet.util import klog
from pykubelet.util.atomic_file import write_file_atomically

TOKEN_FILE_REREAD_SECONDS = 60.0


class KubeconfigError(Exception):
    """A kubeconfig file that cannot be used; the message names the file."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"invalid kubeconfig {path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass
class Credentials:
    """Keeps a configuration's bearer token current (exec plugins, ``tokenFile``)."""

    loader: KubeConfigLoader | None = None
    uses_exec: bool = False
    token_file: str = ""
    _token_read_at: float = field(default=float("-inf"), repr=False)

    async def refresh(self, configuration: Configuration) -> None:
        """Called before every authenticated request (the client's ``refresh_api_key_hook``)."""
        if self.uses_exec and self.loader is not None:
            # The loader only runs the plugin again once the last token expired.
            await self.loader.load_from_exec_plugin()
            token = getattr(self.loader, "token", None)
            if token:
                configuration.api_key["BearerToken"] = token
        elif self.token_file and time.monotonic() - self._token_read_at > TOKEN_FILE_REREAD_SECONDS:
            self._token_read_at = time.monotonic()
            try:
                with open(self.token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as err:
                klog.error("Failed to read the token file again; keeping the last token", err,
                           path=self.token_file)
                return
            if token:
                configuration.api_key["BearerToken"] = f"Bearer {token}"


@dataclass
class RestConfig:
    """What a client needs to reach the API server (upstream ``rest.Config``)."""

    path: str
    host: str
    configuration: Configuration
    credentials: Credentials
    # Paths of the TLS files the configuration uses (kubernetes_asyncio writes
    # inline ``*-data`` to temporary files), so callers can describe them.
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    # The client certificate and key are the kubeconfig's own ``client-certificate-data``
    # and ``client-key-data`` (kubeadm init's kubelet.conf), not files it names.
    client_certificate_embedded: bool = False

    def copy(self) -> RestConfig:
        """A copy whose configuration can be changed without touching this one."""
        configuration = type.__call__(Configuration)
        for key, value in vars(self.configuration).items():
            setattr(configuration, key, _copy_value(value))
        return RestConfig(self.path, self.host, configuration, self.credentials,
                          self.ca_file, self.cert_file, self.key_file,
                          self.client_certificate_embedded)

    def with_client_certificate(self, cert_file: str, key_file: str) -> RestConfig:
        """A copy that authenticates with this certificate and key."""
        copy = self.copy()
        copy.configuration.cert_file = cert_file
        copy.configuration.key_file = key_file
        copy.cert_file, copy.key_file = cert_file, key_file
        copy.client_certificate_embedded = False
        return copy

    def has_client_certificate(self) -> bool:
        return bool(self.cert_file and self.key_file)


def _copy_value(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def _named(items: Any, name: str, kind: str, path: str) -> dict[str, Any]:
    if not isinstance(items, list):
        raise KubeconfigError(path, f"{kind}s is not a list")
    for item in items:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            if not isinstance(body, dict):
                raise KubeconfigError(path, f'{kind} "{name}" has no {kind} section')
            return body
    raise KubeconfigError(path, f'{kind} "{name}" not found')


def read_kubeconfig(path: str) -> dict[str, Any]:
    """Parse ``path`` and check the current context, its cluster and its server URL."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError as err:
        raise KubeconfigError(path, "no such file") from err
    except OSError as err:
        raise KubeconfigError(path, err.strerror or str(err)) from err
    except yaml.YAMLError as err:
        raise KubeconfigError(path, f"not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise KubeconfigError(path, "not a kubeconfig (expected a mapping at the top level)")
    current = data.get("current-context")
    if not current:
        raise KubeconfigError(path, "no current-context is set")
    context = _named(data.get("contexts"), str(current), "context", path)
    cluster_name = context.get("cluster")
    if not cluster_name:
        raise KubeconfigError(path, f'context "{current}" names no cluster')
    cluster = _named(data.get("clusters"), str(cluster_name), "cluster", path)
    server = cluster.get("server")
    if not server or not isinstance(server, str):
        raise KubeconfigError(path, f'cluster "{cluster_name}" has no server')
    parts = urlsplit(server)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise KubeconfigError(
            path, f'cluster "{cluster_name}" server {server!r} is not an https:// URL')
    user_name = context.get("user")
    if user_name:
        _named(data.get("users"), str(user_name), "user", path)
    return data


def _current_user(data: dict[str, Any]) -> dict[str, Any]:
    context = next(c["context"] for c in data["contexts"]
                   if isinstance(c, dict) and c.get("name") == data["current-context"])
    user_name = context.get("user")
    for item in data.get("users") or []:
        if isinstance(item, dict) and item.get("name") == user_name:
            return item.get("user") or {}
    return {}


async def load_rest_config(path: str) -> RestConfig:
    """Load ``path`` into a client configuration; raises ``KubeconfigError`` naming it."""
    data = read_kubeconfig(path)
    base = os.path.dirname(os.path.abspath(path))
    configuration = type.__call__(Configuration)
    try:
        loader = KubeConfigLoader(config_dict=data, config_base_path=base)
        await loader.load_and_set(configuration)
    except (ConfigException, KeyError, AssertionError, ValueError, OSError) as err:
        raise KubeconfigError(path, str(err) or type(err).__name__) from err
    user = _current_user(data)
    token_file = ""
    if not user.get("token") and user.get("tokenFile") and "exec" not in user:
        token_file = os.path.join(base, str(user["tokenFile"]))
    credentials = Credentials(loader=loader, uses_exec="exec" in user, token_file=token_file)
    if token_file:
        # The library keeps the file's trailing newline, which no header may carry.
        await credentials.refresh(configuration)
    configuration.refresh_api_key_hook = credentials.refresh
    host = str(configuration.host)
    for attribute in ("ssl_ca_cert", "cert_file", "key_file"):
        value = getattr(configuration, attribute, None)
        if value and not os.path.isfile(value):
            raise KubeconfigError(path, f"{attribute.replace('_', ' ')} {value}: no such file")
    return RestConfig(path=path, host=host, configuration=configuration, credentials=credentials,
                      ca_file=configuration.ssl_ca_cert, cert_file=configuration.cert_file,
                      key_file=configuration.key_file,
                      client_certificate_embedded=bool(user.get("client-certificate-data")
                                                       and user.get("client-key-data")))


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster stanza of a kubeconfig's current context, as written in the file."""

    server: str
    ca_file: str | None
    ca_data: bytes | None
    insecure: bool


def cluster_info(path: str) -> ClusterInfo:
    data = read_kubeconfig(path)
    context = next(c["context"] for c in data["contexts"]
                   if isinstance(c, dict) and c.get("name") == data["current-context"])
    cluster = _named(data.get("clusters"), str(context["cluster"]), "cluster", path)
    ca_file = cluster.get("certificate-authority")
    ca_data = cluster.get("certificate-authority-data")
    return ClusterInfo(
        server=str(cluster["server"]),
        ca_file=os.path.join(os.path.dirname(os.path.abspath(path)), str(ca_file))
        if ca_file else None,
        ca_data=base64.b64decode(ca_data) if ca_data else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")))


def client_certificate_pem(path: str) -> bytes | None:
    """The PEM of the client certificate ``path``'s current user authenticates with, if any."""
    data = read_kubeconfig(path)
    user = _current_user(data)
    inline = user.get("client-certificate-data")
    if inline:
        return base64.b64decode(inline)
    cert_path = user.get("client-certificate")
    if not cert_path:
        return None
    full = os.path.join(os.path.dirname(os.path.abspath(path)), str(cert_path))
    try:
        with open(full, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def write_kubeconfig(path: str, *, server: str, ca_file: str | None, ca_data: bytes | None,
                     insecure: bool, cert_path: str, key_path: str) -> None:
    """Write a kubeconfig that authenticates with a client certificate file (bootstrap output).

    The layout follows upstream's ``writeKubeconfigFromBootstrapping``:
    ``default-cluster`` / ``default-auth`` / ``default-context``, the CA by
    path when the bootstrap kubeconfig had one and inline otherwise.
    """
    cluster: dict[str, Any] = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    if ca_file:
        cluster["certificate-authority"] = ca_file
    elif ca_data:
        cluster["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "users": [{"name": "default-auth",
                   "user": {"client-certificate": cert_path, "client-key": key_path}}],
        "contexts": [{"name": "default-context",
                      "context": {"cluster": "default-cluster", "user": "default-auth",
                                  "namespace": "default"}}],
        "current-context": "default-context",
        "preferences": {},
    }
    text = yaml.safe_dump(document, default_flow_style=False, sort_keys=False)
    # 0600: the file names the kubelet's private key.
    write_file_atomically(path, text.encode("utf-8"), mode=0o600, make_parents=True)


__all__ = [
    "ClusterInfo",
    "Credentials",
    "KubeconfigError",
    "RestConfig",
    "client_certificate_pem",
    "cluster_info",
    "load_rest_config",
    "read_kubeconfig",
    "write_kubeconfig",
]
