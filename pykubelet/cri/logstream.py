"""Streaming a container's CRI log file to a client (upstream cri-client ``ReadLogs``).

``kubectl logs`` with ``--tail``, ``--limit-bytes``, ``--since`` /
``--since-time``, ``--timestamps`` and ``-f`` ends here: the kubelet reads the
file the runtime writes (``pykubelet.cri.logfile`` owns its format) and sends
each record's bytes to the stream it came from, keeping upstream's rules:

* ``tail`` counts records from the end of the file; without ``follow`` the
  read stops after that many records.
* ``since`` drops records older than the given moment; ``limit_bytes`` cuts
  the output (timestamp prefixes included) at that many bytes.
* ``timestamps`` prefixes each output line (not each partial record) with the
  record's time in fixed nine-digit form.
* ``follow`` keeps reading as the runtime appends, re-opens the file when the
  runtime re-creates it (log rotation), and ends once the container is no
  longer running and the file has been read to its end.

Memory stays bounded whatever the file holds: the file is read in blocks,
a record without a newline is cut at ``MAX_RECORD_BYTES``, and the writers
are awaited (so a slow client slows the reader down instead of filling a
buffer). File reads run in a worker thread so that a large file never holds
the event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Final, Protocol

from cri_api.v1 import api_pb2

from pykubelet.cri.logfile import (
    STDERR,
    STDOUT,
    Stream,
    format_timestamp_fixed,
    output_of_records,
    split_record,
    tail_start,
    timestamp_unix_nanos,
)
from pykubelet.util import klog

Writer = Callable[[bytes], Awaitable[None]]

READ_BLOCK: Final = 256 * 1024
"""Bytes read from the file at a time."""

MAX_RECORD_BYTES: Final = 1024 * 1024
"""A record longer than this without a newline is handled as if one followed."""

FORCE_CHECK_PERIOD: Final = 1.0
"""While following, the container's state is checked at least this often (upstream's 1s)."""

POLL_PERIOD: Final = 0.1
"""While following, how often the file is looked at for new records."""


class ContainerStatusSource(Protocol):
    async def container_status(self, container_id: str,
                               verbose: bool = False) -> api_pb2.ContainerStatusResponse: ...


@dataclass(frozen=True)
class LogOptions:
    """What part of the log a client wants (the CRI side of ``PodLogOptions``).

    ``tail`` and ``limit_bytes`` are -1 for "all"; ``since_nanos`` is a Unix
    time in nanoseconds, 0 for "from the start".
    """

    tail: int = -1
    limit_bytes: int = -1
    since_nanos: int = 0
    follow: bool = False
    timestamps: bool = False

    @classmethod
    def from_pod_log_options(cls, *, tail_lines: int | None = None,
                             limit_bytes: int | None = None, since_seconds: int | None = None,
                             since_time: datetime | None = None, follow: bool = False,
                             timestamps: bool = False, now: float | None = None) -> LogOptions:
        """Upstream ``NewLogOptions``: the later of ``sinceSeconds`` and ``sinceTime`` wins."""
        since = 0
        if since_seconds is not None:
            since = int(((now if now is not None else time.time()) - since_seconds) * 1e9)
        if since_time is not None:
            at = int(since_time.timestamp()) * 1_000_000_000 + since_time.microsecond * 1000
            since = max(since, at)
        return cls(tail=-1 if tail_lines is None else tail_lines,
                   limit_bytes=-1 if limit_bytes is None else limit_bytes,
                   since_nanos=since, follow=follow, timestamps=timestamps)


class _LimitReached(Exception):
    pass


Record = tuple[bytes, Stream, bool, bytes]  # timestamp, stream, partial, content


class _Output:
    """Turns records into output bytes, one write per stream run, applying the options."""

    def __init__(self, options: LogOptions, stdout: Writer | None,
                 stderr: Writer | None) -> None:
        self._options = options
        self._writers = {STDOUT: stdout, STDERR: stderr}
        self._remaining = options.limit_bytes if options.limit_bytes >= 0 else -1
        # Whether the next record starts a new line of output (for timestamps).
        self._at_line_start = True

    def _keep(self, record: Record) -> bool:
        if not self._options.since_nanos:
            return True
        try:
            return timestamp_unix_nanos(record[0].decode()) >= self._options.since_nanos
        except ValueError as err:
            klog.error("Failed when parsing line in log file", err)
            return False

    @property
    def bulk(self) -> bool:
        """Whether whole blocks can be copied (one writer, no per-record options)."""
        options = self._options
        stdout, stderr = self._writers[STDOUT], self._writers[STDERR]
        return (stdout is not None and stdout is stderr and not options.timestamps
                and not options.since_nanos)

    async def add_bulk(self, data: bytes) -> None:
        """Output already reassembled by ``output_of_records``."""
        writer = self._writers[STDOUT]
        assert writer is not None
        if data:
            # Partial records are joined within the block; the state carries over.
            self._at_line_start = data.endswith(b"\n")
            await self._write(writer, [data], len(data))

    async def add(self, records: list[Record]) -> None:
        """Write a block of records; ``_LimitReached`` once ``limit_bytes`` are out."""
        options = self._options
        pieces: list[bytes] = []
        writer: Writer | None = None
        size = 0
        for record in records:
            if options.since_nanos and not self._keep(record):
                continue
            timestamp, stream, partial, content = record
            target = self._writers[stream]
            if target is not writer:
                if pieces and writer is not None:
                    await self._write(writer, pieces, size)
                pieces, size, writer = [], 0, target
            if options.timestamps and self._at_line_start:
                prefix = format_timestamp_fixed(timestamp.decode()).encode() + b" "
                if target is not None:
                    pieces.append(prefix)
                    size += len(prefix)
            self._at_line_start = not partial or not content
            if target is None:
                continue
            pieces.append(content)
            size += len(content)
            if not partial:
                pieces.append(b"\n")
                size += 1
            if 0 <= self._remaining <= size:
                break
        if pieces and writer is not None:
            await self._write(writer, pieces, size)

    async def _write(self, writer: Writer, pieces: list[bytes], size: int) -> None:
        data = b"".join(pieces)
        if self._remaining >= 0:
            if size >= self._remaining:
                await writer(data[:self._remaining])
                self._remaining = 0
                raise _LimitReached
            self._remaining -= size
        await writer(data)


def _open(path: str) -> tuple[BinaryIO, int]:
    file = open(path, "rb")  # noqa: SIM115 - closed by read_logs
    return file, os.fstat(file.fileno()).st_ino


def _position_for_tail(file: BinaryIO, tail: int) -> None:
    file.seek(tail_start(file, tail) if tail >= 0 else 0)


async def _is_running(runtime: ContainerStatusSource, container_id: str) -> bool:
    try:
        status = (await runtime.container_status(container_id)).status
    except Exception as err:
        klog.v(4).info("Cannot get container status while following logs", err=err,
                       containerID=container_id)
        return False
    return bool(status.state == api_pb2.CONTAINER_RUNNING)


async def _wait_for_change(path: str, file: BinaryIO, inode: int) -> bool:
    """Wait until the file grows or is re-created, at most ``FORCE_CHECK_PERIOD``.

    Returns True when the runtime re-created the file (rotation).
    """
    deadline = time.monotonic() + FORCE_CHECK_PERIOD
    position = file.tell()
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL_PERIOD)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            continue
        if info.st_ino != inode:
            return True
        if info.st_size != position:
            return False
    return False


async def read_logs(path: str, container_id: str, options: LogOptions,
                    runtime: ContainerStatusSource | None, stdout: Writer | None,
                    stderr: Writer | None) -> None:
    """Send the records of the log file at ``path`` to ``stdout`` / ``stderr``.

    A writer of None drops that stream. ``runtime`` and ``container_id`` are
    needed only when following, to stop once the container has exited.
    Raises ``OSError`` when the file cannot be opened or read.
    """
    path = os.path.realpath(path)
    file, inode = await asyncio.to_thread(_open, path)
    try:
        await asyncio.to_thread(_position_for_tail, file, options.tail)
        await _stream(path, file, inode, container_id, options, runtime,
                      _Output(options, stdout, stderr))
    except _LimitReached:
        klog.v(2).info("Finished parsing log file, hit bytes limit", path=path,
                       limit=options.limit_bytes)
    finally:
        file.close()


def _records(lines: list[bytes], path: str) -> list[Record]:
    records: list[Record] = []
    for raw in lines:
        if not raw:
            continue
        record = split_record(raw)
        if record is None:
            klog.error("Failed when parsing line in log file",
                       f"malformed CRI log line {raw[:80]!r}", path=path)
            continue
        records.append(record)
    return records


async def _stream(path: str, file: BinaryIO, inode: int, container_id: str,
                  options: LogOptions, runtime: ContainerStatusSource | None,
                  output: _Output) -> None:
    limited = options.tail >= 0 and not options.follow
    remaining_records = options.tail
    pending = b""  # an incomplete last line, completed by a later read
    last_running_check = 0.0
    try:
        while True:
            if limited and remaining_records <= 0:
                return
            block = await asyncio.to_thread(file.read, READ_BLOCK)
            if block:
                data = pending + block
                cut = data.rfind(b"\n") + 1
                if cut == 0 and len(data) > MAX_RECORD_BYTES:
                    cut = len(data)  # a runaway record is handled as if it ended here
                whole, pending = data[:cut], data[cut:]
                if output.bulk and not limited and whole.endswith(b"\n"):
                    reassembled = output_of_records(whole)
                    if reassembled is not None:
                        await output.add_bulk(reassembled)
                        continue
                lines = whole.split(b"\n")
                if lines and not lines[-1]:
                    lines.pop()
                if limited:
                    lines = lines[:remaining_records]
                records = _records(lines, path)
                if limited:
                    # Malformed lines count among the last lines, as upstream's tail.
                    remaining_records -= len(lines)
                await output.add(records)
                continue

            # End of the file as it is now.
            if not options.follow:
                if pending.strip():
                    klog.info("Incomplete line in log file", path=path)
                    await output.add(_records([pending], path))
                return
            now = time.monotonic()
            if now - last_running_check >= FORCE_CHECK_PERIOD:
                last_running_check = now
                if runtime is None or not await _is_running(runtime, container_id):
                    # Read once more: the container may have written just before exiting.
                    rest = await asyncio.to_thread(file.read)
                    if rest:
                        lines = (pending + rest).split(b"\n")
                        pending = lines.pop()
                        await output.add(_records(lines, path))
                    return
            if await _wait_for_change(path, file, inode):
                try:
                    new_file, new_inode = await asyncio.to_thread(_open, path)
                except FileNotFoundError:
                    continue
                file.close()
                file, inode = new_file, new_inode
                pending = b""
    finally:
        file.close()


__all__ = ["LogOptions", "Writer", "read_logs"]
