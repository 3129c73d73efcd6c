"""Pods needing the same image at once share one pull, at the image service seam; the
back-off of failed pulls is forgotten once quiet.

The fake image service counts ``PullImage`` calls and holds each pull until
the test releases it, so "the others joined the pull under way" is a fact of
the test's own making, not of timing.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from cri_api.v1 import api_pb2

from pykubelet.api import pod_from_dict
from pykubelet.kuberuntime.images import (
    ERR_IMAGE_PULL,
    IMAGE_BACKOFF_INITIAL,
    IMAGE_BACKOFF_MAX,
    IMAGE_PULL_BACKOFF,
    EnsuredImage,
    ImageManager,
    ImagePullError,
)
from pykubelet.util.backoff import Backoff
from tests.unit.waiting import settle, until

IMAGE = "registry.local/team/app:1"


class HeldImageService:
    """No image present; every pull waits until ``release`` (or ``fail``) ends the pulls of
    its image under way."""

    def __init__(self) -> None:
        self.pulls: list[tuple[str, str]] = []  # (image, username) of each PullImage call
        self.cancelled: list[str] = []
        self._held: dict[str, list[asyncio.Future[str]]] = {}

    async def image_status(self, image: str, verbose: bool = False) -> api_pb2.Image | None:
        return None

    async def pull_image(self, image: str, auth: api_pb2.AuthConfig | None = None,
                         sandbox_config: api_pb2.PodSandboxConfig | None = None) -> str:
        self.pulls.append((image, auth.username if auth else ""))
        held = asyncio.get_running_loop().create_future()
        self._held.setdefault(image, []).append(held)
        try:
            return await held
        except asyncio.CancelledError:
            self.cancelled.append(image)
            raise

    def _end(self, image: str) -> list[asyncio.Future[str]]:
        held = [f for f in self._held.pop(image, []) if not f.done()]
        assert held, f"no pull of {image} under way"
        return held

    def release(self, image: str, ref: str) -> None:
        for held in self._end(image):
            held.set_result(ref)

    def fail(self, image: str, message: str) -> None:
        for held in self._end(image):
            held.set_exception(RuntimeError(message))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []  # (pod name, reason)

    def event(self, obj: Any, event_type: str, reason: str, message: str,
              *args: Any, **kwargs: Any) -> None:
        self.events.append((obj.metadata.name, reason))

    def reasons(self, pod_name: str) -> list[str]:
        return [reason for name, reason in self.events if name == pod_name]


def pull_secret(username: str) -> dict[str, Any]:
    auths = {"registry.local": {"username": username, "password": "pw"}}
    payload = base64.b64encode(json.dumps({"auths": auths}).encode()).decode()
    return {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": payload}}


def pod(name: str, image: str = IMAGE, policy: str = "IfNotPresent") -> Any:
    return pod_from_dict({
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": image, "imagePullPolicy": policy}]}})


class Starts:
    """Pods' image ensures running as tasks, as their pod workers run them."""

    def __init__(self, manager: ImageManager) -> None:
        self.manager = manager
        self.tasks: dict[str, asyncio.Task[EnsuredImage]] = {}

    def start(self, name: str, *, image: str = IMAGE, user: str = "alice") -> None:
        started = pod(name, image)
        self.tasks[name] = asyncio.create_task(self.manager.ensure_image_exists(
            started, started.spec.containers[0], [pull_secret(user)]))

    async def results(self) -> dict[str, EnsuredImage | BaseException]:
        answers = await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        return dict(zip(self.tasks, answers, strict=True))


def manager(recorder: Recorder, service: HeldImageService, **options: Any) -> ImageManager:
    options.setdefault("serialize_pulls", False)
    return ImageManager(service, recorder=recorder, **options)  # type: ignore[arg-type]


async def test_pods_needing_the_same_image_at_once_share_one_pull() -> None:
    service, recorder = HeldImageService(), Recorder()
    starts = Starts(manager(recorder, service))
    for name in ("a", "b", "c"):
        starts.start(name)
    await until(lambda: all(recorder.reasons(n) == ["Pulling"] for n in ("a", "b", "c")),
                what="every pod's Pulling event")
    await settle()
    assert service.pulls == [(IMAGE, "alice")]

    service.release(IMAGE, "sha256:app")
    results = await starts.results()

    assert {name: getattr(r, "ref", r) for name, r in results.items()} == {
        "a": "sha256:app", "b": "sha256:app", "c": "sha256:app"}
    for name in ("a", "b", "c"):
        assert recorder.reasons(name) == ["Pulling", "Pulled"]
    assert len(service.pulls) == 1


async def test_a_failed_shared_pull_fails_every_waiter_and_backs_each_off() -> None:
    service, recorder = HeldImageService(), Recorder()
    images = manager(recorder, service)
    starts = Starts(images)
    for name in ("a", "b"):
        starts.start(name)
    await until(lambda: len(recorder.events) == 2 and service.pulls,
                what="both Pulling events and the pull")

    service.fail(IMAGE, "unexpected status code 401 Unauthorized")
    results = await starts.results()

    for name in ("a", "b"):
        error = results[name]
        assert isinstance(error, ImagePullError) and error.reason == ERR_IMAGE_PULL
        assert "401 Unauthorized" in error.message
        assert recorder.reasons(name) == ["Pulling", "Failed"]
        again = pod(name)
        with pytest.raises(ImagePullError) as backing_off:
            await images.ensure_image_exists(again, again.spec.containers[0],
                                             [pull_secret("alice")])
        assert backing_off.value.reason == IMAGE_PULL_BACKOFF
    assert len(service.pulls) == 1


