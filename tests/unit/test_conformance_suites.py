"""What each conformance suite selects, how a run splits into a parallel and a serial
phase, and how the two phases' reports make one table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testsupport.conformance import (
    DEFAULT_SKIP,
    SKIPPED_BY_CONSTRUCTION,
    SUITES,
    Phase,
    ci_focus,
    ginkgo_command,
    merge_phases,
    node_kinds,
    parse_args,
    parse_junit,
    plan_phases,
    regressions,
    summary,
)
from testsupport.controlplane import ControlPlane

# Full names as e2e.test v1.20.2 lists them.
POD_HOST_IP = "[k8s.io] Pods should get a host IP [NodeConformance] [Conformance]"
BACKOFF_CAP = "[k8s.io] Pods should cap back-off at MaxContainerBackOff [Slow][NodeConformance]"
PULL_IMAGE = ("[k8s.io] Container Runtime blackbox test when running a container with a new "
              "image should be able to pull image [NodeConformance]")
DEPLOYMENT = ("[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create "
              "new ones [Conformance]")
INTRA_POD_HTTP = ("[sig-network] Networking Granular Checks: Pods should function for "
                  "intra-pod communication: http [NodeConformance] [Conformance]")
DAEMONSET_SERIAL = ("[sig-apps] Daemon set [Serial] should run and stop simple daemon "
                    "[Conformance]")
TAINT_DISRUPTIVE = ("[k8s.io] [sig-node] NoExecuteTaintManager Single Pod [Serial] removing "
                    "taint cancels eviction [Disruptive] [Conformance]")
STATEFULSET_SLOW = ("[sig-apps] StatefulSet [k8s.io] Basic StatefulSet functionality "
                    "[StatefulSetBasic] Burst scaling should run to completion even with "
                    "unhealthy pods [Slow] [Conformance]")
RUN_AS_GROUP = ("[k8s.io] [sig-node] Security Context should support pod.Spec.SecurityContext."
                "RunAsUser And pod.Spec.SecurityContext.RunAsGroup [LinuxOnly]")
STARTUP_PROBE = "[k8s.io] Probing container should not be ready until startupProbe succeeds"
PORT_FORWARD_WS = ("[sig-cli] Kubectl Port forwarding With a server listening on localhost "
                   "should support forwarding over websockets")
NODE_AUTHENTICATOR = ("[sig-auth] [Feature:NodeAuthenticator] The kubelet's main port 10250 "
                      "should reject requests with no credentials")
SYSCTLS = "[k8s.io] Sysctls [LinuxOnly] [NodeFeature:Sysctls] should support sysctls"
FSGROUP = ("[sig-storage] EmptyDir volumes when FSGroup is specified [LinuxOnly] "
           "[NodeFeature:FSGroup] volume on tmpfs should have the correct mode using FSGroup")
LOCAL_DIR = ("[sig-storage] In-tree Volumes [Driver: local][LocalVolumeType: dir-link] "
             "[Testpattern: Pre-provisioned PV (default fs)] subPath should support existing "
             "directory")
LOCAL_BLOCK = ("[sig-storage] In-tree Volumes [Driver: local][LocalVolumeType: blockfs] "
               "[Testpattern: Pre-provisioned PV (default fs)] subPath should support existing "
               "directory")
HOSTPATH_SUBPATH = ("[sig-storage] In-tree Volumes [Driver: hostPath] [Testpattern: Inline-volume "
                    "(default fs)] subPath should support existing directory")
HOSTPATH_SNAPSHOT = ("[sig-storage] In-tree Volumes [Driver: hostPath] [Testpattern: Dynamic "
                     "PV (default fs)] provisioning should provision storage with snapshot "
                     "data source [Feature:VolumeSnapshotDataSource]")
EMPTYDIR_CONFORMANCE = ("[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) "
                        "[LinuxOnly] [NodeConformance] [Conformance]")
NAMES = [POD_HOST_IP, BACKOFF_CAP, PULL_IMAGE, DEPLOYMENT, INTRA_POD_HTTP, DAEMONSET_SERIAL,
         TAINT_DISRUPTIVE, STATEFULSET_SLOW, RUN_AS_GROUP, STARTUP_PROBE, PORT_FORWARD_WS,
         NODE_AUTHENTICATOR, SYSCTLS, FSGROUP, LOCAL_DIR, LOCAL_BLOCK, HOSTPATH_SUBPATH,
         HOSTPATH_SNAPSHOT,
         EMPTYDIR_CONFORMANCE]


def selected(focus: str, skip: str, names: list[str] = NAMES) -> set[str]:
    """What ginkgo runs: the names the focus matches anywhere and the skip does not."""
    return {name for name in names
            if re.search(focus, name) and not (skip and re.search(skip, name))}


def suite_selects(suite: str) -> set[str]:
    return selected(SUITES[suite].focus(), SUITES[suite].skip)


def test_node_conformance_runs_the_slow_node_tests_but_not_the_public_registry_pull() -> None:
    assert suite_selects("node-conformance") == {POD_HOST_IP, BACKOFF_CAP, INTRA_POD_HTTP,
                                                 EMPTYDIR_CONFORMANCE}


def test_the_conformance_suite_runs_every_conformance_test_serial_and_slow_ones_too() -> None:
    assert suite_selects("conformance") == {
        POD_HOST_IP, DEPLOYMENT, INTRA_POD_HTTP, DAEMONSET_SERIAL, TAINT_DISRUPTIVE,
        STATEFULSET_SLOW, EMPTYDIR_CONFORMANCE}
    assert SUITES["conformance"].default_nodes == 2


def test_kubelet_extended_runs_the_listed_kubelet_tests_outside_conformance() -> None:
    assert suite_selects("kubelet-extended") == {
        RUN_AS_GROUP, STARTUP_PROBE, PORT_FORWARD_WS, NODE_AUTHENTICATOR, SYSCTLS, FSGROUP,
        HOSTPATH_SUBPATH}


def test_every_test_skipped_by_construction_has_its_reason_and_no_suite_runs_it() -> None:
    for pattern, reason in SKIPPED_BY_CONSTRUCTION:
        assert len(reason) > 10, pattern
    for suite in SUITES:
        assert not suite_selects(suite) & {PULL_IMAGE, LOCAL_DIR, LOCAL_BLOCK}, suite


def test_the_old_suites_and_ci_keep_one_node_on_the_machine() -> None:
    for argv in (["--ci"], [], ["--suite", "kubelet-conformance"],
                 ["--suite", "kubelet-extended"], ["--kubelet", "go"]):
        assert parse_args(argv).nodes == 0, argv
    args = parse_args(["--ci"])
    assert (args.focus, args.skip) == (ci_focus(), DEFAULT_SKIP)


@pytest.mark.parametrize(("argv", "nodes"), [
    (["--suite", "conformance"], 2),
    (["--suite", "conformance", "--nodes", "3"], 3),
    (["--nodes", "1"], 1),
    (["--kubelet", "mixed"], 2),
    (["--kubelet", "mixed", "--compare", "--suite", "conformance"], 2),
])
def test_nodes_on_test_hosts(argv: list[str], nodes: int) -> None:
    assert parse_args(argv).nodes == nodes


@pytest.mark.parametrize("argv", [
    ["--kubelet", "mixed", "--nodes", "1"],
    ["--nodes", "0"],
    ["--compare", "--kubelet", "go"],
])
def test_arguments_that_cannot_make_a_cluster_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_mixed_runs_the_go_kubelet_on_the_first_node_only() -> None:
    assert node_kinds("mixed", 3) == ["go", "pykubelet", "pykubelet"]
    assert node_kinds("go", 2) == ["go", "go"]


def test_serial_tests_run_after_the_others_on_one_ginkgo_node() -> None:
    suite = SUITES["conformance"]
    chosen = sorted(suite_selects("conformance"))
    phases = plan_phases(chosen, focus=suite.focus(), skip=suite.skip, parallel=3)
    assert [(p.name, p.parallel) for p in phases] == [("parallel", 3), ("serial", 1)]
    parallel, serial = phases
    assert selected(parallel.focus, parallel.skip) == {
        POD_HOST_IP, DEPLOYMENT, INTRA_POD_HTTP, STATEFULSET_SLOW, EMPTYDIR_CONFORMANCE}
    assert selected(serial.focus, serial.skip) == {DAEMONSET_SERIAL, TAINT_DISRUPTIVE}
    # Exactly those: not a longer name that contains one of them.
    assert not selected(serial.focus, serial.skip, [DAEMONSET_SERIAL + " again"])


def test_a_suite_without_serial_tests_runs_once_with_its_own_focus_and_skip() -> None:
    chosen = sorted(suite_selects("ci") | {POD_HOST_IP})
    assert plan_phases(chosen, focus=ci_focus(), skip=DEFAULT_SKIP, parallel=6) == [
        Phase("parallel", ci_focus(), DEFAULT_SKIP, 6)]
    only_serial = plan_phases([DAEMONSET_SERIAL], focus="x", skip="", parallel=6)
    assert [p.name for p in only_serial] == ["serial"]


PARALLEL_REPORT = f"""<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Kubernetes e2e suite" tests="3" failures="1">
  <testcase name="{DEPLOYMENT}" classname="x" time="20.5"></testcase>
  <testcase name="{INTRA_POD_HTTP}" classname="x" time="31"><failure>no reply</failure></testcase>
  <testcase name="{DAEMONSET_SERIAL}" classname="x" time="0"><skipped></skipped></testcase>
