"""Upstream's own end-to-end suite against real nodes: pykubelet, the Go kubelet, or both.

Every other test of this project was written here; ``e2e.test`` is what an
operator trusts. The same Debian ``kubernetes`` source package that builds the
test control plane and the Go kubelet 1.20 builds it too, with ``ginkgo``
(``scripts/testbed/controlplane-build.sh``, one ``make``, cached). One run:

1. the suite's tests listed first (``e2e.test --ginkgo.dryRun`` with its focus
   and skip, a second), and split into those that may run beside others and
   the ``[Serial]`` ones;
2. the cluster. Without ``--nodes`` (the node suites and ``--ci``): one node
   on the machine itself, as before test hosts existed: a fresh containerd
   testbed (``testbed.py``), a fresh control plane (``controlplane.py``) and
   one kubelet joined to it. With ``--nodes N`` (``--suite conformance``: 2 by
   default): N test hosts (``nodehost.py``: a network namespace, node IP and
   pod CIDR each), a control plane whose API server pods reach
   (``reachable_control_plane``), on each host its own containerd and kubelet,
   then the cluster add-ons (kube-proxy on every node, cluster DNS:
   ``cluster_addons.py``). Every containerd gets the images the suite asks
   for under their upstream names (``build-images.sh --e2e``, built once,
   imported into each: about 6 s a node), never pulled;
3. the kubelets: pykubelet configured exactly as ``scripts/run-cluster.sh``
   runs it (``examples/cluster/kubelet.yaml``: x509 and webhook
   authentication, Webhook authorization, the node's own credential), or the
   Go kubelet 1.20 with the same authentication, authorization, reservations
   and API client limits (``go_kubelet.py`` keeps it off the host's iptables
   and kernel settings; on a test host its iptables are the node's own);
   ``--kubelet mixed``: the Go kubelet on the first node, pykubelet on the
   others, as in a rolling migration;
4. ``ginkgo e2e.test`` with upstream's provider ``skeleton`` (a cluster that
   exists already): the tests that may run in parallel on ``--parallel``
   ginkgo nodes, then the ``[Serial]`` ones on one, JUnit reports into the
   output directory;
5. one table over both phases (test, result, seconds) and ``N/M passed``;
   with ``--compare`` the Go kubelet's run too, on the same machine, and the
   tests whose results differ.

Suites (``SUITES``): ``node-conformance`` (default) the ``[NodeConformance]``
tests; ``kubelet-conformance`` the kubelet's ``[Conformance]`` tests beyond
``[NodeConformance]``; ``kubelet-extended`` the untagged and
``[NodeFeature:...]`` kubelet tests listed in ``KUBELET_EXTENDED_TESTS``;
``conformance`` all 311 ``[Conformance]`` tests on two nodes; ``ci`` (or
``--ci``) the fixed subset in ``conformance_ci_subset.txt`` (27 fast tests;
``.ci/run`` runs it after the unit and integration tests). What no suite runs
because this testbed cannot serve it by construction is ``SKIPPED_BY_CONSTRUCTION``,
each with its reason; a test whose v1.20 expectation upstream changed later (pykubelet
doing what the newer kubelet does) is in ``EXPECTATION_CHANGED_AFTER_1_20``, with the
upstream change, and marked so in the table when it fails.

Exit status: 0 when every selected test passed (with ``--compare``: when
pykubelet passed every test the Go kubelet passed), 1 otherwise, 2 when the
harness itself could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import importlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from testsupport.cluster import ClusterKubelet, get_node, host_ip, is_ready
from testsupport.controlplane import (
    ControlPlane,
    ControlPlaneError,
    build_binaries,
    kubectl_binary,
)
from testsupport.go_kubelet import (
    GO_CONTAINER_LOGS,
    GO_POD_LOGS,
    GoKubeletProcess,
    NodeGoKubelet,
)
from testsupport.kubelet_process import KubeletProcess, remove_everything
from testsupport.nodehost import (
    NodeHost,
    NodeHostError,
    NodeKubelet,
    NodeTestbed,
    reachable_control_plane,
    remove_testbed,
)
from testsupport.polling import WaitTimeout, wait_until
from testsupport.testbed import REPO_ROOT, Testbed, TestbedError

# --- what the suites select ----------------------------------------------------------------------

# What this testbed cannot serve by construction, with the reason: no suite runs these.
SKIPPED_BY_CONSTRUCTION: tuple[tuple[str, str], ...] = (
    (r"should be able to pull image \[NodeConformance\]",
     "pulls with policy Always from k8s.gcr.io, which the testbed cannot reach (it fails "
     "only after three 5-minute attempts, on either kubelet)"),
    (r"should be able to pull from private registry with secret",
     "pulls from gcr.io/authenticated-image-pulling with a secret, as above"),
    (r"\[Driver: local\]",
     "local volumes are made by a privileged pod that enters the mount namespace of the "
     "machine's PID 1 (/proc/1/ns/mnt): a node here is a namespace on this machine, so that "
     "would be the machine's own (refused here on either kubelet; block ones are loop "
     "devices it would make with losetup)"),
)
# Tests whose v1.20.2 expectation upstream changed later, where pykubelet does what the
# newer kubelet does (v1.35) and the newer test accepts: they run, and fail against
# pykubelet, and the table says why.
EXPECTATION_CHANGED_AFTER_1_20: tuple[tuple[str, str], ...] = (
    (r"Pod Container Status should never report success for a pending container",
     "a pod deleted while its container is still waiting gets that container's state "
     "terminated, exit code 137, reason ContainerStatusUnknown (\"The container could not "
     "be located when the pod was terminated\"), as the kubelet does since v1.22 "
     "(kubernetes PR #102344, the pod lifecycle refactor: TerminatePod fails every "
     "container without a final state); the newer test accepts exit code 137 with reason "
     "ContainerStatusUnknown or Error. The 1.20 kubelet left such a container waiting, "
     "and the 1.20 test accepts only exit code 1 (or 128 with the #88766 start error)"),
)


def changed_after_1_20(name: str) -> str | None:
    """Why ``name``'s v1.20 expectation no longer holds, if it is one of those."""
    for pattern, reason in EXPECTATION_CHANGED_AFTER_1_20:
        if re.search(pattern, name):
            return reason
    return None


