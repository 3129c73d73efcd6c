"""Which configuration fields pykubelet acts on, so start-up can say which ones it ignores.

pykubelet accepts every v1beta1 field (so real kubelet configs load unchanged) but only
implements part of the kubelet. Start-up logs the fields a user set that nothing reads,
once, instead of silently pretending to honour them, and ``--help`` marks their flags.

``ACTED_ON_FIELDS`` is written out by hand rather than derived from the source, and
``tests/unit/test_config_support.py`` keeps it true: it parses ``pykubelet/`` (outside
this package) and fails when a field is read but missing here, or listed here but read
nowhere. A hand-written list because deriving it would parse the whole package at
every start-up, ``--help`` included, and because some entries need a judgement the
scan cannot make; those are the two documented exceptions below, which the test knows.
The list is top-level only: a field counts as acted on if any part of it is read
(of ``logging`` only ``verbosity`` is, for ``-v``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from pykubelet.config.defaults import default_configuration
from pykubelet.config.types import KubeletConfiguration, config_fields

ACTED_ON_FIELDS: Final[frozenset[str]] = frozenset({
    "kind",
    "apiVersion",
    "address",
    "readOnlyPort",
    "healthzBindAddress",
    "healthzPort",
    "staticPodPath",
    "staticPodURL",
    "staticPodURLHeader",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "syncFrequency",
    "runtimeRequestTimeout",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "registryPullQPS",
    "registryBurst",
    "podLogsDir",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "maxPods",
    "clusterDNS",
    "clusterDomain",
    "resolvConf",
    "logging",
    # Cluster mode: the API clients, node status and lease, the client certificate.
    "kubeAPIQPS",
    "kubeAPIBurst",
    "eventRecordQPS",
    "eventBurst",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "nodeStatusMaxImages",
    "registerNode",
    "registerWithTaints",
    "providerID",
    "enableControllerAttachDetach",
    "localStorageCapacityIsolation",
    "rotateCertificates",
    "serverTLSBootstrap",
    # The kubelet API (pykubelet.server).
    "enableServer",
    "port",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "authentication",
    "authorization",
    "enableDebuggingHandlers",
    "enableSystemLogHandler",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    # Resource management: cgroups, node allocatable, eviction, GC, log rotation.
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "enforceNodeAllocatable",
    "systemReserved",
    "kubeReserved",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "podPidsLimit",
    "cpuCFSQuota",
    "seccompDefault",
    "cpuCFSQuotaPeriod",
    "failCgroupV1",
    # Node hardening: the kernel tunables the kubelet needs, the iptables utility chains.
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "evictionPressureTransitionPeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "mergeDefaultEvictionSettings",  # see ACTED_ON_BY_DEFAULTING
    # Pods: capacity, admission, ConfigMap/Secret volumes and env, feature gates.
    "podsPerCore",
    "allowedUnsafeSysctls",
    "configMapAndSecretChangeDetectionStrategy",
    "volumeStatsAggPeriod",
    "featureGates",
    # The CPU manager (pykubelet/cm/cpumanager): policies none and static.
    "cpuManagerPolicy",
    "reservedSystemCPUs",
    "cpuManagerReconcilePeriod",
    # The topology manager (pykubelet/cm/topologymanager): every policy and scope; its
    # policy options are not acted on.
    "topologyManagerPolicy",
    "topologyManagerScope",
    "memoryManagerPolicy",  # see ACTED_ON_ONLY_FOR
})

# Acted on for these values only: any other value (accepted by validation) is reported.
# memoryManagerPolicy None is upstream's memory manager that does nothing; Static would
# pin memory and hugepages to NUMA nodes, which pykubelet does not do.
ACTED_ON_ONLY_FOR: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    "memoryManagerPolicy": frozenset({"None"}),
})

# Acted on although no code outside ``pykubelet.config`` reads them: defaulting applies
# them to a field that is read (``evictionHard`` gets the defaults it does not set).
ACTED_ON_BY_DEFAULTING: Final[frozenset[str]] = frozenset({"mergeDefaultEvictionSettings"})

# Zero switches these off, which is what pykubelet does with them anyway: a file that
# sets them to zero (kubeadm 1.20's config.yaml does) asks for nothing left undone.
# (kubeadm's streamingConnectionIdleTimeout: 0s is not among them: defaulting makes it 4h.)
OFF_WHEN_ZERO: Final[frozenset[str]] = frozenset({
    "shutdownGracePeriod", "shutdownGracePeriodCriticalPods",
})

# Read, but not honoured, so not acted on: the API clients speak JSON whatever
# ``contentType`` asks for, and only log that they do.
READ_BUT_NOT_ACTED_ON: Final[frozenset[str]] = frozenset({"contentType"})


def is_acted_on(field: str, config: KubeletConfiguration | None = None) -> bool:
    """Whether pykubelet implements a top-level field (camelCase) or the fields under it.

    With ``config``, a field acted on for some values only (``ACTED_ON_ONLY_FOR``)
    counts as acted on when ``config`` has one of them; without, it does.
    """
    top = field.split(".", 1)[0]
    if top not in ACTED_ON_FIELDS:
        return False
    values = ACTED_ON_ONLY_FOR.get(top)
    if values is None or config is None:
        return True
    return _value_of(config, top) in values


def _value_of(config: KubeletConfiguration, field: str) -> object:
    return next(getattr(config, f.name) for f, spec in config_fields(KubeletConfiguration)
                if spec.json == field)


def _differs_from_default(config: KubeletConfiguration) -> set[str]:
    defaults = default_configuration()
    return {spec.json for f, spec in config_fields(KubeletConfiguration)
            if getattr(config, f.name) != getattr(defaults, f.name)}


def fields_not_acted_on(source: Iterable[str] | KubeletConfiguration,
                        config: KubeletConfiguration | None = None) -> list[str]:
    """The set fields (camelCase) that pykubelet does not implement, sorted.

    Pass the top-level keys of the config file (and the configuration they set, so
    that fields acted on for some values only are judged by their value), or a
    configuration, in which case every field whose value differs from the v1beta1
    default counts as set.
    """
    keys: set[str]
    if isinstance(source, KubeletConfiguration):
        keys, config = _differs_from_default(source), source
    else:
        keys = set(source)
    if config is not None:
        keys = {key for key in keys if not _switched_off(key, config)}
    return sorted(key for key in keys if not is_acted_on(key, config))


def _switched_off(field: str, config: KubeletConfiguration) -> bool:
    return field in OFF_WHEN_ZERO and not _value_of(config, field)
