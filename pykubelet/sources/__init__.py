"""Pod sources and the merger that turns them into pod updates (upstream ``pkg/kubelet/config``).

The kubelet learns which pods to run from up to three sources: a directory of
static pod manifests (``file``), a manifest URL (``http``) and the API server
(``api``). Each source sends ``SET`` updates (``pykubelet.api.kubetypes.PodUpdate``)
with everything it currently holds into its own channel of a ``PodConfig``; the
merger compares them with what it knew and emits incremental ``ADD``/``UPDATE``/
``REMOVE``/``DELETE``/``RECONCILE`` updates, in order, for the sync loop.

- ``static``: static pod identity (UID, name suffix, annotations) and manifest decoding.
- ``file``: ``StaticPodFileSource`` (inotify plus periodic re-read).
- ``http``: ``StaticPodURLSource`` (periodic GET).
- ``podconfig``: ``PodConfig``, the merger.
"""

from pykubelet.api.kubetypes import (
    ALL_SOURCES,
    API_SOURCE,
    FILE_SOURCE,
    HTTP_SOURCE,
    PodOperation,
    PodUpdate,
)
from pykubelet.sources.file import StaticPodFileSource
from pykubelet.sources.http import StaticPodURLSource
from pykubelet.sources.podconfig import PodConfig

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
