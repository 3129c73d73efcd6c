"""The static pod UID the Go kubelet 1.20 gives: md5 over go-spew's ``%#v`` of its pod.

Upstream 1.20 (``pkg/kubelet/config/common.go``, ``applyDefaults``) meant to hash
the node name, the file or URL and the pod, but ``hash.DeepHashObject`` resets
the hasher before it prints, so the UID is the md5 of the pod's go-spew
rendering alone: the same manifest has the same UID on every node, at every
path, from a file or a URL. Upstream changed this twice after 1.20: 1.21 writes
the node and path after the pod (so every node gives a static pod a UID of its
own; its release note warns that an in-place upgrade from 1.20 recreates static
pods), and a later release (``pkg/kubelet/config/hash.go``, 2023) hashes Go's
JSON of the v1 pod instead of spew, so that new API fields stop changing the UID;
v1.35's UID is thus md5(JSON of the v1 pod, ``host:<node>``, ``file:<path>`` or
``url:<url>``). pykubelet follows 1.20 here, the kubelet it is swapped with in
place. The pod printed is the *internal*
``core.Pod`` the decoder made of the manifest: v1 JSON decoded (unknown fields
dropped), v1 defaults of 1.20 applied, converted to the internal types (whose
field names and order differ from v1: ``hostNetwork`` lives in the pod's
security context, a probe embeds a ``Handler``), before the name suffix,
namespace, annotations and tolerations are added. pykubelet keeps running pods
across a swap with the Go kubelet only if it derives the same UID, so this
module renders that value byte for byte.

go-spew with ``%#v`` prints a value as ``(type)value`` for struct fields and
the top level but no type for slice elements and map keys and values; a string
as its bare bytes; a struct as ``{Field:value Field:value}``, every field in
declaration order, unexported ones and zero values included; a nil pointer,
slice or map as ``<nil>``, an empty one as ``[]`` or ``map[]``; map keys sorted.
``_STRUCTS`` is the table of the 1.20 internal types reachable from ``core.Pod``
(read from ``pkg/apis/core/types.go`` and apimachinery's ``meta/v1``): for each,
its fields in order as ``"GoName type [jsonKey]"``, where a missing key is the
Go name with its leading capitals lowered and ``-`` marks an embedded struct
whose fields sit inline in the JSON.

Quantities print their internals (``i`` the int64 amount and scale, ``d`` the
arbitrary-precision decimal, ``s`` the text kept when the parser judged it
canonical, ``Format``), as 1.20's ``ParseQuantity`` and then the milli round-up
of v1 defaulting leave them, so ``0.5``, ``500m`` and ``512Mi`` each print their
own way. What cannot be rendered exactly (a non-zero timestamp, whose
``time.Location`` internals depend on the machine's zone; ``managedFields``)
raises ``UnrenderablePod``; the caller then falls back to a digest of its own.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from pykubelet.api.defaults import default_image_pull_policy
from pykubelet.api.quantity import BINARY_POWERS, DECIMAL_EXPONENTS, MAX_MAGNITUDE, int64_amount


class UnrenderablePod(ValueError):
    """The pod holds a value this module cannot print exactly as go-spew does."""


_STRUCTS: Final[Mapping[str, tuple[str, ...]]] = {
    "core.AWSElasticBlockStoreVolumeSource": ("VolumeID string", "FSType string",
        "Partition int32", "ReadOnly bool"),
    "core.Affinity": ("NodeAffinity *core.NodeAffinity", "PodAffinity *core.PodAffinity",
        "PodAntiAffinity *core.PodAntiAffinity"),
    "core.AzureDiskVolumeSource": ("DiskName string", "DataDiskURI string diskURI",
        "CachingMode *core.AzureDataDiskCachingMode", "FSType *string", "ReadOnly *bool",
        "Kind *core.AzureDataDiskKind"),
    "core.AzureFileVolumeSource": ("SecretName string", "ShareName string", "ReadOnly bool"),
    "core.CSIVolumeSource": ("Driver string", "ReadOnly *bool", "FSType *string",
        "VolumeAttributes map[string]string", "NodePublishSecretRef *core.LocalObjectReference"),
    "core.Capabilities": ("Add []core.Capability", "Drop []core.Capability"),
    "core.CephFSVolumeSource": ("Monitors []string", "Path string", "User string",
        "SecretFile string", "SecretRef *core.LocalObjectReference", "ReadOnly bool"),
    "core.CinderVolumeSource": ("VolumeID string", "FSType string", "ReadOnly bool",
        "SecretRef *core.LocalObjectReference"),
    "core.ConfigMapEnvSource": ("LocalObjectReference core.LocalObjectReference -",
        "Optional *bool"),
    "core.ConfigMapKeySelector": ("LocalObjectReference core.LocalObjectReference -",
        "Key string", "Optional *bool"),
    "core.ConfigMapProjection": ("LocalObjectReference core.LocalObjectReference -",
        "Items []core.KeyToPath", "Optional *bool"),
    "core.ConfigMapVolumeSource": ("LocalObjectReference core.LocalObjectReference -",
        "Items []core.KeyToPath", "DefaultMode *int32", "Optional *bool"),
    "core.Container": ("Name string", "Image string", "Command []string", "Args []string",
        "WorkingDir string", "Ports []core.ContainerPort", "EnvFrom []core.EnvFromSource",
        "Env []core.EnvVar", "Resources core.ResourceRequirements",
        "VolumeMounts []core.VolumeMount", "VolumeDevices []core.VolumeDevice",
        "LivenessProbe *core.Probe", "ReadinessProbe *core.Probe", "StartupProbe *core.Probe",
        "Lifecycle *core.Lifecycle", "TerminationMessagePath string",
        "TerminationMessagePolicy core.TerminationMessagePolicy",
        "ImagePullPolicy core.PullPolicy", "SecurityContext *core.SecurityContext", "Stdin bool",
        "StdinOnce bool", "TTY bool"),
    "core.ContainerPort": ("Name string", "HostPort int32", "ContainerPort int32",
        "Protocol core.Protocol", "HostIP string"),
    "core.ContainerState": ("Waiting *core.ContainerStateWaiting",
        "Running *core.ContainerStateRunning", "Terminated *core.ContainerStateTerminated"),
    "core.ContainerStateRunning": ("StartedAt v1.Time",),
    "core.ContainerStateTerminated": ("ExitCode int32", "Signal int32", "Reason string",
        "Message string", "StartedAt v1.Time", "FinishedAt v1.Time", "ContainerID string"),
    "core.ContainerStateWaiting": ("Reason string", "Message string"),
    "core.ContainerStatus": ("Name string", "State core.ContainerState",
        "LastTerminationState core.ContainerState lastState", "Ready bool", "RestartCount int32",
        "Image string", "ImageID string", "ContainerID string", "Started *bool"),
    "core.DownwardAPIProjection": ("Items []core.DownwardAPIVolumeFile",),
    "core.DownwardAPIVolumeFile": ("Path string", "FieldRef *core.ObjectFieldSelector",
        "ResourceFieldRef *core.ResourceFieldSelector", "Mode *int32"),
    "core.DownwardAPIVolumeSource": ("Items []core.DownwardAPIVolumeFile", "DefaultMode *int32"),
    "core.EmptyDirVolumeSource": ("Medium core.StorageMedium", "SizeLimit *resource.Quantity"),
    "core.EnvFromSource": ("Prefix string", "ConfigMapRef *core.ConfigMapEnvSource",
        "SecretRef *core.SecretEnvSource"),
    "core.EnvVar": ("Name string", "Value string", "ValueFrom *core.EnvVarSource"),
    "core.EnvVarSource": ("FieldRef *core.ObjectFieldSelector",
        "ResourceFieldRef *core.ResourceFieldSelector",
        "ConfigMapKeyRef *core.ConfigMapKeySelector", "SecretKeyRef *core.SecretKeySelector"),
    "core.EphemeralContainer": ("EphemeralContainerCommon core.EphemeralContainerCommon -",
        "TargetContainerName string"),
    "core.EphemeralContainerCommon": ("Name string", "Image string", "Command []string",
        "Args []string", "WorkingDir string", "Ports []core.ContainerPort",
        "EnvFrom []core.EnvFromSource", "Env []core.EnvVar",
        "Resources core.ResourceRequirements", "VolumeMounts []core.VolumeMount",
        "VolumeDevices []core.VolumeDevice", "LivenessProbe *core.Probe",
        "ReadinessProbe *core.Probe", "StartupProbe *core.Probe", "Lifecycle *core.Lifecycle",
        "TerminationMessagePath string",
        "TerminationMessagePolicy core.TerminationMessagePolicy",
        "ImagePullPolicy core.PullPolicy", "SecurityContext *core.SecurityContext", "Stdin bool",
        "StdinOnce bool", "TTY bool"),
    "core.EphemeralVolumeSource": ("VolumeClaimTemplate *core.PersistentVolumeClaimTemplate",
        "ReadOnly bool"),
    "core.ExecAction": ("Command []string",),
    "core.FCVolumeSource": ("TargetWWNs []string", "Lun *int32", "FSType string",
        "ReadOnly bool", "WWIDs []string wwids"),
    "core.FlexVolumeSource": ("Driver string", "FSType string",
        "SecretRef *core.LocalObjectReference", "ReadOnly bool", "Options map[string]string"),
    "core.FlockerVolumeSource": ("DatasetName string", "DatasetUUID string"),
    "core.GCEPersistentDiskVolumeSource": ("PDName string", "FSType string", "Partition int32",
        "ReadOnly bool"),
    "core.GitRepoVolumeSource": ("Repository string", "Revision string", "Directory string"),
    "core.GlusterfsVolumeSource": ("EndpointsName string endpoints", "Path string",
        "ReadOnly bool"),
    "core.HTTPGetAction": ("Path string", "Port intstr.IntOrString", "Host string",
        "Scheme core.URIScheme", "HTTPHeaders []core.HTTPHeader"),
    "core.HTTPHeader": ("Name string", "Value string"),
    "core.Handler": ("Exec *core.ExecAction", "HTTPGet *core.HTTPGetAction",
        "TCPSocket *core.TCPSocketAction"),
    "core.HostAlias": ("IP string", "Hostnames []string"),
    "core.HostPathVolumeSource": ("Path string", "Type *core.HostPathType"),
    "core.ISCSIVolumeSource": ("TargetPortal string", "IQN string", "Lun int32",
        "ISCSIInterface string", "FSType string", "ReadOnly bool", "Portals []string",
        "DiscoveryCHAPAuth bool chapAuthDiscovery", "SessionCHAPAuth bool chapAuthSession",
        "SecretRef *core.LocalObjectReference", "InitiatorName *string"),
    "core.KeyToPath": ("Key string", "Path string", "Mode *int32"),
    "core.Lifecycle": ("PostStart *core.Handler", "PreStop *core.Handler"),
    "core.LocalObjectReference": ("Name string",),
    "core.NFSVolumeSource": ("Server string", "Path string", "ReadOnly bool"),
    "core.NodeAffinity": ("RequiredDuringSchedulingIgnoredDuringExecution *core.NodeSelector",
        "PreferredDuringSchedulingIgnoredDuringExecution []core.PreferredSchedulingTerm"),
    "core.NodeSelector": ("NodeSelectorTerms []core.NodeSelectorTerm",),
    "core.NodeSelectorRequirement": ("Key string", "Operator core.NodeSelectorOperator",
        "Values []string"),
    "core.NodeSelectorTerm": ("MatchExpressions []core.NodeSelectorRequirement",
        "MatchFields []core.NodeSelectorRequirement"),
    "core.ObjectFieldSelector": ("APIVersion string", "FieldPath string"),
    "core.PersistentVolumeClaimSpec": ("AccessModes []core.PersistentVolumeAccessMode",
        "Selector *v1.LabelSelector", "Resources core.ResourceRequirements", "VolumeName string",
        "StorageClassName *string", "VolumeMode *core.PersistentVolumeMode",
        "DataSource *core.TypedLocalObjectReference"),
    "core.PersistentVolumeClaimTemplate": ("ObjectMeta v1.ObjectMeta metadata",
        "Spec core.PersistentVolumeClaimSpec"),
    "core.PersistentVolumeClaimVolumeSource": ("ClaimName string", "ReadOnly bool"),
    "core.PhotonPersistentDiskVolumeSource": ("PdID string", "FSType string"),
    "core.Pod": ("TypeMeta v1.TypeMeta -", "ObjectMeta v1.ObjectMeta metadata",
        "Spec core.PodSpec", "Status core.PodStatus"),
    "core.PodAffinity": ("RequiredDuringSchedulingIgnoredDuringExecution []core.PodAffinityTerm",
        "PreferredDuringSchedulingIgnoredDuringExecution []core.WeightedPodAffinityTerm"),
    "core.PodAffinityTerm": ("LabelSelector *v1.LabelSelector", "Namespaces []string",
        "TopologyKey string"),
    "core.PodAntiAffinity": (
        "RequiredDuringSchedulingIgnoredDuringExecution []core.PodAffinityTerm",
        "PreferredDuringSchedulingIgnoredDuringExecution []core.WeightedPodAffinityTerm"),
    "core.PodCondition": ("Type core.PodConditionType", "Status core.ConditionStatus",
        "LastProbeTime v1.Time", "LastTransitionTime v1.Time", "Reason string", "Message string"),
    "core.PodDNSConfig": ("Nameservers []string", "Searches []string",
        "Options []core.PodDNSConfigOption"),
    "core.PodDNSConfigOption": ("Name string", "Value *string"),
    "core.PodIP": ("IP string",),
    "core.PodReadinessGate": ("ConditionType core.PodConditionType",),
    "core.PodSecurityContext": ("HostNetwork bool", "HostPID bool", "HostIPC bool",
        "ShareProcessNamespace *bool", "SELinuxOptions *core.SELinuxOptions",
        "WindowsOptions *core.WindowsSecurityContextOptions", "RunAsUser *int64",
        "RunAsGroup *int64", "RunAsNonRoot *bool", "SupplementalGroups []int64",
        "FSGroup *int64", "FSGroupChangePolicy *core.PodFSGroupChangePolicy",
        "Sysctls []core.Sysctl", "SeccompProfile *core.SeccompProfile"),
    "core.PodSpec": ("Volumes []core.Volume", "InitContainers []core.Container",
        "Containers []core.Container", "EphemeralContainers []core.EphemeralContainer",
        "RestartPolicy core.RestartPolicy", "TerminationGracePeriodSeconds *int64",
        "ActiveDeadlineSeconds *int64", "DNSPolicy core.DNSPolicy",
        "NodeSelector map[string]string", "ServiceAccountName string",
        "AutomountServiceAccountToken *bool", "NodeName string",
        "SecurityContext *core.PodSecurityContext",
        "ImagePullSecrets []core.LocalObjectReference", "Hostname string", "Subdomain string",
        "SetHostnameAsFQDN *bool", "Affinity *core.Affinity", "SchedulerName string",
        "Tolerations []core.Toleration", "HostAliases []core.HostAlias",
        "PriorityClassName string", "Priority *int32", "PreemptionPolicy *core.PreemptionPolicy",
        "DNSConfig *core.PodDNSConfig", "ReadinessGates []core.PodReadinessGate",
        "RuntimeClassName *string", "Overhead core.ResourceList", "EnableServiceLinks *bool",
        "TopologySpreadConstraints []core.TopologySpreadConstraint"),
    "core.PodStatus": ("Phase core.PodPhase", "Conditions []core.PodCondition", "Message string",
        "Reason string", "NominatedNodeName string", "HostIP string", "PodIPs []core.PodIP",
        "StartTime *v1.Time", "QOSClass core.PodQOSClass",
        "InitContainerStatuses []core.ContainerStatus",
        "ContainerStatuses []core.ContainerStatus",
        "EphemeralContainerStatuses []core.ContainerStatus"),
    "core.PortworxVolumeSource": ("VolumeID string", "FSType string", "ReadOnly bool"),
    "core.PreferredSchedulingTerm": ("Weight int32", "Preference core.NodeSelectorTerm"),
    "core.Probe": ("Handler core.Handler -", "InitialDelaySeconds int32", "TimeoutSeconds int32",
        "PeriodSeconds int32", "SuccessThreshold int32", "FailureThreshold int32"),
    "core.ProjectedVolumeSource": ("Sources []core.VolumeProjection", "DefaultMode *int32"),
    "core.QuobyteVolumeSource": ("Registry string", "Volume string", "ReadOnly bool",
        "User string", "Group string", "Tenant string"),
    "core.RBDVolumeSource": ("CephMonitors []string monitors", "RBDImage string image",
        "FSType string", "RBDPool string pool", "RadosUser string user", "Keyring string",
        "SecretRef *core.LocalObjectReference", "ReadOnly bool"),
    "core.ResourceFieldSelector": ("ContainerName string", "Resource string",
        "Divisor resource.Quantity"),
    "core.ResourceRequirements": ("Limits core.ResourceList", "Requests core.ResourceList"),
    "core.SELinuxOptions": ("User string", "Role string", "Type string", "Level string"),
    "core.ScaleIOVolumeSource": ("Gateway string", "System string",
        "SecretRef *core.LocalObjectReference", "SSLEnabled bool", "ProtectionDomain string",
        "StoragePool string", "StorageMode string", "VolumeName string", "FSType string",
        "ReadOnly bool"),
    "core.SeccompProfile": ("Type core.SeccompProfileType", "LocalhostProfile *string"),
    "core.SecretEnvSource": ("LocalObjectReference core.LocalObjectReference -",
        "Optional *bool"),
    "core.SecretKeySelector": ("LocalObjectReference core.LocalObjectReference -", "Key string",
        "Optional *bool"),
    "core.SecretProjection": ("LocalObjectReference core.LocalObjectReference -",
        "Items []core.KeyToPath", "Optional *bool"),
    "core.SecretVolumeSource": ("SecretName string", "Items []core.KeyToPath",
        "DefaultMode *int32", "Optional *bool"),
    "core.SecurityContext": ("Capabilities *core.Capabilities", "Privileged *bool",
        "SELinuxOptions *core.SELinuxOptions",
        "WindowsOptions *core.WindowsSecurityContextOptions", "RunAsUser *int64",
        "RunAsGroup *int64", "RunAsNonRoot *bool", "ReadOnlyRootFilesystem *bool",
        "AllowPrivilegeEscalation *bool", "ProcMount *core.ProcMountType",
        "SeccompProfile *core.SeccompProfile"),
    "core.ServiceAccountTokenProjection": ("Audience string", "ExpirationSeconds int64",
        "Path string"),
    "core.StorageOSVolumeSource": ("VolumeName string", "VolumeNamespace string",
        "FSType string", "ReadOnly bool", "SecretRef *core.LocalObjectReference"),
    "core.Sysctl": ("Name string", "Value string"),
    "core.TCPSocketAction": ("Port intstr.IntOrString", "Host string"),
    "core.Toleration": ("Key string", "Operator core.TolerationOperator", "Value string",
        "Effect core.TaintEffect", "TolerationSeconds *int64"),
    "core.TopologySpreadConstraint": ("MaxSkew int32", "TopologyKey string",
        "WhenUnsatisfiable core.UnsatisfiableConstraintAction",
        "LabelSelector *v1.LabelSelector"),
    "core.TypedLocalObjectReference": ("APIGroup *string", "Kind string", "Name string"),
    "core.Volume": ("Name string", "VolumeSource core.VolumeSource -"),
    "core.VolumeDevice": ("Name string", "DevicePath string"),
    "core.VolumeMount": ("Name string", "ReadOnly bool", "MountPath string", "SubPath string",
        "MountPropagation *core.MountPropagationMode", "SubPathExpr string"),
    "core.VolumeProjection": ("Secret *core.SecretProjection",
        "DownwardAPI *core.DownwardAPIProjection", "ConfigMap *core.ConfigMapProjection",
        "ServiceAccountToken *core.ServiceAccountTokenProjection"),
    "core.VolumeSource": ("HostPath *core.HostPathVolumeSource",
        "EmptyDir *core.EmptyDirVolumeSource",
        "GCEPersistentDisk *core.GCEPersistentDiskVolumeSource",
        "AWSElasticBlockStore *core.AWSElasticBlockStoreVolumeSource",
        "GitRepo *core.GitRepoVolumeSource", "Secret *core.SecretVolumeSource",
        "NFS *core.NFSVolumeSource", "ISCSI *core.ISCSIVolumeSource",
        "Glusterfs *core.GlusterfsVolumeSource",
        "PersistentVolumeClaim *core.PersistentVolumeClaimVolumeSource",
        "RBD *core.RBDVolumeSource", "Quobyte *core.QuobyteVolumeSource",
        "FlexVolume *core.FlexVolumeSource", "Cinder *core.CinderVolumeSource",
        "CephFS *core.CephFSVolumeSource cephfs", "Flocker *core.FlockerVolumeSource",
        "DownwardAPI *core.DownwardAPIVolumeSource", "FC *core.FCVolumeSource",
        "AzureFile *core.AzureFileVolumeSource", "ConfigMap *core.ConfigMapVolumeSource",
        "VsphereVolume *core.VsphereVirtualDiskVolumeSource",
        "AzureDisk *core.AzureDiskVolumeSource",
        "PhotonPersistentDisk *core.PhotonPersistentDiskVolumeSource",
        "Projected *core.ProjectedVolumeSource", "PortworxVolume *core.PortworxVolumeSource",
        "ScaleIO *core.ScaleIOVolumeSource", "StorageOS *core.StorageOSVolumeSource storageos",
        "CSI *core.CSIVolumeSource", "Ephemeral *core.EphemeralVolumeSource"),
    "core.VsphereVirtualDiskVolumeSource": ("VolumePath string", "FSType string",
        "StoragePolicyName string", "StoragePolicyID string"),
    "core.WeightedPodAffinityTerm": ("Weight int32", "PodAffinityTerm core.PodAffinityTerm"),
    "core.WindowsSecurityContextOptions": ("GMSACredentialSpecName *string",
        "GMSACredentialSpec *string", "RunAsUserName *string"),
    "v1.LabelSelector": ("MatchLabels map[string]string",
        "MatchExpressions []v1.LabelSelectorRequirement"),
    "v1.LabelSelectorRequirement": ("Key string", "Operator v1.LabelSelectorOperator",
        "Values []string"),
    "v1.ManagedFieldsEntry": ("Manager string", "Operation v1.ManagedFieldsOperationType",
        "APIVersion string", "Time *v1.Time", "FieldsType string", "FieldsV1 *v1.FieldsV1"),
    "v1.ObjectMeta": ("Name string", "GenerateName string", "Namespace string",
        "SelfLink string", "UID types.UID", "ResourceVersion string", "Generation int64",
        "CreationTimestamp v1.Time", "DeletionTimestamp *v1.Time",
        "DeletionGracePeriodSeconds *int64", "Labels map[string]string",
        "Annotations map[string]string", "OwnerReferences []v1.OwnerReference",
        "Finalizers []string", "ClusterName string", "ManagedFields []v1.ManagedFieldsEntry"),
    "v1.OwnerReference": ("APIVersion string", "Kind string", "Name string", "UID types.UID",
        "Controller *bool", "BlockOwnerDeletion *bool"),
    "v1.TypeMeta": ("Kind string", "APIVersion string"),
}
_NAMED: Final[Mapping[str, str]] = {
    "core.AzureDataDiskCachingMode": "string",
    "core.AzureDataDiskKind": "string",
    "core.Capability": "string",
    "core.ConditionStatus": "string",
    "core.DNSPolicy": "string",
    "core.HostPathType": "string",
    "core.MountPropagationMode": "string",
    "core.NodeSelectorOperator": "string",
    "core.PersistentVolumeAccessMode": "string",
    "core.PersistentVolumeMode": "string",
    "core.PodConditionType": "string",
    "core.PodFSGroupChangePolicy": "string",
    "core.PodPhase": "string",
    "core.PodQOSClass": "string",
    "core.PreemptionPolicy": "string",
    "core.ProcMountType": "string",
    "core.Protocol": "string",
    "core.PullPolicy": "string",
    "core.ResourceList": "map[core.ResourceName]resource.Quantity",
    "core.ResourceName": "string",
    "core.RestartPolicy": "string",
    "core.SeccompProfileType": "string",
    "core.StorageMedium": "string",
    "core.TaintEffect": "string",
    "core.TerminationMessagePolicy": "string",
    "core.TolerationOperator": "string",
    "core.URIScheme": "string",
    "core.UnsatisfiableConstraintAction": "string",
    "types.UID": "string",
    "v1.LabelSelectorOperator": "string",
    "v1.ManagedFieldsOperationType": "string",
}


_LEADING_CAPITALS: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z]")


def _json_key(go_name: str) -> str:
    """The JSON key a Go field name has unless the table names another: ``DNSPolicy`` ->
    ``dnsPolicy``, ``HostIPC`` -> ``hostIPC``."""
    match = _LEADING_CAPITALS.match(go_name)
    end = match.end() if match else 0
    return go_name[:end].lower() + go_name[end:]


def _fields(type_name: str) -> list[tuple[str, str, str | None]]:
    """``(GoName, type, json key or None for an embedded struct)`` of a struct type."""
    out: list[tuple[str, str, str | None]] = []
    for spec in _STRUCTS[type_name]:
        parts = spec.split(" ")
        key = parts[2] if len(parts) > 2 else _json_key(parts[0])
        out.append((parts[0], parts[1], None if key == "-" else key))
    return out


# --- 1.20's v1 defaults and conversion to the internal types, on the JSON form -----------------

_INIT_CONTAINER_ANNOTATIONS: Final = frozenset({
    "pod.beta.kubernetes.io/init-containers", "pod.alpha.kubernetes.io/init-containers",
    "pod.beta.kubernetes.io/init-container-statuses",
    "pod.alpha.kubernetes.io/init-container-statuses"})
_DEFAULT_MODE: Final = 0o644
_ALL_CONTAINERS: Final = ("initContainers", "containers", "ephemeralContainers")


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _dict(parent: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = parent.get(key)
    return value if isinstance(value, dict) else None


def _setdefault(obj: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` when Go would see its zero value (absent, null, "", 0 or nil)."""
    if obj.get(key) in (None, "", 0) and obj.get(key) is not False:
        obj[key] = value


