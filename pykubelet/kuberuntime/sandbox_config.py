"""The CRI ``PodSandboxConfig`` for a pod: identity, hostname, DNS, ports, namespaces.

The sandbox is the pod's shared environment (network namespace, hostname,
resolv.conf) that every container of the pod joins. Everything the runtime
needs to build it is derived here from the pod spec and the node's DNS
settings, following upstream ``generatePodSandboxConfig`` and
``pkg/kubelet/network/dns``:

- hostname: ``spec.hostname`` or the pod name, cut to 63 characters; with
  ``spec.subdomain`` the pod also gets ``<sub>.<ns>.svc.<clusterDomain>``;
  host-network pods keep the node's hostname.
- DNS: ``ClusterFirst`` pods use the cluster DNS servers and search
  ``<ns>.svc.<domain> svc.<domain> <domain>`` before the node's own search
  list, with ``ndots:5``; ``Default`` (and ``ClusterFirst`` on the host
  network, and ``ClusterFirst`` when no cluster DNS is configured) copies the
  node's resolv.conf; ``None`` starts empty; ``spec.dnsConfig`` is merged last.
- ports: every ``hostPort`` of the pod's containers becomes a port mapping.

The pure helpers (hostname, DNS, namespaces, seccomp) are shared with
``container_config``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import (
    V1Pod,
    V1PodDNSConfig,
    V1SeccompProfile,
    V1SELinuxOptions,
)

from pykubelet.api import all_containers, pod_uid
from pykubelet.kuberuntime.labels import new_pod_sandbox_annotations, new_pod_sandbox_labels
from pykubelet.kuberuntime.logs import pod_logs_directory
from pykubelet.util import klog

HOSTNAME_MAX_LENGTH = 63
FQDN_MAX_LENGTH = 64
# Upstream limits once the expanded DNS configuration became GA (1.28).
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048
DEFAULT_DNS_OPTIONS = ("ndots:5",)

DNS_CLUSTER_FIRST = "ClusterFirst"
DNS_CLUSTER_FIRST_WITH_HOST_NET = "ClusterFirstWithHostNet"
DNS_DEFAULT = "Default"
DNS_NONE = "None"
# The Warning event a pod gets when it wants cluster DNS and the node has none.
MISSING_CLUSTER_DNS_REASON = "MissingClusterDNS"
MISSING_CLUSTER_DNS_MESSAGE = (f"kubelet does not have ClusterDNS IP configured and cannot create "
                               f"Pod using \"{DNS_CLUSTER_FIRST}\" policy. Falling back to "
                               f"\"{DNS_DEFAULT}\" policy.")


class SandboxConfigError(Exception):
    """The pod's spec or the node's DNS setup does not allow building its sandbox."""


@dataclass
class SandboxOptions:
    """The node settings that shape sandboxes (from the KubeletConfiguration)."""

    pod_logs_dir: str = "/var/log/pods"
    cluster_dns: list[str] = field(default_factory=list)
    cluster_domain: str = ""
    # An empty path means "no resolver": host-DNS pods then get a loopback server.
    resolv_conf: str = "/etc/resolv.conf"
    # The pod's cgroup (the container manager's pod<uid> cgroup), given to the runtime
    # as the sandbox's cgroup parent; None leaves placement to the runtime.
    pod_cgroup_parent: Callable[[V1Pod], str] | None = None
    node_ips: list[str] = field(default_factory=list)
    seccomp_profile_root: str = "/var/lib/kubelet/seccomp"


# --- hostname -----------------------------------------------------------------------------------

def _truncate_hostname(pod_name: str, hostname: str) -> str:
    if len(hostname) <= HOSTNAME_MAX_LENGTH:
        return hostname
    # A hostname ending in '-' or '.' is not a valid DNS label.
    truncated = hostname[:HOSTNAME_MAX_LENGTH].rstrip("-.")
    if not truncated:
        raise SandboxConfigError(f"hostname for pod {pod_name!r} was invalid: {hostname!r}")
    klog.v(4).info("Truncated pod hostname", pod=pod_name, hostname=truncated)
    return truncated


def generate_pod_hostname_and_domain(pod: V1Pod, cluster_domain: str) -> tuple[str, str]:
    """The pod's hostname and (with a subdomain) its DNS domain, as the kubelet assigns them."""
    meta, spec = pod.metadata, pod.spec
    name = (meta.name if meta else None) or ""
    namespace = (meta.namespace if meta else None) or ""
    hostname = (spec.hostname if spec else None) or name
    hostname = _truncate_hostname(name, hostname)
    subdomain = spec.subdomain if spec else None
    domain = f"{subdomain}.{namespace}.svc.{cluster_domain}" if subdomain else ""
    return hostname, domain


