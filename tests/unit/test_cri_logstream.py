"""Streaming CRI log files as ``kubectl logs`` asks (tail, limit, since, timestamps, follow)."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import pytest
from cri_api.v1 import api_pb2

from pykubelet.cri import logstream
from pykubelet.cri.logstream import LogOptions, read_logs
from tests.unit.waiting import settle, until

RECORDS = [
    "2024-05-01T10:00:00.000000001Z stdout F first",
    "2024-05-01T10:00:01.5Z stderr F oops",
    "2024-05-01T10:00:02.100000000Z stdout P hal",
    "2024-05-01T10:00:02.200000000Z stdout F f line",
    "2024-05-01T10:00:03+02:00 stdout F zoned",
    "not a cri record",
    "2024-05-01T10:00:04.000000000Z stdout F last",
]


class Collected:
    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.both = bytearray()

    async def stdout(self, data: bytes) -> None:
        self.out += data
        self.both += data

    async def stderr(self, data: bytes) -> None:
        self.err += data
        self.both += data


class Runtime:
    def __init__(self) -> None:
        self.running = True

    async def container_status(self, container_id: str,
                               verbose: bool = False) -> api_pb2.ContainerStatusResponse:
        state = api_pb2.CONTAINER_RUNNING if self.running else api_pb2.CONTAINER_EXITED
        return api_pb2.ContainerStatusResponse(
            status=api_pb2.ContainerStatus(id=container_id, state=state))


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "0.log"
    path.write_text("\n".join(RECORDS) + "\n")
    return path


async def read(path: Path, options: LogOptions, runtime: Runtime | None = None) -> Collected:
    collected = Collected()
    await read_logs(str(path), "cid", options, runtime, collected.stdout, collected.stderr)
    return collected


async def test_everything_with_partials_joined_and_bad_records_skipped(log_file: Path) -> None:
    got = await read(log_file, LogOptions())
    assert bytes(got.out) == b"first\nhalf line\nzoned\nlast\n"
    assert bytes(got.err) == b"oops\n"
    assert bytes(got.both) == b"first\noops\nhalf line\nzoned\nlast\n"


async def test_tail_counts_records_from_the_end(log_file: Path) -> None:
    # As upstream, a malformed line still counts among the last lines of the file.
    assert bytes((await read(log_file, LogOptions(tail=3))).both) == b"zoned\nlast\n"
    assert bytes((await read(log_file, LogOptions(tail=2))).both) == b"last\n"
    assert bytes((await read(log_file, LogOptions(tail=0))).both) == b""


async def test_limit_bytes_cuts_the_output(log_file: Path) -> None:
    assert bytes((await read(log_file, LogOptions(limit_bytes=9))).both) == b"first\noop"


async def test_since_drops_older_records(log_file: Path) -> None:
    since = datetime(2024, 5, 1, 10, 0, 2, tzinfo=UTC)
    options = LogOptions.from_pod_log_options(since_time=since)
    # "zoned" is 08:00:03 UTC, before the since time.
    assert bytes((await read(log_file, options)).both) == b"half line\nlast\n"


def test_since_seconds_and_since_time_take_the_later() -> None:
    late = datetime(2030, 1, 1, tzinfo=UTC)
    options = LogOptions.from_pod_log_options(since_seconds=10, since_time=late, now=1000.0)
    assert options.since_nanos == int(late.timestamp()) * 1_000_000_000
    assert LogOptions.from_pod_log_options(since_seconds=10, now=1000.0).since_nanos == \
        990 * 1_000_000_000


async def test_timestamps_prefix_each_output_line_in_fixed_form(log_file: Path) -> None:
    got = await read(log_file, LogOptions(timestamps=True))
    assert bytes(got.out).splitlines() == [
        b"2024-05-01T10:00:00.000000001Z first",
        b"2024-05-01T10:00:02.100000000Z half line",
        b"2024-05-01T10:00:03.000000000+02:00 zoned",
        b"2024-05-01T10:00:04.000000000Z last",
    ]
    assert bytes(got.err) == b"2024-05-01T10:00:01.500000000Z oops\n"


async def test_a_dropped_stream_is_not_sent(log_file: Path) -> None:
    collected = Collected()
    await read_logs(str(log_file), "cid", LogOptions(), None, None, collected.stderr)
    assert bytes(collected.both) == b"oops\n"


@pytest.fixture
def fast_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logstream, "POLL_PERIOD", 0.01)
    monkeypatch.setattr(logstream, "FORCE_CHECK_PERIOD", 0.1)


@pytest.mark.usefixtures("fast_follow")
async def test_follow_streams_appended_lines_and_ends_when_the_container_exits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Counts the follower's waits at the end of the file: one begun after a
    # write means the follower has read what was written.
    waits = 0
    wait_for_change = logstream._wait_for_change

    async def counted(path: str, file: BinaryIO, inode: int) -> bool:
        nonlocal waits
        waits += 1
        return await wait_for_change(path, file, inode)

    monkeypatch.setattr(logstream, "_wait_for_change", counted)
    path = tmp_path / "0.log"
    path.write_text("2024-05-01T10:00:00Z stdout F one\n")
    runtime, collected = Runtime(), Collected()
    task = asyncio.create_task(read_logs(str(path), "cid", LogOptions(follow=True), runtime,
                                         collected.stdout, collected.stderr))
    await until(lambda: bytes(collected.out) == b"one\n")
    with open(path, "a") as file:
        file.write("2024-05-01T10:00:01Z stdout P t\n2024-05-01T10:00:01Z stdout F w")
        file.flush()
        before = waits
        # The second wait begun after the write follows a read of it (the first may not).
        await until(lambda: waits >= before + 2)
        # The runtime is still writing the second record: it is held back.
        assert bytes(collected.out) == b"one\nt"
        file.write("o\n")
    await until(lambda: bytes(collected.out) == b"one\ntwo\n")
    assert not task.done()
    with open(path, "a") as file:
        file.write("2024-05-01T10:00:02Z stdout F bye\n")
    runtime.running = False
    await asyncio.wait_for(task, 5)
    assert bytes(collected.out) == b"one\ntwo\nbye\n"


@pytest.mark.usefixtures("fast_follow")
async def test_follow_moves_to_a_recreated_file(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text("2024-05-01T10:00:00Z stdout F before\n")
    runtime, collected = Runtime(), Collected()
    task = asyncio.create_task(read_logs(str(path), "cid", LogOptions(follow=True), runtime,
                                         collected.stdout, None))
    await until(lambda: bytes(collected.out) == b"before\n")
    os.rename(path, tmp_path / "0.log.20240501")
    path.write_text("2024-05-01T10:00:05Z stdout F after rotation\n")
    await until(lambda: bytes(collected.out) == b"before\nafter rotation\n")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_slow_reader_bounds_what_is_read_ahead(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    record = b"2024-05-01T10:00:00Z stdout F " + b"x" * 1000 + b"\n"
    path.write_bytes(record * 3000)  # about 3 MB
    release = asyncio.Event()
    largest = 0

    async def stuck(data: bytes) -> None:
        nonlocal largest
        largest = max(largest, len(data))
        await release.wait()

    task = asyncio.create_task(read_logs(str(path), "cid", LogOptions(), None, stuck, None))
    await until(lambda: largest > 0)
    await settle()
    assert not task.done()
    # One batch is held while the writer waits: the file is not slurped.
    assert largest <= logstream.READ_BLOCK + len(record) * 2
    release.set()
    await asyncio.wait_for(task, 10)


async def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await read(tmp_path / "nope.log", LogOptions())


async def test_one_writer_for_both_streams_gives_the_same_bytes(log_file: Path,
                                                                tmp_path: Path) -> None:
    """The bulk path (kubectl logs without options) matches the per-record one exactly."""
    clean = tmp_path / "clean.log"
    clean.write_text("\n".join(r for r in RECORDS if not r.startswith("not")) + "\n")
    for path in (log_file, clean):
        both = bytearray()

        async def write(data: bytes, sink: bytearray = both) -> None:
            sink += data

        await read_logs(str(path), "cid", LogOptions(), None, write, write)
        assert bytes(both) == b"first\noops\nhalf line\nzoned\nlast\n"
        both.clear()
        await read_logs(str(path), "cid", LogOptions(limit_bytes=12), None, write, write)
        assert bytes(both) == b"first\noops\nh"
