"""Defaulting of a decoded ``KubeletConfiguration``, and the legacy flag-only defaults.

Most defaults are the dataclass defaults declared in ``types``: a field absent from the
file keeps them, and a non-pointer field written as its Go zero value (``0``, ``""``,
``false``, ``0s``) is treated as absent, exactly as upstream's ``SetDefaults_`` does.
This module holds the rules that depend on other fields or on feature gates, and the
"legacy" defaults upstream still applies when the kubelet runs from flags alone.
"""

from __future__ import annotations

from typing import Any

from pykubelet.config.features import FeatureGates
from pykubelet.config.types import DEFAULT_EVICTION_HARD, FieldSpec, KubeletConfiguration
from pykubelet.config.units import Duration

DEFAULT_NODE_STATUS_REPORT_FREQUENCY = Duration.of(minutes=5)
DEFAULT_MAX_CONTAINER_RESTART_PERIOD = Duration.of(seconds=300)
DEFAULT_READ_ONLY_PORT = 10255


def zero_means_default(spec: FieldSpec, value: Any) -> bool:
    """True when ``value`` is a Go zero value that defaulting replaces for this field.

    Go cannot tell an omitted non-pointer scalar from an explicit zero, so upstream
    defaults both; pointer fields keep an explicit zero. Lists and maps keep an explicit
    empty value, because upstream's checks there are ``== nil``.
    """
    if spec.pointer:
        return False
    if isinstance(value, bool):
        return value is False
    if isinstance(value, int | float):
        return value == 0
    if isinstance(value, str):
        return value == ""
    if isinstance(value, Duration):
        return value.nanoseconds == 0
    return False


def apply_dependent_defaults(config: KubeletConfiguration, present: set[str]) -> None:
    """Apply the defaults that depend on other fields or on feature gates.

    ``present`` holds the dotted JSON paths the file set (after zero-as-unset), so these
    rules can tell "left to default" from "set explicitly".
    """
    if "nodeStatusReportFrequency" not in present:
        # Older configs only set the update frequency and expect reports to follow it.
        if "nodeStatusUpdateFrequency" in present:
            config.node_status_report_frequency = config.node_status_update_frequency
        else:
            config.node_status_report_frequency = DEFAULT_NODE_STATUS_REPORT_FREQUENCY
    if config.pod_pids_limit < 0:
        config.pod_pids_limit = -1
    if "serializeImagePulls" not in present:
        parallel = config.max_parallel_image_pulls
        config.serialize_image_pulls = parallel is None or parallel < 2
    if "evictionHard" in present and config.merge_default_eviction_settings:
        config.eviction_hard = {**DEFAULT_EVICTION_HARD, **config.eviction_hard}

    gates = FeatureGates()
    gates.set_from_map(config.feature_gates)  # unknown gates are reported by validation
    restart_period_set = "crashLoopBackOff.maxContainerRestartPeriod" in present
    if not restart_period_set:
        config.crash_loop_back_off.max_container_restart_period = (
            DEFAULT_MAX_CONTAINER_RESTART_PERIOD if _enabled(gates, "KubeletCrashLoopBackOffMax")
            else None)
    if "imagePullCredentialsVerificationPolicy" not in present:
        config.image_pull_credentials_verification_policy = (
            "NeverVerifyPreloadedImages" if _enabled(gates, "KubeletEnsureSecretPulledImages")
            else "")


def _enabled(gates: FeatureGates, name: str) -> bool:
    try:
        return gates.enabled(name)
    except KeyError:
        return False


def apply_legacy_flag_defaults(config: KubeletConfiguration) -> None:
    """Defaults of a kubelet started without ``--config``, kept for command-line compatibility.

    Upstream's ``NewKubeletConfiguration`` applies the v1beta1 defaults and then flips
    these four back to their historical flag defaults, which are far less secure.
    """
    config.authentication.anonymous.enabled = True
    config.authentication.webhook.enabled = False
    config.authorization.mode = "AlwaysAllow"
    config.read_only_port = DEFAULT_READ_ONLY_PORT


def default_configuration() -> KubeletConfiguration:
    """A configuration defaulted as if decoded from an empty v1beta1 file."""
    config = KubeletConfiguration()
    apply_dependent_defaults(config, set())
    return config
