"""The ``KubeletConfiguration`` (kubelet.config.k8s.io/v1beta1) as typed dataclasses.

Each attribute is declared once, with ``cfg(...)``: its camelCase JSON name, its
v1beta1 default (the dataclass default), whether Go holds it behind a pointer (so an
explicit zero in a file is kept instead of being defaulted), and the command-line flag
that upstream binds to it. The codec, defaulting, the flag parser and the printers all
walk these declarations, so the schema lives in this file only.

Field set and defaults follow upstream ``staging/src/k8s.io/kubelet/config/v1beta1/types.go``
and ``pkg/kubelet/apis/config/v1beta1/defaults.go`` at Kubernetes v1.35.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import typing
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pykubelet.config.units import Duration

API_GROUP: Final = "kubelet.config.k8s.io"
API_VERSION: Final = "kubelet.config.k8s.io/v1beta1"
KIND: Final = "KubeletConfiguration"


class FlagStyle(enum.Enum):
    """How a flag's text becomes the field value, mirroring the pflag value types upstream uses."""

    SCALAR = "scalar"  # bool, int, float, string or duration, from the field's type
    IP = "ip"  # a string that must be an IP address
    CSV = "csv"  # string slice: first use replaces, later uses append
    MAP = "map"  # k=v,k2=v2: first use replaces, later uses merge
    MAP_NO_SPLIT = "map-no-split"  # one k=v per use, commas belong to the value
    LANGLE_MAP = "langle-map"  # signal<value,signal2<value2 (eviction thresholds)
    COLON_MULTIMAP = "colon-multimap"  # Header:value,Header:value2 (manifest URL headers)
    FEATURE_GATES = "feature-gates"  # A=true,B=false, merged over the file's gates
    TAINTS = "taints"  # key=value:Effect,...
    RESERVED_MEMORY = "reserved-memory"  # 0:memory=1Gi,hugepages-1Gi=2Gi;1:memory=1Gi
    VMODULE = "vmodule"  # pattern=N,pattern2=M


@dataclass(frozen=True)
class FieldSpec:
    """Everything the codec, defaulting and flags need to know about one field."""

    json: str
    pointer: bool = False
    omitempty: bool = True
    flag: str | None = None
    flag_style: FlagStyle = FlagStyle.SCALAR
    flag_deprecated: bool = True
    help: str = ""
    int_bits: int = 32
    unsigned: bool = False
    accepts_int_nanoseconds: bool = False


_SPEC_KEY: Final = "pykubelet.config"
_T = TypeVar("_T")


