"""The kubelet's ``--lock-file``: one kubelet per node.

Two kubelets driving the same runtime would fight over every container, so a
node agent takes an exclusive ``flock`` on a well-known file before touching
anything. A second instance is refused with the holder's pid, unless it was
started with ``--exit-on-lock-contention``. That flag is upstream's hand-over
protocol: the newcomer waits for the lock, while the running kubelet watches
the file with inotify and exits as soon as another process opens it.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import os
import struct

from pykubelet.util import klog

_IN_OPEN = 0x00000020
_IN_DELETE_SELF = 0x00000400
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000


class LockContentionError(Exception):
    """Another process holds the kubelet lock."""


class LockFile:
    """An exclusive advisory lock held for the life of the process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def _holder(self) -> str:
        try:
            with open(self.path, encoding="utf-8") as handle:
                return handle.read().strip() or "unknown"
        except OSError:
            return "unknown"

    def try_acquire(self) -> None:
        """Take the lock now or raise ``LockContentionError`` naming the holder."""
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise LockContentionError(
                    f"lock file {self.path} is held by another kubelet (pid {self._holder()}); "
                    "stop it first, or start this one with --exit-on-lock-contention "
                    "to take over when it exits"
                ) from None
            raise
        self._fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    async def acquire_waiting(self, poll_interval: float = 0.2) -> None:
        """Wait until the current holder lets go (the hand-over case)."""
        announced = False
        while True:
            try:
                self.try_acquire()
                return
            except LockContentionError:
                if not announced:
                    klog.info("Waiting for the kubelet lock", path=self.path,
                              holder=self._holder())
                    announced = True
                await asyncio.sleep(poll_interval)

    async def wait_for_contention(self) -> None:
        """Return once another process opens (or deletes) the lock file."""
        libc = ctypes.CDLL(None, use_errno=True)
        inotify_fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if inotify_fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        try:
            if libc.inotify_add_watch(inotify_fd, self.path.encode(),
                                      _IN_OPEN | _IN_DELETE_SELF) < 0:
                raise OSError(ctypes.get_errno(), f"cannot watch {self.path}")
            loop = asyncio.get_running_loop()
            readable = asyncio.Event()
            loop.add_reader(inotify_fd, readable.set)
            try:
                while True:
                    await readable.wait()
                    readable.clear()
                    try:
                        data = os.read(inotify_fd, 4096)
                    except BlockingIOError:
                        continue
                    # Each event is a struct inotify_event; only the mask matters here.
                    _wd, mask, _cookie, _length = struct.unpack_from("iIII", data)
                    if mask & (_IN_OPEN | _IN_DELETE_SELF):
                        klog.info("Lock contention detected, another kubelet wants the lock",
                                  path=self.path)
                        return
            finally:
                loop.remove_reader(inotify_fd)
        finally:
            os.close(inotify_fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
