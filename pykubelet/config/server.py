"""What the kubelet is started with: node-local flags and the effective configuration.

Upstream keeps ``KubeletFlags`` and ``KubeletServer`` in ``cmd/kubelet/app/options``,
but the core reads them too (root directory, node identity, kubeconfig paths).
They live here, below both, so that the command line (``pykubelet.cmd``) fills
them in and the kubelet core consumes them without ever importing the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from pykubelet.config.features import FeatureGates
from pykubelet.config.types import KubeletConfiguration
from pykubelet.config.units import Duration

DEFAULT_ROOT_DIR: Final = "/var/lib/kubelet"
DEFAULT_CERT_DIR: Final = "/var/lib/kubelet/pki"
# The one cloud provider a kubelet still accepts (besides none): a cloud controller
# manager outside the kubelet initializes the Node.
CLOUD_PROVIDER_EXTERNAL: Final = "external"


@dataclass
class KubeletFlags:
    """Node-local settings that only exist as flags (they are never shared between nodes)."""

    config: str = ""
    kubeconfig: str = ""
    bootstrap_kubeconfig: str = ""
    hostname_override: str = ""
    node_ip: str = ""
    root_dir: str = DEFAULT_ROOT_DIR
    cert_dir: str = DEFAULT_CERT_DIR
    cloud_provider: str = ""
    node_labels: dict[str, str] = field(default_factory=dict)
    lock_file: str = ""
    exit_on_lock_contention: bool = False
    image_credential_provider_config: str = ""
    image_credential_provider_bin_dir: str = ""
    pod_infra_container_image: str = ""
    minimum_container_ttl_duration: Duration = field(default_factory=Duration)
    maximum_dead_containers_per_container: int = 1
    maximum_dead_containers: int = -1
    print_config: bool = False
    # The effective --v: mirrors config.logging.verbosity once flags are applied.
    v: int = 0

    def node_ips(self) -> list[str]:
        return [ip.strip() for ip in self.node_ip.split(",") if ip.strip()]

    @property
    def external_cloud_provider(self) -> bool:
        """``--cloud-provider=external``: the one place the flag's value is interpreted.

        Start-up validation refuses any other non-empty value, so a kubelet that runs
        either has no cloud provider or leaves the Node's initialization to a cloud
        controller manager.
        """
        return self.cloud_provider == CLOUD_PROVIDER_EXTERNAL


@dataclass
class KubeletServer:
    """Everything start-up needs: the node-local flags and the effective configuration."""

    flags: KubeletFlags
    config: KubeletConfiguration
    # Top-level keys present in the --config file, for reporting fields not acted on.
    config_file_keys: set[str] = field(default_factory=set)
    # Names of the flags given on the command line (without dashes), for the same report.
    flags_given: set[str] = field(default_factory=set)

    def feature_gates(self) -> FeatureGates:
        """The effective feature gates (validated already, so this cannot fail)."""
        return FeatureGates(self.config.feature_gates)


__all__ = [
    "CLOUD_PROVIDER_EXTERNAL",
    "DEFAULT_CERT_DIR",
    "DEFAULT_ROOT_DIR",
    "KubeletFlags",
    "KubeletServer",
]
