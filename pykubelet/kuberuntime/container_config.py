"""The CRI ``ContainerConfig`` for one container of a pod.

This is where a container spec becomes what the runtime executes, following
upstream ``generateContainerConfig`` and the helpers it calls in the kubelet:

- environment: ``envFrom`` first, then ``env`` in order; literal values may
  reference earlier variables as ``$(NAME)`` (``$$`` escapes, unknown names
  stay as written); ``fieldRef`` and ``resourceFieldRef`` are resolved from
  the pod and the node; ConfigMaps and Secrets come through ``EnvSource``.
- command and args: ``$(NAME)`` expanded against the final environment.
- resources: CPU shares from the request, CFS quota from the limit, memory
  limit, and ``oom_score_adj`` from the pod's QoS class.
- security: the container's securityContext over the pod's, the
  ``runAsNonRoot`` check against the image's user, ``no_new_privs``, the
  default masked/read-only /proc paths.
- mounts: the volumes (through the ``VolumeMounter`` seam), the
  kubelet-managed ``/etc/hosts`` (``<podDir>/etc-hosts``) and the
  termination-message file (``<podDir>/containers/<name>/<random>``).

Failures the user has to fix in the pod spec (a missing ConfigMap key, a
root user under ``runAsNonRoot``...) raise ``CreateContainerConfigError``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import (
    V1Container,
    V1EnvVar,
    V1ObjectFieldSelector,
    V1Pod,
    V1ResourceFieldSelector,
    V1SecurityContext,
)

from pykubelet.api import pod_uid
from pykubelet.api.expansion import expand
from pykubelet.api.fieldpath import (
    FieldPathError,
    field_ref_value,
    find_container,
    resource_field_value,
)
from pykubelet.api.qos import container_limits, container_oom_score_adjust, container_requests
from pykubelet.api.quantity import QuantityError, cpu_to_millis, memory_to_bytes
from pykubelet.cm.helpers import (
    DEFAULT_CFS_PERIOD_US,
    MILLI_CPU_PER_CPU,
    container_hugepage_limits,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    read_hugepage_sizes,
    read_mem_total,
)
from pykubelet.container.devices import NO_DEVICES, DeviceRunOptions
from pykubelet.events import WARNING, EventRecorder
from pykubelet.kuberuntime.labels import new_container_annotations, new_container_labels
from pykubelet.kuberuntime.logs import container_log_path, pod_logs_directory
from pykubelet.kuberuntime.sandbox_config import (
    SandboxConfigError,
    generate_pod_hostname_and_domain,
    namespace_options_for_pod,
    pod_supplemental_groups,
    seccomp_profile,
    selinux_option,
)
from pykubelet.util import klog
from pykubelet.util.atomic_file import write_file_atomically

ETC_HOSTS_PATH = "/etc/hosts"
INVALID_ENV_NAMES = "InvalidEnvironmentVariableNames"
ETC_HOSTS_FILE_NAME = "etc-hosts"
DEFAULT_MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
    "/sys/firmware", "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS = (
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
)


class CreateContainerConfigError(Exception):
    """The container cannot be configured as specified; shown as ``CreateContainerConfigError``."""

    reason = "CreateContainerConfigError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class VolumeMounter(Protocol):
    """Where the pod's volumes are on the node, for the container's ``volumeMounts``.

    Implemented by the volume manager; a ``ValueError`` (a volume that is not
    ready, a bad ``subPath``) becomes ``CreateContainerConfigError``.
    """

    def mounts_for(self, pod: V1Pod, container: V1Container,
                   env: Mapping[str, str]) -> list[api_pb2.Mount]:
        """``env`` is the container's environment, for ``subPathExpr``."""
        ...


class EnvSource(Protocol):
    """ConfigMap and Secret data for ``env``/``envFrom``; None when the object does not exist.

    Secret values are returned decoded (text, not base64).
    """

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None: ...

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None: ...


