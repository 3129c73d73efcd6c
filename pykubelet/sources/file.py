"""The static pod file source (upstream ``pkg/kubelet/config/file.go`` and ``file_linux.go``).

``staticPodPath`` names a directory of manifests or a single manifest file.
Operators (and kubeadm) drop control-plane pods there and expect the kubelet to
react at once, so changes are watched with inotify (``inotify_simple`` on the
event loop: each batch of events is handled when it arrives, with no polling
step and no wake-up while nothing changes); a full re-read every
``fileCheckFrequency`` catches whatever the watch missed (a path that appeared
later, a symlink whose target changed).

A manifest that reads well is applied at once, as upstream does on each
inotify event. One that does not may still be being written (``echo > pod.yaml``
truncates first): it is read again after ``UNREADABLE_SETTLE_SECONDS`` unless
more events come for it, and only then logged and dropped.

Every change sends one ``SET`` update carrying all currently valid pods of the
path. A manifest read again with the same bytes (the several events of one
save, each periodic re-read) is not decoded again, and events that changed no
pod send nothing: start-up latency and idle CPU both pay for decoding. A
manifest that cannot be used is logged with its file name and reason
and left out; the other pods keep flowing. Names starting with ``.`` (hidden
files, editor swap files such as ``.pod.yaml.swp``) are ignored, as are
subdirectories and anything that is not a regular file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat

from inotify_simple import INotify, flags
from kubernetes_asyncio.client.models import V1Pod

from pykubelet.api.kubetypes import FILE_SOURCE, PodOperation, PodUpdate
from pykubelet.api.yamlsafe import MAX_DOCUMENT_BYTES
from pykubelet.sources.static import ManifestError, decode_static_pod
from pykubelet.util import klog

# The watch is re-established after this delay when the path is missing or the watch failed,
# doubling per consecutive failure up to the maximum (upstream's retry back-off).
WATCH_RETRY_PERIOD = 1.0
WATCH_MAX_RETRY_PERIOD = 20.0
# How long an unreadable manifest gets to be completed by its writer before it counts.
UNREADABLE_SETTLE_SECONDS = 0.1
# What is watched in the directory: upstream's fsnotify ops (create, write, chmod, remove,
# rename), with close-after-write and the directory's own removal or move.
WATCH_FLAGS = (flags.CREATE | flags.MODIFY | flags.CLOSE_WRITE | flags.ATTRIB | flags.DELETE
               | flags.MOVED_FROM | flags.MOVED_TO | flags.DELETE_SELF | flags.MOVE_SELF)


def is_ignored_name(path: str) -> bool:
    """Hidden files and editor droppings (``.x.swp``) are never manifests."""
    return os.path.basename(path).startswith(".")


class StaticPodFileSource:
    """Watches a manifest directory (or file) and sends its pods as ``SET`` updates."""

    def __init__(self, path: str, node_name: str, updates: asyncio.Queue[PodUpdate],
                 check_frequency: float = 20.0) -> None:
        self._path = os.path.abspath(path.rstrip(os.sep) or os.sep)
        self._node_name = node_name
        self._updates = updates
        self._check_frequency = check_frequency
        self._pods_by_file: dict[str, V1Pod] = {}
        # The last decode of each manifest, by content digest: its pod, or why it failed. A
        # file read again unchanged (the write and close events of one save, every periodic
        # re-read) is not decoded again.
        self._decoded: dict[str, tuple[bytes, V1Pod | str]] = {}
        self._reading = asyncio.Lock()
        self._stop = asyncio.Event()

    @property
    def path(self) -> str:
        return self._path

    async def run(self) -> None:
        """Read the path now, then follow it until ``stop()``."""
        klog.info("Watching path", path=self._path)
        self._stop.clear()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._relist_periodically())
            group.create_task(self._watch_until_stopped())

    def stop(self) -> None:
        self._stop.set()

    # --- reading ---------------------------------------------------------------------------------
    # Reading and decoding run in a worker thread: a large or hostile manifest must not hold up
    # the event loop (probes, status, the sync loop). One read at a time, under the lock, so a
    # slow re-read cannot overwrite the result of a change seen after it started.

    async def list_config(self) -> None:
        """Re-read the whole path and send its pods (an empty ``SET`` if it does not exist)."""
        async with self._reading:
            pods = await asyncio.to_thread(self._read_path)
            if pods is not None:
                self._pods_by_file = pods
                self._send()

    def _read_path(self) -> dict[str, V1Pod] | None:
        """The path's pods by file; None when the path cannot be read (nothing is sent)."""
        try:
            info = os.stat(self._path)
        except FileNotFoundError:
            klog.error("Unable to read config path", "path does not exist, ignoring",
                       path=self._path)
            self._decoded.clear()
            return {}
        except OSError as err:
            klog.error("Unable to read config path", err, path=self._path)
            return None
        if stat.S_ISDIR(info.st_mode):
            pods: dict[str, V1Pod] = {}
            entries = self._directory_entries()
            for gone in set(self._decoded) - set(entries):
                del self._decoded[gone]
            for entry in entries:
                pod = self._read_entry(entry, log_skipped=True)
                if pod is not None:
                    pods[entry] = pod
            return pods
        if stat.S_ISREG(info.st_mode):
            pod = self._read_manifest(self._path)
            return {self._path: pod} if pod is not None else {}
        klog.error("Unable to read config path", "path is not a directory or file",
                   path=self._path)
        return None

    def _directory_entries(self) -> list[str]:
        try:
            names = os.listdir(self._path)
        except OSError as err:
            klog.error("Unable to read config path", err, path=self._path)
            return []
        return sorted(os.path.join(self._path, n) for n in names if not is_ignored_name(n))

    def _read_entry(self, path: str, *, log_skipped: bool,
                    log_errors: bool = True) -> V1Pod | None:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            # Should it come back, its pod is a new one, seen (and stamped) anew.
            self._decoded.pop(path, None)
            return None
        except OSError as err:
            klog.error("Can't get metadata for manifest file", err, path=path)
            return None
        if stat.S_ISREG(info.st_mode):
            return self._read_manifest(path, log_errors=log_errors)
        self._decoded.pop(path, None)
        if log_skipped:
            if stat.S_ISDIR(info.st_mode):
                klog.error("Not recursing into manifest path", path=path)
            else:
                klog.error("Manifest path is not a directory or file", path=path,
                           mode=stat.filemode(info.st_mode))
        return None

    def _read_manifest(self, path: str, *, log_errors: bool = True) -> V1Pod | None:
        """The manifest's pod, or None; ``log_errors`` False while its writer may not be done."""
        klog.v(3).info("Reading manifest file", path=path)
        try:
            with open(path, "rb") as manifest:
                # One byte over the limit is enough for the reader to refuse the file.
                data = manifest.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as err:
            reason = str(err)
            self._decoded.pop(path, None)
        else:
            digest = hashlib.sha256(data).digest()
            previous = self._decoded.get(path)
            if previous is not None and previous[0] == digest:
                if not isinstance(previous[1], str):
                    return previous[1]
                # Unchanged since it last failed: the same error, without decoding it again.
                reason = previous[1]
            else:
                try:
                    pod = decode_static_pod(data, node_name=self._node_name,
                                            source=FILE_SOURCE, location=path)
                except ManifestError as err:
                    reason = str(err)
                except Exception as err:  # a decoder bug must not stop the source
                    reason = f"unexpected decoding failure: {err!r}"
                else:
                    self._decoded[path] = (digest, pod)
                    return pod
                self._decoded[path] = (digest, reason)
        if log_errors:
            klog.error("Can't process manifest file", reason, path=path)
        return None

    def _send(self) -> None:
        pods = [self._pods_by_file[path] for path in sorted(self._pods_by_file)]
        self._updates.put_nowait(PodUpdate(pods=pods, op=PodOperation.SET, source=FILE_SOURCE))

    # --- the two loops ---------------------------------------------------------------------------

    async def _relist_periodically(self) -> None:
        while not self._stop.is_set():
            await self.list_config()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._check_frequency)

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _watch_until_stopped(self) -> None:
        retry = WATCH_RETRY_PERIOD
        # At start-up the periodic task has just read everything; any later (re)start of the
        # watch may have missed changes and reads again.
        relist = False
        while not self._stop.is_set():
            if not os.path.exists(self._path):
                # The periodic re-read reports the missing path; just look again soon.
                relist = True
                await self._sleep_unless_stopped(WATCH_RETRY_PERIOD)
                continue
            watched_dir = os.path.isdir(self._path)
            root = self._path if watched_dir else os.path.dirname(self._path)
            try:
                await self._watch(root, watched_dir, relist=relist)
                retry = WATCH_RETRY_PERIOD
            except Exception as err:  # the watch is best effort; the re-read still runs
                klog.error("Unable to watch config path", err, path=self._path)
                await self._sleep_unless_stopped(retry)
                retry = min(retry * 2, WATCH_MAX_RETRY_PERIOD)
            relist = True

    async def _watch(self, root: str, watched_dir: bool, *, relist: bool) -> None:
        """Follow inotify events under ``root`` until stopped or the watched path goes away."""
        # A single file is watched through its directory so that editors which replace the
        # file (write a new one, rename it over) do not silently end the watch.
        loop = asyncio.get_running_loop()
        with INotify() as inotify:
            inotify.add_watch(root, WATCH_FLAGS)
            readable = asyncio.Event()
            loop.add_reader(inotify.fileno(), readable.set)
            stopped = asyncio.ensure_future(self._stop.wait())
            try:
                if relist:
                    # Whatever happened while there was no watch is picked up now.
                    await self.list_config()
                # Unreadable manifests waiting for their writer to finish.
                unsettled: set[str] = set()
                while not self._stop.is_set():
                    woken = asyncio.ensure_future(readable.wait())
                    done, _ = await asyncio.wait(
                        {woken, stopped}, return_when=asyncio.FIRST_COMPLETED,
                        timeout=UNREADABLE_SETTLE_SECONDS if unsettled else None)
                    if woken not in done:
                        woken.cancel()
                        if stopped in done:
                            return
                        unsettled = await self._apply_changes(unsettled, final=True)
                        continue
                    readable.clear()
                    changed: set[str] = set()
                    for event in inotify.read(timeout=0):
                        if event.mask & flags.Q_OVERFLOW:
                            await self.list_config()  # events were lost: read everything
                        changed.add(os.path.join(root, event.name) if event.name else root)
                    if root in changed and not os.path.isdir(root):
                        self._forget_all()
                        return
                    if watched_dir:
                        relevant = {p for p in changed
                                    if os.path.dirname(p) == root and not is_ignored_name(p)}
                    else:
                        relevant = {p for p in changed if p == self._path}
                    if relevant:
                        unsettled = (unsettled - relevant) | await self._apply_changes(relevant)
                    if watched_dir != os.path.isdir(self._path):
                        return
            finally:
                stopped.cancel()
                loop.remove_reader(inotify.fileno())

    async def _apply_changes(self, paths: set[str], *, final: bool = False) -> set[str]:
        """Apply what ``paths`` now hold; the unreadable ones are returned, not applied, unless
        ``final`` (then they are logged and their pods dropped)."""
        async with self._reading:
            read = await asyncio.to_thread(
                lambda: {path: self._read_entry(path, log_skipped=False, log_errors=final)
                         for path in sorted(paths)})
            unsettled: set[str] = set()
            changed = False
            for path, pod in read.items():
                if pod is None and not final and os.path.isfile(path):
                    unsettled.add(path)
                    continue
                if pod is None:
                    changed |= self._pods_by_file.pop(path, None) is not None
                elif self._pods_by_file.get(path) is not pod:
                    # The same object means the same bytes read again: nothing new to send.
                    changed = True
                    self._pods_by_file[path] = pod
            if changed:
                self._send()
            return unsettled

    def _forget_all(self) -> None:
        if self._pods_by_file:
            self._pods_by_file = {}
            self._send()


__all__ = ["StaticPodFileSource", "is_ignored_name"]
