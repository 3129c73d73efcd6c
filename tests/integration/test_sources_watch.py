"""Static pod sources against real files (inotify) and a real local HTTP server.

No containerd is needed: these tests follow a manifest from disk (or from a
URL) to the ``SET`` update a source sends, the way an operator would see it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from pykubelet.api.kubetypes import PodOperation, PodUpdate
from pykubelet.sources.file import StaticPodFileSource
from pykubelet.sources.http import StaticPodURLSource
from tests.unit.hostile_input import (
    heavy_manifest,
    hostile_manifests,
    refused_manifests_missing_from,
)
from testsupport.polling import wait_until_async

NODE = "node-1"


def manifest(name: str, image: str = "busybox:1.36") -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n"
            f"  - name: main\n    image: {image}\n")


def pod_json(name: str, image: str = "busybox:1.36") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": image}]}}


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    # Attach directly: klog.setup() may have turned propagation to the root logger off.
    logger = logging.getLogger("pykubelet")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="pykubelet")
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def names(update: PodUpdate) -> list[str]:
    return sorted(p.metadata.name for p in update.pods)


async def next_update(queue: asyncio.Queue[PodUpdate],
                      until: Callable[[PodUpdate], bool] = lambda u: True,
                      timeout: float = 5.0) -> PodUpdate:
    """The first update satisfying ``until`` (sources may repeat themselves in between)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no matching pod update arrived in time")
        update = await asyncio.wait_for(queue.get(), remaining)
        assert update.op == PodOperation.SET
        if until(update):
            return update


async def watch(running: Callable[[Any], RunningSource], path: Path,
                until: Callable[[PodUpdate], bool] = lambda u: bool(u.pods),
                ) -> tuple[asyncio.Queue[PodUpdate], PodUpdate]:
    """A file source on ``path`` (re-read every 60 s): its updates and the first one matching
    ``until``, returned once the watch has settled, so that later changes are seen by it."""
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodFileSource(str(path), NODE, updates, check_frequency=60))
    first = await next_update(updates, until)
    await asyncio.sleep(0.3)
    return updates, first


class RunningSource:
    def __init__(self, source: StaticPodFileSource | StaticPodURLSource) -> None:
        self.source = source
        self.task = asyncio.create_task(source.run())

    async def close(self) -> None:
        self.source.stop()
        await asyncio.wait_for(self.task, 5)


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Any], RunningSource]]:
    started: list[RunningSource] = []

    def start(source: Any) -> RunningSource:
        runner = RunningSource(source)
        started.append(runner)
        return runner

    yield start
    for runner in started:
        await runner.close()


# --- file source ---------------------------------------------------------------------------------

async def test_directory_sends_good_pods_and_logs_the_bad_file(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any) -> None:
    (tmp_path / "a.yaml").write_text(manifest("alpha"))
    (tmp_path / "b.json").write_text(json.dumps(pod_json("beta")))
    (tmp_path / "c.yaml").write_text(manifest("gamma", image=""))
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodFileSource(str(tmp_path), NODE, updates, check_frequency=60))

    first = await next_update(updates)
    assert names(first) == ["alpha-node-1", "beta-node-1"]
    assert all(p.spec.node_name == NODE for p in first.pods)
    assert first.source == "file"
    bad = [r.getMessage() for r in logs.records if r.levelno == logging.ERROR]
    assert any("c.yaml" in line and "spec.containers[0].image: Required value" in line
               for line in bad), bad


async def test_edit_is_seen_through_inotify_within_a_second(tmp_path: Path, running: Any) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(manifest("web"))
    updates, first = await watch(running, tmp_path)
    old_uid = first.pods[0].metadata.uid

    started = time.monotonic()
    path.write_text(manifest("web", image="busybox:1.37"))
    edited = await next_update(
        updates, lambda u: bool(u.pods) and u.pods[0].metadata.uid != old_uid, timeout=3)
    assert time.monotonic() - started < 1.5
    assert edited.pods[0].spec.containers[0].image == "busybox:1.37"


async def test_breaking_a_manifest_drops_its_pod_and_says_why(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any) -> None:
    (tmp_path / "web.yaml").write_text(manifest("web"))
    (tmp_path / "db.yaml").write_text(manifest("db"))
    updates, _ = await watch(running, tmp_path,
                             lambda u: names(u) == ["db-node-1", "web-node-1"])

    (tmp_path / "web.yaml").write_text(manifest("web").replace("containers:", "containers: 7"))
    await next_update(updates, lambda u: names(u) == ["db-node-1"], timeout=3)
    assert any("web.yaml" in r.getMessage() and r.levelno == logging.ERROR
               for r in logs.records)


