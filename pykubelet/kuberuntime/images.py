"""Making sure a container's image is on the node before the container is created.

Upstream ``pkg/kubelet/images``: the ``imagePullPolicy`` (``Always``,
``IfNotPresent``, ``Never``; by default ``Always`` for ``:latest`` or untagged
images and ``IfNotPresent`` otherwise) decides whether to pull; a failed pull
is reported as ``ErrImagePull`` and starts a back-off per pod and image, and
while that back-off runs the container reports ``ImagePullBackOff`` without
contacting the registry again. Pulls go through a QPS limiter
(``registryPullQPS``/``registryBurst``) and, with ``serializeImagePulls``, one
at a time (without it, at most ``maxParallelImagePulls`` at once). Credentials
come from the pod's ``imagePullSecrets`` (``kubernetes.io/dockerconfigjson`` or
``dockercfg``) through the keyring of ``pykubelet.credentialprovider``, then
from the credential provider plugins: each one that matches the image's
repository is offered to the runtime in turn until one pull succeeds, and a
pull with no match goes without credentials. A pull secret that does not decode
fails the container's start with its error (no pull, no back-off), as
upstream's does.

Pods that need the same image with the same credentials while a pull of it
is under way share that pull (``SharedPulls``): one CRI ``PullImage``, one
QPS token and one pull slot, and every waiting pod gets its result, success
or the same error, with its own ``Pulling``/``Pulled``/``Failed`` events and
its own back-off. Upstream v1.35 does not do this (each ``EnsureImageExists``
sends its own pull, kubernetes/kubernetes#125164 is open), and containerd
1.6's CRI runs every ``PullImage`` it is sent.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cri_api.v1 import api_pb2
from kubernetes_asyncio.client import V1Container, V1Pod

from pykubelet import metrics
from pykubelet.credentialprovider import AuthConfig, PullSecretError, make_docker_keyring
from pykubelet.credentialprovider.plugin import PluginKeyring
from pykubelet.cri import ImageService
from pykubelet.events import NORMAL, WARNING, EventRecorder, LoggingRecorder, container_field_path
from pykubelet.kuberuntime.actions import format_go_duration
from pykubelet.metrics.podstartup import POD_STARTUP_TRACKER
from pykubelet.util import klog
from pykubelet.util.backoff import Backoff
from pykubelet.util.flowcontrol import TokenBucket

ERR_IMAGE_PULL = "ErrImagePull"
# Event reasons of the image manager (upstream kubelet/events).
EVENT_PULLING = "Pulling"
EVENT_PULLED = "Pulled"
EVENT_FAILED = "Failed"
EVENT_BACK_OFF = "BackOff"
EVENT_INSPECT_FAILED = "InspectFailed"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
INVALID_IMAGE_NAME = "InvalidImageName"
IMAGE_INSPECT_ERROR = "ImageInspectError"

PULL_ALWAYS = "Always"
PULL_IF_NOT_PRESENT = "IfNotPresent"
PULL_NEVER = "Never"

# Upstream's image back-off: 10s doubling up to the container back-off maximum of 5 minutes.
IMAGE_BACKOFF_INITIAL = 10.0
IMAGE_BACKOFF_MAX = 300.0

DEFAULT_DOMAIN = "docker.io"
_LEGACY_DEFAULT_DOMAIN = "index.docker.io"
_DEFAULT_TAG = "latest"


class ImagePullError(Exception):
    """Why a container's image is not available; ``reason`` goes into the container status."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


# --- image references ---------------------------------------------------------------------------

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$")
_HEX_ID = re.compile(r"^[a-f0-9]{64}$")
_NAME_MAX_LENGTH = 255


