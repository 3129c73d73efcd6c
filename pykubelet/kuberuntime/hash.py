"""The spec hash of a container, recorded on it so later syncs can tell it is outdated.

When the kubelet creates a container it writes this hash into the container's
annotations; every later sync recomputes it from the pod spec and restarts
the container when the two differ. The hash must therefore be identical in
another process and after a kubelet restart, which rules out Python's
``hash()`` (salted per process). It is FNV-1a (32 bit) over the container's
canonical JSON, like upstream's pre-1.31 ``HashContainer``: unset fields are
left out of the JSON, so adding a field to the model does not change the hash
of containers that do not use it.
"""

from __future__ import annotations

import json

from kubernetes_asyncio.client import V1Container

from pykubelet.api import to_dict

_FNV32_OFFSET_BASIS = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    value = _FNV32_OFFSET_BASIS
    for byte in data:
        value ^= byte
        value = (value * _FNV32_PRIME) & 0xFFFFFFFF
    return value


def hash_container(container: V1Container) -> int:
    """A stable 32-bit hash of the whole container spec (image, command, env, ports...)."""
    # Keys are sorted so the hash depends on content only, not on model field order.
    canonical = json.dumps(to_dict(container), sort_keys=True, separators=(",", ":"))
    return fnv1a_32(canonical.encode())


__all__ = ["fnv1a_32", "hash_container"]