def kernel_hostname(pod: V1Pod, hostname: str, domain: str) -> str:
    """The name set in the pod's UTS namespace: the FQDN when ``setHostnameAsFQDN`` asks."""
    if pod.spec is not None and pod.spec.set_hostname_as_fqdn and domain:
        fqdn = f"{hostname}.{domain}"
        if len(fqdn) > FQDN_MAX_LENGTH:
            raise SandboxConfigError(
                f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} "
                f"is too long ({FQDN_MAX_LENGTH} characters is the max, {len(fqdn)} "
                f"characters requested)")
        return fqdn
    return hostname


# --- DNS ----------------------------------------------------------------------------------------

@dataclass
class ResolvConf:
    nameservers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


def parse_resolv_conf(text: str) -> ResolvConf:
    """Nameservers in order; the last ``search`` and ``options`` lines win, as in libc."""
    conf = ResolvConf()
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0]
        fields = line.split()
        if not fields:
            continue
        keyword, values = fields[0], fields[1:]
        if keyword == "nameserver" and values:
            conf.nameservers.append(values[0])
        elif keyword == "search":
            conf.searches = [v.rstrip(".") for v in values if v != "."]
        elif keyword == "options":
            conf.options = list(values)
    return conf


def _read_host_dns(resolv_conf: str) -> ResolvConf:
    if not resolv_conf:
        return ResolvConf()
    try:
        with open(resolv_conf, encoding="utf-8", errors="replace") as handle:
            return parse_resolv_conf(handle.read())
    except OSError as err:
        raise SandboxConfigError(f"could not open resolv conf file {resolv_conf}: {err}") from err


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _merge_dns_options(existing: Sequence[str],
                       extra: Iterable[tuple[str, str | None]]) -> list[str]:
    # Options are "name" or "name:value"; the pod's value for a name replaces the node's.
    merged: dict[str, str | None] = {}
    for option in existing:
        option_name, sep, option_value = option.partition(":")
        merged[option_name] = option_value if sep else None
    merged.update(extra)
    return [name if value is None else f"{name}:{value}" for name, value in merged.items()]


def _dns_policy(pod: V1Pod) -> str:
    spec = pod.spec
    policy = (spec.dns_policy if spec else None) or DNS_CLUSTER_FIRST
    host_network = bool(spec and spec.host_network)
    if policy == DNS_NONE:
        return DNS_NONE
    if policy == DNS_CLUSTER_FIRST_WITH_HOST_NET:
        return DNS_CLUSTER_FIRST
    if policy == DNS_CLUSTER_FIRST and not host_network:
        return DNS_CLUSTER_FIRST
    return DNS_DEFAULT


def _fit_dns_limits(config: ResolvConf, pod_name: str) -> ResolvConf:
    if len(config.nameservers) > MAX_DNS_NAMESERVERS:
        klog.warning("Nameserver limits exceeded, some nameservers have been omitted",
                     pod=pod_name, applied=" ".join(config.nameservers[:MAX_DNS_NAMESERVERS]))
        config.nameservers = config.nameservers[:MAX_DNS_NAMESERVERS]
    searches = config.searches[:MAX_DNS_SEARCH_PATHS]
    while searches and len(" ".join(searches)) > MAX_DNS_SEARCH_LIST_CHARS:
        searches.pop()
    if searches != config.searches:
        klog.warning("Search line limits exceeded, some search paths have been omitted",
                     pod=pod_name, applied=" ".join(searches))
        config.searches = searches
    return config


def missing_cluster_dns(pod: V1Pod, opts: SandboxOptions) -> bool:
    """The pod asks for cluster DNS but the node has no ``clusterDNS``: it gets the node's."""
    return _dns_policy(pod) == DNS_CLUSTER_FIRST and not opts.cluster_dns


