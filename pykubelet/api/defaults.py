"""Pod defaulting as the API server applies it (upstream ``pkg/apis/core/v1/defaults.go``).

A pod fetched from the API server arrives with every defaulted field filled
in; a static pod read from a file does not. The kubelet applies the same
defaulting functions to static pods so that the rest of the node agent sees
one shape whatever the source: ``restartPolicy`` is never unset, probes have
their periods, ports have their protocol, and so on.

Only the v1 defaulting functions are mirrored here. Values set by admission
plugins (``priority``, ``preemptionPolicy``, service account tokens) are not
defaults and are left alone. Quantities are kept as written (the API server
would round them to milli precision).
"""

from __future__ import annotations

import re

from kubernetes_asyncio.client.models import (
    V1Container,
    V1EmptyDirVolumeSource,
    V1EphemeralContainer,
    V1HTTPGetAction,
    V1Lifecycle,
    V1Pod,
    V1PodSecurityContext,
    V1PodSpec,
    V1Probe,
    V1Volume,
)

from pykubelet.api import init_then_app_containers
from pykubelet.api.validation import model_attributes

TERMINATION_MESSAGE_PATH_DEFAULT = "/dev/termination-log"
TERMINATION_MESSAGE_POLICY_DEFAULT = "File"
TERMINATION_GRACE_PERIOD_DEFAULT = 30
DEFAULT_SCHEDULER_NAME = "default-scheduler"
VOLUME_DEFAULT_MODE = 0o644  # 420, shared by secret, configMap, downwardAPI and projected volumes
SERVICE_ACCOUNT_TOKEN_EXPIRATION_DEFAULT = 3600
DEFAULT_IMAGE_TAG = "latest"

# A docker reference's path components are lowercase; anything else fails to parse upstream,
# which then leaves the tag empty (and so the policy IfNotPresent).
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
NAME_TOTAL_LENGTH_MAX = 255  # the docker reference parser refuses longer names


def image_tag(image: str) -> str:
    """The tag an image reference resolves to: ``latest`` when it has neither tag nor digest.

    Returns ``""`` for a digest-only reference and for references that do not parse.
    """
    name, _, digest = image.partition("@")
    tag = ""
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG.match(tag):
            return ""
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        return ""
    components = name.split("/")
    if len(components) > 1 and ("." in components[0] or ":" in components[0]
                                or components[0] == "localhost"
                                or components[0] != components[0].lower()):
        components = components[1:]  # the registry host may be mixed case; the path may not
    if not name or not all(_PATH_COMPONENT.match(c) for c in components):
        return ""
    if not tag and not digest:
        return DEFAULT_IMAGE_TAG
    return tag


def default_image_pull_policy(image: str) -> str:
    return "Always" if image_tag(image) == DEFAULT_IMAGE_TAG else "IfNotPresent"


def apply_pod_defaults(pod: V1Pod) -> V1Pod:
    """Fill ``pod``'s unset fields with the API server's defaults, in place; returns ``pod``."""
    if pod.spec is None:
        pod.spec = V1PodSpec(containers=[])
    spec: V1PodSpec = pod.spec
    _default_pod_level(spec)
    _default_pod_spec(spec)
    for volume in spec.volumes or []:
        _default_volume(volume)
    for container in init_then_app_containers(pod):
        _default_container(container)
    for ephemeral in spec.ephemeral_containers or []:
        _default_container(ephemeral)
    return pod


def _default_pod_level(spec: V1PodSpec) -> None:
    # Requests fall back to limits only on pods (not templates): the scheduler needs them.
    for container in [*(spec.init_containers or []), *(spec.containers or [])]:
        resources = container.resources
        if resources is None or resources.limits is None:
            continue
        requests = dict(resources.requests or {})
        for resource, limit in resources.limits.items():
            requests.setdefault(resource, limit)
        resources.requests = requests
    if spec.enable_service_links is None:
        spec.enable_service_links = True
    if spec.host_network:
        # With the host's network namespace a container port is a host port.
        for container in [*(spec.init_containers or []), *(spec.containers or [])]:
            for port in container.ports or []:
                if not port.host_port:
                    port.host_port = port.container_port


