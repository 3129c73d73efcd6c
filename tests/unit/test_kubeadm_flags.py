"""pykubelet started as kubeadm 1.20's systemd drop-in starts the kubelet.

The command line is built from ``packaging/systemd/20-kubeadm.conf`` itself: its
``Environment=`` assignments, the environment files kubeadm and the operator write
(``/var/lib/kubelet/kubeadm-flags.env``, ``/etc/default/kubelet``) and its
``ExecStart=``, expanded the way systemd expands them, then parsed by pykubelet's
own flag parser. The files on the node are laid out under a temporary root.
"""

from __future__ import annotations

import io
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykubelet.cmd.options import ConfigurationError, not_acted_on, parse_command_line
from pykubelet.config.server import KubeletServer
from pykubelet.config.types import Taint
from pykubelet.cri.runtime import RemoteRuntimeService

DROP_IN = Path(__file__).resolve().parents[2] / "packaging" / "systemd" / "20-kubeadm.conf"

# /var/lib/kubelet/config.yaml as `kubeadm join` 1.20 writes it (kubeadm's defaults,
# the cluster's DNS and the CA path; zero durations stand for "the kubelet's default").
KUBEADM_CONFIG_YAML = """\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
cpuManagerReconcilePeriod: 0s
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"""

# kubeadm 1.20 writes KUBELET_KUBEADM_ARGS with Go's %q: the flags sorted by name.
# With the containerd CRI socket: --container-runtime=remote and the socket as a
# bare path; --hostname-override when the node name is not the hostname;
# --register-with-taints for the join's taints; --resolv-conf on a systemd-resolved
# host; --node-ip and --node-labels from nodeRegistration.kubeletExtraArgs.
CONTAINERD_FLAGS_ENV = (
    'KUBELET_KUBEADM_ARGS="--container-runtime=remote '
    "--container-runtime-endpoint=/run/containerd/containerd.sock "
    "--hostname-override=worker-1 --node-ip=10.89.0.12 "
    "--node-labels=topology.kubernetes.io/zone=a,node.kubernetes.io/pool=infra "
    "--register-with-taints=dedicated=infra:NoSchedule "
    '--resolv-conf=/run/systemd/resolve/resolv.conf"\n'
)

# With the Docker socket (kubeadm 1.20's default) it writes dockershim's flags instead.
DOCKER_FLAGS_ENV = ('KUBELET_KUBEADM_ARGS="--cgroup-driver=systemd --network-plugin=cni '
                    '--pod-infra-container-image=k8s.gcr.io/pause:3.2"\n')


@dataclass(frozen=True)
class DropIn:
    environment: dict[str, str]
    environment_files: list[tuple[str, bool]]  # (path, optional)
    exec_start: list[str]


def read_drop_in(path: Path) -> DropIn:
    """The [Service] settings of the drop-in that decide the command line."""
    environment: dict[str, str] = {}
    files: list[tuple[str, bool]] = []
    exec_start: list[str] = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        if key == "Environment":
            for word in shlex.split(value):  # systemd's quoting, for these simple values
                name, _, text = word.partition("=")
                environment[name] = text
        elif key == "EnvironmentFile":
            files.append((value.removeprefix("-"), value.startswith("-")))
        elif key == "ExecStart":
            exec_start = value.split()  # an empty ExecStart= resets the command
    return DropIn(environment, files, exec_start)