@dataclass(frozen=True)
class ImageReference:
    """A parsed image name, with Docker Hub's implicit domain made explicit."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""


def _split_domain(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"
                   and first.lower() == first):
        domain, path = DEFAULT_DOMAIN, name
    else:
        domain, path = first, rest
    if domain == _LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = f"library/{path}"
    return domain, path


def parse_image_reference(image: str) -> ImageReference:
    """Parse ``image`` as the container runtimes do; ``ValueError`` says what is wrong."""
    if not image:
        raise ValueError("repository name must have at least one component")
    if _HEX_ID.match(image):
        raise ValueError(f"invalid repository name ({image}), cannot specify 64-byte "
                         f"hexadecimal strings")
    match = _REFERENCE.match(image)
    if match is None:
        name = image.split("@", 1)[0].rsplit(":", 1)[0]
        if name.lower() != name and _REFERENCE.match(image.lower()):
            raise ValueError("repository name must be lowercase")
        raise ValueError("invalid reference format")
    name = match["name"]
    if len(name) > _NAME_MAX_LENGTH:
        raise ValueError(f"repository name must not be more than {_NAME_MAX_LENGTH} characters")
    domain, path = _split_domain(name)
    if path.lower() != path:
        raise ValueError("repository name must be lowercase")
    return ImageReference(domain, path, match["tag"] or "", match["digest"] or "")


def apply_default_tag(image: str) -> str:
    """``image`` with ``:latest`` appended when it names neither tag nor digest."""
    try:
        reference = parse_image_reference(image)
    except ValueError as err:
        raise ValueError(f"couldn't parse image reference {image!r}: {err}") from err
    if not reference.tag and not reference.digest:
        # Appended, not normalised: "busybox" stays short so the runtime resolves it its own way.
        return f"{image}:{_DEFAULT_TAG}"
    return image


def default_pull_policy(image: str) -> str:
    """The API server's default: ``Always`` for ``:latest`` or untagged images."""
    try:
        reference = parse_image_reference(image)
    except ValueError:
        return PULL_IF_NOT_PRESENT
    if reference.tag == _DEFAULT_TAG or (not reference.tag and not reference.digest):
        return PULL_ALWAYS
    return PULL_IF_NOT_PRESENT


def should_pull_image(policy: str, present: bool) -> bool:
    if policy == PULL_NEVER:
        return False
    return policy == PULL_ALWAYS or not present


# --- pulling ------------------------------------------------------------------------------------

class PullThrottledError(Exception):
    def __init__(self) -> None:
        super().__init__("pull QPS exceeded")


class PullWithCredentialsError(Exception):
    """Every credential that matched the image was refused. The message is each distinct
    error, in the order tried, as upstream's error aggregate prints them."""

    def __init__(self, failures: list[str]) -> None:
        distinct = list(dict.fromkeys(failures))
        super().__init__(distinct[0] if len(distinct) == 1 else f"[{', '.join(distinct)}]")
        self.failures = failures


@dataclass(frozen=True)
class EnsuredImage:
    """An image ready for a container: the runtime's reference, and its status when the
    check that found it present already read it (None after a pull)."""

    ref: str
    status: api_pb2.Image | None = None


class ImageStatusLookahead:
    """Image statuses read while a new pod's sandbox is still being created.

    A new pod's first containers need their images' statuses the moment
    ``RunPodSandbox`` returns, and that call spends tens of milliseconds in the
    runtime. Reading the statuses during it takes a CRI round trip per image
    off the start of every new pod; nothing is decided early: the pull policy
    is applied where the status is used, in the order upstream applies it. A
    lookup that failed or was not made is read again there, so its error is
    reported as before. ``aclose`` ends the lookups nobody used.
    """

    def __init__(self, images: ImageService, specs: Iterable[str]) -> None:
        self._images = images
        self._lookups: dict[str, asyncio.Task[api_pb2.Image | None]] = {}
        for spec in specs:
            try:
                image = apply_default_tag(spec)
            except ValueError:
                continue  # reported where the container is started
            if image not in self._lookups:
                self._lookups[image] = asyncio.create_task(images.image_status(image))

    async def image_status(self, image: str) -> api_pb2.Image | None:
        lookup = self._lookups.get(image)
        if lookup is not None:
            try:
                return await lookup
            except Exception:
                del self._lookups[image]
        return await self._images.image_status(image)

    async def aclose(self) -> None:
        for lookup in self._lookups.values():
            lookup.cancel()
        await asyncio.gather(*self._lookups.values(), return_exceptions=True)
        self._lookups.clear()


