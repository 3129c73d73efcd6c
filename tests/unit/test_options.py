"""The command line: flag names, precedence over --config, help/version and errors."""

from __future__ import annotations

import io
import json
import platform
import re
import subprocess
from pathlib import Path

import pytest

from pykubelet.cmd.options import ConfigurationError, not_acted_on, parse_command_line
from pykubelet.config.server import KubeletServer

REPO = Path(__file__).resolve().parents[2]

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
SEED = Path(__file__).resolve().parents[2] / "examples" / "kubelet-seed004.yaml"


def config_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "kubelet.yaml"
    path.write_text(HEADER + body)
    return str(path)


def run(*argv: str) -> KubeletServer:
    return parse_command_line(list(argv))


def test_seed_command_line_parses() -> None:
    server = run("--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.kubeconfig",
                 "--kubeconfig=/etc/kubernetes/kubelet.kubeconfig", f"--config={SEED}",
                 "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
                 "--node-labels=node.kubernetes.io/node=", "--v=8")
    assert server.flags.kubeconfig == "/etc/kubernetes/kubelet.kubeconfig"
    assert server.flags.bootstrap_kubeconfig == "/etc/kubernetes/bootstrap-kubelet.kubeconfig"
    assert server.flags.node_labels == {"node.kubernetes.io/node": ""}
    assert server.flags.v == 8 and server.config.logging.verbosity == 8
    assert server.config.cgroup_driver == "systemd"
    assert "hairpinMode" in server.config_file_keys


def test_node_local_flag_defaults() -> None:
    flags = run().flags
    assert flags.root_dir == "/var/lib/kubelet"
    assert flags.cert_dir == "/var/lib/kubelet/pki"
    assert flags.config == "" and flags.node_labels == {}
    config = run().config
    assert config.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert config.register_node is True


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    path = config_file(tmp_path, "maxPods: 50\nport: 11250\nclusterDomain: file.local\n"
                                 "authentication: {anonymous: {enabled: false}}\n")
    server = run(f"--config={path}", "--max-pods=20", "--anonymous-auth")
    assert server.config.max_pods == 20
    assert server.config.authentication.anonymous.enabled is True
    assert server.config.port == 11250  # not given on the command line: file wins
    assert server.config.cluster_domain == "file.local"


def test_flag_order_relative_to_config_does_not_matter(tmp_path: Path) -> None:
    path = config_file(tmp_path, "maxPods: 50\n")
    assert run("--max-pods=7", f"--config={path}").config.max_pods == 7


def test_underscores_in_flag_names_are_dashes() -> None:
    server = run("--max_pods=33", "--read_only_port", "0", "--healthz_bind_address=0.0.0.0")
    assert server.config.max_pods == 33
    assert server.config.read_only_port == 0
    assert server.config.healthz_bind_address == "0.0.0.0"


def test_eviction_hard_flag_replaces_the_files_map(tmp_path: Path) -> None:
    path = config_file(tmp_path, "evictionHard: {memory.available: 100Mi, nodefs.available: 10%}\n")
    server = run(f"--config={path}", "--eviction-hard=memory.available<1Gi")
    assert server.config.eviction_hard == {"memory.available": "1Gi"}
    server = run(f"--config={path}", "--eviction-hard=memory.available<1Gi",
                 "--eviction-hard=imagefs.available<20%")
    assert server.config.eviction_hard == {"memory.available": "1Gi", "imagefs.available": "20%"}


def test_feature_gates_flag_merges_over_the_files_gates(tmp_path: Path) -> None:
    path = config_file(tmp_path, "featureGates: {EventedPLEG: true, NodeLogQuery: true}\n")
    server = run(f"--config={path}", "--feature-gates=NodeLogQuery=false,MemoryQoS=true")
    assert server.config.feature_gates == {"EventedPLEG": True, "NodeLogQuery": False,
                                           "MemoryQoS": True}


def test_list_and_header_flags_accumulate() -> None:
    server = run("--cluster-dns=10.0.0.10,10.0.0.11", "--cluster-dns=10.0.0.12",
                 "--manifest-url=http://x.test/pods", "--manifest-url-header=A:1,B:2",
                 "--manifest-url-header=A:3")
    assert server.config.cluster_dns == ["10.0.0.10", "10.0.0.11", "10.0.0.12"]
    assert server.config.static_pod_url_header == {"A": ["1", "3"], "B": ["2"]}


