"""Pod volumes before containers start (upstream ``pkg/kubelet/volumemanager``), gate only.

A container must never start without the volumes its pod declares: an app
that expects its service-account token, config or data directory and finds
an empty path misbehaves in ways far worse than not starting. Until volume
plugins exist, the volume manager's one job is that guarantee: a pod with a
volume pykubelet cannot mount yet waits, in ``ContainerCreating``, with a
``FailedMount`` event naming the volume and its type, and is retried like
any other failed sync (the API server injects a projected service-account
token volume into every pod unless ``automountServiceAccountToken: false``).
"""

from __future__ import annotations

from kubernetes_asyncio.client import V1Pod, V1Volume

from pykubelet.events import WARNING, EventRecorder
from pykubelet.util import klog

FAILED_MOUNT = "FailedMount"

# Volume sources pykubelet can mount (the volumes issue fills this in).
SUPPORTED_VOLUME_TYPES: frozenset[str] = frozenset()


class VolumeMountError(Exception):
    """The pod's volumes are not (all) mounted; its containers must not start."""


def volume_type(volume: V1Volume) -> str:
    """The API name of the volume's source (``projected``, ``emptyDir``...)."""
    attribute_map: dict[str, str] = getattr(V1Volume, "attribute_map")  # noqa: B009
    for attribute, wire_name in attribute_map.items():
        if attribute != "name" and getattr(volume, attribute) is not None:
            return str(wire_name)
    return "emptyDir"  # no source given: the API's default


class VolumeManager:
    def __init__(self, recorder: EventRecorder,
                 supported: frozenset[str] = SUPPORTED_VOLUME_TYPES) -> None:
        self._recorder = recorder
        self._supported = supported

    def unmountable_volumes(self, pod: V1Pod) -> list[tuple[str, str]]:
        """(name, type) of each volume of ``pod`` that cannot be mounted."""
        return [(volume.name, kind) for volume in pod.spec.volumes or []
                if (kind := volume_type(volume)) not in self._supported]

    async def wait_for_attach_and_mount(self, pod: V1Pod) -> None:
        """Return once every volume of ``pod`` is mounted; raise ``VolumeMountError`` if not."""
        missing = self.unmountable_volumes(pod)
        if not missing:
            return
        names = " ".join(name for name, _ in missing)
        reasons = "; ".join(f'volume "{name}" has type {kind}, which pykubelet cannot mount yet'
                            for name, kind in missing)
        message = (f"Unable to attach or mount volumes: unmounted volumes=[{names}], "
                   f"unattached volumes=[{names}]: {reasons}")
        self._recorder.event(pod, WARNING, FAILED_MOUNT, message)
        klog.error("Unable to attach or mount volumes for pod; skipping pod", message,
                   pod=f"{pod.metadata.namespace}/{pod.metadata.name}")
        raise VolumeMountError(message)


__all__ = ["FAILED_MOUNT", "VolumeManager", "VolumeMountError", "volume_type"]
