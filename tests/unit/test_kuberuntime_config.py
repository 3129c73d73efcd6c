"""Sandbox and container configs generated from pod specs."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from cri_api.v1 import api_pb2

from pykubelet.api import pod_from_dict
from pykubelet.cri.runtime import RemoteRuntimeService
from pykubelet.events import Event, LoggingRecorder
from pykubelet.kuberuntime.container_config import (
    ContainerOptions,
    CreateContainerConfigError,
    expand,
    generate_container_config,
    image_user,
)
from pykubelet.kuberuntime.images import (
    ImageManager,
    ImagePullError,
    ImageReference,
    apply_default_tag,
    default_pull_policy,
    parse_image_reference,
)
from pykubelet.kuberuntime.manager import RuntimeManagerOptions
from pykubelet.kuberuntime.sandbox import PodSandboxes
from pykubelet.kuberuntime.sandbox_config import (
    SandboxConfigError,
    SandboxOptions,
    generate_pod_sandbox_config,
    parse_resolv_conf,
)
from pykubelet.util.backoff import Backoff
from tests.unit.waiting import settle

GIB = 2**30
HOST_RESOLV = """# written by the node
nameserver 10.0.0.2
nameserver 10.0.0.3 ; trailing comment
search corp.example lab.example.
options timeout:2 attempts:3
"""


def make_pod(container: dict[str, Any] | None = None, **spec: Any) -> Any:
    body = {"name": "app", "image": "busybox:1.35", **(container or {})}
    return pod_from_dict({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1",
                     "labels": {"app": "web", "tier": "front"},
                     "annotations": {"note": "hello \"world\""}},
        "spec": {"containers": [body], "nodeName": "node-a", **spec},
    })


@pytest.fixture
def resolv(tmp_path: Path) -> str:
    path = tmp_path / "resolv.conf"
    path.write_text(HOST_RESOLV)
    return str(path)


@pytest.fixture
def sandbox_opts(resolv: str, tmp_path: Path) -> SandboxOptions:
    return SandboxOptions(pod_logs_dir=str(tmp_path / "logs"), cluster_dns=["10.96.0.10"],
                          cluster_domain="cluster.local", resolv_conf=resolv,
                          pod_cgroup_parent=lambda p: f"/kubepods/burstable/pod{p.metadata.uid}")


@pytest.fixture
def opts(tmp_path: Path) -> ContainerOptions:
    return ContainerOptions(pod_dir=str(tmp_path / "pods" / "uid-1"), node_name="node-a",
                            pod_ips=["10.244.0.7"], host_ip="192.168.1.5",
                            pod_logs_dir=str(tmp_path / "logs"), cluster_domain="cluster.local",
                            memory_capacity=8 * GIB, node_allocatable_cpu_millis=4000)


def config_for(pod: Any, opts: ContainerOptions, **kwargs: Any) -> api_pb2.ContainerConfig:
    return generate_container_config(pod.spec.containers[0], pod, 0, "sha256:abc", opts,
                                     **kwargs)


def env_of(config: api_pb2.ContainerConfig) -> dict[str, str]:
    return {kv.key: kv.value for kv in config.envs}


# --- expansion and environment ------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)-$(B)", "1-two"),
    ("$$(A)", "$(A)"),
    ("$(MISSING)", "$(MISSING)"),
    ("$(A", "$(A"),
    ("cost: $5", "cost: $5"),
    ("trailing $", "trailing $"),
    ("$$$(A)", "$1"),
    ("", ""),
])
def test_expand(text: str, expected: str) -> None:
    values = {"A": "1", "B": "two"}
    assert expand(text, values.get) == expected


def test_env_values_reference_earlier_variables_and_command_sees_them(
        opts: ContainerOptions) -> None:
    pod = make_pod({
        "command": ["sh", "-c", "echo $(GREETING) $$(GREETING) $(UNSET)"],
        "args": ["$(NAME)"],
        "env": [{"name": "NAME", "value": "world"},
                {"name": "GREETING", "value": "hello $(NAME) from $(LATER)"},
                {"name": "LATER", "value": "later"}],
    })
    config = config_for(pod, opts)
    env = env_of(config)
    # Only variables declared before are visible to a value.
    assert env["GREETING"] == "hello world from $(LATER)"
    assert list(config.command) == ["sh", "-c",
                                    "echo hello world from $(LATER) $(GREETING) $(UNSET)"]
    assert list(config.args) == ["world"]


def test_field_refs(opts: ContainerOptions) -> None:
    refs = {
        "POD_NAME": "metadata.name", "POD_NS": "metadata.namespace", "POD_UID": "metadata.uid",
        "NODE": "spec.nodeName", "SA": "spec.serviceAccountName", "IP": "status.podIP",
        "IPS": "status.podIPs", "HOST": "status.hostIP", "APP": "metadata.labels['app']",
        "NOTE": "metadata.annotations['note']", "LABELS": "metadata.labels",
        "GONE": "metadata.labels['missing']",
    }
    pod = make_pod({"env": [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}}
                            for k, v in refs.items()]}, serviceAccountName="shop-sa")
    env = env_of(config_for(pod, opts))
    assert env["POD_NAME"] == "web"
    assert env["POD_NS"] == "shop"
    assert env["POD_UID"] == "uid-1"
    assert env["NODE"] == "node-a"
    assert env["SA"] == "shop-sa"
    assert env["IP"] == env["IPS"] == "10.244.0.7"
    assert env["HOST"] == "192.168.1.5"
    assert env["APP"] == "web"
    assert env["NOTE"] == 'hello "world"'
    assert env["LABELS"] == 'app="web"\ntier="front"'
    assert env["GONE"] == ""


def test_unsupported_field_ref_is_a_config_error(opts: ContainerOptions) -> None:
    pod = make_pod({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]})
    with pytest.raises(CreateContainerConfigError, match="unsupported fieldPath"):
        config_for(pod, opts)


def test_resource_field_refs_use_divisor_and_node_allocatable(opts: ContainerOptions) -> None:
    pod = make_pod({
        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
        "env": [
            {"name": "CPU_REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
            {"name": "CPU_REQ_M", "valueFrom": {"resourceFieldRef": {
                "resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                "resource": "requests.memory", "divisor": "1Mi"}}},
            {"name": "CPU_LIM", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM_LIM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
        ],
    })
    env = env_of(config_for(pod, opts))
    assert env["CPU_REQ"] == "1"  # rounded up to whole cores
    assert env["CPU_REQ_M"] == "250"
    assert env["MEM_MI"] == "64"
    assert env["CPU_LIM"] == "4"
    assert env["MEM_LIM"] == str(8 * GIB)


def test_a_resource_field_ref_without_divisor_as_the_api_server_serves_it_starts(
        opts: ContainerOptions) -> None:
    """The API server stores an omitted divisor as the quantity 0 and serves it as "0":
    that reads as the divisor 1, the same value as no divisor at all."""
    def pod_with(divisor: str | None) -> Any:
        ref: dict[str, str] = {"resource": "limits.cpu"}
        mem: dict[str, str] = {"resource": "limits.memory"}
        if divisor is not None:
            ref["divisor"] = mem["divisor"] = divisor
        return make_pod({"resources": {"limits": {"cpu": "1250m", "memory": "64Mi"}},
                         "env": [{"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": ref}},
                                 {"name": "MEM_LIMIT", "valueFrom": {"resourceFieldRef": mem}}]})

    served = pod_with("0")
    assert served.spec.containers[0].env[0].value_from.resource_field_ref.divisor == "0"
    env = env_of(config_for(served, opts))
    assert env["CPU_LIMIT"] == "2"
    assert env["MEM_LIMIT"] == str(64 * 2**20)
    for other in (pod_with("1"), pod_with(None)):
        same = env_of(config_for(other, opts))
        assert (same["CPU_LIMIT"], same["MEM_LIMIT"]) == (env["CPU_LIMIT"], env["MEM_LIMIT"])
    # No limit: the node's allocatable, with the stored zero divisor too.
    unlimited = make_pod({"env": [{"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {
        "resource": "limits.cpu", "divisor": "0"}}}]})
    assert env_of(config_for(unlimited, opts))["CPU_LIMIT"] == "4"


def test_host_ip_env_comes_from_the_node_before_the_pod_status_has_one(
        opts: ContainerOptions) -> None:
    """A pod's first start: its status has no hostIP yet, the env has the node's IPs."""
    refs = {"HOST_IP": "status.hostIP", "HOST_IPS": "status.hostIPs", "POD_IP": "status.podIP"}
    env = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in refs.items()]
    pod = make_pod({"env": env})
    assert pod.status is None
    opts.host_ips = lambda: ["10.1.0.4", "fd00::4"]
    first = env_of(config_for(pod, opts))
    assert (first["HOST_IP"], first["HOST_IPS"]) == ("10.1.0.4", "10.1.0.4,fd00::4")
    # A host-network pod has the node's IPs as its own.
    host_network = make_pod({"env": env}, hostNetwork=True)
    shared = env_of(config_for(host_network, dataclasses.replace(opts, pod_ips=[])))
    assert shared["POD_IP"] == "10.1.0.4"
    # The node lists no IP address yet: the kubelet's own node IP.
    opts.host_ips = lambda: []
    assert env_of(config_for(pod, opts))["HOST_IP"] == "192.168.1.5"


class FakeEnvSource:
    def __init__(self, config_maps: Mapping[str, Mapping[str, str]]) -> None:
        self.config_maps = config_maps

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.config_maps.get(f"{namespace}/{name}")

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return None


def test_env_from_config_map_with_prefix_and_key_refs(opts: ContainerOptions) -> None:
    opts.env_source = FakeEnvSource({"shop/settings": {"MODE": "fast", "1BAD": "x"}})
    pod = make_pod({
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                    {"configMapRef": {"name": "absent", "optional": True}}],
        "env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": "settings",
                                                                 "key": "MODE"}}},
                {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k",
                                                               "optional": True}}},
                {"name": "USE", "value": "$(CFG_MODE)"}],
    })
    env = env_of(config_for(pod, opts))
    assert env == {"CFG_MODE": "fast", "CFG_1BAD": "x", "M": "fast", "USE": "fast"}


def test_invalid_env_from_keys_are_skipped_with_an_event(opts: ContainerOptions) -> None:
    opts.env_source = FakeEnvSource({"shop/settings": {"MODE": "fast", "1BAD": "x",
                                                       "2bad": "y"}})
    events: list[tuple[str, str, str]] = []

    class Recorder:
        def event(self, obj: object, event_type: str, reason: str, message: str,
                  field_path: str = "") -> None:
            events.append((event_type, reason, message))

    opts.recorder = Recorder()
    pod = make_pod({"envFrom": [{"configMapRef": {"name": "settings"}}]})
    assert env_of(config_for(pod, opts)) == {"MODE": "fast"}
    assert events == [("Warning", "InvalidEnvironmentVariableNames",
                       "Keys [1BAD, 2bad] from the EnvFrom configMap shop/settings were skipped "
                       "since they are considered invalid environment variable names.")]


def test_missing_config_map_key_is_a_config_error(opts: ContainerOptions) -> None:
    opts.env_source = FakeEnvSource({"shop/settings": {}})
    pod = make_pod({"env": [{"name": "M", "valueFrom": {"configMapKeyRef": {
        "name": "settings", "key": "MODE"}}}]})
    with pytest.raises(CreateContainerConfigError, match="couldn't find key MODE"):
        config_for(pod, opts)


# --- resources and security ---------------------------------------------------------------------

def test_resources_become_cgroup_settings(opts: ContainerOptions) -> None:
    pod = make_pod({"resources": {"requests": {"cpu": "250m", "memory": "1Gi"},
                                  "limits": {"cpu": "500m", "memory": "2Gi"}}})
    resources = config_for(pod, opts).linux.resources
    assert resources.cpu_shares == 256
    assert (resources.cpu_quota, resources.cpu_period) == (50_000, 100_000)
    assert resources.memory_limit_in_bytes == 2 * GIB
    assert resources.oom_score_adj == 875  # Burstable, 1Gi of 8Gi requested


def test_every_huge_page_size_gets_a_limit_zero_unless_asked_for(
        opts: ContainerOptions) -> None:
    # As the Go kubelet: a container may use only the huge pages its limits give it.
    sized = dataclasses.replace(opts, hugepage_sizes=(2 * 1024 * 1024, GIB))
    plain = config_for(make_pod(), sized).linux.resources
    assert [(h.page_size, h.limit) for h in plain.hugepage_limits] == [("2MB", 0), ("1GB", 0)]
    asking = make_pod({"resources": {"limits": {"hugepages-2Mi": "8Mi", "memory": "64Mi",
                                                "cpu": "1"}}})
    limits = config_for(asking, sized).linux.resources.hugepage_limits
    assert [(h.page_size, h.limit) for h in limits] == [("2MB", 8 * 1024 * 1024), ("1GB", 0)]
    none = dataclasses.replace(opts, hugepage_sizes=())
    assert not config_for(asking, none).linux.resources.hugepage_limits


def test_guaranteed_and_best_effort_resources(opts: ContainerOptions) -> None:
    guaranteed = make_pod({"resources": {"limits": {"cpu": "2", "memory": "64Mi"}}})
    resources = config_for(guaranteed, opts).linux.resources
    assert resources.cpu_shares == 2048  # the request defaults to the limit
    assert resources.cpu_quota == 200_000
    assert resources.oom_score_adj == -997
    best_effort = config_for(make_pod(), opts).linux.resources
    assert best_effort.cpu_shares == 2
    assert best_effort.cpu_quota == 0
    assert best_effort.memory_limit_in_bytes == 0
    assert best_effort.oom_score_adj == 1000


def test_tiny_cpu_limit_is_clamped_and_quota_can_be_disabled(opts: ContainerOptions) -> None:
    pod = make_pod({"resources": {"limits": {"cpu": "1m"}}})
    assert config_for(pod, opts).linux.resources.cpu_quota == 1000
    opts.enforce_cpu_limits = False
    assert config_for(pod, opts).linux.resources.cpu_quota == 0


def test_run_as_non_root_with_root_user_is_refused(opts: ContainerOptions) -> None:
    pod = make_pod({"securityContext": {"runAsUser": 0}}, securityContext={"runAsNonRoot": True})
    with pytest.raises(CreateContainerConfigError, match="runAsUser breaks non-root policy") as err:
        config_for(pod, opts, image_uid=1000)
    assert err.value.reason == "CreateContainerConfigError"


def test_run_as_non_root_checks_the_image_user(opts: ContainerOptions) -> None:
    pod = make_pod({"securityContext": {"runAsNonRoot": True}})
    with pytest.raises(CreateContainerConfigError, match="image will run as root"):
        config_for(pod, opts, image_uid=0)
    with pytest.raises(CreateContainerConfigError, match="non-numeric user"):
        config_for(pod, opts, image_uid=None, image_username="nginx")
    context = config_for(pod, opts, image_uid=1000).linux.security_context
    assert context.run_as_user.value == 1000


def test_image_user_reads_the_image_record() -> None:
    assert image_user(None) == (0, "")
    assert image_user(api_pb2.Image(id="x", uid=api_pb2.Int64Value(value=33))) == (33, "")
    assert image_user(api_pb2.Image(id="x", username="www")) == (None, "www")


def test_security_context_merges_pod_defaults(opts: ContainerOptions) -> None:
    pod = make_pod({"securityContext": {
        "runAsGroup": 7, "privileged": False, "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}},
        securityContext={"runAsUser": 1001, "runAsGroup": 5, "fsGroup": 2000,
                         "supplementalGroups": [3000]}, hostPID=True)
    context = config_for(pod, opts).linux.security_context
    assert context.run_as_user.value == 1001
    assert context.run_as_group.value == 7
    assert context.readonly_rootfs
    assert context.no_new_privs
    assert list(context.capabilities.add_capabilities) == ["NET_ADMIN"]
    assert list(context.capabilities.drop_capabilities) == ["ALL"]
    assert list(context.supplemental_groups) == [2000, 3000]
    assert context.namespace_options.pid == api_pb2.NODE
    assert "/proc/kcore" in context.masked_paths
    assert "/proc/sys" in context.readonly_paths
    assert context.seccomp.profile_type == api_pb2.SecurityProfile.Unconfined


@pytest.mark.parametrize(("seccomp_default", "own_profile", "expected"), [
    (False, None, api_pb2.SecurityProfile.Unconfined),
    (True, None, api_pb2.SecurityProfile.RuntimeDefault),
    (True, {"type": "Unconfined"}, api_pb2.SecurityProfile.Unconfined),
])
def test_seccomp_default_gives_profileless_containers_the_runtime_default(
        tmp_path: Path, seccomp_default: bool, own_profile: dict[str, str] | None,
        expected: int) -> None:
    # seccompDefault (KubeletConfiguration) reaches every container's options through the
    # runtime manager's node-wide options; a profile the pod names still wins.
    node_wide = RuntimeManagerOptions(root_dir=str(tmp_path), seccomp_default=seccomp_default)
    container_opts = dataclasses.replace(node_wide.container_options(),
                                         pod_dir=str(tmp_path / "pods" / "uid-1"))
    security = {"securityContext": {"seccompProfile": own_profile}} if own_profile else {}
    context = config_for(make_pod(security), container_opts).linux.security_context
    assert context.seccomp.profile_type == expected


def test_no_new_privs_only_when_escalation_is_explicitly_forbidden(
        opts: ContainerOptions) -> None:
    assert not config_for(make_pod(), opts).linux.security_context.no_new_privs


# --- container metadata, logs and mounts --------------------------------------------------------

def test_container_identity_log_path_and_annotations(opts: ContainerOptions) -> None:
    pod = make_pod({"workingDir": "/srv", "tty": True, "stdin": True})
    config = generate_container_config(pod.spec.containers[0], pod, 3, "sha256:abc", opts)
    assert (config.metadata.name, config.metadata.attempt) == ("app", 3)
    assert config.image.image == "sha256:abc"
    assert config.image.user_specified_image == "busybox:1.35"
    assert config.log_path == "app/3.log"
    assert os.path.isdir(os.path.join(opts.pod_logs_dir, "shop_web_uid-1", "app"))
    assert config.labels["io.kubernetes.pod.uid"] == "uid-1"
    assert config.annotations["io.kubernetes.container.restartCount"] == "3"
    assert (config.working_dir, config.tty, config.stdin) == ("/srv", True, True)


def test_termination_message_file_is_a_fresh_writable_file_per_instance(
        opts: ContainerOptions) -> None:
    pod = make_pod({"terminationMessagePath": "/dev/termination-log"})
    first = config_for(pod, opts)
    second = config_for(pod, opts)
    paths = [next(m.host_path for m in c.mounts if m.container_path == "/dev/termination-log")
             for c in (first, second)]
    assert paths[0] != paths[1]
    for path in paths:
        assert os.path.dirname(path) == os.path.join(opts.pod_dir, "containers", "app")
        assert os.stat(path).st_mode & 0o777 == 0o666


def test_managed_etc_hosts(opts: ContainerOptions) -> None:
    pod = make_pod(hostname="db-0", subdomain="db",
                   hostAliases=[{"ip": "10.1.1.1", "hostnames": ["foo.local", "bar.local"]}])
    mount = next(m for m in config_for(pod, opts).mounts if m.container_path == "/etc/hosts")
    assert mount.host_path == os.path.join(opts.pod_dir, "etc-hosts")
    content = Path(mount.host_path).read_text()
    assert content.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert "10.244.0.7\tdb-0.db.shop.svc.cluster.local\tdb-0\n" in content
    assert content.endswith("# Entries added by HostAliases.\n10.1.1.1\tfoo.local\tbar.local\n")


def test_host_network_etc_hosts_copies_the_node_file(opts: ContainerOptions,
                                                     tmp_path: Path) -> None:
    node_hosts = tmp_path / "hosts"
    node_hosts.write_text("127.0.0.1 localhost\n192.168.1.5 node-a\n")
    opts.node_hosts_file = str(node_hosts)
    opts.pod_ips = []
    pod = make_pod(hostNetwork=True)
    mount = next(m for m in config_for(pod, opts).mounts if m.container_path == "/etc/hosts")
    assert Path(mount.host_path).read_text() == (
        "# Kubernetes-managed hosts file (host network).\n"
        "127.0.0.1 localhost\n192.168.1.5 node-a\n")


def test_two_containers_writing_the_pod_hosts_file_at_once_both_start(
        opts: ContainerOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    # The second container's write lands between the first one's write and rename.
    pod = make_pod(containers=[{"name": "app", "image": "busybox:1.35"},
                               {"name": "side", "image": "busybox:1.35"}])
    replace = os.replace
    started: list[str] = []
    configs: list[api_pb2.ContainerConfig] = []

    def replace_after_the_other_container(source: str, target: str) -> None:
        if not started:
            started.append("side")
            configs.append(generate_container_config(pod.spec.containers[1], pod, 0,
                                                     "sha256:abc", opts))
        replace(source, target)

    monkeypatch.setattr(os, "replace", replace_after_the_other_container)
    configs.append(config_for(pod, opts))
    hosts = [m.host_path for c in configs for m in c.mounts if m.container_path == "/etc/hosts"]
    assert hosts == [os.path.join(opts.pod_dir, "etc-hosts")] * 2
    assert Path(hosts[0]).read_text().startswith("# Kubernetes-managed hosts file.\n")
    assert os.listdir(opts.pod_dir) == ["etc-hosts"]


def test_no_etc_hosts_without_pod_ips(opts: ContainerOptions) -> None:
    opts.pod_ips = []
    assert not [m for m in config_for(make_pod(), opts).mounts if m.container_path == "/etc/hosts"]


def test_volume_mounts_without_a_volume_manager_fail_clearly(opts: ContainerOptions) -> None:
    pod = make_pod({"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                   volumes=[{"name": "data", "emptyDir": {}}])
    with pytest.raises(CreateContainerConfigError, match="cannot find volume 'data'"):
        config_for(pod, opts)


# --- sandbox ------------------------------------------------------------------------------------

def test_sandbox_identity_logs_labels_and_linux(sandbox_opts: SandboxOptions) -> None:
    pod = make_pod(securityContext={"runAsUser": 1000, "sysctls": [
        {"name": "net.core.somaxconn", "value": "1024"}]})
    config = generate_pod_sandbox_config(pod, 2, sandbox_opts)
    assert (config.metadata.name, config.metadata.namespace, config.metadata.uid,
            config.metadata.attempt) == ("web", "shop", "uid-1", 2)
    assert config.log_directory == os.path.join(sandbox_opts.pod_logs_dir, "shop_web_uid-1")
    assert config.labels["app"] == "web"
    assert config.labels["io.kubernetes.pod.name"] == "web"
    assert config.annotations["note"] == 'hello "world"'
    assert config.linux.cgroup_parent == "/kubepods/burstable/poduid-1"
    assert config.linux.security_context.run_as_user.value == 1000
    assert dict(config.linux.sysctls) == {"net.core.somaxconn": "1024"}
    assert config.linux.security_context.namespace_options.network == api_pb2.POD
    assert config.linux.security_context.namespace_options.pid == api_pb2.CONTAINER


def test_host_namespaces_and_privileged(sandbox_opts: SandboxOptions) -> None:
    pod = make_pod({"securityContext": {"privileged": True}}, hostNetwork=True, hostIPC=True,
                   shareProcessNamespace=True)
    security = generate_pod_sandbox_config(pod, 0, sandbox_opts).linux.security_context
    assert security.privileged
    assert security.namespace_options.network == api_pb2.NODE
    assert security.namespace_options.ipc == api_pb2.NODE
    assert security.namespace_options.pid == api_pb2.POD


@pytest.mark.parametrize("kind", ["initContainers", "ephemeralContainers"])
def test_a_privileged_container_of_any_kind_makes_the_sandbox_privileged(
        sandbox_opts: SandboxOptions, kind: str) -> None:
    other: dict[str, Any] = {"name": "other", "image": "busybox:1.35",
                             "securityContext": {"privileged": True}}
    plain = generate_pod_sandbox_config(make_pod(), 0, sandbox_opts).linux.security_context
    pod = make_pod(None, **{kind: [other]})
    security = generate_pod_sandbox_config(pod, 0, sandbox_opts).linux.security_context
    assert not plain.privileged
    assert security.privileged


def test_hostname_rules(sandbox_opts: SandboxOptions) -> None:
    assert generate_pod_sandbox_config(make_pod(), 0, sandbox_opts).hostname == "web"
    assert generate_pod_sandbox_config(make_pod(hostname="h1"), 0, sandbox_opts).hostname == "h1"
    long_pod = make_pod()
    long_pod.metadata.name = "a" * 62 + "-bbb"
    assert generate_pod_sandbox_config(long_pod, 0, sandbox_opts).hostname == "a" * 62
    fqdn = make_pod(hostname="h1", subdomain="sub", setHostnameAsFQDN=True)
    assert generate_pod_sandbox_config(fqdn, 0, sandbox_opts).hostname == \
        "h1.sub.shop.svc.cluster.local"
    # Host-network pods keep the node's name.
    assert generate_pod_sandbox_config(make_pod(hostNetwork=True), 0, sandbox_opts).hostname == ""


def test_fqdn_longer_than_64_is_refused(sandbox_opts: SandboxOptions) -> None:
    pod = make_pod(hostname="h" * 40, subdomain="sub", setHostnameAsFQDN=True)
    with pytest.raises(SandboxConfigError, match="too long"):
        generate_pod_sandbox_config(pod, 0, sandbox_opts)


def test_parse_resolv_conf() -> None:
    conf = parse_resolv_conf(HOST_RESOLV + "search final.example\n")
    assert conf.nameservers == ["10.0.0.2", "10.0.0.3"]
    assert conf.searches == ["final.example"]
    assert conf.options == ["timeout:2", "attempts:3"]


def dns_of(pod: Any, opts: SandboxOptions) -> tuple[list[str], list[str], list[str]]:
    dns = generate_pod_sandbox_config(pod, 0, opts).dns_config
    return list(dns.servers), list(dns.searches), list(dns.options)


def test_dns_cluster_first(sandbox_opts: SandboxOptions) -> None:
    assert dns_of(make_pod(), sandbox_opts) == (
        ["10.96.0.10"],
        ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example",
         "lab.example"],
        ["ndots:5"])


def test_dns_default_and_host_network(sandbox_opts: SandboxOptions) -> None:
    host = (["10.0.0.2", "10.0.0.3"], ["corp.example", "lab.example"],
            ["timeout:2", "attempts:3"])
    assert dns_of(make_pod(dnsPolicy="Default"), sandbox_opts) == host
    # ClusterFirst on the host network falls back to the node's resolver...
    assert dns_of(make_pod(hostNetwork=True), sandbox_opts) == host
    # ...unless the pod asks for the cluster explicitly.
    servers, _, _ = dns_of(make_pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"),
                           sandbox_opts)
    assert servers == ["10.96.0.10"]


def test_dns_cluster_first_without_cluster_dns_uses_the_node(
        sandbox_opts: SandboxOptions) -> None:
    sandbox_opts.cluster_dns = []
    servers, _, _ = dns_of(make_pod(), sandbox_opts)
    assert servers == ["10.0.0.2", "10.0.0.3"]


def test_missing_cluster_dns_is_one_warning_event_per_pod(
        sandbox_opts: SandboxOptions) -> None:
    sandbox_opts.cluster_dns = []
    recorder = LoggingRecorder()
    events: list[Event] = []
    recorder.listeners.append(events.append)
    # Building a config touches no runtime; the sync loop builds one per sync.
    sandboxes = PodSandboxes(cast(RemoteRuntimeService, None), sandbox_opts, recorder=recorder)
    web = make_pod()
    for attempt in range(3):
        sandboxes.config(web, attempt)
    sandboxes.config(make_pod(dnsPolicy="Default"), 0)  # asks for the node's DNS anyway
    sandboxes.config(make_pod(hostNetwork=True), 0)     # so does ClusterFirst on the host
    assert [(e.object, e.type, e.reason) for e in events] == [
        ("shop/web", "Warning", "MissingClusterDNS")]
    assert events[0].message == (
        'pod: "web_shop(uid-1)". kubelet does not have ClusterDNS IP configured and cannot '
        'create Pod using "ClusterFirst" policy. Falling back to "Default" policy.')
    # A pod removed from the runtime (the GC keeps only pods with sandboxes) is told again.
    sandboxes.retain_pods(set())
    sandboxes.config(web, 0)
    assert len(events) == 2


def test_no_missing_cluster_dns_event_with_cluster_dns(sandbox_opts: SandboxOptions) -> None:
    recorder = LoggingRecorder()
    events: list[Event] = []
    recorder.listeners.append(events.append)
    sandboxes = PodSandboxes(cast(RemoteRuntimeService, None), sandbox_opts, recorder=recorder)
    sandboxes.config(make_pod(), 0)
    assert events == []


def test_dns_none_takes_only_the_pod_dns_config(sandbox_opts: SandboxOptions) -> None:
    pod = make_pod(dnsPolicy="None", dnsConfig={
        "nameservers": ["1.1.1.1"], "searches": ["x.example"],
        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]})
    assert dns_of(pod, sandbox_opts) == (["1.1.1.1"], ["x.example"], ["ndots:2", "edns0"])


def test_pod_dns_config_merges_over_cluster_first(sandbox_opts: SandboxOptions) -> None:
    pod = make_pod(dnsConfig={"nameservers": ["10.96.0.10", "8.8.8.8"],
                              "searches": ["extra.example"],
                              "options": [{"name": "ndots", "value": "1"}]})
    servers, searches, options = dns_of(pod, sandbox_opts)
    assert servers == ["10.96.0.10", "8.8.8.8"]
    assert searches[-1] == "extra.example"
    assert options == ["ndots:1"]


def test_dns_limits_nameservers_to_three(sandbox_opts: SandboxOptions) -> None:
    pod = make_pod(dnsConfig={"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"]})
    servers, _, _ = dns_of(pod, sandbox_opts)
    assert servers == ["10.96.0.10", "1.1.1.1", "2.2.2.2"]


def test_missing_resolv_conf_is_an_error_and_empty_means_loopback(
        sandbox_opts: SandboxOptions, tmp_path: Path) -> None:
    sandbox_opts.resolv_conf = str(tmp_path / "nope.conf")
    with pytest.raises(SandboxConfigError, match="resolv conf"):
        generate_pod_sandbox_config(make_pod(dnsPolicy="Default"), 0, sandbox_opts)
    sandbox_opts.resolv_conf = ""
    assert dns_of(make_pod(dnsPolicy="Default"), sandbox_opts) == (["127.0.0.1"], ["."], [])


def test_port_mappings(sandbox_opts: SandboxOptions) -> None:
    pod = pod_from_dict({
        "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
        "spec": {"containers": [
            {"name": "a", "image": "busybox", "ports": [
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 53, "hostPort": 5353, "protocol": "UDP", "hostIP": "127.0.0.1"},
                {"containerPort": 9090}]},
            {"name": "b", "image": "busybox", "ports": [
                {"containerPort": 443, "hostPort": 8443, "protocol": "SCTP"}]},
        ]},
    })
    mappings = generate_pod_sandbox_config(pod, 0, sandbox_opts).port_mappings
    assert [(m.protocol, m.container_port, m.host_port, m.host_ip) for m in mappings] == [
        (api_pb2.TCP, 80, 8080, ""),
        (api_pb2.UDP, 53, 5353, "127.0.0.1"),
        (api_pb2.SCTP, 443, 8443, ""),
    ]


# --- image references, pull policy and credentials ----------------------------------------------

@pytest.mark.parametrize(("image", "with_tag", "policy"), [
    ("busybox", "busybox:latest", "Always"),
    ("busybox:latest", "busybox:latest", "Always"),
    ("busybox:1.35", "busybox:1.35", "IfNotPresent"),
    ("registry.local:5000/team/app", "registry.local:5000/team/app:latest", "Always"),
    ("app@sha256:" + "a" * 64, "app@sha256:" + "a" * 64, "IfNotPresent"),
])
def test_default_tag_and_pull_policy(image: str, with_tag: str, policy: str) -> None:
    assert apply_default_tag(image) == with_tag
    assert default_pull_policy(image) == policy


@pytest.mark.parametrize("image", ["", "Busybox", "app:", "a" * 64, "bad image"])
def test_invalid_image_names(image: str) -> None:
    with pytest.raises(ValueError, match="couldn't parse image reference"):
        apply_default_tag(image)


def test_docker_hub_names_are_normalised() -> None:
    assert parse_image_reference("busybox") == ImageReference("docker.io", "library/busybox")
    assert parse_image_reference("index.docker.io/me/app:1") == \
        ImageReference("docker.io", "me/app", "1")


def docker_config_secret(auths: dict[str, Any]) -> dict[str, Any]:
    payload = base64.b64encode(json.dumps({"auths": auths}).encode()).decode()
    return {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": payload}}


class FakeImageService:
    """Stands in for containerd's image service: one image present, pulls scripted."""

    def __init__(self, present: dict[str, str], refuse: set[str] | None = None) -> None:
        self.present = present
        self.refuse = refuse or set()
        self.pulls: list[tuple[str, str]] = []
        self.active = 0
        self.max_active = 0
        self.status_reads: list[str] = []
        self.failing_reads: dict[str, int] = {}  # image: how many of its next reads fail
        self.held_reads: set[str] = set()  # status reads of these never answer
        self.cancelled_reads: list[str] = []

    async def image_status(self, image: str, verbose: bool = False) -> api_pb2.Image | None:
        self.status_reads.append(image)
        await asyncio.sleep(0)
        if self.failing_reads.get(image):
            self.failing_reads[image] -= 1
            raise RuntimeError(f"inspect {image}: connection reset")
        if image in self.held_reads:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled_reads.append(image)
                raise
        ref = self.present.get(image)
        return api_pb2.Image(id=ref, size=1) if ref else None

    async def pull_image(self, image: str, auth: api_pb2.AuthConfig | None = None,
                         sandbox_config: api_pb2.PodSandboxConfig | None = None) -> str:
        user = auth.username if auth else ""
        self.pulls.append((image, user))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await settle()  # a pull takes a while: others may start meanwhile
        self.active -= 1
        if image in self.refuse or user == "wrong":
            raise RuntimeError(f"failed to pull {image} as {user or 'anonymous'}")
        return "sha256:pulled"