@dataclass
class ContainerOptions:
    """Node and pod facts the container config depends on (besides the spec)."""

    pod_dir: str
    node_name: str = ""
    pod_ips: list[str] = field(default_factory=list)
    # The kubelet's own node IP: what ``status.hostIP`` reads when ``host_ips`` is unset.
    host_ip: str = ""
    # The node's IPs as its Node reports them, asked at each container's creation
    # (upstream ``getHostIPsAnyWay``), so the first start of a pod, before the API
    # server has recorded its status.hostIP, already sees them. None for tests.
    host_ips: Callable[[], Sequence[str]] | None = None
    pod_logs_dir: str = "/var/log/pods"
    cluster_domain: str = ""
    enforce_cpu_limits: bool = True
    cpu_cfs_quota_period_us: int = DEFAULT_CFS_PERIOD_US
    memory_capacity: int = field(default_factory=read_mem_total)
    # The kernel's huge page sizes (bytes): each gets a hugetlb limit, 0 unless asked for.
    hugepage_sizes: tuple[int, ...] = field(default_factory=read_hugepage_sizes)
    # What a downward-API ``limits.*`` reads when the container sets no limit.
    node_allocatable_cpu_millis: int = field(
        default_factory=lambda: (os.cpu_count() or 1) * MILLI_CPU_PER_CPU)
    node_allocatable_memory: int | None = None
    seccomp_default: bool = False
    seccomp_profile_root: str = "/var/lib/kubelet/seccomp"
    # The node's hosts file, the base of /etc/hosts in host-network pods.
    node_hosts_file: str = ETC_HOSTS_PATH
    service_env: dict[str, str] = field(default_factory=dict)
    # The service links of the pod's namespace (``enableServiceLinks``), per pod.
    service_env_for: Callable[[V1Pod], Mapping[str, str]] | None = None
    volume_mounter: VolumeMounter | None = None
    env_source: EnvSource | None = None
    # Where warnings about the pod's spec go (``InvalidEnvironmentVariableNames``).
    recorder: EventRecorder | None = None
    # The CPU manager's cpuset for a container by name ("" leaves it to the runtime).
    cpuset_for: Callable[[V1Pod, str], str] | None = None
    # The device manager's options for a container (its plugins' Allocate answers).
    device_options_for: Callable[[V1Pod, V1Container], Awaitable[DeviceRunOptions]] | None = None


def _lookup_in(*envs: Mapping[str, str]) -> Callable[[str], str | None]:
    def lookup(name: str) -> str | None:
        for env in envs:
            if name in env:
                return env[name]
        return None
    return lookup


