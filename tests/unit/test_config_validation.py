"""Bad configurations are rejected with messages that name the field, flag and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykubelet.cmd.options import parse_command_line
from pykubelet.config import ConfigurationError, default_configuration, validate_configuration

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def errors_for(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + body)
    with pytest.raises(ConfigurationError) as info:
        parse_command_line([f"--config={path}"])
    return info.value.errors


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("healthzPort: 70000\n",
         "healthzPort (--healthz-port) 70000 must be between 1 and 65535, inclusive"),
        ("port: -1\n", "port (--port) -1 must be between 1 and 65535"),
        ("readOnlyPort: 65536\n", "readOnlyPort (--read-only-port) 65536"),
        ("syncFrequency: -1m\n",
         "syncFrequency (--sync-frequency) -1m0s must be greater than zero"),
        ("nodeStatusUpdateFrequency: -10s\n", "nodeStatusUpdateFrequency"),
        ("fileCheckFrequency: 5 minutes\n", 'fileCheckFrequency: time: unknown unit " minutes"'),
        ("evictionHard: {memory.available: 100MB}\n",
         'evictionHard (--eviction-hard) memory.available="100MB": quantities must match'),
        ("evictionSoft: {nodefs.available: 101%}\nevictionSoftGracePeriod: "
         "{nodefs.available: 1m}\n", "nodefs.available must be <= 100%"),
        ("evictionHard: {disk.available: 1Gi}\n", "unsupported eviction signal disk.available"),
        ("imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 60\n",
         "imageGCLowThresholdPercent (--image-gc-low-threshold) 60 must be less than "
         "imageGCHighThresholdPercent (--image-gc-high-threshold) 50"),
        ("imageGCHighThresholdPercent: 101\n", "imageGCHighThresholdPercent"),
        ("maxPods: -3\n", "maxPods (--max-pods) -3 must not be a negative number"),
        ("registryPullQPS: -1\nregistryBurst: -2\n", "registryPullQPS (--registry-qps) -1"),
        ("cgroupDriver: systemdd\n", 'cgroupDriver (--cgroup-driver) "systemdd" must be one of'),
        ("topologyManagerPolicy: strict\n", "topologyManagerPolicy (--topology-manager-policy)"),
        ("cpuManagerPolicy: dynamic\n", "cpuManagerPolicy (--cpu-manager-policy)"),
        ("enforceNodeAllocatable: [pods, gpus]\n",
         'option "gpus" specified for enforceNodeAllocatable (--enforce-node-allocatable)'),
        ("enforceNodeAllocatable: [system-reserved]\n",
         "systemReservedCgroup (--system-reserved-cgroup) must be specified"),
        ("featureGates: {NoSuchGate: true}\n", "unrecognized feature gate: NoSuchGate"),
        ("featureGates: {SidecarContainers: false}\n",
         "cannot set feature gate SidecarContainers to false, feature is locked to true"),
        ("hairpinMode: bridge\n", "hairpinMode (--hairpin-mode)"),
        ("oomScoreAdj: -1001\n", "oomScoreAdj (--oom-score-adj) -1001"),
        ("podLogsDir: var/log/pods\n", 'podLogsDir "var/log/pods" must be an absolute path'),
        ("address: 10.0.0.300\n", 'address (--address) "10.0.0.300" is not a valid IP address'),
        ("registerWithTaints: [{key: dedicated, value: gpu, effect: Sometimes}]\n",
         "invalid taint effect 'Sometimes'"),
        ("containerLogMaxFiles: 1\n", "containerLogMaxFiles (--container-log-max-files) 1"),
        ("systemReserved: {gpu: '1'}\n", 'systemReserved (--system-reserved) cannot reserve "gpu"'),
        ("tlsCertFile: /etc/cert.pem\n", "tlsPrivateKeyFile"),
        ("evictionSoft: {memory.available: 1Gi}\n",
         "grace period must be specified for the soft eviction threshold memory.available"),
        ("prot: 10250\n", 'unknown field "prot"'),
        ("authentication: {webhook: {cachTTL: 2m}}\n",
         'unknown field "authentication.webhook.cachTTL"'),
        ("maxPods: lots\n", "maxPods: cannot unmarshal string"),
    ],
)
def test_bad_configuration_is_rejected_naming_the_field(
        tmp_path: Path, body: str, expected: str) -> None:
    errors = errors_for(tmp_path, body)
    assert any(expected in error for error in errors), errors


def test_all_errors_of_one_file_are_reported_together(tmp_path: Path) -> None:
    errors = errors_for(tmp_path, "healthzPort: 70000\nport: 0x1FFFF\nmaxPods: -1\n"
                                  "cgroupDriver: upstart\nfeatureGates: {Bogus: true}\n"
                                  "syncFrequency: soon\nprot: 1\n")
    text = "\n".join(errors)
    for name in ("healthzPort", "port (--port)", "maxPods", "cgroupDriver", "Bogus",
                 "syncFrequency", '"prot"'):
        assert name in text, name
    assert len(errors) == 7


def test_defaults_are_valid_and_validation_lists_nothing() -> None:
    assert validate_configuration(default_configuration()) == []


def test_gate_dependent_checks_follow_the_gates() -> None:
    config = default_configuration()
    config.shutdown_grace_period_critical_pods = config.sync_frequency  # 1m > 0s period
    assert any("shutdownGracePeriodCriticalPods 1m0s must be <= shutdownGracePeriod" in e
               for e in validate_configuration(config))
    config = default_configuration()
    config.feature_gates = {"GracefulNodeShutdown": False,
                            "GracefulNodeShutdownBasedOnPodPriority": False}
    config.shutdown_grace_period = config.sync_frequency
    assert any("requires feature gate GracefulNodeShutdown" in e
               for e in validate_configuration(config))


def test_gate_dependencies_are_checked() -> None:
    config = default_configuration()
    config.feature_gates = {"GracefulNodeShutdown": False}
    assert any("GracefulNodeShutdownBasedOnPodPriority is enabled, but depends on" in e
               for e in validate_configuration(config))
