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
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykubelet.cri import ImageService, RuntimeService
from pykubelet.events import EventRecorder


class OSInterface(Protocol):
    """The node file-system calls the kubelet makes (upstream ``kubecontainer.OSInterface``)."""

    def makedirs(self, path: str, mode: int) -> None: ...


class RealOS:
    """The node's own file system."""

    def makedirs(self, path: str, mode: int) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)


@dataclass
class TLSOptions:
    """Serving certificate and client-CA settings for the kubelet API (filled by its issue)."""

    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    min_version: str = ""
    cipher_suites: list[str] = field(default_factory=list)


@dataclass
class Dependencies:
    """Everything ``new_main_kubelet`` is handed; None means "not in this mode"."""

    runtime_service: RuntimeService
    image_service: ImageService
    recorder: EventRecorder
    os_interface: OSInterface = field(default_factory=RealOS)
    # API clients (kubernetes_asyncio ApiClient); all None in standalone mode.
    kube_client: Any = None
    heartbeat_client: Any = None
    event_client: Any = None
    tls_options: TLSOptions | None = None

    @property
    def standalone(self) -> bool:
        """No API server: static pods only, no node status, events only logged."""
        return self.kube_client is None


__all__ = ["Dependencies", "OSInterface", "RealOS", "TLSOptions"]