NEEDS_PUBLIC_REGISTRY = "|".join(pattern for pattern, _ in SKIPPED_BY_CONSTRUCTION[:2])
CANNOT_SERVE = "|".join(pattern for pattern, _ in SKIPPED_BY_CONSTRUCTION)
SERIAL = r"\[Serial\]"

# The node-conformance tests that need no serial slot, no disruption and no optional
# feature; the two [Slow] ones (back-off reset on image update, the MaxContainerBackOff
# cap) included.
DEFAULT_FOCUS = r"\[NodeConformance\]"
NODE_CONFORMANCE_SKIP = (r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|"
                         + NEEDS_PUBLIC_REGISTRY)
# The skip the CI subset and kubelet-conformance have always run with.
DEFAULT_SKIP = (r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:|"
                + NEEDS_PUBLIC_REGISTRY)
# The kubelet's other [Conformance] tests: sig-node's, and sig-storage's on the
# volumes the kubelet itself fills (ginkgo looks for the focus anywhere in a
# test's full name, so the apps tests that name [k8s.io] inside are skipped).
KUBELET_CONFORMANCE_FOCUS = (r"(\[k8s\.io\]|\[sig-node\]|\[sig-storage\] "
                             r"(Subpath|EmptyDir|ConfigMap|Secrets|Projected|Downward API))"
                             r".*\[Conformance\]")
KUBELET_CONFORMANCE_SKIP = DEFAULT_SKIP + r"|\[NodeConformance\]|\[sig-apps\]"
# The whole conformance set: its [Serial] and [Disruptive] tests run in the serial phase.
CONFORMANCE_FOCUS = r"\[Conformance\]"
CONFORMANCE_SKIP = CANNOT_SERVE
# Kubelet tests outside both conformance sets that operators rely on (issue 35), each
# entry the start of the full names it selects (v1.20.2's, from e2e.test's dry run).
KUBELET_EXTENDED_TESTS = (
    # run-as-user/group, supplemental groups, seccomp
    "[k8s.io] [sig-node] Security Context should support ",
    "[k8s.io] Security Context When creating a container with runAsNonRoot ",
    # exec probe timeouts, startup probes, redirects
    "[k8s.io] Probing container should ",
    "[k8s.io] [sig-node] PreStop graceful pod terminated should wait until preStop hook "
    "completes the process",
    "[k8s.io] [sig-node] Pods Extended [k8s.io] Delete Grace Period should be submitted "
    "and removed",
    "[k8s.io] [sig-node] Pods Extended [k8s.io] Pod Container Status ",
    "[k8s.io] [sig-node] Pods Extended [k8s.io] Pod Container lifecycle ",
    # over SPDY and WebSocket
    "[sig-cli] Kubectl Port forwarding ",
    "[sig-cli] Kubectl client Kubectl copy should copy a file from a running Pod",
    "[sig-auth] [Feature:NodeAuthenticator] ",
    "[k8s.io] Sysctls [LinuxOnly] [NodeFeature:Sysctls] ",
    # anywhere in the name: configMap, secret, downward API, emptyDir, service account
    "[NodeFeature:FSGroup]",
    # the in-tree volume suites on the volumes a node serves itself (local ones: see
    # SKIPPED_BY_CONSTRUCTION)
    "[sig-storage] In-tree Volumes [Driver: emptydir] ",
    "[sig-storage] In-tree Volumes [Driver: hostPath] ",
    "[sig-storage] In-tree Volumes [Driver: hostPathSymlink] ",
)
KUBELET_EXTENDED_SKIP = (r"\[Conformance\]|\[NodeConformance\]|\[Flaky\]|\[Disruptive\]|"
                         r"\[Slow\]|\[Feature:(Volumes|Windows|SELinux|VolumeSnapshotDataSource)|"
                         + CANNOT_SERVE)