PullKey = tuple[str, tuple[AuthConfig, ...]]


@dataclass
class _SharedPull:
    task: asyncio.Task[str]
    waiters: int = 0


class SharedPulls:
    """The pulls under way, each shared by every caller asking for the same image with
    the same credentials until it ends.

    The first caller's ``pull`` starts the pull as a task of its own, so a waiter
    that is cancelled (its pod deleted) does not end it for the others; the last
    waiter to leave cancels it, as a lone caller's cancellation always did. A
    pull that ended is forgotten: the next caller pulls again (the policy
    ``Always`` reaches the registry for every start not concurrent with another).
    The sandbox config sent is the first caller's; containerd 1.6 does not read
    it in a pull.
    """

    def __init__(self) -> None:
        self._pulls: dict[PullKey, _SharedPull] = {}

    async def pull(self, key: PullKey, start: Callable[[], Coroutine[Any, Any, str]]) -> str:
        """The result of the pull under way for ``key``, or of ``start()`` when there is none."""
        shared = self._pulls.get(key)
        if shared is None:
            shared = _SharedPull(asyncio.create_task(start(), name=f"image pull {key[0]}"))
            self._pulls[key] = shared
            shared.task.add_done_callback(lambda _: self._forget(key, shared))
        else:
            klog.v(3).info("Waiting for the pull of the image already under way", image=key[0])
        shared.waiters += 1
        try:
            return await asyncio.shield(shared.task)
        except asyncio.CancelledError:
            if shared.waiters == 1 and not shared.task.done():
                # Forgotten at once: a caller arriving now starts a pull of its own
                # instead of joining one that is being cancelled.
                self._forget(key, shared)
                shared.task.cancel()
            raise
        finally:
            shared.waiters -= 1

    def _forget(self, key: PullKey, shared: _SharedPull) -> None:
        if self._pulls.get(key) is shared:
            del self._pulls[key]


