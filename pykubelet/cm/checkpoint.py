"""The resource managers' checkpoint files (upstream ``pkg/kubelet/checkpointmanager``).

The CPU manager's ``cpu_manager_state`` and the device manager's
``kubelet_internal_checkpoint`` are read back after a crash or a power loss, and
a torn one stops the kubelet (CPU) or loses which device a running container
holds (devices). Both go through here:

- ``read_checkpoint``: the file's bytes, or None when there is none;
- ``write_checkpoint``: replace the file in one step, flushed to disk, so a
  crash leaves the old checkpoint or the new one, never part of either;
- ``go_spew_checksum``: upstream's checksum, FNV-32a over the go-spew ``%#v``
  rendering of the checkpoint's Go struct.

Each checkpoint keeps its own format and its own rule for what a checksum that
does not match means; rendering its struct as go-spew does is the format's job.
"""

from __future__ import annotations

from pykubelet.util.atomic_file import write_file_atomically

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def go_spew_checksum(rendered: str) -> int:
    """FNV-32a of ``rendered``, the go-spew rendering of a checkpoint (upstream
    ``checkpointmanager/checksum``)."""
    value = _FNV32_OFFSET
    for byte in rendered.encode():
        value = ((value ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return value


def read_checkpoint(path: str) -> bytes | None:
    """The checkpoint's bytes; None when the file does not exist. Raises ``OSError``."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_checkpoint(path: str, blob: bytes) -> None:
    """Replace the checkpoint atomically and durably. Raises ``OSError``; then the old
    file is as it was and no temporary file is left."""
    write_file_atomically(path, blob, mode=0o644)


__all__ = ["go_spew_checksum", "read_checkpoint", "write_checkpoint"]