def expand_command_and_args(container: V1Container,
                            env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    lookup = _lookup_in(env)
    return ([expand(part, lookup) for part in container.command or []],
            [expand(part, lookup) for part in container.args or []])


# --- environment --------------------------------------------------------------------------------

def _pod_ident(pod: V1Pod) -> str:
    meta = pod.metadata
    if meta is None:
        return ""
    return f"{meta.name}_{meta.namespace}({meta.uid})"


def _host_ips(opts: ContainerOptions) -> list[str]:
    """The node's IPs (primary first) for ``status.hostIP``/``status.hostIPs``."""
    found = list(opts.host_ips()) if opts.host_ips is not None else []
    return found or ([opts.host_ip] if opts.host_ip else [])


def _pod_ips(pod: V1Pod, opts: ContainerOptions) -> list[str]:
    if opts.pod_ips:
        return list(opts.pod_ips)
    if pod.spec is not None and pod.spec.host_network:
        return _host_ips(opts)  # a host-network pod has the node's IPs
    return []


def _field_ref_value(pod: V1Pod, selector: V1ObjectFieldSelector,
                     opts: ContainerOptions) -> str:
    try:
        return field_ref_value(pod, selector.field_path or "", node_name=opts.node_name,
                               pod_ips=_pod_ips(pod, opts), host_ips=_host_ips(opts))
    except FieldPathError as err:
        raise CreateContainerConfigError(str(err)) from err


def _resource_field_value(pod: V1Pod, container: V1Container,
                          selector: V1ResourceFieldSelector, opts: ContainerOptions) -> str:
    try:
        target = (find_container(pod, selector.container_name) if selector.container_name
                  else container)
        return resource_field_value(
            target, selector.resource or "", selector.divisor,
            node_cpu_millis=opts.node_allocatable_cpu_millis,
            node_memory=opts.node_allocatable_memory or opts.memory_capacity)
    except FieldPathError as err:
        raise CreateContainerConfigError(str(err)) from err


def _namespace(pod: V1Pod) -> str:
    return (pod.metadata.namespace if pod.metadata else None) or ""


def _require_env_source(opts: ContainerOptions, kind: str, name: str) -> EnvSource:
    if opts.env_source is None:
        raise CreateContainerConfigError(
            f"cannot read {kind} {name!r}: this kubelet has no API access for {kind}s")
    return opts.env_source


def _key_ref_value(pod: V1Pod, var: V1EnvVar, opts: ContainerOptions) -> str | None:
    source = var.value_from
    assert source is not None
    namespace = _namespace(pod)
    for kind, selector in (("configmap", source.config_map_key_ref),
                           ("secret", source.secret_key_ref)):
        if selector is None:
            continue
        optional = bool(selector.optional)
        name = selector.name or ""
        try:
            env_source = _require_env_source(opts, kind, name)
        except CreateContainerConfigError:
            if optional:
                return None
            raise
        data = (env_source.config_map(namespace, name) if kind == "configmap"
                else env_source.secret(namespace, name))
        if data is None:
            if optional:
                return None
            raise CreateContainerConfigError(f'{kind} "{name}" not found')
        if selector.key not in data:
            if optional:
                return None
            label = "ConfigMap" if kind == "configmap" else "Secret"
            raise CreateContainerConfigError(
                f"couldn't find key {selector.key} in {label} {namespace}/{name}")
        return str(data[selector.key])
    return None


def _env_from(pod: V1Pod, container: V1Container, opts: ContainerOptions) -> dict[str, str]:
    env: dict[str, str] = {}
    namespace = _namespace(pod)
    for source in container.env_from or []:
        ref = source.config_map_ref or source.secret_ref
        if ref is None:
            continue
        kind = "configmap" if source.config_map_ref is not None else "secret"
        name = ref.name or ""
        try:
            env_source = _require_env_source(opts, kind, name)
        except CreateContainerConfigError:
            if ref.optional:
                continue
            raise
        data = (env_source.config_map(namespace, name) if kind == "configmap"
                else env_source.secret(namespace, name))
        if data is None:
            if ref.optional:
                continue
            raise CreateContainerConfigError(f'{kind} "{name}" not found')
        invalid = []
        for key, value in data.items():
            env_name = (source.prefix or "") + key
            if not _is_env_var_name(env_name):
                invalid.append(env_name)
                continue
            env[env_name] = str(value)
        if invalid:
            keys = ", ".join(sorted(invalid))
            klog.warning("Keys were skipped because they are invalid environment variable names",
                         pod=_pod_ident(pod), source=name, keys=keys)
            if opts.recorder is not None:
                label = "configMap" if kind == "configmap" else "secret"
                opts.recorder.event(
                    pod, WARNING, INVALID_ENV_NAMES,
                    f"Keys [{keys}] from the EnvFrom {label} {namespace}/{name} were skipped "
                    f"since they are considered invalid environment variable names.")
    return env


def _is_env_var_name(name: str) -> bool:
    return bool(name) and not name[0].isdigit() and all(
        c.isalnum() or c in "-._" for c in name) and name.isascii()


def make_environment(pod: V1Pod, container: V1Container,
                     opts: ContainerOptions) -> dict[str, str]:
    """The final environment in declaration order (upstream ``makeEnvironmentVariables``)."""
    env = _env_from(pod, container, opts)
    service_env = dict(opts.service_env)
    if opts.service_env_for is not None:
        try:
            service_env.update(opts.service_env_for(pod))
        except RuntimeError as err:  # the Services are not known yet: retried later
            raise CreateContainerConfigError(str(err)) from err
    lookup = _lookup_in(env, service_env)
    for var in container.env or []:
        if not var.name:
            continue
        value: str | None
        source = var.value_from
        if source is None:
            value = expand(var.value or "", lookup)
        elif source.field_ref is not None:
            value = _field_ref_value(pod, source.field_ref, opts)
        elif source.resource_field_ref is not None:
            value = _resource_field_value(pod, container, source.resource_field_ref, opts)
        else:
            value = _key_ref_value(pod, var, opts)
            if value is None:
                continue
        # Re-declaring a name moves it to its latest position, as the runtime sees one value.
        env.pop(var.name, None)
        env[var.name] = value
    for name, value in service_env.items():
        env.setdefault(name, value)
    return env


# --- resources ----------------------------------------------------------------------------------

def container_resources(pod: V1Pod, container: V1Container,
                        opts: ContainerOptions) -> api_pb2.LinuxContainerResources:
    """cgroup settings from requests/limits, as upstream ``calculateLinuxResources``."""
    requests = container_requests(container)
    limits = container_limits(container)
    try:
        cpu_request = cpu_to_millis(requests["cpu"]) if "cpu" in requests else 0
        cpu_limit = cpu_to_millis(limits["cpu"]) if "cpu" in limits else 0
        memory_limit = memory_to_bytes(limits["memory"]) if "memory" in limits else 0
        oom_score_adj = container_oom_score_adjust(pod, container, opts.memory_capacity)
    except QuantityError as err:
        raise CreateContainerConfigError(f"invalid resources of container "
                                         f"{container.name}: {err}") from err
    resources = api_pb2.LinuxContainerResources(
        cpu_shares=milli_cpu_to_shares(cpu_request),
        oom_score_adj=oom_score_adj,
    )
    if memory_limit:
        resources.memory_limit_in_bytes = memory_limit
    try:
        hugepages = container_hugepage_limits(limits, opts.hugepage_sizes)
    except QuantityError as err:
        raise CreateContainerConfigError(f"invalid hugepages of container "
                                         f"{container.name}: {err}") from err
    resources.hugepage_limits.extend(api_pb2.HugepageLimit(page_size=size, limit=limit)
                                     for size, limit in hugepages)
    if opts.enforce_cpu_limits:
        resources.cpu_period = opts.cpu_cfs_quota_period_us
        resources.cpu_quota = milli_cpu_to_quota(cpu_limit, opts.cpu_cfs_quota_period_us)
    # Upstream's PreCreateContainer: the container's exclusive CPUs or the shared pool.
    cpus = opts.cpuset_for(pod, container.name or "") if opts.cpuset_for is not None else ""
    if cpus:
        resources.cpuset_cpus = cpus
    return resources


# --- security -----------------------------------------------------------------------------------

def effective_security_context(pod: V1Pod, container: V1Container) -> V1SecurityContext:
    """The container's securityContext with the pod-level defaults filled in."""
    own = container.security_context
    effective = V1SecurityContext(
        allow_privilege_escalation=own.allow_privilege_escalation if own else None,
        capabilities=own.capabilities if own else None,
        privileged=own.privileged if own else None,
        proc_mount=own.proc_mount if own else None,
        read_only_root_filesystem=own.read_only_root_filesystem if own else None,
        run_as_group=own.run_as_group if own else None,
        run_as_non_root=own.run_as_non_root if own else None,
        run_as_user=own.run_as_user if own else None,
        se_linux_options=own.se_linux_options if own else None,
        seccomp_profile=own.seccomp_profile if own else None,
    )
    pod_sc = pod.spec.security_context if pod.spec else None
    if pod_sc is not None:
        for name in ("run_as_user", "run_as_group", "run_as_non_root", "se_linux_options",
                     "seccomp_profile"):
            if getattr(effective, name) is None:
                setattr(effective, name, getattr(pod_sc, name))
    return effective


def image_user(image: api_pb2.Image | None) -> tuple[int | None, str]:
    """The image's configured user as (uid, username): uid when numeric; root when unset."""
    if image is not None:
        if image.HasField("uid"):
            return image.uid.value, ""
        if image.username:
            return None, image.username
    return 0, ""


def verify_run_as_non_root(pod: V1Pod, container: V1Container, effective: V1SecurityContext,
                           image_uid: int | None, image_username: str) -> None:
    if not effective.run_as_non_root:
        return
    where = f"(pod: {_pod_ident(pod)!r}, container: {container.name})"
    if effective.run_as_user is not None:
        if effective.run_as_user == 0:
            raise CreateContainerConfigError(
                f"container's runAsUser breaks non-root policy {where}")
        return
    if image_uid == 0:
        raise CreateContainerConfigError(
            f"container has runAsNonRoot and image will run as root {where}")
    if image_uid is None and image_username:
        raise CreateContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({image_username}), "
            f"cannot verify user is non-root {where}")