class ImageManager:
    """Ensures images for containers, with pull policy, back-off, throttling and credentials."""

    def __init__(self, image_service: ImageService, *, serialize_pulls: bool = True,
                 pull_qps: float = 5.0, pull_burst: int = 10, backoff: Backoff | None = None,
                 max_parallel_pulls: int | None = None,
                 recorder: EventRecorder | None = None,
                 credential_plugins: PluginKeyring | None = None) -> None:
        """``credential_plugins``: the providers of ``--image-credential-provider-config``,
        asked after the pod's pull secrets."""
        self._images = image_service
        self._credential_plugins = credential_plugins
        self._recorder: EventRecorder = recorder or LoggingRecorder()
        self.backoff = backoff or Backoff(IMAGE_BACKOFF_INITIAL, IMAGE_BACKOFF_MAX)
        self._limiter = TokenBucket(pull_qps, pull_burst)
        # Upstream's serial puller is one pull at a time; its parallel puller takes
        # maxParallelImagePulls tokens, or has no limit without it.
        limit = 1 if serialize_pulls else max_parallel_pulls
        self._pull_slots = asyncio.Semaphore(limit) if limit else None
        self._last_error: dict[str, str] = {}
        self._shared_pulls = SharedPulls()
        metrics.track_table("image_pulls", self.tracked_pods)

    async def ensure_image_exists(self, pod: V1Pod, container: V1Container,
                                  pull_secrets: Sequence[Any] = (),
                                  sandbox_config: api_pb2.PodSandboxConfig | None = None,
                                  lookahead: ImageStatusLookahead | None = None,
                                  ) -> EnsuredImage:
        """``container``'s image as the runtime knows it, pulled when the policy says so.

        ``lookahead`` holds statuses already read for this pod's start."""
        spec_image = container.image or ""
        meta = pod.metadata
        pod_ref = f"{meta.namespace}/{meta.name}" if meta else ""
        field_path = container_field_path(pod, container)

        def event(event_type: str, reason: str, message: str) -> None:
            self._recorder.event(pod, event_type, reason, message, field_path)

        try:
            image = apply_default_tag(spec_image)
        except ValueError as err:
            message = f"Failed to apply default image tag {spec_image!r}: {err}"
            klog.warning(message, pod=pod_ref, container=container.name)
            event(WARNING, EVENT_INSPECT_FAILED, message)
            raise ImagePullError(INVALID_IMAGE_NAME, message) from err

        try:
            status = await (lookahead or self._images).image_status(image)
        except Exception as err:
            message = f"Failed to inspect image {spec_image!r}: {err}"
            klog.warning(message, pod=pod_ref, container=container.name)
            event(WARNING, EVENT_INSPECT_FAILED, message)
            raise ImagePullError(IMAGE_INSPECT_ERROR, message) from err
        present = status is not None and bool(status.id)

        policy = container.image_pull_policy or default_pull_policy(spec_image)
        if not should_pull_image(policy, present):
            if status is not None and present:
                klog.v(2).info("Container image already present on machine", pod=pod_ref,
                               image=spec_image)
                event(NORMAL, EVENT_PULLED,
                      f'Container image "{spec_image}" already present on machine')
                return EnsuredImage(str(status.id), status)
            message = f'Container image "{spec_image}" is not present with pull policy of Never'
            klog.warning(message, pod=pod_ref, container=container.name)
            event(WARNING, ERR_IMAGE_NEVER_PULL, message)
            raise ImagePullError(ERR_IMAGE_NEVER_PULL, message)

        # The keyring is built before the back-off is consulted: a secret that does
        # not decode is reported on every attempt, and never starts a back-off.
        try:
            credentials = pull_credentials(image, pull_secrets)
            if self._credential_plugins is not None:
                credentials += await self._credential_plugins.lookup(repository_of(image))
        except PullSecretError as err:
            message = str(err)
            klog.warning("Unable to use image pull secrets", pod=pod_ref, image=spec_image,
                         err=message)
            raise ImagePullError(message, message) from err

        uid = (meta.uid if meta else None) or ""
        backoff_key = f"{uid}_{spec_image}"
        if self.backoff.is_in_backoff_since_update(backoff_key):
            message = f'Back-off pulling image "{spec_image}"'
            previous = self._last_error.get(backoff_key)
            if previous:
                message = f"{message}: {ERR_IMAGE_PULL}: {previous}"
            klog.info("Back-off pulling image", pod=pod_ref, image=spec_image)
            event(NORMAL, EVENT_BACK_OFF, f'Back-off pulling image "{spec_image}"')
            raise ImagePullError(IMAGE_PULL_BACKOFF, message)

        klog.info("Pulling image", pod=pod_ref, image=spec_image)
        event(NORMAL, EVENT_PULLING, f'Pulling image "{spec_image}"')
        started = time.monotonic()
        POD_STARTUP_TRACKER.record_image_started_pulling(uid)
        try:
            image_ref = await self._shared_pulls.pull(
                (image, tuple(credentials)),
                lambda: self._pull(image, credentials, sandbox_config))
            POD_STARTUP_TRACKER.record_image_finished_pulling(uid)
        except Exception as err:
            message = str(err) or type(err).__name__
            klog.warning("Failed to pull image", pod=pod_ref, image=spec_image, err=message)
            event(WARNING, EVENT_FAILED, f'Failed to pull image "{spec_image}": {message}')
            self.backoff.next(backoff_key)
            self._forget_quiet_pulls()
            self._last_error[backoff_key] = message
            raise ImagePullError(ERR_IMAGE_PULL, message) from err
        took = time.monotonic() - started
        klog.info("Successfully pulled image", pod=pod_ref, image=spec_image,
                  duration=f"{took:.3f}s")
        event(NORMAL, EVENT_PULLED,
              f'Successfully pulled image "{spec_image}" in {format_go_duration(round(took, 3))}')
        self._last_error.pop(backoff_key, None)
        self._forget_quiet_pulls()
        return EnsuredImage(image_ref)

    def tracked_pods(self) -> int:
        """Pods' images with a pull back-off held (the ``pykubelet_tracked_pods`` gauge):
        each goes twice the maximum delay after its last failure."""
        return self.backoff.size()

    def _forget_quiet_pulls(self) -> None:
        """Drop the back-off of pulls quiet for twice the maximum delay, and their last
        errors: a key names a pod's UID, and pods that were deleted while their pulls
        failed must not stay in memory for the kubelet's life."""
        self.backoff.gc()
        for key in [k for k in self._last_error if k not in self.backoff]:
            del self._last_error[key]

    def look_ahead(self, specs: Iterable[str]) -> ImageStatusLookahead:
        """Start reading the statuses of the images ``specs`` (as written in pod specs)."""
        return ImageStatusLookahead(self._images, specs)

    async def _pull(self, image: str, credentials: Sequence[AuthConfig],
                    sandbox_config: api_pb2.PodSandboxConfig | None) -> str:
        if not self._limiter.try_accept():
            raise PullThrottledError()
        if self._pull_slots is None:
            return await self._pull_with_credentials(image, credentials, sandbox_config)
        async with self._pull_slots:
            return await self._pull_with_credentials(image, credentials, sandbox_config)

    async def _pull_with_credentials(self, image: str, credentials: Sequence[AuthConfig],
                                     sandbox_config: api_pb2.PodSandboxConfig | None) -> str:
        if not credentials:
            klog.v(3).info("Pulling image without credentials", image=image)
            return await self._images.pull_image(image, None, sandbox_config)
        failures: list[str] = []
        for credential in credentials:
            try:
                return await self._images.pull_image(image, _cri_auth(credential),
                                                     sandbox_config)
            except Exception as err:
                failures.append(str(err) or type(err).__name__)
        raise PullWithCredentialsError(failures)


