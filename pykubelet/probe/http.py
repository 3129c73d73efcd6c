"""The HTTP GET check (upstream ``pkg/probe/http``), shared with ``httpGet`` lifecycle hooks.

Upstream's rules, which users rely on when they write probes:

- a status from 200 to 399 is healthy, anything else is unhealthy with
  ``HTTP probe failed with statuscode: <code>``; a refused connection or a
  timeout is unhealthy too, never an internal error;
- redirects are followed (at most 10) only while they stay on the same host
  name; a redirect elsewhere is not followed and counts as a success with a
  warning (``Probe terminated redirects``), because following it would let an
  application make the node send requests to arbitrary hosts;
- requests carry ``User-Agent: kube-probe/<major>.<minor>`` and ``Accept: */*``
  unless the probe sets them (an empty ``Accept`` removes it); no compression,
  no proxy from the environment, no cookies, TLS certificates not verified
  (there is no way to give a probe a CA), a fresh connection every time;
- at most 10 KiB of the body is read: it becomes the probe's output.

``http_get`` is the transport both probes and lifecycle hooks use; hooks only
care whether a response came back, probes also judge its status.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp
from kubernetes_asyncio.client import V1Container, V1HTTPGetAction
from multidict import CIMultiDict
from yarl import URL

from pykubelet.container import ProbeResult
from pykubelet.probe import MAX_OUTPUT_BYTES, join_host_port, resolve_container_port, user_agent
from pykubelet.probe.tcp import dial_error_text
from pykubelet.util import klog

MAX_REDIRECTS = 10
# The statuses on which Go's HTTP client follows a Location header.
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Sent only if the probe does not set the header itself.
_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding")
_REDIRECT_WARNING = "Probe terminated redirects"
_PLAIN_HTTP_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                                     "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "PACKET_LENGTH_TOO_LONG"})


@dataclass(frozen=True)
class HTTPGetRequest:
    """The URL and headers of one probe or hook request, before the defaults are added."""

    url: str
    headers: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class HTTPGetResponse:
    """The final response: its status, the start of its body and the URL that answered."""

    status: int
    body: bytes
    url: str


class HTTPGetError(Exception):
    """No response came back (refused, timed out, TLS failure, too many redirects).

    ``plain_http_answer`` tells the hook runner that an ``https`` request met a
    server speaking plain HTTP, which upstream retries over ``http``.
    """

    def __init__(self, message: str, plain_http_answer: bool = False) -> None:
        super().__init__(message)
        self.plain_http_answer = plain_http_answer


@dataclass(frozen=True)
class HTTPProbeOutcome:
    """A judged HTTP probe: ``warning`` marks a success that did not follow a redirect."""

    result: ProbeResult
    output: str
    warning: bool = False


def canonical_header_name(name: str) -> str:
    """``content-type`` -> ``Content-Type``, the spelling Go normalises header names to."""
    if not name or any(c in name for c in " \t:"):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def format_url(scheme: str, host: str, port: int, path: str) -> str:
    """``scheme://host:port/path``; the path may carry a query, as upstream accepts."""
    base = f"{scheme}://{join_host_port(host, port)}"
    if not path:
        return base
    if not path.startswith("/"):
        path = "/" + path
    return base + path


def request_for_http_get_action(action: V1HTTPGetAction, container: V1Container,
                                pod_ip: str) -> HTTPGetRequest:
    """The request an ``httpGet`` probe or hook makes: host defaults to the pod IP.

    Raises ``PortResolutionError`` when the port names no declared container port.
    """
    scheme = (action.scheme or "http").lower()
    host = action.host or pod_ip
    port = resolve_container_port(action.port, container)
    headers: dict[str, list[str]] = {}
    for header in action.http_headers or []:
        headers.setdefault(canonical_header_name(header.name), []).append(header.value or "")
    return HTTPGetRequest(format_url(scheme, host, port, action.path or ""), headers)


def _request_headers(headers: Mapping[str, Iterable[str]],
                     purpose: str) -> tuple[CIMultiDict[str], list[str]]:
    """The headers to send and the aiohttp automatic headers to leave out."""
    sent: CIMultiDict[str] = CIMultiDict()
    for name, values in headers.items():
        for value in values:
            sent.add(canonical_header_name(name), value)
    if "User-Agent" not in sent:
        sent["User-Agent"] = user_agent(purpose)
    if "Accept" not in sent:
        sent["Accept"] = "*/*"
    elif not sent.get("Accept"):
        del sent["Accept"]
    # An explicitly empty User-Agent means "send none", as Go's client does.
    if "User-Agent" in sent and not sent["User-Agent"]:
        del sent["User-Agent"]
    return sent, list(_AUTO_HEADERS)


def _is_plain_http_answer(err: BaseException) -> bool:
    # A TLS client reading an HTTP/1.x status line sees a malformed record.
    pending: list[BaseException | None] = [err]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            reason = getattr(current, "reason", None)
            if isinstance(reason, str) and reason.upper() in _PLAIN_HTTP_TLS_REASONS:
                return True
        pending.extend([current.__cause__, current.__context__,
                        getattr(current, "os_error", None)])
    return False