def kubelet_extended_focus() -> str:
    """The entries of ``KUBELET_EXTENDED_TESTS`` as one ginkgo focus (ginkgo looks for it
    anywhere in a full name, whose text it does not start with the name's first word)."""
    return "|".join(re.escape(entry) for entry in KUBELET_EXTENDED_TESTS)


# The CI subset: fast tests over what a node does for pods (lifecycle, init
# containers, probes, hooks, env, downward API, configMap/secret/projected/
# emptyDir volumes, logs, exec), one full test name a line.
CI_SUBSET_FILE = Path(__file__).with_name("conformance_ci_subset.txt")


def ci_subset() -> list[str]:
    lines = CI_SUBSET_FILE.read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def ci_focus() -> str:
    """A focus that selects exactly the subset's tests (ginkgo looks for it anywhere in a
    test's full name, so each name is anchored at its end)."""
    return exact_focus(ci_subset())


def exact_focus(names: Sequence[str]) -> str:
    """A focus that selects exactly ``names`` (each anchored at its end)."""
    return "|".join(f"{re.escape(name)}$" for name in names)


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str
    focus: Callable[[], str]
    skip: str
    # Test hosts when --nodes is not given; 0: the one node on the machine itself.
    default_nodes: int
    help: str


SUITES: dict[str, Suite] = {suite.name: suite for suite in (
    Suite("node-conformance", lambda: DEFAULT_FOCUS, NODE_CONFORMANCE_SKIP, 0,
          "the [NodeConformance] tests, [Slow] ones included (default)"),
    Suite("kubelet-conformance", lambda: KUBELET_CONFORMANCE_FOCUS, KUBELET_CONFORMANCE_SKIP, 0,
          "sig-node's other [Conformance] tests and sig-storage's on ConfigMap, Secret, "
          "Downward API, projected and emptyDir volumes"),
    Suite("kubelet-extended", kubelet_extended_focus, KUBELET_EXTENDED_SKIP, 0,
          "the untagged and [NodeFeature:...] kubelet tests of KUBELET_EXTENDED_TESTS "
          "(security context, probes, PreStop, grace periods, port-forward, cp, kubelet "
          "authentication, sysctls, fsGroup, in-tree emptyDir and hostPath volumes)"),
    Suite("conformance", lambda: CONFORMANCE_FOCUS, CONFORMANCE_SKIP, 2,
          "every [Conformance] test (311 in v1.20.2) on 2 test hosts: the parallel ones, "
          "then the [Serial] ones"),
    Suite("ci", ci_focus, DEFAULT_SKIP, 0,
          f"the fixed subset in {CI_SUBSET_FILE.name}"),
)}
DEFAULT_PARALLEL = 6
KUBELETS = ("pykubelet", "go", "mixed")
NODE_READY_TIMEOUT_SECONDS = 120.0
EXAMPLE_CONFIG = REPO_ROOT / "examples" / "cluster" / "kubelet.yaml"
# Fields of pykubelet's configuration that the Go kubelet 1.20 does not know, and
# the health port, which GoKubeletProcess chooses (and polls) itself.
NOT_FOR_GO_KUBELET = ("podLogsDir", "failCgroupV1", "healthzPort", "healthzBindAddress")
# The API client limits of both kubelets on test hosts: the same for both, and above the
# defaults (5 and 10), which a kubelet serving a parallel suite's pods spends in waits.
API_CLIENT_CONFIG = {"kubeAPIQPS": 50, "kubeAPIBurst": 100}


class HarnessError(RuntimeError):
    """The harness could not run the suite (as opposed to tests failing)."""


@dataclasses.dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest class

    name: str
    outcome: str  # passed, failed or skipped (skipped at run time by the test itself)
    seconds: float
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Phase:
    """One ginkgo run of a suite: its name, focus, skip and ginkgo nodes."""

    name: str
    focus: str
    skip: str
    parallel: int


def is_serial(name: str) -> bool:
    return re.search(SERIAL, name) is not None


def plan_phases(selected: Sequence[str], *, focus: str, skip: str,
                parallel: int) -> list[Phase]:
    """The runs that cover ``selected`` (the names the suite's focus and skip select): the
    tests that may run beside others on ``parallel`` ginkgo nodes, then the ``[Serial]``
    ones, named one by one, on one. A phase with nothing to run is left out."""
    phases = []
    if any(not is_serial(name) for name in selected):
        # The suites that never select a [Serial] test run with their skip as it is.
        parallel_skip = skip if SERIAL in skip else f"{skip}|{SERIAL}" if skip else SERIAL
        phases.append(Phase("parallel", focus, parallel_skip, parallel))
    serial = [name for name in selected if is_serial(name)]
    if serial:
        phases.append(Phase("serial", exact_focus(serial), skip, 1))
    return phases


# --- the suite's reports -------------------------------------------------------------------------

