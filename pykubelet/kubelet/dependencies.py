"""What the kubelet is given rather than builds (upstream ``kubelet.Dependencies``).

Upstream separates the kubelet's *configuration* (``KubeletServer``) from the
*objects* it talks through: API clients, the CRI services, the event
recorder, TLS material, OS seams. The command builds those in two steps, as
seeds 001 and 003 walk them: ``UnsecuredDependencies`` makes everything that
needs neither the network nor the node (here: CRI clients not yet connected,
the recorder, the OS seams), then ``Run`` fills in the API clients when a
kubeconfig is given. ``NewMainKubelet`` then only assembles.

Keeping them in one dataclass is also the test seam: a test builds a
``Dependencies`` with fakes at the edges and gets a real kubelet core.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykubelet.cri import ImageService, RuntimeService
from pykubelet.events import EventRecorder
from pykubelet.server.auth import KubeletAuth
from pykubelet.server.tls import TLSOptions


class OSInterface(Protocol):
    """The node file-system calls the kubelet makes (upstream ``kubecontainer.OSInterface``)."""

    def makedirs(self, path: str, mode: int) -> None: ...


class RealOS:
    """The node's own file system."""

    def makedirs(self, path: str, mode: int) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)


@dataclass
class Dependencies:
    """Everything ``new_main_kubelet`` is handed; None means "not in this mode"."""

    runtime_service: RuntimeService
    image_service: ImageService
    recorder: EventRecorder
    os_interface: OSInterface = field(default_factory=RealOS)
    # API clients (pykubelet.client.KubeletApiClient); all None in standalone mode.
    kube_client: Any = None
    heartbeat_client: Any = None
    event_client: Any = None
    # Upstream ``OnHeartbeatFailure``: drop the clients' connections after repeated
    # node status or lease failures, in case one is stuck.
    on_heartbeat_failure: Callable[[], None] | None = None
    # Renews the client certificate (``rotateCertificates``); run by ``Kubelet.run``.
    client_certificate_manager: Any = None
    # The kubelet API's serving certificate and TLS settings (``initialize_tls``),
    # and who may call it (``build_auth``); None when the server is off.
    tls_options: TLSOptions | None = None
    auth: KubeletAuth | None = None
    # Where the machine's facts are read (its /sys and /proc): the CPUs, their NUMA
    # nodes, memory, huge pages, the machine and boot ids.
    host_root: str = "/"  # another directory: tests only

    @property
    def standalone(self) -> bool:
        """No API server: static pods only, no node status, events only logged."""
        return self.kube_client is None


__all__ = ["Dependencies", "OSInterface", "RealOS"]