def test_taints_and_node_labels_flags() -> None:
    server = run("--register-with-taints=dedicated=gpu:NoSchedule,spot:PreferNoSchedule",
                 "--node-labels=node.kubernetes.io/role=edge, kubernetes.io/os=linux")
    taints = server.config.register_with_taints
    assert [(t.key, t.value, t.effect) for t in taints] == [
        ("dedicated", "gpu", "NoSchedule"), ("spot", "", "PreferNoSchedule")]
    assert server.flags.node_labels == {"node.kubernetes.io/role": "edge",
                                        "kubernetes.io/os": "linux"}


def test_disallowed_node_labels_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown 'kubernetes\.io' or 'k8s\.io' labels"):
        run("--node-labels=node-role.kubernetes.io/master=")
    with pytest.raises(ConfigurationError, match="invalid node labels"):
        run("--node-labels=bad key=value")


def test_bad_flag_values_name_the_flag() -> None:
    with pytest.raises(ConfigurationError) as info:
        run("--port=http", "--sync-frequency=5 minutes", "--address=nowhere",
            "--feature-gates=Nope=true", "--register-node=maybe")
    text = str(info.value)
    assert 'invalid argument "http" for "--port" flag' in text
    assert '"--sync-frequency" flag: time: unknown unit " minutes"' in text
    assert '"nowhere" is not a valid IP address' in text
    assert "unrecognized feature gate: Nope" in text
    assert '"--register-node" flag' in text


def test_flag_values_are_validated_like_file_values() -> None:
    with pytest.raises(ConfigurationError, match=r"healthzPort \(--healthz-port\) 70000"):
        run("--healthz-port=70000")


def test_unknown_flags_and_stray_arguments_are_errors() -> None:
    with pytest.raises(ConfigurationError) as info:
        run("--max-podz=3", "--register-node", "false")
    assert "unknown flag: --max-podz" in info.value.errors
    assert any('unknown command "false"' in error for error in info.value.errors)


def test_missing_flag_value_is_an_error_in_the_go_kubelets_words() -> None:
    with pytest.raises(ConfigurationError) as info:
        run("--port")
    assert info.value.errors == ["flag needs an argument: --port"]
    with pytest.raises(ConfigurationError) as info:
        run("--node-labels")
    assert info.value.errors == ["flag needs an argument: --node-labels"]


def test_help_lists_grouped_flags_and_exits_zero() -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        parse_command_line(["--help"], stdout=out)
    assert info.value.code == 0
    text = out.getvalue()
    node_section = text.index("Node-local flags")
    config_section = text.index("KubeletConfiguration flags")
    assert node_section < text.index("--root-dir") < config_section < text.index("--max-pods")
    assert "DEPRECATED" in text
    assert "SidecarContainers" not in text.split("--feature-gates", 1)[1].split("\n  --", 1)[0]


def test_version_exits_zero() -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        parse_command_line(["--version"], stdout=out)
    assert info.value.code == 0
    assert out.getvalue().startswith("pykubelet v0.1.0")
    assert "kubelet.config.k8s.io/v1beta1" in out.getvalue()


def help_entry(text: str, flag: str) -> str:
    """The help lines of one flag, from its name to the next flag."""
    start = text.index(f"\n  {flag} ") + 1
    end = text.find("\n  -", start)
    return " ".join(text[start:end if end >= 0 else None].split())


def test_help_marks_flags_accepted_but_not_acted_on() -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit):
        parse_command_line(["--help"], stdout=out)
    text = out.getvalue()
    mark = "[not acted on yet]"
    assert f"Flags marked {mark} are accepted" in text
    # Config-field flags follow the start-up list of fields acted on...
    for flag in ("--topology-manager-policy-options", "--hairpin-mode"):
        assert mark in help_entry(text, flag), flag
    for flag in ("--pod-manifest-path", "--max-pods", "--cluster-dns", "--sync-frequency",
                 "--eviction-hard", "--kube-reserved", "--maximum-dead-containers",
                 "--node-status-update-frequency"):
        assert mark not in help_entry(text, flag), flag
    # ...and node-local flags carry their own mark.
    for flag in ("--pod-infra-container-image",):
        assert mark in help_entry(text, flag), flag
    for flag in ("--config", "--root-dir", "--lock-file", "--hostname-override",
                 "--kubeconfig", "--bootstrap-kubeconfig", "--node-labels", "--cert-dir",
                 "--cloud-provider", "--image-credential-provider-config"):
        assert mark not in help_entry(text, flag), flag


