"""Reading container log files written in the CRI log format.

The runtime, not the kubelet, writes each container's stdout and stderr to
the file named by ``ContainerConfig.log_path``, one record per line::

    2016-10-06T00:17:09.669794202Z stdout F log content
    2016-10-06T00:17:09.669794203Z stderr P first half of a long line

``F`` marks a full line (a newline followed it in the output), ``P`` a
partial one: the runtime split a long line, or the process wrote without a
newline, and the next record continues it. The kubelet reads these files for
``FallbackToLogsOnError`` termination messages and for ``kubectl logs``, so
this module owns the format: parsing one record, and reading the tail of a
file back into the bytes the container printed.

Reading is plain blocking file I/O on small amounts of data; call it through
``asyncio.to_thread`` from the event loop when the file may be large.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import BinaryIO, Literal

from pykubelet.util import klog

Stream = Literal["stdout", "stderr"]

STDOUT: Stream = "stdout"
STDERR: Stream = "stderr"

TAG_PARTIAL = "P"
TAG_FULL = "F"

MAX_TERMINATION_MESSAGE_LOG_LINES = 80
"""Lines of log read for a ``FallbackToLogsOnError`` message (upstream's limit)."""

MAX_TERMINATION_MESSAGE_LOG_BYTES = 2048
"""Bytes kept of those lines, from the end (upstream's limit)."""

_DELIMITER = b" "
_TAG_SEPARATOR = ":"
_READ_BLOCK = 4096

# RFC 3339 with an optional fraction of any precision, as Go's RFC3339Nano
# parser accepts; the runtime writes nanoseconds and a "Z".
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})\Z")


@dataclass(frozen=True)
class LogLine:
    """One record of a CRI log file.

    ``timestamp`` is kept as written (RFC 3339 with nanoseconds) because
    ``datetime`` holds only microseconds; ``time`` and ``unix_nanos`` give it
    parsed. ``content`` never includes the record's newline: a full record
    stands for ``content + b"\\n"`` of output, a partial one for ``content``.
    """

    timestamp: str
    stream: Stream
    partial: bool
    content: bytes

    @property
    def output(self) -> bytes:
        """The bytes the container wrote, as they reach ``kubectl logs``."""
        return self.content if self.partial else self.content + b"\n"

    @property
    def time(self) -> datetime:
        """The timestamp as an aware datetime (truncated to microseconds)."""
        return _parse_timestamp(self.timestamp)[0]

    @property
    def unix_nanos(self) -> int:
        return timestamp_unix_nanos(self.timestamp)


def _parse_timestamp(text: str) -> tuple[datetime, int]:
    """The datetime of an RFC 3339 timestamp and its sub-second part in nanoseconds."""
    match = _TIMESTAMP.match(text)
    if match is None:
        raise ValueError(f"unexpected timestamp format {text!r}: expected RFC 3339, "
                         f"e.g. 2016-10-06T00:17:09.669794202Z")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    if zone == "Z":
        tz = UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        moment = datetime(year, month, day, hour, minute, second, nanos // 1000, tzinfo=tz)
    except ValueError as err:
        raise ValueError(f"unexpected timestamp {text!r}: {err}") from None
    return moment, nanos


def format_timestamp_fixed(text: str) -> str:
    """A record's timestamp in the fixed-width form ``kubectl logs --timestamps`` shows.

    Nine fraction digits always, and ``Z`` for a zero offset, as Go's
    ``RFC3339NanoFixed`` layout prints a parsed time.
    """
    match = _TIMESTAMP.match(text)
    if match is None:
        raise ValueError(f"unexpected timestamp format {text!r}")
    fraction = (match.group(7) or "").ljust(9, "0")
    zone = match.group(8)
    if zone in ("+00:00", "-00:00"):
        zone = "Z"
    return f"{text[:19]}.{fraction}{zone}"


# The timestamp's shape only; the bulk reader checks this per record and leaves
# the (costly) calendar parsing to the callers that need the time.
_TIMESTAMP_SHAPE = re.compile(
    rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})\Z")


def split_record(line: bytes) -> tuple[bytes, Stream, bool, bytes] | None:
    """(timestamp, stream, partial, content) of one record without its newline; None if malformed.

    The fast path of ``parse_log_line`` for streaming whole files: the same
    fields and checks except the calendar validity of the timestamp.
    """
    parts = line.split(_DELIMITER, 3)
    if len(parts) != 4:
        return None
    timestamp, stream, tags, content = parts
    if stream == b"stdout":
        name: Stream = STDOUT
    elif stream == b"stderr":
        name = STDERR
    else:
        return None
    if _TIMESTAMP_SHAPE.match(timestamp) is None:
        return None
    partial = tags[:1] == b"P" and (len(tags) == 1 or tags[1:2] == b":")
    return timestamp, name, partial, content


_TS = rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})"
# One record, whole: a full one keeps its newline (group 1), a partial one drops it (group 2).
_RECORD = re.compile(rb"^" + _TS + rb" (?:stdout|stderr) (?:F(?::[^ \n]*)? ([^\n]*\n)"
                     rb"|P(?::[^ \n]*)? ([^\n]*)\n)", re.MULTILINE)