def parse_junit(report_dir: Path) -> dict[str, TestResult]:
    """The tests the run reached, from every ginkgo node's ``junit_NN.xml``.

    Each parallel node lists the specs it did not run as skipped with no run
    time; those are left out, so what remains is what the focus selected.
    """
    results: dict[str, TestResult] = {}
    for path in sorted(report_dir.glob("junit_*.xml")):
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name", "")
            seconds = float(case.get("time") or 0)
            failure = case.find("failure")
            if failure is not None:
                result = TestResult(name, "failed", seconds, (failure.text or "").strip())
            elif case.find("skipped") is not None:
                if seconds == 0:
                    continue
                result = TestResult(name, "skipped", seconds)
            else:
                result = TestResult(name, "passed", seconds)
            add_result(results, result)
    return results


def add_result(results: dict[str, TestResult], result: TestResult) -> None:
    # A spec a node (or a phase) did not run never overwrites one it did.
    if result.name not in results or results[result.name].outcome == "skipped":
        results[result.name] = result


def merge_phases(*phases: dict[str, TestResult]) -> dict[str, TestResult]:
    """One table over the phases' results (the serial phase's tests are not in the
    parallel phase's and the other way round; a test run in one and skipped at run time
    in the other counts as run)."""
    merged: dict[str, TestResult] = {}
    for results in phases:
        for result in results.values():
            add_result(merged, result)
    return merged


def summary(results: dict[str, TestResult], title: str) -> str:
    """The table a user reads: test, result, seconds; ``N/M passed`` last."""
    lines = [title]
    order = {"failed": 0, "skipped": 1, "passed": 2}
    for result in sorted(results.values(), key=lambda r: (order[r.outcome], r.name)):
        lines.append(f"  {result.outcome:<7} {result.seconds:7.1f} s  {result.name}")
        if result.outcome == "failed" and changed_after_1_20(result.name):
            lines.append("            (expected after 1.20: EXPECTATION_CHANGED_AFTER_1_20, "
                         "testsupport/conformance.py)")
    ran = [r for r in results.values() if r.outcome != "skipped"]
    passed = sum(1 for r in ran if r.outcome == "passed")
    lines.append(f"{passed}/{len(ran)} passed")
    return "\n".join(lines)


def differences(py: dict[str, TestResult], go: dict[str, TestResult],
                label: str = "pykubelet") -> list[str]:
    """The tests whose outcome differs between the two runs (or that one did not reach)."""
    lines = []
    for name in sorted(set(py) | set(go)):
        left = py[name].outcome if name in py else "not run"
        right = go[name].outcome if name in go else "not run"
        if left != right:
            lines.append(f"  {label} {left:<7}  Go kubelet {right:<7}  {name}")
    return lines


def regressions(py: dict[str, TestResult], go: dict[str, TestResult]) -> list[str]:
    """The tests the Go kubelet passed and the other run did not."""
    return sorted(name for name, result in go.items() if result.outcome == "passed"
                  and (name not in py or py[name].outcome != "passed"))


def node_kinds(kubelet: str, nodes: int) -> list[str]:
    """Each node's kubelet: ``mixed`` is the Go kubelet on the first, pykubelet on the rest."""
    if kubelet == "mixed":
        return ["go", *["pykubelet"] * (nodes - 1)]
    return [kubelet] * nodes


# --- the kubelets' settings ----------------------------------------------------------------------

class ConformancePyKubelet(ClusterKubelet):
    """pykubelet as ``scripts/run-cluster.sh`` runs it: the example configuration, the
    node's own credential, the cluster CA for client certificates."""

    def __init__(self, base: Path, endpoint: str, plane: ControlPlane, node_name: str,
                 node_ip: str | None) -> None:
        extra_args = ["--client-ca-file", str(plane.ca_cert),
                      "--container-runtime-endpoint", endpoint,
                      "--lock-file", str(base / "kubelet.lock"), "--v=2"]
        if node_ip:
            extra_args += ["--node-ip", node_ip]
        super().__init__(base, endpoint, plane, node_name,
                         kubeconfig=plane.node_kubeconfig(node_name), extra_args=extra_args)
        config: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
        # Its own health port and log directory, and the host's iptables left alone as the
        # Go kubelet's are (serving_config); everything else as the example says.
        config.update(healthzPort=self.healthz_port, podLogsDir=str(self.logs_dir),
                      makeIPTablesUtilChains=False)
        self.config_path.write_text(yaml.safe_dump(config))
        self.cgroup_root = ""


def kubelet_api_security(plane: ControlPlane) -> dict[str, Any]:
    """The kubelet API's authentication and authorization as upstream's defaults and
    run-cluster.sh's ``--client-ca-file`` make them (the example leaves them implicit)."""
    return {
        "authentication": {"x509": {"clientCAFile": str(plane.ca_cert)},
                           "webhook": {"enabled": True}, "anonymous": {"enabled": False}},
        "authorization": {"mode": "Webhook"},
    }