def test_settings_not_acted_on_name_file_fields_and_given_flags(tmp_path: Path) -> None:
    path = config_file(tmp_path, "hairpinMode: hairpin-veth\nevictionHard: "
                                 "{memory.available: 100Mi}\nmaxPods: 20\n")
    server = run(f"--config={path}", "--pod-infra-container-image=registry.example/pause:1",
                 "--memory-manager-policy", "Static", "--root-dir=/var/lib/pyk",
                 "--max-pods=9",
                 "--eviction-hard", "memory.available<200Mi", "--kubeconfig=/etc/kubelet.conf",
                 "--cloud-provider=external")
    assert not_acted_on(server) == ["hairpinMode", "--memory-manager-policy",
                                    "--pod-infra-container-image"]
    assert not_acted_on(run("--root-dir=/var/lib/pyk")) == []


def test_version_raw_prints_build_information_as_go_struct_text() -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        parse_command_line(["--version=raw"], stdout=out)
    assert info.value.code == 0
    text = out.getvalue().strip()
    assert text.startswith('version.Info{Major:"0", Minor:"1", EmulationMajor:"", ')
    assert text.endswith("}")
    fields = dict(re.findall(r'(\w+):"((?:[^"\\]|\\.)*)"', text))
    assert list(fields) == [
        "Major", "Minor", "EmulationMajor", "EmulationMinor", "MinCompatibilityMajor",
        "MinCompatibilityMinor", "GitVersion", "GitCommit", "GitTreeState", "BuildDate",
        "GoVersion", "Compiler", "Platform"]
    assert fields["GitVersion"] == "v0.1.0"
    assert fields["GoVersion"] == f"python{platform.python_version()}"
    assert re.fullmatch(r"linux/\w+", fields["Platform"])
    # Run from a git checkout, the commit is the checkout's HEAD.
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    if head:
        assert fields["GitCommit"] == head
        assert fields["GitTreeState"] in ("clean", "dirty")


def test_print_config_prints_the_configz_body(tmp_path: Path) -> None:
    path = config_file(tmp_path, "staticPodURLHeader: {Authorization: [secret]}\n")
    out = io.StringIO()
    with pytest.raises(SystemExit) as info:
        parse_command_line([f"--config={path}", "--max-pods=9", "--print-config"], stdout=out)
    assert info.value.code == 0
    text = out.getvalue()
    body = json.loads(text)["kubeletconfig"]
    assert body["maxPods"] == 9
    assert body["staticPodURLHeader"] == {"Authorization": ["<masked>"]}
    assert "secret" not in text


def test_parsing_creates_nothing_on_disk(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run(f"--root-dir={root}", f"--cert-dir={root}/pki", f"--lock-file={root}/lock",
        f"--pod-manifest-path={root}/manifests")
    assert list(tmp_path.iterdir()) == []


def test_cloud_provider_is_external_or_none() -> None:
    assert run().flags.external_cloud_provider is False
    assert run("--cloud-provider=").flags.external_cloud_provider is False
    assert run("--cloud-provider=external").flags.external_cloud_provider is True


@pytest.mark.parametrize("provider", ["aws", "gce", "External"])
def test_a_built_in_cloud_provider_is_refused_naming_the_flag(provider: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        run(f"--cloud-provider={provider}")
    assert info.value.errors == [
        f'cloud provider "{provider}" was specified, but built-in cloud providers are '
        f'disabled. Please set --cloud-provider=external and migrate to an external cloud '
        f'provider']


def test_a_refused_cloud_provider_is_reported_with_the_other_problems() -> None:
    with pytest.raises(ConfigurationError) as info:
        run("--cloud-provider=openstack", "--node-ip=not-an-ip", "--healthz-port=70000")
    text = str(info.value)
    assert 'cloud provider "openstack" was specified' in text
    assert 'invalid --node-ip "not-an-ip"' in text
    assert "healthzPort (--healthz-port) 70000" in text


def test_exit_on_lock_contention_needs_a_lock_file() -> None:
    with pytest.raises(ConfigurationError, match="no lock file specified"):
        run("--exit-on-lock-contention")


def test_short_v_flag() -> None:
    assert run("-v", "3").flags.v == 3
    assert run("-v=4").flags.v == 4
