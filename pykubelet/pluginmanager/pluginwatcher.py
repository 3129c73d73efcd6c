"""The registration directory and its sockets (upstream ``pluginmanager/pluginwatcher``).

Upstream keeps its desired state by fsnotify events (create adds a socket, remove
drops it). Here the directory itself is the desired state: ``scan`` reads it whole
(sockets in it and in its subdirectories, names starting with ``.`` ignored, as
upstream ignores them) on every pass of the plugin manager, and inotify
(``inotify_simple``, already the static pod source's watcher) only wakes the manager
as soon as something changes instead of at its next period. A lost or overflowed
event therefore costs at most one period, never a plugin; and the directory holds
a handful of sockets, so reading it each second costs next to nothing.
"""

from __future__ import annotations

import asyncio
import os
import stat

from inotify_simple import INotify, flags

from pykubelet.pluginmanager.cache import SocketId
from pykubelet.util import klog

# What wakes the manager: anything created, removed or moved in a watched directory.
WATCH_FLAGS = (flags.CREATE | flags.DELETE | flags.MOVED_FROM | flags.MOVED_TO
               | flags.DELETE_SELF | flags.MOVE_SELF)


def scan(directory: str) -> tuple[dict[str, SocketId], list[str]]:
    """The plugin sockets under ``directory`` by path, and every directory walked (itself
    first). Entries that vanish while it reads are skipped."""
    sockets: dict[str, SocketId] = {}
    directories: list[str] = []
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            entries = list(os.scandir(current))
        except OSError as err:
            if current == directory:
                raise
            klog.error("Error accessing path", err, path=current)
            continue
        directories.append(current)
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
            elif stat.S_ISSOCK(info.st_mode):
                sockets[entry.path] = SocketId(info.st_dev, info.st_ino, info.st_ctime_ns)
    return sockets, directories


class DirectoryWaker:
    """inotify on the registration directory and its subdirectories; ``wait`` returns at
    the first change or after its timeout. Closed with ``close``."""

    def __init__(self) -> None:
        self._inotify = INotify()
        self._watched: set[str] = set()
        self._readable = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._inotify.fileno(), self._readable.set)

    def watch(self, directories: list[str]) -> None:
        """Watch these directories too (from ``scan``); a directory already watched is left
        as it is (inotify gives it the same watch again)."""
        for directory in directories:
            if directory in self._watched:
                continue
            try:
                self._inotify.add_watch(directory, WATCH_FLAGS)
            except OSError as err:
                klog.error("Failed to watch plugin directory", err, path=directory)
                continue
            self._watched.add(directory)

    async def wait(self, timeout: float, wake: asyncio.Event) -> None:
        """Until a change under a watched directory, ``wake`` set, or ``timeout`` seconds."""
        waiters = {asyncio.ensure_future(self._readable.wait()),
                   asyncio.ensure_future(wake.wait())}
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self._readable.is_set():
            self._readable.clear()
            for event in self._inotify.read(timeout=0):
                if event.mask & (flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF):
                    # The watch is gone with its directory: a new one there is watched anew.
                    self._watched.clear()

    def close(self) -> None:
        self._loop.remove_reader(self._inotify.fileno())
        self._inotify.close()


__all__ = ["WATCH_FLAGS", "DirectoryWaker", "scan"]
