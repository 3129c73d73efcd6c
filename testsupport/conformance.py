"""Upstream's own end-to-end suite against a real node: pykubelet, or the Go kubelet beside it.

Every other test of this project was written here; ``e2e.test`` is what an
operator trusts. The same Debian ``kubernetes`` source package that builds the
test control plane and the Go kubelet 1.20 builds it too, with ``ginkgo``
(``scripts/testbed/controlplane-build.sh``, one ``make``, cached). One run:

1. a fresh containerd testbed (``testbed.py``) with the images the suite asks
   for imported under their upstream names (``build-images.sh --e2e``: agnhost
   and nonewprivs from the tree's sources, busybox, web-server stand-ins);
2. a fresh control plane (``controlplane.py``);
3. one node joined to it: pykubelet configured exactly as
   ``scripts/run-cluster.sh`` runs it (``examples/cluster/kubelet.yaml``: x509
   and webhook authentication, Webhook authorization, the node's own
   credential), or the Go kubelet with the same authentication, authorization
   and reservations (``go_kubelet.py`` keeps it off the host's iptables and
   kernel settings);
4. ``ginkgo --nodes=N e2e.test`` with upstream's provider ``skeleton`` (a
   cluster that exists already), the focus and skip given, JUnit reports into
   the output directory;
5. a table (test, result, seconds) and ``N/M passed``; with ``--compare`` both
   kubelets in turn on the same machine and the tests whose results differ.

``--suite kubelet-conformance`` runs the kubelet's ``[Conformance]`` tests
beyond ``[NodeConformance]``; ``--ci`` runs the fixed subset in
``conformance_ci_subset.txt`` (27 fast tests; ``.ci/run`` runs it after the
unit and integration tests). Exit status: 0 when every
selected test passed (with ``--compare``: when pykubelet passed every test the
Go kubelet passed), 1 otherwise, 2 when the harness itself could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
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
from testsupport.go_kubelet import GO_CONTAINER_LOGS, GO_POD_LOGS, GoKubeletProcess
from testsupport.kubelet_process import KubeletProcess, remove_everything
from testsupport.polling import WaitTimeout, wait_until
from testsupport.testbed import REPO_ROOT, Testbed, TestbedError

# The node-conformance tests that need no serial slot, no disruption and no
# optional feature.
DEFAULT_FOCUS = r"\[NodeConformance\]"
# The two tests that pull with policy Always from the public registries
# (k8s.gcr.io, gcr.io/authenticated-image-pulling), which this testbed cannot
# reach: each fails only after three 5-minute attempts, on either kubelet.
NEEDS_PUBLIC_REGISTRY = (r"should be able to pull image \[NodeConformance\]|"
                         r"should be able to pull from private registry with secret")
DEFAULT_SKIP = (r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:|"
                + NEEDS_PUBLIC_REGISTRY)
# The kubelet's other [Conformance] tests: sig-node's, and sig-storage's on the
# volumes the kubelet itself fills (ginkgo looks for the focus anywhere in a
# test's full name, so the apps tests that name [k8s.io] inside are skipped).
KUBELET_CONFORMANCE_FOCUS = (r"(\[k8s\.io\]|\[sig-node\]|\[sig-storage\] "
                             r"(Subpath|EmptyDir|ConfigMap|Secrets|Projected|Downward API))"
                             r".*\[Conformance\]")
KUBELET_CONFORMANCE_SKIP = DEFAULT_SKIP + r"|\[NodeConformance\]|\[sig-apps\]"
SUITES = ("node-conformance", "kubelet-conformance", "ci")
DEFAULT_PARALLEL = 6
# The CI subset: fast tests over what a node does for pods (lifecycle, init
# containers, probes, hooks, env, downward API, configMap/secret/projected/
# emptyDir volumes, logs, exec), one full test name a line.
CI_SUBSET_FILE = Path(__file__).with_name("conformance_ci_subset.txt")
NODE_READY_TIMEOUT_SECONDS = 120.0
EXAMPLE_CONFIG = REPO_ROOT / "examples" / "cluster" / "kubelet.yaml"
# Fields of pykubelet's configuration that the Go kubelet 1.20 does not know, and
# the health port, which GoKubeletProcess chooses (and polls) itself.
NOT_FOR_GO_KUBELET = ("podLogsDir", "failCgroupV1", "healthzPort", "healthzBindAddress")
KUBELETS = ("pykubelet", "go")


class HarnessError(RuntimeError):
    """The harness could not run the suite (as opposed to tests failing)."""


@dataclasses.dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest class

    name: str
    outcome: str  # passed, failed or skipped (skipped at run time by the test itself)
    seconds: float
    message: str = ""


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
            # A spec the node did not run never overwrites one it did.
            if name not in results or results[name].outcome == "skipped":
                results[name] = result
    return results


def summary(results: dict[str, TestResult], title: str) -> str:
    """The table a user reads: test, result, seconds; ``N/M passed`` last."""
    lines = [title]
    order = {"failed": 0, "skipped": 1, "passed": 2}
    for result in sorted(results.values(), key=lambda r: (order[r.outcome], r.name)):
        lines.append(f"  {result.outcome:<7} {result.seconds:7.1f} s  {result.name}")
    ran = [r for r in results.values() if r.outcome != "skipped"]
    passed = sum(1 for r in ran if r.outcome == "passed")
    lines.append(f"{passed}/{len(ran)} passed")
    return "\n".join(lines)


def differences(py: dict[str, TestResult], go: dict[str, TestResult]) -> list[str]:
    """The tests whose outcome differs between the two kubelets (or that one did not reach)."""
    lines = []
    for name in sorted(set(py) | set(go)):
        left = py[name].outcome if name in py else "not run"
        right = go[name].outcome if name in go else "not run"
        if left != right:
            lines.append(f"  pykubelet {left:<7}  Go kubelet {right:<7}  {name}")
    return lines


def ci_subset() -> list[str]:
    lines = CI_SUBSET_FILE.read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def ci_focus() -> str:
    """A focus that selects exactly the subset's tests (ginkgo looks for it anywhere in a
    test's full name, so each name is anchored at its end)."""
    return "|".join(f"{re.escape(name)}$" for name in ci_subset())