def cfg(
    json: str,
    *,
    default: Any,
    pointer: bool = False,
    omitempty: bool = True,
    flag: str | None = None,
    flag_style: FlagStyle = FlagStyle.SCALAR,
    flag_deprecated: bool = True,
    help: str = "",
    int_bits: int = 32,
    unsigned: bool = False,
    accepts_int_nanoseconds: bool = False,
) -> Any:
    """Declare a configuration field; ``default`` is its value after v1beta1 defaulting."""
    spec = FieldSpec(
        json,
        pointer,
        omitempty,
        flag,
        flag_style,
        flag_deprecated,
        help,
        int_bits,
        unsigned,
        accepts_int_nanoseconds,
    )
    metadata = {_SPEC_KEY: spec}
    if isinstance(default, list | dict) or dataclasses.is_dataclass(default):
        template = default
        return dataclasses.field(default_factory=lambda: copy.deepcopy(template), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@typing.dataclass_transform(field_specifiers=(cfg,))
def config_struct(cls: type[_T]) -> type[_T]:
    """Make ``cls`` a configuration dataclass whose fields are declared with ``cfg``."""
    return dataclasses.dataclass(cls)


def field_spec(f: dataclasses.Field[Any]) -> FieldSpec:
    spec = f.metadata.get(_SPEC_KEY)
    if not isinstance(spec, FieldSpec):
        raise TypeError(f"field {f.name} was not declared with cfg()")
    return spec


@config_struct
class KubeletX509Authentication:
    client_ca_file: str = cfg(
        "clientCAFile",
        default="",
        flag="client-ca-file",
        help="If set, requests presenting a client certificate signed by one "
        "of these authorities are authenticated by its CommonName.",
    )


@config_struct
class KubeletWebhookAuthentication:
    enabled: bool = cfg(
        "enabled",
        default=True,
        pointer=True,
        flag="authentication-token-webhook",
        help="Use the TokenReview API to authenticate bearer tokens.",
    )
    cache_ttl: Duration = cfg(
        "cacheTTL",
        default=Duration.of(minutes=2),
        flag="authentication-token-webhook-cache-ttl",
        help="How long to cache webhook token authenticator responses.",
    )


@config_struct
class KubeletAnonymousAuthentication:
    enabled: bool = cfg(
        "enabled",
        default=False,
        pointer=True,
        flag="anonymous-auth",
        help="Treat requests no other method authenticates as system:anonymous.",
    )


@config_struct
class KubeletAuthentication:
    x509: KubeletX509Authentication = cfg(
        "x509", default=KubeletX509Authentication(), omitempty=False
    )
    webhook: KubeletWebhookAuthentication = cfg(
        "webhook", default=KubeletWebhookAuthentication(), omitempty=False
    )
    anonymous: KubeletAnonymousAuthentication = cfg(
        "anonymous", default=KubeletAnonymousAuthentication(), omitempty=False
    )


@config_struct
class KubeletWebhookAuthorization:
    cache_authorized_ttl: Duration = cfg(
        "cacheAuthorizedTTL",
        default=Duration.of(minutes=5),
        flag="authorization-webhook-cache-authorized-ttl",
        help="How long to cache 'authorized' responses from the webhook authorizer.",
    )
    cache_unauthorized_ttl: Duration = cfg(
        "cacheUnauthorizedTTL",
        default=Duration.of(seconds=30),
        flag="authorization-webhook-cache-unauthorized-ttl",
        help="How long to cache 'unauthorized' responses from the webhook authorizer.",
    )


@config_struct
class KubeletAuthorization:
    mode: str = cfg(
        "mode",
        default="Webhook",
        flag="authorization-mode",
        help="Authorization mode for the kubelet server: AlwaysAllow or Webhook.",
    )
    webhook: KubeletWebhookAuthorization = cfg(
        "webhook", default=KubeletWebhookAuthorization(), omitempty=False
    )


@config_struct
class MemorySwapConfiguration:
    swap_behavior: str = cfg("swapBehavior", default="")


@config_struct
class CrashLoopBackOffConfig:
    max_container_restart_period: Duration | None = cfg(
        "maxContainerRestartPeriod", default=None, pointer=True
    )


@config_struct
class VModuleItem:
    file_pattern: str = cfg("filePattern", default="", omitempty=False)
    verbosity: int = cfg("verbosity", default=0, omitempty=False, unsigned=True)


@config_struct
class LoggingConfiguration:
    format: str = cfg(
        "format", default="text", flag="logging-format", help="Log format: text or json."
    )
    flush_frequency: Duration = cfg(
        "flushFrequency",
        default=Duration.of(seconds=5),
        omitempty=False,
        flag="log-flush-frequency",
        flag_deprecated=False,
        accepts_int_nanoseconds=True,
        help="Maximum number of seconds between log flushes.",
    )
    verbosity: int = cfg(
        "verbosity",
        default=0,
        omitempty=False,
        unsigned=True,
        flag="v",
        flag_deprecated=False,
        help="Number for the log level verbosity.",
    )
    vmodule: list[VModuleItem] = cfg(
        "vmodule",
        default=[],
        flag="vmodule",
        flag_style=FlagStyle.VMODULE,
        flag_deprecated=False,
        help="Comma-separated pattern=N settings for file-filtered logging.",
    )
    options: dict[str, Any] = cfg("options", default={})


@config_struct
class TracingConfiguration:
    endpoint: str | None = cfg("endpoint", default=None, pointer=True)
    sampling_rate_per_million: int | None = cfg(
        "samplingRatePerMillion", default=None, pointer=True
    )


@config_struct
class UserNamespaces:
    ids_per_pod: int | None = cfg("idsPerPod", default=None, pointer=True, int_bits=64)


@config_struct
class ShutdownGracePeriodByPodPriority:
    priority: int = cfg("priority", default=0, omitempty=False)
    shutdown_grace_period_seconds: int = cfg(
        "shutdownGracePeriodSeconds", default=0, omitempty=False, int_bits=64
    )


@config_struct
class MemoryReservation:
    numa_node: int = cfg("numaNode", default=0, omitempty=False)
    limits: dict[str, str] = cfg("limits", default={}, omitempty=False)


@config_struct
class Taint:
    key: str = cfg("key", default="", omitempty=False)
    value: str = cfg("value", default="")
    effect: str = cfg("effect", default="", omitempty=False)
    time_added: str | None = cfg("timeAdded", default=None, pointer=True)


DEFAULT_EVICTION_HARD: Final[dict[str, str]] = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}


