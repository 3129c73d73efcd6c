"""Shared pytest fixtures: the real containerd testbed and the real control plane.

Integration tests marked ``@pytest.mark.containerd`` take the ``testbed``
fixture. It is session-scoped because starting containerd and importing the
images costs seconds, and every test cleans up the pods it creates. If the
testbed cannot start, the fixture raises, so those tests error out with the
reason instead of being skipped silently: a missing runtime is a broken
environment, not an optional feature.

Tests marked ``@pytest.mark.controlplane`` take the ``control_plane`` fixture:
one etcd, kube-apiserver, kube-controller-manager and kube-scheduler for the
whole session (tests use names of their own and delete what they create). Its
first use on a machine builds the binaries from Debian's source package
(minutes, cached afterwards; scripts/testbed/controlplane-build.sh).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

# First, so that the suite runs with the generated client's packages deferred,
# as the kubelet process does (pykubelet/util/lazyimport.py).
import pykubelet  # noqa: F401
from testsupport.controlplane import ControlPlane, running_control_plane
from testsupport.testbed import Testbed, TestbedError


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    bed = Testbed.fresh()
    try:
        bed.build_images()
        bed.start()
    except BaseException:
        # A half-started daemon must not outlive the session; the start
        # failure is the reason worth reporting, not a secondary stop error.
        with contextlib.suppress(TestbedError):
            bed.stop()
        raise
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with running_control_plane() as plane:
        yield plane