def output_of_records(block: bytes) -> bytes | None:
    """The output of newline-terminated records, both streams interleaved; None if any is odd.

    The bulk path of ``kubectl logs``: one regular-expression pass over a whole
    block instead of a Python step per record. None (some record is malformed,
    or not newline-terminated) sends the caller to the per-record path, which
    reports the bad lines.
    """
    output, count = _RECORD.subn(rb"\1\2", block)
    return output if count == block.count(b"\n") else None


def timestamp_unix_nanos(text: str) -> int:
    """A record timestamp as Unix nanoseconds; ValueError when it is not a valid time."""
    moment, nanos = _parse_timestamp(text)
    return int(moment.replace(microsecond=0).timestamp()) * 1_000_000_000 + nanos


def parse_log_line(line: bytes) -> LogLine:
    """Parse one record (with or without its trailing newline); ValueError if malformed."""
    if line.endswith(b"\n"):
        line = line[:-1]
    timestamp, sep, rest = line.partition(_DELIMITER)
    if not sep:
        raise ValueError(f"malformed CRI log line {line[:80]!r}: timestamp is not found")
    timestamp_text = timestamp.decode("ascii", errors="replace")
    _parse_timestamp(timestamp_text)
    stream, sep, rest = rest.partition(_DELIMITER)
    if not sep:
        raise ValueError(f"malformed CRI log line {line[:80]!r}: stream type is not found")
    if stream not in (b"stdout", b"stderr"):
        raise ValueError(f"malformed CRI log line {line[:80]!r}: unexpected stream type "
                         f"{stream.decode(errors='replace')!r}")
    tags, sep, content = rest.partition(_DELIMITER)
    if not sep:
        raise ValueError(f"malformed CRI log line {line[:80]!r}: log tag is not found")
    # Only the first tag has a meaning today; later ones are for future use.
    first_tag = tags.decode("ascii", errors="replace").split(_TAG_SEPARATOR)[0]
    stream_name: Stream = STDOUT if stream == b"stdout" else STDERR
    return LogLine(timestamp=timestamp_text, stream=stream_name,
                   partial=first_tag == TAG_PARTIAL, content=content)


def tail_start(file: BinaryIO, lines: int) -> int:
    """Offset where the last ``lines`` newline-terminated lines of ``file`` start.

    An unterminated last line (being written right now) is not counted but is
    still read after the offset, as the Go kubelet's tail does. The start is
    just after the ``lines + 1``-th newline from the end.
    """
    end = file.seek(0, os.SEEK_END)
    if lines < 0:
        return 0
    position = end
    newlines_wanted = lines + 1
    while position > 0:
        block_start = max(0, position - _READ_BLOCK)
        file.seek(block_start)
        block = file.read(position - block_start)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            newlines_wanted -= 1
            if newlines_wanted == 0:
                return block_start + index + 1
        position = block_start
    return 0


def read_log_lines(path: str | os.PathLike[str], tail_lines: int | None = None) -> list[LogLine]:
    """The records of a CRI log file, the last ``tail_lines`` of them when given.

    Malformed records are skipped with an error log, as the Go kubelet does,
    so one bad line does not hide the rest of a container's output.
    """
    records: list[LogLine] = []
    with open(path, "rb") as file:
        start = 0 if tail_lines is None else tail_start(file, tail_lines)
        file.seek(start)
        for raw in file:
            if not raw.strip():
                continue
            try:
                records.append(parse_log_line(raw))
            except ValueError as err:
                klog.error("Failed when parsing line in log file", err, path=os.fspath(path))
    return records


def read_log_tail(path: str | os.PathLike[str],
                  max_lines: int | None = MAX_TERMINATION_MESSAGE_LOG_LINES,
                  max_bytes: int | None = MAX_TERMINATION_MESSAGE_LOG_BYTES,
                  streams: tuple[Stream, ...] = (STDOUT, STDERR)) -> bytes:
    """The end of a container's output, reassembled from the records of its log file.

    Takes the last ``max_lines`` records of the chosen streams' interleaved
    output, joins partial records back into lines, and keeps the last
    ``max_bytes`` of the result. The defaults are those the kubelet uses for
    ``FallbackToLogsOnError`` termination messages; None lifts a limit.
    Raises ``OSError`` when the file cannot be read.
    """
    output = b"".join(record.output for record in read_log_lines(path, max_lines)
                      if record.stream in streams)
    if max_bytes is not None and len(output) > max_bytes:
        output = output[len(output) - max_bytes:] if max_bytes > 0 else b""
    return output


__all__ = [
    "MAX_TERMINATION_MESSAGE_LOG_BYTES",
    "MAX_TERMINATION_MESSAGE_LOG_LINES",
    "STDERR",
    "STDOUT",
    "TAG_FULL",
    "TAG_PARTIAL",
    "LogLine",
    "Stream",
    "format_timestamp_fixed",
    "output_of_records",
    "parse_log_line",
    "read_log_lines",
    "read_log_tail",
    "split_record",
    "tail_start",
    "timestamp_unix_nanos",
]