def read_environment_file(path: Path) -> dict[str, str]:
    """KEY=value lines, values in double quotes with backslash escapes, as systemd reads
    the files kubeadm writes."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        name, _, text = line.partition("=")
        words = shlex.split(text)
        values[name.strip()] = " ".join(words)
    return values


def expand_exec_start(command: list[str], environment: dict[str, str]) -> list[str]:
    """systemd's expansion: an unquoted ``$NAME`` word becomes the variable's words (none
    when it is unset or empty)."""
    argv: list[str] = []
    for word in command:
        if word.startswith("$"):
            argv.extend(environment.get(word[1:], "").split())
        else:
            assert "$" not in word, word
            argv.append(word)
    return argv


def node_root(tmp_path: Path, *, flags_env: str | None, default_kubelet: str | None) -> Path:
    """The files kubeadm join and the operator leave on the node, under ``tmp_path``."""
    (tmp_path / "var/lib/kubelet").mkdir(parents=True)
    (tmp_path / "var/lib/kubelet/config.yaml").write_text(KUBEADM_CONFIG_YAML)
    if flags_env is not None:
        (tmp_path / "var/lib/kubelet/kubeadm-flags.env").write_text(flags_env)
    if default_kubelet is not None:
        (tmp_path / "etc/default").mkdir(parents=True)
        (tmp_path / "etc/default/kubelet").write_text(default_kubelet)
    return tmp_path


def unit_command_line(root: Path) -> list[str]:
    """The argv the drop-in starts, its files read from under ``root``."""
    drop_in = read_drop_in(DROP_IN)
    environment = dict(drop_in.environment)
    for name, optional in drop_in.environment_files:
        path = root / name.lstrip("/")
        if not path.exists():
            assert optional, f"{name} is required by the drop-in but missing"
            continue
        environment.update(read_environment_file(path))
    return expand_exec_start(drop_in.exec_start, environment)


def parse_as_unit(root: Path, argv: list[str], stderr: io.StringIO) -> KubeletServer:
    """Parse the unit's arguments; the one file the parser reads, --config, from ``root``."""
    args = [f"--config={root}{arg.removeprefix('--config=')}" if arg.startswith("--config=")
            else arg for arg in argv[1:]]
    return parse_command_line(args, stderr=stderr)


def flags_not_acted_on(server: KubeletServer) -> list[str]:
    """The start-up notice's flags (config.yaml's fields are another test's subject)."""
    return [name for name in not_acted_on(server) if name.startswith("--")]


def test_the_drop_in_runs_pykubelet_with_kubeadms_files(tmp_path: Path) -> None:
    root = node_root(tmp_path, flags_env=CONTAINERD_FLAGS_ENV, default_kubelet=None)
    argv = unit_command_line(root)
    assert argv == [
        "/opt/pykubelet/bin/pykubelet",
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--config=/var/lib/kubelet/config.yaml",
        "--container-runtime=remote",
        "--container-runtime-endpoint=/run/containerd/containerd.sock",
        "--hostname-override=worker-1",
        "--node-ip=10.89.0.12",
        "--node-labels=topology.kubernetes.io/zone=a,node.kubernetes.io/pool=infra",
        "--register-with-taints=dedicated=infra:NoSchedule",
        "--resolv-conf=/run/systemd/resolve/resolv.conf",
    ]
    stderr = io.StringIO()
    server = parse_as_unit(root, argv, stderr)

    flags, config = server.flags, server.config
    assert flags.bootstrap_kubeconfig == "/etc/kubernetes/bootstrap-kubelet.conf"
    assert flags.kubeconfig == "/etc/kubernetes/kubelet.conf"
    assert flags.config == f"{root}/var/lib/kubelet/config.yaml"
    assert flags.hostname_override == "worker-1"
    assert flags.node_ip == "10.89.0.12"
    assert flags.node_labels == {"topology.kubernetes.io/zone": "a",
                                 "node.kubernetes.io/pool": "infra"}
    assert flags.root_dir == "/var/lib/kubelet"
    assert config.register_with_taints == [Taint(key="dedicated", value="infra",
                                                 effect="NoSchedule")]
    assert config.resolv_conf == "/run/systemd/resolve/resolv.conf"
    # From config.yaml: kubeadm's authentication, DNS and static pod path.
    assert config.authentication.x509.client_ca_file == "/etc/kubernetes/pki/ca.crt"
    assert config.authorization.mode == "Webhook"
    assert config.cluster_dns == ["10.96.0.10"] and config.cluster_domain == "cluster.local"
    assert config.static_pod_path == "/etc/kubernetes/manifests"
    assert config.cgroup_driver == "systemd" and config.rotate_certificates is True
    # kubeadm's zero durations mean "the kubelet's default", as upstream decodes them.
    assert (str(config.sync_frequency), str(config.node_status_update_frequency),
            str(config.runtime_request_timeout)) == ("1m0s", "10s", "2m0s")
    # The bare socket path kubeadm writes is the containerd socket pykubelet dials.
    assert config.container_runtime_endpoint == "/run/containerd/containerd.sock"
    runtime = RemoteRuntimeService(config.container_runtime_endpoint)
    assert runtime.endpoint == "unix:///run/containerd/containerd.sock"
    assert runtime.socket_path == "/run/containerd/containerd.sock"
    # Only --container-runtime is deprecated here, and every flag is acted on.
    assert stderr.getvalue() == ("Flag --container-runtime has been deprecated, will be "
                                 "removed in 1.27 as the only valid value is 'remote'\n")
    assert flags_not_acted_on(server) == []