def generate_pod_dns_config(pod: V1Pod, opts: SandboxOptions) -> api_pb2.DNSConfig:
    """The resolver settings of the pod's sandbox (upstream ``GetPodDNS``)."""
    policy = _dns_policy(pod)
    pod_name = (pod.metadata.name if pod.metadata else None) or ""
    namespace = (pod.metadata.namespace if pod.metadata else None) or ""
    config = ResolvConf() if policy == DNS_NONE else _read_host_dns(opts.resolv_conf)
    if policy == DNS_CLUSTER_FIRST and not opts.cluster_dns:
        # Reported once per pod by the caller (PodSandboxes), not on every config built.
        policy = DNS_DEFAULT
    if policy == DNS_CLUSTER_FIRST:
        config.nameservers = list(opts.cluster_dns)
        if opts.cluster_domain:
            domain = opts.cluster_domain
            cluster_search = [f"{namespace}.svc.{domain}", f"svc.{domain}", domain]
            config.searches = _unique([*cluster_search, *config.searches])
        config.options = list(DEFAULT_DNS_OPTIONS)
    elif policy == DNS_DEFAULT and not opts.resolv_conf:
        # No resolver file: a server on the local machine is what libc would use anyway.
        servers = ["::1" if _is_ipv6(ip) else "127.0.0.1" for ip in opts.node_ips]
        config.nameservers = _unique(servers) or ["127.0.0.1"]
        config.searches = ["."]
    pod_dns: V1PodDNSConfig | None = pod.spec.dns_config if pod.spec else None
    if pod_dns is not None:
        config.nameservers = _unique([*config.nameservers, *(pod_dns.nameservers or [])])
        config.searches = _unique([*config.searches, *(pod_dns.searches or [])])
        config.options = _merge_dns_options(
            config.options, [(o.name, o.value) for o in pod_dns.options or [] if o.name])
    config = _fit_dns_limits(config, pod_name)
    return api_pb2.DNSConfig(servers=config.nameservers, searches=config.searches,
                             options=config.options)


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


# --- ports, namespaces, security ----------------------------------------------------------------

_PROTOCOLS = {"TCP": api_pb2.TCP, "UDP": api_pb2.UDP, "SCTP": api_pb2.SCTP}


def make_port_mappings(pod: V1Pod) -> list[api_pb2.PortMapping]:
    """One mapping per distinct host port of the pod's containers.

    Ports without a ``hostPort`` are left out: the runtime publishes nothing
    for them (containerd skips them too), they only document the container.
    """
    mappings: list[api_pb2.PortMapping] = []
    seen: set[tuple[str, int, int, str]] = set()
    for container in (pod.spec.containers or []) if pod.spec else []:
        for port in container.ports or []:
            if not port.host_port:
                continue
            protocol = (port.protocol or "TCP").upper()
            key = (protocol, port.container_port, port.host_port, port.host_ip or "")
            if key in seen:
                klog.warning("Port mapping already exists, skipping duplicate",
                             container=container.name, hostPort=port.host_port,
                             protocol=protocol)
                continue
            seen.add(key)
            mappings.append(api_pb2.PortMapping(
                protocol=_PROTOCOLS.get(protocol, api_pb2.TCP),
                container_port=port.container_port, host_port=port.host_port,
                host_ip=port.host_ip or ""))
    return mappings


def namespace_options_for_pod(pod: V1Pod) -> api_pb2.NamespaceOption:
    """Which Linux namespaces the pod shares with the node or between its containers."""
    spec = pod.spec
    host_network = bool(spec and spec.host_network)
    host_pid = bool(spec and spec.host_pid)
    host_ipc = bool(spec and spec.host_ipc)
    share_pid = bool(spec and spec.share_process_namespace)
    if host_pid:
        pid = api_pb2.NODE
    elif share_pid:
        pid = api_pb2.POD
    else:
        pid = api_pb2.CONTAINER
    return api_pb2.NamespaceOption(
        network=api_pb2.NODE if host_network else api_pb2.POD,
        pid=pid,
        ipc=api_pb2.NODE if host_ipc else api_pb2.POD,
    )