async def test_other_credentials_or_another_image_pull_on_their_own() -> None:
    service, recorder = HeldImageService(), Recorder()
    starts = Starts(manager(recorder, service))
    starts.start("alice", user="alice")
    starts.start("bob", user="bob")
    starts.start("other", image="registry.local/team/other:1")
    await until(lambda: len(service.pulls) == 3, what="three pulls")

    assert sorted(service.pulls) == [(IMAGE, "alice"), (IMAGE, "bob"),
                                     ("registry.local/team/other:1", "alice")]
    service.release(IMAGE, "sha256:app")
    service.release("registry.local/team/other:1", "sha256:other")
    assert not [r for r in (await starts.results()).values() if isinstance(r, BaseException)]


async def test_waiters_of_one_pull_take_one_parallel_pull_slot() -> None:
    service, recorder = HeldImageService(), Recorder()
    starts = Starts(manager(recorder, service, max_parallel_pulls=2))
    for name in ("a", "b", "c"):
        starts.start(name)
    starts.start("other", image="registry.local/team/other:1")

    # Three pods of one image would have held both slots, and the other image waited.
    await until(lambda: len(service.pulls) == 2, what="two pulls under way")
    assert sorted(image for image, _ in service.pulls) == [IMAGE, "registry.local/team/other:1"]
    service.release(IMAGE, "sha256:app")
    service.release("registry.local/team/other:1", "sha256:other")
    await starts.results()


async def test_serialized_pulls_are_shared_too() -> None:
    service, recorder = HeldImageService(), Recorder()
    starts = Starts(manager(recorder, service, serialize_pulls=True))
    for name in ("a", "b", "c"):
        starts.start(name)
    await until(lambda: len(recorder.events) == 3 and service.pulls,
                what="three Pulling events and the pull")
    service.release(IMAGE, "sha256:app")
    await until(lambda: all(t.done() for t in starts.tasks.values()) or len(service.pulls) > 1,
                what="every start served")
    assert len(service.pulls) == 1
    await starts.results()


async def test_a_cancelled_waiter_leaves_the_pull_to_the_others() -> None:
    service, recorder = HeldImageService(), Recorder()
    starts = Starts(manager(recorder, service))
    starts.start("first")
    starts.start("second")
    await until(lambda: len(recorder.events) == 2 and service.pulls,
                what="both Pulling events and the pull")

    starts.tasks.pop("first").cancel()  # the pod that started the pull is deleted
    await settle()
    assert service.cancelled == []

    service.release(IMAGE, "sha256:app")
    results = await starts.results()
    assert getattr(results["second"], "ref", None) == "sha256:app"
    assert len(service.pulls) == 1


async def test_the_pull_ends_when_its_last_waiter_is_cancelled() -> None:
    service, recorder = HeldImageService(), Recorder()
    starts = Starts(manager(recorder, service))
    starts.start("only")
    await until(lambda: service.pulls, what="the pull")

    starts.tasks.pop("only").cancel()
    await until(lambda: service.cancelled == [IMAGE], what="the pull cancelled")

    # A later start pulls anew instead of joining the cancelled pull.
    starts.start("later")
    await until(lambda: len(service.pulls) == 2, what="a second pull")
    service.release(IMAGE, "sha256:app")
    assert getattr((await starts.results())["later"], "ref", None) == "sha256:app"


async def test_a_pull_that_ended_is_not_shared_with_later_starts() -> None:
    service, recorder = HeldImageService(), Recorder()
    images = manager(recorder, service)
    for round_number in range(2):
        always = pod(f"always-{round_number}", policy="Always")
        ensuring = asyncio.create_task(images.ensure_image_exists(
            always, always.spec.containers[0], [pull_secret("alice")]))
        await until(lambda n=round_number: len(service.pulls) == n + 1,
                    what=f"pull {round_number + 1}")
        service.release(IMAGE, f"sha256:v{round_number}")
        assert (await ensuring).ref == f"sha256:v{round_number}"


class FailingImageService(HeldImageService):
    async def pull_image(self, image: str, auth: api_pb2.AuthConfig | None = None,
                         sandbox_config: api_pb2.PodSandboxConfig | None = None) -> str:
        self.pulls.append((image, ""))
        raise RuntimeError("unexpected status code 404 Not Found")


async def test_pods_deleted_while_their_pulls_failed_are_forgotten_once_quiet() -> None:
    now = [0.0]
    service, recorder = FailingImageService(), Recorder()
    images = manager(recorder, service, pull_qps=0.0,  # registryPullQPS 0: no limit
                     backoff=Backoff(IMAGE_BACKOFF_INITIAL, IMAGE_BACKOFF_MAX, lambda: now[0]))
    for index in range(100):
        failing = pod(f"gone-{index}")
        with pytest.raises(ImagePullError):
            await images.ensure_image_exists(failing, failing.spec.containers[0])
    assert images.tracked_pods() == 100

    # The 100 pods were deleted; a pull of another pod fails later than twice the
    # maximum delay: only that pod's back-off (and its last error) is held.
    now[0] += 2 * IMAGE_BACKOFF_MAX + 1
    last = pod("last")
    with pytest.raises(ImagePullError):
        await images.ensure_image_exists(last, last.spec.containers[0])
    assert images.tracked_pods() == 1
    with pytest.raises(ImagePullError) as backing_off:
        await images.ensure_image_exists(last, last.spec.containers[0])
    assert backing_off.value.reason == IMAGE_PULL_BACKOFF
    assert "404 Not Found" in backing_off.value.message
