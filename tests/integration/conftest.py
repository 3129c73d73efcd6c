"""CRI clients connected to the session's containerd testbed, for tests that drive CRI directly."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pykubelet.cri import RemoteImageService, RemoteRuntimeService
from tests.testbed import Testbed

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