def _default_field_ref(holder: Mapping[str, Any] | None) -> None:
    ref = _dict(holder, "fieldRef") if holder is not None else None
    if ref is not None:
        _setdefault(ref, "apiVersion", "v1")


def _default_http_get(handler: Mapping[str, Any] | None) -> None:
    action = _dict(handler, "httpGet") if handler is not None else None
    if action is not None:
        _setdefault(action, "path", "/")
        _setdefault(action, "scheme", "HTTP")


def _default_container(container: dict[str, Any], *, host_network: bool) -> None:
    if not container.get("imagePullPolicy"):
        container["imagePullPolicy"] = default_image_pull_policy(str(container.get("image") or ""))
    _setdefault(container, "terminationMessagePath", "/dev/termination-log")
    _setdefault(container, "terminationMessagePolicy", "File")
    for port in _dicts(container.get("ports")):
        _setdefault(port, "protocol", "TCP")
        if host_network:
            _setdefault(port, "hostPort", port.get("containerPort"))
    for env in _dicts(container.get("env")):
        _default_field_ref(_dict(env, "valueFrom"))
    for probe_key in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = _dict(container, probe_key)
        if probe is not None:
            for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10),
                               ("successThreshold", 1), ("failureThreshold", 3)):
                _setdefault(probe, key, value)
            _default_http_get(probe)
    lifecycle = _dict(container, "lifecycle")
    if lifecycle is not None:
        _default_http_get(_dict(lifecycle, "postStart"))
        _default_http_get(_dict(lifecycle, "preStop"))