def container_security_context(pod: V1Pod, container: V1Container, opts: ContainerOptions,
                               image_uid: int | None, image_username: str
                               ) -> api_pb2.LinuxContainerSecurityContext:
    effective = effective_security_context(pod, container)
    verify_run_as_non_root(pod, container, effective, image_uid, image_username)
    default_seccomp = (api_pb2.SecurityProfile.RuntimeDefault if opts.seccomp_default
                       else api_pb2.SecurityProfile.Unconfined)
    unmasked = effective.proc_mount == "Unmasked"
    context = api_pb2.LinuxContainerSecurityContext(
        privileged=bool(effective.privileged),
        readonly_rootfs=bool(effective.read_only_root_filesystem),
        namespace_options=namespace_options_for_pod(pod),
        supplemental_groups=pod_supplemental_groups(pod),
        # Only an explicit allowPrivilegeEscalation: false sets no_new_privs.
        no_new_privs=effective.allow_privilege_escalation is False,
        masked_paths=[] if unmasked else list(DEFAULT_MASKED_PATHS),
        readonly_paths=[] if unmasked else list(DEFAULT_READONLY_PATHS),
        seccomp=seccomp_profile(effective.seccomp_profile, opts.seccomp_profile_root,
                                default_seccomp),
    )
    capabilities = effective.capabilities
    if capabilities is not None:
        context.capabilities.add_capabilities.extend(capabilities.add or [])
        context.capabilities.drop_capabilities.extend(capabilities.drop or [])
    if effective.run_as_user is not None:
        context.run_as_user.value = int(effective.run_as_user)
    elif image_uid is not None:
        context.run_as_user.value = image_uid
    else:
        context.run_as_username = image_username
    if effective.run_as_group is not None:
        context.run_as_group.value = int(effective.run_as_group)
    selinux = selinux_option(effective.se_linux_options)
    if selinux is not None:
        context.selinux_options.CopyFrom(selinux)
    return context