# --- one node ------------------------------------------------------------------------------------

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


def go_kubelet_config(plane: ControlPlane) -> dict[str, Any]:
    """The Go kubelet's settings: the example's, minus what 1.20 does not know, plus the
    authentication the example leaves to run-cluster.sh's ``--client-ca-file``."""
    config: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    for key in NOT_FOR_GO_KUBELET:
        config.pop(key, None)
    config.update(
        address="0.0.0.0",
        port=10250,
        readOnlyPort=0,
        authentication={"x509": {"clientCAFile": str(plane.ca_cert)},
                        "webhook": {"enabled": True}, "anonymous": {"enabled": False}},
        authorization={"mode": "Webhook"},
    )
    return config


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
            # It writes pod logs to the fixed /var/log/pods: remove what this run added.
            for path in set(glob.glob(str(GO_POD_LOGS / "*"))) - pod_logs_before:
                shutil.rmtree(path, ignore_errors=True)
        # Both link container logs into the fixed /var/log/containers; this run's
        # links point into logs removed by now.
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


# --- one run -------------------------------------------------------------------------------------

def ginkgo_command(*, bin_dir: Path, plane: ControlPlane, focus: str, skip: str,
                   parallel: int, report_dir: Path) -> list[str]:
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
        "--num-nodes=1",
        f"--report-dir={report_dir}",
    ]


def run_suite(kind: str, *, focus: str, skip: str, parallel: int,
              out_dir: Path) -> dict[str, TestResult]:
    """One full run with ``kind`` as the node; the reports and logs land in ``out_dir``."""
    report_dir = out_dir / "junit"
    report_dir.mkdir(parents=True, exist_ok=True)
    bin_dir = build_binaries()
    log(f"{kind}: starting containerd, the control plane and the node")
    with Testbed.fresh() as testbed:
        testbed.import_archives(testbed.build_e2e_images(bin_dir))
        with (ControlPlane.fresh() as plane,
              tempfile.TemporaryDirectory(prefix="pykc-", dir="/tmp",
                                          ignore_cleanup_errors=True) as base):
            try:
                with joined_node(kind, testbed=testbed, plane=plane, base=Path(base),
                                 bin_dir=bin_dir, out_dir=out_dir) as kubelet:
                    command = ginkgo_command(bin_dir=bin_dir, plane=plane, focus=focus,
                                             skip=skip, parallel=parallel,
                                             report_dir=report_dir)
                    log(f"{kind}: node {kubelet.node_name} Ready; running the suite "
                        f"({parallel} parallel; output in {out_dir / 'e2e.log'})")
                    started = time.monotonic()
                    with (out_dir / "e2e.log").open("wb") as output:
                        subprocess.run(command, stdout=output, stderr=subprocess.STDOUT,
                                       check=False, cwd=out_dir)
                    log(f"{kind}: the suite ran {time.monotonic() - started:.0f} s")
            finally:
                # Before the control plane (and its directory) goes.
                with contextlib.suppress(OSError):
                    shutil.copytree(plane.dir / "logs", out_dir / "controlplane-logs",
                                    dirs_exist_ok=True)
    results = parse_junit(report_dir)
    if not results:
        raise HarnessError(f"the suite reported no test (see {out_dir / 'e2e.log'})")
    return results