def _copy_limits_to_requests(container: dict[str, Any]) -> None:
    resources = _dict(container, "resources")
    limits = _dict(resources, "limits") if resources is not None else None
    if resources is None or limits is None:
        return
    requests = _dict(resources, "requests")
    if requests is None:
        requests = resources["requests"] = {}
    for name, value in limits.items():
        requests.setdefault(name, value)


def _default_volume(volume: dict[str, Any]) -> None:
    sources = [key for _, _, key in _fields("core.VolumeSource") if key is not None]
    if all(volume.get(key) is None for key in sources):
        volume["emptyDir"] = {}
    for key in ("secret", "configMap", "downwardAPI", "projected"):
        source = _dict(volume, key)
        if source is not None and source.get("defaultMode") is None:
            source["defaultMode"] = _DEFAULT_MODE
    host_path = _dict(volume, "hostPath")
    if host_path is not None and host_path.get("type") is None:
        host_path["type"] = ""
    downward = _dict(volume, "downwardAPI")
    for item in _dicts(downward.get("items") if downward else None):
        _default_field_ref(item)
    projected = _dict(volume, "projected")
    for source in _dicts(projected.get("sources") if projected else None):
        downward = _dict(source, "downwardAPI")
        for item in _dicts(downward.get("items") if downward else None):
            _default_field_ref(item)
        token = _dict(source, "serviceAccountToken")
        if token is not None and token.get("expirationSeconds") is None:
            token["expirationSeconds"] = 3600
    _default_plugin_volumes(volume)


