"""Validation of a defaulted ``KubeletConfiguration``, after upstream's
``ValidateKubeletConfiguration``.

Every check runs and every failure is reported at once, each naming the field (and the
flag that sets it, when there is one) and the offending value, so a broken config is
fixed in one edit. The checks are upstream's, plus the ones upstream performs later at
start-up (cgroup driver, eviction thresholds, reserved resources, IP addresses) because
pykubelet wants a bad value to stop it before anything starts.
"""

from __future__ import annotations

import ipaddress
import os
import re
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pykubelet.config.features import FeatureGates
from pykubelet.config.types import (
    KubeletConfiguration,
    Taint,
    config_fields,
    is_config_struct,
)
from pykubelet.config.units import (
    SECOND,
    Duration,
    Quantity,
    UnitError,
    parse_grace_period,
    parse_min_reclaim,
    parse_percentage,
    parse_threshold_value,
)

PREFIX: Final = "invalid configuration: "

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOPOLOGY_POLICIES: Final = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_SCOPES: Final = ("container", "pod")
HAIRPIN_MODES: Final = ("none", "hairpin-veth", "promiscuous-bridge")
CGROUP_DRIVERS: Final = ("cgroupfs", "systemd")
CPU_MANAGER_POLICIES: Final = ("none", "static")
MEMORY_MANAGER_POLICIES: Final = ("None", "Static")
MEMORY_RESERVATION_POLICIES: Final = ("None", "TieredReservation")
AUTHORIZATION_MODES: Final = ("AlwaysAllow", "Webhook")
CHANGE_DETECTION_STRATEGIES: Final = ("Get", "Cache", "Watch")
IMAGE_PULL_POLICIES: Final = ("NeverVerify", "NeverVerifyPreloadedImages",
                              "NeverVerifyAllowlistedImages", "AlwaysVerify")
SWAP_BEHAVIORS: Final = ("", "NoSwap", "LimitedSwap")
LOGGING_FORMATS: Final = ("text", "json")
TLS_VERSIONS: Final = ("", "VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13")
RESERVABLE_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage", "pid")
ENFORCE_PODS: Final = "pods"
ENFORCE_NONE: Final = "none"
ENFORCE_SYSTEM: Final = ("system-reserved", "system-reserved-compressible")
ENFORCE_KUBE: Final = ("kube-reserved", "kube-reserved-compressible")

_DNS1123_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE: Final = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME_RE: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CPUSET_RE: Final = re.compile(r"^\d+(-\d+)?$")
_CPU_ID_DIGITS: Final = 18  # upstream parses CPU ids with strconv.Atoi (64 bits)


def _collect_flags() -> dict[str, str]:
    """Map dotted JSON paths to their flag names, from the declarations in ``types``."""
    flags: dict[str, str] = {}

    def walk(cls: type[Any], prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f, spec in config_fields(cls):
            path = f"{prefix}{spec.json}"
            if spec.flag:
                flags[path] = spec.flag
            annotation = hints[f.name]
            if is_config_struct(annotation):
                walk(annotation, f"{path}.")

    walk(KubeletConfiguration, "")
    return flags


FLAG_FOR_FIELD: Final[Mapping[str, str]] = _collect_flags()


def label(path: str) -> str:
    """``healthzPort (--healthz-port)``: the field and, when it has one, its flag."""
    flag = FLAG_FOR_FIELD.get(path)
    return f"{path} (--{flag})" if flag else path


def is_qualified_name(name: str) -> list[str]:
    """Upstream ``IsQualifiedName``: an optional DNS subdomain prefix and a 63-char name."""
    errors: list[str] = []
    prefix, sep, short = name.rpartition("/")
    if not sep:
        short = name
    elif prefix == "" or "/" in prefix:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                "with an optional DNS subdomain prefix and '/'"]
    elif len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix):
        errors.append(f"prefix part {prefix!r} must be a DNS-1123 subdomain")
    if not short:
        errors.append("name part must be non-empty")
    elif len(short) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME_RE.match(short):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.', "
                      "and must start and end with an alphanumeric character")
    return errors


