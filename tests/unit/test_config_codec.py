"""Strict decoding of KubeletConfiguration files, the seed example, and /configz output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pykubelet.config import (
    ConfigurationError,
    Duration,
    KubeletConfiguration,
    configz_body,
    decode_text,
    dump_yaml,
    fields_not_acted_on,
    load_config_file,
    validate_configuration,
)
from pykubelet.config.codec import DecodeError

SEED = Path(__file__).resolve().parents[2] / "examples" / "kubelet-seed004.yaml"
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def decode(body: str) -> tuple[KubeletConfiguration, list[str]]:
    config, _, errors = decode_text(HEADER + body)
    return config, errors


def test_seed004_example_loads_with_its_values() -> None:
    config, keys = load_config_file(SEED)
    assert validate_configuration(config) == []
    assert config.authentication.anonymous.enabled is False
    assert config.authentication.webhook.enabled is True
    assert config.authentication.webhook.cache_ttl == Duration.parse("2m")
    assert config.authentication.x509.client_ca_file == "/etc/kubernetes/pki/ca.pem"
    assert config.authorization.mode == "Webhook"
    assert str(config.authorization.webhook.cache_authorized_ttl) == "5m0s"
    assert str(config.authorization.webhook.cache_unauthorized_ttl) == "30s"
    assert config.eviction_hard == {"imagefs.available": "15%", "memory.available": "100Mi",
                                    "nodefs.available": "10%", "nodefs.inodesFree": "5%"}
    assert config.cgroup_driver == "systemd"
    assert config.read_only_port == 10255
    assert config.cluster_dns == ["10.96.0.10"]
    assert config.static_pod_path == "/etc/kubernetes/manifests"
    assert (config.kube_api_qps, config.kube_api_burst) == (5, 10)
    assert (config.event_record_qps, config.event_burst) == (5, 10)
    assert config.content_type == "application/vnd.kubernetes.protobuf"
    assert config.hairpin_mode == "promiscuous-bridge"
    assert (config.iptables_drop_bit, config.iptables_masquerade_bit) == (15, 14)
    assert config.max_open_files == 1000000
    assert str(config.streaming_connection_idle_timeout) == "4h0m0s"
    assert "authentication" in keys and "evictionHard" in keys
    # Fields the file left out still get their v1beta1 defaults.
    assert config.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert config.pod_logs_dir == "/var/log/pods"


def test_seed004_unimplemented_fields_are_listed_once_sorted() -> None:
    _, keys = load_config_file(SEED)
    ignored = fields_not_acted_on(keys)
    assert "hairpinMode" in ignored and "iptablesDropBit" in ignored
    # The kubelet API server reads its fields now.
    assert "port" not in ignored and "authentication" not in ignored
    assert "staticPodPath" not in ignored and "readOnlyPort" not in ignored
    assert ignored == sorted(ignored)


def test_fields_not_acted_on_from_a_configuration() -> None:
    config = KubeletConfiguration()
    config.hairpin_mode = "hairpin-veth"
    config.max_pods = 20
    assert fields_not_acted_on(config) == ["hairpinMode"]


def test_unknown_nested_field_is_named_with_its_path() -> None:
    _, errors = decode("authentication:\n  webhook:\n    cachTTL: 2m0s\n")
    assert errors == ['unknown field "authentication.webhook.cachTTL"']


def test_wrong_type_names_the_field() -> None:
    _, errors = decode("port: \"10250\"\nfailSwapOn: yes-please\n")
    assert any(e.startswith("port:") and "int32" in e for e in errors)
    assert any(e.startswith("failSwapOn:") and "bool" in e for e in errors)


def test_numbers_in_go_spellings_decode_as_the_go_kubelet_reads_them() -> None:
    # Upstream turns the YAML into JSON first: 1.1e2 and 50.0 are written as 110 and 50.
    config, errors = decode("maxPods: 1.1e2\nkubeAPIQPS: 50.0\nkubeAPIBurst: 0o144\n")
    assert errors == []
    assert (config.max_pods, config.kube_api_qps, config.kube_api_burst) == (110, 50, 100)
    _, errors = decode("maxPods: 110.5\n")
    assert errors == ["maxPods: cannot unmarshal number 110.5 into a field of type int32"]


def test_every_decoding_problem_is_reported_together() -> None:
    _, errors = decode("prot: 1\nsyncFrequency: 5 minutes\nmaxPods: many\nauthorization: []\n")
    assert len(errors) == 4
    assert any("prot" in e for e in errors) and any("syncFrequency" in e for e in errors)
    assert any("maxPods" in e for e in errors) and any("authorization" in e for e in errors)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
         'no kind "KubeProxyConfiguration"'),
        ("apiVersion: kubelet.config.k8s.io/v1alpha9\nkind: KubeletConfiguration\n",
         'version "kubelet.config.k8s.io/v1alpha9"'),
        ("kind: KubeletConfiguration\n", "'apiVersion' is missing"),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\n", "'Kind' is missing"),
    ],
)
def test_wrong_kind_or_api_version_is_rejected(header: str, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode_text(header + "port: 10250\n")


def test_duplicate_keys_are_rejected() -> None:
    with pytest.raises(DecodeError, match='duplicate field "port"'):
        decode_text(HEADER + "port: 1\nport: 2\n")


def test_json_files_decode_too(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.json"
    path.write_text(json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                "kind": "KubeletConfiguration", "maxPods": 17,
                                "evictionHard": {"memory.available": "1Gi"}}))
    config, keys = load_config_file(path)
    assert config.max_pods == 17 and keys == {"maxPods", "evictionHard"}


def test_load_config_file_raises_with_all_errors(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + "prot: 1\nmaxPods: x\n")
    with pytest.raises(ConfigurationError) as info:
        load_config_file(path)
    assert len(info.value.errors) == 2
    assert str(info.value).count("\n") == 1


def test_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="failed to read"):
        load_config_file(tmp_path / "nope.yaml")


def test_zero_scalars_are_defaulted_but_pointer_zeros_are_kept() -> None:
    config, errors = decode("port: 0\nsyncFrequency: 0s\nhealthzPort: 0\nregistryPullQPS: 0\n")
    assert errors == []
    assert config.port == 10250 and str(config.sync_frequency) == "1m0s"
    assert config.healthz_port == 0 and config.registry_pull_qps == 0


def test_maps_keep_user_values_and_explicit_empty_lists_stay_empty() -> None:
    config, _ = decode("evictionHard:\n  memory.available: 1.5Gi\n"
                       "enforceNodeAllocatable: []\nsystemReserved: {cpu: 500m}\n")
    assert config.eviction_hard == {"memory.available": "1.5Gi"}
    assert config.enforce_node_allocatable == []
    assert config.system_reserved == {"cpu": "500m"}


def test_configz_body_shape_and_masking() -> None:
    config, _ = decode("staticPodURL: https://example.test/pods\n"
                       "staticPodURLHeader:\n  Authorization: [Bearer secret]\n"
                       "  X-Extra: [a, b]\n")
    body = configz_body(config)
    assert set(body) == {"kubeletconfig"}
    kc = body["kubeletconfig"]
    assert kc["staticPodURLHeader"] == {"Authorization": ["<masked>"], "X-Extra": ["<masked>"]}
    assert config.static_pod_url_header["Authorization"] == ["Bearer secret"]  # not mutated
    assert kc["syncFrequency"] == "1m0s" and kc["runtimeRequestTimeout"] == "2m0s"
    assert kc["authentication"]["webhook"] == {"enabled": True, "cacheTTL": "2m0s"}
    assert kc["authentication"]["x509"] == {}
    assert kc["shutdownGracePeriod"] == "0s"  # metav1.Duration is a struct: never omitted
    assert "readOnlyPort" not in kc and "staticPodPath" not in kc  # omitempty zero values
    assert kc["healthzPort"] == 10248
    assert "apiVersion" not in kc
    json.dumps(body)  # serialisable as is


def test_printed_yaml_round_trips(tmp_path: Path) -> None:
    config, _ = load_config_file(SEED)
    path = tmp_path / "printed.yaml"
    path.write_text(dump_yaml(config))
    again, _ = load_config_file(path)
    assert again == config
