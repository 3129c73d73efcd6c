"""Upstream's hash of a Go value: FNV-32a over its go-spew ``%#v`` rendering.

Upstream hashes Go values by printing them with go-spew (``hashutil.DeepHashObject``)
and feeding the text to FNV-32a: the checkpoints' checksums (``checkpointmanager/checksum``)
and the container spec hash (``HashContainer``) both. Reading and writing files that
upstream kubelets also read and write needs the same numbers, so the callers render
the value as go-spew would and this module hashes the text.
"""

from __future__ import annotations

from typing import Final

_FNV32_OFFSET: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193


def go_spew_checksum(rendered: str) -> int:
    """FNV-32a of ``rendered``, a go-spew rendering of a Go value."""
    value = _FNV32_OFFSET
    for byte in rendered.encode():
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


__all__ = ["go_spew_checksum"]