def go_kubelet_config(plane: ControlPlane) -> dict[str, Any]:
    """The Go kubelet's settings: the example's, minus what 1.20 does not know, plus the
    authentication the example leaves to run-cluster.sh's ``--client-ca-file``."""
    config: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for key in NOT_FOR_GO_KUBELET:
        config.pop(key, None)
    config.update(address="0.0.0.0", port=10250, readOnlyPort=0, **kubelet_api_security(plane))
    return config


def node_pykubelet_config(plane: ControlPlane, dns: dict[str, Any]) -> dict[str, Any]:
    """pykubelet's settings on a test host: the example's (its health port, log directory
    and cgroup root are the test kubelet's own), the kubelet API as ``kubelet_api_security``
    says, the API client limits and the cluster DNS."""
    config: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for key in ("healthzPort", "healthzBindAddress", "podLogsDir"):
        config.pop(key, None)
    return {**config, "port": 10250, "readOnlyPort": 0, **kubelet_api_security(plane),
            **API_CLIENT_CONFIG, **dns}


# --- one node on the machine itself --------------------------------------------------------------

@contextlib.contextmanager
def joined_node(kind: str, *, testbed: Testbed, plane: ControlPlane, base: Path,
                bin_dir: Path, out_dir: Path) -> Iterator[KubeletProcess]:
    """A kubelet of ``kind`` joined to ``plane`` until its Node is Ready; stopped afterwards,
    with every pod it left removed and its log copied into ``out_dir``."""
    node_ip = host_ip()
    name = f"e2e-{'py' if kind == 'pykubelet' else 'go'}-{secrets.token_hex(2)}"
    kubelet: KubeletProcess
    if kind == "pykubelet":
        kubelet = ConformancePyKubelet(base, testbed.endpoint, plane, name, node_ip)
    else:
        args = ["--kubeconfig", str(plane.node_kubeconfig(name))]
        if node_ip:
            args += ["--node-ip", node_ip]
        kubelet = GoKubeletProcess(base, testbed.endpoint, bin_dir / "kubelet", name,
                                   go_kubelet_config(plane), args)
    pod_logs_before = set(glob.glob(str(GO_POD_LOGS / "*")))
    kubelet.start()
    try:
        wait_node_ready(plane, name)
        yield kubelet
    finally:
        kubelet.stop()
        with contextlib.suppress(OSError):
            shutil.copyfile(kubelet.log_file, out_dir / "kubelet.log")
        remove_everything(testbed.endpoint)
        if isinstance(kubelet, GoKubeletProcess):
            kubelet.remove_leftovers()
        remove_log_leftovers(pod_logs_before)


def remove_log_leftovers(pod_logs_before: set[str]) -> None:
    """The Go kubelet writes pod logs to the fixed /var/log/pods: what this run added goes.
    Both kubelets link container logs into the fixed /var/log/containers; this run's links
    point into logs removed by now."""
    for path in set(glob.glob(str(GO_POD_LOGS / "*"))) - pod_logs_before:
        shutil.rmtree(path, ignore_errors=True)
    for link in GO_CONTAINER_LOGS.glob("*.log"):
        if link.is_symlink() and not link.exists():
            link.unlink(missing_ok=True)


def wait_node_ready(plane: ControlPlane, name: str) -> None:
    def ready() -> bool:
        node = get_node(plane, name)
        return node is not None and is_ready(node)

    try:
        wait_until(ready, NODE_READY_TIMEOUT_SECONDS, f"node {name} Ready", interval=1)
    except WaitTimeout as err:
        raise HarnessError(f"node {name} not Ready within "
                           f"{NODE_READY_TIMEOUT_SECONDS:.0f} s") from err


@contextlib.contextmanager
def machine_cluster(kind: str, *, bin_dir: Path, archives: Callable[[Testbed], list[Path]],
                    base: Path, out_dir: Path) -> Iterator[ControlPlane]:
    """A fresh testbed and control plane, and one node of ``kind`` on the machine itself."""
    with Testbed.fresh() as testbed:
        testbed.import_archives(archives(testbed))
        with (ControlPlane.fresh() as plane,
              _copied_plane_logs(plane, out_dir),
              joined_node(kind, testbed=testbed, plane=plane, base=base,
                          bin_dir=bin_dir, out_dir=out_dir) as kubelet):
            log(f"{kind}: node {kubelet.node_name} Ready")
            yield plane


# --- nodes on test hosts -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ClusterNode:
    """One node on a test host (the attributes of ``nodehost.Node``, with either kubelet)."""

    host: NodeHost
    testbed: NodeTestbed
    kubelet: KubeletProcess
    kind: str

    @property
    def name(self) -> str:
        return self.kubelet.node_name


AddonsFactory = Callable[[ControlPlane, list[Any]], contextlib.AbstractContextManager[Any]]


def load_cluster_addons() -> tuple[AddonsFactory | None, dict[str, Any]]:
    """``cluster_addons.cluster_addons`` (kube-proxy on every node, cluster DNS) and the
    kubelet settings that point at that DNS, or None and none while the module is absent."""
    try:
        module = importlib.import_module("testsupport.cluster_addons")
    except ImportError:
        return None, {}
    factory: AddonsFactory = module.cluster_addons
    return factory, dict(module.KUBELET_DNS_CONFIG)