def is_valid_label_value(value: str) -> list[str]:
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if not _LABEL_VALUE_RE.match(value):
        return ["a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character"]
    return []


def taint_errors(taint: Taint) -> list[str]:
    errors = [f"invalid taint key {taint.key!r}: {msg}" for msg in is_qualified_name(taint.key)]
    errors += [f"invalid taint value {taint.value!r}: {msg}"
               for msg in is_valid_label_value(taint.value)]
    if taint.effect not in TAINT_EFFECTS:
        errors.append(f"invalid taint effect {taint.effect!r}, must be one of "
                      f"{', '.join(TAINT_EFFECTS)}")
    return errors


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _cpuset_error(text: str) -> str | None:
    for part in text.split(","):
        part = part.strip()
        shown = repr(part if len(part) <= 64 else part[:64] + "...")
        if not _CPUSET_RE.match(part):
            return f"invalid cpuset element {shown}"
        bounds = part.split("-")
        if any(len(bound.lstrip("0")) > _CPU_ID_DIGITS for bound in bounds):
            return f"invalid cpuset element {shown}: value out of range"
        if len(bounds) == 2 and int(bounds[0]) > int(bounds[1]):
            return f"invalid range {shown} (start > end)"
    return None


class _Errors:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(PREFIX + message)

    def one_of(self, path: str, value: str, allowed: Iterable[str]) -> None:
        options = list(allowed)
        if value not in options:
            rendered = ", ".join(f'"{option}"' for option in options)
            self.add(f'{label(path)} "{value}" must be one of: {rendered}')

    def port(self, path: str, value: int, allow_zero: bool) -> None:
        if allow_zero and value == 0:
            return
        if not 1 <= value <= 65535:
            self.add(f"{label(path)} {value} must be between 1 and 65535, inclusive")

    def non_negative(self, path: str, value: int) -> None:
        if value < 0:
            self.add(f"{label(path)} {value} must not be a negative number")

    def in_range(self, path: str, value: int, low: int, high: int) -> None:
        if not low <= value <= high:
            self.add(f"{label(path)} {value} must be between {low} and {high}, inclusive")

    def positive_duration(self, path: str, value: Duration) -> None:
        if value.nanoseconds <= 0:
            self.add(f"{label(path)} {value} must be greater than zero")


def validate_configuration(config: KubeletConfiguration) -> list[str]:
    """Every problem with ``config``, each as ``invalid configuration: ...``; empty if valid."""
    errs = _Errors()
    gates = FeatureGates()
    gate_errors = FeatureGates.check(config.feature_gates)
    for message in gate_errors:
        errs.add(f"{label('featureGates')}: {message}")
    if not gate_errors:
        gates.set_from_map(config.feature_gates)
        for message in gates.dependency_errors():
            errs.add(f"{label('featureGates')}: {message}")

    _validate_server(config, errs, gates)
    _validate_frequencies(config, errs)
    _validate_limits(config, errs, gates)
    _validate_images(config, errs, gates)
    _validate_managers(config, errs)
    _validate_shutdown(config, errs, gates)
    _validate_node_allocatable(config, errs)
    _validate_eviction(config, errs)
    _validate_logging_and_misc(config, errs, gates)
    return errs.items


