"""The conformance harness's reading of ginkgo's JUnit reports and what it prints of them."""

from __future__ import annotations

import re
from pathlib import Path

from testsupport.conformance import (
    TestResult,
    ci_focus,
    ci_subset,
    differences,
    parse_args,
    parse_junit,
    summary,
)

NODE_1 = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Kubernetes e2e suite" tests="4" failures="1" errors="0" time="95.1">
  <testcase name="[k8s.io] Pods should get a host IP [NodeConformance] [Conformance]"
            classname="Kubernetes e2e suite" time="12.5"></testcase>
  <testcase name="[sig-node] Downward API should provide host IP as an env var" classname="x"
            time="61.25"><failure type="Failure">pod never started</failure></testcase>
  <testcase name="[sig-apps] Deployment not selected" classname="x" time="0">
    <skipped></skipped></testcase>
  <testcase name="[k8s.io] Skipped at run time" classname="x" time="0.4">
    <skipped></skipped></testcase>
</testsuite>
"""
# The second ginkgo node lists the first node's test as not run (skipped, no time).
NODE_2 = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Kubernetes e2e suite" tests="2" failures="0" errors="0" time="20">
  <testcase name="[k8s.io] Pods should get a host IP [NodeConformance] [Conformance]"
            classname="x" time="0"><skipped></skipped></testcase>
  <testcase name="[sig-storage] EmptyDir volumes should support (root,0644,tmpfs)"
            classname="x" time="8"></testcase>
</testsuite>
"""


def write_reports(tmp_path: Path) -> Path:
    (tmp_path / "junit_01.xml").write_text(NODE_1)
    (tmp_path / "junit_02.xml").write_text(NODE_2)
    return tmp_path


def test_reports_of_all_nodes_give_the_tests_that_ran(tmp_path: Path) -> None:
    results = parse_junit(write_reports(tmp_path))
    assert {name: r.outcome for name, r in results.items()} == {
        "[k8s.io] Pods should get a host IP [NodeConformance] [Conformance]": "passed",
        "[sig-node] Downward API should provide host IP as an env var": "failed",
        "[k8s.io] Skipped at run time": "skipped",
        "[sig-storage] EmptyDir volumes should support (root,0644,tmpfs)": "passed",
    }
    failed = results["[sig-node] Downward API should provide host IP as an env var"]
    assert failed.seconds == 61.25
    assert failed.message == "pod never started"


def test_summary_lists_failures_first_and_counts_only_tests_that_ran(tmp_path: Path) -> None:
    text = summary(parse_junit(write_reports(tmp_path)), "title")
    lines = text.splitlines()
    assert lines[0] == "title"
    assert lines[1].split()[0] == "failed"
    assert "61.2 s" in lines[1] or "61.3 s" in lines[1]
    assert lines[-1] == "2/3 passed"


def test_differences_name_each_test_whose_outcome_differs() -> None:
    py = {"a": TestResult("a", "passed", 1), "b": TestResult("b", "failed", 1),
          "c": TestResult("c", "passed", 1)}
    go = {"a": TestResult("a", "passed", 1), "b": TestResult("b", "passed", 1),
          "d": TestResult("d", "failed", 1)}
    lines = differences(py, go)
    assert [line.split()[-1] for line in lines] == ["b", "c", "d"]
    assert "not run" in lines[1] and "not run" in lines[2]


def test_the_ci_focus_selects_exactly_the_subset() -> None:
    names = ci_subset()
    assert 20 <= len(names) <= 30
    assert len(set(names)) == len(names)
    focus = re.compile(ci_focus())
    assert all(focus.search(name) for name in names)
    # A longer test whose name merely contains a subset name is not selected.
    assert not focus.search(names[0] + " with more words")
    assert not focus.search("[k8s.io] Pods should be updated [NodeConformance] [Conformance]")


def test_arguments() -> None:
    args = parse_args(["--ci"])
    assert args.focus == ci_focus() and args.parallel >= 1
    args = parse_args(["--kubelet", "go", "--focus", "Pods", "--parallel", "3"])
    assert (args.kubelet, args.focus, args.parallel) == ("go", "Pods", 3)
    assert r"\[Serial\]" in args.skip
    args = parse_args(["--suite", "kubelet-conformance"])
    assert r"\[NodeConformance\]" in args.skip and "Conformance" in args.focus
