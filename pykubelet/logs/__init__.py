"""Container log rotation (upstream ``pkg/kubelet/logs/container_log_manager.go``).

The runtime writes each container's output to one file under the pod's log
directory and never rotates it. Every ``containerLogMonitorInterval`` the
manager looks at the running containers' log files; one that has reached
``containerLogMaxSize`` is rotated by ``containerLogMaxWorkers`` workers:

1. leftovers of an interrupted rotation are removed (``*.tmp``, and plain
   files whose ``.gz`` exists);
2. the oldest rotated files go so that, with the current file and the one
   about to be rotated, at most ``containerLogMaxFiles`` remain;
3. rotated files not yet compressed are gzipped (``<log>.<time>.gz``);
4. the current file is renamed to ``<log>.<YYYYMMDD-hhmmss>`` and the
   runtime is told through CRI ``ReopenContainerLog`` to start a new one (if
   it cannot, the rename is undone so no output is lost).

The newest rotated file stays uncompressed, as upstream, because the runtime
may still be finishing a write to it. ``remove_container_logs`` removes a
container's files when the runtime manager removes the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import gzip
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from cri_api.v1 import api_pb2

from pykubelet.cri import RuntimeService
from pykubelet.cri.errors import is_not_found
from pykubelet.util import klog

COMPRESS_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"
TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"


@dataclass(frozen=True)
class LogRotatePolicy:
    max_size: int = 10 * 2**20
    max_files: int = 5


class ContainerLogManager:
    def __init__(self, runtime_service: RuntimeService, policy: LogRotatePolicy,
                 workers: int = 1, monitor_interval: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        if policy.max_files <= 1:
            raise ValueError(f"invalid MaxFiles {policy.max_files}, must be > 1")
        self.runtime_service = runtime_service
        self.policy = policy
        self.workers = max(1, workers)
        self.monitor_interval = monitor_interval
        self.clock = clock

    async def rotate_logs(self) -> int:
        """One pass over the running containers; returns how many logs were rotated."""
        running = await self.runtime_service.list_containers(api_pb2.ContainerFilter(
            state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING)))
        queue: asyncio.Queue[str] = asyncio.Queue()
        for container in running:
            queue.put_nowait(container.id)
        rotated = 0

        async def worker() -> None:
            nonlocal rotated
            while not queue.empty():
                container_id = queue.get_nowait()
                try:
                    if await self._process(container_id):
                        rotated += 1
                except Exception as err:
                    klog.error("Failed to rotate log for container", err,
                               containerID=container_id)

        await asyncio.gather(*(worker() for _ in range(min(self.workers, len(running)) or 1)))
        return rotated

    async def _process(self, container_id: str) -> bool:
        try:
            response = await self.runtime_service.container_status(container_id)
        except Exception as err:
            if is_not_found(err):
                return False  # gone since the listing
            raise
        status = response.status
        path = status.log_path
        if not path or status.state != api_pb2.CONTAINER_RUNNING:
            return False
        try:
            size = await asyncio.to_thread(lambda: os.stat(path).st_size)
        except FileNotFoundError:
            # A rotation whose reopen failed: ask again for the file to be created.
            klog.error("Container log doesn't exist, reopen container log file",
                       containerID=container_id, path=path)
            await self.runtime_service.reopen_container_log(container_id)
            return False
        if size < self.policy.max_size:
            return False
        await self._rotate(container_id, path)
        return True

    async def _rotate(self, container_id: str, path: str) -> None:
        await asyncio.to_thread(self._prepare_rotated, path)
        rotated = f"{path}.{time.strftime(TIMESTAMP_FORMAT, time.gmtime(self.clock()))}"
        await asyncio.to_thread(os.rename, path, rotated)
        try:
            await self.runtime_service.reopen_container_log(container_id)
        except Exception as err:
            # Without a reopened file the runtime would keep writing into the
            # renamed one; undo so nothing is lost, and try again next pass.
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.rename, rotated, path)
            raise RuntimeError(f"failed to reopen container log {container_id!r}: {err}") from err
        klog.v(4).info("Rotated container log", containerID=container_id, path=path,
                       rotated=rotated)

    def _prepare_rotated(self, path: str) -> None:
        logs = self._cleanup_unused(sorted(glob.glob(glob.escape(path) + ".*")))
        keep = self.policy.max_files - 2
        if len(logs) > keep:
            for old in logs[:len(logs) - keep]:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(old)
            logs = logs[len(logs) - keep:]
        for log in logs:
            if not log.endswith(COMPRESS_SUFFIX):
                compress(log)

    @staticmethod
    def _cleanup_unused(logs: list[str]) -> list[str]:
        kept = []
        names = set(logs)
        for log in logs:
            if log.endswith(TMP_SUFFIX) or (not log.endswith(COMPRESS_SUFFIX)
                                            and log + COMPRESS_SUFFIX in names):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(log)
                continue
            kept.append(log)
        return kept

    async def run(self) -> None:
        """Rotate every ``monitor_interval`` (a supervised task)."""
        while True:
            await asyncio.sleep(self.monitor_interval)
            try:
                await self.rotate_logs()
            except Exception as err:
                klog.error("Container log rotation failed", err)


def remove_container_logs(log_path: str) -> None:
    """A removed container's log and every rotated file of it (upstream ``Clean``); blocking."""
    if not log_path:
        return
    for path in glob.glob(glob.escape(log_path) + "*"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def compress(path: str) -> None:
    """gzip ``path`` to ``path.gz`` through a temporary file, then drop the original."""
    tmp = path + COMPRESS_SUFFIX + TMP_SUFFIX
    with open(path, "rb") as source, gzip.open(tmp, "wb") as target:
        shutil.copyfileobj(source, target)
    os.rename(tmp, path + COMPRESS_SUFFIX)
    os.remove(path)


__all__ = ["ContainerLogManager", "LogRotatePolicy", "compress", "remove_container_logs"]