def _validate_server(config: KubeletConfiguration, errs: _Errors, gates: FeatureGates) -> None:
    errs.port("port", config.port, allow_zero=False)
    if config.read_only_port != 0 and not 1 <= config.read_only_port <= 65535:
        errs.add(f"{label('readOnlyPort')} {config.read_only_port} must be between 0 and 65535, "
                 f"inclusive")
    errs.port("healthzPort", config.healthz_port, allow_zero=True)
    for path, address in (("address", config.address),
                          ("healthzBindAddress", config.healthz_bind_address)):
        if not _is_ip(address):
            errs.add(f'{label(path)} "{address}" is not a valid IP address')
    for server in config.cluster_dns:
        if not _is_ip(server):
            errs.add(f'{label("clusterDNS")} "{server}" is not a valid IP address')
    errs.one_of("authorization.mode", config.authorization.mode, AUTHORIZATION_MODES)
    if config.tls_min_version not in TLS_VERSIONS:
        errs.add(f'{label("tlsMinVersion")} "{config.tls_min_version}" must be one of: '
                 f'{", ".join(v for v in TLS_VERSIONS if v)}')
    if bool(config.tls_cert_file) != bool(config.tls_private_key_file):
        errs.add(f"{label('tlsCertFile')} and {label('tlsPrivateKeyFile')} must be set together")
    if config.server_tls_bootstrap and not gates.enabled("RotateKubeletServerCertificate"):
        errs.add(f"{label('serverTLSBootstrap')} true requires feature gate "
                 f"RotateKubeletServerCertificate")
    if not config.container_runtime_endpoint:
        errs.add("the containerRuntimeEndpoint (--container-runtime-endpoint) was not specified "
                 "or empty")
    if config.run_once:
        errs.add(f"{label('runOnce')} true, runonce mode has been deprecated and should not be set")


def _validate_frequencies(config: KubeletConfiguration, errs: _Errors) -> None:
    # Upstream turns a zero into the default while decoding; a zero or negative value that
    # survives (from a flag, or written negative) would make the loops spin or never run.
    for path, value in (
        ("syncFrequency", config.sync_frequency),
        ("fileCheckFrequency", config.file_check_frequency),
        ("httpCheckFrequency", config.http_check_frequency),
        ("nodeStatusUpdateFrequency", config.node_status_update_frequency),
        ("nodeStatusReportFrequency", config.node_status_report_frequency),
        ("runtimeRequestTimeout", config.runtime_request_timeout),
        ("cpuManagerReconcilePeriod", config.cpu_manager_reconcile_period),
        ("evictionPressureTransitionPeriod", config.eviction_pressure_transition_period),
        ("draManagerReconcilePeriod", config.dra_manager_reconcile_period),
        ("authentication.webhook.cacheTTL", config.authentication.webhook.cache_ttl),
    ):
        errs.positive_duration(path, value)
    for path, value in (
        ("authorization.webhook.cacheAuthorizedTTL",
         config.authorization.webhook.cache_authorized_ttl),
        ("authorization.webhook.cacheUnauthorizedTTL",
         config.authorization.webhook.cache_unauthorized_ttl),
        ("streamingConnectionIdleTimeout", config.streaming_connection_idle_timeout),
    ):
        if value.nanoseconds < 0:
            errs.add(f"{label(path)} {value} must not be negative")
    if config.node_lease_duration_seconds <= 0:
        errs.add(f"nodeLeaseDurationSeconds {config.node_lease_duration_seconds} must be greater "
                 f"than 0")