def test_the_operators_extra_args_come_last_and_win(tmp_path: Path) -> None:
    root = node_root(tmp_path, flags_env=CONTAINERD_FLAGS_ENV,
                     default_kubelet='KUBELET_EXTRA_ARGS="--node-ip=10.89.0.99 --max-pods=50"\n')
    server = parse_as_unit(root, unit_command_line(root), io.StringIO())
    assert server.flags.node_ip == "10.89.0.99"
    assert server.config.max_pods == 50


def test_without_kubeadms_flags_file_the_unit_still_starts_with_the_config(
        tmp_path: Path) -> None:
    root = node_root(tmp_path, flags_env=None, default_kubelet=None)
    argv = unit_command_line(root)
    assert argv[1:] == ["--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                        "--kubeconfig=/etc/kubernetes/kubelet.conf",
                        "--config=/var/lib/kubelet/config.yaml"]
    server = parse_as_unit(root, argv, io.StringIO())
    assert server.config.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"


def test_the_docker_socket_flags_are_accepted_with_upstreams_warnings(tmp_path: Path) -> None:
    root = node_root(tmp_path, flags_env=DOCKER_FLAGS_ENV, default_kubelet=None)
    stderr = io.StringIO()
    server = parse_as_unit(root, unit_command_line(root), stderr)
    assert server.config.cgroup_driver == "systemd"
    assert stderr.getvalue().splitlines() == [
        "Flag --pod-infra-container-image has been deprecated, will be removed in a future "
        "release; the image garbage collector takes the sandbox image from the container "
        "runtime",
        "Flag --network-plugin has been deprecated, will be removed along with dockershim.",
    ]
    # The sandbox image is the runtime's; --network-plugin is simply ignored.
    assert flags_not_acted_on(server) == ["--pod-infra-container-image"]


def test_dockershims_networking_flags_are_ignored_with_a_warning() -> None:
    stderr = io.StringIO()
    plain = parse_command_line([])
    server = parse_command_line(["--network-plugin=kubenet", "--cni-conf-dir=/etc/cni/net.d",
                                 "--cni-bin-dir=/opt/cni/bin", "--cni-cache-dir=/var/lib/cni",
                                 "--network-plugin-mtu=1460"], stderr=stderr)
    assert server.flags == plain.flags and server.config == plain.config
    assert [line.split(" has been")[0] for line in stderr.getvalue().splitlines()] == [
        "Flag --network-plugin", "Flag --cni-conf-dir", "Flag --cni-bin-dir",
        "Flag --cni-cache-dir", "Flag --network-plugin-mtu"]
    assert not_acted_on(server) == []


def test_only_a_cri_runtime_is_accepted() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_command_line(["--container-runtime=docker"], stderr=io.StringIO())
    assert info.value.errors == ['invalid argument "docker" for "--container-runtime" flag: '
                                 'must be one of: remote']
    with pytest.raises(ConfigurationError) as info:
        parse_command_line(["--network-plugin-mtu=large"], stderr=io.StringIO())
    assert "--network-plugin-mtu" in info.value.errors[0]


def test_kubeadms_dual_stack_gate_is_accepted() -> None:
    server = parse_command_line(["--feature-gates=IPv6DualStack=true"], stderr=io.StringIO())
    assert server.config.feature_gates == {"IPv6DualStack": True}
