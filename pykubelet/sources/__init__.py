"""Pod sources and the merger that turns them into pod updates (upstream ``pkg/kubelet/config``).

The kubelet learns which pods to run from up to three sources: a directory of
static pod manifests (``file``), a manifest URL (``http``) and the API server
(``api``). Each source sends ``SET`` updates with everything it currently
holds into its own channel of a ``PodConfig``; the merger compares them with
what it knew and emits incremental ``ADD``/``UPDATE``/``REMOVE``/``DELETE``/
``RECONCILE`` updates, in order, for the sync loop.

- ``podupdate``: ``PodUpdate``, ``PodOperation``, source names, annotation keys, helpers.
- ``static``: static pod identity (UID, name suffix, annotations) and manifest decoding.
- ``file``: ``StaticPodFileSource`` (inotify plus periodic re-read).
- ``http``: ``StaticPodURLSource`` (periodic GET).
- ``podconfig``: ``PodConfig``, the merger.
"""

from pykubelet.sources.file import StaticPodFileSource
from pykubelet.sources.http import StaticPodURLSource
from pykubelet.sources.podconfig import PodConfig
from pykubelet.sources.podupdate import (
    ALL_SOURCES,
    API_SOURCE,
    FILE_SOURCE,
    HTTP_SOURCE,
    PodOperation,
    PodUpdate,
)

__all__ = [
    "ALL_SOURCES",
    "API_SOURCE",
    "FILE_SOURCE",
    "HTTP_SOURCE",
    "PodConfig",
    "PodOperation",
    "PodUpdate",
    "StaticPodFileSource",
    "StaticPodURLSource",
]