def node_kubelet(kind: str, *, host: NodeHost, testbed: NodeTestbed, plane: ControlPlane,
                 base: Path, bin_dir: Path, dns: dict[str, Any]) -> KubeletProcess:
    name = host.name
    if kind == "go":
        return NodeGoKubelet(host, base, testbed.endpoint, bin_dir / "kubelet", name,
                             {**go_kubelet_config(plane), **API_CLIENT_CONFIG, **dns},
                             ["--kubeconfig", str(plane.node_kubeconfig(name))])
    return NodeKubelet(host, base, testbed.endpoint, plane, name,
                       kubeconfig=plane.node_kubeconfig(name),
                       extra_config=node_pykubelet_config(plane, dns),
                       extra_args=["--client-ca-file", str(plane.ca_cert),
                                   "--lock-file", str(base / "kubelet.lock"), "--v=2"])


@contextlib.contextmanager
def nodes_on_test_hosts(kinds: Sequence[str], *, plane: ControlPlane,
                        hosts: list[NodeHost],
                        bin_dir: Path, archives: Callable[[Testbed], list[Path]], base: Path,
                        out_dir: Path, dns: dict[str, Any]) -> Iterator[list[ClusterNode]]:
    """On each of ``hosts`` (created already) a containerd with the ``archives`` (built once,
    by the first testbed, into the images directory all share) imported and a
    kubelet of its kind, once every Node is Ready. Afterwards every kubelet stops before
    any testbed goes (removing a testbed's pods removes every test kubelet's cgroup tree),
    the kubelets' logs are copied into ``out_dir`` and what the Go kubelets left goes (their
    cgroups; their pod logs are in their hosts' /var/log/pods, which go with the hosts)."""
    nodes: list[ClusterNode] = []
    images: list[Path] = []
    go_kubelets: list[GoKubeletProcess] = []

    def remove_leftovers() -> None:
        for kubelet in go_kubelets:
            kubelet.remove_leftovers()

    with contextlib.ExitStack() as testbeds:
        # Last: once the pods are gone with the testbeds.
        testbeds.callback(remove_leftovers)
        with contextlib.ExitStack() as kubelets:
            for kind, host in zip(kinds, hosts, strict=True):
                testbed = NodeTestbed(host)
                testbeds.callback(remove_testbed, testbed)
                testbed.build_images()
                testbed.start()
                images = images or archives(testbed)
                testbed.import_archives(images)
                kubelet = node_kubelet(kind, host=host, testbed=testbed, plane=plane,
                                       base=base / host.name, bin_dir=bin_dir, dns=dns)
                kubelets.callback(_stop_kubelet, kubelet, out_dir)
                if isinstance(kubelet, GoKubeletProcess):
                    go_kubelets.append(kubelet)
                kubelet.start()
                nodes.append(ClusterNode(host, testbed, kubelet, kind))
                log(f"node {host.name} ({kind}, {host.node_ip}) started")
            for node in nodes:
                wait_node_ready(plane, node.name)
            yield nodes


def _stop_kubelet(kubelet: KubeletProcess, out_dir: Path) -> None:
    kubelet.stop()
    with contextlib.suppress(OSError):
        shutil.copyfile(kubelet.log_file, out_dir / f"kubelet-{kubelet.node_name}.log")


@contextlib.contextmanager
def cluster_on_test_hosts(kinds: Sequence[str], *, bin_dir: Path,
                      archives: Callable[[Testbed], list[Path]], base: Path,
                      out_dir: Path) -> Iterator[ControlPlane]:
    """``len(kinds)`` test hosts, a control plane pods reach, a node of each kind and the
    cluster add-ons; everything removed afterwards, the test hosts last."""
    addons, dns = load_cluster_addons()
    if addons is None:
        log("cluster addons not available (testsupport/cluster_addons.py): no kube-proxy, "
            "no cluster DNS; the tests that need them will fail")
    hosts = NodeHost.fresh_set(len(kinds), prefix="e2e")
    with contextlib.ExitStack() as stack:
        for host in hosts:
            stack.enter_context(host)
        plane = stack.enter_context(reachable_control_plane(hosts[0].host_address))
        stack.enter_context(_copied_plane_logs(plane, out_dir))
        nodes = stack.enter_context(nodes_on_test_hosts(
            kinds, plane=plane, hosts=hosts, bin_dir=bin_dir, archives=archives, base=base,
            out_dir=out_dir, dns=dns))
        log("nodes Ready: " + ", ".join(f"{node.name} ({node.kind})" for node in nodes))
        if addons is not None:
            stack.enter_context(addons(plane, list(nodes)))
            log("cluster add-ons running: kube-proxy on every node, cluster DNS")
        yield plane


# --- one run -------------------------------------------------------------------------------------