def _default_plugin_volumes(volume: dict[str, Any]) -> None:
    iscsi = _dict(volume, "iscsi")
    if iscsi is not None:
        _setdefault(iscsi, "iscsiInterface", "default")
    rbd = _dict(volume, "rbd")
    if rbd is not None:
        for key, value in (("pool", "rbd"), ("user", "admin"), ("keyring", "/etc/ceph/keyring")):
            _setdefault(rbd, key, value)
    scale_io = _dict(volume, "scaleIO")
    if scale_io is not None:
        _setdefault(scale_io, "storageMode", "ThinProvisioned")
        _setdefault(scale_io, "fsType", "xfs")
    azure = _dict(volume, "azureDisk")
    if azure is not None:
        azure_defaults: dict[str, Any] = {"cachingMode": "ReadWrite", "kind": "Shared",
                                          "fsType": "ext4", "readOnly": False}
        for key, default in azure_defaults.items():
            if azure.get(key) is None:
                azure[key] = default
    ephemeral = _dict(volume, "ephemeral")
    template = _dict(ephemeral, "volumeClaimTemplate") if ephemeral is not None else None
    claim = _dict(template, "spec") if template is not None else None
    if claim is not None and claim.get("volumeMode") is None:
        claim["volumeMode"] = "Filesystem"


