"""Fixtures on the session's containerd testbed: CRI clients and a running pykubelet."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from testsupport.kubelet_process import KubeletProcess, running_kubelet
from testsupport.testbed import Testbed

REQUEST_TIMEOUT = 30.0


@pytest.fixture
async def runtime(testbed: Testbed) -> AsyncIterator[RemoteRuntimeService]:
    client = RemoteRuntimeService(testbed.endpoint, request_timeout=REQUEST_TIMEOUT)
    await client.connect()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def images(testbed: Testbed) -> AsyncIterator[RemoteImageService]:
    client = RemoteImageService(testbed.endpoint, request_timeout=REQUEST_TIMEOUT)
    await client.connect()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def kubelet(testbed: Testbed, tmp_path: Path) -> Iterator[KubeletProcess]:
    """A running pykubelet on the testbed; its pods are removed afterwards."""
    with running_kubelet(tmp_path, testbed.endpoint) as process:
        yield process