def _validate_limits(config: KubeletConfiguration, errs: _Errors, gates: FeatureGates) -> None:
    errs.non_negative("eventBurst", config.event_burst)
    errs.non_negative("eventRecordQPS", config.event_record_qps)
    errs.non_negative("kubeAPIBurst", config.kube_api_burst)
    errs.non_negative("kubeAPIQPS", config.kube_api_qps)
    errs.non_negative("registryBurst", config.registry_burst)
    errs.non_negative("registryPullQPS", config.registry_pull_qps)
    errs.non_negative("maxOpenFiles", config.max_open_files)
    errs.non_negative("maxPods", config.max_pods)
    errs.non_negative("podsPerCore", config.pods_per_core)
    errs.in_range("oomScoreAdj", config.oom_score_adj, -1000, 1000)
    errs.in_range("iptablesDropBit", config.iptables_drop_bit, 0, 31)
    errs.in_range("iptablesMasqueradeBit", config.iptables_masquerade_bit, 0, 31)
    if config.node_status_max_images < -1:
        errs.add(f"{label('nodeStatusMaxImages')} {config.node_status_max_images} must be -1 or "
                 f"greater")
    parallel = config.max_parallel_image_pulls
    if parallel is not None and parallel < 1:
        errs.add(f"maxParallelImagePulls {parallel} must be a positive number")
    if config.serialize_image_pulls and parallel is not None and parallel > 1:
        errs.add(f"maxParallelImagePulls {parallel} cannot be larger than 1 unless "
                 f"{label('serializeImagePulls')} is set to false")
    if config.system_cgroups and not config.cgroup_root:
        errs.add(f"{label('systemCgroups')} was specified and {label('cgroupRoot')} was not "
                 f"specified")
    period = config.cpu_cfs_quota_period
    if not gates.enabled("CustomCPUCFSQuotaPeriod"):
        if period != Duration.of(milliseconds=100):
            errs.add(f"{label('cpuCFSQuotaPeriod')} {period} requires feature gate "
                     f"CustomCPUCFSQuotaPeriod")
    elif not Duration.of(milliseconds=1) <= period <= Duration.of(seconds=1):
        errs.add(f"{label('cpuCFSQuotaPeriod')} {period} must be between 1ms and 1sec, inclusive")
    if config.container_log_max_files <= 1:
        errs.add(f"{label('containerLogMaxFiles')} {config.container_log_max_files} must be "
                 f"greater than 1")
    if config.container_log_max_workers < 1:
        errs.add(f"containerLogMaxWorkers {config.container_log_max_workers} must be greater "
                 f"than or equal to 1")
    if config.container_log_monitor_interval.nanoseconds < 3 * SECOND:
        errs.add(f"containerLogMonitorInterval {config.container_log_monitor_interval} must be a "
                 f"positive time duration greater than or equal to 3s")
    try:
        size = Quantity.parse(config.container_log_max_size)
        if size.sign() < 0:
            errs.add(f"{label('containerLogMaxSize')} {config.container_log_max_size} must not "
                     f"be negative")
    except UnitError as err:
        errs.add(f'{label("containerLogMaxSize")} "{config.container_log_max_size}": {err}')
    for index, taint in enumerate(config.register_with_taints):
        for message in taint_errors(taint):
            errs.add(f"{label('registerWithTaints')}[{index}]: {message}")
        if taint.time_added is not None:
            errs.add(f"{label('registerWithTaints')}[{index}]: taint.timeAdded must not be set")


def _validate_images(config: KubeletConfiguration, errs: _Errors, gates: FeatureGates) -> None:
    high = config.image_gc_high_threshold_percent
    low = config.image_gc_low_threshold_percent
    errs.in_range("imageGCHighThresholdPercent", high, 0, 100)
    errs.in_range("imageGCLowThresholdPercent", low, 0, 100)
    if low >= high:
        errs.add(f"{label('imageGCLowThresholdPercent')} {low} must be less than "
                 f"{label('imageGCHighThresholdPercent')} {high}")
    minimum, maximum = config.image_minimum_gc_age, config.image_maximum_gc_age
    if minimum.nanoseconds < 0:
        errs.add(f"{label('imageMinimumGCAge')} {minimum} must not be negative")
    if maximum.nanoseconds < 0:
        errs.add(f"imageMaximumGCAge {maximum} must not be negative")
    if maximum.nanoseconds > 0 and maximum <= minimum:
        errs.add(f"imageMaximumGCAge {maximum} must be greater than imageMinimumGCAge {minimum}")
    policy = config.image_pull_credentials_verification_policy
    allowlist = config.preloaded_images_verification_allowlist
    if gates.enabled("KubeletEnsureSecretPulledImages"):
        errs.one_of("imagePullCredentialsVerificationPolicy", policy, IMAGE_PULL_POLICIES)
        if allowlist and policy != "NeverVerifyAllowlistedImages":
            errs.add('preloadedImagesVerificationAllowlist can only be set when '
                     'imagePullCredentialsVerificationPolicy is "NeverVerifyAllowlistedImages"')
    else:
        if policy:
            errs.add("imagePullCredentialsVerificationPolicy must not be set if "
                     "KubeletEnsureSecretPulledImages feature gate is not enabled")
        if allowlist:
            errs.add("preloadedImagesVerificationAllowlist must not be set if "
                     "KubeletEnsureSecretPulledImages feature gate is not enabled")


