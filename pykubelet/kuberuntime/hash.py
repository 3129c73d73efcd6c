"""The spec hash of a container, recorded on it so later syncs can tell it is outdated.

When the kubelet creates a container it writes this hash into the container's
``io.kubernetes.container.hash`` annotation; every later sync recomputes it
from the pod spec and restarts the container when the two differ. A node can
change hands between kubelets in place (the Go kubelet stopped, pykubelet
started on the same root directory and containerd, and back: issue 38), so
the hash must be the one the Go kubelet computes, or every adopted container
is restarted. Upstream changed it over time:

- **v1.20 to v1.30** (``HashContainer``): FNV-32a over go-spew's ``%#v`` of
  the ``json.Marshal`` bytes of the whole ``v1.Container``, so the hashed text
  is spew's rendering of a byte slice, ``([]uint8)[123 34 110 ...]``. The JSON
  is Go's (``pykubelet.api.gojson``: struct field order, ``omitempty``,
  canonical quantities), of the container as the kubelet holds it: served by
  the API server, or for a static pod decoded and defaulted by the kubelet.
- **v1.31 on, v1.35 included**: the same, over the JSON of only
  ``{"image": ..., "name": ...}``; every other change to a container is
  either forbidden by the API server or applied in place (resources).

pykubelet writes the 1.20 hash (``hash_container``) on the containers it
creates, so that the Go kubelet 1.20 against a 1.20 control plane, this
project's reference, adopts them; and it treats a container as unchanged when
its recorded hash is either the 1.20 hash or the v1.35 one
(``container_hash_matches``), so that it adopts the containers of either Go
kubelet. The hash must be identical in another process and after a restart,
which Python's ``hash()`` (salted per process) is not.
"""

from __future__ import annotations

import functools

from kubernetes_asyncio.client import V1Container

from pykubelet.api import to_dict
from pykubelet.api.gojson import go_json_string, render_go_struct
from pykubelet.util.gospew import go_spew_checksum


def spew_bytes(data: bytes) -> str:
    """go-spew's ``%#v`` of a ``[]byte`` (upstream ``DeepHashObject`` of the JSON)."""
    return "([]uint8)[" + " ".join(str(byte) for byte in data) + "]"


def container_json(container: V1Container) -> str:
    """The container as the Go kubelet 1.20 ``json.Marshal``s its ``v1.Container``."""
    return render_go_struct(to_dict(container), "Container")


# Every sync hashes every container, mostly unchanged ones; the checksum over the spew text
# (four times the JSON's length) costs several times the JSON, so it is remembered.
@functools.lru_cache(maxsize=1024)
def _hash_json(text: str) -> int:
    return go_spew_checksum(spew_bytes(text.encode()))


def hash_container(container: V1Container) -> int:
    """The Go kubelet 1.20's 32-bit hash of the whole container spec (image, command, env,
    ports, probes...): the one written on the containers pykubelet creates."""
    return _hash_json(container_json(container))


def hash_container_name_image(container: V1Container) -> int:
    """The hash of v1.31 and later (v1.35 included): of the container's name and image only."""
    picked = (f'{{"image":{go_json_string(container.image or "")},'
              f'"name":{go_json_string(container.name or "")}}}')
    return _hash_json(picked)


def container_hash_matches(container: V1Container, recorded: int) -> bool:
    """Whether a running container whose annotation holds ``recorded`` still runs this spec:
    the 1.20 hash of it, or the v1.35 one (a container a newer Go kubelet created)."""
    return (recorded == hash_container(container)
            or recorded == hash_container_name_image(container))


__all__ = [
    "container_hash_matches",
    "container_json",
    "hash_container",
    "hash_container_name_image",
    "spew_bytes",
]