async def test_rewriting_a_manifest_in_place_never_drops_its_pod(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any) -> None:
    # "echo ... > web.yaml" truncates first: the watch sees an empty, then a half-written
    # file before the whole one. Those in-between states must not stop the pod.
    path = tmp_path / "web.yaml"
    path.write_text(manifest("web"))
    updates, _ = await watch(running, path.parent, lambda u: names(u) == ["web-node-1"])

    text = manifest("web", image="busybox:1.37")
    with open(path, "w") as rewritten:
        rewritten.flush()
        await asyncio.sleep(0.03)
        rewritten.write(text[:len(text) // 2])
        rewritten.flush()
        await asyncio.sleep(0.03)
        rewritten.write(text[len(text) // 2:])
    seen: list[PodUpdate] = []
    while not any(c.image == "busybox:1.37" for u in seen for p in u.pods
                  for c in p.spec.containers):
        seen.append(await asyncio.wait_for(updates.get(), 3))
    await asyncio.sleep(0.3)
    while not updates.empty():
        seen.append(updates.get_nowait())
    assert [names(u) for u in seen] == [["web-node-1"]] * len(seen)
    assert not [r for r in logs.records if r.levelno == logging.ERROR]


async def test_new_and_deleted_files(tmp_path: Path, running: Any) -> None:
    (tmp_path / "keep.yaml").write_text(manifest("keep"))
    updates, _ = await watch(running, tmp_path, lambda u: names(u) == ["keep-node-1"])

    (tmp_path / "extra.yaml").write_text(manifest("extra"))
    await next_update(updates, lambda u: names(u) == ["extra-node-1", "keep-node-1"], timeout=3)
    (tmp_path / "extra.yaml").unlink()
    await next_update(updates, lambda u: names(u) == ["keep-node-1"], timeout=3)


async def test_hidden_swap_and_non_regular_entries_are_ignored(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any) -> None:
    (tmp_path / "real.yaml").write_text(manifest("real"))
    (tmp_path / ".hidden.yaml").write_text(manifest("hidden"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nested.yaml").write_text(manifest("nested"))
    os.mkfifo(tmp_path / "pipe")  # reading it would block forever if it were not skipped
    updates, first = await watch(running, tmp_path, lambda u: True)
    assert names(first) == ["real-node-1"]

    # An editor's swap file changing must not produce a pod or even an update.
    (tmp_path / ".real.yaml.swp").write_text(manifest("swap"))
    with pytest.raises((TimeoutError, AssertionError)):
        await next_update(updates, timeout=1)
    assert "Not recursing into manifest path" in logs.text


async def test_single_file_path_follows_an_atomic_replace(tmp_path: Path, running: Any) -> None:
    path = tmp_path / "only.yaml"
    path.write_text(manifest("only"))
    updates, first = await watch(running, path)

    replacement = tmp_path / ".only.yaml.tmp"
    replacement.write_text(manifest("only", image="busybox:1.37"))
    os.replace(replacement, path)
    edited = await next_update(
        updates, lambda u: bool(u.pods) and u.pods[0].metadata.uid != first.pods[0].metadata.uid,
        timeout=3)
    assert edited.pods[0].spec.containers[0].image == "busybox:1.37"


async def test_missing_directory_sends_empty_set_then_picks_up_when_created(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any) -> None:
    path = tmp_path / "manifests"
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodFileSource(str(path), NODE, updates, check_frequency=60))
    assert (await next_update(updates)).pods == []
    assert "path does not exist, ignoring" in logs.text

    path.mkdir()
    (path / "late.yaml").write_text(manifest("late"))
    await next_update(updates, lambda u: names(u) == ["late-node-1"], timeout=4)


async def test_periodic_reread_catches_what_the_watch_cannot(tmp_path: Path,
                                                             running: Any) -> None:
    target = tmp_path / "elsewhere.yaml"
    target.write_text(manifest("linked"))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "linked.yaml").symlink_to(target)
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodFileSource(str(manifests), NODE, updates, check_frequency=0.5))
    first = await next_update(updates, lambda u: bool(u.pods))

    # Editing a symlink's target raises no event in the watched directory.
    target.write_text(manifest("linked", image="busybox:1.37"))
    await next_update(
        updates, lambda u: bool(u.pods) and u.pods[0].metadata.uid != first.pods[0].metadata.uid,
        timeout=3)


class LoopLag:
    """The longest the event loop went without running a 10 ms ticker."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.monotonic() - started - 0.01)

    def stop(self) -> float:
        self.task.cancel()
        return self.worst


async def test_hostile_manifests_beside_good_ones_neither_block_the_loop_nor_the_good_pods(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any) -> None:
    (tmp_path / "good.yaml").write_text(manifest("good"))
    (tmp_path / "heavy.yaml").write_text(heavy_manifest("heavy"))
    for name, data in hostile_manifests().items():
        (tmp_path / name).write_bytes(data)
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    lag = LoopLag()
    started = time.monotonic()
    running(StaticPodFileSource(str(tmp_path), NODE, updates, check_frequency=60))
    first = await next_update(updates, timeout=30)
    decode_time = time.monotonic() - started
    worst = lag.stop()
    print(f"decoding the directory took {decode_time:.2f}s; the loop's longest stall was "
          f"{worst * 1000:.0f} ms")
    assert names(first) == ["good-node-1", "heavy-node-1"]
    assert worst < 0.5, f"the event loop stalled for {worst:.3f}s while manifests decoded"
    errors = [r.getMessage() for r in logs.records if r.levelno == logging.ERROR]
    assert refused_manifests_missing_from(errors) == [], errors


async def test_a_manifest_is_decoded_again_only_when_it_changes(
        tmp_path: Path, logs: pytest.LogCaptureFixture, running: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pykubelet.sources import file as file_source

    decoded: list[str] = []
    real = file_source.decode_static_pod

    def counting(data: bytes, **kwargs: Any) -> Any:
        decoded.append(os.path.basename(kwargs["location"]))
        return real(data, **kwargs)

    monkeypatch.setattr(file_source, "decode_static_pod", counting)
    (tmp_path / "bad.yaml").write_text(manifest("bad", image=""))
    (tmp_path / "good.yaml").write_text(manifest("good"))
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodFileSource(str(tmp_path), NODE, updates, check_frequency=0.3))
    await next_update(updates)
    await asyncio.sleep(1.2)  # several periodic re-reads
    assert decoded.count("bad.yaml") == 1
    assert decoded.count("good.yaml") == 1
    # Every re-read still reports the bad file and still sends the good pod.
    assert sum("bad.yaml" in r.getMessage() and "image: Required value" in r.getMessage()
               for r in logs.records) > 1
    assert names(await next_update(updates, timeout=1)) == ["good-node-1"]
    (tmp_path / "bad.yaml").write_text(manifest("bad", image="busybox:1.36"))
    await next_update(updates, lambda u: names(u) == ["bad-node-1", "good-node-1"], timeout=3)
    assert decoded.count("bad.yaml") == 2
    (tmp_path / "good.yaml").write_text(manifest("good", image="busybox:1.37"))
    edited = await next_update(
        updates, lambda u: any(p.spec.containers[0].image == "busybox:1.37" for p in u.pods),
        timeout=3)
    assert names(edited) == ["bad-node-1", "good-node-1"]
    assert decoded.count("good.yaml") == 2


async def test_saving_the_same_bytes_sends_nothing_and_a_returning_file_is_seen_anew(
        tmp_path: Path, running: Any) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(manifest("web"))
    updates, first = await watch(running, tmp_path)

    # An editor saving without a change: events, but no new pod to send.
    path.write_text(manifest("web"))
    with pytest.raises((TimeoutError, AssertionError)):
        await next_update(updates, timeout=1)

    # Removed and written back: the same pod, but seen again (its start is timed from now).
    path.unlink()
    await next_update(updates, lambda u: not u.pods, timeout=3)
    await asyncio.sleep(0.05)
    path.write_text(manifest("web"))
    back = await next_update(updates, lambda u: bool(u.pods), timeout=3)
    seen_key = "kubernetes.io/config.seen"
    assert back.pods[0].metadata.uid == first.pods[0].metadata.uid
    assert back.pods[0].metadata.annotations[seen_key] > first.pods[0].metadata.annotations[
        seen_key]


# --- URL source ----------------------------------------------------------------------------------

class ManifestServer:
    """A local HTTP server whose answer the test changes between polls."""

    def __init__(self) -> None:
        self.body: bytes = b""
        self.status = 200
        self.required_header: tuple[str, str] | None = None
        self.requests = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.required_header is not None:
            name, value = self.required_header
            if value not in request.headers.getall(name, []):
                return web.Response(status=403, text="missing header")
        return web.Response(status=self.status, body=self.body)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/pods", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/pods"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[ManifestServer]:
    manifest_server = ManifestServer()
    await manifest_server.start()
    yield manifest_server
    await manifest_server.stop()


async def test_url_serving_a_single_yaml_pod(server: ManifestServer, running: Any) -> None:
    server.body = manifest("remote").encode()
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodURLSource(server.url, {}, NODE, updates, check_frequency=0.2))
    update = await next_update(updates)
    assert names(update) == ["remote-node-1"]
    assert update.source == "http"
    # The same body again sends nothing new.
    polls = server.requests
    with pytest.raises((TimeoutError, AssertionError)):
        await next_update(updates, timeout=0.7)
    assert server.requests > polls


async def test_url_serving_a_pod_list_with_a_required_header(server: ManifestServer,
                                                             running: Any) -> None:
    server.required_header = ("X-Node-Token", "secret")
    server.body = json.dumps({"apiVersion": "v1", "kind": "PodList",
                              "items": [pod_json("one"), pod_json("two")]}).encode()
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodURLSource(server.url, {"X-Node-Token": ["other", "secret"]}, NODE, updates,
                               check_frequency=0.2))
    assert names(await next_update(updates)) == ["one-node-1", "two-node-1"]


async def test_url_without_the_header_is_refused_and_sends_nothing(
        server: ManifestServer, logs: pytest.LogCaptureFixture, running: Any) -> None:
    server.required_header = ("X-Node-Token", "secret")
    server.body = manifest("remote").encode()
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodURLSource(server.url, {}, NODE, updates, check_frequency=0.2))
    with pytest.raises((TimeoutError, AssertionError)):
        await next_update(updates, timeout=0.7)
    assert "403" in logs.text


async def test_failing_server_keeps_the_previous_pods(
        server: ManifestServer, logs: pytest.LogCaptureFixture, running: Any) -> None:
    server.body = manifest("stable").encode()
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodURLSource(server.url, {}, NODE, updates, check_frequency=0.2))
    assert names(await next_update(updates)) == ["stable-node-1"]

    server.status = 500
    server.body = b"boom"
    await asyncio.sleep(0.7)
    server.status = 200
    server.body = b"apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec: {containers: []}\n"
    await asyncio.sleep(0.7)
    assert updates.empty(), "a failing or bad answer must not replace the pods"
    assert "500" in logs.text
    assert "spec.containers: Required value" in logs.text

    server.body = manifest("stable", image="busybox:1.37").encode()
    recovered = await next_update(updates, timeout=2)
    assert recovered.pods[0].spec.containers[0].image == "busybox:1.37"
    assert "Successfully read pods from URL" in logs.text


async def test_empty_body_clears_the_pods(server: ManifestServer, running: Any) -> None:
    server.body = manifest("going").encode()
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodURLSource(server.url, {}, NODE, updates, check_frequency=0.2))
    assert names(await next_update(updates)) == ["going-node-1"]
    server.body = b""
    assert (await next_update(updates, timeout=2)).pods == []
    server.body = manifest("going").encode()
    assert names(await next_update(updates, lambda u: bool(u.pods), timeout=2)) == ["going-node-1"]


async def test_hostile_url_bodies_are_named_errors_and_the_loop_keeps_running(
        server: ManifestServer, logs: pytest.LogCaptureFixture, running: Any) -> None:
    server.body = manifest("stable").encode()
    updates: asyncio.Queue[PodUpdate] = asyncio.Queue()
    running(StaticPodURLSource(server.url, {}, NODE, updates, check_frequency=0.1))
    assert names(await next_update(updates)) == ["stable-node-1"]
    lag = LoopLag()
    for name, body in hostile_manifests().items():
        if name == "huge.yaml":
            continue  # refused while reading, before any decoding
        logs.clear()
        server.body = body
        await wait_until_async(
            lambda: any("Failed to read pods from URL" in r.getMessage() for r in logs.records),
            10, f"the refusal of {name} logged", interval=0.05)
        assert server.url in logs.text
    worst = lag.stop()
    assert updates.empty(), "a bad body must not replace the pods"
    assert worst < 0.5, f"the event loop stalled for {worst:.3f}s"