def internal_pod_json(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest as 1.20's decoder leaves it before ``applyDefaults``: v1 defaults applied
    and moved to the internal shape, still keyed by JSON names."""
    pod = copy.deepcopy(dict(manifest))
    pod.pop("kind", None)  # the decoder clears an internal object's type meta
    pod.pop("apiVersion", None)
    spec = _dict(pod, "spec")
    if spec is None:
        spec = pod["spec"] = {}
    for key in ("initContainers", "containers"):
        for container in _dicts(spec.get(key)):
            _copy_limits_to_requests(container)
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    _setdefault(spec, "dnsPolicy", "ClusterFirst")
    _setdefault(spec, "restartPolicy", "Always")
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    _setdefault(spec, "schedulerName", "default-scheduler")
    for volume in _dicts(spec.get("volumes")):
        _default_volume(volume)
    host_network = spec.get("hostNetwork") is True
    for key in _ALL_CONTAINERS:
        for container in _dicts(spec.get(key)):
            _default_container(container, host_network=host_network and key != _ALL_CONTAINERS[2])
    # The conversion to the internal types: the host namespaces move into the security context.
    security = spec["securityContext"]
    for key in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"):
        security[key] = spec.pop(key, None)
    if not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec.get("serviceAccount")
    metadata = _dict(pod, "metadata")
    annotations = _dict(metadata, "annotations") if metadata is not None else None
    if metadata is not None and annotations and _INIT_CONTAINER_ANNOTATIONS & annotations.keys():
        metadata["annotations"] = {key: value for key, value in annotations.items()
                                   if key not in _INIT_CONTAINER_ANNOTATIONS}
    status = _dict(pod, "status")
    if status is not None and status.get("podIP"):
        ips = _dicts(status.get("podIPs"))
        if not ips or ips[0].get("ip") != status["podIP"]:
            status["podIPs"] = [{"ip": status["podIP"]}]
    return pod


# --- quantities -------------------------------------------------------------------------------

_NUMBER: Final = re.compile(r"([+-]?)(0*)([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_MAX_SLOW_DIGITS: Final = 64  # digits or powers of ten rendered exactly in the decimal form


def _quantity_text(value: Any) -> str:
    """The text Go's decoder hands ``ParseQuantity``: a JSON string as is, a number as Go
    writes it (YAML's ``1.0`` arrives as ``1``)."""
    if isinstance(value, bool):
        raise UnrenderablePod(f"quantity {value!r}")
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value).strip()


def _round_away(numerator: int, denominator: int) -> int:
    quotient = abs(numerator) // denominator
    if abs(numerator) % denominator:
        quotient += 1
    return quotient if numerator >= 0 else -quotient


class _Quantity:
    """A ``resource.Quantity``'s fields: ``value``/``scale`` (int64Amount) or ``dec``
    (unscaled, scale) when the parser fell back to ``inf.Dec``; ``text``; ``fmt``."""

    def __init__(self, text: str) -> None:
        self.value, self.scale, self.text, self.fmt = 0, 0, "", ""
        self.dec: tuple[int, int] | None = None
        if not text:
            return
        if text == "0":
            self.text, self.fmt = text, "DecimalSI"
            return
        parts = _NUMBER.fullmatch(text)
        if parts is None:
            raise UnrenderablePod(f"quantity {text!r}")
        sign, _, num, denom, suffix = parts.groups()
        num, denom = num or "0", denom or ""
        if not (num + denom).isdigit() or not (num or denom):
            raise UnrenderablePod(f"quantity {text!r}")
        if suffix in DECIMAL_EXPONENTS:
            base, exponent, fmt = 10, DECIMAL_EXPONENTS[suffix], "DecimalSI"
        elif suffix in BINARY_POWERS:
            base, exponent, fmt = 2, BINARY_POWERS[suffix], "BinarySI"
        elif re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
            base, exponent, fmt = 10, int(suffix[1:]), "DecimalExponent"
        else:
            raise UnrenderablePod(f"quantity {text!r}")
        negative = sign == "-"
        if self._fast(text, num, denom, base, exponent, fmt, negative):
            return
        self._slow(num, denom, base, exponent, fmt, negative)

    def _fast(self, text: str, num: str, denom: str, base: int, exponent: int, fmt: str,
              negative: bool) -> bool:
        """1.20's exact int64 path; False when the text needs the decimal one."""
        amount = int64_amount(num, denom, binary=base == 2, exponent=exponent)
        if amount is None:
            return False
        self.value = -amount.magnitude if negative else amount.magnitude
        self.scale, self.fmt = amount.scale, fmt
        if amount.canonical:
            self.text = text
        return True

    def _slow(self, num: str, denom: str, base: int, exponent: int, fmt: str,
              negative: bool) -> None:
        if len(num) + len(denom) > _MAX_SLOW_DIGITS or abs(exponent) > _MAX_SLOW_DIGITS:
            # No resource needs such a number; never compute the power a manifest asks for.
            raise UnrenderablePod("a quantity of too many digits")
        unscaled, scale = int(num + denom), len(denom)
        if base == 10:
            scale -= exponent
        else:
            unscaled <<= exponent
        if unscaled != 0 and scale != 9:  # rounded to nano units, away from zero
            unscaled = (unscaled * 10 ** (9 - scale) if scale < 9
                        else _round_away(unscaled, 10 ** (scale - 9)))
            scale = 9
        if unscaled == 0:
            raise UnrenderablePod("a zero quantity in decimal form")
        if fmt == "BinarySI" and unscaled > MAX_MAGNITUDE * 10**scale:
            raise UnrenderablePod("a binary quantity above 2^63-1")
        if fmt == "BinarySI" and unscaled < 10**scale:
            fmt = "DecimalSI"
        self.dec, self.fmt = (-unscaled if negative else unscaled, scale), fmt

    def round_up_to_milli(self) -> None:
        """v1 defaulting of a ``ResourceList`` value (``RoundUp(-3)``)."""
        if self.dec is not None:
            unscaled, scale = self.dec
            if scale < 3:
                unscaled *= 10 ** (3 - scale)
            elif scale > 3:
                unscaled = _round_away(unscaled, 10 ** (scale - 3))
            self.dec, self.text = (unscaled, 3), ""
        elif self.scale < -3:
            self.value = _round_away(self.value, 10 ** (-3 - self.scale))
            self.scale, self.text = -3, ""

    def spew(self) -> str:
        if self.dec is None:
            dec = "(*inf.Dec)<nil>"
        else:
            unscaled, scale = self.dec
            magnitude, words = abs(unscaled), []
            while magnitude:
                words.append(str(magnitude & (2**64 - 1)))
                magnitude >>= 64
            dec = (f"(*inf.Dec){{unscaled:(big.Int){{neg:(bool){str(unscaled < 0).lower()} "
                   f"abs:(big.nat)[{' '.join(words)}]}} scale:(inf.Scale){scale}}}")
        return (f"{{i:(resource.int64Amount){{value:(int64){self.value} "
                f"scale:(resource.Scale){self.scale}}} d:(resource.infDecAmount){{Dec:{dec}}} "
                f"s:(string){self.text} Format:(resource.Format){self.fmt}}}")


# --- the go-spew rendering --------------------------------------------------------------------

_ZERO_TIME: Final = "{Time:(time.Time){wall:(uint64)0 ext:(int64)0 loc:(*time.Location)<nil>}}"
_INTS: Final = frozenset({"int", "int32", "int64", "uint64", "uint8"})


def _go_bytes_key(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


def _split_map(go_type: str) -> tuple[str, str]:
    depth = 0
    for index, char in enumerate(go_type):
        depth += char == "["
        depth -= char == "]"
        if depth == 0 and char == "]":
            return go_type[4:index], go_type[index + 1:]
    raise ValueError(go_type)


def _render(value: Any, go_type: str, *, typed: bool, resource_list: bool = False) -> str:
    """go-spew's ``%#v`` of ``value`` (its JSON form) as a Go value of ``go_type``; ``typed``
    is false for slice elements and map keys and values, which spew prints without type."""
    prefix = f"({go_type})" if typed else ""
    if go_type.startswith("*"):
        if value is None:
            return f"{prefix}<nil>" if typed else "<nil>"
        return (prefix if typed else "<*>") + _render(value, go_type[1:], typed=False)
    if go_type.startswith("[]"):
        if value is None:
            return prefix + "<nil>"
        if not isinstance(value, list):
            raise UnrenderablePod(f"{go_type}: {value!r}")
        return prefix + "[" + " ".join(_render(item, go_type[2:], typed=False)
                                       for item in value) + "]"
    if go_type.startswith("map["):
        if value is None:
            return prefix + "<nil>"
        if not isinstance(value, dict):
            raise UnrenderablePod(f"{go_type}: {value!r}")
        _, value_type = _split_map(go_type)
        entries = []
        for key in sorted(value, key=_go_bytes_key):
            entries.append(f"{key}:" + _render(value[key], value_type, typed=False,
                                               resource_list=resource_list))
        return prefix + "map[" + " ".join(entries) + "]"
    if go_type in _STRUCTS:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise UnrenderablePod(f"{go_type}: {value!r}")
        members = []
        for name, field_type, key in _fields(go_type):
            field_value = value if key is None else value.get(key)
            members.append(f"{name}:" + _render(field_value, field_type, typed=True))
        return prefix + "{" + " ".join(members) + "}"
    if go_type in _NAMED:
        underlying = _NAMED[go_type]
        return prefix + _render(value, underlying, typed=False,
                                resource_list=go_type == "core.ResourceList")
    return prefix + _special(value, go_type, resource_list=resource_list)


def _special(value: Any, go_type: str, *, resource_list: bool) -> str:
    if go_type == "string":
        return "" if value is None else str(value)
    if go_type == "bool":
        return "true" if value else "false"
    if go_type in _INTS:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is not None and not isinstance(value, int):
            raise UnrenderablePod(f"{go_type}: {value!r}")
        return str(value or 0)
    if go_type == "resource.Quantity":
        quantity = _Quantity("" if value is None else _quantity_text(value))
        if resource_list:
            quantity.round_up_to_milli()
        return quantity.spew()
    if go_type == "intstr.IntOrString":
        if isinstance(value, str):
            return f"{{Type:(intstr.Type)1 IntVal:(int32)0 StrVal:(string){value}}}"
        return f"{{Type:(intstr.Type)0 IntVal:(int32){int(value or 0)} StrVal:(string)}}"
    if go_type == "v1.Time":
        if value is None:
            return _ZERO_TIME
        raise UnrenderablePod("a timestamp")
    raise UnrenderablePod(f"a value of type {go_type}")


def spew_pod(manifest: Mapping[str, Any]) -> str:
    """go-spew's ``%#v`` of the ``*core.Pod`` 1.20 decodes ``manifest`` (a v1 ``Pod``'s
    JSON form) into, as ``applyDefaults`` hashes it."""
    return _render(internal_pod_json(manifest), "*core.Pod", typed=True)


def go120_static_pod_uid(manifest: Mapping[str, Any]) -> str:
    """The UID the Go kubelet 1.20 gives the static pod ``manifest`` (a file's or a URL's)."""
    return hashlib.md5(spew_pod(manifest).encode("utf-8", "surrogateescape"),
                       usedforsecurity=False).hexdigest()


__all__ = ["UnrenderablePod", "go120_static_pod_uid", "internal_pod_json", "spew_pod"]