def image_pod(image: str, policy: str | None = None, uid: str = "u1") -> Any:
    container: dict[str, Any] = {"name": "c", "image": image}
    if policy:
        container["imagePullPolicy"] = policy
    return pod_from_dict({"metadata": {"name": "p", "namespace": "ns", "uid": uid},
                          "spec": {"containers": [container]}})


async def test_image_manager_policy_and_back_off() -> None:
    service = FakeImageService({"busybox:1.35": "sha256:local"}, refuse={"gone:1"})
    clock = [100.0]
    manager = ImageManager(service, backoff=Backoff(10, 300, lambda: clock[0]))
    pod = image_pod("busybox:1.35")
    local = await manager.ensure_image_exists(pod, pod.spec.containers[0])
    # The status read to find it present comes along: the user check needs no second read.
    assert local.ref == "sha256:local" and local.status is not None
    assert local.status.id == "sha256:local"
    assert service.pulls == []
    always = image_pod("busybox:1.35", "Always")
    pulled = await manager.ensure_image_exists(always, always.spec.containers[0])
    assert pulled.ref == "sha256:pulled" and pulled.status is None

    missing = image_pod("gone:1")
    for expected in ("ErrImagePull", "ImagePullBackOff"):
        with pytest.raises(ImagePullError) as err:
            await manager.ensure_image_exists(missing, missing.spec.containers[0])
        assert err.value.reason == expected
    assert "failed to pull gone:1" in err.value.message
    clock[0] += 11
    with pytest.raises(ImagePullError) as err:
        await manager.ensure_image_exists(missing, missing.spec.containers[0])
    assert err.value.reason == "ErrImagePull"
    assert manager.backoff.get("u1_gone:1") == 20

    invalid = image_pod("Not/Valid")
    with pytest.raises(ImagePullError) as err:
        await manager.ensure_image_exists(invalid, invalid.spec.containers[0])
    assert err.value.reason == "InvalidImageName"