def _default_pod_spec(spec: V1PodSpec) -> None:
    if not spec.dns_policy:
        spec.dns_policy = "ClusterFirst"
    if not spec.restart_policy:
        spec.restart_policy = "Always"
    if spec.security_context is None:
        spec.security_context = V1PodSecurityContext()
    if spec.termination_grace_period_seconds is None:
        spec.termination_grace_period_seconds = TERMINATION_GRACE_PERIOD_DEFAULT
    if not spec.scheduler_name:
        spec.scheduler_name = DEFAULT_SCHEDULER_NAME


def _default_volume(volume: V1Volume) -> None:
    sources = [attr for attr in model_attributes(V1Volume) if attr != "name"]
    if all(getattr(volume, attr) is None for attr in sources):
        volume.empty_dir = V1EmptyDirVolumeSource()
    if volume.host_path is not None and volume.host_path.type is None:
        volume.host_path.type = ""
    for mode_source in (volume.secret, volume.config_map, volume.downward_api, volume.projected):
        if mode_source is not None and mode_source.default_mode is None:
            mode_source.default_mode = VOLUME_DEFAULT_MODE
    if volume.downward_api is not None:
        for item in volume.downward_api.items or []:
            if item.field_ref is not None and not item.field_ref.api_version:
                item.field_ref.api_version = "v1"
    if volume.projected is not None:
        for projection in volume.projected.sources or []:
            if projection.downward_api is not None:
                for item in projection.downward_api.items or []:
                    if item.field_ref is not None and not item.field_ref.api_version:
                        item.field_ref.api_version = "v1"
            token = projection.service_account_token
            if token is not None and token.expiration_seconds is None:
                token.expiration_seconds = SERVICE_ACCOUNT_TOKEN_EXPIRATION_DEFAULT
    if volume.iscsi is not None and not volume.iscsi.iscsi_interface:
        volume.iscsi.iscsi_interface = "default"
    if volume.rbd is not None:
        volume.rbd.pool = volume.rbd.pool or "rbd"
        volume.rbd.user = volume.rbd.user or "admin"
        volume.rbd.keyring = volume.rbd.keyring or "/etc/ceph/keyring"


def _default_container(container: V1Container | V1EphemeralContainer) -> None:
    if not container.image_pull_policy:
        container.image_pull_policy = default_image_pull_policy(container.image or "")
    if not container.termination_message_path:
        container.termination_message_path = TERMINATION_MESSAGE_PATH_DEFAULT
    if not container.termination_message_policy:
        container.termination_message_policy = TERMINATION_MESSAGE_POLICY_DEFAULT
    for port in container.ports or []:
        if not port.protocol:
            port.protocol = "TCP"
    for env in container.env or []:
        field_ref = env.value_from.field_ref if env.value_from is not None else None
        if field_ref is not None and not field_ref.api_version:
            field_ref.api_version = "v1"
    for probe in (container.liveness_probe, container.readiness_probe, container.startup_probe):
        if probe is not None:
            _default_probe(probe)
    _default_lifecycle(container.lifecycle)


def _default_probe(probe: V1Probe) -> None:
    # Zero counts as unset, as in the Go structs where the field is not a pointer.
    probe.timeout_seconds = probe.timeout_seconds or 1
    probe.period_seconds = probe.period_seconds or 10
    probe.success_threshold = probe.success_threshold or 1
    probe.failure_threshold = probe.failure_threshold or 3
    _default_http_get(probe.http_get)
    if probe.grpc is not None and probe.grpc.service is None:
        probe.grpc.service = ""


def _default_lifecycle(lifecycle: V1Lifecycle | None) -> None:
    if lifecycle is None:
        return
    for handler in (lifecycle.post_start, lifecycle.pre_stop):
        if handler is not None:
            _default_http_get(handler.http_get)


def _default_http_get(action: V1HTTPGetAction | None) -> None:
    if action is None:
        return
    if not action.path:
        action.path = "/"
    if not action.scheme:
        action.scheme = "HTTP"


__all__ = ["apply_pod_defaults", "default_image_pull_policy", "image_tag"]
