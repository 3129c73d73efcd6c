"""pykubelet: a Kubernetes node agent written in Python.

The package is laid out like the Go kubelet, one subpackage per subsystem:

- ``cmd``: the command line (flags, ``--config`` loading, start-up), as ``cmd/kubelet/app``.
- ``config``: the ``KubeletConfiguration`` API type, its defaults and validation.
- ``cri``: the CRI v1 gRPC client for the container runtime.
- ``container``: the runtime-neutral model of pods and containers (``kubecontainer``).
- ``sources``: pod sources (static files, manifest URL) merged into pod updates.
- ``kuberuntime``: turns pod specs into CRI calls (sandboxes, containers, images, logs).
- ``pleg``: the pod lifecycle event generator that relists the runtime.
- ``podworkers``: one serialised worker per pod.
- ``status``: pod status computation and the status manager.
- ``server``: the HTTP endpoints (healthz, read-only ``/pods``).
- ``kubelet``: the composition root and the sync loop.
- ``client``: the API clients of cluster mode (kubeconfig, rate limits, a watched Node cache).
- ``certificate``: the client certificate: TLS bootstrapping and rotation.
- ``nodestatus``: registering the Node and keeping its status current.
- ``nodelease``: the node's heartbeat Lease.
"""

__version__ = "0.1.0"

# The generated API client's packages import all their 834 classes up front;
# the kubelet reads a few dozen. Deferring them saves about 30 MiB of resident
# memory and part of a second of start-up (pykubelet/util/lazyimport.py).
from pykubelet.util.lazyimport import defer_reexports as _defer_reexports

_defer_reexports(
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.models",
    "kubernetes_asyncio.client.api",
)