async def test_a_lookahead_reads_each_image_once_and_a_failed_read_again_where_it_is_used(
        ) -> None:
    service = FakeImageService({"app:1": "sha256:app", "flaky:1": "sha256:flaky"})
    manager = ImageManager(service)
    app = image_pod("app:1")

    service.failing_reads = {"flaky:1": 1, "other:1": 1}
    lookahead = manager.look_ahead(["app:1", "app:1", "Not/Valid", "flaky:1"])
    await settle()
    assert service.status_reads == ["app:1", "flaky:1"]

    # Two containers of the same image: neither reads the status again.
    for _ in range(2):
        ensured = await manager.ensure_image_exists(app, app.spec.containers[0],
                                                    lookahead=lookahead)
        assert ensured.ref == "sha256:app"
    assert service.status_reads == ["app:1", "flaky:1"]
    # The failed read is made again where the image is needed, and that one counts.
    flaky = image_pod("flaky:1")
    ensured = await manager.ensure_image_exists(flaky, flaky.spec.containers[0],
                                                lookahead=lookahead)
    assert ensured.ref == "sha256:flaky"
    assert service.status_reads == ["app:1", "flaky:1", "flaky:1"]
    # An image not looked ahead is read as without a lookahead; its failure is the user's error.
    other = image_pod("other:1")
    with pytest.raises(ImagePullError) as err:
        await manager.ensure_image_exists(other, other.spec.containers[0], lookahead=lookahead)
    assert err.value.reason == "ImageInspectError"
    assert "connection reset" in err.value.message
    await lookahead.aclose()


