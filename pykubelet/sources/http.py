"""The static pod URL source (upstream ``pkg/kubelet/config/http.go``).

``staticPodURL`` points at a document holding one ``Pod`` or a ``PodList``
(JSON or YAML), fetched every ``httpCheckFrequency`` with the configured
``staticPodURLHeader`` headers. The source follows upstream's rules, which
keep a flaky server from flapping pods:

- a failed request, a non-200 answer or a body that does not decode is
  logged and nothing is sent, so the pods already running keep running;
- a body identical to the last one is not decoded again and sends nothing;
- an empty body sends an empty ``SET`` (the URL now serves no pods).

Repeated failures are logged at warning level three times, then at ``--v=4``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence

import aiohttp
from kubernetes_asyncio.client.models import V1Pod
from multidict import CIMultiDict

from pykubelet.api.kubetypes import HTTP_SOURCE, PodOperation, PodUpdate
from pykubelet.sources.static import ManifestError, decode_static_pods
from pykubelet.util import klog

MAX_CONFIG_LENGTH = 10 * 1024 * 1024
REQUEST_TIMEOUT = 10.0
_LOUD_FAILURES = 3


class URLSourceError(Exception):
    """Why one poll of the manifest URL produced nothing."""


class StaticPodURLSource:
    """Polls a manifest URL and sends its pods as ``SET`` updates."""

    def __init__(self, url: str, headers: Mapping[str, Sequence[str]] | None, node_name: str,
                 updates: asyncio.Queue[PodUpdate], check_frequency: float = 20.0,
                 timeout: float = REQUEST_TIMEOUT) -> None:
        self._url = url
        self._headers: CIMultiDict[str] = CIMultiDict()
        for name, values in (headers or {}).items():
            for value in values:
                self._headers.add(name, value)
        self._node_name = node_name
        self._updates = updates
        self._check_frequency = check_frequency
        self._timeout = timeout
        self._last_body: bytes | None = None
        self._failures = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Poll now and then every ``check_frequency`` until ``stop()``."""
        klog.info("Watching URL", URL=self._url)
        self._stop.clear()
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self._stop.is_set():
                await self.poll(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._check_frequency)

    def stop(self) -> None:
        self._stop.set()

    async def poll(self, session: aiohttp.ClientSession) -> None:
        """One fetch: send what the URL serves, or log why not."""
        try:
            await self._extract_from_url(session)
        except URLSourceError as err:
            self._log_failure(str(err))
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            self._log_failure(f"{self._url}: {str(err) or type(err).__name__}")
        except Exception as err:  # a decoder bug must not end the polling loop
            self._log_failure(f"{self._url}: unexpected failure: {err!r}")
        else:
            if self._failures:
                klog.info("Successfully read pods from URL", URL=self._url)
                self._failures = 0

    def _log_failure(self, reason: str) -> None:
        if self._failures < _LOUD_FAILURES:
            klog.warning("Failed to read pods from URL", err=reason)
        elif self._failures == _LOUD_FAILURES:
            klog.warning("Failed to read pods from URL. Dropping verbosity of this message to V(4)",
                         err=reason)
        else:
            klog.v(4).info("Failed to read pods from URL", err=reason)
        self._failures += 1

    async def _extract_from_url(self, session: aiohttp.ClientSession) -> None:
        async with session.get(self._url, headers=self._headers) as response:
            received = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                received.extend(chunk)
                if len(received) > MAX_CONFIG_LENGTH:
                    raise URLSourceError(f"{self._url}: response larger than "
                                         f"{MAX_CONFIG_LENGTH} bytes")
            body = bytes(received)
            if response.status != 200:
                raise URLSourceError(f"{self._url}: {response.status} {response.reason or ''}"
                                     .rstrip())
        if not body:
            # Forget the last body so that the same pods served again are sent again.
            self._last_body = None
            self._send([])
            raise URLSourceError(f"zero-length data received from {self._url}")
        if body == self._last_body:
            return
        # Remembered before decoding, as upstream: a bad body is reported once, not every poll.
        self._last_body = body
        try:
            # Off the event loop: the body is anyone's, and decoding a large one takes a while.
            pods = await asyncio.to_thread(decode_static_pods, body, node_name=self._node_name,
                                           source=HTTP_SOURCE, location=self._url)
        except ManifestError as err:
            raise URLSourceError(str(err)) from err
        self._send(pods)

    def _send(self, pods: list[V1Pod]) -> None:
        self._updates.put_nowait(PodUpdate(pods=pods, op=PodOperation.SET, source=HTTP_SOURCE))


__all__ = ["MAX_CONFIG_LENGTH", "StaticPodURLSource", "URLSourceError"]