@contextlib.contextmanager
def _copied_plane_logs(plane: ControlPlane, out_dir: Path) -> Iterator[None]:
    """The control plane's logs copied into ``out_dir`` before it (and its directory) goes."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            shutil.copytree(plane.dir / "logs", out_dir / "controlplane-logs",
                            dirs_exist_ok=True)


def ginkgo_command(*, bin_dir: Path, plane: ControlPlane, focus: str, skip: str,
                   parallel: int, report_dir: Path, num_nodes: int = 1) -> list[str]:
    return [
        str(bin_dir / "ginkgo"), f"--nodes={parallel}", "--noColor",
        str(bin_dir / "e2e.test"), "--",
        "--provider=skeleton",
        f"--kubeconfig={plane.admin_kubeconfig}",
        # The suite's kubectl tests run the kubectl of the server's version.
        f"--kubectl-path={kubectl_binary(bin_dir)}",
        f"--ginkgo.focus={focus}",
        f"--ginkgo.skip={skip}",
        "--ginkgo.flakeAttempts=1",
        "--container-runtime=remote",
        f"--num-nodes={num_nodes}",
        f"--report-dir={report_dir}",
    ]


def list_tests(bin_dir: Path, *, focus: str, skip: str, work_dir: Path) -> list[str]:
    """The full names of the tests ``focus`` and ``skip`` select (e2e.test's dry run: no
    cluster is asked; a second)."""
    report_dir = work_dir / "dry-run"
    report_dir.mkdir(parents=True, exist_ok=True)
    command = [str(bin_dir / "e2e.test"), "--ginkgo.dryRun", "--ginkgo.noColor",
               f"--ginkgo.focus={focus}", f"--ginkgo.skip={skip}",
               "--provider=skeleton", "--kubeconfig=/dev/null", f"--report-dir={report_dir}"]
    with (work_dir / "dry-run.log").open("wb") as output:
        result = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT,
                                check=False, cwd=work_dir, timeout=300)
    if result.returncode != 0:
        raise HarnessError(f"e2e.test could not list the tests (see {work_dir / 'dry-run.log'})")
    # A dry run reports each selected test as passed in no time, the others as skipped.
    return sorted(parse_junit(report_dir))


def run_ginkgo(command: Sequence[str], *, output: Any, cwd: Path) -> None:
    """ginkgo in a process group of its own, which goes whole (its e2e.test processes
    too) when the harness is stopped or fails while it runs."""
    # A stop (Ctrl-C, SIGTERM) that came while Popen ran would raise before the try
    # below, leaving ginkgo running with nobody to kill it: held until then.
    held: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _frame: held.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=cwd,
                                   start_new_session=True)
    finally:
        for stopper, handler in previous.items():
            signal.signal(stopper, handler)
    try:
        for received in held:
            signal.raise_signal(received)  # its handler runs here, inside the try
        process.wait()
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # Once, as a Ctrl-C: the suite's processes, the nodes and the control plane are
    # removed on the way out (the context managers of run_suite).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run_suite(kind: str, *, focus: str, skip: str, parallel: int, nodes: int,
              out_dir: Path) -> dict[str, TestResult]:
    """One full run with ``kind`` as the kubelet (``nodes`` test hosts, or 0: one node on
    the machine itself); the reports and logs land in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    bin_dir = build_binaries()
    selected = list_tests(bin_dir, focus=focus, skip=skip, work_dir=out_dir)
    if not selected:
        raise HarnessError("the focus and skip select no test")
    phases = plan_phases(selected, focus=focus, skip=skip, parallel=parallel)
    serial = sum(1 for name in selected if is_serial(name))
    log(f"{kind}: {len(selected)} tests selected ({len(selected) - serial} parallel, "
        f"{serial} [Serial])")

    def archives(testbed: Testbed) -> list[Path]:
        return testbed.build_e2e_images(bin_dir)

    phase_results = []
    with tempfile.TemporaryDirectory(prefix="pykc-", dir="/tmp",
                                     ignore_cleanup_errors=True) as base:
        if nodes == 0:
            log(f"{kind}: starting containerd, the control plane and the node")
            cluster = machine_cluster(kind, bin_dir=bin_dir, archives=archives,
                                      base=Path(base), out_dir=out_dir)
        else:
            log(f"{kind}: starting {nodes} test hosts, the control plane and the nodes")
            cluster = cluster_on_test_hosts(node_kinds(kind, nodes), bin_dir=bin_dir,
                                        archives=archives, base=Path(base), out_dir=out_dir)
        with cluster as plane:
            for phase in phases:
                report_dir = out_dir / "junit" / phase.name
                report_dir.mkdir(parents=True, exist_ok=True)
                command = ginkgo_command(bin_dir=bin_dir, plane=plane, focus=phase.focus,
                                         skip=phase.skip, parallel=phase.parallel,
                                         report_dir=report_dir, num_nodes=max(nodes, 1))
                output_file = out_dir / f"e2e-{phase.name}.log"
                log(f"{kind}: {phase.name} phase, {phase.parallel} ginkgo node(s) "
                    f"(output in {output_file})")
                started = time.monotonic()
                with output_file.open("wb") as output:
                    run_ginkgo(command, output=output, cwd=out_dir)
                log(f"{kind}: the {phase.name} phase ran {time.monotonic() - started:.0f} s")
                phase_results.append(parse_junit(report_dir))
    results = merge_phases(*phase_results)
    if not results:
        raise HarnessError(f"the suite reported no test (see {out_dir})")
    return results


