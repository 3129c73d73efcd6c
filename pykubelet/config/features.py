"""Kubelet feature gates: the known gates, their defaults and stages, and how they are set.

Gates come from ``featureGates`` in the config file and ``--feature-gates=A=true,B=false``
on the command line. Upstream rejects unknown gate names and refuses to flip a gate that
is locked to its default (GA or removed-soon deprecated gates), so configs that a real
kubelet rejects are rejected here too. The table holds the kubelet-relevant gates with
their state in Kubernetes v1.35 (``pkg/features/kube_features.go`` versioned specs).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

FEATURE_GATES_VERSION: Final = "v1.35"


class Stage(enum.Enum):
    ALPHA = "ALPHA"
    BETA = "BETA"
    GA = "GA"
    DEPRECATED = "DEPRECATED"


@dataclass(frozen=True)
class FeatureSpec:
    default: bool
    stage: Stage
    locked: bool = False


def _alpha() -> FeatureSpec:
    return FeatureSpec(False, Stage.ALPHA)


def _beta(default: bool = True) -> FeatureSpec:
    return FeatureSpec(default, Stage.BETA)


def _ga() -> FeatureSpec:
    return FeatureSpec(True, Stage.GA, locked=True)


def _deprecated(default: bool = False, locked: bool = False) -> FeatureSpec:
    return FeatureSpec(default, Stage.DEPRECATED, locked)


KNOWN_FEATURES: Final[Mapping[str, FeatureSpec]] = {
    # Stored sorted so --help output and error hints are stable.
    "AllowDNSOnlyNodeCSR": _deprecated(),
    "AllowOverwriteTerminationGracePeriodSeconds": _deprecated(locked=True),
    "ChangeContainerStatusOnKubeletRestart": _deprecated(),
    "ClusterTrustBundle": _beta(False),
    "ClusterTrustBundleProjection": _beta(False),
    "ContainerCheckpoint": _beta(),
    "ContainerRestartRules": _beta(),
    "ContainerStopSignals": _alpha(),
    "CPUManagerPolicyAlphaOptions": _alpha(),
    "CPUManagerPolicyBetaOptions": _beta(),
    "CPUManagerPolicyOptions": _ga(),
    "CSIServiceAccountTokenSecrets": _beta(),
    "CSIVolumeHealth": _alpha(),
    "CustomCPUCFSQuotaPeriod": _alpha(),
    "DisableCPUQuotaWithExclusiveCPUs": _beta(),
    "DisableNodeKubeProxyVersion": _deprecated(True),
    "DynamicResourceAllocation": _ga(),
    "EnvFiles": _beta(),
    "EventedPLEG": _alpha(),
    "ExecProbeTimeout": _ga(),
    "GitRepoVolumeDriver": _deprecated(),
    "GracefulNodeShutdown": _beta(),
    "GracefulNodeShutdownBasedOnPodPriority": _beta(),
    "HostnameOverride": _beta(),
    "ImageMaximumGCAge": _ga(),
    "ImageVolume": _beta(),
    "ImageVolumeWithDigest": _alpha(),
    "InPlacePodLevelResourcesVerticalScaling": _alpha(),
    # Gone from v1.35 (GA and locked in v1.23-v1.24), kept so the flags kubeadm 1.20
    # writes for a dual-stack cluster still start the kubelet.
    "IPv6DualStack": _ga(),
    "InPlacePodVerticalScaling": _ga(),
    "InPlacePodVerticalScalingAllocatedStatus": _deprecated(),
    "InPlacePodVerticalScalingExclusiveCPUs": _alpha(),
    "InPlacePodVerticalScalingExclusiveMemory": _alpha(),
    "KubeletCgroupDriverFromCRI": _ga(),
    "KubeletCrashLoopBackOffMax": _beta(),
    "KubeletEnsureSecretPulledImages": _beta(),
    "KubeletFineGrainedAuthz": _beta(),
    "KubeletInUserNamespace": _alpha(),
    "KubeletPSI": _beta(),
    "KubeletPodResourcesDynamicResources": _beta(),
    "KubeletPodResourcesGet": _beta(),
    "KubeletPodResourcesListUseActivePods": _deprecated(True),
    "KubeletRegistrationGetOnExistsOnly": _deprecated(),
    "KubeletSeparateDiskGC": _beta(),
    "KubeletServiceAccountTokenForCredentialProviders": _beta(),
    "KubeletTracing": _ga(),
    "LocalStorageCapacityIsolationFSQuotaMonitoring": _beta(False),
    "MemoryManager": _ga(),
    "MemoryQoS": _alpha(),
    "NodeDeclaredFeatures": _alpha(),
    "NodeLogQuery": _beta(False),
    "NodeSwap": _ga(),
    "PodAndContainerStatsFromCRI": _alpha(),
    "PodCertificateRequest": _beta(False),
    "PodLevelResources": _beta(),
    "PodLifecycleSleepAction": _ga(),
    "PodLifecycleSleepActionAllowZero": _ga(),
    "PodLogsQuerySplitStreams": _alpha(),
    "PodObservedGenerationTracking": _ga(),
    "PodReadyToStartContainersCondition": _beta(),
    "PortForwardWebsockets": _beta(),
    "PreventStaticPodAPIReferences": _beta(),
    "ProcMountType": _beta(),
    "QOSReserved": _alpha(),
    "RecursiveReadOnlyMounts": _ga(),
    "ReduceDefaultCrashLoopBackOffDecay": _alpha(),
    "ReloadKubeletServerCertificateFile": _beta(),
    "ResourceHealthStatus": _alpha(),
    "RestartAllContainersOnContainerExits": _alpha(),
    "RotateKubeletServerCertificate": _beta(),
    "RuntimeClassInImageCriApi": _alpha(),
    "SELinuxChangePolicy": _beta(),
    "SELinuxMount": _beta(False),
    "SELinuxMountReadWriteOncePod": _beta(),
    "SidecarContainers": _ga(),
    "SupplementalGroupsPolicy": _ga(),
    "SystemdWatchdog": _ga(),
    "TopologyManagerPolicyAlphaOptions": _alpha(),
    "TopologyManagerPolicyBetaOptions": _beta(),
    "TopologyManagerPolicyOptions": FeatureSpec(True, Stage.GA),
    "TranslateStreamCloseWebsocketRequests": _beta(),
    "UserNamespacesHostNetworkSupport": _alpha(),
    "UserNamespacesSupport": _beta(),
    "WindowsCPUAndMemoryAffinity": _alpha(),
    "WindowsGracefulNodeShutdown": _beta(),
}

# Gates that only make sense together, as upstream's dependency table says.
FEATURE_DEPENDENCIES: Final[Mapping[str, tuple[str, ...]]] = {
    "ClusterTrustBundleProjection": ("ClusterTrustBundle",),
    "GracefulNodeShutdownBasedOnPodPriority": ("GracefulNodeShutdown",),
    "ImageVolumeWithDigest": ("ImageVolume",),
    "InPlacePodVerticalScalingExclusiveCPUs": ("InPlacePodVerticalScaling",),
    "InPlacePodVerticalScalingExclusiveMemory": ("InPlacePodVerticalScaling", "MemoryManager"),
    "InPlacePodLevelResourcesVerticalScaling": (
        "InPlacePodVerticalScaling", "PodLevelResources", "NodeDeclaredFeatures"),
}


class FeatureGateError(ValueError):
    """A gate assignment upstream would refuse."""


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``: the accepted spellings, nothing else."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def parse_feature_gates_flag(text: str) -> dict[str, bool]:
    """Parse ``A=true,B=false`` as ``--feature-gates`` does."""
    gates: dict[str, bool] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise FeatureGateError(f"missing bool value for {name}")
        try:
            gates[name.strip()] = parse_bool(value.strip())
        except ValueError as err:
            raise FeatureGateError(
                f"invalid value of {name.strip()}={value.strip()}, err: {err}") from None
    return gates


class FeatureGates:
    """The effective gate values: the table's defaults overlaid with explicit settings."""

    def __init__(self, overrides: Mapping[str, bool] | None = None) -> None:
        self._overrides: dict[str, bool] = {}
        if overrides:
            errors = self.set_from_map(overrides)
            if errors:
                raise FeatureGateError("; ".join(errors))

    @staticmethod
    def check(overrides: Mapping[str, bool]) -> list[str]:
        """Every reason upstream would reject these settings, without applying them."""
        errors: list[str] = []
        for name, value in overrides.items():
            spec = KNOWN_FEATURES.get(name)
            if spec is None:
                errors.append(f"unrecognized feature gate: {name}")
            elif spec.locked and value != spec.default:
                errors.append(f"cannot set feature gate {name} to {str(value).lower()}, "
                              f"feature is locked to {str(spec.default).lower()}")
        return errors

    def set_from_map(self, overrides: Mapping[str, bool]) -> list[str]:
        errors = self.check(overrides)
        if not errors:
            self._overrides.update(overrides)
        return errors

    def enabled(self, name: str) -> bool:
        if name in self._overrides:
            return self._overrides[name]
        spec = KNOWN_FEATURES.get(name)
        if spec is None:
            raise KeyError(f"feature {name!r} is not registered")
        return spec.default

    def dependency_errors(self) -> list[str]:
        errors: list[str] = []
        for name, needs in FEATURE_DEPENDENCIES.items():
            if not self.enabled(name):
                continue
            for need in needs:
                if not self.enabled(need):
                    errors.append(f"{name} is enabled, but depends on features: {need}=false")
        return errors

    def explicitly_set(self) -> dict[str, bool]:
        return dict(self._overrides)

    def as_dict(self) -> dict[str, bool]:
        return {name: self.enabled(name) for name in KNOWN_FEATURES}

    @staticmethod
    def known_features() -> list[str]:
        """Lines for ``--help``, like upstream's ``KnownFeatures`` (GA gates are left out)."""
        lines: list[str] = []
        for name in sorted(KNOWN_FEATURES, key=str.lower):
            spec = KNOWN_FEATURES[name]
            if spec.stage is Stage.GA:
                continue
            default = str(spec.default).lower()
            lines.append(f"{name}=true|false ({spec.stage.value} - default={default})")
        return lines

    def __repr__(self) -> str:
        return f"FeatureGates({self._overrides!r})"


def unknown_gates(names: Iterable[str]) -> list[str]:
    return sorted(name for name in names if name not in KNOWN_FEATURES)