# --- mounts -------------------------------------------------------------------------------------

_MANAGED_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n"
_MANAGED_HOSTS_HOST_NETWORK_HEADER = "# Kubernetes-managed hosts file (host network).\n"
_LOOPBACK_HOSTS = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


def etc_hosts_content(pod: V1Pod, pod_ips: list[str], hostname: str, domain: str,
                      node_hosts_file: str = ETC_HOSTS_PATH) -> str:
    """The pod's /etc/hosts: its own names on its IPs plus ``hostAliases``.

    Host-network pods see the node's hosts file instead, plus their aliases.
    """
    spec = pod.spec
    if spec is not None and spec.host_network:
        try:
            with open(node_hosts_file, encoding="utf-8", errors="replace") as node_hosts:
                base = node_hosts.read()
        except OSError as err:
            raise CreateContainerConfigError(
                f"failed to read node hosts file {node_hosts_file}: {err}") from err
        text = _MANAGED_HOSTS_HOST_NETWORK_HEADER + base
    else:
        lines = [_MANAGED_HOSTS_HEADER, _LOOPBACK_HOSTS]
        for ip in pod_ips:
            if domain:
                lines.append(f"{ip}\t{hostname}.{domain}\t{hostname}\n")
            else:
                lines.append(f"{ip}\t{hostname}\n")
        text = "".join(lines)
    aliases = spec.host_aliases if spec is not None else None
    if aliases:
        text += "\n# Entries added by HostAliases.\n"
        for alias in aliases:
            text += f"{alias.ip}\t" + "\t".join(alias.hostnames or []) + "\n"
    return text


def _etc_hosts_mount(pod: V1Pod, pod_ips: list[str], opts: ContainerOptions) -> api_pb2.Mount:
    try:
        hostname, domain = generate_pod_hostname_and_domain(pod, opts.cluster_domain)
    except SandboxConfigError as err:
        raise CreateContainerConfigError(str(err)) from err
    content = etc_hosts_content(pod, pod_ips, hostname, domain, opts.node_hosts_file)
    path = os.path.join(opts.pod_dir, ETC_HOSTS_FILE_NAME)
    os.makedirs(opts.pod_dir, exist_ok=True)
    # Replaced in one step, so a running container never reads half a file, and through
    # a temporary name of its own, so two containers of the pod starting at once do not
    # write through the same one.
    write_file_atomically(path, content.encode("utf-8"), mode=0o644)
    return api_pb2.Mount(container_path=ETC_HOSTS_PATH, host_path=path)


def _termination_message_mount(container: V1Container,
                               opts: ContainerOptions) -> api_pb2.Mount | None:
    if not container.termination_message_path:
        return None
    directory = os.path.join(opts.pod_dir, "containers", container.name or "")
    os.makedirs(directory, exist_ok=True)
    # One file per container instance: the previous instance's message stays readable.
    path = os.path.join(directory, secrets.token_hex(4))
    with open(path, "w", encoding="utf-8"):
        pass
    # Any user in the container must be able to write its message, whatever the umask.
    os.chmod(path, 0o666)
    return api_pb2.Mount(container_path=container.termination_message_path, host_path=path)