@config_struct
class KubeletConfiguration:
    """kubelet.config.k8s.io/v1beta1 KubeletConfiguration, with every default filled in."""

    enable_server: bool = cfg(
        "enableServer",
        default=True,
        pointer=True,
        flag="enable-server",
        help="Enable the kubelet's server.",
    )
    static_pod_path: str = cfg(
        "staticPodPath",
        default="",
        flag="pod-manifest-path",
        help="Directory of static pod files to run, or a single static pod "
        "file. Files starting with dots are ignored.",
    )
    pod_logs_dir: str = cfg("podLogsDir", default="/var/log/pods")
    sync_frequency: Duration = cfg(
        "syncFrequency",
        default=Duration.of(minutes=1),
        flag="sync-frequency",
        help="Max period between synchronizing running containers and config.",
    )
    file_check_frequency: Duration = cfg(
        "fileCheckFrequency",
        default=Duration.of(seconds=20),
        flag="file-check-frequency",
        help="Duration between checking config files for new data.",
    )
    http_check_frequency: Duration = cfg(
        "httpCheckFrequency",
        default=Duration.of(seconds=20),
        flag="http-check-frequency",
        help="Duration between checking http for new data.",
    )
    static_pod_url: str = cfg(
        "staticPodURL",
        default="",
        flag="manifest-url",
        help="URL for accessing additional pod specifications to run.",
    )
    static_pod_url_header: dict[str, list[str]] = cfg(
        "staticPodURLHeader",
        default={},
        flag="manifest-url-header",
        flag_style=FlagStyle.COLON_MULTIMAP,
        help="Comma-separated Header:value pairs sent with --manifest-url requests; repeatable.",
    )
    address: str = cfg(
        "address",
        default="0.0.0.0",
        flag="address",
        flag_style=FlagStyle.IP,
        help="IP address for the kubelet to serve on (0.0.0.0 or :: for all).",
    )
    port: int = cfg("port", default=10250, flag="port", help="Port for the kubelet to serve on.")
    read_only_port: int = cfg(
        "readOnlyPort",
        default=0,
        flag="read-only-port",
        help="Read-only port with no authentication/authorization (0 disables).",
    )
    tls_cert_file: str = cfg(
        "tlsCertFile", default="", flag="tls-cert-file", help="x509 certificate for HTTPS."
    )
    tls_private_key_file: str = cfg(
        "tlsPrivateKeyFile",
        default="",
        flag="tls-private-key-file",
        help="x509 private key matching --tls-cert-file.",
    )
    tls_cipher_suites: list[str] = cfg(
        "tlsCipherSuites",
        default=[],
        flag="tls-cipher-suites",
        flag_style=FlagStyle.CSV,
        help="Comma-separated list of cipher suites for the server.",
    )
    tls_curve_preferences: list[int] = cfg("tlsCurvePreferences", default=[])
    tls_min_version: str = cfg(
        "tlsMinVersion", default="", flag="tls-min-version", help="Minimum TLS version supported."
    )
    rotate_certificates: bool = cfg(
        "rotateCertificates",
        default=False,
        flag="rotate-certificates",
        help="Auto rotate the kubelet client certificates.",
    )
    server_tls_bootstrap: bool = cfg(
        "serverTLSBootstrap",
        default=False,
        flag="rotate-server-certificates",
        help="Request and rotate serving certificates from the API server.",
    )
    authentication: KubeletAuthentication = cfg(
        "authentication", default=KubeletAuthentication(), omitempty=False
    )
    authorization: KubeletAuthorization = cfg(
        "authorization", default=KubeletAuthorization(), omitempty=False
    )
    registry_pull_qps: int = cfg(
        "registryPullQPS",
        default=5,
        pointer=True,
        flag="registry-qps",
        help="If > 0, limit registry pull QPS to this value; 0 is unlimited.",
    )
    registry_burst: int = cfg(
        "registryBurst", default=10, flag="registry-burst", help="Maximum size of bursty pulls."
    )
    image_pull_credentials_verification_policy: str = cfg(
        "imagePullCredentialsVerificationPolicy", default="NeverVerifyPreloadedImages"
    )
    preloaded_images_verification_allowlist: list[str] = cfg(
        "preloadedImagesVerificationAllowlist", default=[]
    )
    event_record_qps: int = cfg(
        "eventRecordQPS",
        default=50,
        pointer=True,
        flag="event-qps",
        help="QPS to limit event creations.",
    )
    event_burst: int = cfg(
        "eventBurst", default=100, flag="event-burst", help="Maximum size of bursty event records."
    )
    enable_debugging_handlers: bool = cfg(
        "enableDebuggingHandlers",
        default=True,
        pointer=True,
        flag="enable-debugging-handlers",
        help="Enable server endpoints for logs, exec, attach and port-forward.",
    )
    enable_contention_profiling: bool = cfg(
        "enableContentionProfiling",
        default=False,
        flag="contention-profiling",
        help="Enable block profiling.",
    )
    healthz_port: int = cfg(
        "healthzPort",
        default=10248,
        pointer=True,
        flag="healthz-port",
        help="Port of the localhost healthz endpoint (0 disables).",
    )
    healthz_bind_address: str = cfg(
        "healthzBindAddress",
        default="127.0.0.1",
        flag="healthz-bind-address",
        flag_style=FlagStyle.IP,
        help="IP address for the healthz server to serve on.",
    )
    oom_score_adj: int = cfg(
        "oomScoreAdj",
        default=-999,
        pointer=True,
        flag="oom-score-adj",
        help="oom-score-adj for the kubelet process, in [-1000, 1000].",
    )
    cluster_domain: str = cfg(
        "clusterDomain",
        default="",
        flag="cluster-domain",
        help="Cluster DNS domain added to containers' search list.",
    )
    cluster_dns: list[str] = cfg(
        "clusterDNS",
        default=[],
        flag="cluster-dns",
        flag_style=FlagStyle.CSV,
        help="Comma-separated list of cluster DNS server IP addresses.",
    )
    streaming_connection_idle_timeout: Duration = cfg(
        "streamingConnectionIdleTimeout",
        default=Duration.of(hours=4),
        flag="streaming-connection-idle-timeout",
        help="Maximum idle time of a streaming connection.",
    )
    node_status_update_frequency: Duration = cfg(
        "nodeStatusUpdateFrequency",
        default=Duration.of(seconds=10),
        flag="node-status-update-frequency",
        help="How often the kubelet computes node status.",
    )
    node_status_report_frequency: Duration = cfg(
        "nodeStatusReportFrequency", default=Duration.of(minutes=5)
    )
    node_lease_duration_seconds: int = cfg("nodeLeaseDurationSeconds", default=40)
    image_minimum_gc_age: Duration = cfg(
        "imageMinimumGCAge",
        default=Duration.of(minutes=2),
        flag="minimum-image-ttl-duration",
        help="Minimum age of an unused image before it is garbage collected.",
    )
    image_maximum_gc_age: Duration = cfg("imageMaximumGCAge", default=Duration(0))
    image_gc_high_threshold_percent: int = cfg(
        "imageGCHighThresholdPercent",
        default=85,
        pointer=True,
        flag="image-gc-high-threshold",
        help="Disk usage percent that always triggers image GC.",
    )
    image_gc_low_threshold_percent: int = cfg(
        "imageGCLowThresholdPercent",
        default=80,
        pointer=True,
        flag="image-gc-low-threshold",
        help="Disk usage percent image GC frees down to.",
    )
    volume_stats_agg_period: Duration = cfg(
        "volumeStatsAggPeriod",
        default=Duration.of(minutes=1),
        flag="volume-stats-agg-period",
        help="Interval for calculating volume disk usage.",
    )
    kubelet_cgroups: str = cfg(
        "kubeletCgroups",
        default="",
        flag="kubelet-cgroups",
        help="Absolute name of cgroups to run the kubelet in.",
    )
    system_cgroups: str = cfg(
        "systemCgroups",
        default="",
        flag="system-cgroups",
        help="Absolute name of cgroups for non-kernel processes.",
    )
    cgroup_root: str = cfg(
        "cgroupRoot", default="", flag="cgroup-root", help="Optional root cgroup to use for pods."
    )
    cgroups_per_qos: bool = cfg(
        "cgroupsPerQOS",
        default=True,
        pointer=True,
        flag="cgroups-per-qos",
        help="Create the QoS cgroup hierarchy.",
    )
    cgroup_driver: str = cfg(
        "cgroupDriver",
        default="cgroupfs",
        flag="cgroup-driver",
        help="Driver used to manipulate cgroups: cgroupfs or systemd.",
    )
    cpu_manager_policy: str = cfg(
        "cpuManagerPolicy",
        default="none",
        flag="cpu-manager-policy",
        help="CPU Manager policy: none or static.",
    )
    single_process_oom_kill: bool | None = cfg("singleProcessOOMKill", default=None, pointer=True)
    cpu_manager_policy_options: dict[str, str] = cfg(
        "cpuManagerPolicyOptions",
        default={},
        flag="cpu-manager-policy-options",
        flag_style=FlagStyle.MAP_NO_SPLIT,
        help="key=value CPU Manager policy options.",
    )
    cpu_manager_reconcile_period: Duration = cfg(
        "cpuManagerReconcilePeriod",
        default=Duration.of(seconds=10),
        flag="cpu-manager-reconcile-period",
        help="CPU Manager reconciliation period.",
    )
    dra_manager_reconcile_period: Duration = cfg(
        "draManagerReconcilePeriod", default=Duration.of(seconds=60)
    )
    memory_manager_policy: str = cfg(
        "memoryManagerPolicy",
        default="None",
        flag="memory-manager-policy",
        help="Memory Manager policy: None or Static.",
    )
    topology_manager_policy: str = cfg(
        "topologyManagerPolicy",
        default="none",
        flag="topology-manager-policy",
        help="Topology Manager policy: none, best-effort, restricted or single-numa-node.",
    )
    topology_manager_scope: str = cfg(
        "topologyManagerScope",
        default="container",
        flag="topology-manager-scope",
        help="Topology hint scope: container or pod.",
    )
    topology_manager_policy_options: dict[str, str] = cfg(
        "topologyManagerPolicyOptions",
        default={},
        flag="topology-manager-policy-options",
        flag_style=FlagStyle.MAP_NO_SPLIT,
        help="key=value Topology Manager policy options.",
    )
    qos_reserved: dict[str, str] = cfg(
        "qosReserved",
        default={},
        flag="qos-reserved",
        flag_style=FlagStyle.MAP,
        help="ResourceName=Percentage reservations per QoS level.",
    )
    runtime_request_timeout: Duration = cfg(
        "runtimeRequestTimeout",
        default=Duration.of(minutes=2),
        flag="runtime-request-timeout",
        help="Timeout of runtime requests except long-running ones.",
    )
    hairpin_mode: str = cfg(
        "hairpinMode",
        default="promiscuous-bridge",
        flag="hairpin-mode",
        help="Hairpin NAT setup: promiscuous-bridge, hairpin-veth or none.",
    )
    max_pods: int = cfg(
        "maxPods", default=110, flag="max-pods", help="Number of pods that can run on this kubelet."
    )
    pod_cidr: str = cfg(
        "podCIDR",
        default="",
        flag="pod-cidr",
        help="CIDR for pod IP addresses, only used in standalone mode.",
    )
    pod_pids_limit: int = cfg(
        "podPidsLimit",
        default=-1,
        pointer=True,
        int_bits=64,
        flag="pod-max-pids",
        help="Maximum number of processes per pod (-1: node allocatable).",
    )
    resolv_conf: str = cfg(
        "resolvConf",
        default="/etc/resolv.conf",
        pointer=True,
        flag="resolv-conf",
        help="Resolver configuration file used as the basis for container DNS.",
    )
    run_once: bool = cfg(
        "runOnce",
        default=False,
        flag="runonce",
        help="Exit after spawning pods from static pod files or URLs.",
    )
    cpu_cfs_quota: bool = cfg(
        "cpuCFSQuota",
        default=True,
        pointer=True,
        flag="cpu-cfs-quota",
        help="Enforce CPU CFS quota for containers with CPU limits.",
    )
    cpu_cfs_quota_period: Duration = cfg(
        "cpuCFSQuotaPeriod",
        default=Duration.of(milliseconds=100),
        pointer=True,
        flag="cpu-cfs-quota-period",
        help="CPU CFS quota period, cpu.cfs_period_us.",
    )
    node_status_max_images: int = cfg(
        "nodeStatusMaxImages",
        default=50,
        pointer=True,
        flag="node-status-max-images",
        help="Maximum number of images in Node.Status.Images (-1: no cap).",
    )
    max_open_files: int = cfg(
        "maxOpenFiles",
        default=1000000,
        int_bits=64,
        flag="max-open-files",
        help="Number of files the kubelet process can open.",
    )
    content_type: str = cfg(
        "contentType",
        default="application/vnd.kubernetes.protobuf",
        flag="kube-api-content-type",
        help="Content type of requests sent to the API server.",
    )
    kube_api_qps: int = cfg(
        "kubeAPIQPS",
        default=50,
        pointer=True,
        flag="kube-api-qps",
        help="QPS to use while talking with the API server.",
    )
    kube_api_burst: int = cfg(
        "kubeAPIBurst",
        default=100,
        flag="kube-api-burst",
        help="Burst to use while talking with the API server.",
    )
    serialize_image_pulls: bool = cfg(
        "serializeImagePulls",
        default=True,
        pointer=True,
        flag="serialize-image-pulls",
        help="Pull images one at a time.",
    )
    max_parallel_image_pulls: int | None = cfg("maxParallelImagePulls", default=None, pointer=True)
    eviction_hard: dict[str, str] = cfg(
        "evictionHard",
        default=DEFAULT_EVICTION_HARD,
        flag="eviction-hard",
        flag_style=FlagStyle.LANGLE_MAP,
        help="Eviction thresholds (e.g. memory.available<1Gi) that trigger a pod eviction.",
    )
    eviction_soft: dict[str, str] = cfg(
        "evictionSoft",
        default={},
        flag="eviction-soft",
        flag_style=FlagStyle.LANGLE_MAP,
        help="Eviction thresholds that trigger an eviction once held for their grace period.",
    )
    eviction_soft_grace_period: dict[str, str] = cfg(
        "evictionSoftGracePeriod",
        default={},
        flag="eviction-soft-grace-period",
        flag_style=FlagStyle.MAP,
        help="Grace periods (e.g. memory.available=1m30s) for the soft thresholds.",
    )
    eviction_pressure_transition_period: Duration = cfg(
        "evictionPressureTransitionPeriod",
        default=Duration.of(minutes=5),
        flag="eviction-pressure-transition-period",
        help="Wait before transitioning out of an eviction pressure condition.",
    )
    eviction_max_pod_grace_period: int = cfg(
        "evictionMaxPodGracePeriod",
        default=0,
        flag="eviction-max-pod-grace-period",
        help="Maximum grace period (s) for soft evictions.",
    )
    eviction_minimum_reclaim: dict[str, str] = cfg(
        "evictionMinimumReclaim",
        default={},
        flag="eviction-minimum-reclaim",
        flag_style=FlagStyle.MAP,
        help="Minimum reclaims (e.g. imagefs.available=2Gi) per eviction.",
    )
    merge_default_eviction_settings: bool = cfg(
        "mergeDefaultEvictionSettings", default=False, pointer=True
    )
    pods_per_core: int = cfg(
        "podsPerCore",
        default=0,
        flag="pods-per-core",
        help="Number of pods per core (0 disables the limit).",
    )
    enable_controller_attach_detach: bool = cfg(
        "enableControllerAttachDetach",
        default=True,
        pointer=True,
        flag="enable-controller-attach-detach",
        help="Let the attach/detach controller manage volumes of this node.",
    )
    protect_kernel_defaults: bool = cfg(
        "protectKernelDefaults",
        default=False,
        flag="protect-kernel-defaults",
        help="Error if kernel tunables differ from kubelet defaults.",
    )
    make_iptables_util_chains: bool = cfg(
        "makeIPTablesUtilChains",
        default=True,
        pointer=True,
        flag="make-iptables-util-chains",
        help="Ensure iptables utility rules are present.",
    )
    iptables_masquerade_bit: int = cfg(
        "iptablesMasqueradeBit",
        default=14,
        pointer=True,
        flag="iptables-masquerade-bit",
        help="Has no effect.",
    )
    iptables_drop_bit: int = cfg(
        "iptablesDropBit", default=15, pointer=True, flag="iptables-drop-bit", help="Has no effect."
    )
    feature_gates: dict[str, bool] = cfg(
        "featureGates",
        default={},
        flag="feature-gates",
        flag_style=FlagStyle.FEATURE_GATES,
        help="key=value pairs that enable or disable features.",
    )
    fail_swap_on: bool = cfg(
        "failSwapOn",
        default=True,
        pointer=True,
        flag="fail-swap-on",
        help="Fail to start if swap is enabled on the node.",
    )
    memory_swap: MemorySwapConfiguration = cfg("memorySwap", default=MemorySwapConfiguration())
    container_log_max_size: str = cfg(
        "containerLogMaxSize",
        default="10Mi",
        flag="container-log-max-size",
        help="Maximum size (e.g. 10Mi) of a container log file before rotation.",
    )
    container_log_max_files: int = cfg(
        "containerLogMaxFiles",
        default=5,
        pointer=True,
        flag="container-log-max-files",
        help="Maximum number of log files per container (>= 2).",
    )
    container_log_max_workers: int = cfg("containerLogMaxWorkers", default=1, pointer=True)
    container_log_monitor_interval: Duration = cfg(
        "containerLogMonitorInterval", default=Duration.of(seconds=10), pointer=True
    )
    config_map_and_secret_change_detection_strategy: str = cfg(
        "configMapAndSecretChangeDetectionStrategy", default="Watch"
    )
    system_reserved: dict[str, str] = cfg(
        "systemReserved",
        default={},
        flag="system-reserved",
        flag_style=FlagStyle.MAP,
        help="ResourceName=Quantity reserved for non-Kubernetes components.",
    )
    kube_reserved: dict[str, str] = cfg(
        "kubeReserved",
        default={},
        flag="kube-reserved",
        flag_style=FlagStyle.MAP,
        help="ResourceName=Quantity reserved for Kubernetes components.",
    )
    reserved_system_cpus: str = cfg(
        "reservedSystemCPUs",
        default="",
        flag="reserved-cpus",
        help="CPUs or CPU ranges reserved for system and Kubernetes.",
    )
    show_hidden_metrics_for_version: str = cfg("showHiddenMetricsForVersion", default="")
    system_reserved_cgroup: str = cfg(
        "systemReservedCgroup",
        default="",
        flag="system-reserved-cgroup",
        help="Top level cgroup for --system-reserved.",
    )
    kube_reserved_cgroup: str = cfg(
        "kubeReservedCgroup",
        default="",
        flag="kube-reserved-cgroup",
        help="Top level cgroup for --kube-reserved.",
    )
    enforce_node_allocatable: list[str] = cfg(
        "enforceNodeAllocatable",
        default=["pods"],
        flag="enforce-node-allocatable",
        flag_style=FlagStyle.CSV,
        help="Node allocatable enforcement levels: none, pods, system-reserved, kube-reserved, ...",
    )
    allowed_unsafe_sysctls: list[str] = cfg(
        "allowedUnsafeSysctls",
        default=[],
        flag="allowed-unsafe-sysctls",
        flag_style=FlagStyle.CSV,
        help="Allowed unsafe sysctls or patterns ending in *.",
    )
    volume_plugin_dir: str = cfg(
        "volumePluginDir",
        default="/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
        flag="volume-plugin-dir",
        help="Directory to search for third party volume plugins.",
    )
    provider_id: str = cfg(
        "providerID",
        default="",
        flag="provider-id",
        flag_deprecated=False,
        help="Unique identifier of the node in a machine database.",
    )
    kernel_memcg_notification: bool = cfg(
        "kernelMemcgNotification",
        default=False,
        flag="kernel-memcg-notification",
        help="Use kernel memcg notifications for memory eviction thresholds.",
    )
    logging: LoggingConfiguration = cfg("logging", default=LoggingConfiguration())
    enable_system_log_handler: bool = cfg("enableSystemLogHandler", default=True, pointer=True)
    enable_system_log_query: bool = cfg("enableSystemLogQuery", default=False, pointer=True)
    shutdown_grace_period: Duration = cfg("shutdownGracePeriod", default=Duration(0))
    shutdown_grace_period_critical_pods: Duration = cfg(
        "shutdownGracePeriodCriticalPods", default=Duration(0)
    )
    shutdown_grace_period_by_pod_priority: list[ShutdownGracePeriodByPodPriority] = cfg(
        "shutdownGracePeriodByPodPriority", default=[]
    )
    crash_loop_back_off: CrashLoopBackOffConfig = cfg(
        "crashLoopBackOff", default=CrashLoopBackOffConfig(Duration.of(seconds=300))
    )
    reserved_memory: list[MemoryReservation] = cfg(
        "reservedMemory",
        default=[],
        flag="reserved-memory",
        flag_style=FlagStyle.RESERVED_MEMORY,
        help="Memory reservations per NUMA node, e.g. 0:memory=1Gi,hugepages-1M=2Gi.",
    )
    enable_profiling_handler: bool = cfg("enableProfilingHandler", default=True, pointer=True)
    enable_debug_flags_handler: bool = cfg("enableDebugFlagsHandler", default=True, pointer=True)
    seccomp_default: bool = cfg(
        "seccompDefault",
        default=False,
        pointer=True,
        flag="seccomp-default",
        help="Use RuntimeDefault as the default seccomp profile.",
    )
    memory_throttling_factor: float = cfg("memoryThrottlingFactor", default=0.9, pointer=True)
    memory_reservation_policy: str = cfg("memoryReservationPolicy", default="None")
    register_with_taints: list[Taint] = cfg(
        "registerWithTaints",
        default=[],
        flag="register-with-taints",
        flag_style=FlagStyle.TAINTS,
        help='Taints to register the node with ("<key>=<value>:<effect>", comma separated).',
    )
    register_node: bool = cfg(
        "registerNode",
        default=True,
        pointer=True,
        flag="register-node",
        help="Register the node with the API server.",
    )
    tracing: TracingConfiguration | None = cfg("tracing", default=None, pointer=True)
    local_storage_capacity_isolation: bool = cfg(
        "localStorageCapacityIsolation",
        default=True,
        pointer=True,
        flag="local-storage-capacity-isolation",
        help="Enable local ephemeral storage isolation.",
    )
    container_runtime_endpoint: str = cfg(
        "containerRuntimeEndpoint",
        default="unix:///run/containerd/containerd.sock",
        omitempty=False,
        flag="container-runtime-endpoint",
        help="Endpoint of the container runtime service.",
    )
    image_service_endpoint: str = cfg(
        "imageServiceEndpoint",
        default="",
        flag="image-service-endpoint",
        help="Endpoint of the image service (defaults to --container-runtime-endpoint).",
    )
    fail_cgroup_v1: bool = cfg(
        "failCgroupV1",
        default=True,
        pointer=True,
        flag="fail-cgroup-v1",
        help="Refuse to start on a cgroup v1 host.",
    )
    user_namespaces: UserNamespaces | None = cfg("userNamespaces", default=None, pointer=True)

    def effective_image_service_endpoint(self) -> str:
        """The image service endpoint, falling back to the runtime endpoint as upstream does."""
        return self.image_service_endpoint or self.container_runtime_endpoint


def is_config_struct(annotation: Any) -> bool:
    """True for the nested configuration dataclasses (``Duration`` is a value, not a struct)."""
    return (
        isinstance(annotation, type)
        and dataclasses.is_dataclass(annotation)
        and annotation is not Duration
    )


def config_fields(cls: type[Any]) -> list[tuple[dataclasses.Field[Any], FieldSpec]]:
    return [(f, field_spec(f)) for f in dataclasses.fields(cls)]