async def test_closing_a_lookahead_ends_the_reads_nobody_used() -> None:
    service = FakeImageService({})
    service.held_reads = {"slow:1"}
    lookahead = ImageManager(service).look_ahead(["slow:1"])
    await settle()  # the read is under way

    await lookahead.aclose()

    assert service.cancelled_reads == ["slow:1"]


async def test_pulls_are_serialised_unless_asked_otherwise() -> None:
    for serialize, expected in ((True, 1), (False, 3)):
        service = FakeImageService({})
        manager = ImageManager(service, serialize_pulls=serialize)
        pods = [image_pod(f"img{i}:1", uid=f"u{i}") for i in range(3)]
        await asyncio.gather(*(manager.ensure_image_exists(p, p.spec.containers[0])
                               for p in pods))
        assert service.max_active == expected


async def test_max_parallel_image_pulls_bounds_concurrent_pulls() -> None:
    service = FakeImageService({})
    manager = ImageManager(service, serialize_pulls=False, max_parallel_pulls=2)
    pods = [image_pod(f"img{i}:1", uid=f"u{i}") for i in range(5)]
    await asyncio.gather(*(manager.ensure_image_exists(p, p.spec.containers[0]) for p in pods))
    assert service.max_active == 2
    assert len(service.pulls) == 5


async def test_pull_qps_limit() -> None:
    service = FakeImageService({})
    manager = ImageManager(service, pull_qps=0.001, pull_burst=1)
    first, second = image_pod("a:1", uid="a"), image_pod("b:1", uid="b")
    await manager.ensure_image_exists(first, first.spec.containers[0])
    with pytest.raises(ImagePullError, match="pull QPS exceeded"):
        await manager.ensure_image_exists(second, second.spec.containers[0])


async def test_each_matching_credential_is_tried() -> None:
    service = FakeImageService({})
    manager = ImageManager(service)
    secrets = [docker_config_secret({"registry.local/team": {"username": "wrong",
                                                             "password": "x"}}),
               docker_config_secret({"registry.local": {"username": "right", "password": "y"}})]
    pod = image_pod("registry.local/team/app:1")
    pulled = await manager.ensure_image_exists(pod, pod.spec.containers[0], secrets)
    assert pulled.ref == "sha256:pulled"
    assert [user for _, user in service.pulls] == ["wrong", "right"]