def _validate_managers(config: KubeletConfiguration, errs: _Errors) -> None:
    errs.one_of("cgroupDriver", config.cgroup_driver, CGROUP_DRIVERS)
    errs.one_of("cpuManagerPolicy", config.cpu_manager_policy, CPU_MANAGER_POLICIES)
    errs.one_of("memoryManagerPolicy", config.memory_manager_policy, MEMORY_MANAGER_POLICIES)
    # Upstream's two topology manager messages render their choices differently.
    if config.topology_manager_policy not in TOPOLOGY_POLICIES:
        choices = " ".join(f'"{policy}"' for policy in TOPOLOGY_POLICIES)
        errs.add(f'{label("topologyManagerPolicy")} "{config.topology_manager_policy}" must be '
                 f"one of: [{choices}]")
    if config.topology_manager_scope not in TOPOLOGY_SCOPES:
        errs.add(f'{label("topologyManagerScope")} "{config.topology_manager_scope}" must be '
                 f'one of: "{TOPOLOGY_SCOPES[0]}", or "{TOPOLOGY_SCOPES[1]}"')
    errs.one_of("hairpinMode", config.hairpin_mode, HAIRPIN_MODES)
    errs.one_of("configMapAndSecretChangeDetectionStrategy",
                config.config_map_and_secret_change_detection_strategy,
                CHANGE_DETECTION_STRATEGIES)
    errs.one_of("memoryReservationPolicy", config.memory_reservation_policy,
                MEMORY_RESERVATION_POLICIES)
    if config.reserved_system_cpus:
        if config.system_reserved_cgroup or config.kube_reserved_cgroup:
            errs.add(f"can't use {label('reservedSystemCPUs')} with "
                     f"{label('systemReservedCgroup')} or {label('kubeReservedCgroup')}")
        problem = _cpuset_error(config.reserved_system_cpus)
        if problem:
            errs.add(f'unable to parse {label("reservedSystemCPUs")} '
                     f'"{config.reserved_system_cpus}": {problem}')
    seen: set[tuple[int, str]] = set()
    for index, reservation in enumerate(config.reserved_memory):
        where = f"{label('reservedMemory')}[{index}]"
        if not reservation.limits:
            errs.add(f"{where}: the reserved memory has no limits for NUMA node "
                     f"{reservation.numa_node}")
        for resource, amount in reservation.limits.items():
            key = (reservation.numa_node, resource)
            if key in seen:
                errs.add(f"{where}: the reserved memory has a duplicate value for NUMA node "
                         f"{reservation.numa_node} and resource {resource}")
            seen.add(key)
            if resource != "memory" and not resource.startswith("hugepages-"):
                errs.add(f"{where}: the limit type {resource!r} for NUMA node "
                         f"{reservation.numa_node} is not supported, only memory and "
                         f"hugepages-<HugePageSize> are accepted")
            try:
                if Quantity.parse(amount).sign() <= 0:
                    errs.add(f"{where}: reserved {resource} {amount} must be greater than zero")
            except UnitError as err:
                errs.add(f'{where}: {resource} "{amount}": {err}')


