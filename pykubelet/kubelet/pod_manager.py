"""The desired state: every pod the sources want on this node (upstream ``pod.Manager``).

Pod sources describe what should run; this is where their merged view lives,
indexed by UID and by full name. Everything that needs "the pod spec for UID
x" (PLEG event handling, housekeeping, the ``/pods`` endpoint) asks here.

Mirror pods (the API server's copies of static pods, from the ``api``
source) are kept apart: they are never run, only matched to their static pod
by full name. The status manager uses that match to write a static pod's
status onto its mirror pod (``get_uid_translations``), and the kubelet to
recreate a mirror pod that is missing or outdated and to delete one whose
static pod is gone (``get_orphaned_mirror_pod_names``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kubernetes_asyncio.client import V1Pod

from pykubelet.api import pod_uid
from pykubelet.api.kubetypes import (
    CONFIG_HASH_ANNOTATION_KEY,
    CONFIG_MIRROR_ANNOTATION_KEY,
    is_mirror_pod,
    is_static_pod,
    pod_full_name,
)


def _annotation(pod: V1Pod, key: str) -> str | None:
    annotations = (pod.metadata.annotations if pod.metadata is not None else None) or {}
    value = annotations.get(key)
    return str(value) if value is not None else None


def is_mirror_pod_of(mirror_pod: V1Pod, pod: V1Pod) -> bool:
    """``mirror_pod`` reflects this very version of the static ``pod`` (same name and hash)."""
    mirror_hash = _annotation(mirror_pod, CONFIG_MIRROR_ANNOTATION_KEY)
    if mirror_hash is None:
        return False
    return (mirror_hash == _annotation(pod, CONFIG_HASH_ANNOTATION_KEY)
            and pod_full_name(mirror_pod) == pod_full_name(pod))


class PodReferences(Protocol):
    """Keeps what pods reference (the ConfigMap and Secret managers' ``register_pod``)."""

    def register_pod(self, pod: V1Pod) -> None: ...

    def unregister_pod(self, pod_or_uid: V1Pod | str) -> None: ...


class PodManager:
    def __init__(self, references: Sequence[PodReferences] = ()) -> None:
        # As upstream's pod manager: every regular or static pod it holds is
        # registered with the ConfigMap and Secret managers, mirror pods are not.
        self._references = list(references)
        self._by_uid: dict[str, V1Pod] = {}
        self._by_full_name: dict[str, V1Pod] = {}
        self._mirror_by_uid: dict[str, V1Pod] = {}
        self._mirror_by_full_name: dict[str, V1Pod] = {}
        # Mirror pod UID -> the UID of the static pod it mirrors.
        self._translation: dict[str, str] = {}

    def add_pod(self, pod: V1Pod) -> None:
        """Record a new or changed pod (regular, static or mirror)."""
        full_name = pod_full_name(pod)
        uid = pod_uid(pod)
        if is_mirror_pod(pod):
            previous = self._mirror_by_full_name.get(full_name)
            if previous is not None and pod_uid(previous) != uid:
                self._mirror_by_uid.pop(pod_uid(previous), None)
                self._translation.pop(pod_uid(previous), None)
            self._mirror_by_uid[uid] = pod
            self._mirror_by_full_name[full_name] = pod
            static = self._by_full_name.get(full_name)
            if static is not None:
                self._translation[uid] = pod_uid(static)
            return
        self._by_uid[uid] = pod
        self._by_full_name[full_name] = pod
        for references in self._references:
            references.register_pod(pod)
        mirror = self._mirror_by_full_name.get(full_name)
        if mirror is not None:
            self._translation[pod_uid(mirror)] = uid

    update_pod = add_pod

    def remove_pod(self, pod: V1Pod) -> None:
        full_name = pod_full_name(pod)
        uid = pod_uid(pod)
        if is_mirror_pod(pod):
            if self._mirror_by_uid.pop(uid, None) is not None:
                self._translation.pop(uid, None)
                current = self._mirror_by_full_name.get(full_name)
                if current is not None and pod_uid(current) == uid:
                    del self._mirror_by_full_name[full_name]
            return
        if self._by_uid.pop(uid, None) is not None:
            for references in self._references:
                references.unregister_pod(uid)
            current = self._by_full_name.get(full_name)
            if current is not None and pod_uid(current) == uid:
                del self._by_full_name[full_name]
            for mirror_uid in [m for m, static in self._translation.items() if static == uid]:
                del self._translation[mirror_uid]

    # -- regular and static pods ---------------------------------------------------

    def get_pod_by_uid(self, uid: str) -> V1Pod | None:
        return self._by_uid.get(uid)

    def get_pod_by_full_name(self, full_name: str) -> V1Pod | None:
        return self._by_full_name.get(full_name)

    def get_pods(self) -> list[V1Pod]:
        """Every pod to run (mirror pods are not pods to run)."""
        return list(self._by_uid.values())

    def uids(self) -> set[str]:
        return set(self._by_uid)

    # -- mirror pods ------------------------------------------------------------

    def get_mirror_pod_by_pod(self, pod: V1Pod) -> V1Pod | None:
        return self._mirror_by_full_name.get(pod_full_name(pod))

    def get_pod_by_mirror_pod(self, mirror_pod: V1Pod) -> V1Pod | None:
        return self._by_full_name.get(pod_full_name(mirror_pod))

    def get_pod_and_mirror_pod(self, pod: V1Pod) -> tuple[V1Pod | None, V1Pod | None, bool]:
        """(the pod to run, its mirror pod, whether ``pod`` itself was the mirror)."""
        if is_mirror_pod(pod):
            return self.get_pod_by_mirror_pod(pod), pod, True
        return pod, self.get_mirror_pod_by_pod(pod), False

    def get_mirror_pods(self) -> list[V1Pod]:
        return list(self._mirror_by_uid.values())

    def get_orphaned_mirror_pod_names(self) -> list[str]:
        """Full names of mirror pods whose static pod no source wants any more."""
        return [name for name in self._mirror_by_full_name if name not in self._by_full_name]

    def translate_pod_uid(self, uid: str) -> str:
        return self._translation.get(uid, uid)

    def get_uid_translations(self) -> tuple[dict[str, str], dict[str, str]]:
        pod_to_mirror: dict[str, str] = {}
        for uid, pod in self._by_uid.items():
            if is_static_pod(pod):
                mirror = self._mirror_by_full_name.get(pod_full_name(pod))
                pod_to_mirror[uid] = pod_uid(mirror) if mirror is not None else ""
        return pod_to_mirror, dict(self._translation)