def seccomp_profile(profile: V1SeccompProfile | None, profile_root: str,
                    default: int = api_pb2.SecurityProfile.Unconfined
                    ) -> api_pb2.SecurityProfile:
    """The CRI seccomp profile for a pod/container ``seccompProfile`` field."""
    if profile is None or not profile.type:
        return api_pb2.SecurityProfile(profile_type=default)  # type: ignore[arg-type]
    if profile.type == "RuntimeDefault":
        return api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault)
    if profile.type == "Localhost":
        ref = os.path.join(profile_root, profile.localhost_profile or "")
        return api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Localhost,
                                       localhost_ref=ref)
    return api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Unconfined)


def has_privileged_container(pod: V1Pod) -> bool:
    return any(c.security_context is not None and c.security_context.privileged
               for c in all_containers(pod))


def selinux_option(options: V1SELinuxOptions | None) -> api_pb2.SELinuxOption | None:
    if options is None:
        return None
    return api_pb2.SELinuxOption(user=options.user or "", role=options.role or "",
                                 type=options.type or "", level=options.level or "")


def pod_supplemental_groups(pod: V1Pod) -> list[int]:
    sc = pod.spec.security_context if pod.spec else None
    if sc is None:
        return []
    groups = [] if sc.fs_group is None else [int(sc.fs_group)]
    groups.extend(int(g) for g in sc.supplemental_groups or [])
    return groups


def _linux_sandbox_config(pod: V1Pod, opts: SandboxOptions) -> api_pb2.LinuxPodSandboxConfig:
    sc = pod.spec.security_context if pod.spec else None
    security = api_pb2.LinuxSandboxSecurityContext(
        namespace_options=namespace_options_for_pod(pod),
        privileged=has_privileged_container(pod),
        # The pause container needs no syscalls beyond the runtime's default profile,
        # whatever the pod asks for its own containers.
        seccomp=api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault),
        supplemental_groups=pod_supplemental_groups(pod),
    )
    sysctls: dict[str, str] = {}
    if sc is not None:
        if sc.run_as_user is not None:
            security.run_as_user.value = int(sc.run_as_user)
        if sc.run_as_group is not None:
            security.run_as_group.value = int(sc.run_as_group)
        selinux = selinux_option(sc.se_linux_options)
        if selinux is not None:
            security.selinux_options.CopyFrom(selinux)
        sysctls = {s.name: s.value for s in sc.sysctls or [] if s.name}
    cgroup_parent = opts.pod_cgroup_parent(pod) if opts.pod_cgroup_parent is not None else ""
    return api_pb2.LinuxPodSandboxConfig(cgroup_parent=cgroup_parent,
                                         security_context=security, sysctls=sysctls)


def generate_pod_sandbox_config(pod: V1Pod, attempt: int,
                                opts: SandboxOptions) -> api_pb2.PodSandboxConfig:
    """Everything ``RunPodSandbox`` needs for ``pod``; ``attempt`` counts re-creations."""
    meta = pod.metadata
    name = (meta.name if meta else None) or ""
    namespace = (meta.namespace if meta else None) or ""
    uid = pod_uid(pod)
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace=namespace, uid=uid,
                                            attempt=attempt),
        log_directory=pod_logs_directory(opts.pod_logs_dir, namespace, name, uid),
        dns_config=generate_pod_dns_config(pod, opts),
        port_mappings=make_port_mappings(pod),
        labels=new_pod_sandbox_labels(pod),
        annotations=new_pod_sandbox_annotations(pod),
        linux=_linux_sandbox_config(pod, opts),
    )
    if not (pod.spec and pod.spec.host_network):
        hostname, domain = generate_pod_hostname_and_domain(pod, opts.cluster_domain)
        config.hostname = kernel_hostname(pod, hostname, domain)
    return config


__all__ = [
    "MISSING_CLUSTER_DNS_MESSAGE",
    "MISSING_CLUSTER_DNS_REASON",
    "SandboxConfigError",
    "SandboxOptions",
    "generate_pod_dns_config",
    "generate_pod_hostname_and_domain",
    "generate_pod_sandbox_config",
    "has_privileged_container",
    "kernel_hostname",
    "make_port_mappings",
    "missing_cluster_dns",
    "namespace_options_for_pod",
    "parse_resolv_conf",
    "pod_supplemental_groups",
    "seccomp_profile",
    "selinux_option",
]
