"""The resource managers' checkpoint files (upstream ``pkg/kubelet/checkpointmanager``).

The CPU manager's ``cpu_manager_state`` and the device manager's
``kubelet_internal_checkpoint`` are read back after a crash or a power loss, and
a torn one stops the kubelet (CPU) or loses which device a running container
holds (devices). Both go through here:

- ``read_checkpoint``: the file's bytes, or None when there is none;
- ``write_checkpoint``: replace the file in one step, flushed to disk, so a
  crash leaves the old checkpoint or the new one, never part of either;
- the checksum is upstream's, FNV-32a over the go-spew ``%#v`` rendering of
  the checkpoint's Go struct (``pykubelet.util.gospew``).

Each checkpoint keeps its own format and its own rule for what a checksum that
does not match means; rendering its struct as go-spew does is the format's job.
"""

from __future__ import annotations

from pykubelet.util.atomic_file import write_file_atomically


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


__all__ = ["read_checkpoint", "write_checkpoint"]