def log(message: str) -> None:
    print(f"conformance: {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/conformance.sh",
        description="Run upstream's e2e suite (v1.20.2) with pykubelet or the Go kubelet "
                    "as the only node of a local control plane.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--kubelet", choices=KUBELETS, default="pykubelet",
                       help="the node's kubelet (default pykubelet)")
    which.add_argument("--compare", action="store_true",
                       help="run both kubelets in turn and print the tests whose results differ")
    parser.add_argument("--suite", choices=SUITES, default="node-conformance",
                        help="node-conformance: the [NodeConformance] tests (default); "
                             "kubelet-conformance: sig-node's other [Conformance] tests and "
                             "sig-storage's on ConfigMap, Secret, Downward API, projected and "
                             f"emptyDir volumes; ci: the fixed subset in {CI_SUBSET_FILE.name}")
    parser.add_argument("--ci", action="store_const", const="ci", dest="suite",
                        help="the same as --suite ci")
    parser.add_argument("--focus", default=None, help="ginkgo focus (instead of the suite's)")
    parser.add_argument("--skip", default=None, help="ginkgo skip (instead of the suite's)")
    parser.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL,
                        help=f"ginkgo nodes (default {DEFAULT_PARALLEL})")
    parser.add_argument("--out", type=Path, default=None,
                        help="where reports and logs go (default /tmp/pykubelet-conformance-TIME)")
    args = parser.parse_args(argv)
    focus, skip = {"node-conformance": (DEFAULT_FOCUS, DEFAULT_SKIP),
                   "kubelet-conformance": (KUBELET_CONFORMANCE_FOCUS, KUBELET_CONFORMANCE_SKIP),
                   "ci": (ci_focus(), DEFAULT_SKIP)}[args.suite]
    args.focus = args.focus or focus
    args.skip = args.skip or skip
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    if args.out is None:
        args.out = Path(f"/tmp/pykubelet-conformance-{time.strftime('%Y%m%d-%H%M%S')}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        log("must run as root (containerd, the node's mounts and cgroups)")
        return 2
    kinds = KUBELETS if args.compare else (args.kubelet,)
    results: dict[str, dict[str, TestResult]] = {}
    try:
        for kind in kinds:
            out_dir = args.out / kind
            results[kind] = run_suite(kind, focus=args.focus, skip=args.skip,
                                      parallel=args.parallel, out_dir=out_dir)
            title = "pykubelet" if kind == "pykubelet" else "the Go kubelet v1.20.2"
            print(summary(results[kind], f"e2e.test v1.20.2 with {title} as the node "
                                         f"(JUnit: {out_dir / 'junit'})"), flush=True)
    except (HarnessError, TestbedError, ControlPlaneError, AssertionError) as err:
        # AssertionError: a kubelet that never became healthy (KubeletProcess.wait_for).
        log(f"error: {err}")
        return 2
    if args.compare:
        py, go = results["pykubelet"], results["go"]
        diff = differences(py, go)
        print("tests whose results differ:" if diff else "no test's result differs")
        print("\n".join(diff))
        regressions = [name for name, result in go.items() if result.outcome == "passed"
                       and (name not in py or py[name].outcome != "passed")]
        return 1 if regressions else 0
    ran = [r for r in results[args.kubelet].values() if r.outcome != "skipped"]
    return 0 if all(r.outcome == "passed" for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
