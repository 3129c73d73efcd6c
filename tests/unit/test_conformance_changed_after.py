"""Tests whose v1.20 expectation upstream changed later are named in the results table,
so a reader of a failure sees why pykubelet (doing what the newer kubelet does) fails it."""

from __future__ import annotations

from testsupport.conformance import (
    EXPECTATION_CHANGED_AFTER_1_20,
    TestResult,
    changed_after_1_20,
    summary,
)

PENDING = ("[k8s.io] [sig-node] Pods Extended [k8s.io] Pod Container Status should never "
           "report success for a pending container")


def test_a_failure_whose_expectation_changed_after_1_20_is_marked_in_the_table() -> None:
    results = {PENDING: TestResult(PENDING, "failed", 90.0, "unexpected exit code 137"),
               "other": TestResult("other", "failed", 1.0)}
    lines = summary(results, "title").splitlines()
    marked = lines.index(next(line for line in lines if line.endswith(PENDING)))
    assert "changed after 1.20" not in lines[marked]
    assert "EXPECTATION_CHANGED_AFTER_1_20" in lines[marked + 1]
    assert sum("EXPECTATION" in line for line in lines) == 1  # "other" unmarked
    assert lines[-1] == "0/2 passed"  # still counted as failed


def test_each_entry_names_the_upstream_change() -> None:
    assert changed_after_1_20(PENDING) is not None
    assert changed_after_1_20("[k8s.io] Security Context When creating a container") is None
    for _pattern, reason in EXPECTATION_CHANGED_AFTER_1_20:
        assert "PR #" in reason and "1.20" in reason