def log(message: str) -> None:
    print(f"conformance: {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/conformance.sh",
        description="Run upstream's e2e suite (v1.20.2) with pykubelet or the Go kubelet "
                    "as the nodes of a local control plane.")
    parser.add_argument("--kubelet", choices=KUBELETS, default="pykubelet",
                        help="the nodes' kubelet (default pykubelet); mixed: the Go kubelet "
                             "on the first node, pykubelet on the others (test hosts, "
                             "2 nodes unless --nodes)")
    parser.add_argument("--compare", action="store_true",
                        help="run with the Go kubelet too and print the tests whose results "
                             "differ (pykubelet, or with --kubelet mixed the mixed cluster, "
                             "against the Go kubelet)")
    parser.add_argument("--suite", choices=tuple(SUITES), default="node-conformance",
                        help="; ".join(f"{s.name}: {s.help}" for s in SUITES.values()))
    parser.add_argument("--ci", action="store_const", const="ci", dest="suite",
                        help="the same as --suite ci")
    parser.add_argument("--nodes", type=int, default=None,
                        help="N nodes, each on a test host of its own (network namespace, "
                             "node IP, containerd), with kube-proxy and cluster DNS; without "
                             "it the one node runs on the machine itself (--suite "
                             "conformance and --kubelet mixed: 2 test hosts)")
    parser.add_argument("--focus", default=None, help="ginkgo focus (instead of the suite's)")
    parser.add_argument("--skip", default=None, help="ginkgo skip (instead of the suite's)")
    parser.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL,
                        help=f"ginkgo nodes of the parallel phase (default {DEFAULT_PARALLEL})")
    parser.add_argument("--out", type=Path, default=None,
                        help="where reports and logs go (default /tmp/pykubelet-conformance-TIME)")
    args = parser.parse_args(argv)
    suite = SUITES[args.suite]
    args.focus = suite.focus() if args.focus is None else args.focus
    # --skip '' runs even what the suite skips (the serial phase still runs [Serial] last).
    args.skip = suite.skip if args.skip is None else args.skip
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    if args.compare and args.kubelet == "go":
        parser.error("--compare runs the Go kubelet itself: give --kubelet pykubelet or mixed")
    if args.nodes is None:
        args.nodes = max(suite.default_nodes, 2 if args.kubelet == "mixed" else 0)
    elif args.nodes < 1:
        parser.error("--nodes must be at least 1")
    if args.kubelet == "mixed" and args.nodes < 2:
        parser.error("--kubelet mixed needs at least 2 nodes")
    if args.out is None:
        args.out = Path(f"/tmp/pykubelet-conformance-{time.strftime('%Y%m%d-%H%M%S')}")
    return args


TITLES = {"pykubelet": "pykubelet", "go": "the Go kubelet v1.20.2",
          "mixed": "mixed kubelets (the Go kubelet v1.20.2 on node 1, pykubelet on the others)"}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        log("must run as root (containerd, the node's mounts and cgroups)")
        return 2
    kinds = (args.kubelet, "go") if args.compare else (args.kubelet,)
    results: dict[str, dict[str, TestResult]] = {}
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        for kind in kinds:
            out_dir = args.out / kind
            started = time.monotonic()
            results[kind] = run_suite(kind, focus=args.focus, skip=args.skip,
                                      parallel=args.parallel, nodes=args.nodes,
                                      out_dir=out_dir)
            where = (f"on {args.nodes} test host{'s' if args.nodes > 1 else ''}"
                     if args.nodes else "as the node")
            print(summary(results[kind], f"e2e.test v1.20.2 with {TITLES[kind]} {where} "
                                         f"(JUnit: {out_dir / 'junit'}; "
                                         f"{time.monotonic() - started:.0f} s in all)"),
                  flush=True)
    except (HarnessError, TestbedError, ControlPlaneError, NodeHostError,
            AssertionError) as err:
        # AssertionError: a kubelet that never became healthy (KubeletProcess.wait_for).
        log(f"error: {err}")
        return 2
    except KeyboardInterrupt:
        log("stopped: the suite's processes, the nodes and the control plane are removed")
        return 130
    if args.compare:
        ours, go = results[args.kubelet], results["go"]
        diff = differences(ours, go, label=args.kubelet)
        print("tests whose results differ:" if diff else "no test's result differs")
        print("\n".join(diff))
        return 1 if regressions(ours, go) else 0
    ran = [r for r in results[args.kubelet].values() if r.outcome != "skipped"]
    return 0 if all(r.outcome == "passed" for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
