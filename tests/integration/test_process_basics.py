"""Process basics of a running pykubelet: lock hand-over, start-up log, verbosity, healthz."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from testsupport.kubelet_process import KubeletProcess
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

KLOG_LINE = re.compile(r'^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ [\w.]+:\d+\] "[^"]*"')


def test_exit_on_lock_contention_hands_over_to_the_new_kubelet(testbed: Testbed,
                                                               tmp_path: Path) -> None:
    lock = tmp_path / "kubelet.lock"
    args = ["--lock-file", str(lock), "--exit-on-lock-contention"]
    old = KubeletProcess(tmp_path / "old", testbed.endpoint, extra_args=args)
    old.start()
    new = KubeletProcess(tmp_path / "new", testbed.endpoint, extra_args=args)
    try:
        new.start()  # waits for the new kubelet's healthz: it only serves once it holds the lock
        assert old.process is not None
        assert old.process.wait(20) == 0
        assert "Lock contention detected" in old.log_text()
        assert lock.read_text().strip() == str(new.process.pid if new.process else "")
    finally:
        new.stop()
        old.stop()


def test_startup_lists_fields_not_acted_on_once_and_logs_in_klog_format(
        testbed: Testbed, tmp_path: Path) -> None:
    kubelet = KubeletProcess(tmp_path, testbed.endpoint, extra_config={
        "hairpinMode": "hairpin-veth", "memoryManagerPolicy": "Static",
        "evictionHard": {"memory.available": "100Mi"}})
    kubelet.start()
    try:
        log = kubelet.log_text()
    finally:
        kubelet.stop()
    notices = [line for line in log.splitlines() if "not acted on" in line]
    assert len(notices) == 1
    assert "hairpinMode" in notices[0] and "memoryManagerPolicy" in notices[0]
    # Fields pykubelet implements are not listed (eviction is implemented).
    assert "staticPodPath" not in notices[0] and "evictionHard" not in notices[0]
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines and all(KLOG_LINE.match(line) for line in lines), [
        line for line in lines if not KLOG_LINE.match(line)][:3]


def test_healthz_endpoints_and_read_only_pods(testbed: Testbed, tmp_path: Path) -> None:
    kubelet = KubeletProcess(tmp_path, testbed.endpoint)
    kubelet.start()
    try:
        base = f"http://127.0.0.1:{kubelet.healthz_port}"
        for path in ("/healthz", "/healthz/ping", "/healthz/syncloop"):
            with urllib.request.urlopen(base + path, timeout=5) as response:
                assert response.status == 200
                assert response.read() == b"ok"
        with urllib.request.urlopen(
                f"http://127.0.0.1:{kubelet.read_only_port}/pods", timeout=5) as response:
            body = json.loads(response.read())
        assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
        assert body["items"] == []
    finally:
        kubelet.stop()