def make_mounts(pod: V1Pod, container: V1Container, opts: ContainerOptions,
                env: Mapping[str, str] | None = None) -> list[api_pb2.Mount]:
    mounts: list[api_pb2.Mount] = []
    if container.volume_mounts:
        if opts.volume_mounter is None:
            first = container.volume_mounts[0]
            raise CreateContainerConfigError(
                f"cannot find volume {first.name!r} to mount into container {container.name!r}")
        try:
            mounts.extend(opts.volume_mounter.mounts_for(pod, container, env or {}))
        except ValueError as err:
            raise CreateContainerConfigError(str(err)) from err
    pod_ips = _pod_ips(pod, opts)
    overrides_hosts = any(m.container_path == ETC_HOSTS_PATH for m in mounts)
    if pod_ips and not overrides_hosts:
        mounts.append(_etc_hosts_mount(pod, pod_ips, opts))
    termination = _termination_message_mount(container, opts)
    if termination is not None:
        mounts.append(termination)
    return mounts


# --- the config ---------------------------------------------------------------------------------

def generate_container_config(container: V1Container, pod: V1Pod, restart_count: int,
                              image_ref: str, opts: ContainerOptions, *,
                              image_uid: int | None = 0,
                              image_username: str = "",
                              devices: DeviceRunOptions | None = None
                              ) -> api_pb2.ContainerConfig:
    """The ``CreateContainer`` config for instance ``restart_count`` of ``container``.

    ``image_ref`` is what the image manager returned; ``image_uid`` and
    ``image_username`` are the image's user (see ``image_user``), needed for
    the ``runAsNonRoot`` check; the default assumes root, as upstream does
    for images that declare no user. ``devices`` (the device manager's) come
    first, as upstream puts them: the spec's env and mounts follow and win, the
    kubelet's own annotations override the plugins'.
    """
    meta = pod.metadata
    namespace = (meta.namespace if meta else None) or ""
    name = (meta.name if meta else None) or ""
    uid = pod_uid(pod)
    security = container_security_context(pod, container, opts, image_uid, image_username)
    env = make_environment(pod, container, opts)
    command, args = expand_command_and_args(container, env)
    log_dir = os.path.join(pod_logs_directory(opts.pod_logs_dir, namespace, name, uid),
                           container.name or "")
    os.makedirs(log_dir, mode=0o755, exist_ok=True)
    devices = devices or NO_DEVICES
    device_env = {k: v for k, v in devices.envs.items() if k not in env}
    device_mounts = [api_pb2.Mount(container_path=m.container_path, host_path=m.host_path,
                                   readonly=m.read_only) for m in devices.mounts]
    config = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=container.name or "", attempt=restart_count),
        image=api_pb2.ImageSpec(image=image_ref, user_specified_image=container.image or ""),
        command=command,
        args=args,
        working_dir=container.working_dir or "",
        envs=[api_pb2.KeyValue(key=k, value=v) for k, v in [*device_env.items(), *env.items()]],
        mounts=[*device_mounts, *make_mounts(pod, container, opts, env)],
        devices=[api_pb2.Device(container_path=d.container_path, host_path=d.host_path,
                                permissions=d.permissions)
                 for d in devices.devices],
        labels=new_container_labels(container, pod),
        annotations={**devices.annotations,
                     **new_container_annotations(container, pod, restart_count)},
        log_path=container_log_path(container.name or "", restart_count),
        stdin=bool(container.stdin),
        stdin_once=bool(container.stdin_once),
        tty=bool(container.tty),
        linux=api_pb2.LinuxContainerConfig(
            resources=container_resources(pod, container, opts),
            security_context=security,
        ),
    )
    config.CDI_devices.extend(api_pb2.CDIDevice(name=name) for name in devices.cdi_devices)
    return config


__all__ = [
    "ContainerOptions",
    "CreateContainerConfigError",
    "EnvSource",
    "VolumeMounter",
    "container_resources",
    "container_security_context",
    "effective_security_context",
    "etc_hosts_content",
    "expand",
    "expand_command_and_args",
    "generate_container_config",
    "image_user",
    "make_environment",
    "make_mounts",
    "verify_run_as_non_root",
]