def repository_of(image: str) -> str:
    """What credentials are looked up by: the image's domain and path, without tag."""
    reference = parse_image_reference(image)
    return f"{reference.domain}/{reference.path}"


def pull_credentials(image: str, pull_secrets: Sequence[Any]) -> list[AuthConfig]:
    """The pull secrets' credentials for ``image`` (with its default tag), in order."""
    return make_docker_keyring(pull_secrets).lookup(repository_of(image))


def _cri_auth(credential: AuthConfig) -> api_pb2.AuthConfig:
    # server_address stays empty unless the source named one: containerd ignores
    # credentials whose server_address does not parse as a URL of the pulled host.
    return api_pb2.AuthConfig(username=credential.username, password=credential.password,
                              server_address=credential.server_address,
                              identity_token=credential.identity_token,
                              registry_token=credential.registry_token)


__all__ = [
    "ERR_IMAGE_NEVER_PULL",
    "ERR_IMAGE_PULL",
    "IMAGE_INSPECT_ERROR",
    "IMAGE_PULL_BACKOFF",
    "INVALID_IMAGE_NAME",
    "EnsuredImage",
    "ImageManager",
    "ImagePullError",
    "ImageReference",
    "ImageService",
    "SharedPulls",
    "apply_default_tag",
    "default_pull_policy",
    "parse_image_reference",
    "pull_credentials",
    "should_pull_image",
]