def _validate_shutdown(config: KubeletConfiguration, errs: _Errors, gates: FeatureGates) -> None:
    period = config.shutdown_grace_period
    critical = config.shutdown_grace_period_critical_pods
    if gates.enabled("GracefulNodeShutdown"):
        if critical > period:
            errs.add(f"shutdownGracePeriodCriticalPods {critical} must be <= shutdownGracePeriod "
                     f"{period}")
        for path, value in (("shutdownGracePeriod", period),
                            ("shutdownGracePeriodCriticalPods", critical)):
            if value.nanoseconds < 0 or 0 < value.nanoseconds < SECOND:
                errs.add(f"{path} {value} must be either zero or otherwise >= 1 sec")
    elif period or critical:
        errs.add("specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires "
                 "feature gate GracefulNodeShutdown")
    by_priority = config.shutdown_grace_period_by_pod_priority
    if gates.enabled("GracefulNodeShutdownBasedOnPodPriority"):
        if by_priority and (period or critical):
            errs.add("Cannot specify both shutdownGracePeriodByPodPriority and "
                     "shutdownGracePeriod at the same time")
    elif by_priority:
        errs.add("Specifying shutdownGracePeriodByPodPriority requires feature gate "
                 "GracefulNodeShutdownBasedOnPodPriority")
    swap = config.memory_swap.swap_behavior
    if gates.enabled("NodeSwap"):
        if swap not in SWAP_BEHAVIORS:
            errs.add(f'memorySwap.swapBehavior "{swap}" must be one of: "", "LimitedSwap" or '
                     f'"NoSwap"')
    elif swap:
        errs.add("memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled")
    restart = config.crash_loop_back_off.max_container_restart_period
    if gates.enabled("KubeletCrashLoopBackOffMax"):
        if restart is None:
            errs.add("FeatureGate KubeletCrashLoopBackOffMax is enabled, "
                     "crashLoopBackOff.maxContainerRestartPeriod must be set")
        elif not SECOND <= restart.nanoseconds <= 300 * SECOND:
            errs.add(f"crashLoopBackOff.maxContainerRestartPeriod {restart} must be set between "
                     f"1s and 300s")
    elif restart is not None:
        errs.add("FeatureGate KubeletCrashLoopBackOffMax not enabled, "
                 "crashLoopBackOff.maxContainerRestartPeriod must not be set")


def _validate_node_allocatable(config: KubeletConfiguration, errs: _Errors) -> None:
    enforcements = config.enforce_node_allocatable
    field = label("enforceNodeAllocatable")
    chosen = set(enforcements)
    for group in (ENFORCE_SYSTEM, ENFORCE_KUBE):
        if all(option in chosen for option in group):
            errs.add(f'both "{group[0]}" and "{group[1]}" cannot be specified together in {field}')
    seen: set[str] = set()
    for value in enforcements:
        if value in seen:
            errs.add(f'duplicated enforcements "{value}" in {field}')
            continue
        seen.add(value)
        if value == ENFORCE_NONE:
            if len(enforcements) > 1:
                errs.add(f'{field} may not contain additional enforcements when "none" is '
                         f'specified')
            continue
        if value in ENFORCE_SYSTEM and not config.system_reserved_cgroup:
            errs.add(f"{label('systemReservedCgroup')} must be specified when "
                     f'"{value}" is included in {field}')
        elif value in ENFORCE_KUBE and not config.kube_reserved_cgroup:
            errs.add(f"{label('kubeReservedCgroup')} must be specified when "
                     f'"{value}" is included in {field}')
        elif value != ENFORCE_PODS and value not in ENFORCE_SYSTEM + ENFORCE_KUBE:
            options = ", ".join(f'"{o}"' for o in (ENFORCE_PODS, *ENFORCE_SYSTEM, *ENFORCE_KUBE,
                                                   ENFORCE_NONE))
            errs.add(f'option "{value}" specified for {field}. Valid options are {options}')
            continue
        if not config.cgroups_per_qos:
            errs.add(f"{label('cgroupsPerQOS')} must be set to true when \"{value}\" is "
                     f"contained in {field}")
    for path, reserved in (("systemReserved", config.system_reserved),
                           ("kubeReserved", config.kube_reserved)):
        for resource, amount in reserved.items():
            if resource not in RESERVABLE_RESOURCES:
                errs.add(f'{label(path)} cannot reserve "{resource}" resource; supported: '
                         f'{", ".join(RESERVABLE_RESOURCES)}')
                continue
            try:
                if Quantity.parse(amount).sign() < 0:
                    errs.add(f'{label(path)} resource quantity for "{resource}" cannot be '
                             f'negative: {amount}')
            except UnitError as err:
                errs.add(f'{label(path)} {resource}="{amount}": {err}')
    for resource, amount in config.qos_reserved.items():
        if resource != "memory":
            errs.add(f'{label("qosReserved")} "{resource}" is not supported, only "memory" is')
            continue
        try:
            percent = parse_percentage(amount)
        except UnitError as err:
            errs.add(f'{label("qosReserved")} memory="{amount}": {err}')
            continue
        if not 0 <= percent <= 100:
            errs.add(f'{label("qosReserved")} memory="{amount}" must be between 0% and 100%')


