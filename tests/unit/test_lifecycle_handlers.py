"""Lifecycle hooks: exec through the CRI seam (faked), httpGet against a local server, sleep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from aiohttp import web
from kubernetes_asyncio.client import (
    V1Container,
    V1ContainerPort,
    V1ExecAction,
    V1HTTPGetAction,
    V1LifecycleHandler,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1SleepAction,
    V1TCPSocketAction,
)

from pykubelet.container import ContainerID
from pykubelet.cri.runtime import ExecSyncResult
from pykubelet.events import WARNING, Event, LoggingRecorder
from pykubelet.lifecycle import HandlerRunner, LifecycleHookError
from pykubelet.probe import user_agent
from tests.unit.loopback import closed_port, serve

CONTAINER_ID = ContainerID("containerd", "c0ffee")


class FakeRuntime:
    def __init__(self, answer: ExecSyncResult) -> None:
        self.answer = answer
        self.calls: list[tuple[str, list[str], float]] = []

    async def exec_sync(self, container_id: str, cmd: Sequence[str],
                        timeout_seconds: float) -> ExecSyncResult:
        self.calls.append((container_id, list(cmd), timeout_seconds))
        return self.answer


EXIT_OK = ExecSyncResult(b"", b"", 0)


class Hooks:
    def __init__(self, answer: ExecSyncResult = EXIT_OK,
                 pod_ip: str = "127.0.0.1") -> None:
        self.runtime = FakeRuntime(answer)
        self.events: list[Event] = []
        self.asked_ip_for: list[str] = []
        recorder = LoggingRecorder()
        recorder.listeners.append(self.events.append)

        def pod_ip_of(pod: V1Pod) -> str:
            self.asked_ip_for.append(pod.metadata.name)
            return pod_ip

        self.runner = HandlerRunner(self.runtime, pod_ip_of, recorder)


class Site:
    def __init__(self) -> None:
        self.port = 0
        self.seen: list[web.Request] = []


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    state = Site()

    async def anything(request: web.Request) -> web.Response:
        state.seen.append(request)
        if request.path == "/missing":
            return web.Response(status=404)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/{tail:.*}", anything)
    async with serve(app) as port:
        state.port = port
        yield state


def _pod(container: V1Container) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name="web", namespace="shop", uid="uid-1"),
                 spec=V1PodSpec(containers=[container]))






async def test_exec_hook_runs_without_timeout_and_returns_output() -> None:
    hooks = Hooks(ExecSyncResult(b"warmed\n", b"", 0))
    container = V1Container(name="app")
    handler = V1LifecycleHandler(_exec=V1ExecAction(command=["sh", "-c", "warm"]))
    output = await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert output == "warmed\n"
    assert hooks.runtime.calls == [("c0ffee", ["sh", "-c", "warm"], 0)]


async def test_failing_exec_hook_raises_with_its_output() -> None:
    hooks = Hooks(ExecSyncResult(b"half done\n", b"disk full\n", 3))
    container = V1Container(name="app")
    handler = V1LifecycleHandler(_exec=V1ExecAction(command=["sh", "-c", "prep"]))
    with pytest.raises(LifecycleHookError) as caught:
        await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert str(caught.value) == (
        'Exec lifecycle hook ([sh -c prep]) for Container "app" in Pod "web_shop(uid-1)" '
        "failed - error: command 'sh -c prep' exited with 3: disk full\n, "
        'message: "half done\\ndisk full\\n"')
    assert caught.value.output == "half done\ndisk full\n"


async def test_failing_exec_hook_message_spells_control_characters_as_go_does() -> None:
    # A coloured "\x1b[31m" in the hook's output must not reach the event raw: Go's %q
    # spells it as an escape, and the event text is what users compare with upstream's.
    hooks = Hooks(ExecSyncResult(b"\x1b[31mred\x1b[0m", b"", 1))
    container = V1Container(name="app")
    handler = V1LifecycleHandler(_exec=V1ExecAction(command=["prep"]))
    with pytest.raises(LifecycleHookError) as caught:
        await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert str(caught.value).endswith('message: "\\x1b[31mred\\x1b[0m"')


async def test_http_hook_gets_the_path_at_the_pod_ip_on_a_named_port(site: Site) -> None:
    hooks = Hooks()
    container = V1Container(name="app",
                            ports=[V1ContainerPort(name="admin", container_port=site.port)])
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/drain", port="admin"))
    assert await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler) == ""
    assert hooks.asked_ip_for == ["web"]
    [request] = site.seen
    assert request.path == "/drain"
    assert request.headers["User-Agent"] == user_agent("lifecycle")


async def test_http_hook_with_explicit_host_does_not_need_the_pod_ip(site: Site) -> None:
    hooks = Hooks(pod_ip="")
    container = V1Container(name="app")
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(host="127.0.0.1", path="/x",
                                                          port=site.port))
    await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert hooks.asked_ip_for == []
    assert [r.path for r in site.seen] == ["/x"]


async def test_http_hook_status_is_not_judged(site: Site) -> None:
    # Upstream fails an HTTP hook only when no response comes back.
    hooks = Hooks()
    container = V1Container(name="app")
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/missing", port=site.port))
    assert await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler) == ""
    assert [r.path for r in site.seen] == ["/missing"]


async def test_http_hook_without_answer_raises() -> None:
    hooks = Hooks()
    container = V1Container(name="app")
    port = closed_port()
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/drain", port=port))
    with pytest.raises(LifecycleHookError) as caught:
        await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert str(caught.value).startswith(
        'HTTP lifecycle hook (/drain) for Container "app" in Pod "web_shop(uid-1)" failed - '
        f'error: Get "http://127.0.0.1:{port}/drain": dial tcp')


async def test_http_hook_without_pod_ip_raises() -> None:
    hooks = Hooks(pod_ip="")
    container = V1Container(name="app")
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/drain", port=80))
    with pytest.raises(LifecycleHookError, match="failed to find networking container"):
        await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)


async def test_https_hook_falls_back_to_http_with_a_warning(site: Site) -> None:
    hooks = Hooks()
    container = V1Container(name="app")
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/drain", port=site.port,
                                                          scheme="HTTPS"))
    await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert [r.path for r in site.seen] == ["/drain"]
    assert hooks.events == [Event(
        "shop/web", WARNING, "LifecycleHTTPFallback",
        f"request to HTTPS lifecycle hook 127.0.0.1:{site.port} got HTTP response, "
        "retry with HTTP succeeded")]


async def test_async_pod_ip_getter_is_awaited(site: Site) -> None:
    async def pod_ip_of(pod: V1Pod) -> str:
        return "127.0.0.1"

    runner = HandlerRunner(FakeRuntime(ExecSyncResult(b"", b"", 0)), pod_ip_of,
                           LoggingRecorder())
    container = V1Container(name="app")
    handler = V1LifecycleHandler(http_get=V1HTTPGetAction(path="/a", port=site.port))
    await runner.run(CONTAINER_ID, _pod(container), container, handler)
    assert [r.path for r in site.seen] == ["/a"]


async def test_sleep_hook_waits_its_seconds() -> None:
    hooks = Hooks()
    container = V1Container(name="app")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await hooks.runner.run(CONTAINER_ID, _pod(container), container,
                           V1LifecycleHandler(sleep=V1SleepAction(seconds=1)))
    assert loop.time() - started >= 0.99


async def test_sleep_hook_ends_when_the_grace_period_does() -> None:
    hooks = Hooks()
    container = V1Container(name="app")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hooks.runner.run(
            CONTAINER_ID, _pod(container), container,
            V1LifecycleHandler(sleep=V1SleepAction(seconds=30))), 0.2)
    assert loop.time() - started < 2


async def test_tcp_socket_hook_is_rejected() -> None:
    hooks = Hooks()
    container = V1Container(name="app")
    handler = V1LifecycleHandler(tcp_socket=V1TCPSocketAction(port=80))
    with pytest.raises(LifecycleHookError, match="Cannot run handler: invalid handler"):
        await hooks.runner.run(CONTAINER_ID, _pod(container), container, handler)