</testsuite>
"""
SERIAL_REPORT = f"""<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Kubernetes e2e suite" tests="3" failures="0">
  <testcase name="{DEPLOYMENT}" classname="x" time="0"><skipped></skipped></testcase>
  <testcase name="{DAEMONSET_SERIAL}" classname="x" time="44"></testcase>
  <testcase name="{TAINT_DISRUPTIVE}" classname="x" time="130"></testcase>
</testsuite>
"""


def test_both_phases_make_one_table(tmp_path: Path) -> None:
    for phase, text in (("parallel", PARALLEL_REPORT), ("serial", SERIAL_REPORT)):
        (tmp_path / phase).mkdir()
        (tmp_path / phase / "junit_01.xml").write_text(text)
    merged = merge_phases(parse_junit(tmp_path / "parallel"), parse_junit(tmp_path / "serial"))
    assert {name: r.outcome for name, r in merged.items()} == {
        DEPLOYMENT: "passed", INTRA_POD_HTTP: "failed", DAEMONSET_SERIAL: "passed",
        TAINT_DISRUPTIVE: "passed"}
    lines = summary(merged, "title").splitlines()
    assert lines[1].split()[0] == "failed" and lines[1].endswith(INTRA_POD_HTTP)
    assert lines[-1] == "3/4 passed"


def test_a_comparison_fails_on_what_only_the_go_kubelet_passed(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "junit_01.xml").write_text(PARALLEL_REPORT)
    ours = parse_junit(tmp_path / "r")
    go = {**ours, INTRA_POD_HTTP: ours[DEPLOYMENT].__class__(INTRA_POD_HTTP, "passed", 3)}
    assert regressions(ours, go) == [INTRA_POD_HTTP]
    assert regressions(go, ours) == []


def test_the_suite_is_told_how_many_nodes_there_are(tmp_path: Path) -> None:
    plane_dir = tmp_path / "plane"
    plane_dir.mkdir()
    (plane_dir / "env").write_text(f"KUBERNETES_BIN_DIR={tmp_path}\n"
                                   f"ADMIN_KUBECONFIG={plane_dir}/admin.kubeconfig\n")
    (tmp_path / "kubectl").write_text("#!/bin/sh\n")
    command = ginkgo_command(bin_dir=tmp_path, plane=ControlPlane(plane_dir), focus="x",
                             skip="y", parallel=2, report_dir=tmp_path / "junit", num_nodes=2)
    assert "--num-nodes=2" in command and "--nodes=2" in command


def test_an_empty_skip_runs_what_the_suite_skips_with_serial_tests_still_last() -> None:
    args = parse_args(["--skip", ""])
    assert args.skip == ""
    phases = plan_phases([POD_HOST_IP, DAEMONSET_SERIAL], focus=args.focus, skip=args.skip,
                         parallel=2)
    assert [(p.name, p.skip) for p in phases] == [("parallel", r"\[Serial\]"), ("serial", "")]