def _transport_error(url: URL | str, err: BaseException) -> HTTPGetError:
    prefix = f'Get "{url}"'
    if isinstance(err, TimeoutError):
        return HTTPGetError(
            f"{prefix}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)")
    if isinstance(err, aiohttp.ClientConnectorError) and not isinstance(
            err, aiohttp.ClientConnectorCertificateError | aiohttp.ClientConnectorSSLError):
        address = join_host_port(err.host, err.port or 0)
        return HTTPGetError(f"{prefix}: {dial_error_text(address, err.os_error)}")
    return HTTPGetError(f"{prefix}: {err or type(err).__name__}",
                        plain_http_answer=_is_plain_http_answer(err))


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes:
    data = bytearray()
    while len(data) < limit:
        chunk = await response.content.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


async def http_get(url: str, headers: Mapping[str, Iterable[str]], timeout: float | None,
                   *, purpose: str = "probe", follow_non_local_redirects: bool = False,
                   body_limit: int = MAX_OUTPUT_BYTES) -> HTTPGetResponse:
    """GET ``url`` following redirects per upstream's rules; raise ``HTTPGetError`` on no answer.

    ``timeout`` bounds the whole exchange, redirects and body included; None
    means no limit (lifecycle hooks run inside the caller's grace period).
    """
    sent_headers, skipped = _request_headers(headers, purpose)
    connector = aiohttp.TCPConnector(ssl=False, force_close=True)
    current: URL | str = url
    try:
        current = URL(url)
        first_host = current.host
        async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                         auto_decompress=False,
                                         cookie_jar=aiohttp.DummyCookieJar()) as session:
            async with asyncio.timeout(timeout):
                for redirects in range(MAX_REDIRECTS + 1):
                    async with session.get(current, headers=sent_headers,
                                           skip_auto_headers=skipped,
                                           allow_redirects=False) as response:
                        location = response.headers.get("Location")
                        if response.status not in _REDIRECT_STATUSES or not location:
                            body = await _read_at_most(response, body_limit)
                            return HTTPGetResponse(response.status, body, str(current))
                        target = current.join(URL(location))
                        if target.host != first_host and not follow_non_local_redirects:
                            # The redirect response itself is the answer (Go's ErrUseLastResponse).
                            body = await _read_at_most(response, body_limit)
                            return HTTPGetResponse(response.status, body, str(current))
                        if redirects == MAX_REDIRECTS:
                            raise HTTPGetError(
                                f'Get "{target}": stopped after {MAX_REDIRECTS} redirects')
                    if target.host != current.host:
                        # A Host override names the old host; it must not follow the request.
                        sent_headers.popall("Host", None)
                    current = target
    except HTTPGetError:
        raise
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
        raise _transport_error(current, err) from err
    raise AssertionError("unreachable: the redirect loop always returns or raises")


def judge_http_response(response: HTTPGetResponse) -> HTTPProbeOutcome:
    """Upstream's verdict on a response: 2xx healthy, unfollowed 3xx healthy with a warning."""
    body = response.body.decode(errors="replace")
    if 200 <= response.status < 400:
        if response.status >= 300:
            klog.v(4).info("Probe terminated redirects", url=response.url, status=response.status)
            return HTTPProbeOutcome(ProbeResult.SUCCESS,
                                    f"{_REDIRECT_WARNING}, Response body: {body}", warning=True)
        klog.v(4).info("Probe succeeded", url=response.url, status=response.status)
        return HTTPProbeOutcome(ProbeResult.SUCCESS, body)
    klog.v(4).info("Probe failed", url=response.url, status=response.status, body=body)
    return HTTPProbeOutcome(ProbeResult.FAILURE,
                            f"HTTP probe failed with statuscode: {response.status}")


async def check_http(url: str, headers: Mapping[str, Iterable[str]], timeout: float,
                     follow_non_local_redirects: bool = False) -> HTTPProbeOutcome:
    """One HTTP probe, keeping the warning flag the prober turns into a ``ProbeWarning`` event."""
    try:
        response = await http_get(url, headers, timeout,
                                  follow_non_local_redirects=follow_non_local_redirects)
    except HTTPGetError as err:
        # Every transport failure, timeouts included, is an unhealthy verdict.
        return HTTPProbeOutcome(ProbeResult.FAILURE, str(err))
    return judge_http_response(response)


async def http_probe(url: str, headers: Mapping[str, Iterable[str]], timeout: float,
                     follow_non_local_redirects: bool = False) -> tuple[ProbeResult, str]:
    """GET ``url`` within ``timeout`` seconds and judge the answer as upstream does."""
    outcome = await check_http(url, headers, timeout, follow_non_local_redirects)
    return outcome.result, outcome.output


__all__ = [
    "MAX_REDIRECTS",
    "HTTPGetError",
    "HTTPGetRequest",
    "HTTPGetResponse",
    "HTTPProbeOutcome",
    "canonical_header_name",
    "check_http",
    "format_url",
    "http_get",
    "http_probe",
    "judge_http_response",
    "request_for_http_get_action",
]
