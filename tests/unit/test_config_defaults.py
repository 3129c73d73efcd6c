"""Defaulting: v1beta1 defaults, dependent defaults, and the legacy flag-only defaults."""

from __future__ import annotations

from pathlib import Path

from pykubelet.cmd.options import parse_command_line
from pykubelet.config import decode_text

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + body)
    return str(path)


def test_flags_only_run_gets_the_legacy_insecure_defaults() -> None:
    config = parse_command_line([]).config
    assert config.authentication.anonymous.enabled is True
    assert config.authentication.webhook.enabled is False
    assert config.authorization.mode == "AlwaysAllow"
    assert config.read_only_port == 10255


def test_config_file_run_gets_the_v1beta1_defaults(tmp_path: Path) -> None:
    config = parse_command_line([f"--config={write(tmp_path, '')}"]).config
    assert config.authentication.anonymous.enabled is False
    assert config.authentication.webhook.enabled is True
    assert config.authorization.mode == "Webhook"
    assert config.read_only_port == 0


def test_report_frequency_follows_an_explicit_update_frequency() -> None:
    config, _, _ = decode_text(HEADER + "nodeStatusUpdateFrequency: 20s\n")
    assert str(config.node_status_update_frequency) == "20s"
    assert str(config.node_status_report_frequency) == "20s"


def test_report_and_update_frequencies_default_independently() -> None:
    config, _, _ = decode_text(HEADER)
    assert str(config.node_status_update_frequency) == "10s"
    assert str(config.node_status_report_frequency) == "5m0s"
    config, _, _ = decode_text(HEADER + "nodeStatusUpdateFrequency: 20s\n"
                                        "nodeStatusReportFrequency: 1m\n")
    assert str(config.node_status_report_frequency) == "1m0s"


def test_eviction_hard_defaults_and_merge_setting() -> None:
    config, _, _ = decode_text(HEADER)
    assert config.eviction_hard["memory.available"] == "100Mi"
    assert config.eviction_hard["imagefs.available"] == "15%"
    config, _, _ = decode_text(HEADER + "evictionHard: {memory.available: 1Gi}\n")
    assert config.eviction_hard == {"memory.available": "1Gi"}
    config, _, _ = decode_text(HEADER + "evictionHard: {memory.available: 1Gi}\n"
                                        "mergeDefaultEvictionSettings: true\n")
    assert config.eviction_hard["memory.available"] == "1Gi"
    assert config.eviction_hard["nodefs.available"] == "10%"


def test_serialize_image_pulls_follows_max_parallel_pulls() -> None:
    config, _, _ = decode_text(HEADER + "maxParallelImagePulls: 5\n")
    assert config.serialize_image_pulls is False
    config, _, _ = decode_text(HEADER + "maxParallelImagePulls: 1\n")
    assert config.serialize_image_pulls is True


def test_negative_pod_pids_limit_means_unlimited() -> None:
    config, _, _ = decode_text(HEADER + "podPidsLimit: -42\n")
    assert config.pod_pids_limit == -1


def test_gate_dependent_defaults_follow_the_files_gates() -> None:
    config, _, _ = decode_text(HEADER)
    assert str(config.crash_loop_back_off.max_container_restart_period) == "5m0s"
    assert config.image_pull_credentials_verification_policy == "NeverVerifyPreloadedImages"
    config, _, _ = decode_text(HEADER + "featureGates: {KubeletCrashLoopBackOffMax: false, "
                                        "KubeletEnsureSecretPulledImages: false}\n")
    assert config.crash_loop_back_off.max_container_restart_period is None
    assert config.image_pull_credentials_verification_policy == ""
