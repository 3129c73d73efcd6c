"""HTTP probes against a real local aiohttp server: status codes, redirects, headers, timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerPort,
    V1HTTPGetAction,
    V1HTTPHeader,
)

from pykubelet.container import ProbeResult
from pykubelet.probe import MAX_OUTPUT_BYTES, PortResolutionError, user_agent
from pykubelet.probe.http import check_http, http_probe, request_for_http_get_action
from tests.unit.loopback import closed_port, serve


@dataclass
class Site:
    port: int
    seen: list[web.Request] = field(default_factory=list)
    # What /slow waits for: set when the test is over, so it answers only too late.
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    state = Site(port=0)

    async def status(request: web.Request) -> web.Response:
        state.seen.append(request)
        return web.Response(status=int(request.match_info["code"]),
                            text=f"status {request.match_info['code']}")

    async def redirect(request: web.Request) -> web.Response:
        state.seen.append(request)
        raise web.HTTPFound(request.query["to"])

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def slow(request: web.Request) -> web.Response:
        await state.release.wait()
        return web.Response(text="late")

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * (MAX_OUTPUT_BYTES * 3))

    app = web.Application()
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/loop", loop)
    app.router.add_get("/slow", slow)
    app.router.add_get("/big", big)
    async with serve(app) as port:
        state.port = port
        yield state
        state.release.set()






@pytest.mark.parametrize("code", [200, 204, 302, 399])
async def test_statuses_from_200_to_399_are_healthy(site: Site, code: int) -> None:
    result, _ = await http_probe(site.url(f"/status/{code}"), {}, timeout=2)
    assert result is ProbeResult.SUCCESS


@pytest.mark.parametrize("code", [400, 404, 500, 503])
async def test_other_statuses_fail_with_the_code(site: Site, code: int) -> None:
    result, output = await http_probe(site.url(f"/status/{code}"), {}, timeout=2)
    assert result is ProbeResult.FAILURE
    assert output == f"HTTP probe failed with statuscode: {code}"


async def test_success_output_is_the_body(site: Site) -> None:
    assert await http_probe(site.url("/status/200"), {}, 2) == (ProbeResult.SUCCESS,
                                                                 "status 200")


async def test_body_read_is_capped(site: Site) -> None:
    result, output = await http_probe(site.url("/big"), {}, 2)
    assert result is ProbeResult.SUCCESS
    assert len(output) == MAX_OUTPUT_BYTES


async def test_same_host_redirect_is_followed(site: Site) -> None:
    result, output = await http_probe(site.url("/redirect?to=/status/500"), {}, 2)
    assert (result, output) == (ProbeResult.FAILURE, "HTTP probe failed with statuscode: 500")
    assert [r.path for r in site.seen] == ["/redirect", "/status/500"]


async def test_redirect_to_another_host_is_not_followed_but_succeeds_with_warning(
        site: Site) -> None:
    elsewhere = site.url("/status/500", host="localhost")
    outcome = await check_http(site.url(f"/redirect?to={elsewhere}"), {}, 2)
    assert outcome.result is ProbeResult.SUCCESS
    assert outcome.warning
    assert outcome.output.startswith("Probe terminated redirects, Response body: ")
    assert [r.path for r in site.seen] == ["/redirect"]


async def test_redirect_to_another_host_followed_when_allowed(site: Site) -> None:
    elsewhere = site.url("/status/500", host="localhost")
    result, _ = await http_probe(site.url(f"/redirect?to={elsewhere}"), {}, 2,
                                 follow_non_local_redirects=True)
    assert result is ProbeResult.FAILURE
    assert [r.path for r in site.seen] == ["/redirect", "/status/500"]


async def test_endless_redirects_stop_after_ten(site: Site) -> None:
    result, output = await http_probe(site.url("/loop"), {}, 5)
    assert result is ProbeResult.FAILURE
    assert output.endswith("stopped after 10 redirects")


async def test_default_headers_are_kube_probe_user_agent_and_accept_all(site: Site) -> None:
    await http_probe(site.url("/status/200"), {}, 2)
    headers = site.seen[0].headers
    assert headers["User-Agent"] == user_agent("probe")
    assert headers["User-Agent"].startswith("kube-probe/")
    assert headers["Accept"] == "*/*"
    assert "Accept-Encoding" not in headers


async def test_probe_headers_override_defaults_and_repeat(site: Site) -> None:
    headers = {"user-agent": ["custom/1"], "X-Token": ["a", "b"], "Host": ["example.test"]}
    await http_probe(site.url("/status/200"), headers, 2)
    seen = site.seen[0].headers
    assert seen["User-Agent"] == "custom/1"
    assert seen.getall("X-Token") == ["a", "b"]
    assert seen["Host"] == "example.test"


async def test_empty_accept_header_removes_it(site: Site) -> None:
    await http_probe(site.url("/status/200"), {"Accept": [""]}, 2)
    assert "Accept" not in site.seen[0].headers


async def test_timeout_is_a_failure(site: Site) -> None:
    started = asyncio.get_running_loop().time()
    result, output = await http_probe(site.url("/slow"), {}, timeout=0.3)
    assert result is ProbeResult.FAILURE
    assert "Client.Timeout exceeded" in output
    assert asyncio.get_running_loop().time() - started < 2


async def test_refused_connection_is_a_failure() -> None:
    port = closed_port()
    result, output = await http_probe(f"http://127.0.0.1:{port}/", {}, 2)
    assert result is ProbeResult.FAILURE
    assert output == (f'Get "http://127.0.0.1:{port}/": dial tcp 127.0.0.1:{port}: '
                      "connect: connection refused")


# --- building the request from an httpGet action -----------------------------------------------

def _container() -> V1Container:
    return V1Container(name="app", ports=[V1ContainerPort(name="http", container_port=8080),
                                          V1ContainerPort(name="9090", container_port=7070)])


def test_request_uses_pod_ip_and_named_port() -> None:
    action = V1HTTPGetAction(path="/healthz", port="http", scheme="HTTPS",
                             http_headers=[V1HTTPHeader(name="x-check", value="1")])
    request = request_for_http_get_action(action, _container(), "10.88.0.5")
    assert request.url == "https://10.88.0.5:8080/healthz"
    assert request.headers == {"X-Check": ["1"]}


def test_request_host_path_and_numeric_ports() -> None:
    container = _container()
    by_number = V1HTTPGetAction(host="example.test", path="ready?full=1", port=81)
    by_digits = V1HTTPGetAction(port="82")
    assert (request_for_http_get_action(by_number, container, "10.0.0.1").url
            == "http://example.test:81/ready?full=1")
    assert request_for_http_get_action(by_digits, container, "10.0.0.1").url == (
        "http://10.0.0.1:82")


def test_a_port_name_wins_over_its_digits() -> None:
    action = V1HTTPGetAction(port="9090")
    assert request_for_http_get_action(action, _container(), "10.0.0.1").url == (
        "http://10.0.0.1:7070")


@pytest.mark.parametrize("port", ["metrics", 0, 70000])
def test_unknown_port_names_and_bad_numbers_are_errors(port: object) -> None:
    with pytest.raises(PortResolutionError):
        request_for_http_get_action(V1HTTPGetAction(port=port), _container(), "10.0.0.1")


def test_ipv6_pod_ip_is_bracketed() -> None:
    request = request_for_http_get_action(V1HTTPGetAction(port=80, path="/"), _container(),
                                          "fd00::5")
    assert request.url == "http://[fd00::5]:80/"