def _validate_eviction(config: KubeletConfiguration, errs: _Errors) -> None:
    for path, thresholds in (("evictionHard", config.eviction_hard),
                             ("evictionSoft", config.eviction_soft)):
        for signal, value in thresholds.items():
            try:
                parse_threshold_value(signal, value)
            except UnitError as err:
                errs.add(f'{label(path)} {signal}="{value}": {err}')
    for signal, value in config.eviction_soft_grace_period.items():
        try:
            parse_grace_period(signal, value)
        except UnitError as err:
            errs.add(f'{label("evictionSoftGracePeriod")} {signal}="{value}": {err}')
    for signal in config.eviction_soft:
        if signal not in config.eviction_soft_grace_period:
            errs.add(f"{label('evictionSoftGracePeriod')}: grace period must be specified for "
                     f"the soft eviction threshold {signal}")
    for signal, value in config.eviction_minimum_reclaim.items():
        try:
            parse_min_reclaim(signal, value)
        except UnitError as err:
            errs.add(f'{label("evictionMinimumReclaim")} {signal}="{value}": {err}')


def _validate_logging_and_misc(config: KubeletConfiguration, errs: _Errors,
                               gates: FeatureGates) -> None:
    errs.one_of("logging.format", config.logging.format, LOGGING_FORMATS)
    if config.logging.flush_frequency.nanoseconds <= 0:
        errs.add(f"{label('logging.flushFrequency')} {config.logging.flush_frequency} must be "
                 f"greater than zero")
    tracing = config.tracing
    if tracing is not None and tracing.sampling_rate_per_million is not None and not (
            0 <= tracing.sampling_rate_per_million <= 1_000_000):
        errs.add(f"tracing.samplingRatePerMillion {tracing.sampling_rate_per_million} must be "
                 f"between 0 and 1000000, inclusive")
    factor = config.memory_throttling_factor
    if not 0 < factor <= 1.0:
        errs.add(f"memoryThrottlingFactor {factor} must be greater than 0 and less than or equal "
                 f"to 1.0")
    if config.memory_reservation_policy == "TieredReservation" and not gates.enabled("MemoryQoS"):
        errs.add('memoryReservationPolicy "TieredReservation" requires MemoryQoS feature gate to '
                 'be enabled')
    if config.enable_system_log_query and not gates.enabled("NodeLogQuery"):
        errs.add("NodeLogQuery feature gate is required for enableSystemLogQuery")
    if config.enable_system_log_query and not config.enable_system_log_handler:
        errs.add("enableSystemLogHandler is required for enableSystemLogQuery")
    logs_dir = config.pod_logs_dir
    if not logs_dir:
        errs.add("podLogsDir was not specified")
    elif not os.path.isabs(logs_dir):
        errs.add(f'podLogsDir "{logs_dir}" must be an absolute path')
    elif os.path.normpath(logs_dir) != logs_dir:
        errs.add(f'podLogsDir "{logs_dir}" must be normalized')
    if not logs_dir.isascii():
        errs.add(f'podLogsDir "{logs_dir}" must contain ASCII characters only')
    namespaces = config.user_namespaces
    if namespaces is not None and namespaces.ids_per_pod is not None:
        ids = namespaces.ids_per_pod
        if ids <= 0 or ids % 65536 != 0 or ids >= 1 << 32:
            errs.add(f"userNamespaces.idsPerPod {ids} must be a positive multiple of 65536 and "
                     f"less than 4294967296")
