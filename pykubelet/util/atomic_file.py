"""Replacing a file so that a crash leaves either the old content or the new, never part.

The kubelet's state files (the CPU and device checkpoints, kubeconfigs, serving
certificates, a pod's ``/etc/hosts``) are read again after a crash or a power
loss. A file written in place can be left torn, and a torn CPU or device
checkpoint stops the kubelet until the node is drained. So every such write
goes through here: a uniquely named temporary file in the same directory,
flushed to disk, renamed over the target, and the directory flushed too so the
rename itself survives a power loss (upstream's checkpoint manager and
``atomic_writer`` do the same).
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def write_file_atomically(path: str, data: bytes, *, mode: int = 0o644,
                          make_parents: bool = False) -> None:
    """Replace ``path`` with ``data`` (permission bits ``mode``) in one step.

    ``make_parents`` creates missing parent directories (0755) first. Raises
    ``OSError``; on failure the temporary file is removed and ``path`` is as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if make_parents:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    # The rename is durable only once the directory entry is; some file systems
    # refuse to open or sync a directory, and then the rename is as durable as it gets.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["write_file_atomically"]
