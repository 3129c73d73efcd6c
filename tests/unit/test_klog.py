"""klog lines as an operator reads them: the header names the code that logged."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from pykubelet.api import pod_from_dict
from pykubelet.events import NORMAL, WARNING, LoggingRecorder
from pykubelet.util import klog


@pytest.fixture
def log_stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """klog routed to a string for one test; the logger is put back afterwards."""
    logger = logging.getLogger("pykubelet")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    monkeypatch.setattr(klog, "_verbosity", klog.verbosity())
    stream = io.StringIO()
    klog.setup(0, stream)
    try:
        yield stream
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved


def test_plain_lines_name_the_calling_file(log_stream: io.StringIO) -> None:
    klog.info("Starting kubelet main sync loop")
    line = log_stream.getvalue().strip()
    assert line.startswith("I")
    assert ' test_klog.py:' in line
    assert line.endswith('] "Starting kubelet main sync loop"')


def test_event_lines_name_the_code_that_recorded_the_event(log_stream: io.StringIO) -> None:
    klog.set_verbosity(3)
    pod = pod_from_dict({"metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
                         "spec": {"containers": [{"name": "app", "image": "busybox"}]}})
    LoggingRecorder().event(pod, WARNING, "Unhealthy", "Readiness probe failed: timeout",
                            "spec.containers{app}")
    line = log_stream.getvalue().strip()
    # Not events/__init__.py: the recorder is only the messenger.
    assert " test_klog.py:" in line
    assert "__init__.py" not in line
    assert ('"Event occurred" object="shop/web" fieldPath="spec.containers{app}" '
            'type="Warning" reason="Unhealthy" message="Readiness probe failed: timeout"') in line


def test_events_are_logged_from_v3_as_upstream(log_stream: io.StringIO) -> None:
    pod = pod_from_dict({"metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
                         "spec": {"containers": [{"name": "app", "image": "busybox"}]}})
    klog.set_verbosity(2)
    LoggingRecorder().event(pod, NORMAL, "Pulled", "already present")
    assert log_stream.getvalue() == ""
    klog.set_verbosity(3)
    LoggingRecorder().event(pod, NORMAL, "Pulled", "already present")
    assert 'reason="Pulled"' in log_stream.getvalue()
